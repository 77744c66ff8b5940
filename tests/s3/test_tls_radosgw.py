"""https against a second implementation: Ceph's radosgw (beast's ssl_endpoint) with a certificate of
a private CA (tests/s3/tls.py), so that iodl's TLS is not tuned to SeaweedFS's: a dataset written and
validated, a checkpoint written and read back, what the server holds is what iodl reports; a CA
not trusted is the one line."""
import json
import os
import tempfile

import pytest

from tests.conftest import require_or_skip
from tests.s3.radosgw import radosgw_missing
from tests.s3.test_checkpoint import DLIO_S3, PART, _plan
from tests.s3.test_tls import _run
from tests.s3.tls import OPENSSL, Pki, TlsRadosGW

pytestmark = pytest.mark.root

BUCKET = "rgw-tls-bkt"


@pytest.fixture(scope="module")
def rgw():
    why = radosgw_missing()
    require_or_skip("radosgw", why is None, f"radosgw: {why}")
    require_or_skip("radosgw", OPENSSL is not None, "radosgw: no openssl (makes the test CA)")
    top = tempfile.mkdtemp(prefix="iodl-rgw-tls-")
    server = TlsRadosGW(top, Pki(os.path.join(top, "pki")))
    try:
        server.start()
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.remove()


def test_a_dataset_and_a_checkpoint_over_https(rgw, tmp_path):
    """generate (4 shards) and validate read them back whole: every byte of the objects radosgw holds;
    a checkpoint written (one PUT, one 5-part upload) and read back: the objects are the plan's."""
    env = rgw.env()
    proc = _run("generate", "--root", f"s3://{BUCKET}/ds", "--endpoint", rgw.endpoint, "--files", "4", "--quiet",
                env=env)
    assert proc.returncode == 0, proc.stderr
    shards = rgw.client().list_objects_v2(Bucket=BUCKET, Prefix="ds/copy-")["Contents"]
    out = tmp_path / "v.json"
    proc = _run("read", "--pattern", "validate", "--root", f"s3://{BUCKET}/ds", "--endpoint", rgw.endpoint,
                "--block-size", "8MiB", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert len(shards) == 4 and result["total"]["bytes"] == sum(o["Size"] for o in shards)
    assert result["total"]["ios"] == 4 and result["endpoints"][0]["url"] == rgw.endpoint

    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    files = _plan(config)
    proc = _run("checkpoint", "--workload", str(config), "--root", f"s3://{BUCKET}/ck", "--endpoint", rgw.endpoint,
                "--writes", "1", "--reads", "1", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    ck = json.loads(out.read_text())["checkpoint"]
    assert (ck["write"]["bytes"], ck["write"]["ios"]) == (sum(b for _n, b in files), sum(-(-b // PART) for _n, b in files))
    assert ck["read"]["bytes"] == ck["write"]["bytes"]
    stored = {o["Key"]: o["Size"] for o in rgw.client().list_objects_v2(Bucket=BUCKET, Prefix="ck/ckpt-")["Contents"]}
    assert stored == {f"ck/ckpt-000001/{n}": b for n, b in files}
    assert rgw.secret_key not in proc.stdout + proc.stderr + out.read_text()


def test_another_cas_bundle_is_one_line(rgw):
    proc = _run("read", "--pattern", "validate", "--root", f"s3://{BUCKET}/ds", "--endpoint", rgw.endpoint,
                env=rgw.env("other_ca"))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"iodl: error: {rgw.endpoint}: the server's certificate is not trusted (unable to get local issuer "
        f"certificate; checked against the CAs of AWS_CA_BUNDLE ({rgw.pki.other_ca})): give its CA as "
        "AWS_CA_BUNDLE=FILE or ca_bundle = FILE in the AWS config file's profile (docs/s3.md)")
