"""`iodl kvcache` as a user runs it: its result's keys against docs/numbers.md, its figures
against their own definitions, usage errors in one line, Ctrl-C within a second."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import NotJudged, iodl, load_json, mpiexec

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "numbers.md")
SMALL = ["--model", "tiny-1b", "--users", "6", "--context", "200:2000"]


def _documented() -> set[str]:
    text = open(DOCS, encoding="utf-8").read()
    section = text[text.index("Result file, schema `iodl.kvcache/1`"):]
    block = section[section.index("```") + 3:section.index("```", section.index("```") + 3)]
    return set(re.findall(r'"([A-Za-z_0-9]+)"', block)) - {"iodl", "kvcache/1"}


def _keys(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


@pytest.mark.parametrize("ranks", [0, 2], ids=["serial", "mpiexec-2"])
def test_a_run_writes_the_documented_result_whose_figures_follow_their_definitions(tmp_path, ranks):
    if ranks and not mpiexec():
        pytest.skip("no mpiexec")
    out = tmp_path / "r.json"
    trials = 2 if ranks else 1
    proc = iodl("kvcache", "--root", str(tmp_path / "kv"), *SMALL, "--duration", "3", "--trials", str(trials),
                "--out", str(out), ranks=ranks, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s" in proc.stdout
    r = load_json(out)
    latency = {"p50", "p90", "p99", "p999", "max"}
    documented = _documented() - ({"trials"} if trials == 1 else set())
    assert _keys(r) - latency == documented - latency, (_keys(r) ^ documented)
    kv, window = r["kvcache"], 3.0 * trials
    assert r["schema"] == "iodl.kvcache/1" and r["ranks"] == max(ranks, 1) and not r["partial"]
    assert r["trial_count"] == trials and kv["window_s"] == window and kv["bytes_per_token"] == 24_576
    assert kv["write_bandwidth_MBps"] == pytest.approx(kv["written_bytes"] / window / 1e6, rel=1e-12)
    assert kv["read_bandwidth_MBps"] == pytest.approx(kv["read_bytes"] / window / 1e6, rel=1e-12)
    assert kv["tokens_per_s"] == pytest.approx(kv["tokens"] / window, rel=1e-12)
    per_trial = [t["kvcache"] for t in r.get("trials", [])] or [kv]
    assert sum(t["written_bytes"] for t in per_trial) == kv["written_bytes"]
    # MLPerf's: the mean over trials of each trial's sums over ranks, bandwidth in GiB/s
    m = r["mlperf"]
    assert (m["trial_count"], m["rank_count"]) == (trials, max(ranks, 1))
    assert m["aggregated_read_bandwidth_gbps"] == pytest.approx(
        sum(p["read_bytes"] / p["end_s"] / 2**30 for t in per_trial for p in t["per_rank"]) / trials, rel=1e-9)
    # MLPerf's tokens are the generated ones only (kv-cache.py's total_tokens), fewer than iodl's context + generated
    assert 0 < m["aggregated_avg_throughput_tokens_per_sec"] < sum(t["tokens_per_s"] for t in per_trial) / trials
    assert 0 < m["aggregated_device_write_p95_ms"] <= max(t["fsync_latency_us"]["max"] for t in per_trial) / 1e3
    for key in ("tokens", "requests", "written_bytes", "read_bytes", "entries_written", "entry_reads"):
        assert kv[key] == sum(p[key] for p in kv["per_rank"]) == kv["mounts"][0][key]
        assert kv[key] > 0, key
    # each rank worked (a rank may finish no request in a window on a loaded machine, but it began some)
    assert all(p["written_bytes"] > 0 for p in kv["per_rank"])
    assert kv["device_read_fraction"] > 0.99   # each file's pages are dropped before it is read
    assert kv["fsyncs"] >= kv["entries_written"] > 0


def test_a_root_holding_someone_elses_files_is_refused_in_one_line(tmp_path):
    (tmp_path / "theirs.txt").write_text("keep me")
    proc = iodl("kvcache", "--root", str(tmp_path), *SMALL, "--duration", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "did not write" in proc.stderr
    assert os.listdir(tmp_path) == ["theirs.txt"]


def test_neither_option_nor_model_is_a_usage_error(tmp_path):
    proc = iodl("kvcache", "--root", str(tmp_path / "kv"))
    assert proc.returncode == 2 and "--option" in proc.stderr


@pytest.mark.flaky(reruns=1)   # a timing claim, on two cores shared with other work
@pytest.mark.skipif(not mpiexec(), reason="no mpiexec")
@pytest.mark.parametrize("ranks", [1, 2], ids=["1-rank", "2-ranks"])
def test_ctrl_c_ends_the_run_within_a_second_with_a_partial_result(tmp_path, ranks):
    """SIGINT to mpiexec 1 s into the I/O of a 60 s run: every rank stops (the engines within
    100 ms, plus the fsync in progress, which no stop interrupts: entries of 6-13 MB keep it short;
    the window ends at the stop) and rank 0 has written the result, marked partial, within 1.0 s
    (the file's mtime; measured 0.05-0.21 s); with the launcher's and the ranks' exit, at most
    0.2 s more, everything has ended within 1.2 s (measured 0.15-0.46 s)."""
    out = tmp_path / "r.json"
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "iodl", "kvcache", "--root", str(tmp_path / "kv"),
           "--model", "llama3.1-8b", "--users", "8", "--context", "50:100", "--duration", "60", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    entries = [tmp_path / "kv" / f"rank_{r}" for r in range(ranks)]
    deadline = time.monotonic() + 30
    while not all(e.is_dir() and any(e.iterdir()) for e in entries) and time.monotonic() < deadline:
        time.sleep(0.05)   # start-up (imports, a busy machine's) until every rank writes its first entry
    time.sleep(1.0)
    sent, sent_wall = time.monotonic(), time.time()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    written = out.stat().st_mtime - sent_wall
    print(f"{ranks} rank(s): result written {written:.2f} s after SIGINT, exited after {took:.2f} s")
    assert proc.returncode == 130, stderr
    assert written <= 1.0 and took <= 1.2, (written, took)
    # MPI_Finalize names requests left pending ("has pending 1 references"): the stop leaves none
    assert "pending" not in stdout + stderr, stdout + stderr
    r = json.loads(out.read_text())
    kv = r["kvcache"]
    assert r["partial"] is True and "stopped" in stdout and r["ranks"] == ranks
    assert 0.5 < kv["window_s"] < 30 and all(p["written_bytes"] + p["read_bytes"] > 0 for p in kv["per_rank"])


def _repeated_blocks(entries: list[np.ndarray], size: int) -> tuple[int, int]:
    """(whole blocks of `size` bytes in the entries, how many of them repeat another), exactly and
    without hashing 1.2 GB block by block in Python (5.8 s): blocks whose first 8 bytes no other block
    has are unique; only those that share their first 8 bytes are compared whole."""
    blocks = [a[:len(a) // size * size].reshape(-1, size) for a in entries]
    keys = np.concatenate([np.ascontiguousarray(b[:, :8]).view(np.uint64).ravel() for b in blocks])
    values, counts = np.unique(keys, return_counts=True)
    shared = np.flatnonzero(np.isin(keys, values[counts > 1]))
    starts = np.cumsum([0] + [len(b) for b in blocks])
    owner = np.searchsorted(starts, shared, side="right") - 1
    candidates = [blocks[f][i - starts[f]].tobytes() for f, i in zip(owner, shared)]
    return len(keys), len(candidates) - len(set(candidates))


@pytest.mark.skipif(not mpiexec(), reason="no mpiexec")
def test_no_block_of_4096_or_512_bytes_repeats_in_what_two_ranks_wrote(tmp_path):
    """Storage that deduplicates would store less than was written (kv-cache.py's entries once
    deduplicated 96.7 %): every whole 4 KiB and 512 B block of every entry of both ranks is unique."""
    root = tmp_path / "kv"
    proc = iodl("kvcache", "--root", str(root), *SMALL, "--no-multi-turn", "--max-requests", "12", "--duration", "60",
                ranks=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    entries = [np.memmap(root / rank_dir / name, dtype=np.uint8, mode="r")
               for rank_dir in ("rank_0", "rank_1") for name in os.listdir(root / rank_dir)]
    for size in (4096, 512):
        blocks, repeats = _repeated_blocks(entries, size)
        assert blocks > 10_000 and repeats == 0, (size, blocks, repeats)


@pytest.mark.skipif(not mpiexec(), reason="no mpiexec")
def test_mlperf_files_are_in_mlpstorages_layout_and_aggregate_by_its_rule(tmp_path):
    """--mlperf-dir: option_1/trial_T/rank_N/kvcache_results_*.json for 2 ranks x 2 trials, and the
    run summary mlpstorage writes, whose option entry is its aggregation of those files (sum over
    ranks, mean over trials; the largest P95 over ranks and trials) and the result's `mlperf`."""
    import glob
    from statistics import fmean

    out, mlperf = tmp_path / "r.json", tmp_path / "mlperf"
    proc = iodl("kvcache", "--root", str(tmp_path / "kv"), "--option", "1", *SMALL, "--duration", "2",
                "--trials", "2", "--mlperf-dir", str(mlperf), "--out", str(out), ranks=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = [[json.loads(open(glob.glob(str(mlperf / "option_1" / f"trial_{t}" / f"rank_{r}" /
                                             "kvcache_results_*.json"))[0]).read())["summary"] for r in (0, 1)]
             for t in (0, 1)]
    (summary_path,) = glob.glob(str(mlperf / "kvcache_run_summary_*.json"))
    summary = json.loads(open(summary_path).read())
    entry = summary["options"]["1"]
    assert (summary["total_ranks"], summary["trials_per_option"], summary["npernode"]) == (2, 2, 2)

    def by_rule(get):
        return fmean(sum(get(s) for s in trial) for trial in files)

    assert entry["aggregated_read_bandwidth_gbps"] == pytest.approx(
        by_rule(lambda s: s["cache_stats"]["tier_storage_read_bandwidth_gbps"]), rel=1e-12)
    assert entry["aggregated_avg_throughput_tokens_per_sec"] == pytest.approx(
        by_rule(lambda s: s["avg_throughput_tokens_per_sec"]), rel=1e-12)
    assert entry["aggregated_device_read_p95_ms"] == max(s["cache_stats"]["storage_read_device_p95_ms"]
                                                         for trial in files for s in trial)
    assert entry["aggregated_p95_latency_ms"] == max(s["storage_io_latency_ms"]["p95"]
                                                     for trial in files for s in trial)
    assert json.loads(out.read_text())["mlperf"] == entry
    r = json.loads(out.read_text())
    for t, trial in enumerate(files):   # kv-cache.py's: generated tokens / the rank's window
        for rank, s in enumerate(trial):
            end_s = r["trials"][t]["kvcache"]["per_rank"][rank]["end_s"]
            assert s["avg_throughput_tokens_per_sec"] == pytest.approx(s["total_tokens"] / end_s, rel=1e-12)
            # fewer than iodl's tokens (context + generated); a rank may finish no request in a 2 s trial
            # on a loaded machine (a CI run's phase 1: one did, why not measured): 0 and 0
            tokens = r["trials"][t]["kvcache"]["per_rank"][rank]["tokens"]
            assert 0 < s["total_tokens"] < tokens or s["total_tokens"] == tokens == 0
    if not sum(s["total_tokens"] for trial in files for s in trial):
        # no rank finished a request in either 2 s trial (every request fsyncs its entry; seen once
        # beside two other kvcache tests, three at a time): the rule held over zeros only
        raise NotJudged("no request finished on 2 ranks x 2 trials of 2 s: the aggregation saw only zeros")
    assert sum(s["cache_stats"]["storage_entries"] for trial in files for s in trial) == r["kvcache"]["entries_written"]
