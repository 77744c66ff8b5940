"""The `asyncio` engine: aiofiles on uvloop, `depth` concurrent reader tasks — the framework-like
Python path, with the metrics contract of the native engines (iodl/_native.pyi).

It exists to show what a Python data loader costs against the native path on the same storage,
so the per-I/O loop is deliberately Python: each reader task takes the next plan row, stamps the
clock, awaits the read and stamps it again, exactly as an asyncio loader awaiting aiofiles would.

How a read is issued. aiofiles opens files by path and reads through its file objects' executor
wrappers (`await f.read(n)` = `loop.run_in_executor(executor, f._file.read, n)`), but a file
object has a shared file offset: concurrent tasks on one fd would race on seek + read. The engine
is handed fds, so it uses aiofiles' own executor wrapper on the positional syscall instead:
`aiofiles.os.wrap(os.pread)` (buffered) or `aiofiles.os.wrap(os.preadv)` (O_DIRECT, into a
page-aligned mmap slot). That is the same mechanism (`run_in_executor` on a thread pool, one
thread hop per read, the result handed back to the loop) minus the seek. The executor is a
ThreadPoolExecutor of exactly `depth` threads, passed explicitly (`executor=`): the loop's
default executor has min(32, cpus + 4) threads, which would silently cap the concurrency.
Buffered reads return a fresh bytes object per request, as `await f.read(n)` does: a Python
loader pays that allocation and copy, so the engine does too. The threads are started when the
engine is made, so the first run does not pay for them inside the clock.

Measured, per request: latency = just before the `await` of the read -> just after it returns
to the task (thread hand-off both ways included: that is what the loader waits for), on
time.monotonic_ns() (CLOCK_MONOTONIC, the clock of _native.monotonic_ns()). A read is a sync call
seen from its task, so clat_hist gets the whole latency and slat_hist nothing (fio's sync engines,
as psync). What a completion counts for is not decided here: each reader task records every
completion (time, bytes, cached bytes, latency, whether its hits are measurable) and every submit
(time, reads in flight), and run() files them at its end through _native.account, the function
core.c's loop uses per completion (native/account.c): the window, the histograms, max_ns, ios and
bytes, the series rows, the depth bins and the clipped t_start_ns/t_end_ns are therefore the native
engines' by construction. Only the live counters are bumped here, at every completion, because
another process reads them while we run. Deadline, errors, short reads and cancel are handled as
core.c handles them. Rate pacing follows fio's rate as the native loop does (behind schedule: issue
at once; ahead: drain, then sleep), with the event loop's timer resolution (libuv: 1 ms) instead of
clock_nanosleep.

cache_check: as core.c, a delivered byte is a hit unless the read made the storage deliver it,
known from the kernel's per-thread count of the bytes a thread's reads fetched from storage
(_native.thread_read_bytes, native/pagecache.c), which holds for any reader. The reads run in the
executor's threads, so each one is wrapped to return that thread's count across it; completions
are charged with what is owed in core.c's order (cached_of), so readahead is a miss as there.

The engine owns its event loop (uvloop.new_event_loop()) and runs it forever in one thread of its
own; run(), from any thread (training calls it from its reader thread), hands the plan to it and
waits, as _native.Engine.run waits with the GIL released. Running the loop in the caller's thread
instead would, in the main thread, make uvloop open a self-pipe socketpair and swap the signal
wakeup fd at every run: two fds per run (a stale fd number in a plan could then alias the loop's
socket) and signal plumbing per training step. The caller's wait is interruptible: a signal
handler that raises (Ctrl-C) stops the run, which drains its in-flight reads, then re-raises, as
the native engines do. One run at a time (RuntimeError otherwise).

Reads only: a plan row whose op is not OP_READ (a write, fsync or fdatasync, which the native
engines run) is refused with a ValueError naming the row, before anything runs. The stats still
carry the native engines' write_ios, write_bytes, fsyncs and fsync_ns keys, always 0.
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import mmap
import os
import stat
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from . import _native, histogram, limits

NAME = "asyncio"
MAX_DEPTH = 1024              # one OS thread per reader: more is a misconfiguration, not a workload
MAX_BLOCK_SIZE = 1 << 30
_BLKGETSIZE64 = 0x80081272


def unavailable() -> str | None:
    """None when aiofiles and uvloop import, else why not, in one line."""
    for mod in ("aiofiles", "uvloop"):
        try:
            __import__(mod)
        except ImportError as exc:
            return f"import {mod} -> {type(exc).__name__}"
    return None


def _end_by(window_end_ns: int, cancel_ns: int) -> int:
    """The window's end, or the cancel time if that came first (0: unbounded), as account.c."""
    return cancel_ns if cancel_ns and (not window_end_ns or cancel_ns < window_end_ns) else window_end_ns


def _pread_counted(fd: int, n: int, offset: int) -> tuple[int, int]:
    """os.pread in an executor thread: bytes read, and the bytes that thread's read made the
    storage deliver (its misses and the readahead it started)."""
    before = _native.thread_read_bytes()
    got = len(os.pread(fd, n, offset))
    return got, _native.thread_read_bytes() - before


def _file_size(fd: int, st: os.stat_result) -> int | None:
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if stat.S_ISBLK(st.st_mode):
        try:
            return struct.unpack("Q", fcntl.ioctl(fd, _BLKGETSIZE64, b"\0" * 8))[0]
        except OSError:
            return None
    return None


# --- the engine ---------------------------------------------------------------------------------

class _Rows:
    """The plan as Python ints, converted a chunk at a time as the readers reach it: converting a
    200k-row plan up front costs ~20 ms here, which would sit between run() and the first read."""

    CHUNK = 4096

    def __init__(self, cols: np.ndarray):
        self.cols, self.rows = cols, []

    def __getitem__(self, i: int) -> list:
        rows = self.rows
        if i >= len(rows):
            rows.extend(self.cols[len(rows):i + self.CHUNK].tolist())
        return rows[i]


# the columns of _Run.done and _Run.submits, flattened (one list.extend per event is the cheapest
# record in Python); _native.account takes them as arrays
_DONE_COLS = 5          # completion time, bytes, cached bytes, latency, hits not measurable (0/1)
_SUBMIT_COLS = 2        # submit time, reads in flight then
# Records are moved from the lists into int64 arrays every this many completions: a long run then
# holds 56 bytes per completion instead of ~150 of list slots and int objects.
_PACK = 1 << 16


class _Records:
    """A flat list of int records of `cols` columns, packed into int64 chunks as it grows."""

    def __init__(self, cols: int):
        self.cols, self.flat, self.chunks = cols, [], []

    def pack(self) -> None:
        if self.flat:
            # fromiter: 5x quicker than np.array on a long list of ints
            self.chunks.append(np.fromiter(self.flat, np.int64, len(self.flat)))
            self.flat.clear()

    def columns(self) -> np.ndarray:
        """(cols, n): one contiguous int64 row per column, as _native.account takes them."""
        self.pack()
        flat = np.concatenate(self.chunks) if self.chunks else np.empty(0, np.int64)
        return flat.reshape(-1, self.cols).T.copy()


class _Run:
    """One run's loop state and what _native.account is not given: errors, short rows, the run's
    first submit and last completion (t_start/t_end, clipped there), every completion and submit."""

    def __init__(self, nrows: int):
        self.nrows = nrows
        self.next_row = 0
        self.stop = False
        self.inflight = 0
        self.errors = 0
        self.first_errno = 0
        self.first_error_row = -1
        self.t_start = self.t_end = 0
        self.done = _Records(_DONE_COLS)
        self.submits = _Records(_SUBMIT_COLS)
        self.interrupted = False
        self.short_rows = self.short_file_size = 0
        self.first_short_row = -1
        self.live: np.ndarray | None = None
        self.paced = 0
        self.t_origin = 0
        self.tasks: list[asyncio.Task] = []
        self.idle: asyncio.Event | None = None


class AsyncioEngine:
    """_native.Engine's interface (see _native.pyi) with reads through aiofiles on a uvloop loop."""

    def __init__(self, *, depth: int = 1, block_size: int = 1 << 20, direct: bool = False,
                 delay_ns: int = 0, rate_bps: int = 0, cache_check: bool = False, device=None,
                 submit_batch: int = 1) -> None:
        why = unavailable()
        if why:
            raise OSError(errno.ENOSYS, f"the asyncio engine needs aiofiles and uvloop ({why})")
        import aiofiles.os
        import uvloop

        depth, block_size = int(depth), int(block_size)
        if not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"depth must be 1..{MAX_DEPTH}, not {depth}")
        if not 1 <= block_size <= MAX_BLOCK_SIZE:
            raise ValueError(f"block_size must be 1..{MAX_BLOCK_SIZE}, not {block_size}")
        if delay_ns < 0 or rate_bps < 0:
            raise ValueError("delay_ns and rate_bps must be >= 0")
        if not 0 <= submit_batch <= MAX_DEPTH:  # accepted alike; each reader task submits its own read
            raise ValueError(f"submit_batch must be 0..{MAX_DEPTH}, not {submit_batch}")
        if delay_ns:
            raise ValueError("delay_ns is for the null engine only")
        if device is not None:
            raise ValueError("device= is for the null engine only")
        self._depth, self._block_size, self._direct = depth, block_size, bool(direct)
        self._rate = int(rate_bps)
        # O_DIRECT never reads from the page cache: there is nothing to measure
        self._cache_check = bool(cache_check) and not self._direct
        self._storage_pending = 0   # storage bytes not yet charged to a completion (core.h)
        self._busy = False
        self._closed = False
        self._cancelled = False
        self._cancel_ns = 0
        self._pread = aiofiles.os.wrap(_pread_counted)
        self._preadv = aiofiles.os.wrap(os.preadv)
        self._slot = limits.aligned(block_size)
        self._buf = None
        self._slots: list[memoryview] = []
        if self._direct:
            # page-aligned (mmap), one slot per reader task, faulted in now (as core.c's memset)
            self._buf = mmap.mmap(-1, depth * self._slot)
            np.frombuffer(self._buf, dtype=np.uint8)[:] = 0
            whole = memoryview(self._buf)
            self._slots = [whole[i * self._slot:(i + 1) * self._slot] for i in range(depth)]
            del whole
        self._pool = self._new_pool()
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="iodl-asyncio-loop", daemon=True)
        self._thread.start()

    def _new_pool(self) -> ThreadPoolExecutor:
        """`depth` threads, all started now: each start task waits until every thread exists."""
        pool = ThreadPoolExecutor(max_workers=self._depth, thread_name_prefix="iodl-asyncio")
        barrier = threading.Barrier(self._depth)
        for f in [pool.submit(barrier.wait) for _ in range(self._depth)]:
            f.result()
        return pool

    # properties of _native.Engine
    name = property(lambda self: NAME)
    depth = property(lambda self: self._depth)
    block_size = property(lambda self: self._block_size)
    direct = property(lambda self: self._direct)
    fixed_buffers = property(lambda self: False)
    closed = property(lambda self: self._closed)
    cancelled = property(lambda self: self._cancelled)

    def cancel(self) -> None:
        """From any thread (as _native.Engine.cancel): the run stops taking rows, lets the reads in
        flight finish and returns its stats with interrupted=True; later runs return at once."""
        if not self._cancelled:
            self._cancel_ns = time.monotonic_ns()   # what completes after this only drains (not counted)
        self._cancelled = True

    def __repr__(self) -> str:
        return f"<AsyncioEngine depth={self._depth} block_size={self._block_size} direct={self._direct}>"

    # --- argument checks, as native/bind_*.c ----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("engine is closed")
        if self._busy:
            raise RuntimeError("engine is running in another thread")

    @staticmethod
    def _plan_columns(plan) -> np.ndarray:
        """(n, 3) uint64 file, offset, length of a plan whose every row is a read (as native/bind_plan.c)."""
        a = plan if isinstance(plan, np.ndarray) else None
        cols = None
        if a is not None and a.flags.c_contiguous:
            if a.ndim == 1 and a.dtype.itemsize == 32:
                cols = a.view(np.uint64).reshape(-1, 4) if len(a) else np.empty((0, 4), np.uint64)
            elif a.ndim == 2 and a.shape[1] in (3, 4) and a.dtype.itemsize == 8:
                cols = a.view(np.uint64)
        if cols is None:
            raise TypeError("plan must be a contiguous array of PLAN_DTYPE rows (file, offset, length, op as uint64)")
        if cols.shape[1] == 4 and cols[:, 3].any():
            row = int(np.flatnonzero(cols[:, 3])[0])
            raise ValueError(f"plan row {row}: op {int(cols[row, 3])}: the asyncio engine runs reads (op 0) only; "
                             f"writes and fsyncs need a native engine (psync, aio, uring, null)")
        return cols[:, :3]

    @staticmethod
    def _check_hist(hist, what: str = "hist") -> np.ndarray:
        h = hist if isinstance(hist, np.ndarray) else None
        if (h is None or h.ndim != 1 or h.size != histogram.HIST_BUCKETS or h.dtype.itemsize != 8
                or h.dtype.kind not in "iu" or not h.flags.c_contiguous or not h.flags.writeable):
            raise TypeError(f"{what} must be a writable contiguous int64 array of {histogram.HIST_BUCKETS} buckets")
        return h

    @staticmethod
    def _check_series(series) -> np.ndarray:
        a = series if isinstance(series, np.ndarray) else None
        if (a is None or a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != histogram.SERIES_WIDTH
                or a.dtype != np.int64 or not a.flags.c_contiguous or not a.flags.writeable):
            raise ValueError(f"series must be a writable C-contiguous int64 array of shape "
                             f"(n, SERIES_WIDTH={histogram.SERIES_WIDTH}), n >= 1")
        return a

    @staticmethod
    def _live_view(live) -> np.ndarray:
        """The first three int64 of a writable buffer (an mmap, a numpy view of one), as native/bind_arrays.c."""
        try:
            mv = memoryview(live)
            view = None if mv.readonly or mv.nbytes < 24 else np.frombuffer(mv.cast("B"), dtype=np.int64, count=3)
        except (TypeError, ValueError):
            view = None
        if view is None or view.ctypes.data % 8:
            raise ValueError("live must be a writable, 8-byte aligned buffer of at least 24 bytes")
        return view

    # --- run ------------------------------------------------------------------------------------

    def run(self, fds: Sequence[int], plan: np.ndarray, hist: np.ndarray, *, deadline_ns: int = 0,
            window_start_ns: int = 0, window_end_ns: int = 0, series: np.ndarray | None = None,
            series_origin_ns: int = 0, series_bucket_ns: int = 1_000_000_000, live=None,
            clat_hist: np.ndarray | None = None, slat_hist: np.ndarray | None = None) -> dict:
        self._check_open()
        if deadline_ns < 0 or window_start_ns < 0 or window_end_ns < 0:
            raise ValueError("deadline_ns and the window must be >= 0")
        if series_origin_ns < 0 or series_bucket_ns <= 0:
            raise ValueError("series_origin_ns must be >= 0 and series_bucket_ns > 0")
        try:
            fds = [int(fd) for fd in fds]
        except TypeError:
            raise TypeError("fds must be a sequence of file descriptors") from None
        cols = self._plan_columns(plan)
        hist = self._check_hist(hist)
        clat_hist = self._check_hist(clat_hist, "clat_hist") if clat_hist is not None else None
        slat_hist = self._check_hist(slat_hist, "slat_hist") if slat_hist is not None else None
        if series is not None:
            series = self._check_series(series)
        live = self._live_view(live) if live is not None else None
        if len(cols):
            bad = np.flatnonzero(cols[:, 0] >= len(fds))
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"plan row {i}: file {int(cols[i, 0])} but only {len(fds)} fds")
            bad = np.flatnonzero(cols[:, 2] > self._block_size)
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"plan row {i}: length {int(cols[i, 2])} exceeds block_size {self._block_size}")
        st = _Run(len(cols))
        if self._cancelled:
            st.interrupted = True
            return self._stats(st, _native.account(*[np.empty(0, np.int64)] * 4, histogram.empty()))
        st.live = live
        rows = _Rows(cols)
        self._busy = True
        try:
            fut = asyncio.run_coroutine_threadsafe(
                self._main(st, fds, rows, int(deadline_ns)), self._loop)
            interrupt = None
            while True:
                try:
                    fut.result()
                    break
                except BaseException as exc:
                    if fut.done():
                        raise
                    # a signal handler raised in this thread (Ctrl-C): no new rows, let the reads
                    # in flight finish (their buffers are ours), then raise it
                    st.stop = st.interrupted = True
                    interrupt = interrupt or exc
            if interrupt is not None:
                raise interrupt
        finally:
            self._busy = False
            # also on Ctrl-C: the latencies of what ran are filed, as the native loop files them
            done, submits = st.done.columns(), st.submits.columns()
            counted = _native.account(
                done[0], done[1], done[2], done[3], hist, window_start_ns=int(window_start_ns),
                window_end_ns=_end_by(int(window_end_ns), self._cancel_ns), series=series, series_origin_ns=int(series_origin_ns),
                series_bucket_ns=int(series_bucket_ns), clat_hist=clat_hist, slat_hist=slat_hist,
                unmeasured=done[4], submit_ns=submits[0], inflight=submits[1], t_start_ns=st.t_start,
                t_end_ns=st.t_end)
        return self._stats(st, counted)

    async def _main(self, st: _Run, fds, rows, deadline) -> None:
        st.idle = asyncio.Event()
        st.idle.set()
        sizes: list = [None] * len(fds)
        measured = [False] * len(fds)
        seen = [False] * len(fds)

        def first_use(f: int) -> None:
            seen[f] = True
            fd = fds[f]
            try:
                sb = os.fstat(fd)
            except OSError:
                return                      # a bad fd is reported by the read itself
            sizes[f] = _file_size(fd, sb)
            if self._cache_check:
                try:
                    measured[f] = _native.cache_measurable(fd)
                except OSError:
                    pass

        st.tasks = [asyncio.ensure_future(self._reader(i, st, fds, rows, deadline, sizes, measured, seen,
                                                       first_use)) for i in range(min(self._depth, st.nrows))]
        if st.tasks:
            await asyncio.wait(st.tasks)        # all of them: none may outlive the run
        for t in st.tasks:
            if t.exception() is not None:
                raise t.exception()

    async def _pace(self, st: _Run, due: int, deadline: int) -> None:
        """fio's rate, ahead of schedule: drain everything in flight, then sleep until due."""
        while st.inflight:
            await st.idle.wait()
        until = min(due, deadline) if deadline else due
        now = time.monotonic_ns()
        if until > now:     # in slices, so that a stop (Ctrl-C) is noticed while we sleep
            await asyncio.sleep(min(until - now, 100_000_000) / 1e9)

    async def _reader(self, *args) -> None:
        st = args[1]
        try:
            await self._read_rows(*args)
        except BaseException:
            st.stop = True                      # a bug, not an I/O error: stop the others too
            raise

    async def _read_rows(self, slot, st: _Run, fds, rows, deadline, sizes, measured, seen, first_use) -> None:
        """One reader task: take the next row, read it (and the rest of a short read), count it."""
        clock = time.monotonic_ns
        direct, pool, rate = self._direct, self._pool, self._rate
        pread, preadv = self._pread, self._preadv
        buf = self._slots[slot] if direct else None
        record, record_submit, live = st.done.flat.extend, st.submits.flat.extend, st.live
        done_flat, pack_at = st.done.flat, _PACK * _DONE_COLS
        cache_check = self._cache_check
        while True:
            if self._cancelled and not st.stop:
                st.stop = st.interrupted = True
            if st.stop or st.next_row >= st.nrows:
                return
            now = clock()
            if deadline and now >= deadline:
                st.stop = True
                return
            if rate and st.t_origin:
                due = st.t_origin + st.paced * 1_000_000_000 // rate
                if due > now:
                    await self._pace(st, due, deadline)
                    continue
            row = st.next_row
            st.next_row += 1
            f, offset, want = rows[row]
            st.paced += want
            if not st.t_origin:
                st.t_origin = now
            if not seen[f]:
                first_use(f)
            fd, size = fds[f], sizes[f]
            got = 0
            while True:
                st.inflight += 1
                st.idle.clear()
                t0 = clock()
                if not st.t_start:
                    st.t_start = t0
                record_submit((t0, st.inflight))
                err = storage = 0
                try:
                    if direct:
                        res = await preadv(fd, [buf[got:got + limits.aligned(want)]], offset, executor=pool)
                    else:
                        res, storage = await pread(fd, want, offset, executor=pool)
                except OSError as exc:
                    err = exc.errno or errno.EIO
                now = clock()
                st.inflight -= 1
                if not st.inflight:
                    st.idle.set()
                st.t_end = now
                if err:
                    st.errors += 1
                    if not st.first_errno or row < st.first_error_row:
                        st.first_errno, st.first_error_row = err, row
                    st.stop = True
                    break
                # O_DIRECT rounds the length up: what the plan did not ask for is not delivered
                n = res if res < want else want
                cached = unmeasured = 0
                if not cache_check:
                    pass
                elif measured[f]:
                    # core.c cached_of: charged with what the storage delivered and is not yet charged
                    # (in completion order, window or not, so it is decided here and not at the end)
                    self._storage_pending += storage
                    miss = min(n, self._storage_pending)
                    self._storage_pending -= miss
                    cached = n - miss
                else:
                    unmeasured = 1
                record((now, n, cached, now - t0, unmeasured))
                if len(done_flat) >= pack_at:
                    st.done.pack()
                    st.submits.pack()
                if live is not None:
                    # the loop's thread is the only writer: each store is one aligned 8-byte write
                    live[0] += n
                    live[1] += 1
                    live[2] += cached
                got += n
                want -= n
                if want and res > 0 and (size is None or offset + res < size):
                    offset += res           # short read before EOF: read the rest
                    continue
                if want:                    # EOF before the row's length: the file is shorter than planned
                    st.short_rows += 1
                    if st.first_short_row < 0 or row < st.first_short_row:
                        try:
                            eof = os.fstat(fd).st_size
                        except OSError:
                            eof = offset + res
                        st.first_short_row, st.short_file_size = row, eof
                break

    @staticmethod
    def _stats(st: _Run, counted: dict) -> dict:
        """RunStats: what _native.account counted (ios, bytes, cached and unmeasured bytes, the
        clipped t_start_ns/t_end_ns, max_ns, depth, series_clamped), and the run's own outcome."""
        return {"done": st.first_error_row if st.errors else st.next_row, **counted, "errors": st.errors,
                "first_errno": st.first_errno, "first_error_row": st.first_error_row,
                "interrupted": st.interrupted, "short_rows": st.short_rows, "first_short_row": st.first_short_row,
                "short_file_size": st.short_file_size, "abandoned": 0,
                "write_ios": 0, "write_bytes": 0, "fsyncs": 0, "fsync_ns": 0}

    # --- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        if self._busy:
            raise RuntimeError("engine is running in another thread")
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._pool.shutdown(wait=True)
        for s in self._slots:
            s.release()
        self._slots = []
        if self._buf is not None:
            self._buf.close()
            self._buf = None

    def __enter__(self) -> "AsyncioEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed and not self._busy:
                self.close()
        except Exception:
            pass
