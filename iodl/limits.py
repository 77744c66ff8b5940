"""Bounds on every number a user can give, and what a run will need before it starts.

Each bound is far above any real deep-learning workload (MLPerf's largest datasets have a few
million files; its largest sample is dlrm's 671 MB record) and far below what would make iodl
allocate without limit, overflow a C type or wait for centuries. A value outside its bound is
refused in one line before any rank reads or writes anything (workloads/README.md lists them).
"""
from __future__ import annotations

import math
import os

from .errors import UsageError

MAX_FILES = 100_000_000            # shards per copy
MAX_COPIES = 100_000
MAX_SHARDS = 100_000_000           # files x copies: the names a rank may have to address
MAX_SAMPLES_PER_FILE = 100_000_000
MAX_SAMPLE_SIZE = 1 << 40          # 1 TiB per sample
MAX_SHARD_SIZE = 1 << 44           # 16 TiB per shard (a file on ext4 stops at 16 TiB)
MAX_DATASET_BYTES = 1 << 60        # 1 EiB of all copies
MAX_BATCH = 1 << 20                # samples per step
MAX_EPOCHS = 1_000_000
MAX_STEPS = 1 << 40
MAX_SECONDS = 30 * 86400.0         # --duration, --ramp, compute time per step: 30 days
MAX_PREFETCH = 1024                # batches read ahead
MAX_DEPTH = 65536                  # requests in flight (the C engine's bound)
MAX_BLOCK_SIZE = 1 << 30           # bytes per request (the C engine's bound)
MAX_THREADS = 1024                 # asyncio reader tasks
MAX_SEED = (1 << 63) - 1
MAX_DELAY_US = 60e6                # null engine: a minute per request
DIRECT_ALIGN = 4096                # O_DIRECT request sizes (the engine's ALIGN)
FD_HEADROOM = 64                   # descriptors kept for MPI, logs and the interpreter


def check_range(what: str, value, lo, hi, integer: bool = False):
    """value if lo <= value <= hi (and an integer when asked), else a one-line UsageError."""
    kind = "an integer" if integer else "a number"
    span = f"from {lo:,} to {hi:,}" if integer else f"from {lo:g} to {hi:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise UsageError(f"{what}: {value!r}: must be {kind} {span}")
    if isinstance(value, float) and not math.isfinite(value) or not lo <= value <= hi:
        raise UsageError(f"{what}: {value!r}: must be {kind} {span}")
    return value


def dataset_bytes(spec, files: int | None = None, copies: int | None = None) -> int:
    """Expected payload bytes a root will hold (all copies; framing and headers not counted)."""
    files = spec.files if files is None else files
    copies = spec.copies if copies is None else copies
    return files * spec.samples_per_file * spec.sample_size * copies


def check_dataset(spec, label: str = "workload") -> None:
    """Cross-key bounds of a dataset spec (each key alone is bounded where it is parsed)."""
    shards = spec.files * spec.copies
    if shards > MAX_SHARDS:
        raise UsageError(f"{label}: [dataset] files x copies = {shards:,}: at most {MAX_SHARDS:,} shards")
    shard = spec.samples_per_file * (spec.sample_size + 2 * spec.sample_size_stdev)
    if shard > MAX_SHARD_SIZE:
        raise UsageError(f"{label}: [dataset] samples_per_file x sample_size = {shard:,} bytes per shard: "
                         f"at most {MAX_SHARD_SIZE:,} (16 TiB)")
    samples = spec.files * spec.samples_per_file
    # generate and read hold a table of every sample's size (8 bytes) and extent (16 bytes)
    check_memory(f"{label}: [dataset] a table of files x samples_per_file = {samples:,} samples", 24 * samples)
    total = dataset_bytes(spec)
    if total > MAX_DATASET_BYTES:
        raise UsageError(f"{label}: [dataset] the dataset would hold {total:,} bytes: at most {MAX_DATASET_BYTES:,} (1 EiB)")


def local_ranks() -> int:
    """Ranks sharing this host, as the launcher says (1 when not launched by MPI)."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return 1


def mem_available() -> int:
    """MemAvailable of this host in bytes (0 if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def check_memory(what: str, per_rank: int) -> None:
    """Refuse a run whose ranks would together need more than this host's available memory."""
    avail, ranks = mem_available(), local_ranks()
    if avail and per_rank * ranks > avail:
        raise UsageError(f"{what} needs {per_rank:,} bytes per rank x {ranks} rank(s) on this host = "
                         f"{per_rank * ranks:,}, but only {avail:,} bytes are available")


def buffers_bytes(iodepth: int, block_size: int) -> int:
    """The engine's request buffers: iodepth slots of block_size rounded up to 4096."""
    return iodepth * (-(-block_size // DIRECT_ALIGN) * DIRECT_ALIGN)


def step_plan_bytes(batch_size: int, sample_size: int, block_size: int, samples_per_file: int) -> int:
    """Memory of one step's plan: a row (24 bytes) per request of batch_size samples, plus the
    per-shard layouts a step spans."""
    rows = batch_size * max(1, -(-sample_size // block_size)) + batch_size // max(1, samples_per_file) + 1
    return 24 * rows + 16 * batch_size


def shards_per_step(batch_size: int, samples_per_file: int) -> int:
    """Shards one step's batch can span (each an open file while it is read)."""
    return -(-batch_size // samples_per_file) + 1


def check_open_files(what: str, needed: int) -> None:
    """Refuse when a step would hold more files open than RLIMIT_NOFILE leaves."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and needed + FD_HEADROOM > soft:
        raise UsageError(f"{what} keeps up to {needed:,} files open, but this process may open {soft:,} "
                         f"(ulimit -n; {FD_HEADROOM} are kept for MPI and the interpreter)")
