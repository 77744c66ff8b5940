"""A bucket as iodl talks to it: `s3://BUCKET/PREFIX` roots, one endpoint, awscrt's S3 client.
Its PUTs, LISTs and small requests; the s3 engine's GETs are iodl.s3http's (a time to first byte,
3-4x less CPU per GB than this client's).

awscrt (the `s3` extra) was chosen by measurement (bench/results/s3-client.md): per request it
costs the client 3-6x less CPU than boto3, and with the body written by its own threads
(recv_filepath) ~2x less per GB. This module is imported only for an s3:// root: awscrt's
native library would cost every rank of a file run memory for nothing.

Credentials come from awscrt's default chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, then the config and credentials files (AWS_PROFILE, AWS_CONFIG_FILE,
AWS_SHARED_CREDENTIALS_FILE). They never pass through iodl's arguments, and no message iodl makes
names anything but the endpoint, bucket and key: a server's error is reduced to its status and
S3 error code. Addressing is path-style (http://ENDPOINT/BUCKET/KEY), which every S3 server takes,
or virtual-host style (http://BUCKET.ENDPOINT/KEY: s3root.virtual_host).
The CRT's own retries are off: iodl counts each attempt it makes (S3Store.retries).
"""
from __future__ import annotations

import io
import os
import re
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
import xml.etree.ElementTree as ET
from urllib.parse import quote, urlsplit

from .errors import IodlError, UsageError

try:
    from awscrt import auth, http, io as crt_io, s3
    from awscrt.exceptions import AwsCrtError
except ImportError:   # the s3 extra is optional: without it an s3:// root is one line, not a traceback
    raise UsageError("s3:// roots need the s3 extra (awscrt): pip install 'iodl[s3]'") from None

from .s3http import IO_TIMEOUT_S, check_tls
from .s3root import ca_bundle, region, virtual_host

# objects above this are written in parts of PART_SIZE (S3's parts are 5 MiB .. 5 GiB, at most 10,000)
MULTIPART_THRESHOLD = 64 << 20
PART_SIZE = 16 << 20
LIST_PAGE = 1000               # keys per ListObjectsV2 page (max-keys): S3's default and largest
RETRIES = 3                    # attempts after the first, for 5xx (SlowDown, InternalError) and dropped connections
BACKOFF_S = 0.2
NO_CREDENTIALS = "no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"


class _Hung(Exception):
    """A request with no progress for IO_TIMEOUT_S: the server is hung (cancelled, not retried)."""


class S3Error(IodlError):
    """A request that failed for good: one line naming the endpoint, the operation and the object."""

    def __init__(self, endpoint: str, op: str, url: str, why: str, status: int | None = None, code: str = ""):
        super().__init__(f"{endpoint}: {op} {url}: {why}")
        self.status, self.code = status, code


def _s3_code(body: bytes | None) -> str:
    """The <Code> of an S3 error document (SignatureDoesNotMatch, NoSuchBucket...); nothing else of it
    is kept, as a server may echo request details there."""
    m = re.search(rb"<Code>([A-Za-z0-9.]{1,64})</Code>", body or b"")
    return m.group(1).decode() if m else ""


# CRT errors that stand for an S3 answer the CRT keeps to itself: radosgw's 503 SlowDown arrives as
# AWS_ERROR_S3_SLOW_DOWN, with neither its status nor its error document
_CRT_ANSWERS = {"AWS_ERROR_S3_SLOW_DOWN": (503, "SlowDown")}


def _answer(status: int | None, error_name: str, body: bytes | None) -> tuple[int | None, str]:
    """(HTTP status, S3 code) of a failed request, from the answer or from the CRT's name for it."""
    crt_status, crt_code = _CRT_ANSWERS.get(error_name, (None, ""))
    return status or crt_status, _s3_code(body) or crt_code


def _retryable(status: int | None, error_name: str) -> bool:
    if status is not None:
        return status >= 500          # 503 SlowDown, 500 InternalError; a 4xx is an answer
    return error_name != "AWS_ERROR_S3_CANCELED"


def _wait(done, moved: list) -> None:
    """Until the request `done` ends (its error raised); _Hung, the request cancelled, once nothing
    of it moved (moved[0]: the last body bytes sent or answer bytes received) for IO_TIMEOUT_S: the
    CRT's S3 client has no read timeout of its own, and waited on a SIGSTOPped server for good."""
    while True:
        try:
            return done.finished_future.result(timeout=1.0)
        except FutureTimeout:
            if time.monotonic() - moved[0] >= IO_TIMEOUT_S:
                done.cancel()
                raise _Hung() from None


def _tls_options():
    """The CRT's TLS settings: s3root.ca_bundle's CAs in place of the system's (None: the system's),
    the trust s3http's GETs have."""
    bundle = ca_bundle()
    if bundle is None:
        return None
    options = crt_io.TlsContextOptions()
    options.override_default_trust_store_from_path(ca_filepath=bundle[0])
    return crt_io.ClientTlsContext(options).new_connection_options()


class S3Store:
    """One endpoint's client (requests from any thread; callbacks on the CRT's threads)."""

    def __init__(self, endpoint: str, inflight: int = 8, addressing: str = "path"):
        # addressing: s3root.ADDRESSING, resolved per bucket (s3root.virtual_host)
        self.endpoint, self.addressing = endpoint, addressing
        parts = urlsplit(endpoint)
        self.host = parts.netloc
        self._elg = crt_io.EventLoopGroup(2)
        boot = crt_io.ClientBootstrap(self._elg, crt_io.DefaultHostResolver(self._elg))
        creds = auth.AwsCredentialsProvider.new_default_chain(boot)
        signing = s3.create_default_s3_signing_config(region=region(), credential_provider=creds)
        tls, tls_options = s3.S3RequestTlsMode.DISABLED, None
        if parts.scheme == "https":
            check_tls(endpoint)
            tls, tls_options = s3.S3RequestTlsMode.ENABLED, _tls_options()
        self.client = s3.S3Client(bootstrap=boot, region=region(), tls_mode=tls, tls_connection_options=tls_options,
                                  signing_config=signing,
                                  part_size=PART_SIZE, multipart_upload_threshold=MULTIPART_THRESHOLD,
                                  max_active_connections_override=max(1, inflight),
                                  retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
        self.lock = threading.Lock()
        self.retries = 0              # attempts repeated after a 5xx or a dropped connection
        self.errors = 0               # requests that failed for good
        self.lists = 0                # ListObjectsV2 pages asked for (each one request)
        self.list_s = 0.0             # ... and the seconds they took, one after another

    # --- one request, blocking ---------------------------------------------------------------------

    def target(self, bucket: str, key: str = "", query: str = "") -> tuple[str, str]:
        """(Host header, path) of a request: path-style HOST /BUCKET/KEY, or virtual-host style
        BUCKET.HOST /KEY (the CRT connects to the host the Host header names)."""
        key_path = f"/{quote(key, safe='/~')}" if key else ""
        query = f"?{query}" if query else ""
        if virtual_host(self.addressing, self.endpoint, bucket):
            return f"{bucket}.{self.host}", (key_path or "/") + query
        return self.host, f"/{bucket}{key_path}{query}"

    def request(self, method: str, bucket: str, key: str = "", *, query: str = "", body: bytes | None = None,
                send_file: str | None = None, op: str = "", ok_missing: bool = False):
        """(status, headers, body bytes) of one request, retried on 5xx and dropped connections;
        send_file: a PUT of that file (multipart above MULTIPART_THRESHOLD). ok_missing: a 404 is
        an answer (status 404), not an error."""
        url = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
        op = op or method
        for attempt in range(RETRIES + 1):
            try:
                return self._once(method, bucket, key, query, body, send_file, op)
            except _Hung:
                with self.lock:
                    self.errors += 1
                raise S3Error(self.endpoint, op, url, f"ETIMEDOUT: no answer in {IO_TIMEOUT_S:g} s") from None
            except AwsCrtError as exc:
                status, code = _answer(getattr(exc, "status_code", None), exc.name, getattr(exc, "body", None))
                if status == 404 and ok_missing:
                    return 404, {}, b""
                if attempt < RETRIES and _retryable(status, exc.name):
                    with self.lock:
                        self.retries += 1
                    time.sleep(BACKOFF_S * (1 << attempt))
                    continue
                with self.lock:
                    self.errors += 1
                why = f"HTTP {status}" + (f" {code}" if code else "") if status else exc.name
                if status == 403 or code in ("SignatureDoesNotMatch", "InvalidAccessKeyId"):
                    why += " (refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS credentials file)"
                if exc.name == "AWS_AUTH_CREDENTIALS_PROVIDER_CHAIN_ALL_PROVIDERS_FAILED" or "CREDENTIAL" in exc.name:
                    why = NO_CREDENTIALS
                raise S3Error(self.endpoint, op, url, why, status, code) from None
        raise AssertionError("unreachable")

    def _once(self, method, bucket, key, query, body, send_file, op):
        host, path = self.target(bucket, key, query)
        headers = http.HttpHeaders([("host", host)])
        stream = None
        if body is not None:
            headers.add("content-length", str(len(body)))
            stream = io.BytesIO(body)
        elif method == "PUT" and send_file is None:
            headers.add("content-length", "0")
        req = http.HttpRequest(method, path, headers, stream)
        got, answer, moved = [], {}, [time.monotonic()]

        def on_headers(status_code, headers):
            moved[0] = time.monotonic()
            answer["status"], answer["headers"] = status_code, {k.lower(): v for k, v in headers}

        def on_body(chunk, offset):
            moved[0] = time.monotonic()
            got.append(bytes(chunk))

        def on_progress(n):
            moved[0] = time.monotonic()

        if send_file is not None:
            req.headers.add("content-length", str(os.path.getsize(send_file)))
            done = self.client.make_request(type=s3.S3RequestType.PUT_OBJECT, request=req, send_filepath=send_file,
                                            on_headers=on_headers, on_progress=on_progress)
        else:
            done = self.client.make_request(type=s3.S3RequestType.DEFAULT, request=req, operation_name=op,
                                            on_headers=on_headers, on_body=on_body, on_progress=on_progress)
        _wait(done, moved)
        return answer.get("status", 200), answer.get("headers", {}), b"".join(got)

    # --- what generate needs -------------------------------------------------------------------------

    def head(self, bucket: str, key: str) -> int | None:
        """An object's size, or None when there is none."""
        status, headers, _ = self.request("HEAD", bucket, key, ok_missing=True)
        return None if status == 404 else int(headers.get("content-length", 0))

    def get(self, bucket: str, key: str) -> bytes | None:
        status, _, body = self.request("GET", bucket, key, ok_missing=True)
        return None if status == 404 else body

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.request("PUT", bucket, key, body=body)

    def put_file(self, bucket: str, key: str, path: str) -> None:
        self.request("PUT", bucket, key, send_file=path)

    def list(self, bucket: str, prefix: str, limit: int = 0):
        """(key, size) of the objects under prefix (ListObjectsV2, page by page); limit: stop after that many."""
        token, n = None, 0
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        while True:
            query = f"list-type=2&max-keys={LIST_PAGE}&prefix=" + quote(prefix, safe="") + (
                "&continuation-token=" + quote(token, safe="") if token else "")
            t0 = time.perf_counter()
            _status, _h, body = self.request("GET", bucket, query=query, op="LIST")
            with self.lock:
                self.lists += 1
                self.list_s += time.perf_counter() - t0
            root = ET.fromstring(body)
            for c in root.iter(ns + "Contents"):
                yield c.findtext(ns + "Key"), int(c.findtext(ns + "Size") or 0)
                n += 1
                if limit and n >= limit:
                    return
            if root.findtext(ns + "IsTruncated") != "true":
                return
            token = root.findtext(ns + "NextContinuationToken")

    def close(self) -> None:
        self.client = None
