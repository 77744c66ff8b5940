"""A link of known speed to an S3 server: the server in a network namespace of its own, joined to
the host by a veth pair shaped with `tc qdisc ... tbf` both ways (the host side shapes what the host
sends: PUTs; the namespace side what the server sends: GETs). The veth's counters are the bytes that
crossed it. Names carry the branch's mark (iodl-s3) and are removed on close."""
from __future__ import annotations

import subprocess

HOST_IP, NS_IP = "169.254.77.1", "169.254.77.2"


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def usable() -> str | None:
    """None when this machine can make the link (root, ip netns, veth, tbf), else why not."""
    probe = Link("iodl-s3-probe", "iodls3p", 200)
    try:
        probe.open()
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot make a shaped veth to a namespace: {getattr(exc, 'stderr', '') or exc}".strip()
    finally:
        probe.close()
    return None


class Link:
    def __init__(self, ns: str, veth: str, mbit: int):
        self.ns, self.host_dev, self.ns_dev, self.mbit = ns, veth + "h", veth + "n", mbit

    def open(self) -> "Link":
        _ip("ip", "netns", "add", self.ns)
        _ip("ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev)
        _ip("ip", "link", "set", self.ns_dev, "netns", self.ns)
        _ip("ip", "addr", "add", f"{HOST_IP}/30", "dev", self.host_dev)
        _ip("ip", "link", "set", self.host_dev, "up")
        _ip("ip", "addr", "add", f"{NS_IP}/30", "dev", self.ns_dev, ns=self.ns)
        _ip("ip", "link", "set", self.ns_dev, "up", ns=self.ns)
        _ip("ip", "link", "set", "lo", "up", ns=self.ns)
        for dev, ns in ((self.host_dev, None), (self.ns_dev, self.ns)):
            _ip("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.mbit}mbit", "burst", "256kb",
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
