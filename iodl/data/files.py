"""Files iodl reads and writes in a dataset root, safely: regular files only, never through a link.

Reading: a FIFO in a file's place must not block the open, and a name a manifest gives must
resolve inside its root. Writing: every file is created exclusively (O_EXCL|O_NOFOLLOW), a large
one under a temporary name renamed when complete, so that a name iodl gives is never a link
planted under it and a cut-short file never has its final name. A checkpoint root's store is written
the same way (write_json).
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat

import numpy as np

from ..errors import UsageError

TMP = ".iodl-tmp"          # suffix of a file being written; renamed when complete


def open_regular(path: str):
    """A regular file opened for reading; a FIFO there must not block the open (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return os.fdopen(fd, "rb")


def not_a_dir(path: str) -> str | None:
    """Why PATH is not a directory this user can read a dataset from, in words (None: it is one).
    stat's own errno, not os.path.isdir's False: a directory behind one the user may not search
    (EACCES) is there, and "no such directory" would send them looking for a typo."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return "no such directory"
        if e.errno == errno.EACCES:
            return "permission denied (this user may not search a directory on its path)"
        return os.strerror(e.errno)
    return None if stat.S_ISDIR(st.st_mode) else "not a directory"


def inside(root: str, entry, manifest_path: str, what: str) -> str:
    """ROOT/entry after symlinks, or a UsageError when it is not a relative name inside the root."""
    if not isinstance(entry, str) or not entry or os.path.isabs(entry) or ".." in entry.split("/") or "\0" in entry:
        raise UsageError(f"{manifest_path}: {what} {entry!r} is not a relative path inside {root}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, entry))
    if os.path.commonpath([real_root, real]) != real_root:
        raise UsageError(f"{manifest_path}: {what} {entry!r} resolves to {real}, outside {root}")
    return real


def create(path: str) -> int:
    """A new file at path for writing, never through a symlink: a stale temp of ours (regular file)
    or a planted link is unlinked first (unlink removes the link, never its target); anything else
    there is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise UsageError(f"{path}: exists and is not a regular file; iodl will not write there")
        os.unlink(path)
    # read-write: a format's writer (hdf5) reads back what it wrote through this descriptor
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_via_temp(path: str, write) -> None:
    """write(file object) into path + TMP, created exclusively, then renamed over path; no temp left on error."""
    tmp = path + TMP
    fd = create(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_json(path: str, obj) -> None:
    write_via_temp(path, lambda f: f.write(json.dumps(obj, separators=(",", ":")).encode()))


def save_npy(path: str, array: np.ndarray) -> None:
    write_via_temp(path, lambda f: np.save(f, array, allow_pickle=False))


def make_dir(path: str) -> None:
    """mkdir, or accept an existing real directory; a symlink (or anything else) there is refused."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise UsageError(f"{path}: exists and is not a directory iodl made (a symlink?); "
                             "iodl never writes through links") from None


def open_dir(path: str) -> int:
    """A directory iodl made, opened without following a link in its place (files are then made
    relative to it: its name cannot be swapped for a link under us)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


# the kernel's own filesystems (/dev's devtmpfs, /proc, /sys, ...): a name there that does not exist
# is a device or kernel file that is not there (filename=/dev/sdz), never a file to lay out (fio
# would create a regular file in devtmpfs). A tmpfs such as /dev/shm is ordinary storage.
KERNEL_FS = {"devtmpfs", "proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
             "configfs", "pstore", "bpf", "mqueue", "efivarfs", "binfmt_misc", "fusectl", "autofs", "rpc_pipefs"}


def mount_of(path: str) -> tuple[str, str]:
    """(mount point, filesystem type) of an existing path, from /proc/self/mountinfo."""
    real = os.path.realpath(path)
    best = ("/", "")
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])   # octal escapes
                fstype = fields[fields.index("-") + 1]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, fstype)
    except (OSError, ValueError, IndexError):
        pass
    return best


def refuse_kernel_fs(root: str) -> None:
    """A root (or, when it does not exist yet, the directory it would be made in) on one of the
    kernel's own filesystems is refused: `--root /dev/x` would fill devtmpfs (RAM) with a dataset."""
    path = os.path.abspath(root)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    point, fstype = mount_of(path)
    if fstype in KERNEL_FS:
        raise UsageError(f"--root {root}: on {point} ({fstype}), a filesystem of the kernel's own; "
                         "iodl writes datasets, checkpoints and caches only on storage")
