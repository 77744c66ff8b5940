"""https endpoints against a real TLS server: SeaweedFS's gateway with a certificate of a private CA
(tests/s3/tls.py). Its CA trusted as AWS tools are told to (AWS_CA_BUNDLE, or the AWS config file's
`ca_bundle`), every command works over https with both of iodl's clients (awscrt's S3Client: PUTs,
LISTs, small GETs; iodl.s3http: the engine's GETs), and what iodl reports is what the server counted
and holds; not trusted, every command ends in one line naming the endpoint, exit 1, at once."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from iodl import histogram, plan, s3http
from iodl.s3engine import S3Engine
from tests.conftest import require_or_skip
from tests.helpers import mpiexec
from tests.s3.server import Seaweed, weed_missing
from tests.s3.tls import OPENSSL, Pki, TlsSeaweed, counts
from tests.s3.test_checkpoint import DLIO_S3, PART, _plan

MiB = 1 << 20
BUCKET = "tls-bkt"
ROOT = f"s3://{BUCKET}/tiny"


@pytest.fixture(scope="module")
def tls():
    why = weed_missing()
    require_or_skip("s3", why is None, f"s3: {why}")
    require_or_skip("s3", OPENSSL is not None, "s3: no openssl (makes the test CA)")
    top = tempfile.mkdtemp(prefix="iodl-s3-tls-")
    server = TlsSeaweed(top, Pki(os.path.join(top, "pki"))).start()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.remove()


def _run(*args: str, env: dict, ranks: int = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    """iodl with exactly env (tests.helpers.iodl adds the caller's environment, whose AWS_CA_BUNDLE
    may name the system's bundle)."""
    cmd = [sys.executable, "-m", "iodl", *args]
    if ranks:
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**env, "COLUMNS": "250"})


def _no_bundle(env: dict) -> dict:
    return {k: v for k, v in env.items() if k != "AWS_CA_BUNDLE"}


@pytest.fixture(scope="module")
def dataset(tls):
    """tiny's 6 shards generated over https (AWS_CA_BUNDLE): (root, the shards' bytes the server holds)."""
    proc = _run("generate", "--root", ROOT, "--endpoint", tls.endpoint, "--files", "6", "--quiet", env=tls.env())
    assert proc.returncode == 0, proc.stderr
    shards = tls.client().list_objects_v2(Bucket=BUCKET, Prefix="tiny/copy-")["Contents"]
    assert len(shards) == 6
    return ROOT, sum(o["Size"] for o in shards)


def _result(path) -> dict:
    return json.loads(path.read_text())


def test_validate_reads_every_object_over_https(tls, dataset, tmp_path):
    """Every object GET whole once over https (8 MiB blocks: tiny's objects are 3.8-4.5 MB): the bytes are the server's objects' bytes, and the
    ranged GETs the server answered (206) are iodl's GETs; the endpoint as given; no secret."""
    root, total = dataset
    before = counts(tls, BUCKET)
    out = tmp_path / "v.json"
    proc = _run("read", "--pattern", "validate", "--root", root, "--endpoint", tls.endpoint, "--block-size", "8MiB",
                "--out", str(out), env=tls.env())
    assert proc.returncode == 0, proc.stderr
    got = counts(tls, BUCKET) - before
    result = _result(out)
    assert result["validate"]["bytes"] == result["validate"]["expected_bytes"] == result["total"]["bytes"] == total
    assert got["GET", 206] == result["total"]["ios"] == 6
    assert [e["url"] for e in result["endpoints"]] == [tls.endpoint] and tls.endpoint.startswith("https://")
    assert result["total"]["retries"] == result["total"]["errors"] == 0
    assert tls.secret_key not in proc.stdout + proc.stderr + out.read_text()


@pytest.mark.mpiexec
@pytest.mark.parametrize("pattern,extra", [("storage-only", ["--duration", "2", "--ramp", "0.5"]),
                                           ("train-sync", ["--steps", "10"])])
def test_two_ranks_read_over_https(tls, dataset, tmp_path, pattern, extra):
    """2 ranks: storage-only's whole-object GETs (8 MiB blocks: tiny's objects are 3.8-4.5 MB) and
    train-sync's ranged GETs of its samples' records (the bytes its steps consumed) over https,
    each rank through its own connections; the server answered at least the GETs iodl counted."""
    root, _total = dataset
    before = counts(tls, BUCKET)
    out = tmp_path / "r.json"
    proc = _run("read", "--pattern", pattern, "--root", root, "--endpoint", tls.endpoint, "--block-size", "8MiB",
                "--out", str(out), *extra, env=tls.env(), ranks=2)
    assert proc.returncode == 0, proc.stderr
    got = counts(tls, BUCKET) - before
    result = _result(out)
    total = result["total"]
    assert [r["rank"] for r in result["per_rank"]] == [0, 1] and all(r["ios"] > 0 for r in result["per_rank"])
    assert total["errors"] == total["retries"] == 0 and 0 < total["ttfb_us"]["p50"] <= total["latency_us"]["p50"]
    assert result["endpoints"][0]["url"] == tls.endpoint and result["endpoints"][0]["ranks"] == [0, 1]
    assert got["GET", 206] >= total["ios"]   # (GETs past the window are the server's, not counted)
    if pattern == "storage-only":
        assert 3.8e6 <= total["bytes"] / total["ios"] <= 4.6e6
    else:
        assert total["bytes"] == result["train"]["consumed_bytes"] > 0
    assert tls.secret_key not in proc.stdout + proc.stderr + out.read_text()


def test_checkpoint_over_https_with_the_config_files_ca_bundle(tls, tmp_path):
    """The CA named by the AWS config file's `ca_bundle` (no AWS_CA_BUNDLE): a checkpoint written
    (5.8 MB in one PUT, 35 MB in 5 parts) and read back over https; the objects the server holds are
    the plan's, the PUTs and ranged GETs it answered are the ones iodl counted."""
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    files = _plan(config)
    aws = tmp_path / "aws-config"
    aws.write_text(f"[profile tls]\nca_bundle = {tls.pki.ca}\n")
    env = {**_no_bundle(tls.env()), "AWS_CONFIG_FILE": str(aws), "AWS_PROFILE": "tls"}
    before = counts(tls, BUCKET)
    out = tmp_path / "c.json"
    proc = _run("checkpoint", "--workload", str(config), "--root", f"s3://{BUCKET}/ck", "--endpoint", tls.endpoint,
                "--writes", "1", "--reads", "1", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    got = counts(tls, BUCKET) - before
    result = _result(out)
    write, read = result["checkpoint"]["write"], result["checkpoint"]["read"]
    parts = sum(-(-b // PART) for _n, b in files)
    total = sum(b for _n, b in files)
    assert (write["bytes"], write["ios"]) == (total, parts)
    assert (read["bytes"], read["ios"]) == (total, sum(-(-b // MiB) for _n, b in files))
    stored = {o["Key"]: o["Size"] for o in tls.client().list_objects_v2(Bucket=BUCKET, Prefix="ck/")["Contents"]}
    assert stored == {"ck/iodl-checkpoints.json": stored["ck/iodl-checkpoints.json"],
                      **{f"ck/ckpt-000001/{n}": b for n, b in files}}
    # the server's ranged GETs: the read's, and the engine's 1-byte GET that opens its connection
    assert got["GET", 206] == read["ios"] + 1
    # its PUTs: every UploadPart and whole-object PUT, and the store object written 3 times (the mark,
    # "writing", "complete")
    assert got["PUT", 200] == write["ios"] + 3, got
    assert write["endpoints"][0]["url"] == tls.endpoint and result["roots"] == [f"s3://{BUCKET}/ck"]
    assert tls.secret_key not in proc.stdout + proc.stderr + out.read_text()


def _untrusted_line(endpoint: str, trusted: str) -> str:
    return (f"iodl: error: {endpoint}: the server's certificate is not trusted (unable to get local issuer "
            f"certificate; checked against {trusted}): give its CA as AWS_CA_BUNDLE=FILE or ca_bundle = FILE in the "
            "AWS config file's profile (docs/s3.md)")


@pytest.mark.mpiexec
@pytest.mark.parametrize("command", [
    ["generate", "--root", f"s3://{BUCKET}/untrusted", "--files", "2"],
    ["read", "--pattern", "storage-only", "--duration", "2", "--root", ROOT],
    ["checkpoint", "--workload", "llama3-8b", "--writes", "1", "--root", f"s3://{BUCKET}/untrusted-ck"]])
@pytest.mark.parametrize("bundle", [None, "other_ca"])
def test_a_certificate_not_trusted_is_one_line_on_every_rank(tls, dataset, command, bundle):
    """The system's CAs, or a bundle of a CA that did not sign the server's certificate: every
    command, on 2 ranks, ends in one line naming the endpoint (rank 0 says it for both), exit 1, no
    retries (in well under a second's backoff; the CRT alone took 19 s to give up, s2n's blinding
    delay); nothing written; no secret."""
    env = tls.env(bundle) if bundle else _no_bundle(tls.env())
    trusted = f"the CAs of AWS_CA_BUNDLE ({tls.pki.other_ca})" if bundle else "the system's CAs"
    before = counts(tls, BUCKET)
    t0 = time.monotonic()
    proc = _run(*command, "--endpoint", tls.endpoint, env=env, ranks=2, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == _untrusted_line(tls.endpoint, trusted)
    assert proc.stdout == ""
    assert took < 10, took   # start-up of 2 ranks under load included; retries would add 1.4 s, the CRT's wait 10-30
    assert counts(tls, BUCKET) == before   # no request reached the server
    assert tls.secret_key not in proc.stdout + proc.stderr


def test_a_ca_bundle_that_is_not_a_file_is_one_line(tls, tmp_path):
    missing = str(tmp_path / "no-such-ca.pem")
    proc = _run("read", "--pattern", "validate", "--root", ROOT, "--endpoint", tls.endpoint,
                env={**tls.env(), "AWS_CA_BUNDLE": missing})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iodl: error: AWS_CA_BUNDLE={missing!r}: not a file (give the PEM file of the CA "
                                   "certificates that signed the endpoint's certificate)")


def test_the_engines_gets_are_not_retried_on_a_certificate_not_trusted(tls, dataset, monkeypatch):
    """iodl.s3http's own GETs (the s3 engine), reached without the CRT's check: a GET refused by the
    certificate check is an error at once, not retried, named in its reason."""
    for k, v in tls.env("other_ca").items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    s3http.tls_context.cache_clear()
    try:
        with S3Engine(depth=2, block_size=MiB) as engine:
            stats = engine.run([f"{tls.endpoint}/{BUCKET}/tiny/iodl-dataset.json"], plan.shard_plan([4096], MiB),
                               histogram.empty())
    finally:
        s3http.tls_context.cache_clear()
    assert (stats["errors"], stats["retries"], stats["ios"]) == (1, 0, 0)
    assert stats["error_reason"] == ("Permission denied: the server's certificate is not trusted (unable to get "
                                     "local issuer certificate)")


HUNG_S = 2   # IODL_S3_IO_TIMEOUT of the test


def test_a_server_without_tls_or_hung_in_the_handshake_is_one_line(tmp_path):
    """An https URL given for a plain-http server: the handshake fails, one line saying so. The same
    server stopped (SIGSTOP: its kernel takes the connection, nothing answers): one line once
    IODL_S3_IO_TIMEOUT has passed in the handshake, not that long again in the requests after it."""
    server = Seaweed(str(tmp_path / "plain")).start()
    url = server.endpoint.replace("http://", "https://")
    args = ("read", "--pattern", "validate", "--root", ROOT, "--endpoint", url)
    env = {**server.env(), "IODL_S3_IO_TIMEOUT": str(HUNG_S)}
    try:
        proc = _run(*args, env=env)
        assert proc.returncode == 1
        assert proc.stderr.strip() == f"iodl: error: {url}: the TLS handshake failed (WRONG_VERSION_NUMBER): does it serve https?"
        os.killpg(server.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        proc = _run(*args, env=env)
        took = time.monotonic() - t0
    finally:
        server.kill()
        server.remove()
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"iodl: error: {url}: ETIMEDOUT: no answer in {HUNG_S} s (TLS handshake)"
    assert HUNG_S <= took < 2 * HUNG_S + 2, took   # (+2: a Python start on a busy VM)
