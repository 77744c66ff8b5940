"""The object-storage truth and fault tests again, against a second implementation: Ceph's radosgw
(tests/s3/radosgw.py), so that iodl's figures do not hold on one server's quirks alone.

One cluster for the module, in a network namespace behind a 200 Mbit/s veth (tests/s3/link.py): what
iodl says it wrote and read crossed the link (the veth's own counters, within 2% for HTTP and TCP/IP
headers), at the link's rate (within 5% of its TCP payload rate); a wrong secret, 503 SlowDown (radosgw
throttling its requests), and radosgw killed mid-read, each end in one line. The kill comes last: it takes the server away.

https on the same cluster (beast's ssl_endpoint beside the plain one, a certificate of a private CA:
tests/s3/tls.py), so that iodl's TLS is not tuned to SeaweedFS's: a dataset written and validated, a
checkpoint written and read back, what the server holds is what iodl reports; a CA not trusted is the
one line. (One cluster for both: a second one took ~15-23 s to start.)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import require_or_skip
from tests.helpers import iodl
from tests.s3.link import Link, usable
from tests.s3.radosgw import RadosGW, radosgw_missing
from tests.s3.test_checkpoint import DLIO_S3, PART, _plan
from tests.s3.test_tls import _run
from tests.s3.tls import OPENSSL, Pki, TlsRadosGW

pytestmark = pytest.mark.root

LINK_PAYLOAD_MBPS = 200e6 / 8 * 1448 / 1500 / 1e6   # TCP payload of 1500-byte frames: ~24.1 MB/s
BUCKET = "rgw-bkt"
TLS_BUCKET = "rgw-tls-bkt"


@pytest.fixture(scope="module")
def rgw():
    why = radosgw_missing()
    require_or_skip("radosgw", why is None, f"radosgw: {why}")
    why = usable()
    require_or_skip("root", why is None, f"root: {why}")
    link = Link("iodl-s3-rgw", "iodls3r", 200, net=78).open()
    top = tempfile.mkdtemp(prefix="iodl-rgw-")
    server = None
    try:
        # https beside http: without openssl the https tests skip (or fail, as IODL_REQUIRE says) in their fixture
        pki = Pki(os.path.join(top, "pki"), ip=link.ns_ip) if OPENSSL else None
        server = RadosGW(top, ip=link.ns_ip, netns=link.ns, pki=pki)
        server.start()
        server.client().create_bucket(Bucket=BUCKET)
        yield link, server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(top, ignore_errors=True)
        link.close()


@pytest.fixture(scope="module")
def written(rgw):
    """A dataset generated over the link: (the bytes of its objects, of its samples' shards alone, the
    bytes the host sent)."""
    link, server = rgw
    before = link.counters()
    # 30 shards, ~125 MB: ~5 s on the link, so the first GETs' connection set-up is ~2% of validate's span
    proc = iodl("generate", "--root", f"s3://{BUCKET}/ds", "--endpoint", server.endpoint, "--files", "30",
                "--quiet", env=server.env())
    sent = link.counters()["tx_bytes"] - before["tx_bytes"]
    assert proc.returncode == 0, proc.stderr
    assert server.secret_key not in proc.stdout + proc.stderr
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="ds/")
    objects = [o for page in pages for o in page.get("Contents", [])]
    return sum(o["Size"] for o in objects), sum(o["Size"] for o in objects if "/copy-" in o["Key"]), sent


def test_every_byte_generated_crossed_the_link(written):
    stored, _, sent = written
    assert stored > 100e6
    assert stored <= sent <= stored * 1.02, (stored, sent)


def test_validate_reads_every_byte_over_the_link_at_its_rate(rgw, written, tmp_path):
    link, server = rgw
    before = link.counters()
    proc = iodl("read", "--root", f"s3://{BUCKET}/ds", "--endpoint", server.endpoint, "--pattern", "validate",
                "--out", str(tmp_path / "v.json"), env=server.env())
    received = link.counters()["rx_bytes"] - before["rx_bytes"]
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "v.json").read_text()
    total = json.loads(text)["total"]
    assert total["bytes"] == written[1]   # validate GETs every shard once, whole
    assert total["bytes"] <= received <= total["bytes"] * 1.02, (total["bytes"], received)
    assert abs(total["bandwidth_MBps"] - LINK_PAYLOAD_MBPS) <= 0.05 * LINK_PAYLOAD_MBPS, total["bandwidth_MBps"]
    assert server.secret_key not in proc.stdout + proc.stderr + text


def test_storage_only_ranged_gets_are_the_links_rate(rgw, written, tmp_path):
    link, server = rgw
    proc = iodl("read", "--root", f"s3://{BUCKET}/ds", "--endpoint", server.endpoint, "--pattern", "storage-only",
                "--block-size", "1MiB", "--iodepth", "8", "--duration", "6", "--ramp", "2",
                "--out", str(tmp_path / "s.json"), env=server.env())
    assert proc.returncode == 0, proc.stderr
    mbps = json.loads((tmp_path / "s.json").read_text())["total"]["bandwidth_MBps"]
    assert abs(mbps - LINK_PAYLOAD_MBPS) <= 0.05 * LINK_PAYLOAD_MBPS, (mbps, LINK_PAYLOAD_MBPS)


def test_wrong_secret_is_one_line_without_the_secret(rgw):
    _, server = rgw
    wrong = "wrong-" + server.secret_key[::-1]
    proc = iodl("generate", "--root", f"s3://{BUCKET}/other", "--endpoint", server.endpoint, "--files", "2",
                env={**server.env(), "AWS_SECRET_ACCESS_KEY": wrong})
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "\n" not in line and server.endpoint in line and f"s3://{BUCKET}" in line and "HTTP 403" in line, line
    assert wrong not in proc.stdout + proc.stderr and server.secret_key not in proc.stdout + proc.stderr


def test_checkpoint_to_radosgw_crosses_the_link_at_its_rate(rgw, written, tmp_path):
    """iodl checkpoint (tests/s3/test_checkpoint*.py) against radosgw: a 48 MB model written as one
    multipart upload of 6 parts (8 MiB) and read back; both ways every byte crossed the veth (within
    2%) at the link's payload rate (within 5%). radosgw makes a pool at a bucket's first object
    (`written` has made it) and another at its first multipart upload (made here, by one begun and
    aborted): seconds that would otherwise be in the checkpoint's time."""
    link, server = rgw
    warm = server.client().create_multipart_upload(Bucket=BUCKET, Key="warm-up")
    server.client().abort_multipart_upload(Bucket=BUCKET, Key="warm-up", UploadId=warm["UploadId"])
    model = tmp_path / "flat.toml"
    model.write_text('[workload]\nname = "flat48"\n\n[model]\ntype = "cnn"\nmodel_size = "48MB"\n\n'
                     '[checkpoint]\nwrites = 1\nreads = 1\n')
    before = link.counters()
    proc = iodl("checkpoint", "--workload", str(model), "--root", f"s3://{BUCKET}/ck", "--endpoint", server.endpoint,
                "--out", str(tmp_path / "c.json"), env=server.env())
    after = link.counters()
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "c.json").read_text()
    assert server.secret_key not in proc.stdout + proc.stderr + text
    ck = json.loads(text)["checkpoint"]
    for op, key in (("write", "tx_bytes"), ("read", "rx_bytes")):
        crossed = after[key] - before[key]
        assert ck[op]["bytes"] == 48_000_000 and ck[op]["errors"] == 0
        assert ck[op]["bytes"] <= crossed <= ck[op]["bytes"] * 1.02, (op, ck[op]["bytes"], crossed)
        assert abs(ck[op]["bandwidth_MBps"] - LINK_PAYLOAD_MBPS) <= 0.05 * LINK_PAYLOAD_MBPS, (op, ck[op])
    assert ck["write"]["ios"] == 6
    head = server.client().head_object(Bucket=BUCKET, Key="ck/ckpt-000001/model_states-0.pt")
    assert head["ContentLength"] == 48_000_000 and head["ETag"].strip('"').endswith("-6")


def _connections(server) -> int:
    out = subprocess.run(["ss", "-Htn", "state", "established", "dst", f"{server.ip}:{server.port}"],
                         capture_output=True, text=True).stdout
    return len(out.splitlines())


def test_slowdown_is_retried_counted_and_named(rgw, written, tmp_path):
    """radosgw answers 503 SlowDown to requests beyond rgw_max_concurrent_requests (its throttler
    scheduler; set to 1 through the admin socket): with 8 GETs in flight, iodl retries them 3 times
    each, counts every retry, and a GET refused a fourth time ends the run in one line naming the
    answer and the object, after the partial figures. The retries are iodl's alone: awscrt's own are
    off, so none is hidden inside a GET's latency."""
    _link, server = rgw
    asok = f"{server.top}/run/client.rgw.iodl.asok"

    def throttle(n: int) -> None:
        subprocess.run(["ceph", "--admin-daemon", asok, "config", "set", "rgw_max_concurrent_requests", str(n)],
                       check=True, capture_output=True, timeout=30)

    throttle(1)
    try:
        proc = iodl("read", "--root", f"s3://{BUCKET}/ds", "--endpoint", server.endpoint, "--pattern", "storage-only",
                    "--block-size", "256KiB", "--iodepth", "8", "--duration", "3", "--ramp", "0",
                    "--out", str(tmp_path / "s.json"), env=server.env())
    finally:
        throttle(1024)
    line = proc.stderr.strip()
    assert proc.returncode == 1 and "\n" not in line, proc.stderr
    assert line.startswith("iodl: error: [Errno 5] Input/output error: HTTP 503 SlowDown after 3 retries (read of "), line
    assert f"{server.endpoint}/{BUCKET}/ds/" in line
    total = json.loads((tmp_path / "s.json").read_text())["total"]
    assert total["errors"] >= 1 and total["retries"] >= 3 and total["bytes"] > 0, total


@pytest.fixture(scope="module")
def https(rgw):
    """The module's cluster over https (its ssl_endpoint), with a bucket of its own."""
    require_or_skip("radosgw", OPENSSL is not None, "radosgw: no openssl (makes the test CA)")
    _link, server = rgw
    tls = TlsRadosGW(server)
    server._wait(tls._answers, f"radosgw's https on {tls.endpoint}")
    tls.client().create_bucket(Bucket=TLS_BUCKET)
    return tls


def test_a_dataset_and_a_checkpoint_over_https(https, tmp_path):
    """generate (4 shards) and validate read them back whole: every byte of the objects radosgw holds;
    a checkpoint written (one PUT, one 5-part upload) and read back: the objects are the plan's."""
    env = https.env()
    proc = _run("generate", "--root", f"s3://{TLS_BUCKET}/ds", "--endpoint", https.endpoint, "--files", "4", "--quiet",
                env=env)
    assert proc.returncode == 0, proc.stderr
    shards = https.client().list_objects_v2(Bucket=TLS_BUCKET, Prefix="ds/copy-")["Contents"]
    out = tmp_path / "v.json"
    proc = _run("read", "--pattern", "validate", "--root", f"s3://{TLS_BUCKET}/ds", "--endpoint", https.endpoint,
                "--block-size", "8MiB", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert len(shards) == 4 and result["total"]["bytes"] == sum(o["Size"] for o in shards)
    assert result["total"]["ios"] == 4 and result["endpoints"][0]["url"] == https.endpoint

    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    files = _plan(config)
    proc = _run("checkpoint", "--workload", str(config), "--root", f"s3://{TLS_BUCKET}/ck", "--endpoint",
                https.endpoint, "--writes", "1", "--reads", "1", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    ck = json.loads(out.read_text())["checkpoint"]
    assert (ck["write"]["bytes"], ck["write"]["ios"]) == (sum(b for _n, b in files), sum(-(-b // PART) for _n, b in files))
    assert ck["read"]["bytes"] == ck["write"]["bytes"]
    stored = {o["Key"]: o["Size"]
              for o in https.client().list_objects_v2(Bucket=TLS_BUCKET, Prefix="ck/ckpt-")["Contents"]}
    assert stored == {f"ck/ckpt-000001/{n}": b for n, b in files}
    assert https.secret_key not in proc.stdout + proc.stderr + out.read_text()


def test_another_cas_bundle_is_one_line(https):
    proc = _run("read", "--pattern", "validate", "--root", f"s3://{TLS_BUCKET}/ds", "--endpoint", https.endpoint,
                env=https.env("other_ca"))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"iodl: error: {https.endpoint}: the server's certificate is not trusted (unable to get local issuer "
        f"certificate; checked against the CAs of AWS_CA_BUNDLE ({https.pki.other_ca})): give its CA as "
        "AWS_CA_BUNDLE=FILE or ca_bundle = FILE in the AWS config file's profile (docs/s3.md)")


def test_radosgw_gone_mid_read_is_one_line_naming_the_object(rgw, written):
    """Last in the module: radosgw is killed once the run's GETs are going (>= 6 connections)."""
    _, server = rgw
    proc = subprocess.Popen([sys.executable, "-m", "iodl", "read", "--root", f"s3://{BUCKET}/ds", "--endpoint",
                             server.endpoint, "--pattern", "storage-only", "--duration", "60", "--ramp", "0"],
                            env=server.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _connections(server) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None and _connections(server) >= 6, "the run never started reading"
        time.sleep(0.5)
        server.kill()
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 30, "the failure ends the run, not its 60 s"
    assert proc.returncode == 1, out + err
    line = err.strip()
    assert "\n" not in line and line.startswith("iodl: error: ") and "Traceback" not in line, line
    assert f"'{server.endpoint}/{BUCKET}/ds/copy-0000/train-" in line, line
