"""DLIO's figures of an iodl run (--dlio-dir) held against storage of known speed: a blkio-throttled
loop mount. DLIO's "MB/s" is samples/s x the nominal record / 2^20: on storage-bound O_DIRECT
training steps it is the throttle's rate, in MiB/s, in samples of the record's size."""
import glob
import os

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount
from tests.helpers import iodl, load_json

pytestmark = [pytest.mark.root, pytest.mark.loopdev, pytest.mark.blkio, pytest.mark.odirect]

MB = 1_000_000
MiB = 1 << 20
RECORD = 256 << 10
WORKLOAD = f"""\
[workload]
name = "unet3d_b200"
pattern = "train-sync"

[dataset]
format = "raw"
files = 48
samples_per_file = 1
sample_size = "{RECORD}B"
sample_size_stdev = "0B"

[train]
batch_size = 4
compute_time_s = 0.001
epochs = 2
prefetch = 1

[read]
block_size = "256KiB"
iodepth = 4
read_threads = 1
"""


@pytest.mark.flaky(reruns=1)  # a rate claim: the throttle is reached only while the rank gets the CPU
def test_dlio_io_mb_per_second_is_the_throttled_rate_in_mib(tmp_path):
    """48 raw files of one 256 KiB sample, throttled at 20 MB/s, read O_DIRECT in steps of 4 with 1 ms
    compute, 2 epochs: storage sets the pace, so DLIO's train_io_mean_MB_per_second (first step of
    each epoch left out) is 20 MB/s = 19.07 MiB/s within 8 %, and the samples/s is 20 MB/s / 256 KiB."""
    rate = 20 * MB
    spec = tmp_path / "w.toml"
    spec.write_text(WORKLOAD)
    with LoopMount(256 << 20) as m, BlkioGroup("iodl-test") as group:
        gen = iodl("generate", "--workload", str(spec), "--root", m.path, "--quiet")
        assert gen.returncode == 0, gen.stderr
        group.throttle_read(m.majmin, rate)
        res = tmp_path / "results"
        proc = iodl("read", "--workload", str(spec), "--root", m.path, "--direct", "--engine", "psync",
                    "--dlio-dir", str(res), "--progress", "off", preexec_fn=group.enter, timeout=120)
        assert proc.returncode == 0, proc.stderr
        device = group.read_bytes(m.majmin)
    (run,) = glob.glob(str(res / "training" / "unet3d" / "run" / "*"))
    s = load_json(os.path.join(run, "summary.json"))
    m = s["metric"]
    print("DLIO figures:", {k: m[k] for k in ("train_au_percentage", "train_throughput_samples_per_second",
                                             "train_io_mean_MB_per_second")}, "device bytes", device)
    assert device >= 2 * 48 * RECORD                      # O_DIRECT: every epoch's bytes reached the device
    assert m["train_io_mean_MB_per_second"] == pytest.approx(rate / MiB, rel=0.08)
    assert m["train_throughput_mean_samples_per_second"] == pytest.approx(rate / RECORD, rel=0.08)
    assert s["epochs"] == 2 and m["train_au_meet_expectation"] == "fail"
