"""Bounds on every number a user can give, and what a run will need before it starts.

Each bound is far above any real deep-learning workload (MLPerf's largest datasets have a few
million files; its largest sample is dlrm's 671 MB record) and far below what would make iodl
allocate without limit, overflow a C type or wait for centuries. A value outside its bound is
refused in one line before any rank reads or writes anything (workloads/README.md lists them).
"""
from __future__ import annotations

import math
import os
import resource

import numpy as np

from . import _native, plan
from .errors import UsageError
from .units import parse_size

CACHED_SHARDS = 64   # shard layouts a step rank keeps: an epoch revisits shards, 72 ranks share the RAM

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
MAX_SHUFFLE_SIZE = 1 << 24         # samples in the shuffle buffer (their ids: 24 bytes each)
MAX_DEPTH = 65536                  # requests in flight (the C engine's bound)
MAX_BLOCK_SIZE = 1 << 30           # bytes per request (the C engine's bound)
MAX_THREADS = 1024                 # asyncio reader tasks
MAX_SEED = (1 << 63) - 1
MAX_DELAY_US = 60e6                # null engine: a minute per request
MAX_PLAN_ROWS = 1 << 24            # requests in one plan (one engine call): 537 MB of rows, ~3 s to build
MAX_RANKS = 65536                  # sweep --ranks: each point is one `mpiexec -n K`
FD_HEADROOM = 64                   # descriptors kept for MPI, logs and the interpreter

# Memory per plan row (a request: file, offset, length, op = 32 bytes, iodl.plan.PLAN_DTYPE) at the
# peak, measured as RSS above the same run with 1 MiB requests (tests/acceptance/test_bad_input.py):
PLAN_ROW = 32
GROUP_ROW_PEAK = 64    # storage-only/validate: the row, shard_plan's int64 temporaries, the engine's copy
STEP_ROW_PEAK = 104    # a step: the shards' rows renumbered, concatenated, and the engine's copy (measured 95)


def cli_float(text: str):
    """argparse type of a numeric option: the float typed, else the text itself, so that the
    command's own check refuses it in one line (argparse's refusal prints its usage block)."""
    try:
        return float(text)
    except ValueError:
        return text


def cli_int(text: str):
    """argparse type of an integer option: the int typed, else as cli_float (1.5 is refused as 1.5)."""
    try:
        return int(text)
    except ValueError:
        return cli_float(text)


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
    if spec.format != "parquet":   # parquet: at generate (check_sample_table); its reads go by row group
        check_sample_table(spec, label)


def check_sample_table(spec, label: str = "workload") -> None:
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


def aligned(size: int) -> int:
    """size rounded up to the engines' O_DIRECT alignment (_native.ALIGN)."""
    return -(-size // _native.ALIGN) * _native.ALIGN


def buffers_bytes(iodepth: int, block_size: int) -> int:
    """The engine's request buffers: iodepth slots of block_size, each aligned (native/core.c)."""
    return iodepth * aligned(block_size)


def check_block_size(what: str, block_size, direct: bool) -> int:
    """A request size within bounds; with O_DIRECT a positive multiple of the alignment (_native.ALIGN)."""
    check_range(what, block_size, 1, MAX_BLOCK_SIZE, integer=True)
    if direct and block_size % _native.ALIGN:
        raise UsageError(f"{what}: {block_size}: with --direct a request must be a positive multiple of "
                         f"{_native.ALIGN} bytes (O_DIRECT alignment)")
    return block_size


# `iodl read`'s numeric options: flag, attribute, lowest, highest, integer
READ_OPTIONS = (
    ("--iodepth", "iodepth", 1, MAX_DEPTH, True),
    ("--duration", "duration", 1e-3, MAX_SECONDS, False),
    ("--ramp", "ramp", 0.0, MAX_SECONDS, False),
    ("--steps", "steps", 1, MAX_STEPS, True),
    ("--epochs", "epochs", 1, MAX_EPOCHS, True),
    ("--batch-size", "batch_size", 1, MAX_BATCH, True),
    ("--compute-time", "compute_time", 0.0, MAX_SECONDS, False),
    ("--prefetch", "prefetch", 0, MAX_PREFETCH, True),
    ("--read-threads", "read_threads", 0, MAX_THREADS, True),
    ("--seed", "seed", 0, MAX_SEED, True),
    ("--delay-us", "delay_us", 0.0, MAX_DELAY_US, False),
)


def check_read_options(args) -> int | None:
    """Bound every numeric option of `iodl read` (parsed by cli_int/cli_float); the --block-size given in
    bytes, or None when it was not given."""
    for flag, attr, lo, hi, integer in READ_OPTIONS:
        value = getattr(args, attr, None)
        if value is not None:
            check_range(flag, value, lo, hi, integer)
    if args.block_size is None:
        return None
    return check_block_size("--block-size", parse_size(args.block_size, "--block-size"), args.direct)


def plan_needs(pattern: str, sizes, samples_per_shard: int, block_size: int, batch_size: int,
               stats: tuple[int, int] | None = None) -> tuple[int, int, str]:
    """(requests in the largest plan one engine call gets, bytes of plans a rank holds at the peak,
    what that largest plan is), from the shards' real sizes.

    storage-only/validate read groups of whole shards (iodl.plan.ShardStream): a group ends past
    GROUP_BYTES or at GROUP_FILES shards, so it holds at most min(GROUP_BYTES + largest shard,
    GROUP_FILES x largest shard) bytes; bytes = rows x GROUP_ROW_PEAK.
    Step patterns keep up to CACHED_SHARDS whole-shard plans (and sample ends) and build one step
    of batch_size samples at a time; bytes = cached x (shard rows x PLAN_ROW + 16 x samples per
    shard) + step rows x STEP_ROW_PEAK, step rows = batch x mean sample / block + shards it spans.
    stats: (largest, total) of sizes when known (a dataset's: its mapped size table is then not
    read whole by every rank).
    """
    largest, total = stats or (int(np.max(sizes)), int(np.sum(sizes, dtype=np.int64)))
    n = len(sizes)
    if pattern in ("train-sync", "infer-async"):
        shard_rows = -(-largest // block_size)
        mean_sample = total / (n * max(1, samples_per_shard))
        step_rows = -(-int(batch_size * mean_sample) // block_size) + shards_per_step(batch_size, samples_per_shard)
        held = min(CACHED_SHARDS, n) * (shard_rows * PLAN_ROW + 16 * samples_per_shard)
        need = held + step_rows * STEP_ROW_PEAK
        if step_rows >= shard_rows:
            return step_rows, need, f"a step of {batch_size:,} samples (~{int(batch_size * mean_sample):,} bytes)"
        return shard_rows, need, f"the largest shard ({largest:,} bytes)"
    group = min(plan.GROUP_BYTES + largest, plan.GROUP_FILES * largest)
    if pattern == "validate":
        group = min(group, total)   # one pass: a group never holds more than the dataset
    rows = -(-group // block_size) + plan.GROUP_FILES
    return rows, rows * GROUP_ROW_PEAK, f"{pattern}'s groups of whole shards (up to {group:,} bytes)"


def check_plans(pattern: str, sizes, samples_per_shard: int, block_size: int, batch_size: int,
                what: str = "--block-size", stats: tuple[int, int] | None = None) -> None:
    """Refuse before reading when one plan would exceed MAX_PLAN_ROWS requests (minutes of Python
    before the first read) or the plans would not fit in this host's memory (plan_needs)."""
    rows, need, plan_of = plan_needs(pattern, sizes, samples_per_shard, block_size, batch_size, stats)
    if rows > MAX_PLAN_ROWS:
        raise UsageError(f"{what}: {block_size}: {plan_of} would be {rows:,} requests of {block_size:,} bytes: "
                         f"at most {MAX_PLAN_ROWS:,} per plan (use a larger block size)")
    check_memory(f"{what} {block_size}: plans of up to {rows:,} requests", need)


def shards_per_step(batch_size: int, samples_per_file: int) -> int:
    """Shards one step's batch can span (each an open file while it is read)."""
    return -(-batch_size // samples_per_file) + 1


def check_open_files(what: str, needed: int) -> None:
    """Refuse when a step would hold more files open than RLIMIT_NOFILE leaves."""

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and needed + FD_HEADROOM > soft:
        raise UsageError(f"{what} keeps up to {needed:,} files open, but this process may open {soft:,} "
                         f"(ulimit -n; {FD_HEADROOM} are kept for MPI and the interpreter)")
