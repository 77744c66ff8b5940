"""An https S3 server for the tests: SeaweedFS's gateway given a certificate of a private CA made
here (openssl), and the server's own request counters.

`Pki` makes a CA and a certificate for an IP (127.0.0.1 unless told) signed by it (P-256 keys, two days), and a second
CA that signed nothing (a bundle that does not trust the server). `TlsSeaweed` is tests/s3/server.py's
`weed mini` with `-s3.cert.file`/`-s3.key.file`: its S3 port then speaks https only; `TlsRadosGW`
the https front end of tests/s3/radosgw.py's cluster (beast's ssl_endpoint beside its plain one). `counts()`
reads the gateway's Prometheus counters (weed mini's -metricsPort): requests per bucket, type
(GET, PUT, LIST...) and HTTP status, counted by the server as it answers them — what the server
says it was asked, to hold iodl's counts to.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections import Counter

from tests.s3.radosgw import RadosGW
from tests.s3.server import Seaweed

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: str) -> None:
    proc = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"openssl {args[0]}: {proc.stderr.strip()}")


class Pki:
    """ca: the CA's certificate (a bundle that trusts the server); cert, key: the server's;
    other_ca: a CA's certificate that did not sign it."""

    def __init__(self, top: str, ip: str = "127.0.0.1"):
        os.makedirs(top, exist_ok=True)
        self.ca, self.other_ca = os.path.join(top, "ca.pem"), os.path.join(top, "other-ca.pem")
        self.cert, self.key = os.path.join(top, "server.pem"), os.path.join(top, "server.key")
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        ca_ext = ("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        for name in ("ca", "other-ca"):
            _openssl("req", "-x509", *ec, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
                     "-subj", f"/CN=iodl test {name}", *ca_ext, cwd=top)
        with open(os.path.join(top, "server.ext"), "w") as f:
            f.write(f"subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                    "extendedKeyUsage=serverAuth\n")
        _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={ip}", cwd=top)
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-out", "server.pem",
                 "-days", "2", "-set_serial", str(secrets.randbits(63)), "-extfile", "server.ext", cwd=top)


class TlsSeaweed(Seaweed):
    """weed mini whose S3 gateway serves https with pki's certificate; endpoint https://IP:PORT."""

    SCHEME = "https"

    def __init__(self, top: str, pki: Pki):
        super().__init__(top)
        self.pki = pki

    def argv(self) -> list[str]:
        return [*super().argv(), f"-s3.cert.file={self.pki.cert}", f"-s3.key.file={self.pki.key}"]

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=1,
                                   context=ssl.create_default_context(cafile=self.pki.ca))
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def env(self, ca: str | None = "ca") -> dict:
        """An iodl run's environment: the server's keys, and AWS_CA_BUNDLE: the server's CA ("ca"), the CA
        that did not sign it ("other_ca"), or none (None: the system's trust store)."""
        env = Seaweed.env(self)
        if ca:
            env["AWS_CA_BUNDLE"] = getattr(self.pki, ca)
        return env

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", verify=self.pki.ca,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}))


class TlsRadosGW:
    """The https front end of a tests/s3/radosgw.py cluster started with a Pki (beast's ssl_endpoint
    beside its plain endpoint, pki's certificate): the same user; endpoint https://IP:SSL_PORT."""

    def __init__(self, server: RadosGW):
        self.pki, self.ip, self.port = server.pki, server.ip, server.ssl_port
        self.access_key, self.secret_key = server.access_key, server.secret_key
        self.endpoint = f"https://{self.ip}:{self.port}"

    _answers = TlsSeaweed._answers
    env = TlsSeaweed.env
    client = TlsSeaweed.client


_SAMPLE = re.compile(r'^SeaweedFS_s3_request_total\{bucket="([^"]*)",code="(\d+)",type="([A-Z]+)"\} (\S+)$', re.M)


def counts(server: Seaweed, bucket: str) -> Counter:
    """(type, HTTP status) -> requests the server's S3 gateway answered for bucket, so far."""
    text = urllib.request.urlopen(f"http://{server.ip}:{server.base + 7}/metrics", timeout=5).read().decode()
    return Counter({(kind, int(code)): int(float(n)) for b, code, kind, n in _SAMPLE.findall(text) if b == bucket})
