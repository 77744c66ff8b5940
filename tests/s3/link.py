"""A link of known speed to an S3 server: the server in a network namespace of its own, joined to
the host by a veth pair shaped with `tc qdisc ... tbf` both ways (the host side shapes what the host
sends: PUTs; the namespace side what the server sends: GETs). The veth's counters are the bytes that
crossed it. Names carry the branch's mark (iodl-s3, i27) and are removed on close. Each link has a
link-local /30 of its own (169.254.NET.0/30), so that several can be up at once.

payload_rate() is the link's measured GET payload rate: a plain loop of awscrt's S3 client (no
iodl code), the figure iodl's own bandwidth is held to."""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager

from tests.conftest import require_or_skip
from tests.s3.server import Seaweed, weed_missing


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def require() -> None:
    """Skip (or fail, where IODL_REQUIRE asks for them) unless weed mini and a shaped veth can be had."""
    why = weed_missing()
    require_or_skip("s3", why is None, f"s3: {why}")
    why = usable()
    require_or_skip("root", why is None, f"root: {why}")


def usable() -> str | None:
    """None when this machine can make the link (root, ip netns, veth, tbf), else why not."""
    # named by the process: two xdist workers may probe at once (tests/conftest.py's SHARES_SLEEP)
    probe = Link(f"iodl-s3-probe-{os.getpid()}", f"iodlp{os.getpid() % 100000}", 200, net=76)
    try:
        probe.open()
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot make a shaped veth to a namespace: {getattr(exc, 'stderr', '') or exc}".strip()
    finally:
        probe.close()
    return None


BURST_KB = 256   # tbf's bucket: bytes of frames the link sends at once after it idled long enough to fill it


class Link:
    def __init__(self, ns: str, veth: str, mbit: int, net: int = 77):
        self.ns, self.host_dev, self.ns_dev, self.mbit = ns, veth + "h", veth + "n", mbit
        self.host_ip, self.ns_ip = f"169.254.{net}.1", f"169.254.{net}.2"

    def open(self) -> "Link":
        _ip("ip", "netns", "add", self.ns)
        _ip("ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev)
        _ip("ip", "link", "set", self.ns_dev, "netns", self.ns)
        _ip("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_dev)
        _ip("ip", "link", "set", self.host_dev, "up")
        _ip("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_dev, ns=self.ns)
        _ip("ip", "link", "set", self.ns_dev, "up", ns=self.ns)
        _ip("ip", "link", "set", "lo", "up", ns=self.ns)
        for dev, ns in ((self.host_dev, None), (self.ns_dev, self.ns)):
            _ip("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.mbit}mbit", "burst", f"{BURST_KB}kb",
                "latency", "100ms", ns=ns)
        return self

    def counters(self) -> dict[str, int]:
        """The host side's tx/rx bytes and packets (tx: host -> server)."""
        out = {}
        for name in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
            with open(f"/sys/class/net/{self.host_dev}/statistics/{name}") as f:
                out[name] = int(f.read())
        return out

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


@contextmanager
def wire_clock(links, every_s: float = 0.002):
    """The links' host-side byte counters looked at every ~2 ms while the block runs, by a thread:
    yields the list it fills with (time.monotonic(), [link 0's tx, rx, link 1's tx, rx, ...])."""
    fds = [os.open(f"/sys/class/net/{link.host_dev}/statistics/{name}", os.O_RDONLY)
           for link in links for name in ("tx_bytes", "rx_bytes")]
    rows: list[tuple[float, list[int]]] = []
    done = threading.Event()

    def look() -> None:
        rows.append((time.monotonic(), [int(os.pread(fd, 32, 0)) for fd in fds]))

    def sample() -> None:
        while not done.wait(every_s):
            look()

    look()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield rows
    finally:
        done.set()
        sampler.join()
        look()
        for fd in fds:
            os.close(fd)


def bulk_rate(rows, column: int, payload: int, edge: float = 0.02) -> float:
    """MB/s of payload through one counter of wire_clock's rows (column: link * 2, + 1 for rx): the
    counter's rise from `edge` to 1 - `edge` of all it rose over the rows, timed where it crossed
    each (between two looks, as if at an even rate), as payload bytes (the wire's headers are the same
    share of every byte of a bulk transfer). The link's own rate while it carried the run: its ends,
    where a request waits for its first byte or its answer, are left out."""
    first, total = rows[0][1][column], rows[-1][1][column] - rows[0][1][column]

    def crossed(level: float) -> float:
        for (t0, a), (t1, b) in zip(rows, rows[1:]):
            lo, hi = a[column] - first, b[column] - first
            if hi >= level:
                return t0 + (t1 - t0) * ((level - lo) / (hi - lo) if hi > lo else 1.0)
        raise AssertionError(f"the counter never rose to {level:.0f} bytes")

    return (1 - 2 * edge) * payload / (crossed((1 - edge) * total) - crossed(edge * total)) / 1e6


@contextmanager
def linked_servers(name: str, rates_mbit, net: int, bucket: str, top: str | None = None):
    """A SeaweedFS per rate, each in a namespace of its own behind a link of that rate (names NAME0,
    NAME1..., nets NET, NET+1...), one identity for all (one environment runs against every one), the
    bucket made on each: [(link, server)]. Servers are started one after the other (each takes its
    ports as it starts) and killed at the end (their data is the test's: no graceful stop, ~4 s).
    top: where their directories go (default $TMPDIR)."""
    up = []
    try:
        for i, mbit in enumerate(rates_mbit):
            link = Link(f"iodl-{name}{i}", f"{name.replace('-', '')[:10]}{i}", mbit, net=net + i).open()
            up.append((link, None))
            keys = (up[0][1].access_key, up[0][1].secret_key) if i else None
            server = Seaweed(tempfile.mkdtemp(prefix=f"iodl-{name}-", dir=top), ip=link.ns_ip, netns=link.ns, keys=keys)
            up[-1] = (link, server)
            server.start()
            server.client().create_bucket(Bucket=bucket)
        yield up
    finally:
        for link, server in up:
            if server is not None:
                server.kill()
                server.remove()
            link.close()


def crt_client(server, inflight: int, part_size: int | None = None):
    """A bare awscrt S3Client to server with its keys (no iodl code): the tests' plain loops. With
    part_size, a PUT_OBJECT request larger than it is the client's own multipart upload of such parts."""
    from awscrt import auth, io, s3

    elg = io.EventLoopGroup(2)
    boot = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    creds = auth.AwsCredentialsProvider.new_static(server.access_key, server.secret_key)
    return s3.S3Client(bootstrap=boot, region="us-east-1", tls_mode=s3.S3RequestTlsMode.DISABLED,
                       signing_config=s3.create_default_s3_signing_config(region="us-east-1", credential_provider=creds),
                       max_active_connections_override=inflight, part_size=part_size,
                       multipart_upload_threshold=part_size)


def payload_rate(server, bucket: str, key: str, size: int, *, part: int = 1 << 20, inflight: int = 8,
                 ramp_s: float = 1.0, seconds: float = 4.0, arrived: bool = False) -> float:
    """MB/s of GET bodies through server's link: ranged GETs of `part` over the object key (size
    bytes), `inflight` at once, by a bare awscrt S3Client loop; bytes of the GETs completed in
    [ramp_s, ramp_s + seconds] over seconds (the window iodl's storage-only counts in). That count
    moves by whole GETs, and GETs sharing the link end in bunches (8 x 1 MiB in 4 s: up to ~9%);
    arrived: the bytes of bodies as they arrive in the window instead, the link's own rate."""
    from awscrt import http, s3

    client = crt_client(server, inflight)
    host = server.endpoint.split("//", 1)[1]
    lock, outstanding, counted, errors = threading.Condition(), [0], [0], []
    t0 = time.monotonic()
    lo, hi = t0 + ramp_s, t0 + ramp_s + seconds

    def get(i: int) -> None:
        offset = (i * part) % (size - part + 1)
        got = [0]
        req = http.HttpRequest("GET", f"/{bucket}/{key}", http.HttpHeaders(
            [("host", host), ("range", f"bytes={offset}-{offset + part - 1}")]))

        def on_body(chunk, offset):
            got[0] += len(chunk)
            if arrived and lo <= time.monotonic() <= hi:
                with lock:
                    counted[0] += len(chunk)

        def on_done(error=None, **_):
            now = time.monotonic()
            again = error is None and now < hi
            with lock:
                if error is None and lo <= now <= hi and not arrived:
                    counted[0] += got[0]
                outstanding[0] -= not again
                if error is not None:
                    errors.append(error)
                lock.notify()
            if again:
                get(i + inflight)

        client.make_request(type=s3.S3RequestType.DEFAULT, request=req, operation_name="GetObject", on_body=on_body,
                            on_done=on_done)

    outstanding[0] = inflight
    for i in range(inflight):
        get(i)
    with lock:   # every loop ends past hi (or on an error)
        assert lock.wait_for(lambda: outstanding[0] == 0, timeout=ramp_s + seconds + 60), "GETs did not finish"
    assert not errors, errors[0]
    return counted[0] / seconds / 1e6
