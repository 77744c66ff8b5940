"""A read-only FUSE view of a directory whose every open waits a set time first.

An open's latency is then known by construction — at least DELAY, whatever the CPU does — the
way a network filesystem's open waits for its metadata server. A loop device cannot give this:
its "latency" is the host disk's, which drifts, and a blkio throttle caps a rate, which no
number of threads can beat; a fixed wait per open is what opens issued in parallel overlap.

Run as its own process (`python -m tests.slowfs SRC MOUNTPOINT DELAY_S`), so its CPU is not the
reader's; SlowOpens mounts it for a test and takes it down again. Needs root, /dev/fuse, libfuse2
(Debian: libfuse2) and fusepy.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

ATTRS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime", "st_mtime", "st_ctime")
STATFS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize",
          "f_namemax")


def available() -> tuple[bool, str]:
    """Whether this machine can mount a SlowOpens view, and if not, why."""
    if os.geteuid() != 0:
        return False, "mounting FUSE needs root"
    if not os.path.exists("/dev/fuse"):
        return False, "no /dev/fuse"
    try:
        import fuse  # noqa: F401  (fusepy loads libfuse.so.2 on import)
    except (ImportError, OSError) as e:
        return False, f"fusepy/libfuse2 not usable: {e}"
    return True, ""


def _operations(src: str, delay_s: float):
    from fuse import FuseOSError, Operations

    def real(path: str) -> str:
        return os.path.join(src, path.lstrip("/"))

    class Ops(Operations):
        def getattr(self, path, fh=None):
            try:
                st = os.lstat(real(path))
            except OSError as e:
                raise FuseOSError(e.errno) from None
            return {k: getattr(st, k) for k in ATTRS}

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(real(path))]

        def open(self, path, flags):
            time.sleep(delay_s)          # the wait every open pays: a sleep, not CPU work
            try:
                return os.open(real(path), flags)
            except OSError as e:
                raise FuseOSError(e.errno) from None

        def read(self, path, size, offset, fh):
            return os.pread(fh, size, offset)

        def release(self, path, fh):
            os.close(fh)

        def statfs(self, path):
            st = os.statvfs(real(path))
            return {k: getattr(st, k) for k in STATFS}

    return Ops()


class SlowOpens:
    """`with SlowOpens(src, mountpoint, delay_s):` — src seen read-only at mountpoint, every open
    delayed by delay_s. Served by a child process with libfuse's worker threads, so opens from
    several threads wait at the same time."""

    def __init__(self, src: str, mountpoint: str, delay_s: float):
        self.src, self.path, self.delay_s = src, mountpoint, delay_s
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "SlowOpens":
        os.makedirs(self.path, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.slowfs", self.src, self.path, str(self.delay_s)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        end = time.monotonic() + 10
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.__exit__(None, None, None)
                raise RuntimeError(f"slowfs did not mount {self.path}: {self.proc.stderr.read().decode()[-500:]}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        if os.path.ismount(self.path):
            subprocess.run(["umount", self.path], check=False, capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)      # libfuse's loop returns once the kernel unmounts
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stderr.close()


def main(argv: list[str]) -> None:
    from fuse import FUSE

    src, mountpoint, delay_s = argv[0], argv[1], float(argv[2])
    FUSE(_operations(src, delay_s), mountpoint, foreground=True, nothreads=False, ro=True)


if __name__ == "__main__":
    main(sys.argv[1:])
