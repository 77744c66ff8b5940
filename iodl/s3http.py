"""A signed S3 GET on a kept-alive HTTP/1.1 connection of Python's own sockets: the s3 engine's client.

Why not awscrt's S3Client, which iodl's PUTs, LISTs and small requests use (iodl.s3store): it hands a
GET's response headers over only once the body is in, so it cannot tell a time to first byte; and
its body comes to Python in the CRT's 16 KiB reads, copied twice. Here the body is read with
recv_into into one buffer per connection, the GIL released while the kernel copies, and dropped:
bench/results/s3-ttfb.md measured 8 MiB GETs one at a time at 0.19-0.25 CPU s/GB against the
S3Client's 0.66-0.88 and awscrt.http's 1.07-1.35, and the first response byte at the time it
arrives. Requests are signed (SigV4, headers) by awscrt.auth from the same default credentials
chain as the S3Client's.

A connection serves one request at a time (no pipelining). One that the server closed while idle
is found on the next request, before any byte of an answer, and that request is sent once more
on a new connection: not a retry of the request (the server never saw it), so not counted as one.
"""
from __future__ import annotations

import functools
import math
import os
import socket
import ssl
from urllib.parse import urlsplit

from awscrt import auth, http, io as crt_io

from .errors import IodlError, UsageError
from .s3root import ca_bundle, region


def _io_timeout_s() -> float:
    """IODL_S3_IO_TIMEOUT, seconds (default 10; docs/s3.md): a gateway known to sit silent longer
    than that on a healthy request is given more. Read with the credentials, from the environment:
    every rank of a job sees the same."""
    text = os.environ.get("IODL_S3_IO_TIMEOUT", "10")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.1 <= value <= 3600:   # nan fails both
        raise UsageError(f"IODL_S3_IO_TIMEOUT={text!r}: a number of seconds from 0.1 to 3600")
    return value


# a server that sends nothing for this long is hung (SIGSTOPped, wedged): the GET fails for good
# (ETIMEDOUT, not retried: another attempt would wait on the same server), and the run ends in one
# line. 30 s retried 3 times took 2 min to end a run on a stopped server. s3store's requests
# (PUTs, LISTs, small GETs) use it too: one with no progress for this long is cancelled
IO_TIMEOUT_S = _io_timeout_s()
ERROR_BODY_MAX = 64 << 10   # of an error answer, kept for its S3 <Code>; a 2xx body is counted and dropped
_HEAD_MAX = 64 << 10


@functools.cache
def tls_context() -> tuple[ssl.SSLContext, str]:
    """The https trust of every request iodl makes (these GETs; s3store gives the CRT the same file):
    (the context, what it trusts: the system's store, or s3root.ca_bundle's CAs alone)."""
    bundle = ca_bundle()
    if bundle is None:
        return ssl.create_default_context(), "the system's CAs"
    return ssl.create_default_context(cafile=bundle[0]), f"the CAs of {bundle[1]} ({bundle[0]})"


_CHECKED: set[str] = set()


def check_tls(endpoint: str) -> None:
    """Once per process and https endpoint: a TLS handshake with tls_context()'s trust, so that a
    certificate it does not trust (or a server that does not speak TLS) is one line now, not retried.
    The CRT's S3 client, failing the same handshake, says only AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE,
    and 10-30 s late (s2n's blinding delay: 19.4 s measured), past IO_TIMEOUT_S, as if the server
    were hung. A server silent for IO_TIMEOUT_S is hung here too; a connection that fails otherwise
    (refused, reset) is left to the requests (retried, named per object)."""
    if endpoint in _CHECKED or not endpoint.startswith("https://"):
        return
    context, trusted = tls_context()
    where = urlsplit(endpoint)
    try:
        with socket.create_connection((where.hostname, where.port or 443), timeout=IO_TIMEOUT_S) as sock:
            context.wrap_socket(sock, server_hostname=where.hostname).close()
    except ssl.SSLCertVerificationError as exc:
        raise IodlError(f"{endpoint}: the server's certificate is not trusted ({exc.verify_message}; checked "
                        f"against {trusted}): give its CA as AWS_CA_BUNDLE=FILE or ca_bundle = FILE in the AWS "
                        "config file's profile (docs/s3.md)") from None
    except ssl.SSLError as exc:
        raise IodlError(f"{endpoint}: the TLS handshake failed ({exc.reason or exc}): does it serve https?") from None
    except socket.timeout:   # hung: the requests would wait as long again before saying so
        raise IodlError(f"{endpoint}: ETIMEDOUT: no answer in {IO_TIMEOUT_S:g} s (TLS handshake)") from None
    except OSError:
        return
    _CHECKED.add(endpoint)


class HttpError(OSError):
    """The connection broke in a way the socket did not name (an answer cut short, a malformed one)."""


class Signer:
    """SigV4 headers for GETs, credentials from awscrt's default chain (environment, config and
    credentials files, ...): the same chain as iodl.s3store's client."""

    def __init__(self):
        self._elg = crt_io.EventLoopGroup(1)
        boot = crt_io.ClientBootstrap(self._elg, crt_io.DefaultHostResolver(self._elg))
        creds = auth.AwsCredentialsProvider.new_default_chain(boot)
        self._config = auth.AwsSigningConfig(
            algorithm=auth.AwsSigningAlgorithm.V4, signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=creds, region=region(), service="s3",
            signed_body_value=auth.AwsSignedBodyValue.EMPTY_SHA256,
            signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256)

    def get_request(self, host: str, path: str, first: int, last: int) -> bytes:
        """The bytes of a signed `GET path` of bytes first..last (raises AwsCrtError: no credentials)."""
        req = http.HttpRequest("GET", path, http.HttpHeaders([("host", host), ("range", f"bytes={first}-{last}")]))
        auth.aws_sign_request(req, self._config).result()
        lines = [f"GET {path} HTTP/1.1", *(f"{k}: {v}" for k, v in req.headers), "", ""]
        return "\r\n".join(lines).encode("latin-1")


class Connection:
    """One kept-alive connection to an http(s) host:port (connected on its first request)."""

    def __init__(self, scheme: str, netloc: str, buf: bytearray):
        # buf: the caller's read buffer (one per thread, reused for every body)
        where = urlsplit(f"//{netloc}")   # (an IPv6 literal's brackets off)
        self.host, self.port = where.hostname, where.port or (443 if scheme == "https" else 80)
        self.tls = scheme == "https"
        self.sock: socket.socket | None = None
        self.buf, self.view = buf, memoryview(buf)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)   # a thread blocked in recv on it wakes now
            except OSError:
                pass
            sock.close()

    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=IO_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            sock = tls_context()[0].wrap_socket(sock, server_hostname=self.host)
        self.sock = sock

    def get(self, request: bytes, clock, on_first, on_body) -> tuple[int, bytes]:
        """Send a GET and read its answer: (status, error body: b"" on 2xx). on_first(t): the clock
        when the answer's first byte arrived; on_body(n): n more bytes of the body. Raises OSError
        (socket.timeout, ConnectionRefusedError, HttpError...) when no whole answer came."""
        try:
            n = self._send(request, fresh=self.sock is None)
            if not n:   # a kept-alive connection the server had closed: the request never reached it
                n = self._send(request, fresh=True)
            if not n:
                raise HttpError("the server closed the connection without an answer")
            on_first(clock())
            return self._answer(n, on_body)
        except BaseException:
            self.close()   # its state is unknown: the next request gets a new one
            raise

    def _send(self, request: bytes, fresh: bool) -> int:
        """The request sent, the first bytes of its answer in buf: their number (0: none came)."""
        if fresh:
            self.close()
            self._connect()
        try:
            self.sock.sendall(request)
            return self.sock.recv_into(self.buf)
        except (ConnectionResetError, BrokenPipeError):
            if fresh:
                raise
            return 0

    def _answer(self, n: int, on_body) -> tuple[int, bytes]:
        head = bytes(self.view[:n])
        while (end := head.find(b"\r\n\r\n")) < 0:
            if len(head) > _HEAD_MAX:
                raise HttpError("an answer's headers too long")
            head += self._recv_some()
        lines = head[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
        rest = head[end + 4:]
        keep = not 200 <= status < 300
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked(rest, on_body, keep)
        else:
            length = int(headers.get("content-length", 0))
            body = self._fixed(rest, length, on_body, keep)
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, body if keep else b""

    def _recv_some(self) -> bytes:
        n = self.sock.recv_into(self.buf)
        if not n:
            raise HttpError("the server closed the connection mid-answer")
        return bytes(self.view[:n])

    def _fixed(self, rest: bytes, length: int, on_body, keep: bool) -> bytes:
        if len(rest) > length:
            raise HttpError("more bytes than the answer's Content-Length")
        got, kept = len(rest), [rest] if keep else []
        if got and not keep:
            on_body(got)
        while got < length:
            n = self.sock.recv_into(self.buf, min(len(self.buf), length - got))
            if not n:
                raise HttpError(f"the server closed the connection after {got} of {length} body bytes")
            got += n
            if not keep:
                on_body(n)
            elif sum(map(len, kept)) < ERROR_BODY_MAX:
                kept.append(bytes(self.view[:n]))
        return b"".join(kept)

    def _chunked(self, data: bytes, on_body, keep: bool) -> bytes:
        """A chunked body (S3 servers send error answers so; a GET's body has a Content-Length):
        kept (keep), else counted and dropped."""
        body = b""
        while True:
            while (eol := data.find(b"\r\n")) < 0:
                data += self._recv_some()
            size = int(data[:eol].split(b";")[0], 16)
            data = data[eol + 2:]
            while len(data) < size + 2:
                data += self._recv_some()
            if size == 0:   # (no trailers: S3 servers send none)
                return body
            if keep and len(body) < ERROR_BODY_MAX:
                body += data[:size]
            elif not keep:
                on_body(size)
            data = data[size + 2:]

