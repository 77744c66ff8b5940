"""`iodl checkpoint --root s3://BUCKET/PREFIX` against a real server (SeaweedFS): what lands in the
bucket, the figures' counts, the prefix rule, a wrong secret, a server gone mid-write and Ctrl-C.
The truth of the bandwidth is tests/s3/test_checkpoint_links.py's."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from iodl.patterns.checkpoint import IODEPTH
from tests.helpers import iodl
from tests.s3.server import Seaweed
from tests.system.test_checkpoint_truth import TRAIN

MiB = 1 << 20
PART = 8 * MiB

# a DLIO checkpoint workload on object storage, as DLIO's s3 configurations name it, shrunk to a small
# transformer: rank 0 writes a 5.8 MB model (one PUT) and a 35 MB optimizer state (5 parts)
DLIO_S3 = """model:
  name: tiny_s3
  type: transformer
  num_layers: 1
  parallelism: {tensor: 1, pipeline: 1, zero_stage: 0}
  transformer: {vocab_size: 4000, hidden_size: 256, ffn_hidden_size: 512, num_attention_heads: 8, num_kv_heads: 8}
framework: pytorch
workflow: {generate_data: False, train: False, checkpoint: True}
checkpoint: {checkpoint_folder: s3://ckpt-bkt/tiny, num_checkpoints_write: 2, num_checkpoints_read: 1}
storage:
  storage_type: s3
  storage_root: ckpt-bkt
  storage_options: {endpoint_url: "http://127.0.0.1:9000", access_key_id: FILEKEY, secret_access_key: FILESECRET}
"""


def _plan(config) -> list[tuple[str, int]]:
    proc = iodl("checkpoint", "--workload", str(config), "--plan", "--ranks", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    return [(f["name"], f["bytes"]) for f in json.loads(proc.stdout)["files"][0]]


def _objects(server, bucket: str, prefix: str) -> dict:
    listed = server.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: (o["Size"], o["ETag"], o["LastModified"]) for o in listed}


def test_a_dlio_s3_workloads_checkpoints_go_to_the_bucket(seaweed, bucket, tmp_path):
    """Every object the plan names lands under PREFIX/ckpt-NNNNNN/ with its size, those above the part
    size as multipart uploads of ceil(size / 8 MiB) parts; the result counts each PUT (a part or a whole
    object) and each 1 MiB GET once; a second run counts on (ckpt-000003) and changes nothing written
    before; a read-only run reads the latest back. The secret is nowhere in what iodl prints or writes."""
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    files = _plan(config)
    assert [b <= PART for _n, b in files] == [True, False]
    parts = [-(-b // PART) for _n, b in files]
    out = tmp_path / "r.json"
    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/ck", "--endpoint", seaweed.endpoint,
                "--out", str(out), env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert seaweed.secret_key not in proc.stdout + proc.stderr + out.read_text()
    assert "FILESECRET" not in proc.stdout + proc.stderr + out.read_text()
    total = sum(b for _n, b in files)
    write, read = result["checkpoint"]["write"], result["checkpoint"]["read"]
    assert (write["rounds"], write["bytes"], write["ios"]) == (2, 2 * total, 2 * sum(parts))
    assert (read["rounds"], read["bytes"], read["ios"]) == (1, total, sum(-(-b // MiB) for _n, b in files))
    for block in (write, read):
        assert block["retries"] == 0 and block["errors"] == 0
        assert block["ops_per_s"] == pytest.approx(block["ios"] / block["duration_s"])
        assert block["endpoints"][0]["url"] == seaweed.endpoint and block["endpoints"][0]["bytes"] == block["bytes"]
        assert block["per_rank"][0]["ios"] == block["ios"] and block["per_rank"][0]["endpoint"] == seaweed.endpoint
    assert result["engine"] == "s3" and result["part_size"] == PART and result["roots"] == [f"s3://{bucket}/ck"]
    assert "requests per endpoint" in proc.stdout

    stored = _objects(seaweed, bucket, "ck/")
    assert set(stored) == {"ck/iodl-checkpoints.json"} | {f"ck/ckpt-00000{i}/{n}" for i in (1, 2) for n, _b in files}
    for i in (1, 2):
        for (name, size), n in zip(files, parts):
            got_size, etag, _when = stored[f"ck/ckpt-00000{i}/{name}"]
            assert got_size == size
            assert etag.strip('"').endswith(f"-{n}") if n > 1 else "-" not in etag

    # the bodies do not deduplicate: no two 4 KiB blocks of the two checkpoints' objects alike
    blocks = set()
    for i in (1, 2):
        for name, size in files:
            body = seaweed.client().get_object(Bucket=bucket, Key=f"ck/ckpt-00000{i}/{name}")["Body"].read()
            blocks |= {body[o:o + 4096] for o in range(0, size - 4095, 4096)}
    assert len(blocks) == 2 * sum(b // 4096 for _n, b in files)

    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/ck", "--endpoint", seaweed.endpoint,
                "--writes", "1", "--reads", "0", env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    again = _objects(seaweed, bucket, "ck/")
    assert {k: v for k, v in again.items() if "/ckpt-" in k and k in stored} == \
        {k: v for k, v in stored.items() if "/ckpt-" in k}                      # nothing written before changed
    assert sorted(k for k in again if k not in stored) == sorted(f"ck/ckpt-000003/{n}" for n, _b in files)

    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/ck", "--endpoint", seaweed.endpoint,
                "--writes", "0", "--reads", "1", "--out", str(out), env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["checkpoint"]["write"] is None and result["checkpoint"]["read"]["bytes"] == total


def test_two_roots_two_ranks_and_a_rank_that_writes_nothing(seaweed, bucket, tmp_path):
    """ZeRO 0 over 2 ranks: rank 1 writes no file (only the first model-parallel group does), into the
    second root; both roots are marked, rank 0's objects go under the first, and rank 1's rounds count
    0 bytes."""
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    total = sum(b for _n, b in _plan(config))
    out = tmp_path / "r.json"
    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/a", "--root", f"s3://{bucket}/b",
                "--endpoint", seaweed.endpoint, "--writes", "1", "--out", str(out), ranks=2, env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for op in ("write", "read"):
        block = result["checkpoint"][op]
        assert block["bytes"] == total
        assert [(m["path"], m["ranks"], m["bytes"]) for m in block["mounts"]] == [
            (f"s3://{bucket}/a", [0], total), (f"s3://{bucket}/b", [1], 0)]
        assert [(r["rank"], r["bytes"]) for r in block["per_rank"]] == [(0, total), (1, 0)]
    stored = _objects(seaweed, bucket, "")
    assert "b/iodl-checkpoints.json" in stored and not [k for k in stored if k.startswith("b/ckpt-")]
    assert len([k for k in stored if k.startswith("a/ckpt-000001/")]) == 2


def test_a_prefix_iodl_did_not_mark_and_a_wrong_secret_are_one_line_and_change_nothing(seaweed, bucket, tmp_path):
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    seaweed.client().put_object(Bucket=bucket, Key="theirs/model.pt", Body=b"not iodl's")
    before = _objects(seaweed, bucket, "")
    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/theirs", "--endpoint",
                seaweed.endpoint, env=seaweed.env())
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iodl: error: {seaweed.endpoint}: s3://{bucket}/theirs: holds objects and no "
                                   "iodl-checkpoints.json: iodl writes only under a prefix it created; give a new prefix")
    wrong = {**seaweed.env(), "AWS_SECRET_ACCESS_KEY": "wrong-" + seaweed.secret_key[::-1]}
    proc = iodl("checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/new", "--endpoint",
                seaweed.endpoint, env=wrong)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"iodl: error: {seaweed.endpoint}: HEAD bucket s3://{bucket}: HTTP 403")
    assert wrong["AWS_SECRET_ACCESS_KEY"] not in proc.stderr and seaweed.secret_key not in proc.stderr
    assert _objects(seaweed, bucket, "") == before


BIG = """[workload]
name = "big"

[model]
type = "cnn"
model_size = "{size}"

[checkpoint]
writes = 1
reads = 1
"""


def _uploads(server, bucket: str) -> list:
    return server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def _parts_done(server, bucket: str) -> int:
    ups = _uploads(server, bucket)
    return sum(len(server.client().list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"]).get("Parts", []))
               for u in ups) if ups else -1


def _start_when_uploading(server, bucket, args, env, parts: int = 1):
    """Start iodl checkpoint and return it once `parts` parts of its multipart uploads are on the server."""
    proc = subprocess.Popen([sys.executable, "-m", "iodl", "checkpoint", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 20
    while _parts_done(server, bucket) < parts:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def _mid_upload(server, bucket: str, tmp_path, env=None):
    """A new bucket and a 200 MB checkpoint into it in 5 MiB parts, returned once (iodepth + 1) parts
    were sent (the (iodepth + 1)th only after one of the first had its answer and was counted):
    (the process, its --out)."""
    server.client().create_bucket(Bucket=bucket)
    config = tmp_path / "big.toml"
    config.write_text(BIG.format(size="200MB"))
    out = tmp_path / "r.json"
    proc = _start_when_uploading(server, bucket, ["--workload", str(config), "--root", f"s3://{bucket}/ck",
                                                  "--endpoint", server.endpoint, "--out", str(out),
                                                  "--part-size", "5MiB"], {**server.env(), **(env or {})},
                                    parts=IODEPTH + 1)
    return proc, out


def test_a_server_gone_mid_write_is_one_line_naming_the_object_with_a_partial_result(tmp_path):
    """SIGKILL the server while a multipart upload is under way: one line naming the endpoint and the
    object being written, after the figures of what completed (partial), exit 1."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-ckgone-")).start()
    try:
        proc, out = _mid_upload(server, "gone-bkt", tmp_path)
        # a part on the server may not have its answer back yet; the (iodepth + 1)th was sent only
        # after one of the first iodepth had its answer and was counted: something completed
        server.kill()
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        server.remove()
    assert proc.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"iodl: error: {server.endpoint}: "), stderr
    assert "s3://gone-bkt/ck/ckpt-000001/model_states-0.pt" in lines[0]
    result = json.loads(out.read_text())
    assert result["partial"] is True and result["error"] in lines[0]
    write = result["checkpoint"]["write"]
    assert write["errors"] == 1 and 0 < write["bytes"] < 200_000_000 and write["bytes"] % (5 * MiB) == 0
    assert "checkpoints (1 write(s))" in stdout


HUNG_S = 3   # IODL_S3_IO_TIMEOUT of the test: the default's 10 s is a wait, not a check


def test_a_hung_server_mid_write_ends_the_run_after_the_io_timeout(tmp_path):
    """SIGSTOP the server while a multipart upload is under way (hung: its kernel holds the
    connections, nothing answers): the PUTs in flight make no progress for IODL_S3_IO_TIMEOUT (3 s
    here), the round fails naming the endpoint, the object and the part, that long after the stop
    within 4 s (the aborts' 0.3 s, a Python exit on a busy VM), partial, exit 1.
    The clock of a PUT runs from when something of it last moved, not from the stop: a part whose body
    was all sent and whose answer was still to come had been silent before the stop for up to as long
    as the server took to answer a part (a CI run: answers of 1.2-1.45 s, and the round ended 2.45 s
    after the stop). Not before the timeout less the slowest answer the run saw, nor less than 0.5 s."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-ckhung-")).start()
    try:
        proc, out = _mid_upload(server, "hung-bkt", tmp_path, env={"IODL_S3_IO_TIMEOUT": str(HUNG_S)})
        os.killpg(server.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        server.kill()
        server.remove()
    assert proc.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"iodl: error: {server.endpoint}: PUT "
                                                   "s3://hung-bkt/ck/ckpt-000001/model_states-0.pt: "
                                                   f"ETIMEDOUT: no answer in {HUNG_S:g} s (part "), stderr
    result = json.loads(out.read_text())
    assert result["partial"] is True and result["error"] in lines[0]
    write = result["checkpoint"]["write"]
    silent_before = max(0.5, write["latency_us"]["max"] / 1e6)
    assert HUNG_S - silent_before <= took <= HUNG_S + 4.0, (took, silent_before)
    assert write["errors"] == 1 and write["retries"] == 0 and 0 < write["bytes"] < 200_000_000


def test_ctrl_c_mid_write_stops_within_a_second_with_a_partial_result(seaweed, bucket, tmp_path):
    config = tmp_path / "big.toml"
    config.write_text(BIG.format(size="300MB"))
    out = tmp_path / "r.json"
    proc = _start_when_uploading(seaweed, bucket, ["--workload", str(config), "--root", f"s3://{bucket}/ck",
                                                   "--endpoint", seaweed.endpoint, "--out", str(out)], seaweed.env())
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=10)
    took = time.monotonic() - t0
    assert proc.returncode == 130, stderr
    assert took < 1.2, took          # in-flight parts get 0.5 s, the abort 0.3 s, the exit the rest
    result = json.loads(out.read_text())
    assert result["partial"] is True and 0 < result["checkpoint"]["write"]["bytes"] < 300_000_000
    assert _uploads(seaweed, bucket) == []                  # the upload stopped half-way was aborted
    assert not [k for k in _objects(seaweed, bucket, "ck/ckpt-") if k.endswith(".pt")]   # no object came of it


# the in-training checkpoint workload of the directory-root truth test, its model 20 MB: 3 parts of 8 MiB
TRAIN_S3 = TRAIN.replace('model_size = "64MB"', 'model_size = "20MB"').replace("compute_time_s = 0.1", "compute_time_s = 0.05")
assert "20MB" in TRAIN_S3 and "0.05" in TRAIN_S3


def test_in_training_checkpoints_go_to_a_bucket_and_the_steps_wait_for_them(seaweed, bucket, tmp_path):
    """train-sync (null reads, 12 steps, 2 ranks) with --checkpoint-root s3://: a checkpoint after steps 4, 8
    and 12, each rank 0's 20 MB model as one multipart upload of 3 parts under PREFIX/ckpt-00000N/ with the
    store object beside them; the result's write block counts each part once, per endpoint and per rank;
    the steps' stall is the checkpoints' time; the secret is in nothing iodl prints or writes."""
    wl = tmp_path / "train.toml"
    wl.write_text(TRAIN_S3)
    size = 20_000_000
    out = tmp_path / "r.json"
    proc = iodl("read", "--workload", str(wl), "--engine", "null", "--steps", "12", "--checkpoint-root",
                f"s3://{bucket}/ck", "--endpoint", seaweed.endpoint, "--out", str(out), ranks=2, env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr + out.read_text()
    assert seaweed.secret_key not in text
    result = json.loads(out.read_text())
    ck, train = result["checkpoint"], result["train"]
    write = ck["write"]
    assert ck["roots"] == [f"s3://{bucket}/ck"] and ck["endpoints"] == [seaweed.endpoint] and ck["part_size"] == PART
    assert ck["fsync"] is False
    assert (write["rounds"], write["bytes"], write["ios"]) == (3, 3 * size, 3 * -(-size // PART))
    assert write["retries"] == 0 and write["errors"] == 0
    assert write["endpoints"][0]["bytes"] == write["bytes"]
    assert {p["rank"]: p["ios"] for p in write["per_rank"]} == {0: 9, 1: 0}
    stored = _objects(seaweed, bucket, "ck/")
    objects = {k: v[0] for k, v in stored.items() if k != "ck/iodl-checkpoints.json"}
    assert "ck/iodl-checkpoints.json" in stored
    assert sorted(objects.values()) == [size] * 3
    assert sorted({k.split("/")[1] for k in objects}) == ["ckpt-000001", "ckpt-000002", "ckpt-000003"]
    # every checkpoint held every rank's step: 11 measured steps (the first is not) carry all three, and
    # beside the PUTs only the store object's requests and two barriers a checkpoint (< 0.1 s each)
    stalled = train["checkpoint_s_per_step"] * 11
    assert write["duration_s"] <= stalled <= write["duration_s"] + 3 * 0.1, (stalled, write["duration_s"])
    assert "3 written" in proc.stdout and "9 PUTs" in proc.stdout
    assert "the client, not the storage" not in proc.stdout   # the checkpoints held AU down, not the emulator
