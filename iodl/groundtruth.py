"""Storage whose truth is known, on one machine: loop-mounted filesystems, blkio throttles, page-cache drops.

Used by the tests and benches (and by anyone checking iodl on their own box). Needs root and
cgroup v1 blkio; see docs/design.md, "Ground truth".
"""
from __future__ import annotations

import errno
import glob
import os
import shutil
import subprocess
import tempfile
import time
import warnings

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
# reads left in flight by a stopped run drain before an unmount can succeed (2 ranks x 8 x 1 MiB at
# 256 KB/s: ~65 s); past this wait the mount is detached lazily, and goes once they finish
UNMOUNT_WAIT_S = 60


def _sh(*cmd: str) -> str:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def page_cache_drops() -> int:
    """How many times anyone wrote drop_caches (machine-wide, /proc/vmstat drop_pagecache): a
    bench that compares cached runs repeats a pair when this changed under it."""
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("drop_pagecache "):
                return int(line.split()[1])
    return 0


def page_cache_evictions() -> tuple:
    """Counters that move when anything but the caller's own reads may have emptied cached pages:
    drop_caches writes, the kernel's reclaim (/proc/vmstat pgsteal_*), and DAMON's proactive
    "pageout" schemes, which reclaim without counting in vmstat (a VM host may run one: this one
    pages out what it finds unused for a minute, in coarse regions that can hold pages read a
    second ago). A test that needs pages to stay cached compares this before and after, and tries
    again when it moved. DAMON's figures are fresh only after a write to its state (root)."""
    vm = {}
    with open("/proc/vmstat") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name == "drop_pagecache" or name.startswith("pgsteal_"):
                vm[name] = int(value)
    paged_out = 0
    for kdamond in glob.glob("/sys/kernel/mm/damon/admin/kdamonds/[0-9]*"):
        try:
            with open(os.path.join(kdamond, "state"), "w") as f:
                f.write("update_schemes_stats")
        except OSError:
            continue                              # not running, or not root: nothing it did is fresh
        for scheme in glob.glob(os.path.join(kdamond, "contexts/*/schemes/*")):
            try:
                with open(os.path.join(scheme, "action")) as f:
                    if f.read().strip() != "pageout":
                        continue
                with open(os.path.join(scheme, "stats/sz_applied")) as f:
                    paged_out += int(f.read())
            except OSError:
                pass
    return tuple(sorted(vm.items())) + (("damon_pageout_bytes", paged_out),)


def write_incompressible(path: str, size: int) -> None:
    """A file of random (incompressible) bytes, synced, so that reads must come from the device."""
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())


def count_in_blkio(majmin: str) -> None:
    """Make blkio count this device's I/O. Linux (6.9 on) sets blk-throttle up on a device's queue only
    when a throttle rule is first written for it, and until then no group's
    blkio.throttle.io_service_bytes counts anything there: a fresh loop device read in a group showed 0
    bytes for 5 GB read (the first CI run after a boot). A rule written and cleared in the root group sets
    it up for the device's life and throttles nothing. No cgroup v1 blkio: nothing to do."""
    conf = os.path.join(BLKIO_ROOT, "blkio.throttle.read_bps_device")
    if not os.access(conf, os.W_OK):
        return
    for limit in (1 << 62, 0):     # 0 removes the rule
        with open(conf, "w") as f:
            f.write(f"{majmin} {limit}\n")


class LoopMount:
    """A fresh ext4/xfs filesystem on a loop device, mounted on a temporary directory.

    direct_io=True (losetup --direct-io=on) makes the loop device bypass the backing file's page
    cache, so what reaches it is what a real disk would see; direct_io=False serves repeat reads
    from the host page cache (CPU-bound: useful to show software overhead in benches).
    mkfs_args, mount_options: given to mkfs and mount (e.g. a layout where every open reads its
    own inode block: bench/bench_opens.py).
    """

    def __init__(self, size: int = 1 << 30, fstype: str = "ext4", direct_io: bool = True, workdir: str | None = None,
                 mkfs_args: tuple[str, ...] = (), mount_options: str = ""):
        self.size, self.fstype, self.direct_io = size, fstype, direct_io
        self.mkfs_args, self.mount_options = tuple(mkfs_args), mount_options
        self.workdir = workdir or "/var/tmp"
        self.image = self.device = self.path = None

    def __enter__(self) -> "LoopMount":
        self._tmp = tempfile.mkdtemp(prefix="iodl-loop-", dir=self.workdir)
        try:
            self.image = os.path.join(self._tmp, "fs.img")
            with open(self.image, "wb") as f:
                f.truncate(self.size)
            if self.fstype == "xfs":
                _sh("mkfs.xfs", "-q", "-f", *self.mkfs_args, self.image)
            else:
                _sh("mkfs." + self.fstype, "-q", "-F", *self.mkfs_args, self.image)
            args = ["losetup", "--find", "--show"] + (["--direct-io=on"] if self.direct_io else []) + [self.image]
            self.device = _sh(*args)
            count_in_blkio(self.majmin)
            self.path = os.path.join(self._tmp, "mnt")
            os.mkdir(self.path)
            _sh("mount", *(["-o", self.mount_options] if self.mount_options else []), self.device, self.path)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def majmin(self) -> str:
        st = os.stat(self.device)
        return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"

    def device_stat(self) -> list[int]:
        """/sys/block/loopN/stat: the device's own counters (Documentation/block/stat.rst);
        fields 3 and 7 (counting from 1) are sectors read and written, of 512 bytes whatever the
        device's block size."""
        with open(f"/sys/block/{os.path.basename(self.device)}/stat") as f:
            return [int(v) for v in f.read().split()]

    def bytes_written(self) -> int:
        """Bytes the device has been asked to write since it was set up (stat field 7)."""
        return self.device_stat()[6] * 512

    def __exit__(self, *exc) -> None:
        if self.path and os.path.ismount(self.path):
            # a stopped run's processes may still be exiting: the kernel finishes (cannot cancel)
            # the reads they had in flight first, and on a throttled device that takes seconds.
            # Wait for them, then detach lazily rather than leave a mount behind.
            end = time.monotonic() + UNMOUNT_WAIT_S
            while subprocess.run(["umount", self.path], capture_output=True).returncode:
                if time.monotonic() > end:
                    subprocess.run(["umount", "-l", self.path], check=False)
                    break
                time.sleep(0.2)
        if self.device:
            subprocess.run(["losetup", "-d", self.device], check=False)
        shutil.rmtree(self._tmp, ignore_errors=True)


class BlkioGroup:
    """A cgroup v1 blkio group: per-device read throttles and the bytes that reached each device.

    Processes started with preexec_fn=group.enter (and all their children, e.g. every rank that
    mpiexec starts) are throttled and counted.
    """

    def __init__(self, name: str = "iodl"):
        self.path = os.path.join(BLKIO_ROOT, f"{name}-{os.getpid()}")

    def __enter__(self) -> "BlkioGroup":
        os.makedirs(self.path, exist_ok=True)
        return self

    def throttle_read(self, majmin: str, bytes_per_s: int) -> None:
        self._throttle("read", majmin, bytes_per_s)

    def throttle_write(self, majmin: str, bytes_per_s: int) -> None:
        """O_DIRECT writes, and the writeback an fsync does in the writer's context (cgroup v1 does
        not throttle background writeback)."""
        self._throttle("write", majmin, bytes_per_s)

    def _throttle(self, op: str, majmin: str, bytes_per_s: int) -> None:
        with open(os.path.join(self.path, f"blkio.throttle.{op}_bps_device"), "w") as f:
            f.write(f"{majmin} {int(bytes_per_s)}\n")

    def enter(self, pid: int | None = None) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(f"{pid or os.getpid()}\n")

    def read_bytes(self, majmin: str) -> int:
        """Bytes read from the device by this group's processes (blkio.throttle.io_service_bytes)."""
        return self._service_bytes(majmin, "Read")

    def write_bytes(self, majmin: str) -> int:
        """Bytes this group's processes wrote to the device themselves: O_DIRECT writes and the
        writeback their fsyncs did. Background writeback (the flusher, someone's sync()) is not
        charged here, nor throttled (cgroup v1): LoopMount.bytes_written minus this is that."""
        return self._service_bytes(majmin, "Write")

    def _service_bytes(self, majmin: str, op: str) -> int:
        with open(os.path.join(self.path, "blkio.throttle.io_service_bytes")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == majmin and parts[1] == op:
                    return int(parts[2])
        return 0

    def __exit__(self, *exc) -> None:
        # A cgroup can only be removed once empty: move any survivors back to the root group. A
        # process still exiting counts until the kernel has unlinked it (rmdir: EBUSY): try again for up to 2 s
        # and say so if it stays (an empty group was found left behind by a run, silently).
        deadline = time.monotonic() + 2.0
        while True:
            try:
                with open(os.path.join(self.path, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    try:
                        with open(os.path.join(BLKIO_ROOT, "cgroup.procs"), "w") as f:
                            f.write(pid + "\n")
                    except OSError:
                        pass   # it exited meanwhile
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    warnings.warn(f"{self.path} left behind: {e.strerror}", RuntimeWarning, stacklevel=2)
                    return
                time.sleep(0.01)


class CpuSteal:
    """Share of this VM's CPU time the hypervisor gave to someone else while the block ran
    (/proc/stat `steal`). Timing claims on a 2-core VM cannot be judged when the host takes a
    large part of our two cores away."""

    @staticmethod
    def _read() -> list[int]:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]

    def __enter__(self) -> "CpuSteal":
        self._before = self._read()
        self.share = 0.0
        return self

    def __exit__(self, *exc) -> None:
        d = [b - a for a, b in zip(self._before, self._read())]
        self.share = d[7] / sum(d) if len(d) > 7 and sum(d) else 0.0


class UnboundWorkqueues:
    """The kernel's unbound workqueues (a loop device's worker among them) on one CPU, put back as
    they were on leaving. On two vCPUs the time of a request to a RAM-backed loop device is mostly
    where the scheduler puts that worker (beside the submitter, or across CPUs, woken from idle):
    pinning the tool and the workers to one CPU compares tools, not placements. Machine-wide: only
    for a test or bench that has the machine to itself."""

    CPUMASK = "/sys/devices/virtual/workqueue/cpumask"

    def __init__(self, cpu: int) -> None:
        self.mask = f"{1 << cpu:x}"

    def __enter__(self) -> "UnboundWorkqueues":
        with open(self.CPUMASK) as f:
            self._old = f.read().strip()
        with open(self.CPUMASK, "w") as f:
            f.write(self.mask)
        return self

    def __exit__(self, *exc) -> None:
        with open(self.CPUMASK, "w") as f:
            f.write(self._old)


class RequestSizes:
    """The size of every read request a block device completes while inside: ftrace's
    block_rq_complete, in a tracing instance of its own (the global tracer is left alone),
    filtered on the device's number. `can()` says why not where ftrace's block events are not
    reachable (debugfs not mounted: `mount -t debugfs none /sys/kernel/debug`)."""

    TRACING = "/sys/kernel/debug/tracing"

    def __init__(self, majmin: str):
        major, minor = (int(x) for x in majmin.split(":"))
        self.dev = (major << 20) | minor
        self.path = os.path.join(self.TRACING, "instances", f"iodl-rq-{os.getpid()}-{id(self)}")
        self.sizes: list[int] = []
        self.lost = 0     # events the ring buffers overwrote or dropped: a count short of the truth

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def __enter__(self) -> "RequestSizes":
        os.mkdir(self.path)
        try:
            self._write("buffer_size_kb", "16384")
            self._write("events/block/block_rq_complete/filter", f"dev == {self.dev}")
            self._write("events/block/block_rq_complete/enable", "1")
        except OSError:
            os.rmdir(self.path)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._write("events/block/block_rq_complete/enable", "0")
        with open(os.path.join(self.path, "trace")) as f:
            for line in f:
                # "... block_rq_complete: 7,0 R () 1234 + 2048 be,0,4 [0]": reads only
                parts = line.split("block_rq_complete:", 1)
                if len(parts) == 2:
                    fields = parts[1].split()
                    if len(fields) > 1 and "R" in fields[1] and "+" in fields:
                        self.sizes.append(int(fields[fields.index("+") + 1]) * 512)
        for cpu in os.listdir(os.path.join(self.path, "per_cpu")):
            with open(os.path.join(self.path, "per_cpu", cpu, "stats")) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("overrun", "commit overrun", "dropped events"):
                        self.lost += int(value)
        os.rmdir(self.path)

    @staticmethod
    def can() -> str | None:
        """None when ftrace's block events can be used here, else why not."""
        if os.geteuid() != 0:
            return "needs root (ftrace)"
        if not os.path.isdir(os.path.join(RequestSizes.TRACING, "events", "block")):
            return f"no ftrace block events at {RequestSizes.TRACING} (mount -t debugfs none /sys/kernel/debug)"
        return None
