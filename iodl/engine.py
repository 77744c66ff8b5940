"""Files and plans for the engines: one-line errors instead of tracebacks.

The engines are named, probed and opened in iodl/engines.py (their contract: _native.pyi); this
module opens files for them (O_DIRECT or not; new files only for writing), makes plans of rows and
turns a run's first error into an OSError naming the file and what the row did.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat

import numpy as np

from .errors import IodlError
from .plan import OP_FDATASYNC, OP_FSYNC, OP_READ, OP_WRITE, PLAN_DTYPE, new_plan


def as_plan(rows) -> np.ndarray:
    """A contiguous PLAN_DTYPE array from rows of (file, offset, length) (reads) or of (file,
    offset, length, op), or a plan-like array."""
    if isinstance(rows, np.ndarray) and rows.dtype == PLAN_DTYPE:
        return np.ascontiguousarray(rows)
    arr = np.asarray(rows, dtype=np.uint64)
    arr = arr.reshape(-1, arr.shape[-1] if arr.ndim == 2 and arr.shape[-1] == 4 else 3)
    plan = new_plan(len(arr))
    for i, name in enumerate(PLAN_DTYPE.names[:arr.shape[1]]):
        plan[name] = arr[:, i]
    return plan


def open_for_read(path: str, direct: bool, expected_size: int | None = None, inside: str | None = None) -> int:
    """os.open for reading, with O_DIRECT when asked; a filesystem that refuses it gets a clear error.

    Opened non-blocking (a FIFO in place of a file would block a plain open forever), then checked
    with fstat: a FIFO, socket or character device is refused. Given `expected_size` (a dataset shard:
    the bytes its manifest promises), only a regular file at least that long is accepted. Given
    `inside` (a dataset's real root), a path that is a symlink is opened only if it resolves inside it.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if direct:
        flags |= os.O_DIRECT
    try:
        try:
            fd = os.open(path, flags | (os.O_NOFOLLOW if inside else 0))
        except OSError as exc:
            if not inside or exc.errno != errno.ELOOP:
                raise
            real = os.path.realpath(path)   # a link: followed only when it stays inside the root
            if os.path.commonpath([inside, real]) != inside:
                raise IodlError(f"{path}: a symlink to {real}, outside the dataset root {inside}") from None
            fd = os.open(path, flags)
    except OSError as exc:
        if direct and exc.errno == errno.EINVAL:
            if not _readable_kind(os.stat(path).st_mode, expected_size):   # a FIFO refuses O_DIRECT too
                raise IodlError(f"{path}: not a regular file (a shard must be one)") from None
            raise IodlError(f"{path}: the filesystem refuses O_DIRECT (open -> EINVAL); "
                            f"run without --direct") from None
        raise
    def check(fd):
        st = os.fstat(fd)
        if not _readable_kind(st.st_mode, expected_size):
            raise IodlError(f"{path}: not a regular file (a shard must be one)")
        if expected_size is not None and st.st_size < expected_size:
            raise IodlError(f"{path}: shorter than the dataset manifest says: expected {expected_size} bytes, "
                            f"found {st.st_size}")
    return blocking_once(fd, check)


def blocking_once(fd: int, check) -> int:
    """fd made blocking once check(fd) has passed (check raises when the file is not one to use);
    closed on any failure. Files are opened O_NONBLOCK and checked through their descriptor: a
    FIFO in a file's place cannot hang the open, and what is checked is what was opened."""

    try:
        check(fd)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_for_write(path: str, direct: bool) -> int:
    """os.open of a NEW file for writing (O_DIRECT when asked), mode 0o644. Anything already at
    `path` (a file, a symlink, a device) is refused with a one-line IodlError: a benchmark must never
    overwrite what is there. O_NOFOLLOW with O_EXCL: a dangling symlink is refused too."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if direct:
        flags |= os.O_DIRECT
    try:
        return os.open(path, flags, 0o644)
    except FileExistsError:
        raise IodlError(f"{path}: already exists (iodl writes new files only)") from None
    except OSError as exc:
        if direct and exc.errno == errno.EINVAL:
            raise IodlError(f"{path}: the filesystem refuses O_DIRECT (open -> EINVAL); "
                            f"run without --direct") from None
        raise


def _readable_kind(mode: int, expected_size: int | None) -> bool:
    """A regular file; a block device only where no shard size is promised (fio-compare reads devices)."""

    return stat.S_ISREG(mode) or (expected_size is None and stat.S_ISBLK(mode))


def raise_for_errors(stats: dict, plan: np.ndarray, paths: list[str]) -> None:
    """After Engine.run: raise OSError(errno, ..., path) for the first failed row, or IodlError
    naming the file when a row met EOF before its length (the plan was made from sizes: the
    file has been truncated since)."""
    if stats["errors"]:
        if stats.get("error_at"):   # a read of no row of this plan (the s3 engine's plan ahead)
            path, offset, length = stats["error_at"]
            op = OP_READ
        else:
            row = plan[stats["first_error_row"]]
            path, offset, length, op = paths[int(row["file"])], int(row["offset"]), int(row["length"]), int(row["op"])
        err = stats["first_errno"]
        if op in (OP_FSYNC, OP_FDATASYNC):
            what = "fsync" if op == OP_FSYNC else "fdatasync"
        else:
            what = f"{'write' if op == OP_WRITE else 'read'} of {length} bytes at offset {offset}"
        # an engine may say more than the errno (the s3 engine: the HTTP status and S3's error code)
        raise OSError(err, f"{stats.get('error_reason') or os.strerror(err)} ({what})", path)
    if stats.get("short_rows", 0):
        row = plan[stats["first_short_row"]]
        raise IodlError(f"{paths[int(row['file'])]}: shorter than expected: {stats['short_file_size']} bytes, "
                        f"the plan reads up to {int(row['offset']) + int(row['length'])}")
