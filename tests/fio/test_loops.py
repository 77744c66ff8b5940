"""Loops as fio 3.33 runs them. unlink_each_loop (backend.c thread_main): before each loop after the
first, every file of the clone is unlinked, and that loop's open (O_CREAT) makes it again, empty, without
a lay-out; the last loop's files stay. io_size and number_ios with loops (keep_running, io_bytes_exceeded).
Ground truth: the files themselves (size, a tag only the laid-out inode carries, iodl's mark) and fio's
own JSON counts (io_bytes, total_ios), exactly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from iodl.errors import IodlError
from iodl.fio import jobfile as jf
from iodl.fio import layout
from iodl.fio.run import plan_job

TAG = "user.iodl-test.first-inode"

# io_size 96k over a 64k file: two loops, the second stops after 32k (fio's io_size budget). Had the
# file not been removed before it, it would still be 64k long; made anew, it is 32k.
JOB = """[w]
directory={d}
size=64k
io_size=96k
bs=4k
rw={rw}
ioengine=psync
unlink_each_loop=1
{extra}"""


def _write(tmp_path, rw="write", extra=""):
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    path = tmp_path / "job.fio"
    path.write_text(JOB.format(d=d, rw=rw, extra=extra))
    return path, d


def _fio_compare(job, out, *args):
    return subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120)


def _plan(path):
    (job,) = jf.parse(str(path), env={}, keywords={})
    return plan_job(job, files=False)


def test_iodl_removes_and_recreates_its_file_between_loops(tmp_path):
    job, d = _write(tmp_path)
    r = _fio_compare(job, tmp_path / "o.json", "--no-fio")
    assert r.returncode == 0, r.stderr
    f = d / "w.0.0"
    os.setxattr(f, TAG, b"1")
    r = _fio_compare(job, tmp_path / "o.json", "--no-fio")
    assert r.returncode == 0, r.stderr
    mine = json.loads((tmp_path / "o.json").read_text())["jobs"][0]["iodl"]
    assert (mine["bytes"], mine["ios"]) == (96 << 10, 24)
    # the second loop wrote 32k into a new, empty file: iodl's own (marked), without the old inode's tag
    assert f.stat().st_size == 32 << 10 and layout.is_marked(str(f))
    assert TAG not in os.listxattr(f)


def test_without_more_loops_nothing_is_removed(tmp_path):
    """loops=1 without io_size, and time_based (fio wraps its files inside one loop): no effect."""
    for extra in ("io_size=64k\n", "time_based\nruntime=300ms\n"):
        job, d = _write(tmp_path, extra=extra)
        assert not _plan(job).unlink_each_loop
        r = _fio_compare(job, tmp_path / "o.json", "--no-fio")
        assert r.returncode == 0, r.stderr
        os.setxattr(d / "w.0.0", TAG, b"1")
        r = _fio_compare(job, tmp_path / "o.json", "--no-fio")
        assert r.returncode == 0, r.stderr
        assert TAG in os.listxattr(d / "w.0.0") and (d / "w.0.0").stat().st_size == 64 << 10


@pytest.mark.parametrize("rw", ["read", "randrw"])
def test_a_job_that_reads_is_refused(tmp_path, rw):
    """fio fails there: the second loop opens a removed file (ENOENT) or reads an empty one (EIO)."""
    job, d = _write(tmp_path, rw=rw, extra="loops=2\nio_size=64k\n")
    with pytest.raises(jf.JobFileError, match="'unlink_each_loop'"):
        _plan(job)
    r = _fio_compare(job, tmp_path / "o.json", "--no-fio")
    assert r.returncode == 2 and "unlink_each_loop" in r.stderr and os.listdir(d) == []


def test_only_iodls_own_file_is_renewed(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(theirs)
    for path in (theirs, link):
        with pytest.raises(IodlError, match="not iodl's own"):
            layout.renew_own(layout.FileSpec(str(path), 0, 4096, root=str(tmp_path), write=True))
    assert theirs.read_bytes() == b"x" and os.path.islink(link)


@pytest.mark.fio
@pytest.mark.parametrize("extra,nbytes,size", [("", 96 << 10, 32 << 10), ("loops=3\nio_size=64k\n", 192 << 10, 64 << 10)])
def test_counts_and_files_as_fio(tmp_path, extra, nbytes, size):
    """Side by side: each side's bytes and I/Os are fio's JSON counts. fio alone leaves its last loop's
    file (the 32k one when that loop stopped at io_size: made anew); in fio-compare fio removes it
    (unlink=1 given to fio) and iodl lays its own file out again before its side."""
    job, d = _write(tmp_path, extra=extra)
    their = subprocess.run(["fio", str(job), "--output-format=json"], capture_output=True, text=True, timeout=120)
    assert their.returncode == 0, their.stderr
    w = json.loads(their.stdout)["jobs"][0]["write"]
    assert (w["io_bytes"], w["total_ios"]) == (nbytes, nbytes // 4096)
    assert (d / "w.0.0").stat().st_size == size and not layout.is_marked(str(d / "w.0.0"))
    os.unlink(d / "w.0.0")
    r = _fio_compare(job, tmp_path / "o.json", "--repeat", "2")
    assert r.returncode == 0, r.stderr
    entry = json.loads((tmp_path / "o.json").read_text())["jobs"][0]
    assert (entry["fio"]["bytes"], entry["fio"]["ios"]) == (nbytes, nbytes // 4096)
    assert (entry["iodl"]["bytes"], entry["iodl"]["ios"]) == (nbytes, nbytes // 4096)
    # the rounds ran fio, iodl, iodl, fio: fio's last round removed its file (unlink=1), nothing of fio's stays
    assert os.listdir(d) == []


# (loops, io_size, number_ios) -> bytes fio 3.33 moves over a 64k file in 4k writes: io_size and number_ios
# cap all loops together at loops times their value; after `loops` loops fio starts more while io_size is
# not done (backend.c keep_running, io_bytes_exceeded, exceeds_number_ios)
LOOPS = [(3, "160k", 0, 192), (1, "96k", 0, 96), (2, "96k", 0, 128), (2, "192k", 0, 192), (2, "32k", 0, 64),
         (1, "160k", 0, 160), (2, 0, 4, 32), (3, 0, 10, 120)]


@pytest.mark.fio
def test_loops_with_io_size_and_number_ios_as_fio(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    sections = [f"[j{n}]\nloops={loops}\n" + (f"io_size={io_size}\n" if io_size else "") +
                (f"number_ios={ios}\n" if ios else "") for n, (loops, io_size, ios, _) in enumerate(LOOPS)]
    job = tmp_path / "loops.fio"
    job.write_text(f"[global]\ndirectory={d}\nsize=64k\nbs=4k\nrw=write\nioengine=psync\n" + "".join(sections))
    r = _fio_compare(job, tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    for entry, (*_, kib) in zip(json.loads((tmp_path / "o.json").read_text())["jobs"], LOOPS):
        assert entry["fio"]["bytes"] == entry["iodl"]["bytes"] == kib << 10, entry["name"]
