"""fio and iodl on the same loop-mounted files: the numbers must agree (short runs; long ones in bench/).

Tolerances are the issue's: rate-limited reference shape and throttled mount within 5% in bandwidth
and IOPS; unthrottled 1 MiB QD32 reads >= 0.95x fio's bandwidth, 4 KiB QD32 randread >= 0.90x IOPS.

The loop mounts sit on the VM's disk, shared with other VMs: one run of the same tool varies by
+-40% minutes apart. So each test runs fio and iodl 3 times each, interleaved (fio,iodl,iodl,fio,
fio,iodl: --repeat 3) and checks the median of the per-round ratios; medians of each side for
the absolute checks.
"""
import json
import os
import subprocess
import sys

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount

pytestmark = [pytest.mark.fio, pytest.mark.root, pytest.mark.loopdev, pytest.mark.aio, pytest.mark.odirect]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(REPO, "workloads", "fio", "reference-job1.fio")


@pytest.fixture(scope="module")
def mount():
    """One loop mount for both tests: the job without its rate reads the same files as the reference
    (names and sizes do not depend on rate_iops), so the second fio-compare finds them laid out and
    skips writing 512 MB again (fio and iodl both read existing files big enough, as they are)."""
    with LoopMount(1 << 30) as m:
        yield m


def compare(job, tmp_path, *args, preexec=None):
    out = tmp_path / "cmp.json"
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--out", str(out), "--repeat", "3", *args],
                       capture_output=True, text=True, preexec_fn=preexec, cwd=REPO)
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads(out.read_text())["jobs"]
    return entry


def reference_without_rate(tmp_path):
    path = tmp_path / "norate.fio"
    path.write_text("".join(ln for ln in open(REFERENCE) if not ln.startswith("rate_iops")))
    return path


@pytest.mark.flaky(reruns=1)  # the disk's latency drifts between rounds; a real gap fails both runs
def test_reference_shape_rate_limited_agrees(tmp_path, mount):
    e = compare(REFERENCE, tmp_path, "--directory", mount.path, "--scale", "0.001", "--runtime", "2", "--ramp-time", "1")
    # 8 clones x 83 IOPS x 1 MiB: both tools must be pinned to the rate, and to each other
    assert e["fio"]["iops"] == pytest.approx(8 * 83, rel=0.05)
    assert e["ratio"]["bandwidth"] == pytest.approx(1, abs=0.05)
    assert e["ratio"]["iops"] == pytest.approx(1, abs=0.05)
    # fio drains the queue when ahead of its rate: depth 1 dominates for both
    # Both drain the queue when ahead of the rate, so depth 1 dominates and iodepth=32 is never
    # reached. How often a late completion puts a second request in flight follows the disk's
    # latency at that moment: across rounds each tool's depth-1 share ranged 70-100%, in either
    # order, so the two shares are not compared with each other here (bench/ records them).
    assert e["fio"]["depth_pct"]["1"] > 50 and e["iodl"]["depth_pct"]["1"] > 50
    assert e["iodl"]["depth_pct"]["32"] == 0 and e["iodl"]["depth_pct"][">=64"] == 0


def test_reference_shape_on_throttled_mount_agrees(tmp_path, mount):
    """No ramp here: 8 clones x 32 x 1 MiB in flight is 1.8 s of queue at 150 MB/s, longer than a
    short ramp, and fio ends each clone's ramp at that clone's next completion (io_u.c
    should_account), so its clones' windows start up to ~1.8 s apart while its group figure
    divides by the longest one: 160-188 MB/s reported on a 150 MB/s throttle, and io_bytes
    (counting what the ramp left in flight) disagreeing with total_ios (counted at issue)."""
    limit = 150 * 10**6
    with BlkioGroup("fio-compare") as group:
        group.throttle_read(mount.majmin, limit)
        e = compare(reference_without_rate(tmp_path), tmp_path, "--directory", mount.path, "--scale", "0.001",
                    "--runtime", "2", "--ramp-time", "0", preexec=group.enter)
    print("throttled: fio", [round(r["fio"]["bandwidth_MBps"], 1) for r in e["rounds"]], "iodl",
          [round(r["iodl"]["bandwidth_MBps"], 1) for r in e["rounds"]], "MB/s; ratio bw", round(e["ratio"]["bandwidth"], 3),
          "iops", round(e["ratio"]["iops"], 3))
    assert e["fio"]["bandwidth_MBps"] == pytest.approx(limit / 1e6, rel=0.05)
    assert e["iodl"]["bandwidth_MBps"] == pytest.approx(limit / 1e6, rel=0.05)
    assert e["ratio"]["bandwidth"] == pytest.approx(1, abs=0.05)
    assert e["ratio"]["iops"] == pytest.approx(1, abs=0.05)


# The speed claims (1 MiB QD32 >= 0.95x fio's bandwidth, 4 KiB randread QD32 >= 0.90x fio's IOPS)
# live in bench/bench_fio_compare.py and bench/results/, not here: on a shared disk fio alone
# ranged from 11k to 58k IOPS within minutes, so a timed assertion would test the neighbours.
