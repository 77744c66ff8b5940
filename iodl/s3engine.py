"""The s3 engine: a plan's rows as GETs to an S3 endpoint, `depth` in flight (awscrt's S3 client).

It has _native.Engine's interface (run a plan, count into the caller's histogram and counters) so
the patterns run unchanged; its "fds" are object handles, `http(s)://HOST[:PORT]/BUCKET/KEY`
(iodl.s3dataset.ObjectPaths), which name the endpoint and the object in any error. Every row is
one GET with `Range: bytes=OFFSET-END` (a whole object's row too: the plan holds lengths, not
whether a row ends its object), one HTTP request per row (S3RequestType.DEFAULT: the CRT never
splits or merges them). The body is counted as it arrives and dropped. Latency is a GET's whole
time (request handed to the CRT -> last byte); its time to the response headers goes to the
stats' ttfb_hist (the S3Client hands them over only once the body is in: not yet a time to first
byte, docs/s3.md). A 5xx answer or a dropped connection is retried up to s3store.RETRIES times,
each counted in the stats' `retries`; a request that fails for good stops the run as a failed
read does (errno: EACCES for 403, ENOENT for 404, ECONNREFUSED, ETIMEDOUT, else EIO), its reason
(the HTTP status and S3 code, or the CRT's error, and the retries) in the stats' `error_reason`,
which engine.raise_for_errors puts in its one line.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from urllib.parse import urlsplit

import numpy as np

from .errors import UsageError

try:
    from awscrt import http, s3
except ImportError:   # the s3 extra is optional: without it an s3:// root is one line, not a traceback
    raise UsageError("s3:// roots need the s3 extra (awscrt): pip install 'iodl[s3]'") from None

from . import _native, histogram
from .s3store import BACKOFF_S, RETRIES, S3Store, _answer, _retryable

_ERRNO = {403: errno.EACCES, 404: errno.ENOENT, 416: errno.EINVAL}
_CRT_ERRNO = {"AWS_IO_SOCKET_CONNECTION_REFUSED": errno.ECONNREFUSED, "AWS_IO_SOCKET_TIMEOUT": errno.ETIMEDOUT,
              "AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE": errno.ETIMEDOUT}


class S3Engine:
    def __init__(self, *, depth: int = 1, block_size: int = 1 << 20, direct: bool = False, delay_ns: int = 0,
                 rate_bps: int = 0, cache_check: bool = False, endpoints: tuple[str, ...] = (), endpoint: str = "",
                 addressing: str = "auto"):
        # endpoints, addressing: the run's; each handle is an object's URL, naming its host and path
        # in the run's addressing style (s3dataset.ObjectPaths), so they are not used here.
        # endpoint: this rank's, whose client is made now: the engine is opened before the start
        # barrier, and making a client (its event loops, the credentials) takes ~30 ms that would
        # otherwise fall inside the measured window as if the storage were slow
        if direct:
            raise ValueError("O_DIRECT is for files, not objects (leave --direct out)")
        if rate_bps:
            raise ValueError("rate pacing is not offered for objects")
        self._depth, self._block_size = max(1, int(depth)), int(block_size)
        self._stores: dict[str, S3Store] = {}
        self._lock = threading.Lock()
        self._cancelled = False
        self.retries = 0     # of the run in progress (its stats say each run's)
        if endpoint:
            self._store(endpoint)

    def _store(self, url: str) -> S3Store:
        """The client for http or https URLs: one serves every host (the CRT connects to the host a
        request's Host header names: the endpoint, or BUCKET.endpoint virtual-host style)."""
        scheme = urlsplit(url).scheme
        store = self._stores.get(scheme)
        if store is None:
            store = self._stores[scheme] = S3Store(url, self._depth)
        return store

    def cancel(self) -> None:
        self._cancelled = True

    def close(self) -> None:
        self._stores.clear()

    def __enter__(self) -> "S3Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, fds, plan: np.ndarray, hist: np.ndarray, *, deadline_ns: int = 0, window_start_ns: int = 0,
            window_end_ns: int = 0, series: np.ndarray | None = None, series_origin_ns: int = 0,
            series_bucket_ns: int = 1_000_000_000, live=None, clat_hist=None, slat_hist=None) -> dict:
        cols = np.ascontiguousarray(plan).view(np.uint64).reshape(-1, 4)
        if len(cols) and cols[:, 3].any():
            raise ValueError("the s3 engine runs reads only")
        if len(cols) and int(cols[:, 2].max()) > self._block_size:
            raise ValueError(f"a plan row is longer than block_size {self._block_size}")
        handles = [urlsplit(h) for h in fds]
        live_view = np.frombuffer(memoryview(live).cast("B"), dtype=np.int64, count=3) if live is not None else None
        st = _State(len(cols))
        self.retries = 0
        cv = threading.Condition()
        clock = _native.monotonic_ns
        interrupt = None

        def finish(row: int, t0: int, got: list, first: list, error, retry_in: float):
            now = clock()
            with cv:
                st.inflight -= 1
                if error is not None:
                    if not st.errors and not st.stop:
                        st.errors, st.first_error_row, st.first_errno, st.error_reason = 1, row, *error
                    st.stop = True
                else:
                    st.done.append((now, got[0], 0, now - t0, 0))
                    if first:
                        st.ttfb.append((first[0], first[0] - t0))
                    if live_view is not None:
                        live_view[0] += got[0]
                        live_view[1] += 1
                    want = int(cols[row, 2])
                    if got[0] < want and st.first_short_row < 0:
                        st.short_rows += 1
                        st.first_short_row, st.short_file_size = row, int(cols[row, 1]) + got[0]
                st.t_end = now
                cv.notify()

        def submit(row: int, attempt: int = 0):
            f, offset, length = (int(x) for x in cols[row, :3])
            h = handles[f]
            store = self._store(f"{h.scheme}://{h.netloc}")
            headers = [("host", h.netloc), ("range", f"bytes={offset}-{offset + length - 1}")]
            req = http.HttpRequest("GET", h.path, http.HttpHeaders(headers))
            got, first, status = [0], [], [0]
            t0 = clock()
            with cv:
                if not st.t_start:
                    st.t_start = t0
                st.submits.append((t0, st.inflight))

            def on_headers(status_code, headers):
                first.append(clock())
                status[0] = status_code

            def on_body(chunk, offset):
                got[0] += len(chunk)

            def on_done(error=None, status_code=None, error_body=None, **_):
                if error is None:
                    finish(row, t0, got, first, None, 0)
                    return
                name = getattr(error, "name", type(error).__name__)
                code, s3code = _answer(status_code or getattr(error, "status_code", None), name, error_body)
                if attempt < RETRIES and not st.stop and _retryable(code, name):
                    with cv:
                        self.retries += 1
                        st.retry.append((time.monotonic() + BACKOFF_S * (1 << attempt), row, attempt + 1))
                        cv.notify()
                    return
                why = f"HTTP {code}" + (f" {s3code}" if s3code else "") if code else name
                err = _ERRNO.get(code, errno.EIO) if code else _CRT_ERRNO.get(name, errno.EIO)
                finish(row, t0, got, first, (err, f"{os.strerror(err)}: {why}"
                                             + (f" after {attempt} retries" if attempt else "")), 0)

            store.client.make_request(type=s3.S3RequestType.DEFAULT, request=req, operation_name="GetObject",
                                      on_headers=on_headers, on_body=on_body, on_done=on_done)

        try:
            with cv:
                while True:
                    if self._cancelled and not st.stop:
                        st.stop = st.interrupted = True
                    if deadline_ns and clock() >= deadline_ns:
                        st.stop = True
                    now_s = time.monotonic()
                    while st.retry and st.retry[0][0] <= now_s and not st.stop:
                        _due, row, attempt = st.retry.pop(0)
                        cv.release()
                        try:
                            submit(row, attempt)
                        finally:
                            cv.acquire()
                    while not st.stop and st.next_row < st.nrows and st.inflight + len(st.retry) < self._depth:
                        row = st.next_row
                        st.next_row += 1
                        st.inflight += 1
                        cv.release()
                        try:
                            submit(row)
                        finally:
                            cv.acquire()
                    if st.stop and st.retry:   # retries not yet sent: dropped, they count as not done
                        st.inflight -= len(st.retry)
                        st.retry.clear()
                    if st.inflight == 0 and (st.stop or (st.next_row >= st.nrows and not st.retry)):
                        break
                    if st.stop and st.inflight == 0:
                        break
                    cv.wait(0.05)
        except KeyboardInterrupt as exc:
            interrupt = exc
            with cv:
                st.stop = st.interrupted = True
                end = time.monotonic() + 1.0   # the GETs in flight: a second to finish, then left to the CRT
                while st.inflight and time.monotonic() < end:
                    cv.wait(0.05)
        done, subs = _cols(st.done, 5), _cols(st.submits, 2)
        counted = _native.account(done[0], done[1], done[2], done[3], hist, window_start_ns=int(window_start_ns),
                                  window_end_ns=int(window_end_ns), series=series,
                                  series_origin_ns=int(series_origin_ns), series_bucket_ns=int(series_bucket_ns),
                                  unmeasured=done[4], submit_ns=subs[0], inflight=subs[1],
                                  t_start_ns=st.t_start, t_end_ns=st.t_end or st.t_start)
        tt = _cols(st.ttfb, 2)
        ttfb = histogram.empty()
        ttfb_counted = _native.account(tt[0], np.zeros_like(tt[0]), None, tt[1], ttfb,
                                       window_start_ns=int(window_start_ns), window_end_ns=int(window_end_ns))
        stats = {"done": st.first_error_row if st.errors else st.next_row, **counted, "errors": st.errors,
                 "first_errno": st.first_errno, "first_error_row": st.first_error_row, "error_reason": st.error_reason,
                 "interrupted": st.interrupted, "short_rows": st.short_rows, "first_short_row": st.first_short_row,
                 "short_file_size": st.short_file_size, "abandoned": st.inflight,
                 "write_ios": 0, "write_bytes": 0, "fsyncs": 0, "fsync_ns": 0,
                 "retries": self.retries, "ttfb_hist": ttfb, "ttfb_max_ns": ttfb_counted["max_ns"]}
        if interrupt is not None:
            interrupt.stats = stats
            raise interrupt
        return stats


class _State:
    def __init__(self, nrows: int):
        self.nrows, self.next_row, self.inflight = nrows, 0, 0
        self.done, self.submits, self.ttfb, self.retry = [], [], [], []
        self.stop = self.interrupted = False
        self.errors = self.first_errno = 0
        self.error_reason = ""
        self.first_error_row = self.first_short_row = -1
        self.short_rows = self.short_file_size = 0
        self.t_start = self.t_end = 0


def _cols(rows: list, n: int) -> np.ndarray:
    if not rows:
        return np.empty((n, 0), np.int64)
    return np.array(rows, dtype=np.int64).T.copy()
