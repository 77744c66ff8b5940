"""`iodl read` from s3:// roots against a real server (SeaweedFS): the patterns unchanged, the s3
engine's GETs counted; faults end in one line naming the endpoint and the object."""
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from iodl import _native, histogram, plan
from iodl.engine import raise_for_errors
from iodl.s3engine import S3Engine
from iodl.s3store import S3Store
from tests.helpers import iodl, mpiexec
from tests.s3.server import Seaweed

# as tests/acceptance/test_stop.py holds files to: ~1 s for the stop, one request's service time, the
# start-up/reduce slack of a Python process on a busy 2-core VM
STOP_BOUND_S = 4.0


@pytest.fixture(scope="module")
def dataset(seaweed):
    """A tiny dataset (6 shards, ~25 MB) generated into its own bucket: (root, its bytes)."""
    client = seaweed.client()
    client.create_bucket(Bucket="read-bkt")
    proc = iodl("generate", "--root", "s3://read-bkt/tiny", "--endpoint", seaweed.endpoint, "--files", "6",
                "--quiet", env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    total = sum(o["Size"] for o in client.list_objects_v2(Bucket="read-bkt", Prefix="tiny/copy-")["Contents"])
    return "s3://read-bkt/tiny", total


def _read(seaweed, root, out, *args):
    return iodl("read", "--root", root, "--endpoint", seaweed.endpoint, "--out", str(out), *args, env=seaweed.env())


def test_validate_reads_every_object_whole(seaweed, dataset, tmp_path):
    root, total = dataset
    proc = _read(seaweed, root, tmp_path / "v.json", "--pattern", "validate")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "v.json").read_text())
    assert result["engine"] == "s3"
    assert result["validate"]["bytes"] == result["validate"]["expected_bytes"] == total
    assert result["total"]["bytes"] == total
    # the secret is nowhere in what a run prints or writes (result files get published)
    assert seaweed.secret_key not in proc.stdout + proc.stderr + (tmp_path / "v.json").read_text()


@pytest.mark.parametrize("block", ["8MiB", "1MiB"])
def test_storage_only_whole_and_ranged_gets(seaweed, dataset, tmp_path, block):
    """A --block-size above every object: one GET per object; 1 MiB: GETs of 1 MiB parts."""
    root, _total = dataset
    extra = ["--block-size", block]
    proc = _read(seaweed, root, tmp_path / "s.json", "--pattern", "storage-only", "--duration", "2", "--ramp", "0.5",
                 "--iodepth", "4", *extra)
    assert proc.returncode == 0, proc.stderr
    total = json.loads((tmp_path / "s.json").read_text())["total"]
    assert total["bytes"] > 4e6 and total["ios"] > 0
    mean = total["bytes"] / total["ios"]
    # time to first byte: of every counted GET, never longer than the GET itself; no retries on a healthy server
    assert 0 < total["ttfb_us"]["p50"] <= total["latency_us"]["p50"]
    assert total["ttfb_us"]["max"] <= total["latency_us"]["max"]
    assert total["retries"] == 0 and total["errors"] == 0
    if block == "1MiB":   # every part but each object's last is 1 MiB; tiny's objects are ~4 MB
        assert 0.7 * (1 << 20) <= mean <= (1 << 20)
    else:                 # whole objects of 3.8-4.5 MB
        assert 3.8e6 <= mean <= 4.6e6


def test_the_next_plan_starts_while_this_one_drains(seaweed, dataset, monkeypatch):
    """S3Engine.ahead(): storage-only's next group of shards is sent by the GET threads that come
    free while the current group's last GETs are still in flight (the pipe stays full across
    groups), each plan's GETs counted in its own run. Plan 1: one object, 2 in flight: the second
    thread has nothing of plan 1 to send, so plan 2's first GET goes before plan 1's ends."""
    for k, v in seaweed.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    root, total = dataset
    client = seaweed.client()
    objs = client.list_objects_v2(Bucket="read-bkt", Prefix="tiny/copy-")["Contents"]
    handles = [f"{seaweed.endpoint}/read-bkt/{o['Key']}" for o in objs]
    sizes = np.array([o["Size"] for o in objs], dtype=np.int64)
    first, rest = plan.shard_plan(sizes[:1], 8 << 20), plan.shard_plan(sizes, 8 << 20)
    with S3Engine(depth=2, block_size=8 << 20) as engine:
        engine.ahead(handles, rest)
        one = engine.run(handles[:1], first, histogram.empty())
        two = engine.run(handles, rest, histogram.empty())
    assert (one["ios"], one["bytes"], one["done"]) == (1, int(sizes[0]), 1)
    assert (two["ios"], two["bytes"], two["done"]) == (len(objs), total, len(objs))
    assert two["t_start_ns"] < one["t_end_ns"]   # plan 2 under way before plan 1's GET ended
    assert one["errors"] == two["errors"] == 0


@pytest.mark.flaky(reruns=1)   # the deadline must fall while the big GET is in flight: a late wake-up can miss it
def test_a_failure_of_the_plan_ahead_is_the_runs_error_when_the_run_stops_first(seaweed, bucket, monkeypatch):
    """A GET of the plan ahead (S3Engine.ahead) fails for good while this run's last GET is in flight,
    and this run then stops at its deadline: the failure is this run's error, counted once and named
    by its own object (no row of this run's plan), not dropped with the plan ahead. This run: one
    128 MB object (~0.1 s or more to receive here), 2 in flight on GET threads already started and
    connected, a deadline 30 ms on (the GET is sent before it, ends after it); the plan ahead: an
    object that is not there, whose 404 comes back in a few ms and is not retried."""
    for k, v in seaweed.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    size = 128 << 20
    seaweed.client().put_object(Bucket=bucket, Key="big", Body=os.urandom(size))
    big, missing = [f"{seaweed.endpoint}/{bucket}/big"], [f"{seaweed.endpoint}/{bucket}/not-there"]
    rows = plan.shard_plan(np.array([size], dtype=np.int64), size)
    with S3Engine(depth=2, block_size=size) as engine:
        small = plan.shard_plan(np.array([1 << 20, 1 << 20], dtype=np.int64), 1 << 20)
        assert engine.run(big * 2, small, histogram.empty())["ios"] == 2   # both threads started, connected
        engine.ahead(missing, plan.shard_plan(np.array([1 << 20], dtype=np.int64), size))
        stats = engine.run(big, rows, histogram.empty(), deadline_ns=_native.monotonic_ns() + 30_000_000)
    assert (stats["ios"], stats["bytes"], stats["done"]) == (1, size, 1)   # this run's own GET, whole
    assert stats["errors"] == 1 and stats["first_errno"] == errno.ENOENT, stats
    with pytest.raises(OSError) as exc:
        raise_for_errors(stats, rows, big)
    assert exc.value.filename == missing[0] and "HTTP 404" in exc.value.strerror, exc.value


@pytest.mark.parametrize("pattern,extra", [("train-sync", ["--steps", "20"]),
                                           ("infer-async", ["--duration", "2", "--ramp", "0.5"])])
def test_step_patterns_read_samples_as_ranged_gets(seaweed, dataset, tmp_path, pattern, extra):
    """train-sync and infer-async read their samples' records as ranged GETs: the samples the steps
    consumed were read: the bytes of the GET bodies are the bytes the steps consumed (train-sync), or
    within 5% of them (infer-async's fixed window cuts through its read-ahead)."""
    root, _total = dataset
    proc = _read(seaweed, root, tmp_path / "t.json", "--pattern", pattern, *extra)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "t.json").read_text())
    total, train = result["total"], result["train"]
    assert train["samples"] > 0 and train["consumed_bytes"] > 0
    assert total["ios"] > 0
    if pattern == "train-sync":   # its window is its steps' span: every record read is one a step consumed
        assert total["bytes"] == train["consumed_bytes"]
    else:                         # a fixed window: the loader's read-ahead at its two edges, a few batches
        assert abs(total["bytes"] - train["consumed_bytes"]) <= 0.05 * train["consumed_bytes"], (
            total["bytes"], train["consumed_bytes"])
    assert total["errors"] == 0 and 0 < total["ttfb_us"]["p50"] <= total["latency_us"]["p50"]


def test_each_rank_lists_the_prefix_in_pages_of_1000(seaweed, bucket, tmp_path, monkeypatch):
    """As DLIO lists its data folder at start, each rank lists the dataset's prefix before the run:
    1001 objects under it (the dataset's, and others the test put beside them) are ceil(1001 / 1000)
    = 2 ListObjectsV2 pages, counted as the rank's LISTs and its endpoint's, with their rate."""
    assert iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", "2", "--quiet",
                env=seaweed.env()).returncode == 0
    client = seaweed.client()
    ours = client.list_objects_v2(Bucket=bucket, Prefix="ds/")["KeyCount"]
    for k, v in seaweed.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    store = S3Store(seaweed.endpoint, 32)
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda i: store.put(bucket, f"ds/pad/{i:04d}", b""), range(1001 - ours)))
    listed = sum(page["KeyCount"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                                                Prefix="ds/"))
    assert listed == 1001
    proc = _read(seaweed, f"s3://{bucket}/ds", tmp_path / "l.json", "--pattern", "validate")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "l.json").read_text())
    (endpoint,) = result["endpoints"]
    assert result["total"]["lists"] == endpoint["lists"] == result["per_rank"][0]["lists"] == 2
    assert endpoint["list_ops_per_s"] == pytest.approx(2 / result["per_rank"][0]["list_s"])
    assert result["validate"]["bytes"] == result["validate"]["expected_bytes"]   # the pad is not read


def test_a_prefix_without_a_dataset_is_one_line(seaweed, dataset, tmp_path):
    proc = _read(seaweed, "s3://read-bkt/nothing-here", tmp_path / "n.json", "--pattern", "validate")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iodl: error: {seaweed.endpoint}: s3://read-bkt/nothing-here: no "
                                   "iodl-dataset.json: iodl reads buckets it generated (iodl generate --root s3://...)")


def test_an_object_gone_is_one_line_with_the_servers_answer(seaweed, bucket, tmp_path):
    """A shard deleted after generate (by the test, not iodl): validate's GET of it is answered 404,
    the S3 code read from the server's error document; not retried (a 4xx is an answer); one line
    naming the object; what was read before, partial."""
    assert iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", "2", "--quiet",
                env=seaweed.env()).returncode == 0
    client = seaweed.client()
    shards = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="ds/copy-")["Contents"])
    client.delete_object(Bucket=bucket, Key=shards[-1])
    proc = _read(seaweed, f"s3://{bucket}/ds", tmp_path / "g.json", "--pattern", "validate", "--iodepth", "1")
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("iodl: error: [Errno 2] No such file or directory: HTTP 404 NoSuchKey "
                                               "(read of "), line
    assert line.endswith(f"'{seaweed.endpoint}/{bucket}/{shards[-1]}'"), line
    total = json.loads((tmp_path / "g.json").read_text())["total"]
    assert total["errors"] == 1 and total["retries"] == 0 and total["bytes"] > 0


def test_a_run_failing_on_its_first_get_counts_the_error(seaweed, bucket, tmp_path):
    """Every shard deleted after generate (the manifest kept): the rank's first GET is answered 404,
    so the engine's run that fails completed nothing. Its error is still counted, in total, rank and
    endpoint (the counters once kept a run's figures only when it had completed a GET, and dropped
    its error with them: the killed server's endpoint then counted 0 errors)."""
    assert iodl("generate", "--root", f"s3://{bucket}/ds", "--endpoint", seaweed.endpoint, "--files", "2", "--quiet",
                env=seaweed.env()).returncode == 0
    client = seaweed.client()
    for o in client.list_objects_v2(Bucket=bucket, Prefix="ds/copy-")["Contents"]:
        client.delete_object(Bucket=bucket, Key=o["Key"])
    proc = _read(seaweed, f"s3://{bucket}/ds", tmp_path / "f.json", "--pattern", "storage-only", "--duration", "5",
                 "--ramp", "0", "--iodepth", "1")
    assert proc.returncode == 1 and "HTTP 404 NoSuchKey" in proc.stderr, proc.stderr
    result = json.loads((tmp_path / "f.json").read_text())
    (endpoint,) = result["endpoints"]
    assert (result["total"]["errors"], result["per_rank"][0]["errors"], endpoint["errors"]) == (1, 1, 1)
    assert result["total"]["bytes"] == 0 and result["partial"] is True


def _connections(port: int) -> int:
    out = subprocess.run(["ss", "-Htn", "state", "established", "dst", f"127.0.0.1:{port}"], capture_output=True,
                         text=True).stdout
    return len(out.splitlines())


def _reading(proc, server, at_least: int = 6) -> None:
    """Until the run's GETs are going: its engine holds >= at_least connections to the server."""
    deadline = time.monotonic() + 60
    while _connections(server.port) < at_least and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and _connections(server.port) >= at_least, "the run never started reading"


def _killed_mid_read(server, cmd: list[str]):
    """Run cmd (a storage-only read for 60 s) and SIGKILL the server once its GETs are going:
    (the process, (stdout, stderr, seconds from the kill to its end))."""
    proc = subprocess.Popen([*cmd, "--pattern", "storage-only", "--duration", "60", "--ramp", "0"],
                            env={**os.environ, **server.env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _reading(proc, server)
    time.sleep(0.5)
    server.kill()
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    return proc, (out, err, time.monotonic() - t0)


HUNG_S = 3   # IODL_S3_IO_TIMEOUT of the hung-server tests: the default's 10 s is a wait, not a check


def test_a_hung_server_ends_the_run_after_the_io_timeout(seaweed, dataset, tmp_path):
    """The server SIGSTOPped once the run's GETs are going (a hung server: its kernel still holds
    the connections, nothing answers): each GET in flight has no byte for IODL_S3_IO_TIMEOUT (3 s
    here, 10 by default), fails for good (not retried: it would wait on the same server) and the run
    ends in one line naming the object, that long after the stop, within STOP_BOUND_S; what was
    read, partial."""
    root, _total = dataset
    proc = subprocess.Popen([sys.executable, "-m", "iodl", "read", "--root", root, "--endpoint", seaweed.endpoint,
                             "--pattern", "storage-only", "--duration", "60", "--ramp", "0", "--iodepth", "4",
                             "--block-size", "1MiB", "--out", str(tmp_path / "h.json")],
                            env={**os.environ, **seaweed.env(), "IODL_S3_IO_TIMEOUT": str(HUNG_S)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _reading(proc, seaweed, at_least=4)
        os.killpg(seaweed.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        os.killpg(seaweed.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    line = err.strip()
    assert "\n" not in line and line.startswith(f"iodl: error: [Errno {errno.ETIMEDOUT}] "), line
    assert f": no answer in {HUNG_S:g} s (read of " in line and f"'{seaweed.endpoint}/read-bkt/tiny/" in line
    assert HUNG_S - 0.5 <= took <= HUNG_S + STOP_BOUND_S, took
    result = json.loads((tmp_path / "h.json").read_text())
    assert result["partial"] and result["total"]["errors"] == 1 and result["total"]["retries"] == 0
    assert result["total"]["bytes"] > 0


def test_server_gone_mid_read_is_one_line_naming_the_object(tmp_path):
    """The server killed once the run's GETs are going (its engine holds >= 6 connections to the server):
    one line naming the endpoint and the object, and the result of what was read before, partial."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-kill-")).start()
    try:
        server.client().create_bucket(Bucket="gone-bkt")
        assert iodl("generate", "--root", "s3://gone-bkt/ds", "--endpoint", server.endpoint, "--files", "6", "--quiet",
                    env=server.env()).returncode == 0
        proc, (out, err, took) = _killed_mid_read(server, [sys.executable, "-m", "iodl", "read", "--root",
                                                           "s3://gone-bkt/ds", "--endpoint", server.endpoint,
                                                           "--out", str(tmp_path / "gone.json")])
        # iodl's 3 retries take 1.4 s
        assert took < 5, "the failure ends the run after iodl's own retries"
        assert proc.returncode == 1, out + err
        line = err.strip()
        assert "\n" not in line
        # (the GETs cut short by the kill are retried, and refused)
        assert line.startswith("iodl: error: [Errno 111] Connection refused: ECONNREFUSED"), line
        assert " after 3 retries (read of " in line, line
        assert f"'{server.endpoint}/gone-bkt/ds/copy-0000/train-" in line
        result = json.loads((tmp_path / "gone.json").read_text())
        assert result["partial"] is True and result["total"]["bytes"] > 0 and result["total"]["ios"] > 0
        # the GET that failed for good is counted, with its 3 retries; the endpoint's block says the same
        assert result["total"]["errors"] == 1 and result["total"]["retries"] >= 3
        assert result["endpoints"][0]["url"] == server.endpoint and result["endpoints"][0]["errors"] == 1
    finally:
        server.remove()


@pytest.mark.flaky(reruns=1)   # a timing claim: the bound holds when the process gets the CPU
def test_ctrl_c_stops_within_a_second_with_a_partial_result(seaweed, dataset, tmp_path):
    """SIGINT mid-read: exit 130 within STOP_BOUND_S, nothing on stderr, the result partial with what
    was counted."""
    root, _total = dataset
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "iodl", "read", "--root", root, "--endpoint", seaweed.endpoint,
                             "--pattern", "storage-only", "--duration", "600", "--ramp", "0", "--iodepth", "8",
                             "--out", str(out)], env={**os.environ, **seaweed.env()}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                                               signal.SIG_DFL))
    _reading(proc, seaweed)
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert err == "", err
    result = json.loads(out.read_text())
    assert result["partial"] is True and result["total"]["bytes"] > 0
    assert elapsed < STOP_BOUND_S, elapsed


@pytest.mark.mpiexec
def test_one_ranks_server_gone_stops_every_rank_with_a_partial_result(seaweed, tmp_path):
    """Two ranks over two endpoints (the same dataset on each): the second rank's server killed once its
    GETs are going. That rank fails for good after iodl's retries and tells the other, which stops as on
    Ctrl-C: one line naming the rank, the endpoint and the object; exit 1; the result of what both read,
    partial, with the failure as its error."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-kill2-"), keys=(seaweed.access_key, seaweed.secret_key)).start()
    try:
        generating = []
        for s in (seaweed, server):   # both at once
            s.client().create_bucket(Bucket="gone2-bkt")
            generating.append(subprocess.Popen([sys.executable, "-m", "iodl", "generate", "--root", "s3://gone2-bkt/ds",
                                                "--endpoint", s.endpoint, "--files", "6", "--quiet"],
                                               env={**os.environ, **s.env()}))
        assert [p.wait(timeout=60) for p in generating] == [0, 0]
        out = tmp_path / "gone.json"
        proc, (stdout, err, took) = _killed_mid_read(server, [mpiexec(), "-n", "2", sys.executable, "-m", "iodl", "read",
                                                              "--root", "s3://gone2-bkt/ds", "--endpoint",
                                                              seaweed.endpoint, "--endpoint", server.endpoint,
                                                              "--out", str(out)])
    finally:
        server.remove()
    assert proc.returncode == 1, stdout + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("iodl: error: rank 1: "), err
    assert f"'{server.endpoint}/gone2-bkt/ds/copy-0000/train-" in lines[0]
    assert took < 5, "iodl's retries (1.4 s), the notice (100 ms) and the stop"
    result = json.loads(out.read_text())
    assert result["partial"] is True and result["error"] in lines[0]
    assert [p["rank"] for p in result["per_rank"]] == [0, 1] and all(p["bytes"] > 0 for p in result["per_rank"])
    by_url = {e["url"]: e for e in result["endpoints"]}
    # (failed once in a whole CI run, 27 Nov 2026, killed endpoint's errors 0; not reproduced in 34 runs
    # alone or beside two busy loops: the message keeps what a next failure shows)
    assert by_url[server.endpoint]["errors"] == 1 and by_url[seaweed.endpoint]["errors"] == 0, (
        err, [(e["url"], e["ranks"], e["errors"], e["retries"]) for e in result["endpoints"]],
        [(p["rank"], p["errors"], p["retries"], p["bytes"]) for p in result["per_rank"]], result["total"]["errors"])
