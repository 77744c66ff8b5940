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

from . import _native
from .data.tables import take_rows
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
        # the C engine takes `opened` and an opener's tickets (the Python engines fstat and open nothing)
        self._c_engine = isinstance(engine, _native.Engine)
        self._taking_args = None   # run_taking's keywords, and the window they count in

    def run(self, fds: list[int], rows: np.ndarray, names: list[str], deadline_ns: int = 0,
            opened: np.ndarray | None = None) -> dict:
        """One Engine.run of rows over fds (names: the files, for errors), counted; its stats.
        stats["done"] rows are finished: a deadline stops the run early, the caller resumes there.
        opened: ShardFiles.opened of these fds (what their opens' fstat found), or None."""
        args = self.counters.engine_args(self.t0)
        if opened is not None and self._c_engine:
            args["opened"] = opened
        try:
            stats = self.engine.run(fds, rows, self.counters.hist, deadline_ns=deadline_ns, **args)
        except KeyboardInterrupt as exc:
            if getattr(exc, "stats", None):
                self.counters.add(exc.stats, self.t0)   # what the interrupted run had counted
            raise
        self.counters.add(stats, self.t0)
        if stats.get("interrupted"):
            raise Cancelled()
        raise_for_errors(stats, rows, names)
        return stats

    @property
    def takes_files(self) -> bool:
        """run_taking works with this engine: the C engine's (the Python engines open nothing)."""
        return self._c_engine

    def run_taking(self, files: "ShardFiles", tickets: np.ndarray, shards: list[int], rows: np.ndarray) -> bool:
        """Cursor.run of a batch of whole files that the engine takes from the open threads
        (files.claim_batch's tickets), reads and closes in one call, counting their opens and
        closes as ShardFiles would: no Python between. False when an open failed: nothing was
        read, files hold the batch's fds as open() leaves them (or it raised the open's error),
        and the caller runs the batch as usual."""
        c = self.counters
        args = self._taking_args
        if args is None or args[0] is not c.window_ns:   # made once a window (a dict a step, else)
            args = self._taking_args = (c.window_ns, dict(c.engine_args(self.t0), opener=files.pool,
                                                          open_hist=c.open_hist, close_hist=c.close_hist))
        try:
            stats = self.engine.run(None, rows, c.hist, tickets=tickets, **args[1])
        except KeyboardInterrupt as exc:
            stats = getattr(exc, "stats", None)
            if stats:   # read and closed: what the interrupted run had counted
                c.add(stats, self.t0)
                c.add_files(stats)
            else:       # interrupted while waiting for the opens: nobody takes them now
                files.drop(tickets)
            raise
        if "taken" in stats:
            c.note_open_wait(stats["open_waited_at_ns"], stats["open_wait_ns"])
            files.took(shards, stats["taken"])
            return False
        c.add(stats, self.t0)
        c.add_files(stats)
        if stats["interrupted"]:
            raise Cancelled()
        if stats["errors"] or stats["short_rows"]:
            raise_for_errors(stats, rows, files.names(shards))
        return True


class ShardFiles:
    """A rank's open shards by index: opened when a plan first needs one (refused unless a
    regular file of at least the size the dataset promises), closed once read to its end.
    paths None: no dataset (the null engine), every fd is -1. counters: where each open's and
    close's time goes (metrics.RankResult.note_open, note_close): small-file epochs are often
    bound by opens.

    threads > 0: that many open threads (a data loader's worker threads, the workload's
    read_threads) open shards before the reader needs them: ahead() hands them the shards that
    come next, open() takes their fds in the reader (or the engine takes a batch's itself:
    claim_batch, Cursor.run_taking). The threads are C's (native/opener.c, with open_for_read's
    checks): a batch is one submit and one take, the reader waits with the GIL released, and no
    Python runs per open but the counting. What the reader was blocked on opens
    goes to the counters too (note_open_wait): with open threads the wait for an fd not yet open,
    without them every open's whole time.
    """

    AHEAD_PER_THREAD = 8   # opens started ahead per open thread: a batch of small files ahead at 4 threads, few fds
    # Opener.take's columns per file (native/opener.h struct iodl_open_result)
    TAKEN = ("fd", "err", "done_ns", "took_ns", "size", "dev")

    def __init__(self, paths: list[str] | None, sizes, direct: bool, counters=None, threads: int = 0):
        self.paths, self.sizes, self.direct, self.counters = paths, sizes, direct, counters
        self.fds: dict[int, int] = {}
        self._inside = getattr(paths, "inside", None)
        self._pool = None
        # the opens started ahead, in stream order, from _at on not yet claimed: shard i's open has
        # ticket _ahead_tickets[i] (two lists sliced a batch at a time, no Python per shard)
        self._ahead_shards: list[int] = []
        self._ahead_tickets: list[int] = []
        self._at = 0
        if threads > 0 and paths is not None and not getattr(paths, "objects", False):
            self._pool = _native.opener(threads, direct, self._inside)
        self.ahead_cap = threads * self.AHEAD_PER_THREAD if self._pool else 0
        # (st_size, st_dev) of each fd open() last returned, as the open threads' fstat found them
        # (Engine.run's `opened`: the engine then fstats none of them again), or None
        self.opened: np.ndarray | None = None

    def _open_timed(self, shard: int) -> tuple[int, int, int]:
        """(fd, when its open returned, how long it took), on the engine's clock."""
        t0 = _native.monotonic_ns()
        fd = open_for_read(self.paths[shard], self.direct, int(self.sizes[shard]), inside=self._inside)
        t1 = _native.monotonic_ns()
        return fd, t1, t1 - t0

    def _submit(self, shards: list[int], sizes: np.ndarray | None = None) -> range:
        """Queue the opens of shards on the open threads, in order: their tickets. sizes: theirs
        when known (looked up with the shard order), else looked up here."""
        sizes = np.ascontiguousarray(take_rows(self.sizes, shards) if sizes is None else sizes, dtype=np.int64)
        # each path ends with its NUL; encoded once for the batch, as os.fsencode does
        first = self._pool.submit(joined_paths(self.paths, shards), sizes)
        return range(first, first + len(shards))

    def ahead(self, shards: list[int], sizes: np.ndarray | None = None) -> None:
        """Start opening these shards, the ones the stream gives next (each once, in order);
        sizes: their file sizes when known."""
        if shards:
            if self._at > 1024:   # drop what was claimed, now and then
                del self._ahead_shards[:self._at], self._ahead_tickets[:self._at]
                self._at = 0
            self._ahead_tickets += self._submit(shards, sizes)
            self._ahead_shards += shards

    def drop_ahead(self, tickets: np.ndarray) -> None:
        """Opens a taker that kept their tickets itself (ShardLookahead.whole_batch) will not take
        (negative tickets: none); closed by the pool."""
        if len(tickets):
            self._pool.drop(tickets)

    def adopt(self, shards: list[int], tickets: list[int]) -> None:
        """Opens of these shards started for a taker that kept their tickets itself, in stream order,
        not yet taken: claimed from here on as ahead()'s are (their taker went another way)."""
        self._ahead_shards += shards
        self._ahead_tickets += tickets

    def _claim(self, shard: int, passed: list[int]) -> int | None:
        """The ticket of the first open started ahead for shard. Those started before it are for
        positions the stream has passed without opening them (the shard was open already, or held
        no sample): their tickets go to passed, to be dropped (closed, uncounted)."""
        try:
            i = self._ahead_shards.index(shard, self._at)   # a scan: this path is the rare one
        except ValueError:
            return None
        passed += self._ahead_tickets[self._at:i]
        self._at = i + 1
        return self._ahead_tickets[i]

    def open(self, shards: list[int], then: list[int] = (), then_sizes: np.ndarray | None = None) -> list[int]:
        """The fds of shards (a batch's), opened now or ahead; then: the shards that come next,
        started after this batch's own opens (ahead; then_sizes: their sizes when known)."""
        self.opened = None
        if self.paths is None:   # the null engine: no files, so nothing to open, hold or close
            return [-1] * len(shards)
        need = [s for s in dict.fromkeys(shards) if s not in self.fds]
        if getattr(self.paths, "objects", False):
            return [self.paths[s] for s in shards]   # objects (iodl.s3dataset): the handle is the "fd", nothing to open
        elif self._pool is None:
            times = []
            try:
                for shard in need:
                    fd, t, took = self._open_timed(shard)
                    self.fds[shard] = fd
                    times.append((t, took))
                    self._note_wait(t, took)
            finally:   # an open that fails ends the run: those before it still count
                self._note(times)
        elif need:
            self._open_pooled(need, then, then_sizes, whole=len(need) == len(shards))
        else:
            self.ahead(then, then_sizes)
        return [self.fds[s] for s in shards]

    def _claim_next(self, need: list[int]) -> list[int] | None:
        """The tickets of need when they are the next shards opened ahead, in order (the usual
        case: the stream reads the shards it gave the threads): taken in one pass; else None."""
        at, k = self._at, len(need)
        if self._ahead_shards[at:at + k] != need:
            return None
        self._at = at + k
        return self._ahead_tickets[at:at + k]

    def _open_pooled(self, need: list[int], then: list[int], then_sizes, whole: bool) -> None:
        wanted = self._tickets(need, then, then_sizes)
        t0 = _native.monotonic_ns()
        try:
            got = self._pool.take(wanted)
        except BaseException:
            self._pool.drop(wanted)   # interrupted while waiting: nobody takes them now
            raise
        finally:
            t1 = _native.monotonic_ns()
            self._note_wait(t1, t1 - t0)
        self.took(need, got, whole)

    def _tickets(self, need: list[int], then: list[int], then_sizes) -> np.ndarray:
        """The tickets of need's opens, those not started ahead started now, together, before
        `then`'s (then_sizes: their sizes when known)."""
        tickets = self._claim_next(need)
        if tickets is None:
            passed: list[int] = []
            tickets = [self._claim(s, passed) for s in need]
            if passed:
                self._pool.drop(np.array(passed, dtype=np.int64))
            missing = [s for s, t in zip(need, tickets) if t is None]
            if missing:
                fresh = iter(self._submit(missing))
                tickets = [next(fresh) if t is None else t for t in tickets]
        self.ahead(then, then_sizes)
        return np.array(tickets, dtype=np.int64)

    def claim_batch(self, shards: list[int], then: list[int] = (), then_sizes=None) -> np.ndarray | None:
        """open()'s first half for an engine that takes the files itself (Cursor.run_taking): the
        tickets of a batch's opens, `then` started after them; None where that cannot be (no
        open threads, a shard twice in the batch or open already: open() does those)."""
        if self._pool is None or len(set(shards)) != len(shards) or (self.fds and any(s in self.fds for s in shards)):
            return None
        return self._tickets(shards, then, then_sizes)

    def took(self, need: list[int], got: bytes, whole: bool = True) -> None:
        """The results of need's opens (Opener.take's bytes) into fds, counted; whole: need is the
        batch's every shard, in its order (their fstat's facts are then `opened`)."""
        got = np.frombuffer(got, dtype=np.int64).reshape(-1, len(self.TAKEN))   # a row per shard
        ok = got[:, 1] == 0
        if ok.all():
            self.fds.update(zip(need, got[:, 0].tolist()))
            self._note(got[:, 2:4])
            if whole:
                self.opened = np.ascontiguousarray(got[:, 4:6])
            return
        self.fds.update((s, fd) for s, fd, good in zip(need, got[:, 0].tolist(), ok.tolist()) if good)
        self._note(got[ok, 2:4])
        for shard in np.array(need)[~ok].tolist():
            # the C open refused or failed: open_for_read, run again here, raises saying why in one
            # line (its refusals' words live there only); a file that has become fine since is used
            fd, t, took = self._open_timed(shard)
            self.fds[shard] = fd
            self._note([(t, took)])

    @property
    def pool(self):
        """The open threads (_native.Opener), or None."""
        return self._pool

    def drop(self, tickets: np.ndarray) -> None:
        """Opens that will not be taken (claim_batch's, the take interrupted): closed by the pool."""
        self._pool.drop(tickets)

    def _note(self, times) -> None:
        """Opens that returned at times[i][0] after times[i][1], counted at once."""
        if self.counters is not None and len(times):
            times = np.asarray(times, dtype=np.int64)
            self.counters.note_open(times[:, 0], times[:, 1])

    def _note_wait(self, t_ns: int, waited_ns: int) -> None:
        if self.counters is not None:
            self.counters.note_open_wait(t_ns, waited_ns)

    def names(self, shards: list[int]) -> "BatchNames":
        return BatchNames(self.paths, shards)

    def close(self, shards: list[int]) -> None:
        """Close these shards' files (those open), each close timed; with open threads in one C call."""
        if self.paths is None:
            return
        fds = [fd for fd in (self.fds.pop(s, -1) for s in shards) if fd >= 0]
        if not fds:
            return
        if self._pool is not None:
            times = np.frombuffer(self._pool.close_fds(np.array(fds, dtype=np.int64)), dtype=np.int64).reshape(-1, 2)
        else:
            times = []
            for fd in fds:
                t0 = _native.monotonic_ns()
                os.close(fd)
                t1 = _native.monotonic_ns()
                times.append((t1, t1 - t0))
            times = np.array(times, dtype=np.int64)
        if self.counters is not None:
            self.counters.note_close(times[:, 0], times[:, 1])

    def close_all(self) -> None:
        """Close every fd, those opened ahead too; stop the open threads (an open in progress
        finishes on its own thread, and its fd is closed there)."""
        self.close(list(self.fds))
        if self._pool is not None:
            self._pool.close()
        self._ahead_shards, self._ahead_tickets, self._at = [], [], 0


def joined_paths(paths, shards: list[int]) -> bytes:
    """The shards' paths for Opener.submit: each ends with its NUL, encoded once for the batch (as
    os.fsencode does); a sequence of paths that can make a batch's at once makes them so (GeneratedPaths.joined,
    in C)."""
    joined = getattr(paths, "joined", None)
    if joined is not None:
        return joined(shards)
    names = [paths[s] for s in shards]
    return os.fsencode("\0".join(names) + "\0") if names else b""


class BatchNames:
    """names[i]: the file of shards[i], made only when asked (an error names its file; a step
    without one makes no path)."""

    def __init__(self, paths, shards: list[int]):
        self._paths, self._shards = paths, shards

    def __len__(self) -> int:
        return len(self._shards)

    def __getitem__(self, i: int) -> str:
        shard = self._shards[i]
        return self._paths[shard] if self._paths else f"shard {shard}"
