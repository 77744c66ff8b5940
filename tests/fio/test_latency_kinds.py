"""fio-compare compares each latency kind with the same kind: fio's clat_ns with iodl's clat (from the
submit call's return), slat with slat, lat with lat. Ground truth is fio itself on the same files,
interleaved (--repeat), and a kernel fact: buffered AIO reads are done inside io_submit, so fio's
clat for them is ~0 and iodl's must be too (before the split iodl showed the whole read as clat).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from iodl.groundtruth import LoopMount, UnboundWorkqueues
from tests.helpers import NotJudged

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compare(text, directory, tmp_path, repeat=1, cpu=None):
    """fio-compare the job; with `cpu`, both tools run on that CPU alone (fio-compare's affinity, inherited)."""
    job = tmp_path / "job.fio"
    job.write_text(text)
    out = tmp_path / "cmp.json"
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--directory", directory,
                        "--out", str(out), "--repeat", str(repeat)], capture_output=True, text=True, cwd=REPO,
                       preexec_fn=pin)
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads(out.read_text())["jobs"]
    return entry, r.stdout


def p50(side, kind):
    return side[kind]["p50"]


@pytest.mark.fio
@pytest.mark.aio
@pytest.mark.flaky(reruns=1)  # a preempted reaper moves a median on a loaded 2-core VM
def test_buffered_libaio_clat_is_near_zero_on_both_sides(tmp_path):
    """64 KiB buffered reads of a tmpfs file: io_submit copies the data (slat), the completion is
    already there when reaped (clat). fio reaps with io_getevents (~1 us), iodl from the ring
    without a syscall, so iodl's clat p50 may be lower than fio's but not higher by more than 2 us
    of scheduling slack; on both sides clat p50 is under half of slat p50, and iodl's clat p50 is
    under half of fio's lat p50 (the old report, iodl's lat labelled clat, failed exactly that)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        entry, stdout = compare("[global]\nioengine=libaio\nrw=randread\nbs=64k\nsize=64m\niodepth=1\n"
                                "invalidate=0\nruntime=1\ntime_based\n[buffered]\n", d, tmp_path)
    fio, iodl = entry["fio"], entry["iodl"]
    for kind in ("lat_us", "slat_us", "latency_us"):
        assert p50(fio, kind) is not None and p50(iodl, kind) is not None, kind   # fio ran with lat/slat percentiles
    assert p50(iodl, "latency_us") <= p50(fio, "latency_us") + 2.0, (iodl, fio)
    for side in (fio, iodl):
        assert p50(side, "latency_us") < p50(side, "slat_us") / 2, side
        for key in ("p50", "p99", "p999"):
            assert side["lat_us"][key] >= side["latency_us"][key], (key, side)
    assert p50(iodl, "latency_us") < p50(fio, "lat_us") / 2
    # the table says which kind each row is
    for label in ("lat p50 µs", "slat p50 µs", "clat p50 µs"):
        assert label in stdout


@pytest.mark.fio
@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.aio
@pytest.mark.odirect
@pytest.mark.flaky(reruns=1)  # a device shared with the loop's worker thread on 2 noisy cores
def test_direct_libaio_clat_agrees_with_fio(tmp_path):
    """4 KiB O_DIRECT random reads at iodepth 1 from ext4 on a loop device over a tmpfs image (RAM:
    what is timed is the block layer and the loop worker, not a shared disk). Here io_submit
    returns before the read is done, so clat is the device's time: fio's and iodl's must agree.

    On two CPUs that time is mostly where the scheduler puts the loop's worker: beside the
    submitter, which it preempts, and the read is done when reaped; or on the other CPU, and the
    submitter sleeps and is woken across CPUs (an idle vCPU woken: 20-40 us). On one boot of this VM
    fio's worker kept landing beside it (clat p50 0.8 us, 41-47k IOPS) and iodl's, as a 30-line C
    loop's, on the other (30-45 us, 18-25k): 4.5x between the tools, set by placement. So both tools
    and the kernel's unbound workers run on CPU 0 alone: measured there, fio 5.2-5.3 us and iodl
    5.3 us (73-77k IOPS both), three rounds each.

    Tolerance: the median over 3 interleaved rounds of iodl/fio clat p50 within [2/3, 3/2].
    Mislabelled lat (slat ~10 us here) would read ~3x: so also, iodl's clat must be nearer (in ratio)
    fio's clat than fio's lat."""
    with LoopMount(256 << 20, direct_io=False, workdir="/dev/shm") as m, UnboundWorkqueues(0):
        entry, _ = compare("[global]\nioengine=libaio\nrw=randread\nbs=4k\nsize=64m\ndirect=1\niodepth=1\n"
                           "runtime=1\ntime_based\n[direct]\n", m.path, tmp_path, repeat=3, cpu=0)
    rounds = entry["rounds"]
    clat = float(np.median([p50(r["iodl"], "latency_us") / p50(r["fio"], "latency_us") for r in rounds]))
    lat = float(np.median([p50(r["iodl"], "lat_us") / p50(r["fio"], "lat_us") for r in rounds]))
    vs_lat = float(np.median([p50(r["iodl"], "latency_us") / p50(r["fio"], "lat_us") for r in rounds]))
    summary = [{s: {k: p50(r[s], k) for k in ("slat_us", "latency_us", "lat_us")} for s in ("fio", "iodl")}
               for r in rounds]
    # the two tools run one after the other: when fio's own clat moves by more than the tolerance
    # between rounds (84 and 33 us in one CI run, against 9-14 us on a quiet host), the device's
    # latency moved under the comparison and this host cannot judge it
    own = [p50(r["fio"], "latency_us") for r in rounds]
    if max(own) > 1.5 * min(own):
        raise NotJudged(f"device latency not steady: fio's own clat p50 ranged {min(own):.0f}-{max(own):.0f} us "
                        f"over {len(own)} rounds")
    assert 2 / 3 <= clat <= 3 / 2, summary
    assert 2 / 3 <= lat <= 3 / 2, summary
    assert abs(np.log(clat)) < abs(np.log(vs_lat)), summary
