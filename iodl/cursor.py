"""The cursor: one rank's plans through the engine and into its counters.

plan -> window -> engine -> counters, in one place. Every pattern (storage-only and validate
walking groups of shards, the step patterns' reader thread, fio-compare's clones) hands its plans
to a Cursor; the counters it files into say which window counts (engine_args) and take each run's
stats (add). What a run returns is checked the same way for all: a stop keeps what was counted,
a cancelled engine ends the caller's loop (Cancelled), a failed or short row names its file.
"""
from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from .engine import open_for_read, raise_for_errors


class Cancelled(Exception):
    """The engine was cancelled (Engine.cancel): the run is stopping, not failing."""


class Counters(Protocol):
    hist: np.ndarray

    def engine_args(self, t0_ns: int) -> dict: ...   # window, series, live counters, extra histograms
    def add(self, stats: dict, t0_ns: int) -> None: ...


class Cursor:
    def __init__(self, engine, counters: Counters, t0_ns: int):
        self.engine, self.counters, self.t0 = engine, counters, t0_ns

    def run(self, fds: list[int], rows: np.ndarray, names: list[str], deadline_ns: int = 0) -> dict:
        """One Engine.run of rows over fds (names: the files, for errors), counted; its stats.
        stats["done"] rows are finished: a deadline stops the run early, the caller resumes there."""
        try:
            stats = self.engine.run(fds, rows, self.counters.hist, deadline_ns=deadline_ns,
                                    **self.counters.engine_args(self.t0))
        except KeyboardInterrupt as exc:
            if getattr(exc, "stats", None):
                self.counters.add(exc.stats, self.t0)   # what the interrupted run had counted
            raise
        self.counters.add(stats, self.t0)
        if stats.get("interrupted"):
            raise Cancelled()
        raise_for_errors(stats, rows, names)
        return stats


class ShardFiles:
    """A rank's open shards by index: opened when a plan first needs one (refused unless a
    regular file of at least the size the dataset promises), closed once read to its end.
    paths None: no dataset (the null engine), every fd is -1. counters: where each open's time
    goes (metrics.RankResult.note_open): small-file epochs are often bound by opens."""

    def __init__(self, paths: list[str] | None, sizes, direct: bool, counters=None):
        self.paths, self.sizes, self.direct, self.counters = paths, sizes, direct, counters
        self.fds: dict[int, int] = {}

    def open(self, shards: list[int]) -> list[int]:
        from . import _native

        for shard in shards:
            if shard not in self.fds:
                if self.paths is None:
                    self.fds[shard] = -1
                    continue
                t0 = _native.monotonic_ns()
                self.fds[shard] = open_for_read(self.paths[shard], self.direct, int(self.sizes[shard]),
                                                inside=getattr(self.paths, "inside", None))
                if self.counters is not None:
                    t1 = _native.monotonic_ns()
                    self.counters.note_open(t1, t1 - t0)
        return [self.fds[s] for s in shards]

    def names(self, shards: list[int]) -> list[str]:
        return [self.paths[s] if self.paths else f"shard {s}" for s in shards]

    def close(self, shard: int) -> None:
        fd = self.fds.pop(shard, -1)
        if fd >= 0:
            os.close(fd)

    def close_all(self) -> None:
        for shard in list(self.fds):
            self.close(shard)
