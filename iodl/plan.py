"""Plans: what each rank reads, as numpy arrays the engine runs. Deterministic from one seed.

Plans never do I/O and never know the engine. A shard is read whole and sequentially in
block_size requests; the file column indexes the list of shards handed to the engine with it.
"""
from __future__ import annotations

import errno
import os
import resource   # at import: fd_budget runs when descriptors may be used up (EMFILE), and importing opens a file

import numpy as np

from . import _native
from .errors import UsageError

# A row is one request: which of the run's files, where, how long, and what to do. The op column
# lets writes and syncs (checkpoints) join reads without another plan format (native/engine.h
# IODL_OP_*). A sync row (fsync, fdatasync) waits for every request in flight, then syncs its
# file; its offset and length are not used. The asyncio engine runs reads only.
OP_READ, OP_WRITE, OP_FSYNC, OP_FDATASYNC = 0, 1, 2, 3
PLAN_DTYPE = np.dtype([("file", "<u8"), ("offset", "<u8"), ("length", "<u8"), ("op", "<u8")])


def new_plan(rows: int) -> np.ndarray:
    """A plan of `rows` zeroed rows: every op is OP_READ until set."""
    return np.zeros(rows, dtype=PLAN_DTYPE)


def mount_of(rank: int, n_mounts: int) -> int:
    """Ranks map to mounts round-robin (docs/design.md)."""
    return rank % n_mounts


def ranks_of_mount(mount: int, n_mounts: int, size: int) -> list[int]:
    return list(range(mount, size, n_mounts))


def shard_plan(sizes: list[int] | np.ndarray, block_size: int) -> np.ndarray:
    """Rows that read each shard whole, in order, in block_size requests (the last one short). Made in
    C (_native.shard_plan): a reader makes one a step, ~15 numpy operations a batch before."""
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    return np.frombuffer(_native.shard_plan(sizes, block_size), dtype=PLAN_DTYPE)


def file_plan(size: int, block_size: int) -> np.ndarray:
    """shard_plan of one file: the same rows, made with a few operations on scalars (a step of
    one-sample files makes one per sample)."""
    n = -(-int(size) // block_size)
    plan = new_plan(n)
    if n:
        plan["offset"] = np.arange(0, n * block_size, block_size, dtype=np.int64)
        plan["length"] = block_size
        plan["length"][-1] = int(size) - (n - 1) * block_size
    return plan


def npz_load_plan(size: int, block_size: int) -> np.ndarray:
    """Rows that read an npz file as numpy's np.load does (DLIO's npz reader, buffered): 4 KiB at
    its start (zipfile's magic check), its last 22 bytes (the end-of-central-directory record) and
    the 4 KiB holding the zip64 locator and the central directory before them, 4 KiB at its start
    again (the member's local header), then the whole file sequentially, here in block_size
    requests (strace of np.load, numpy 2.4: 4 KiB + 252 KiB reads). The small reads first are what
    shapes the kernel's readahead, and so the requests the device sees."""
    tail = [(max(size - 22, 0), min(22, size)), (max(size - 42, 0), min(42, size)), (max(size - 124, 0), min(124, size))]
    head = new_plan(2 + len(tail))
    head["offset"] = [0, *[o for o, _n in tail], 0]
    head["length"] = [min(4096, size), *[n for _o, n in tail], min(4096, size)]
    return np.concatenate([head, file_plan(size, block_size)])


TFRECORD_HEADER = 12   # a tfrecord record's length (8 bytes) and the length's masked CRC32C (4)


def record_plan(ends: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, rows that complete each record): a tfrecord shard read record by record as
    TensorFlow's RecordReader reads with no buffer (TFRecordDataset buffer_size 0): the 12-byte
    header, then the data with its 4-byte CRC, each one read; data longer than block_size (the
    engine's largest request) in block_size pieces. ends: each record's end offset (records tile
    the shard)."""
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    data = ends - starts - TFRECORD_HEADER
    per = 1 + np.maximum(-(-data // block_size), 1)          # rows of each record
    done = np.cumsum(per)
    first = done - per                                       # each record's header row
    rows = new_plan(int(done[-1]) if len(done) else 0)
    rows["offset"][first], rows["length"][first] = starts, TFRECORD_HEADER
    k = np.arange(len(rows), dtype=np.int64) - np.repeat(first + 1, per)   # piece index within the data
    body = k >= 0
    rec = np.repeat(np.arange(len(ends)), per)[body]
    off = starts[rec] + TFRECORD_HEADER + k[body] * block_size
    rows["offset"][body] = off
    rows["length"][body] = np.minimum(block_size, ends[rec] - off)
    return rows, done


def random_order(n_shards: int, seed: int, rank: int, epoch: int) -> np.ndarray:
    """This rank's shard order for one pass: a seeded permutation, different per rank and epoch."""
    return np.random.default_rng([seed, rank, epoch]).permutation(n_shards)


def validate_share(n_shards: int, index_in_mount: int, ranks_in_mount: int) -> np.ndarray:
    """One pass over a mount's shards split across the ranks that read it (every shard once)."""
    return np.arange(index_in_mount, n_shards, ranks_in_mount)


def fd_budget(headroom: int = 16) -> int:
    """Files this process may still open under RLIMIT_NOFILE, keeping headroom for MPI, the engine
    and the result files (at least 1: one shard at a time still runs). None free at all (MPI's own
    descriptors can fill a small `ulimit -n`) is a one-line error: no shard could be opened."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    try:
        in_use = len(os.listdir("/proc/self/fd")) - 1   # less the descriptor that listed them
    except OSError as exc:
        in_use = soft if exc.errno == errno.EMFILE else 3   # EMFILE: not one is free; else no /proc
    if in_use >= soft:
        raise UsageError(f"ulimit -n {soft}: every file descriptor this process may open is in use (MPI and "
                         "the interpreter hold them), none is left to open a shard: raise ulimit -n")
    return max(1, soft - in_use - headroom)


GROUP_BYTES = 256 << 20   # a ShardStream group ends once it holds this many bytes ...
GROUP_FILES = 64          # ... or this many shards (iodl.limits sizes its plans from both)


class ShardStream:
    """Successive groups of whole shards for one rank, each group large enough that the engine
    keeps its queue full across shard boundaries, but bounded in open files."""

    def __init__(self, order_fn, sizes: np.ndarray, group_bytes: int = GROUP_BYTES, group_files: int = GROUP_FILES):
        self._order_fn = order_fn          # epoch -> array of shard indices, or None when exhausted
        self._sizes = sizes
        self._group_bytes, self._group_files = group_bytes, max(1, min(group_files, fd_budget()))
        self._epoch, self._queue = 0, np.empty(0, dtype=np.int64)

    def next_group(self) -> np.ndarray | None:
        """Shard indices for the next engine call; None when the stream is exhausted."""
        picked, total = [], 0
        while total < self._group_bytes and len(picked) < self._group_files:
            if not len(self._queue):
                order = self._order_fn(self._epoch)
                if order is None or not len(order):
                    break
                self._queue, self._epoch = np.asarray(order, dtype=np.int64), self._epoch + 1
            picked.append(int(self._queue[0]))
            total += int(self._sizes[self._queue[0]])
            self._queue = self._queue[1:]
        return np.asarray(picked, dtype=np.int64) if picked else None
