"""blkio's byte counts on a loop device no throttle rule has ever named (the ground truth of every
test that holds reads to blkio without throttling them)."""
import os
import stat
import subprocess

import pytest

from iodl.groundtruth import BlkioGroup, count_in_blkio

pytestmark = [pytest.mark.blkio, pytest.mark.loopdev]


def _unused_loop_minor() -> int:
    # a loop device made here, never used by another test, so no rule ever named it
    taken = {int(n[4:]) for n in os.listdir("/sys/block") if n.startswith("loop")}
    return next(m for m in range(200, 1 << 20) if m not in taken and not os.path.exists(f"/dev/loop{m}"))


def test_a_fresh_loop_device_is_counted_once_set_up(tmp_path):
    image = tmp_path / "img"
    image.write_bytes(os.urandom(8 << 20))
    minor = _unused_loop_minor()
    node = f"/dev/loop{minor}"
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(7, minor))
    try:
        subprocess.run(["losetup", node, str(image)], check=True)
        try:
            majmin = f"7:{minor}"
            counted = []
            with BlkioGroup("iodl-fresh-loop") as group:
                for activate in (False, True):
                    if activate:
                        count_in_blkio(majmin)
                    before = group.read_bytes(majmin)
                    subprocess.run(["dd", f"if={node}", "of=/dev/null", "bs=1M", "count=8", "iflag=direct",
                                    "status=none"], check=True, preexec_fn=group.enter)
                    counted.append(group.read_bytes(majmin) - before)
        finally:
            subprocess.run(["losetup", "-d", node], check=False)
    finally:
        os.unlink(node)
    print(f"blkio counted {counted[0]:,} B before the device was set up, {counted[1]:,} B after")
    # before: 0 on Linux >= 6.9, everything on older kernels; after: exactly what dd read, whatever the kernel
    assert counted[0] in (0, 8 << 20)
    assert counted[1] == 8 << 20
