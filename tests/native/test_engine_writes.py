"""Writes and fsync rows in every native engine: exact counts, what reaches the file, that an
fsync really waits for the device, and what is refused before any I/O. Real files, no mocks:
/tmp (ext4 here; the odirect marker probes it) and, for what reaches the device, a fresh ext4 on
a loop device whose /sys/block/loopN/stat counts the sectors written.

Engines the kernel refuses are skipped with the probe's reason (tests/conftest.py markers).
"""
from __future__ import annotations

import errno
import hashlib
import os
import resource
import signal
import zlib

import numpy as np
import pytest

from iodl import _native, histogram
from iodl import plan as P
from iodl.engine import open_for_read, open_for_write, raise_for_errors
from iodl.errors import IodlError
from iodl.groundtruth import LoopMount

ALIGN = _native.ALIGN
MIB = 1 << 20
_MARKS = {"aio": [pytest.mark.aio], "uring": [pytest.mark.uring]}
REAL = [pytest.param(n, marks=_MARKS.get(n, [])) for n in ("psync", "aio", "uring")]
REAL_X_DIRECT = [pytest.param(n, d, id=f"{n}-{'direct' if d else 'buffered'}",
                              marks=_MARKS.get(n, []) + ([pytest.mark.odirect] if d else []))
                 for n in ("psync", "aio", "uring") for d in (False, True)]


def write_plan(lengths, fsync=P.OP_FSYNC, file=0) -> np.ndarray:
    """Rows writing `lengths` back to back from offset 0, then one sync row (None: no sync)."""
    plan = P.new_plan(len(lengths) + (fsync is not None))
    plan["file"] = file
    plan["length"][:len(lengths)] = lengths
    plan["offset"][:len(lengths)] = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    plan["op"][:len(lengths)] = P.OP_WRITE
    if fsync is not None:
        plan["op"][-1] = fsync
    return plan


def assert_unique_and_incompressible(data: bytes) -> None:
    """No two 4 KiB blocks equal, and zlib cannot shrink the file by 1%."""
    blocks = [data[i:i + ALIGN] for i in range(0, len(data), ALIGN)]
    assert len({hashlib.sha256(b).digest() for b in blocks}) == len(blocks)
    assert len(zlib.compress(data)) >= 0.99 * len(data)


def run_writes(name, direct, plan, path, depth=4, block_size=MIB):
    fd = open_for_write(path, direct)
    fsync_hist = histogram.empty()
    hist = histogram.empty()
    try:
        with _native.Engine(name, depth=depth, block_size=block_size, direct=direct) as eng:
            st = eng.run([fd], plan, hist, fsync_hist=fsync_hist)
    finally:
        os.close(fd)
    return st, hist, fsync_hist


@pytest.mark.parametrize("name,direct", REAL_X_DIRECT)
def test_writes_then_fsync_count_exactly_and_write_unique_incompressible_bytes(tmp_path, name, direct):
    """8 MiB in 1 MiB rows, then an fsync: the file is the plan, every counter exact."""
    path = str(tmp_path / "out.bin")
    plan = write_plan([MIB] * 8)
    st, hist, fsync_hist = run_writes(name, direct, plan, path)
    assert (st["errors"], st["done"], st["short_rows"]) == (0, len(plan), 0)
    assert st["ios"] == st["write_ios"] == 8 and st["bytes"] == st["write_bytes"] == 8 * MIB
    assert st["cached_bytes"] == 0
    assert st["fsyncs"] == 1 and st["fsync_ns"] > 0 and int(fsync_hist.sum()) == 1
    assert histogram.index(st["fsync_ns"]) == int(np.flatnonzero(fsync_hist)[0])
    # the fsync is in none of the requests' figures
    assert int(hist.sum()) == sum(st["depth"]) == 8
    assert st["t_end_ns"] >= st["t_start_ns"] > 0
    assert os.path.getsize(path) == 8 * MIB
    with open(path, "rb") as f:
        assert_unique_and_incompressible(f.read())


@pytest.mark.parametrize("name", REAL)
def test_buffered_odd_lengths_and_fdatasync(tmp_path, name):
    """Buffered writes of any length, back to back at unaligned offsets, then an fdatasync."""
    path = str(tmp_path / "odd.bin")
    lengths = [MIB - 1, 123, 4097, 1, 777_777, MIB]
    st, _, fsync_hist = run_writes(name, False, write_plan(lengths, fsync=P.OP_FDATASYNC), path)
    assert st["errors"] == 0 and st["done"] == len(lengths) + 1
    assert st["write_bytes"] == st["bytes"] == sum(lengths) and st["write_ios"] == len(lengths)
    assert st["fsyncs"] == 1 and int(fsync_hist.sum()) == 1
    assert os.path.getsize(path) == sum(lengths)
    with open(path, "rb") as f:
        data = f.read()
    assert len(zlib.compress(data)) >= 0.99 * len(data)


@pytest.mark.parametrize("name", REAL)
def test_a_small_pool_still_writes_incompressible_bytes(tmp_path, name):
    """One 4 KiB slot written 1024 times: apart from the stamps it would repeat itself every 4 KiB
    (zlib's 32 KiB window would find it), so the slot is refilled when written again within 1 MiB."""
    path = str(tmp_path / "small.bin")
    st, _, _ = run_writes(name, False, write_plan([ALIGN] * 1024), path, depth=1, block_size=ALIGN)
    assert st["write_bytes"] == 4 * MIB and st["errors"] == 0
    with open(path, "rb") as f:
        assert_unique_and_incompressible(f.read())


def test_two_engines_write_no_block_in_common(tmp_path):
    """Each engine has its own seed: two ranks checkpointing to one deduplicating store send
    different blocks too (and the same engine never repeats one across runs)."""
    blocks = []
    with _native.Engine("psync", block_size=MIB) as a, _native.Engine("psync", block_size=MIB) as b:
        for i, eng in enumerate((a, b, a)):
            path = str(tmp_path / f"e{i}.bin")
            fd = open_for_write(path, False)
            try:
                assert eng.run([fd], write_plan([MIB] * 2, fsync=None), histogram.empty())["write_bytes"] == 2 * MIB
            finally:
                os.close(fd)
            with open(path, "rb") as f:
                blocks.append(f.read())
    assert_unique_and_incompressible(b"".join(blocks))


@pytest.mark.parametrize("name", REAL)
def test_a_write_after_reads_does_not_send_the_read_data(tmp_path, name):
    """Reads of a file of zeros fill the slots with zeros; writes after them in the same run (a
    mixed plan) must still be random: and bytes/write_bytes tell the two apart."""
    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(bytes(4 * MIB))
    path = str(tmp_path / "after-read.bin")
    reads = P.new_plan(4)
    reads["offset"], reads["length"] = np.arange(4) * MIB, MIB          # file 0: the zeros
    writes = write_plan([MIB] * 4, file=1)
    rfd, wfd = open_for_read(str(zeros), False), open_for_write(path, False)
    try:
        with _native.Engine(name, depth=4, block_size=MIB, cache_check=True) as eng:
            st = eng.run([rfd, wfd], np.concatenate([reads, writes]), histogram.empty())
    finally:
        os.close(rfd)
        os.close(wfd)
    assert st["errors"] == 0 and st["bytes"] == 8 * MIB and st["ios"] == 8
    assert st["write_bytes"] == 4 * MIB and st["write_ios"] == 4 and st["fsyncs"] == 1
    assert st["cached_bytes"] <= 4 * MIB            # of the reads only
    with open(path, "rb") as f:
        assert_unique_and_incompressible(f.read())


def test_null_counts_writes_and_syncs_without_files():
    """null: no fd is looked at (-1), writes count their full length, a sync row drains and counts."""
    plan = np.concatenate([write_plan([MIB] * 6), write_plan([ALIGN] * 2, fsync=P.OP_FDATASYNC)])
    plan["op"][:2] = P.OP_READ
    fsync_hist = histogram.empty()
    with _native.Engine("null", depth=4, block_size=MIB, delay_ns=200_000) as eng:
        st = eng.run([-1], plan, histogram.empty(), fsync_hist=fsync_hist)
        # a window that closed before the run: nothing counts, syncs included
        late = eng.run([-1], plan, histogram.empty(), fsync_hist=fsync_hist, window_end_ns=1)
    assert st["done"] == len(plan) and st["errors"] == 0
    assert st["ios"] == 8 and st["bytes"] == 6 * MIB + 2 * ALIGN
    assert st["write_ios"] == 6 and st["write_bytes"] == 4 * MIB + 2 * ALIGN
    assert st["fsyncs"] == 2 and int(fsync_hist.sum()) == 2
    assert (late["ios"], late["write_ios"], late["fsyncs"], late["t_start_ns"]) == (0, 0, 0, 0)


@pytest.mark.parametrize("name", ["null"] + REAL)
def test_a_sync_row_waits_for_every_request_in_flight(tmp_path, name):
    """Every write before the sync row completed before it ran: the sync's return is after the
    last of them, so at depth 4 the run's end is the sync's and the series holds only requests."""
    path = str(tmp_path / "order.bin")
    plan = np.concatenate([write_plan([MIB] * 8), write_plan([MIB] * 4)])
    plan["offset"][9:] += 8 * MIB
    series = np.zeros((4, _native.SERIES_WIDTH), np.int64)
    fd = -1 if name == "null" else open_for_write(path, False)
    try:
        with _native.Engine(name, depth=4, block_size=MIB, delay_ns=1_000_000 if name == "null" else 0) as eng:
            st = eng.run([fd], plan, histogram.empty(), series=series, series_origin_ns=_native.monotonic_ns(),
                         series_bucket_ns=10**12)
    finally:
        if fd >= 0:
            os.close(fd)
    assert st["done"] == len(plan) and st["fsyncs"] == 2 and st["ios"] == 12
    assert int(series[:, 1].sum()) == 12 and int(series[:, 0].sum()) == 12 * MIB
    if name == "null":
        # 8 writes at depth 4 with a 1 ms delay: two rounds before the first sync could run
        assert st["t_end_ns"] - st["t_start_ns"] >= 3_000_000


# -- the device's view: an fsync returns once the bytes are on it ----------------------------

def sectors_written(device: str) -> int:
    """/sys/block/NAME/stat field 7: sectors (512 bytes) written to the device so far."""
    with open(f"/sys/block/{os.path.basename(device)}/stat") as f:
        return int(f.read().split()[6])


@pytest.fixture(scope="module")
def loop_ext4():
    with LoopMount(256 << 20, direct_io=True) as m:
        yield m


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("sync", [P.OP_FSYNC, P.OP_FDATASYNC])
def test_fsync_returns_once_the_written_bytes_reached_the_device(loop_ext4, name, sync):
    """Buffered writes of 32 MiB then a sync row: when run() returns, at least 32 MiB more was
    written to the loop device than before (ext4 would otherwise hold dirty pages for ~30 s)."""
    size = 32 * MIB
    path = os.path.join(loop_ext4.path, f"{name}-{sync}.bin")
    os.sync()
    before = sectors_written(loop_ext4.device) * 512
    st, _, _ = run_writes(name, False, write_plan([MIB] * 32, fsync=sync), path)
    after = sectors_written(loop_ext4.device) * 512
    assert st["errors"] == 0 and st["fsyncs"] == 1 and st["write_bytes"] == size
    assert after - before >= size, f"only {after - before} bytes reached {loop_ext4.device} by the fsync's return"
    os.unlink(path)


# -- refused before any I/O, and errors that are rows -----------------------------------------

@pytest.mark.parametrize("name", ["null"] + REAL)
@pytest.mark.parametrize("offset,length", [(0, ALIGN + 1), (512, ALIGN), (0, 100)])
def test_a_direct_write_not_aligned_is_refused_before_any_io(tmp_path, name, offset, length):
    path = str(tmp_path / "unaligned.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)    # not O_DIRECT: it is the plan that is checked
    plan = write_plan([ALIGN, ALIGN], fsync=None)
    plan = np.concatenate([plan, write_plan([length], fsync=None)])
    plan["offset"][2] = 2 * ALIGN + offset
    try:
        with _native.Engine(name, depth=2, block_size=2 * ALIGN, direct=True) as eng:
            with pytest.raises(ValueError, match=f"plan row 2: a direct write's offset and length must be "
                                                 f"multiples of 4096, not offset {2 * ALIGN + offset}, length {length}"):
                eng.run([fd], plan, histogram.empty())
    finally:
        os.close(fd)
    assert os.path.getsize(path) == 0          # nothing was written


@pytest.mark.parametrize("name", REAL)
def test_writing_a_read_only_fd_is_an_error_row(tmp_path, name):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(ALIGN))
    fd = os.open(path, os.O_RDONLY)
    plan = P.new_plan(3)
    plan["length"] = ALIGN
    plan["offset"][1] = ALIGN
    plan["op"][1:] = P.OP_WRITE
    try:
        with _native.Engine(name, depth=2, block_size=ALIGN) as eng:
            st = eng.run([fd], plan, histogram.empty())
    finally:
        os.close(fd)
    assert st["errors"] >= 1 and st["first_errno"] == errno.EBADF and st["first_error_row"] == 1
    assert st["done"] == 1 and st["write_bytes"] == 0
    with pytest.raises(OSError, match=r"Bad file descriptor \(write of 4096 bytes at offset 4096\)") as exc:
        raise_for_errors(st, plan, [str(path)])
    assert exc.value.errno == errno.EBADF and exc.value.filename == str(path)


@pytest.mark.parametrize("name", REAL)
def test_an_fsync_error_is_an_error_row(tmp_path, name):
    """fsync of a pipe fails (EINVAL): the row is the run's first error, named as an fsync."""
    out = str(tmp_path / "ok.bin")
    wfd = open_for_write(out, False)
    r, w = os.pipe()
    plan = write_plan([ALIGN, ALIGN])
    plan = np.concatenate([plan, plan])
    plan["file"][2] = 1                          # the first sync row: the pipe
    plan["offset"][3:5] += 2 * ALIGN
    try:
        with _native.Engine(name, depth=2, block_size=ALIGN) as eng:
            st = eng.run([wfd, w], plan, histogram.empty())
    finally:
        for fd in (wfd, r, w):
            os.close(fd)
    assert (st["errors"], st["first_errno"], st["first_error_row"], st["done"]) == (1, errno.EINVAL, 2, 2)
    assert st["fsyncs"] == 0 and st["write_ios"] == 2      # the rows after the error never ran
    with pytest.raises(OSError, match=r"\(fsync\)"):
        raise_for_errors(st, plan, [out, "pipe"])


@pytest.mark.parametrize("name", REAL)
def test_a_short_write_is_continued(tmp_path, name):
    """RLIMIT_FSIZE cuts a write short at the limit (the kernel's own short write): the rest is asked
    again, which then fails with EFBIG; every byte written before it is counted once."""
    path = str(tmp_path / "short.bin")
    limit = MIB + MIB // 2
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        st, _, _ = run_writes(name, False, write_plan([MIB, MIB]), path, depth=1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert (st["errors"], st["first_errno"], st["first_error_row"]) == (1, errno.EFBIG, 1)
    assert st["write_bytes"] == limit and st["write_ios"] == 2       # row 0, row 1's short part (then EFBIG)
    assert os.path.getsize(path) == limit


# -- the Python side ----------------------------------------------------------------------------

def test_open_for_write_creates_new_files_only(tmp_path):
    path = str(tmp_path / "new.bin")
    fd = open_for_write(path, False)
    try:
        assert os.stat(path).st_mode & 0o777 == 0o644 & ~_umask()
        assert os.write(fd, b"x") == 1
    finally:
        os.close(fd)
    with pytest.raises(IodlError, match="already exists"):
        open_for_write(path, False)
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "link"))
    with pytest.raises(IodlError, match="already exists"):
        open_for_write(str(tmp_path / "link"), False)
    assert not os.path.exists(tmp_path / "nowhere")


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


@pytest.mark.odirect
def test_open_for_write_direct(tmp_path):
    fd = open_for_write(str(tmp_path / "d.bin"), True)
    try:
        import fcntl
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
    finally:
        os.close(fd)


def test_unknown_ops_are_refused_and_asyncio_refuses_writes(tmp_path):
    plan = write_plan([ALIGN])
    plan["op"][1] = 4
    with _native.Engine("null", block_size=ALIGN) as eng:
        with pytest.raises(ValueError, match=r"plan row 1: op 4 is not read \(0\), write \(1\), fsync \(2\) "
                                             r"or fdatasync \(3\)"):
            eng.run([-1], plan, histogram.empty())
    from iodl.asyncio_engine import AsyncioEngine, unavailable
    if unavailable():
        return
    with AsyncioEngine(depth=1, block_size=ALIGN) as eng:
        with pytest.raises(ValueError, match="plan row 0: op 1: the asyncio engine runs reads"):
            eng.run([0], write_plan([ALIGN]), histogram.empty())


@pytest.mark.flaky(reruns=1)      # a timing claim: judged only with the CPU ours (tests/conftest.py)
@pytest.mark.parametrize("name", ["null"] + REAL)
def test_rate_deadline_and_live_pace_and_count_writes(tmp_path, name):
    """Writes are paced by their bytes, stopped by a deadline, and moved in the live counters,
    as reads are: 64 KiB rows at 4 MiB/s for at most 0.3 s write ~1.2 MiB of the 4 MiB planned."""
    path = str(tmp_path / "paced.bin")
    bs, rate = 64 << 10, 4 * MIB
    plan = write_plan([bs] * 64, fsync=None)
    live = np.zeros(3, np.int64)
    fd = -1 if name == "null" else open_for_write(path, False)
    try:
        with _native.Engine(name, depth=2, block_size=bs, rate_bps=rate) as eng:
            t0 = _native.monotonic_ns()
            st = eng.run([fd], plan, histogram.empty(), deadline_ns=t0 + 300_000_000, live=live)
    finally:
        if fd >= 0:
            os.close(fd)
    elapsed = (st["t_end_ns"] - st["t_start_ns"]) / 1e9
    assert st["errors"] == 0 and 0 < st["done"] < len(plan)
    assert st["write_bytes"] == st["bytes"] == st["done"] * bs == int(live[0]) and int(live[1]) == st["ios"]
    assert abs(st["bytes"] / max(elapsed, 1e-9) - rate) < 0.25 * rate, (st["bytes"], elapsed)
    if name != "null":
        assert os.path.getsize(path) == st["bytes"]
