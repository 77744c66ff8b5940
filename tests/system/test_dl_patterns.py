"""The DL patterns end to end under mpiexec: tool overhead, throttled mounts, 72 ranks on 2 cores,
and how a run ends when a rank fails or the user interrupts it."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount
from tests.helpers import NotJudged, iodl, load_json, mpiexec, throttle_delivers

MB = 1_000_000


def _bare_steps_au(ranks: int, steps: int, compute_s: float) -> float:
    """AU of the bare step loop (tests/system/bare_steps.py) at these ranks, steps and compute."""
    proc = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, str(Path(__file__).with_name("bare_steps.py")),
                           str(steps), str(compute_s)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["au"]


@pytest.mark.flaky(reruns=1)  # a timing claim: judged only while the hypervisor leaves the CPU to us (conftest)
def test_tool_overhead_8_ranks_on_2_cores_costs_under_3_points_of_au(tmp_path):
    """Null engine (no I/O, no dataset), 40 ms compute, 60 steps, 8 ranks on 2 cores: everything
    iodl adds to a step (reader thread, cursor, bookkeeping) costs under 3 points of AU beyond
    the bare loop of compute + the same barrier, measured in the same run, interleaved.

    The bare loop alone loses 1-5 points here: 8 processes waking on 2 cores after every
    barrier is the kernel's scheduling skew, not iodl's; holding iodl to an absolute
    97 % judged the scheduler. When the bare loop itself is below 90 %, the machine is too busy
    to judge the claim."""
    ranks, steps, compute = 8, 60, 0.04
    bare, tool = [], []
    for round_ in range(2):
        bare.append(_bare_steps_au(ranks, steps, compute))
        out = tmp_path / f"r{round_}.json"
        proc = iodl("read", "--pattern", "train-sync", "--engine", "null", "--steps", str(steps),
                    "--compute-time", str(compute), "--out", str(out), ranks=ranks, timeout=120)
        assert proc.returncode == 0, proc.stderr
        result = load_json(out)
        assert result["ranks"] == ranks and result["train"]["steps"] == steps
        tool.append(result["train"]["au"])
    print(f"AU bare loop {bare}, iodl {tool}")
    if max(bare) < 0.90:
        raise NotJudged(f"the bare compute + barrier loop itself reaches AU {max(bare):.3f} (< 0.90): the machine is busy")
    assert max(tool) >= max(bare) - 0.03, (bare, tool)
    assert max(tool) <= max(bare) + 0.02, (bare, tool)   # iodl cannot beat the loop it adds to


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.aio
@pytest.mark.odirect
@pytest.mark.flaky(reruns=1)  # the throttle is reached only while 4 ranks on 2 cores get the CPU to keep it busy
def test_infer_async_at_its_own_batch_and_compute_time_matches_two_throttles(tmp_path):
    """resnet50-infer as it is (batch 256 of ~115 kB, 0.18 s compute), two ranks on each of two
    mounts throttled at 40 and 120 MB/s: a batch takes 0.5 to 1.5 s, so counting bytes by the step
    that consumed them would put whole batches in or out of the window. Counted by completion
    time inside the fixed window, each mount's bandwidth is its throttle within 3 %; the total
    samples/s is the sum of the ranks' rates (2 %); bytes / window is the bandwidth in every block."""
    throttles = (40 * MB, 120 * MB)
    with LoopMount(1 << 30) as a, LoopMount(1 << 30) as b, BlkioGroup("iodl-test") as group:
        gen = iodl("generate", "--workload", "resnet50-infer", "--files", "5", "--root", a.path, "--root", b.path,
                   "--quiet", timeout=300)
        assert gen.returncode == 0, gen.stderr
        # the generated 1.4 GB is dirty in the page cache: written back now, not by the run's first
        # O_DIRECT reads of each file (a CI run: both mounts 4-9 % under their throttles, both attempts)
        os.sync()
        for m, bps in zip((a, b), throttles):
            group.throttle_read(m.majmin, bps)
        out = tmp_path / "r.json"
        proc = iodl("read", "--root", a.path, "--root", b.path, "--direct", "--engine", "aio", "--iodepth", "8",
                    "--ramp", "1", "--duration", "8", "--out", str(out), ranks=4, preexec_fn=group.enter, timeout=120)
        assert proc.returncode == 0, proc.stderr
        result = load_json(out)
        delivered = [throttle_delivers(mount["bandwidth_MBps"] * MB, bps, 0.03, m.path, group, iodepth=8)
                     for m, mount, bps in zip((a, b), result["mounts"], throttles)]
    assert result["pattern"] == "infer-async" and result["workload"]["name"] == "resnet50-infer"   # the dataset's own
    assert result["window_s"] == 8.0 and result["ramp_s"] == 1.0
    for mount, bps in zip(result["mounts"], delivered):
        assert mount["bandwidth_MBps"] * MB == pytest.approx(bps, rel=0.03), (mount["path"], mount["bandwidth_MBps"])
    for block in [result["total"], *result["mounts"]]:
        assert block["bytes"] / block["window_s"] / MB == pytest.approx(block["bandwidth_MBps"], rel=1e-9)
        assert block["ios"] / block["window_s"] == pytest.approx(block["iops"], rel=1e-9)
    train = result["train"]
    spread = train["per_rank_samples_per_s"]
    print("infer-async:", [round(m["bandwidth_MBps"], 2) for m in result["mounts"]], "MB/s;",
          f"{train['samples_per_s']:.1f} samples/s (ranks' sum {spread['sum']:.1f}, min {spread['min']:.1f}, "
          f"max {spread['max']:.1f}); consumed {train['consumed_MBps']:.1f} MB/s")
    assert train["window_s"] == result["window_s"]
    assert train["samples_per_s"] == pytest.approx(spread["sum"], rel=0.02)
    # the truth for samples/s: what the throttles deliver, in samples of the dataset's mean size
    # (what was read and what was consumed differ by the batches in flight at the window's edges)
    sample = result["workload"]["dataset"]["sample_size"]
    assert train["samples_per_s"] == pytest.approx(sum(delivered) / sample, rel=0.10), train
    # two ranks share each mount: the 120 MB/s mount's ranks run about three times as fast
    assert spread["max"] / spread["min"] == pytest.approx(3.0, rel=0.25)


@pytest.mark.slow
def test_72_ranks_train_sync_resnet50_within_two_minutes(tmp_path):
    root = tmp_path / "resnet50"
    gen = iodl("generate", "--workload", "resnet50", "--files", "8", "--root", str(root), "--quiet", timeout=300)
    assert gen.returncode == 0, gen.stderr
    out = tmp_path / "r.json"
    start = time.monotonic()
    proc = iodl("read", "--pattern", "train-sync", "--workload", "resnet50", "--root", str(root), "--steps", "10",
                "--out", str(out), ranks=72, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = load_json(out)
    assert result["ranks"] == 72 and len(result["per_rank"]) == 72
    assert result["train"]["steps"] == 10
    train = result["train"]
    # train-sync's compute is the workload's compute time exactly (its end is handed to the barrier, and
    # a late wake-up is barrier wait); every step is data wait + compute + barrier wait, and AU is the
    # mean of compute / step: at least compute / mean step (Jensen; 2% for the steps' spread)
    compute, sleep = train["compute_s_per_step"], result["workload"]["train"]["compute_time_s"]
    assert compute == pytest.approx(sleep, rel=1e-6), train
    step = compute + train["data_wait_s_per_step"] + train["barrier_wait_s_per_step"]
    assert 0.98 * compute / step <= train["au"] <= 1, train
    assert train["samples_per_s"] == pytest.approx(train["samples"] / train["window_s"], rel=1e-9)
    # every rank read whole batches: 10 steps x 256 samples each, no idle rank, no trimming
    assert result["train"]["samples"] == 72 * 10 * 256
    assert elapsed < 120, elapsed


@pytest.mark.slow
def test_72_ranks_hold_at_most_60_mb_each(tmp_path):
    """The memory goal for 72 ranks on one node, iodl's own cost (the null engine touches no
    request buffers): the median rank's peak RSS <= 60 MB. Rank 0 also maps every peer's MPI
    queue pages while it gathers, so it is held to the goal plus that: 72 MB."""
    out = tmp_path / "r.json"
    proc = iodl("read", "--pattern", "train-sync", "--engine", "null", "--steps", "10", "--compute-time", "0.05",
                "--progress", "off", "--out", str(out), ranks=72, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_rank = load_json(out)["per_rank"]
    rss = sorted(p["max_rss_mb"] for p in per_rank)
    assert rss[len(rss) // 2] <= 60, rss
    assert next(p["max_rss_mb"] for p in per_rank if p["rank"] == 0) <= 72, rss


def _two_mount_dataset(tmp_path):
    roots = [str(tmp_path / "a"), str(tmp_path / "b")]
    gen = iodl("generate", "--workload", "tiny", "--root", roots[0], "--root", roots[1], "--quiet")
    assert gen.returncode == 0, gen.stderr
    return roots


def test_a_rank_that_fails_ends_the_whole_job_quickly_with_one_clear_line(tmp_path):
    roots = _two_mount_dataset(tmp_path)
    shard_dir = os.path.join(roots[1], "copy-0000")
    victim = sorted(os.listdir(shard_dir))[4]
    os.unlink(os.path.join(shard_dir, victim))      # one mount loses a shard after generation
    start = time.monotonic()
    proc = iodl("read", "--pattern", "train-sync", "--root", roots[0], "--root", roots[1], "--steps", "200",
                "--compute-time", "0.05", ranks=4, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 10, elapsed
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("iodl: error")]
    assert len(errors) >= 1 and victim in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("pattern", ["train-sync", "storage-only"])
def test_sigint_to_mpiexec_leaves_a_partial_result(tmp_path, pattern):
    roots = _two_mount_dataset(tmp_path)
    out = tmp_path / "r.json"
    # storage-only without a ramp: its window, where bytes count, runs from the first progress line on
    length = ["--steps", "1000"] if pattern == "train-sync" else ["--duration", "1000", "--ramp", "0"]
    cmd = [mpiexec(), "-n", "3", sys.executable, "-m", "iodl", "read", "--pattern", pattern, "--root", roots[0],
           *length, "--compute-time", "0.02", "--progress", "on", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # stopped once rank 0 has read for a second (its first progress line), not after a fixed wait
    # that must also cover the ranks' start-up on a busy machine
    for line in proc.stdout:
        if line.startswith("iodl: 1 s,"):
            break
    assert proc.poll() is None, "the run ended before its first progress line"
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    result = load_json(out)
    assert result["partial"] is True and result["ranks"] == 3
    assert result["total"]["bytes"] > 0
