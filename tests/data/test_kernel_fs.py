"""A root on one of the kernel's own filesystems (/dev's devtmpfs, /proc, /sys) is refused by every
command that writes under a root: `--root /dev/x` would fill RAM-backed devtmpfs with a dataset."""
import os
import uuid

import pytest

from iodl.data.files import KERNEL_FS, mount_of
from tests.helpers import iodl


@pytest.mark.parametrize("argv", [
    ["generate"],
    ["checkpoint", "--workload", "llama3-8b", "--writes", "1", "--reads", "0"],
    ["kvcache", "--option", "1", "--duration", "1"],
])
def test_a_root_under_dev_is_refused_and_nothing_appears_there(argv):
    assert mount_of("/dev")[1] in KERNEL_FS, "this machine's /dev is devtmpfs"
    root = f"/dev/iodl-test-{uuid.uuid4().hex[:8]}"
    proc = iodl(*argv, "--root", root)
    assert proc.returncode == 2, proc.stderr
    assert "devtmpfs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not os.path.lexists(root)


def test_dev_shm_is_storage_not_a_kernel_filesystem():
    assert mount_of("/dev/shm")[1] not in KERNEL_FS
