"""`iodl read` held against storage whose truth is known: blkio-throttled loop mounts and the
blkio counters of what reached the device."""
import re

import pytest

from iodl.cache import drop_caches
from iodl.groundtruth import BlkioGroup, LoopMount
from tests.helpers import iodl, load_json, mpiexec, write_random_files

pytestmark = [pytest.mark.root, pytest.mark.loopdev, pytest.mark.blkio]

MB = 1_000_000


@pytest.mark.aio
@pytest.mark.odirect
def test_storage_only_per_mount_bandwidth_and_progress_lines_match_two_throttles(tmp_path):
    """Two mounts throttled at 40 and 80 MB/s, 4 ranks round-robin: each mount's bandwidth is its
    throttle within 5% (the throttle is the truth: the device cannot deliver more, and O_DIRECT
    reads of a dataset re-read endlessly keep it busy). The same run's live view (--progress on
    without a terminal: a line a second) shows each mount's throttle within 10% in every line once
    the ramp and a full 3 s averaging window have passed."""
    assert mpiexec(), "mpiexec not found (pip install mpich)"
    throttles = (40 * MB, 80 * MB)
    with LoopMount(512 << 20) as a, LoopMount(512 << 20) as b, BlkioGroup("iodl-test") as group:
        for m in (a, b):
            write_random_files(m.path, 8, 24 << 20)
        for m, bps in zip((a, b), throttles):
            group.throttle_read(m.majmin, bps)
        out = tmp_path / "result.json"
        proc = iodl("read", "--pattern", "storage-only", "--root", a.path, "--root", b.path, "--direct",
                    "--engine", "aio", "--iodepth", "4", "--block-size", "1MiB", "--ramp", "2",
                    "--duration", "8", "--progress", "on", "--out", str(out), ranks=4, preexec_fn=group.enter)
        assert proc.returncode == 0, proc.stderr
        result = load_json(out)
        device_bytes = [group.read_bytes(m.majmin) for m in (a, b)]
    assert result["ranks"] == 4
    assert [m["ranks"] for m in result["mounts"]] == [[0, 2], [1, 3]]
    for mount, bps, dev in zip(result["mounts"], throttles, device_bytes):
        measured = mount["bandwidth_MBps"] * MB
        assert measured == pytest.approx(bps, rel=0.05), (mount["path"], measured / MB, bps / MB)
        assert mount["cache_hit_fraction"] == 0.0
        # O_DIRECT: every byte iodl counted in the window reached the device (which also saw the ramp)
        assert mount["bytes"] <= dev
    total = result["total"]
    assert total["bytes"] == sum(m["bytes"] for m in result["mounts"])
    assert total["bandwidth_MBps"] == pytest.approx(sum(throttles) / MB, rel=0.05)

    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("iodl: ") and "MB/s" in ln]
    assert len(lines) >= 8, proc.stdout
    assert "remaining" in lines[0]
    settled = lines[5:-1]          # past the 2 s ramp and a full averaging window; the last may straddle the end
    print(f"per mount {[round(m['bandwidth_MBps'], 2) for m in result['mounts']]} MB/s; settled progress lines:")
    print("\n".join(settled))
    for line in settled:
        rates = [float(x.replace(",", "")) for x in re.findall(r"([\d,.]+) MB/s", line)]
        assert len(rates) == 2, line
        for rate, bps in zip(rates, throttles):
            assert rate * MB == pytest.approx(bps, rel=0.10), line


def test_validate_cache_hit_fraction_matches_blkio_counters(tmp_path):
    """Buffered validate pass over a partly warmed dataset: the measured cache-hit fraction is
    1 - (bytes the device saw) / (bytes read) within 3 percentage points."""
    with LoopMount(512 << 20) as m, BlkioGroup("iodl-test") as group:
        paths = write_random_files(m.path, 10, 16 << 20)
        drop_caches()
        for p in paths[:3]:                       # warm three whole shards and half of a fourth
            with open(p, "rb") as f:
                f.read()
        with open(paths[3], "rb") as f:
            f.read(8 << 20)
        out = tmp_path / "result.json"
        proc = iodl("read", "--pattern", "validate", "--root", m.path, "--engine", "psync",
                    "--out", str(out), preexec_fn=group.enter)
        assert proc.returncode == 0, proc.stderr
        device = group.read_bytes(m.majmin)
    total = load_json(out)["total"]
    assert total["bytes"] == 10 * (16 << 20)
    truth = 1 - device / total["bytes"]
    assert truth == pytest.approx(3.5 / 10, abs=0.05)  # the warm-up did what it meant to
    assert total["cache_hit_fraction"] == pytest.approx(truth, abs=0.03)
    # storage bandwidth: what the device delivered over the window (the counters' bytes)
    assert total["storage_bandwidth_MBps"] * total["window_s"] * MB == pytest.approx(device, rel=0.05)
