"""storage-only and validate: a rank reads whole shards, a group at a time, through the cursor.

Python works per group, never per I/O; the two patterns differ only in the order of the shards
and in their window (iodl/patterns/storage_only.py, iodl/patterns/validate.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import _native, plan
from ..cursor import Cancelled, Cursor, ShardFiles
from ..data.tables import int_rows
from ..engines import open_reader
from .base import Run

if TYPE_CHECKING:
    from ..runspec import RunSpec


class _GroupWalk:
    """storage-only and validate: a rank's stream of shards, a group at a time, through the cursor.

    A deadline can stop the engine mid-group; the next call resumes at the same request. An engine
    that can start the next group's requests while a group's last ones drain (ahead(): the s3
    engine, whose "fds" are object URLs, nothing to open) is given the next group before each run.
    """

    def __init__(self, stream: plan.ShardStream, files: ShardFiles, sizes: np.ndarray, cfg: "RunSpec"):
        self.stream, self.files, self.sizes, self.cfg = stream, files, sizes, cfg
        self.group, self.rows, self.pos = None, None, 0
        self.upcoming = None   # (group, rows) taken from the stream early, given to the engine's ahead()

    def _take_group(self) -> tuple[list[int], np.ndarray] | None:
        if self.upcoming is not None:
            up, self.upcoming = self.upcoming, None
            return up
        group = self.stream.next_group()
        if group is None:
            return None
        return [int(i) for i in group], plan.shard_plan(self.sizes[group], self.cfg.block_size)

    def _open_next(self) -> bool:
        taken = self._take_group()
        if taken is None:
            return False
        self.group, self.rows = taken
        try:
            self.files.open(self.group)
        except BaseException:
            self.close()
            raise
        self.pos = 0
        return True

    def close(self) -> None:
        self.files.close_all()
        self.group, self.rows = None, None

    def run(self, cursor: Cursor, end_ns: int) -> None:
        """Read until end_ns (0: until the stream ends)."""
        ahead = getattr(cursor.engine, "ahead", None)
        while True:
            if self.group is None and not self._open_next():
                return
            if ahead is not None and self.upcoming is None:
                self.upcoming = self._take_group()
                if self.upcoming is not None:
                    ahead(self.files.open(self.upcoming[0]), self.upcoming[1])
            stats = cursor.run(self.files.open(self.group), self.rows[self.pos:], self.files.names(self.group),
                               deadline_ns=end_ns)
            self.pos += stats["done"]
            if self.pos >= len(self.rows):
                self.close()
            if end_ns and _native.monotonic_ns() >= end_ns:
                return


def read_shards(run: Run, order: Callable[[int], np.ndarray | None], window_s: tuple[float, float] | None) -> bool:
    """Read this rank's shards in order(epoch) (None: no more) into run.result; window_s: (ramp,
    duration) of a window fixed in advance, counted from the start barrier (None: every completion
    counts, and the stream's end ends the run). A stop requested before the run began reads nothing;
    one during it raises KeyboardInterrupt in the engine's wait, and what was counted stays.
    Returns False: the caller marks a stopped run partial by its stop flag."""
    comm, cfg, result = run.comm, run.spec, run.result
    sizes = int_rows(run.sizes)
    engine = open_reader(cfg, cache_check=not cfg.direct)
    walk = _GroupWalk(plan.ShardStream(order, sizes), ShardFiles(run.paths, sizes, cfg.direct, result), sizes, cfg)
    try:
        try:
            comm.barrier()  # the common origin of every rank's clock
            t0 = _native.monotonic_ns()
            result.note_start()
            if window_s is not None:
                # the ramp is not a separate phase: I/O runs on through its end, counted from then
                measure_from = t0 + int(window_s[0] * 1e9)
                result.window_ns = (measure_from, measure_from + int(window_s[1] * 1e9))
            if not run.stop():   # stopped during set-up: nothing is read
                walk.run(Cursor(engine, result, t0), result.window_ns[1])
        except (KeyboardInterrupt, Cancelled):
            pass  # a signal: keep what was counted; the caller marks the result partial
    finally:
        walk.close()
        engine.close()
    return False
