"""Patterns: when each rank reads (and, for DL patterns, computes and synchronises).

A pattern drives one engine per rank through a plan, a group of whole shards at a time, and
folds the engine's counters into a RankResult. Python works per group of shards, never per I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _native, plan
from .cursor import Cancelled, Cursor, ShardFiles
from .engine import available_engines, check_engine, open_engine
from .errors import UsageError
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
    engine_extra: dict = field(default_factory=dict)   # e.g. the null engine's shared device


def choose_engine(requested: str, direct: bool) -> str:
    """`auto`: io_uring when usable (it is asynchronous for buffered reads too), else native AIO for
    O_DIRECT (Linux AIO is synchronous on buffered files), else psync."""
    if requested != "auto":
        check_engine(requested)
        return requested
    usable = available_engines()
    if usable.get("uring", "") is None:
        return "uring"
    if direct and usable.get("aio", "") is None:
        return "aio"
    return "psync"


class _GroupWalk:
    """storage-only and validate: a rank's stream of shards, a group at a time, through the cursor.

    A deadline can stop the engine mid-group; the next call resumes at the same request.
    """

    def __init__(self, stream: plan.ShardStream, files: ShardFiles, sizes: np.ndarray, cfg: ReadConfig):
        self.stream, self.files, self.sizes, self.cfg = stream, files, sizes, cfg
        self.group, self.rows, self.pos = None, None, 0

    def _open_next(self) -> bool:
        group = self.stream.next_group()
        if group is None:
            return False
        self.group = [int(i) for i in group]
        try:
            self.files.open(self.group)
        except BaseException:
            self.close()
            raise
        self.rows = plan.shard_plan(self.sizes[group], self.cfg.block_size)
        self.pos = 0
        return True

    def close(self) -> None:
        self.files.close_all()
        self.group, self.rows = None, None

    def run(self, cursor: Cursor, end_ns: int) -> None:
        """Read until end_ns (0: until the stream ends)."""
        while True:
            if self.group is None and not self._open_next():
                return
            stats = cursor.run(self.files.open(self.group), self.rows[self.pos:], self.files.names(self.group),
                               deadline_ns=end_ns)
            self.pos += stats["done"]
            if self.pos >= len(self.rows):
                self.close()
            if end_ns and _native.monotonic_ns() >= end_ns:
                return


def run_reads(comm, cfg: ReadConfig, shards_paths: list[str], shard_sizes: np.ndarray, mount: int,
              n_mounts: int, host: str, result: RankResult | None = None, stop_flag=None) -> RankResult:
    """Run storage-only or validate on this rank against its mount's shards (into `result`, which
    may come with a series and live counters to feed). stop_flag(): True when a stop was requested
    before the run began (one during it raises KeyboardInterrupt in the engine's wait)."""
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

    result = result or RankResult(rank=comm.rank, host=host, mount=mount)
    engine = open_engine(cfg.engine, depth=cfg.iodepth, block_size=cfg.block_size, direct=cfg.direct,
                         delay_ns=cfg.delay_ns, cache_check=not cfg.direct, **cfg.engine_extra)
    walk = _GroupWalk(plan.ShardStream(order, sizes), ShardFiles(shards_paths, sizes, cfg.direct), sizes, cfg)
    try:
        try:
            comm.barrier()  # the common origin of every rank's clock
            t0 = _native.monotonic_ns()
            if cfg.pattern == "storage-only":
                # the ramp is not a separate phase: I/O runs on through its end, counted from then
                measure_from = t0 + int(cfg.ramp_s * 1e9)
                result.window_ns = (measure_from, measure_from + int(cfg.duration_s * 1e9))
            if stop_flag is None or not stop_flag():   # stopped during set-up: nothing is read
                walk.run(Cursor(engine, result, t0), result.window_ns[1])
        except (KeyboardInterrupt, Cancelled):
            pass  # a signal: keep what was counted; the caller marks the result partial
    finally:
        walk.close()
        engine.close()
    return result
