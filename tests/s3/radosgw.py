"""A second real S3 server for the tests: Ceph's radosgw over a one-node cluster of its own.

Debian's packages (radosgw, ceph-mon, ceph-osd, ceph-common; .ci/run installs them). One monitor,
one OSD keeping its objects in memory (memstore: nothing on disk but the monitor's small store), no
manager, and radosgw's beast front end, every daemon in the foreground of a process group of its own
with its configuration, sockets, logs and data in one directory. The cluster runs without cephx
(a throwaway cluster on loopback); S3 requests are signed with one user's keys, made fresh per server
so a test can look for the secret in what iodl writes.

Beside SeaweedFS (tests/s3/server.py) it keeps iodl from being tuned to one server's quirks. Facts
that shape the configuration: with authentication off the clients must speak msgr2 in crc mode (in
legacy mode they wait 30 s for an answer that never comes); beast without tcp_nodelay holds a small
GET on a kept-alive connection ~40 ms (Nagle against delayed ACK); one OSD needs pools of size 1.
Interface as Seaweed's: endpoint, access_key, secret_key, start/stop/kill/remove, env(), client().
`netns`: every daemon in that network namespace (the monitor on its loopback, radosgw on `ip`).
`pki` (tests/s3/tls.py's): beast serves https too, beside the plain endpoint, on `ssl_port` with its
certificate (one cluster for the plain and the https tests).
The monitor proposes each map change at once (`paxos propose interval` 0.05 s, Ceph's default 1 s):
the OSD's boot and the pools radosgw and the first bucket make are a dozen map changes in a row, and
the start to a first PUT and GET took 17.3 s with the default, 2.3 s with it. Nothing changes the
maps once the tests run, so what the tests measure is the same cluster's.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid

from tests.s3.server import Seaweed, _free

DAEMONS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
START_TIMEOUT_S = 90


def radosgw_missing() -> str | None:
    """None when a one-node Ceph with radosgw can run here, else why not (the radosgw capability's probe)."""
    gone = [d for d in DAEMONS if shutil.which(d) is None]
    if gone:
        return f"no {', '.join(gone)} (apt-get install radosgw ceph-mon ceph-osd ceph-common)"
    if os.geteuid() != 0:
        return "the one-node Ceph cluster is started as root"
    return None


def _free_port(ip: str, start: int) -> int:
    for port in range(start + os.getpid() % 500 * 2, 60000, 2):
        if _free(ip, port) and _free(ip, port + 1):
            return port
    raise RuntimeError("no free port for the Ceph cluster")


class RadosGW:
    """One monitor, one memstore OSD and one radosgw, with one S3 user."""

    def __init__(self, top: str, ip: str = "127.0.0.1", netns: str | None = None, pki=None):
        self.top, self.ip, self.netns, self.pki = top, ip, netns, pki
        self.access_key = "IODLRGW" + secrets.token_hex(6).upper()
        self.secret_key = secrets.token_urlsafe(30)
        # a namespace of its own is empty: its ports are free, and the host cannot bind its address to check
        self.mon_port = 6789 if netns else _free_port("127.0.0.1", 26000)
        self.port = 7480 if netns else _free_port(ip, 27000)
        self.endpoint = f"http://{ip}:{self.port}"
        self.ssl_port = (443 if netns else _free_port(ip, 28000)) if pki else None
        self.conf = os.path.join(top, "ceph.conf")
        self.procs: dict[str, subprocess.Popen] = {}

    # the same checks and the same client set-up as SeaweedFS's: they use endpoint and keys only
    _answers = Seaweed._answers
    env = Seaweed.env
    client = Seaweed.client

    def _config(self) -> str:
        d = self.top
        frontends = f"beast endpoint={self.ip}:{self.port}"
        if self.pki:
            frontends += (f" ssl_endpoint={self.ip}:{self.ssl_port} ssl_certificate={self.pki.cert}"
                          f" ssl_private_key={self.pki.key}")
        return f"""[global]
fsid = {uuid.uuid4()}
mon host = v2:127.0.0.1:{self.mon_port}
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
client mount timeout = 30
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
paxos propose interval = 0.05
run dir = {d}/run
log file = {d}/log/$name.log
mon cluster log file = {d}/log/$cluster.$channel.log
crash dir = {d}/crash
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
mon data = {d}/mon.$id
osd data = {d}/osd.$id
osd objectstore = memstore
memstore device bytes = {2 << 30}
[client.rgw.iodl]
rgw frontends = {frontends} tcp_nodelay=1
rgw data = {d}/rgw
"""

    def _argv(self, *args: str) -> list[str]:
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + list(args)

    def _run(self, *args: str) -> str:
        proc = subprocess.run(self._argv(*args), capture_output=True, text=True, timeout=60)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(args[:3])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return proc.stdout

    def _daemon(self, name: str, *args: str) -> None:
        with open(os.path.join(self.top, "log", f"{name}.out"), "wb") as out:
            self.procs[name] = subprocess.Popen(self._argv(*args, "-f", "-c", self.conf), cwd=self.top, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> "RadosGW":
        for sub in ("run", "log", "mon.a", "osd.0", "rgw"):
            os.makedirs(os.path.join(self.top, sub), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(self._config())
        try:
            fsid = next(ln.split("=")[1].strip() for ln in self._config().splitlines() if ln.startswith("fsid"))
            monmap = os.path.join(self.top, "monmap")
            self._run("monmaptool", "--create", "--addv", "a", f"[v2:127.0.0.1:{self.mon_port}]", "--fsid", fsid,
                      "--clobber", monmap)
            self._run("ceph-mon", "-c", self.conf, "--mkfs", "-i", "a", "--monmap", monmap)
            self._daemon("mon", "ceph-mon", "-i", "a")
            osd = self._run("ceph", "-c", self.conf, "osd", "create").strip()
            self._run("ceph-osd", "-c", self.conf, "-i", osd, "--mkfs")
            self._daemon("osd", "ceph-osd", "-i", osd)
            self._wait(lambda: "1 up" in self._run("ceph", "-c", self.conf, "osd", "stat"), "the OSD")
            self._daemon("rgw", "radosgw", "-n", "client.rgw.iodl")
            self._wait(self._answers, f"radosgw on {self.endpoint}")
            self._run("radosgw-admin", "-c", self.conf, "user", "create", "--uid=iodl-test", "--display-name=iodl-test",
                      f"--access-key={self.access_key}", f"--secret={self.secret_key}")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} while waiting for {what}: {self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} not up in {START_TIMEOUT_S} s")

    def log_tail(self, name: str = "rgw") -> str:
        try:
            with open(os.path.join(self.top, "log", f"{name}.out"), errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-3:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL radosgw (a fault test's server gone mid-run); the cluster behind it stays."""
        proc = self.procs.get("rgw")
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        for name in ("rgw", "osd", "mon"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.top, ignore_errors=True)
