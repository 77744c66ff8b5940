"""Patterns: when each rank reads (and, for DL patterns, computes and synchronises).

A pattern is registered here with what `iodl read` needs to know of it (Pattern) and runs one
rank's part of a run (Run) through the cursor into that rank's RankResult; a new pattern is one
module that registers itself. storage-only and validate live here (a group of whole shards at a
time), train-sync and infer-async in iodl.training. Python works per group or step, never per I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import _native, plan
from .cursor import Cancelled, Cursor, ShardFiles
from .data.tables import int_rows
from .engines import open_engine
from .config import ReadConfig
from .errors import UsageError
from .metrics import RankResult


@dataclass(frozen=True)
class Pattern:
    """A read pattern as `iodl read` drives it."""
    name: str                    # one of workload.PATTERNS (the names a workload file may give)
    steps: bool                  # emulates accelerators: a StepConfig, step records, the train block, AU
    fixed_window: Callable[[ReadConfig], bool]   # measured over [ramp, ramp + duration], fixed in advance
    run: Callable[["Run"], tuple[np.ndarray | None, bool]]   # one rank: (step records or None, partial)


@dataclass
class Run:
    """One rank's part of a run: what every pattern is given."""
    comm: object
    cfg: ReadConfig              # a StepConfig for step patterns
    paths: list[str] | None      # the mount's shards (None: the null engine without a dataset)
    sizes: np.ndarray            # or a dataset's TableRows (rows read when looked up)
    sample_ends: Callable        # shard -> its samples' end offsets
    mount: int
    n_mounts: int
    host: str
    result: RankResult           # where to count (it may carry a series and live counters)
    stop: Callable[[], bool]     # True once the user asked to stop
    on_epoch: Callable | None = None   # called between epochs (step patterns)
    after_step: Callable | None = None # train-sync's in-training checkpoint (training.run_steps)
    total_samples: int | None = None   # samples of the mount's shards (None: counted from sample_ends)


_REGISTRY: dict[str, Pattern] = {}


def register(pattern: Pattern) -> Pattern:
    _REGISTRY[pattern.name] = pattern
    return pattern


def registry() -> dict[str, Pattern]:
    """Every pattern by name."""
    from . import training  # noqa: F401  (registers train-sync and infer-async)

    return _REGISTRY


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
    sizes = int_rows(shard_sizes)
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
    walk = _GroupWalk(plan.ShardStream(order, sizes), ShardFiles(shards_paths, sizes, cfg.direct, result), sizes, cfg)
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


def _reads(run: Run) -> tuple[None, bool]:
    run_reads(run.comm, run.cfg, run.paths, run.sizes, run.mount, run.n_mounts, run.host, result=run.result,
              stop_flag=run.stop)
    return None, False


register(Pattern("storage-only", steps=False, fixed_window=lambda cfg: True, run=_reads))
register(Pattern("validate", steps=False, fixed_window=lambda cfg: False, run=_reads))
