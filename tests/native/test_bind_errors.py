"""errno -> OSError as every binding raises it (native/bind_errors.c): the subclass errno picks, the call or
the file named, a file name decoded as os.fsdecode decodes it."""
import errno
import os

import numpy as np
import pytest

from iodl import _native


def test_a_failed_syscall_is_named_and_errno_picks_the_subclass():
    fd = os.open("/", os.O_RDONLY)
    os.close(fd)                                          # a descriptor number that is surely closed now
    with pytest.raises(OSError) as e:
        _native.cache_measurable(fd)
    assert e.value.errno == errno.EBADF
    assert e.value.strerror == f"{os.strerror(errno.EBADF)} (originated from fstat)"
    with pytest.raises(ValueError, match="unknown engine"):
        _native.probe("no-such-engine")


def test_a_file_is_named_even_when_its_name_is_not_utf8(tmp_path):
    path = os.fsencode(tmp_path) + b"/\xff\xfe-absent"    # not UTF-8: os.fsdecode gives surrogate escapes
    hist = np.zeros(_native.HIST_BUCKETS, np.int64)
    with pytest.raises(FileNotFoundError) as e:
        _native.file_ops(1, path + b"\0", hist)           # 1: stat
    assert e.value.errno == errno.ENOENT
    assert e.value.strerror == os.strerror(errno.ENOENT)
    assert e.value.filename == os.fsdecode(path)
    assert os.fsencode(e.value.filename) == path
    assert hist.sum() == 0


def test_a_refusal_says_why_and_names_the_temp_file(tmp_path):
    (tmp_path / "f0.bin.tmp").mkdir()                     # not a regular file: write_files must not remove it
    one = np.array([0], np.int64)
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError) as e:
            _native.write_files(dirfd, "f", 1, ".bin", ".tmp", one, b"data", np.array([0], np.int64),
                                np.array([4], np.int64))
        assert (e.value.errno, e.value.strerror, e.value.filename) == (
            errno.EEXIST, "exists and is not a regular file", "f0.bin.tmp")
        assert (tmp_path / "f0.bin.tmp").is_dir() and not (tmp_path / "f0.bin").exists()
        closed = os.dup(dirfd)
        os.close(closed)
        with pytest.raises(OSError) as e:
            _native.list_dir(closed, b"", 1)
        assert (e.value.errno, e.value.strerror, e.value.filename) == (
            errno.EBADF, os.strerror(errno.EBADF), None)
    finally:
        os.close(dirfd)
