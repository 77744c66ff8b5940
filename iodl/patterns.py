"""Patterns: when each rank reads (and, for DL patterns, computes and synchronises).

A pattern drives one engine per rank through a plan, a group of whole shards at a time, and
folds the engine's counters into a RankResult. Python works per group of shards, never per I/O.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass

import numpy as np

from . import _native, plan
from .errors import IodlError, UsageError
from .metrics import RankResult

PATTERNS = ("train-sync", "infer-async", "storage-only", "validate")
STEP_PATTERNS = ("train-sync", "infer-async")


@dataclass
class ReadConfig:
    pattern: str
    engine: str
    direct: bool
    iodepth: int
    block_size: int
    duration_s: float
    ramp_s: float
    seed: int
    delay_ns: int = 0


def choose_engine(requested: str, direct: bool) -> str:
    """`auto`: io_uring when usable (it is asynchronous for buffered reads too), else native AIO for
    O_DIRECT (Linux AIO is synchronous on buffered files), else psync."""
    if requested != "auto":
        if requested not in _native.engines():
            raise UsageError(f"unknown engine '{requested}' (choose from auto, {', '.join(_native.engines())})")
        err = _native.probe(requested)
        if err:
            raise UsageError(f"engine '{requested}' is not usable here: {errno.errorcode.get(err, err)}"
                             f" ({os.strerror(err)}); see `iodl probe`")
        return requested
    if not _native.probe("uring"):
        return "uring"
    if direct and not _native.probe("aio"):
        return "aio"
    return "psync"


def open_shard(path: str, direct: bool) -> int:
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    try:
        return os.open(path, flags)
    except OSError as exc:
        if direct and exc.errno == errno.EINVAL:
            raise UsageError(f"{path}: this filesystem does not support O_DIRECT (run without --direct)") from None
        raise IodlError(f"cannot open shard {path}: {exc.strerror}") from None


class _Cursor:
    """Where a rank is in its stream of shards: the current group's plan, open fds and position.

    A deadline can stop the engine mid-group; the next phase resumes at the same request.
    """

    def __init__(self, stream: plan.ShardStream, paths: list[str], sizes: np.ndarray, cfg: ReadConfig, engine):
        self.stream, self.paths, self.sizes, self.cfg, self.engine = stream, paths, sizes, cfg, engine
        self.group, self.fds, self.rows, self.pos = None, [], None, 0

    def _open_next(self) -> bool:
        group = self.stream.next_group()
        if group is None:
            return False
        self.group = group
        self.fds = []
        try:
            for i in group:
                self.fds.append(open_shard(self.paths[i], self.cfg.direct))
        except BaseException:
            self.close()
            raise
        self.rows = plan.shard_plan(self.sizes[group], self.cfg.block_size)
        self.pos = 0
        return True

    def close(self) -> None:
        for fd in self.fds:
            self.engine.forget(fd)
            os.close(fd)
        self.group, self.fds, self.rows = None, [], None

    def run(self, deadline_ns: int, into: RankResult, t0_ns: int) -> None:
        """Read until the deadline (0: until the stream ends)."""
        while True:
            if self.group is None and not self._open_next():
                return
            stats = self.engine.run(self.fds, self.rows[self.pos:], into.hist, deadline_ns=deadline_ns)
            into.add(stats, t0_ns)
            if stats["errors"]:
                row = self.rows[self.pos + stats["first_error_row"]]
                path = self.paths[self.group[int(row["file"])]]
                raise IodlError(f"read of {path} at offset {int(row['offset'])} failed: "
                                f"{os.strerror(stats['first_errno'])}")
            self.pos += stats["done"]
            if self.pos >= len(self.rows):
                self.close()
            if deadline_ns and _native.monotonic_ns() >= deadline_ns:
                return


def run_reads(comm, cfg: ReadConfig, shards_paths: list[str], shard_sizes: np.ndarray, mount: int,
              n_mounts: int, host: str) -> RankResult:
    """Run storage-only or validate on this rank against its mount's shards."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    if cfg.pattern == "storage-only":
        if not len(sizes) or not sizes.sum():
            raise UsageError("the dataset holds no bytes to read")

        def order(epoch):
            return plan.random_order(len(sizes), cfg.seed, comm.rank, epoch)
    else:
        members = plan.ranks_of_mount(mount, n_mounts, comm.size)
        share = plan.validate_share(len(sizes), members.index(comm.rank), len(members))

        def order(epoch):
            return share if epoch == 0 else None

    result = RankResult(rank=comm.rank, host=host, mount=mount)
    engine = _native.Engine(cfg.engine, depth=cfg.iodepth, block_size=cfg.block_size, direct=cfg.direct,
                            delay_ns=cfg.delay_ns, cache_check=not cfg.direct)
    cursor = _Cursor(plan.ShardStream(order, sizes), shards_paths, sizes, cfg, engine)
    try:
        comm.barrier()
        t0 = _native.monotonic_ns()
        if cfg.pattern == "storage-only":
            measure_from = t0 + int(cfg.ramp_s * 1e9)
            if cfg.ramp_s > 0:
                cursor.run(measure_from, RankResult(rank=comm.rank, host=host, mount=mount), t0)
            cursor.run(measure_from + int(cfg.duration_s * 1e9), result, t0)
        else:
            cursor.run(0, result, t0)
    finally:
        cursor.close()
        engine.close()
    return result
