"""The s3 engine: a plan's rows as GETs to an S3 endpoint, `depth` in flight.

It has _native.Engine's interface (run a plan, count into the caller's histogram and counters) so
the patterns run unchanged; its "fds" are object handles, `http(s)://HOST[:PORT]/BUCKET/KEY`
(iodl.s3dataset.ObjectPaths), which name the endpoint and the object in any error. Every row is
one GET with `Range: bytes=OFFSET-END` (a whole object's row too: the plan holds lengths, not
whether a row ends its object), sent by one of `depth` threads, each with its own kept-alive
connection per host (iodl.s3http: signed by awscrt.auth, read with Python's sockets). The body is
counted as it arrives and dropped. Latency is a GET's whole time (the request's signing -> last
byte); its time to the answer's first byte goes to the stats' ttfb_hist. A 5xx answer or a
dropped connection is retried up to s3store.RETRIES times (a server silent for s3http.IO_TIMEOUT_S
is not: it is hung), each counted in the stats' `retries`;
a request that fails for good stops the run as a failed read does (errno: EACCES for 403, ENOENT
for 404, ECONNREFUSED, ETIMEDOUT, else EIO), its reason (the HTTP status and S3 code, or the
socket's error, and the retries) in the stats' `error_reason`, which engine.raise_for_errors puts
in its one line.

A caller that runs plans one after another (storage-only's and validate's groups of shards) hands
the engine the next plan with ahead() before it runs the current one: once the current plan's rows
are all sent, the threads that come free send the next plan's, so the pipe stays `depth` full
while the current plan's last GETs drain (it emptied for ~50 ms of every ~500 ms group at 8 in
flight, ~5% of the bytes). Each plan's GETs are counted in the run() given that plan; one that
stops (a deadline, an error, Ctrl-C) stops the plan ahead too and counts what it had completed.
"""
from __future__ import annotations

import errno
import os
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

import numpy as np


from . import _native, histogram
from .s3store import BACKOFF_S, NO_CREDENTIALS, RETRIES, AwsCrtError, _answer, _retryable
from .s3http import IO_TIMEOUT_S, Connection, Signer

_ERRNO = {403: errno.EACCES, 404: errno.ENOENT, 416: errno.EINVAL}
READ_BUFFER = 1 << 20    # per GET thread: a body's bytes are received into it, up to this many per recv


class S3Engine:
    def __init__(self, *, depth: int = 1, block_size: int = 1 << 20, direct: bool = False, delay_ns: int = 0,
                 rate_bps: int = 0, cache_check: bool = False, endpoints: tuple[str, ...] = (), endpoint: str = "",
                 addressing: str = "auto"):
        # endpoints, endpoint, addressing: the run's; each handle is an object's URL, naming its host
        # and path in the run's addressing style (s3dataset.ObjectPaths), so they are not used here.
        # The signer (its credentials chain) is made now: the engine is opened before the start
        # barrier, so that it does not fall inside the measured window as if the storage were slow
        if direct:
            raise ValueError("O_DIRECT is for files, not objects (leave --direct out)")
        if rate_bps:
            raise ValueError("rate pacing is not offered for objects")
        self._depth, self._block_size = max(1, int(depth)), int(block_size)
        self._signer = Signer()
        self._cv = threading.Condition()
        self._job: _Job | None = None    # the plan being sent: run()'s, or between runs the one ahead() gave
        self._next: _Job | None = None   # the plan ahead, sent once the job's rows are all sent
        self._ahead: tuple | None = None  # ahead()'s (fds, plan), made a job by the next run()
        self._workers: list[threading.Thread] = []
        self._conns: list[Connection] = []      # every worker's, closed by close()
        self._closed = False
        self._cancelled = False
        self.retries = 0     # of the run in progress (its stats say each run's)

    def cancel(self) -> None:
        self._cancelled = True

    def ahead(self, fds, plan: np.ndarray) -> None:
        """The plan the run() after the next one will be given: its GETs start as soon as the next
        run's rows are all sent, and that run() must then be given it (the same fds and array)."""
        self._ahead = (fds, plan)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            conns = list(self._conns)
        for c in conns:
            c.close()

    def __enter__(self) -> "S3Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, fds, plan: np.ndarray, hist: np.ndarray, *, deadline_ns: int = 0, window_start_ns: int = 0,
            window_end_ns: int = 0, series: np.ndarray | None = None, series_origin_ns: int = 0,
            series_bucket_ns: int = 1_000_000_000, live=None, clat_hist=None, slat_hist=None) -> dict:
        cols = _rows(plan)
        if len(cols) and cols[:, 3].any():
            raise ValueError("the s3 engine runs reads only")
        if len(cols) and int(cols[:, 2].max()) > self._block_size:
            raise ValueError(f"a plan row is longer than block_size {self._block_size}")
        live_view = np.frombuffer(memoryview(live).cast("B"), dtype=np.int64, count=3) if live is not None else None
        ahead, self._ahead = self._ahead, None
        self.retries = 0
        cv = self._cv
        interrupt = None
        with cv:
            st = self._job   # the plan ahead() gave, sent since the last run's rows were
            if st is not None and not st.holds(cols, fds):
                raise ValueError("the s3 engine was given another plan than ahead()'s")
            st = st or _Job(cols, fds, live_view, int(deadline_ns))
            st.live, st.deadline_ns = live_view, int(deadline_ns)
            nxt = self._next = None if ahead is None else _Job(_rows(ahead[1]), ahead[0], live_view, int(deadline_ns))
            while len(self._workers) < min(self._depth, st.nrows + (nxt.nrows if nxt else 0)):
                t = threading.Thread(target=self._work, name=f"iodl-s3-get-{len(self._workers)}", daemon=True)
                self._workers.append(t)
                t.start()
            self._job = st
            cv.notify_all()
        try:
            with cv:
                while True:
                    if self._cancelled and not st.stop:
                        st.stop = st.interrupted = True
                    st.takes()   # (sets stop at the deadline)
                    if st.inflight == 0 and (st.stop or st.next_row >= st.nrows or self._closed):
                        if nxt is None or not (st.stop or self._closed):
                            break   # the plan ahead goes on: the next run() counts it
                        nxt.stop = True
                        if nxt.inflight == 0:
                            break
                    cv.wait(0.05)
        except KeyboardInterrupt as exc:
            interrupt = exc
            with cv:
                st.stop = st.interrupted = True
                if nxt is not None:
                    nxt.stop = True
                end = time.monotonic() + 1.0   # the GETs in flight: a second to finish, then left to their threads
                while self._inflight() and time.monotonic() < end:
                    cv.wait(0.05)
        with cv:
            self._next = None
            abandoned = st.inflight
            if nxt is not None and nxt.stop and st.stop:   # stopped with this plan: what it completed counts here
                st.absorb(nxt)
                abandoned += nxt.inflight
                nxt = None
            self._job = nxt
            self.retries = st.retries
            done, subs, tt = _cols(st.done, 5), _cols(st.submits, 2), _cols(st.ttfb, 2)
        counted = _native.account(done[0], done[1], done[2], done[3], hist, window_start_ns=int(window_start_ns),
                                  window_end_ns=int(window_end_ns), series=series,
                                  series_origin_ns=int(series_origin_ns), series_bucket_ns=int(series_bucket_ns),
                                  unmeasured=done[4], submit_ns=subs[0], inflight=subs[1],
                                  t_start_ns=st.t_start, t_end_ns=st.t_end or st.t_start)
        ttfb = histogram.empty()
        ttfb_counted = _native.account(tt[0], np.zeros_like(tt[0]), None, tt[1], ttfb,
                                       window_start_ns=int(window_start_ns), window_end_ns=int(window_end_ns))
        stats = {"done": st.first_error_row if st.first_error_row >= 0 else st.next_row, **counted,
                 "errors": st.errors, "first_errno": st.first_errno, "first_error_row": st.first_error_row,
                 "error_reason": st.error_reason, "error_at": st.error_at,
                 "interrupted": st.interrupted, "short_rows": st.short_rows, "first_short_row": st.first_short_row,
                 "short_file_size": st.short_file_size, "abandoned": abandoned,
                 "write_ios": 0, "write_bytes": 0, "fsyncs": 0, "fsync_ns": 0,
                 "retries": st.retries, "ttfb_hist": ttfb, "ttfb_max_ns": ttfb_counted["max_ns"]}
        if interrupt is not None:
            interrupt.stats = stats
            raise interrupt
        return stats

    def _work(self) -> None:
        """One of the `depth` GET threads: rows of the job in progress, one at a time, until close()."""
        buf = bytearray(READ_BUFFER)
        conns: dict[tuple[str, str], Connection] = {}
        cv = self._cv
        while True:
            with cv:
                while not self._closed and (st := self._source()) is None:
                    cv.wait()
                if self._closed:
                    return
                t0 = _native.monotonic_ns()
                row = st.take(t0, self._inflight() + 1)
                f, offset, length = st.rows[row, :3].tolist()
            h = st.handles[f]
            conn = conns.get((h.scheme, h.netloc))
            if conn is None:
                conn = conns[(h.scheme, h.netloc)] = Connection(h.scheme, h.netloc, buf)
                with cv:
                    self._conns.append(conn)
            self._get(st, row, t0, h, conn, offset, length)

    def _source(self) -> "_Job | None":
        """The job to send a row of: the current one's, else (all sent, not stopped) the one ahead."""
        st, nxt = self._job, self._next
        if st is None:
            return None
        if st.takes():
            return st
        return nxt if nxt is not None and not st.stop and nxt.takes() else None

    def _inflight(self) -> int:
        """GETs in flight, of both plans (the queue depth each send records)."""
        return sum(j.inflight for j in (self._job, self._next) if j is not None)

    def _get(self, st: "_Job", row: int, t0: int, h, conn: Connection, offset: int, length: int) -> None:
        """One row's GET (sent at t0), retried on 5xx and dropped connections; its outcome into st."""
        clock, cv = _native.monotonic_ns, self._cv
        got, first = [0], [0]

        def on_first(t: int):
            first[0] = t

        def on_body(n: int):
            got[0] += n

        for attempt in range(RETRIES + 1):
            if attempt:
                got[0] = first[0] = 0
                t0 = clock()
                with cv:
                    st.sent(t0, self._inflight())

            try:
                request = self._signer.get_request(h.netloc, h.path, offset, offset + length - 1)
                status, body = conn.get(request, clock, on_first, on_body)
            except AwsCrtError as exc:   # signing: no credentials, ...
                return st.finish(cv, row, t0, got[0], first[0], (errno.EACCES, f"{os.strerror(errno.EACCES)}: "
                                                                  f"{_credentials_why(exc.name)}"))
            except ssl.SSLCertVerificationError as exc:   # an answer of a kind: another attempt gets the same
                return st.finish(cv, row, t0, got[0], first[0], _why(
                    errno.EACCES, f"the server's certificate is not trusted ({exc.verify_message})", attempt))
            except OSError as exc:
                name = _socket_error_name(exc)
                if attempt < RETRIES and not st.stop and not isinstance(exc, socket.timeout):   # (s3http.IO_TIMEOUT_S)
                    if self._backoff(st, attempt):
                        continue
                    return st.finish(cv, row, t0, got[0], first[0], None, dropped=True)
                err = exc.errno if isinstance(exc, ConnectionError) and exc.errno else (
                    errno.ETIMEDOUT if isinstance(exc, socket.timeout) else errno.EIO)
                return st.finish(cv, row, t0, got[0], first[0], _why(err, name, attempt))
            except Exception as exc:   # an answer that is not HTTP: the run fails in one line, as on EIO
                return st.finish(cv, row, t0, got[0], first[0], _why(errno.EIO, f"{type(exc).__name__}: {exc}",
                                                                     attempt))
            if 200 <= status < 300:
                return st.finish(cv, row, t0, got[0], first[0], None)
            code, s3code = _answer(status, "", body)
            if attempt < RETRIES and not st.stop and _retryable(code, ""):
                if self._backoff(st, attempt):
                    continue
                return st.finish(cv, row, t0, got[0], first[0], None, dropped=True)
            why = f"HTTP {code}" + (f" {s3code}" if s3code else "")
            return st.finish(cv, row, t0, got[0], first[0], _why(_ERRNO.get(code, errno.EIO), why, attempt))

    def _backoff(self, st: "_Job", attempt: int) -> bool:
        """Count a retry and wait its backoff; False: the run stopped meanwhile (the GET is dropped)."""
        with self._cv:
            st.retries += 1
            end = time.monotonic() + BACKOFF_S * (1 << attempt)
            while not st.stop and not self._closed and time.monotonic() < end:
                self._cv.wait(end - time.monotonic())
            return not st.stop and not self._closed


def _why(err: int, why: str, attempt: int) -> tuple[int, str]:
    return err, f"{os.strerror(err)}: {why}" + (f" after {attempt} retries" if attempt else "")


def _socket_error_name(exc: OSError) -> str:
    """ECONNREFUSED, ETIMEDOUT...; or what the connection did (s3http.HttpError)."""
    if isinstance(exc, socket.timeout):
        return f"no answer in {IO_TIMEOUT_S:g} s"
    if isinstance(exc, ssl.SSLError):   # its errno is OpenSSL's, not the kernel's
        return f"TLS {exc.reason or exc}"
    if exc.errno:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return str(exc) or type(exc).__name__


def _credentials_why(name: str) -> str:
    return NO_CREDENTIALS if "CREDENTIAL" in name else name


class _Job:
    """One run(): its rows and handles, and what came of them (every field under the engine's condition)."""

    def __init__(self, rows: np.ndarray, fds: list, live_view, deadline_ns: int):
        # rows: the plan's (file, offset, length, op) as uint64; each read as its GET is made (a plan
        # may be far longer than what a deadline lets be sent)
        self.rows, self.fds, self.live, self.deadline_ns = rows, fds, live_view, deadline_ns
        self.handles = [urlsplit(h) for h in fds]
        self.nrows, self.next_row, self.inflight, self.retries = len(rows), 0, 0, 0
        self.done, self.submits, self.ttfb = [], [], []
        self.stop = self.interrupted = False
        self.errors = self.first_errno = 0
        self.error_reason = ""
        self.first_error_row = self.first_short_row = -1
        self.error_at = None   # (object, offset, length) of an error absorbed from the plan ahead
        self.short_rows = self.short_file_size = 0
        self.t_start = self.t_end = 0

    def takes(self) -> bool:
        """A row is there to send: not stopped, not past the deadline (no GET starts after it)."""
        if self.deadline_ns and not self.stop and _native.monotonic_ns() >= self.deadline_ns:
            self.stop = True
        return not self.stop and self.next_row < self.nrows

    def holds(self, rows: np.ndarray, fds) -> bool:
        """This job is of that plan (the same rows in memory, the same handles)."""
        return (rows.shape == self.rows.shape and rows.ctypes.data == self.rows.ctypes.data
                and list(fds) == list(self.fds))

    def take(self, t0: int, inflight: int) -> int:
        """The next row, sent at t0 with `inflight` GETs of the engine in flight (this one too)."""
        row, self.next_row = self.next_row, self.next_row + 1
        self.inflight += 1
        self.sent(t0, inflight)
        return row

    def sent(self, t0: int, inflight: int) -> None:
        self.t_start = self.t_start or t0
        self.submits.append((t0, inflight))

    def absorb(self, other: "_Job") -> None:
        """Count another job's completed GETs as this one's (a plan ahead that stopped with this), and
        its failure when this one had none: a GET of the plan ahead sent in this run's time that failed
        for good is this run's error, named by its own object (it is no row of this run's plan)."""
        self.done += other.done
        self.submits += other.submits
        self.ttfb += other.ttfb
        self.retries += other.retries
        self.t_end = max(self.t_end, other.t_end)
        if other.errors and not self.errors:
            f, offset, length = other.rows[other.first_error_row, :3].tolist()
            self.errors, self.first_errno, self.error_reason = other.errors, other.first_errno, other.error_reason
            self.error_at = (other.fds[f], offset, length)

    def finish(self, cv: threading.Condition, row: int, t0: int, got: int, first: int, error: tuple | None,
               dropped: bool = False) -> None:
        """A GET's end: done (got bytes, its first byte at `first`), failed for good (error: errno,
        reason), or dropped (a retry the run's stop left unsent: not done)."""
        now = _native.monotonic_ns()
        with cv:
            self.inflight -= 1
            if error is not None:
                if not self.errors and not self.stop:
                    self.errors, self.first_error_row, self.first_errno, self.error_reason = 1, row, *error
                self.stop = True
            elif not dropped:
                self.done.append((now, got, 0, now - t0, 0))
                if first:
                    # filed by the GET's completion, as its latency is: the window counts the same
                    # GETs in both (by its first byte, one that ended past the window's end counted
                    # its time to first byte and not its whole time)
                    self.ttfb.append((now, first - t0))
                if self.live is not None:
                    self.live[0] += got
                    self.live[1] += 1
                if got < int(self.rows[row, 2]) and self.first_short_row < 0:
                    self.short_rows += 1
                    self.first_short_row, self.short_file_size = row, int(self.rows[row, 1]) + got
            self.t_end = now
            if self.inflight == 0 and (self.stop or self.next_row >= self.nrows):
                cv.notify_all()   # run() waits for the job's end, not woken by every GET


def _rows(plan: np.ndarray) -> np.ndarray:
    """A plan's (file, offset, length, op) columns as uint64, the same memory."""
    return np.ascontiguousarray(plan).view(np.uint64).reshape(-1, 4)


def _cols(rows: list, n: int) -> np.ndarray:
    if not rows:
        return np.empty((n, 0), np.int64)
    return np.array(rows, dtype=np.int64).T.copy()
