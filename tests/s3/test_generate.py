"""`iodl generate --root s3://BUCKET/PREFIX` against a real S3 server (SeaweedFS, tests/s3/conftest.py).

Ground truth: the generator is deterministic for a seed, so the objects must be byte for byte the
files a directory root gets. Safety: a prefix holding objects iodl did not mark is refused and left
as it was; the secret key never shows in what iodl prints or writes.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tests.conftest import require_or_skip
from tests.helpers import iodl, mpiexec
from tests.s3.server import Seaweed

FILES = "6"


def _objects(client, bucket: str, prefix: str) -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def _local(tmp_path) -> dict[str, bytes]:
    root = str(tmp_path / "local")
    proc = iodl("generate", "--root", root, "--files", FILES, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def test_objects_are_the_files_a_directory_gets(seaweed, bucket, tmp_path):
    proc = iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", FILES,
                env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    objects = _objects(seaweed.client(), bucket, "ds")
    files = _local(tmp_path)
    assert sorted(objects) == sorted(files)
    assert sum(map(len, files.values())) > 20e6            # tiny: ~4 MB shards, so a wrong key would show
    for rel, data in files.items():
        assert objects[rel] == data, rel                   # manifest and tables too: same seed, same bytes
    assert json.loads(objects["iodl-dataset.json"])["status"] == "complete"
    # the secret appears nowhere iodl wrote or printed (results get published)
    secret = seaweed.secret_key
    assert secret not in proc.stdout + proc.stderr
    assert not any(secret.encode() in data for data in objects.values())
    # a second run finds every object there with its size and writes none
    again = iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", FILES,
                 env=seaweed.env())
    assert again.returncode == 0, again.stderr
    assert f"({0} written, {len(files) - 1} already there)" in again.stdout.replace("\n", " ")


def test_a_prefix_iodl_did_not_mark_is_refused_untouched(seaweed, bucket):
    client = seaweed.client()
    client.put_object(Bucket=bucket, Key="theirs/copy-0000/train-00000-of-00006.tfrecord", Body=b"not iodl's")
    proc = iodl("generate", "--root", f"s3://{bucket}/theirs", "--endpoint", seaweed.endpoint, "--files", FILES,
                env=seaweed.env())
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "holds objects and no iodl-dataset.json" in proc.stderr
    assert _objects(client, bucket, "theirs") == {"copy-0000/train-00000-of-00006.tfrecord": b"not iodl's"}


def test_another_datasets_prefix_is_refused(seaweed, bucket):
    root = f"s3://{bucket}/ds"
    assert iodl("generate", "--root", root, "--endpoint", seaweed.endpoint, "--files", "2",
                env=seaweed.env()).returncode == 0
    before = _objects(seaweed.client(), bucket, "ds")
    proc = iodl("generate", "--root", root, "--endpoint", seaweed.endpoint, "--files", "3", env=seaweed.env())
    assert proc.returncode == 2 and "holds another dataset" in proc.stderr
    assert _objects(seaweed.client(), bucket, "ds") == before


def test_wrong_secret_is_one_line_without_the_secret(seaweed, bucket):
    wrong = "wrong-" + seaweed.secret_key[::-1]
    proc = iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", FILES,
                env={**seaweed.env(), "AWS_SECRET_ACCESS_KEY": wrong})
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "\n" not in line and seaweed.endpoint in line and f"s3://{bucket}" in line and "HTTP 403" in line
    assert wrong not in proc.stdout + proc.stderr and seaweed.secret_key not in proc.stdout + proc.stderr


def test_missing_bucket_is_one_line(seaweed):
    proc = iodl("generate", "--root", "s3://no-such-bucket-here/ds", "--endpoint", seaweed.endpoint,
                "--files", FILES, env=seaweed.env())
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iodl: error: {seaweed.endpoint}: s3://no-such-bucket-here: no such bucket "
                                   "(iodl does not create buckets)")


def test_credentials_from_the_aws_files(seaweed, bucket, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text(f"[bench]\naws_access_key_id = {seaweed.access_key}\n"
                     f"aws_secret_access_key = {seaweed.secret_key}\n")
    env = {k: v for k, v in seaweed.env().items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_PROFILE="bench")
    proc = iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", "2",
                env={**env, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert "iodl-dataset.json" in _objects(seaweed.client(), bucket, "ds")


def test_server_gone_mid_upload_is_one_line_naming_the_object():
    """The server killed once the first shard object is in: iodl ends with one line naming the
    endpoint and an object, exit 1, and the manifest still says incomplete."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-kill-")).start()
    try:
        client = server.client()
        client.create_bucket(Bucket="gone-bkt")

        def kill_at_first_shard():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                keys = [o["Key"] for o in client.list_objects_v2(Bucket="gone-bkt").get("Contents", [])]
                if any(k.endswith(".tfrecord") for k in keys):
                    manifest = client.get_object(Bucket="gone-bkt", Key="ds/iodl-dataset.json")["Body"].read()
                    seen["manifest"] = manifest
                    server.kill()
                    return
                time.sleep(0.02)

        seen = {}
        killer = threading.Thread(target=kill_at_first_shard)
        killer.start()
        proc = iodl("generate", "--root", "s3://gone-bkt/ds", "--endpoint", server.endpoint, "--files", "40",
                    env=server.env(), timeout=180)
        killer.join()
        assert b'"incomplete"' in seen["manifest"]
        assert proc.returncode == 1, proc.stdout + proc.stderr
        line = proc.stderr.strip()
        assert "\n" not in line and line.startswith(f"iodl: error: {server.endpoint}: ")
        assert "s3://gone-bkt/ds/" in line
    finally:
        server.remove()


def test_several_endpoints_spread_the_puts_over_the_ranks(seaweed, bucket, tmp_path):
    """`--endpoint A --endpoint B` under 2 ranks: rank r PUTs through endpoint r % 2. With A and B
    two servers (not two gateways to one store, as in use) each holds exactly its rank's share:
    A rank 0's objects and the manifest (rank 0 marks and completes), B rank 1's; together, the
    files a directory gets."""
    require_or_skip("mpiexec", bool(mpiexec()), "no mpiexec next to the test interpreter")
    other = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-ep-"), keys=(seaweed.access_key, seaweed.secret_key)).start()
    try:
        other.client().create_bucket(Bucket=bucket)
        proc = iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--endpoint",
                    other.endpoint, "--files", FILES, ranks=2, env=seaweed.env())
        assert proc.returncode == 0, proc.stderr
        on_a, on_b = _objects(seaweed.client(), bucket, "ds"), _objects(other.client(), bucket, "ds")
    finally:
        other.remove()
    files = _local(tmp_path)
    shards = sorted(rel for rel in files if rel != "iodl-dataset.json")   # the order generate shares them in
    assert sorted(on_b) == shards[1::2]
    assert sorted(on_a) == sorted([*shards[0::2], "iodl-dataset.json"])
    assert {**on_a, **on_b} == files


HUNG_S = 3   # IODL_S3_IO_TIMEOUT of the test: the default's 10 s is a wait, not a check


def test_a_hung_server_ends_generate_after_the_io_timeout():
    """A server SIGSTOPped once the first shard objects are in (hung: its kernel holds the
    connections, nothing answers): each PUT in flight makes no progress for IODL_S3_IO_TIMEOUT (3 s
    here) and fails for good (cancelled, not retried), the PUTs not yet sent are not, and generate
    ends in one line naming the endpoint and an object, that long after the stop, within 4 s (a
    Python process's exit on a busy 2-core VM). A server of its own: one stopped mid-upload takes
    10 s to stop gracefully after (SIGKILLed here)."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-hung-")).start()
    proc = None
    try:
        client = server.client()
        client.create_bucket(Bucket="hung-bkt")
        proc = subprocess.Popen([sys.executable, "-m", "iodl", "generate", "--root", "s3://hung-bkt/ds", "--endpoint",
                                 server.endpoint, "--files", "32"],
                                env={**os.environ, **server.env(), "IODL_S3_IO_TIMEOUT": str(HUNG_S)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while client.list_objects_v2(Bucket="hung-bkt", Prefix="ds/copy-")["KeyCount"] < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the upload never started"
            time.sleep(0.05)
        os.killpg(server.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.kill()
        server.remove()
    assert proc.returncode == 1, err
    line = err.strip()
    assert "\n" not in line and line.startswith(f"iodl: error: {server.endpoint}: PUT s3://hung-bkt/ds/"), line
    assert line.endswith(f": ETIMEDOUT: no answer in {HUNG_S:g} s"), line
    assert HUNG_S - 0.5 <= took <= HUNG_S + 4.0, took
