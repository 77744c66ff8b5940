"""The cursor: one rank's plans through the engine and into its counters.

plan -> window -> engine -> counters, in one place. Every pattern (storage-only and validate
walking groups of shards, the step patterns' reader thread, fio-compare's clones) hands its plans
to a Cursor; the counters it files into say which window counts (engine_args) and take each run's
stats (add). What a run returns is checked the same way for all: a stop keeps what was counted,
a cancelled engine ends the caller's loop (Cancelled), a failed or short row names its file.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import numpy as np

from . import _native
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
    paths None: no dataset (the null engine), every fd is -1. counters: where each open's and
    close's time goes (metrics.RankResult.note_open, note_close): small-file epochs are often
    bound by opens.

    threads > 0: that many open threads (a data loader's worker threads, the workload's
    read_threads) open shards before the reader needs them: ahead() hands them the shards that
    come next, open() takes their fds in the reader. os.open releases the GIL, so opens overlap
    each other and the reader's reads. What the reader was blocked on opens goes to the counters
    too (note_open_wait): with open threads the wait for an fd not yet open, without them every
    open's whole time.
    """

    AHEAD_PER_THREAD = 8   # opens started ahead per open thread: a batch of small files ahead at 4 threads, few fds

    def __init__(self, paths: list[str] | None, sizes, direct: bool, counters=None, threads: int = 0):
        self.paths, self.sizes, self.direct, self.counters = paths, sizes, direct, counters
        self.fds: dict[int, int] = {}
        self._pool = None
        self._ahead: deque[tuple[int, Future]] = deque()   # (shard, open started ahead), stream order
        self._waiting: dict[int, int] = {}                 # shard -> how many of _ahead are it
        if threads > 0 and paths is not None:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="iodl-open")
        self.ahead_cap = threads * self.AHEAD_PER_THREAD if self._pool else 0

    def _open_timed(self, shard: int) -> tuple[int, int, int]:
        """(fd, when its open returned, how long it took), on the engine's clock."""
        t0 = _native.monotonic_ns()
        fd = open_for_read(self.paths[shard], self.direct, int(self.sizes[shard]),
                           inside=getattr(self.paths, "inside", None))
        t1 = _native.monotonic_ns()
        return fd, t1, t1 - t0

    def _submit(self, shard: int) -> Future:
        return self._pool.submit(self._open_timed, shard)

    def ahead(self, shards: list[int]) -> None:
        """Start opening these shards, the ones the stream gives next (each once, in order)."""
        for shard in shards:
            self._ahead.append((shard, self._submit(shard)))
            self._waiting[shard] = self._waiting.get(shard, 0) + 1

    def _claim(self, shard: int) -> Future | None:
        """The first open started ahead for shard. Those started before it are for positions the
        stream has passed without opening them (the shard was open already, or held no sample):
        they are closed, uncounted."""
        if not self._waiting.get(shard):
            return None
        while True:
            s, fut = self._ahead.popleft()
            self._waiting[s] -= 1
            if not self._waiting[s]:
                del self._waiting[s]
            if s == shard:
                return fut
            _discard(fut)

    def open(self, shards: list[int], then: list[int] = ()) -> list[int]:
        """The fds of shards (a batch's), opened now or ahead; then: the shards that come next,
        started after this batch's own opens (ahead)."""
        need = [s for s in dict.fromkeys(shards) if s not in self.fds]
        if self.paths is None:
            self.fds.update((s, -1) for s in need)
        elif getattr(self.paths, "objects", False):
            return [self.paths[s] for s in shards]   # objects (iodl.s3dataset): the handle is the "fd", nothing to open
        elif self._pool is None:
            for shard in need:
                fd, t, took = self._open_timed(shard)
                self.fds[shard] = fd
                self._note(t, took)
                self._note_wait(t, took)
        else:
            # a batch's shards not opened ahead are opened by the threads too, together
            futs = [(s, self._claim(s) or self._submit(s)) for s in need]
            self.ahead(then)
            t0 = _native.monotonic_ns()
            try:
                for shard, fut in futs:
                    fd, t, took = fut.result()     # an open's error is raised here, in the reader
                    self.fds[shard] = fd
                    self._note(t, took)
            finally:
                t1 = _native.monotonic_ns()
                self._note_wait(t1, t1 - t0)
                for shard, fut in futs:
                    if shard not in self.fds:
                        _discard(fut)
        return [self.fds[s] for s in shards]

    def _note(self, t_ns: int, took_ns: int) -> None:
        if self.counters is not None:
            self.counters.note_open(t_ns, took_ns)

    def _note_wait(self, t_ns: int, waited_ns: int) -> None:
        if self.counters is not None:
            self.counters.note_open_wait(t_ns, waited_ns)

    def names(self, shards: list[int]) -> list[str]:
        return [self.paths[s] if self.paths else f"shard {s}" for s in shards]

    def close(self, shard: int) -> None:
        fd = self.fds.pop(shard, -1)
        if fd >= 0:
            t0 = _native.monotonic_ns()
            os.close(fd)
            if self.counters is not None:
                t1 = _native.monotonic_ns()
                self.counters.note_close(t1, t1 - t0)

    def close_all(self) -> None:
        """Close every fd, those opened ahead too; stop the open threads (an open in progress
        finishes on its own, and its fd is closed then)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        while self._ahead:
            _discard(self._ahead.popleft()[1])
        self._waiting.clear()
        for shard in list(self.fds):
            self.close(shard)


def _discard(fut: Future) -> None:
    """Close the fd of an open started ahead that nobody will use, now or when it is done."""
    if fut.cancel():
        return

    def close(f: Future) -> None:
        if not f.cancelled() and f.exception() is None:
            os.close(f.result()[0])

    fut.add_done_callback(close)
