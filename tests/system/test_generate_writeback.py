"""`iodl generate` returns with its data on the device, and its MB/s is the device's.

Left in the page cache, a dataset is written back later, by the flusher or by the first O_DIRECT
read of each file, which writes the file's dirty pages back before it reads: inside the timed
window of the read run that follows (a throttled test measured 37-38 MB/s on a 40 MB/s mount
that way). Ground truth: the loop device's own count of bytes it was asked to write.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from iodl.groundtruth import BLKIO_ROOT, LoopMount
from tests.helpers import iodl

pytestmark = [pytest.mark.root, pytest.mark.loopdev]


def test_generate_writes_its_data_back_before_it_returns(tmp_path):
    with LoopMount(512 << 20) as m:
        before = m.bytes_written()
        gen = iodl("generate", "--workload", "resnet50", "--files", "2", "--root", m.path, timeout=300)
        assert gen.returncode == 0, gen.stderr
        device = m.bytes_written() - before
    # "wrote 282 MB in 1.20 s = 235 MB/s": the figures as printed (format_size's units are decimal)
    got = re.search(r"wrote ([\d.]+) (kB|MB|GB) in ([\d.]+) s = (\d+) MB/s", gen.stdout)
    assert got, gen.stdout
    data = float(got.group(1)) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[got.group(2)]
    assert data > 100e6
    # every byte of the shards reached the device by the time generate returned (plus the
    # filesystem's metadata and journal: more, never less; a rounding of the printed size: 1 %)
    assert device >= 0.99 * data, (device, data)
    # so the rate printed is at most what the device took in that time
    assert float(got.group(4)) <= 1.01 * device / 1e6 / float(got.group(3)), (gen.stdout, device)


@pytest.mark.blkio
def test_a_ctrl_c_while_the_data_is_written_back_ends_generate_at_once(tmp_path):
    """The write-back of a slow device waits in the kernel where no signal reaches it: it runs in a
    child, so that a Ctrl-C (SIGINT to the foreground process group) still ends generate within a
    second, in one line."""
    with LoopMount(512 << 20) as m:
        # the flusher's writes are the root group's (cgroup v1 does not charge write-back to the writer)
        limit = os.path.join(BLKIO_ROOT, "blkio.throttle.write_bps_device")
        with open(limit, "w") as f:
            f.write(f"{m.majmin} {4 << 20}")   # ~144 MB at 4 MiB/s: ~35 s of write-back
        try:
            p = subprocess.Popen([sys.executable, "-m", "iodl", "generate", "--workload", "resnet50", "--files", "1",
                                  "--root", m.path, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
            # the shards are written to the page cache in a second or two; then the device takes them
            before, deadline = m.bytes_written(), time.monotonic() + 60
            while m.bytes_written() - before < 8 << 20:   # two seconds into the write-back
                assert p.poll() is None and time.monotonic() < deadline, p.communicate()
                time.sleep(0.02)
            t0 = time.monotonic()
            os.killpg(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            with open(limit, "w") as f:
                f.write(f"{m.majmin} 0")   # the rest of the write-back at the device's pace
        assert p.returncode == 130, err
        assert err.strip().splitlines() == ["iodl: error: interrupted"], err
        assert took < 1.5, took
        subprocess.run(["sync", "-f", m.path], check=True)
