"""What this machine can do, as facts a user can paste into a bug report (`iodl probe`).

The tests skip on these same probes, with the same reasons.
"""
from __future__ import annotations

import errno
import importlib.util
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict

from .records import record


@record
class Capability:
    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def _engines():
    """(iodl.engines, "") or (None, why not): `iodl probe` reports an unbuilt C module, never a traceback."""
    try:
        from . import engines
    except ImportError as exc:
        return None, f"iodl._native not built ({exc})"
    return engines, ""


def engine(name: str) -> Capability:
    """An engine of the registry (iodl/engines.py), by its probe."""
    engines, why = _engines()
    if engines is None:
        return Capability(name, False, why)
    if name not in engines.plan_engines():
        return Capability(name, False, "not in this build")
    entry = engines.ENGINES[name]
    why = entry.unusable()
    return Capability(name, why is None, why or f"{entry.about} ({entry.kind})")


def odirect(directory: str) -> Capability:
    """Whether files under `directory` can be read with O_DIRECT.

    Opens an existing regular file read-only when there is one (a user's dataset is never
    written to); otherwise a temporary file is created and removed.
    """
    name = f"odirect:{directory}"
    if not os.path.isdir(directory):
        return Capability(name, False, "no such directory")
    existing = None
    for dirpath, _dirs, files in os.walk(directory):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.isfile(p) and not os.path.islink(p):
                existing = p
                break
        if existing:
            break
    tmp = None
    try:
        if existing is None:
            try:
                fd, tmp = tempfile.mkstemp(prefix=".iodl-probe-", dir=directory)
            except OSError as exc:
                return Capability(name, False, f"no file to test and cannot create one ({exc.strerror})")
            os.write(fd, b"\0" * mmap.PAGESIZE)
            os.close(fd)
            existing = tmp
        try:
            fd = os.open(existing, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            return Capability(name, False, f"open(O_DIRECT) -> {errno.errorcode.get(exc.errno, exc.errno)}")
        try:
            buf = mmap.mmap(-1, mmap.PAGESIZE)  # page-aligned, as O_DIRECT wants
            os.preadv(fd, [buf], 0)
        except OSError as exc:
            return Capability(name, False, f"O_DIRECT read -> {errno.errorcode.get(exc.errno, exc.errno)}")
        finally:
            os.close(fd)
        fstype = _fstype(directory)
        note = " (tmpfs: that is page cache, not storage)" if fstype == "tmpfs" else ""
        return Capability(name, True, f"O_DIRECT reads work on {fstype}{note}")
    finally:
        if tmp:
            os.unlink(tmp)


def _fstype(path: str) -> str:
    path = os.path.realpath(path)
    best, fstype = "", "unknown"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1].replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def root() -> Capability:
    ok = os.geteuid() == 0
    return Capability("root", ok, "euid 0" if ok else f"euid {os.geteuid()}")


def drop_caches() -> Capability:
    ok = os.access("/proc/sys/vm/drop_caches", os.W_OK)
    return Capability("drop_caches", ok, "/proc/sys/vm/drop_caches writable" if ok else "needs root")


def loopdev() -> Capability:
    missing = [t for t in ("losetup", "mkfs.ext4", "mount") if not shutil.which(t)]
    if os.geteuid() != 0:
        return Capability("loopdev", False, "needs root")
    if not os.path.exists("/dev/loop-control"):
        return Capability("loopdev", False, "no /dev/loop-control")
    if missing:
        return Capability("loopdev", False, "missing " + ", ".join(missing))
    xfs = " and xfs" if shutil.which("mkfs.xfs") else ""
    return Capability("loopdev", True, f"loop devices, ext4{xfs}")


def blkio() -> Capability:
    path = "/sys/fs/cgroup/blkio"
    if not os.path.exists(os.path.join(path, "blkio.throttle.read_bps_device")):
        return Capability("blkio", False, "no cgroup v1 blkio hierarchy at " + path)
    if not os.access(path, os.W_OK):
        return Capability("blkio", False, "cgroup v1 blkio present but not writable (needs root)")
    return Capability("blkio", True, "cgroup v1 blkio throttling")


def fio() -> Capability:
    exe = shutil.which("fio")
    if not exe:
        return Capability("fio", False, "fio not on PATH (apt-get install fio)")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capability("fio", False, f"fio --version failed: {exc}")
    return Capability("fio", True, f"{out} at {exe}")


def mpi() -> Capability:
    """mpi4py importable and an mpiexec on PATH; MPI itself is not initialised."""
    if importlib.util.find_spec("mpi4py") is None:
        return Capability("mpi", False, "mpi4py not installed (pip install 'iodl[mpi]')")
    # pip's mpich wheel puts mpiexec beside the interpreter, which need not be on PATH
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    exe = shutil.which("mpiexec", path=path) or shutil.which("mpirun", path=path)
    if not exe:
        return Capability("mpi", False, "mpi4py present but no mpiexec on PATH")
    return Capability("mpi", True, f"mpi4py with {exe}")


def all_capabilities(roots: list[str] | None = None) -> list[Capability]:
    engines, why = _engines()
    caps = [root(), drop_caches()]
    caps += [engine(name) for name in engines.plan_engines()] if engines else [Capability("engines", False, why)]
    for r in roots or [tempfile.gettempdir()]:
        caps.append(odirect(r))
    caps += [loopdev(), blkio(), fio(), mpi()]
    return caps
