"""iodl checkpoint against the truth of a throttled loop device: cgroup v1 blkio throttles give
the write and read speeds, and the loop device's own counters say what reached it.

The model is a small transformer written by 4 ranks (ZeRO 3 over 4 data-parallel ranks, ~350 MB),
defined here in TOML with DLIO's keys."""
import os
import shutil

import pytest

from iodl.cache import drop_caches
from iodl.groundtruth import BlkioGroup, LoopMount
from tests.helpers import NotJudged, fio_write_rate, iodl, load_json, transformer_toml

MB = 1_000_000

MODEL = transformer_toml("truth-350mb", layers=1, hidden=1024, ffn=2048, heads=8, vocab=7000, data=4)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text(MODEL)
    plan = iodl("checkpoint", "--workload", str(path), "--plan", "--json")
    assert plan.returncode == 0, plan.stderr
    import json

    total = json.loads(plan.stdout)["total_bytes"]
    assert 300 * MB < total < 400 * MB, total
    return str(path), total


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.flaky(reruns=1)   # 4 ranks on 2 cores keep a throttle busy only while they get the CPU
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_write_and_read_back_match_the_throttles_and_every_byte_reaches_the_device(tmp_path, model, direct):
    """Writes at a 60 MB/s write throttle (buffered: the fsync's writeback runs in the writer's
    context and is throttled there) and reads back after dropping caches at a 100 MB/s read
    throttle: each within 5 % of its throttle (the write, when it is not, within 5 % of fio's in the same
    shape: the backing disk was short); the device has been asked to write at least every checkpoint byte
    when the command returns; every byte written is read back."""
    path, total = model
    write_bps, read_bps = 60 * MB, 100 * MB
    with LoopMount(1 << 30) as m, BlkioGroup("iodl-ckpt") as group:
        group.throttle_write(m.majmin, write_bps)
        group.throttle_read(m.majmin, read_bps)
        root = os.path.join(m.path, "ckpt")
        out = tmp_path / "r.json"
        drop_caches()
        before = m.bytes_written()
        args = ["checkpoint", "--workload", path, "--root", root, "--engine", "aio" if direct else "psync",
                "--drop-caches", "--out", str(out)] + (["--direct"] if direct else [])
        proc = iodl(*args, ranks=4, preexec_fn=group.enter, timeout=120)
        reached = m.bytes_written() - before
        assert proc.returncode == 0, proc.stderr
        result = load_json(out)
        write, read = result["checkpoint"]["write"], result["checkpoint"]["read"]
        print(f"checkpoint {total / MB:.1f} MB: write {write['bandwidth_MBps']:.2f} MB/s (slowest rank "
              f"{write['min_rank_bandwidth_MBps']:.2f}), read {read['bandwidth_MBps']:.2f} MB/s; device wrote "
              f"{reached / MB:.1f} MB")
        written = write["bandwidth_MBps"] * MB
        fio = []
        if written != pytest.approx(write_bps, rel=0.05):
            # The set rate is the truth only while the loop device's backing disk carries it: a CI run wrote
            # 56.9 MB/s here, and with another writer on that disk both tools in this shape got 37-56 MB/s,
            # either ahead, round by round. Then the truth is fio writing the same shape (4 jobs x 2 files,
            # the same engine and requests in flight) through the same throttle, right before and right
            # after the write is run again (without the read back).
            def fio_look() -> None:
                shutil.rmtree(root)
                fio.append(fio_write_rate(os.path.join(m.path, "fio-probe"), total, group, direct=direct, jobs=4,
                                          files=2, engine="libaio" if direct else "psync", iodepth=8 if direct else 1))

            fio_look()
            again = iodl(*args, "--reads", "0", "--out", str(tmp_path / "again.json"), ranks=4,
                         preexec_fn=group.enter, timeout=120)
            assert again.returncode == 0, again.stderr
            written = load_json(tmp_path / "again.json")["checkpoint"]["write"]["bandwidth_MBps"] * MB
            fio_look()
            print(f"not at the set rate: written again at {written / MB:.2f} MB/s between fio's "
                  f"{fio[0] / MB:.2f} and {fio[1] / MB:.2f} MB/s in the same shape")
    assert result["fsync"] is True and write["fsync"] is True and write["fsyncs"] == 8
    assert write["bytes"] >= total and write["bytes"] - total < 8 * 4096   # direct: whole 4 KiB blocks
    assert reached >= write["bytes"], (reached, write["bytes"])
    assert read["bytes"] == write["bytes"]
    assert read["bandwidth_MBps"] * MB == pytest.approx(read_bps, rel=0.05)
    if not direct:
        assert read["cache_hit_fraction"] < 0.02   # dropped: the device served the read back
    # the figures' own definitions hold inside the result
    assert write["bandwidth_MBps"] == pytest.approx(write["bytes"] / write["duration_s"] / MB, rel=1e-9)
    assert write["duration_s"] == pytest.approx(max(r["duration_s"] for r in write["per_rank"]), rel=1e-9)
    assert write["min_rank_bandwidth_MBps"] == pytest.approx(min(r["bandwidth_MBps"] for r in write["per_rank"]),
                                                             rel=1e-9)
    if fio and max(fio) > 1.05 * min(fio):
        raise NotJudged(f"the device's rate moved between fio's two looks ({fio[0] / MB:.2f}, "
                        f"{fio[1] / MB:.2f} MB/s): its backing disk is shared")
    assert written == pytest.approx(sum(fio) / 2 if fio else write_bps, rel=0.05)


@pytest.mark.root
@pytest.mark.loopdev
def test_no_fsync_says_so_and_leaves_writeback_to_the_kernel(tmp_path, model):
    path, total = model
    with LoopMount(1 << 30) as m:
        out = tmp_path / "r.json"
        proc = iodl("checkpoint", "--workload", path, "--root", os.path.join(m.path, "ckpt"), "--no-fsync",
                    "--reads", "0", "--out", str(out), ranks=2, timeout=120)
        assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    assert result["fsync"] is False and result["checkpoint"]["write"]["fsync"] is False
    assert result["checkpoint"]["write"]["fsyncs"] == 0 and result["checkpoint"]["read"] is None
    assert result["subset"] is True   # 2 of the model's 4 ranks: MLPerf's subset mode
    assert "subset mode" in proc.stdout


@pytest.mark.root
@pytest.mark.loopdev
def test_a_checkpoint_that_does_not_fit_is_refused_before_writing_with_both_numbers(tmp_path, model):
    path, total = model
    with LoopMount(64 << 20) as m:
        root = os.path.join(m.path, "ckpt")
        proc = iodl("checkpoint", "--workload", path, "--root", root, ranks=4, timeout=60)
        assert proc.returncode == 2, proc.stderr
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("iodl: error")][0]
        assert f"{total:,} bytes" in line and "free" in line, line
        assert sorted(os.listdir(root)) == ["iodl-checkpoints.json"]   # nothing written
        # the null engine writes nothing: the same checkpoint runs on the same 64 MiB and leaves no file
        proc = iodl("checkpoint", "--workload", path, "--root", root, "--engine", "null", ranks=4, timeout=60)
        assert proc.returncode == 0, proc.stderr
        written = [os.path.join(d, n) for d, _s, names in os.walk(root) for n in names if n != "iodl-checkpoints.json"]
        assert written == [] and os.statvfs(root).f_bavail * os.statvfs(root).f_frsize < total


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.aio
def test_sigint_ends_a_slow_checkpoint_within_about_a_second_with_a_partial_result(tmp_path, model):
    """Direct writes at a 2 MB/s throttle (a write takes ~3 hours): SIGINT to mpiexec after 3 s;
    every rank stops within about a second plus one request, and the result says partial."""
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import mpiexec

    path, _total = model
    with LoopMount(1 << 30) as m, BlkioGroup("iodl-ckpt-int") as group:
        group.throttle_write(m.majmin, 2 * MB)
        out = tmp_path / "r.json"
        cmd = [mpiexec(), "-n", "4", sys.executable, "-m", "iodl", "checkpoint", "--workload", path, "--root",
               os.path.join(m.path, "ckpt"), "--direct", "--engine", "aio", "--iodepth", "2", "--block-size", "256KiB",
               "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=group.enter)
        time.sleep(3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    assert proc.returncode == 130, stderr
    # MPI_Finalize names requests left pending ("has pending 1 references"): the stop leaves none
    assert "pending" not in stdout + stderr, stdout + stderr
    result = load_json(out)
    write = result["checkpoint"]["write"]
    print(f"stopped {took:.2f} s after SIGINT, {write['bytes'] / MB:.1f} MB written at {write['bandwidth_MBps']:.2f} MB/s")
    assert result["partial"] is True and 0 < write["bytes"] < 20 * MB
    # a request of 256 KiB at 2 MB/s shared by 4 ranks x 2 in flight: up to ~1 s of service time
    assert took < 3.5, took
    assert write["bandwidth_MBps"] * MB == pytest.approx(2 * MB, rel=0.25)


TRAIN = """\
[workload]
name = "tiny-with-checkpoints"
pattern = "train-sync"

[dataset]
format = "tfrecord"
files = 16
samples_per_file = 64
sample_size = "64KiB"

[train]
batch_size = 32
compute_time_s = 0.1
epochs = 1
shuffle = "file"

[model]
type = "cnn"
model_size = "64MB"              # written whole by rank 0 (no ZeRO), as DLIO's unet3d

[checkpoint]
every_steps = 4
"""


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.fio
@pytest.mark.flaky(reruns=1)   # 2 ranks on 2 cores: the step times are the claim
def test_in_training_checkpoints_stall_the_steps_and_au_shows_it(tmp_path):
    """train-sync (null reads, 0.1 s compute, 12 steps) checkpoints 64 MB after every 4th step
    into a loop mount throttled at 32 MB/s for writes: each checkpoint takes ~2 s, the steps wait
    for it, so iodl's AU is (8 x 1 + 3 x 0.1 / 2.1) / 11 measured steps = 0.740; MLPerf's view
    leaves checkpoints out (as DLIO does) and stays near 1.

    The 8 ordinary steps count at the AU the same run without checkpoints reaches right before and
    after (one CI run's noisy VM took 4.5 % from them); not judged when that is under 0.95."""
    wl, plain = tmp_path / "train.toml", tmp_path / "plain.toml"
    wl.write_text(TRAIN)
    plain.write_text(TRAIN[:TRAIN.index("[checkpoint]")])
    bps, size, compute = 32 * MB, 64 * MB, 0.1

    def plain_au():
        proc = iodl("read", "--workload", str(plain), "--engine", "null", "--steps", "12",
                    "--out", str(tmp_path / "plain.json"), ranks=2, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return load_json(tmp_path / "plain.json")["train"]["au"]

    bare = [plain_au()]
    with LoopMount(1 << 30) as m, BlkioGroup("iodl-ckpt-train") as group:
        group.throttle_write(m.majmin, bps)
        out = tmp_path / "r.json"
        before = m.bytes_written()
        proc = iodl("read", "--workload", str(wl), "--engine", "null", "--steps", "12",
                    "--checkpoint-root", os.path.join(m.path, "ckpt"), "--out", str(out), ranks=2,
                    preexec_fn=group.enter, timeout=120)
        reached = m.bytes_written() - before
        assert proc.returncode == 0, proc.stderr
        result = load_json(out)
        write, train = result["checkpoint"]["write"], result["train"]
        # the truth: fio writing a checkpoint file's shape (64 MB, 1 MiB requests, buffered, fsync'd) under the throttle
        fio = fio_write_rate(os.path.join(m.path, "fio-probe"), size, group)
    bare.append(plain_au())
    stall = size / bps
    expected_au = (8 * sum(bare) / 2 + 3 * compute / (compute + stall)) / 11
    print(f"checkpoints {write['rounds']} x {size / MB:.0f} MB at {write['bandwidth_MBps']:.2f} MB/s; "
          f"AU {train['au']:.3f} (expected {expected_au:.3f}; without checkpoints {bare}), "
          f"MLPerf AU {train['mlperf']['au']:.3f}; fio {fio / MB:.2f} MB/s; stalled {train['checkpoint_s_per_step'] * 11:.2f} s")
    assert write["rounds"] == 3 and write["bytes"] == 3 * size and result["checkpoint"]["fsync"] is True
    assert reached >= 3 * size
    assert write["bandwidth_MBps"] * MB == pytest.approx(fio, rel=0.05)
    assert write["bandwidth_MBps"] * MB <= bps * 1.02
    # the steps waited for every checkpoint: 11 measured steps hold all three
    assert train["checkpoint_s_per_step"] * 11 == pytest.approx(write["duration_s"], rel=0.05)
    if min(bare) < 0.95:
        raise NotJudged(f"the same steps without checkpoints reach AU {min(bare):.3f} (< 0.95): the machine is busy")
    # 0.015: the last step of each checkpoint closed at the step barrier (patterns/checkpoint.py); closed
    # at comm.barrier's sleep-poll, the writer lost up to 5 % of the checkpoint in the next step (0.02 AU)
    assert train["au"] == pytest.approx(expected_au, abs=0.015)
    assert train["mlperf"]["au"] >= min(bare) - 0.015
