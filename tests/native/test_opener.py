"""The open-ahead pool in C (native/opener.c, _native.opener) and ShardFiles on it.

On real files in a temporary directory: opens come back in submission order, each fd the file
asked for, timed on the engine's clock; every refusal of open_for_read holds (missing, short, a
FIFO without blocking, a link out of the dataset root) and names its file; no descriptor and no
open thread outlives the pool, also when it is closed with opens queued and in flight. A batch
the engine takes from the pool, reads and closes in one call (Cursor.run_taking) reads and counts
what the same batch opened, run and closed from Python does, inside the window only, and a
refused open in it reads nothing and is worded as open() words it.
"""
import errno
import fcntl
import os
import re
import time

import numpy as np
import pytest

from iodl import _native, plan
from iodl.cursor import ShardFiles
from iodl.errors import IodlError
from tests.helpers import Strace, fds_open, fds_settled


COLS = len(ShardFiles.TAKEN)   # Opener.take's int64 per file


class Paths(list):
    """A dataset's paths as iodl.data.layout gives them: its real root in .inside."""
    def __init__(self, paths, inside):
        super().__init__(paths)
        self.inside = inside


@pytest.fixture
def files(tmp_path):
    """40 files whose first 8 bytes say which they are, of growing sizes."""
    paths, sizes = [], []
    for i in range(40):
        p = tmp_path / f"f{i:03d}"
        p.write_bytes(i.to_bytes(8, "little") * (i + 1))
        paths.append(str(p))
        sizes.append(8 * (i + 1))
    return Paths(paths, str(tmp_path.resolve())), np.array(sizes, dtype=np.int64)


def _packed(paths) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def test_a_direct_open_keeps_o_direct_once_o_nonblock_is_cleared(files):
    # the flags are set in one F_SETFL (no F_GETFL first): O_DIRECT must survive it
    paths, sizes = files
    try:
        os.close(os.open(paths[0], os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        pytest.skip(f"{paths[0]}: no O_DIRECT here ({exc.strerror})")
    pool = _native.opener(1, True, paths.inside)
    first = pool.submit(_packed(paths[:2]), sizes[:2])
    got = np.frombuffer(pool.take(np.arange(first, first + 2, dtype=np.int64)), dtype=np.int64).reshape(-1, COLS)
    pool.close()
    assert (got[:, 1] == 0).all()
    for fd in got[:, 0].tolist():
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        assert flags & os.O_DIRECT and not flags & os.O_NONBLOCK and flags & os.O_ACCMODE == os.O_RDONLY
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        os.close(fd)


def test_opens_in_order_each_its_file_timed(files):
    paths, sizes = files
    before = fds_open()
    pool = _native.opener(3, False, paths.inside)
    t0 = _native.monotonic_ns()
    first = pool.submit(_packed(paths), sizes)
    got = np.frombuffer(pool.take(np.arange(first, first + len(paths), dtype=np.int64)), dtype=np.int64)
    t1 = _native.monotonic_ns()
    got = got.reshape(-1, COLS)
    assert (got[:, 1] == 0).all()
    for i, fd in enumerate(got[:, 0].tolist()):
        assert os.pread(fd, 8, 0) == i.to_bytes(8, "little")
        assert os.get_blocking(fd)                  # O_NONBLOCK was cleared once checked
    assert ((got[:, 2] >= t0) & (got[:, 2] <= t1)).all()            # done on the engine's clock
    assert ((got[:, 3] > 0) & (got[:, 3] <= got[:, 2] - t0)).all()  # took: inside its own span
    # the fstat each open made, handed on (Engine.run's opened): each file's size and device
    assert got[:, 4].tolist() == [os.stat(p).st_size for p in paths] == sizes.tolist()
    assert got[:, 5].tolist() == [os.stat(p).st_dev for p in paths]
    closed = np.frombuffer(pool.close_fds(np.ascontiguousarray(got[:, 0])), dtype=np.int64).reshape(-1, 2)
    assert (closed[:, 1] > 0).all() and (closed[:, 0] <= _native.monotonic_ns()).all()
    with pytest.raises(ValueError, match="not waiting"):   # a ticket is taken once
        pool.take(np.array([first], dtype=np.int64))
    pool.close()
    assert fds_settled(before)


def test_refusals_recorded_without_blocking(files, tmp_path):
    paths, sizes = files
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"x" * 64)
    (tmp_path / "link-out").symlink_to(outside)
    (tmp_path / "link-in").symlink_to(paths[5])
    asked = [str(tmp_path / "missing"), paths[3], str(fifo), str(tmp_path / "link-out"), str(tmp_path / "link-in")]
    want = np.array([1, sizes[3] + 1, 0, 1, sizes[5]], dtype=np.int64)
    before = fds_open()
    pool = _native.opener(2, False, paths.inside)
    first = pool.submit(_packed(asked), want)
    t = time.monotonic()
    got = np.frombuffer(pool.take(np.arange(first, first + 5, dtype=np.int64)), dtype=np.int64).reshape(-1, COLS)
    assert time.monotonic() - t < 1.0                # the FIFO did not block its open
    assert got[:, 1].tolist() == [errno.ENOENT, -1, -1, -1, 0]   # -1: refused by a check
    assert got[:4, 0].tolist() == [-1] * 4
    assert os.pread(int(got[4, 0]), 8, 0) == (5).to_bytes(8, "little")   # a link inside the root is followed
    os.close(int(got[4, 0]))
    pool.close()
    assert fds_settled(before)


def test_shard_files_name_each_refusal(files, tmp_path):
    """ShardFiles on open threads raises open_for_read's own one-line errors, naming the file."""
    paths, sizes = files
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link-out").symlink_to("/etc/hostname")
    cases = [(str(tmp_path / "missing"), 1, FileNotFoundError, "missing"),
             (paths[2], sizes[2] + 1, IodlError, "shorter than the dataset manifest says"),
             (str(tmp_path / "fifo"), 0, IodlError, "not a regular file"),
             (str(tmp_path / "link-out"), 1, IodlError, "outside the dataset root")]
    before = fds_open()
    for path, size, kind, words in cases:
        files_ = ShardFiles(Paths([paths[0], path], paths.inside), np.array([sizes[0], size]), False, threads=2)
        with pytest.raises(kind, match=words) as exc:
            files_.open([0, 1])
        assert path in str(exc.value)
        files_.close_all()
    assert fds_settled(before)


def test_close_with_opens_queued_and_in_flight_leaks_nothing(files):
    paths, sizes = files
    before = fds_open()
    pool = _native.opener(4, False, paths.inside)
    first = pool.submit(_packed(list(paths) * 50), np.tile(sizes, 50))   # 2,000 opens
    got = np.frombuffer(pool.take(np.array([first, first + 1], dtype=np.int64)), dtype=np.int64).reshape(-1, COLS)
    pool.drop(np.arange(first + 2, first + 40, dtype=np.int64))
    pool.close()                                       # the rest queued or in flight: closed by the pool
    for fd in got[:, 0].tolist():                      # taken fds are the caller's
        os.close(fd)
    assert fds_settled(before)
    with pytest.raises(ValueError, match="closed"):
        pool.submit(b"x\0", np.array([1], dtype=np.int64))


def test_shard_files_ahead_then_passed_over(files):
    """Opens started ahead for shards the stream then opens otherwise (already open) are dropped:
    closed, never counted; a batch's fds are its own files; nothing stays open after close_all."""
    paths, sizes = files

    class Counts:
        opens = closes = 0
        waited = 0

        def note_open(self, t, took):   # a batch's files at once
            assert len(t) == len(took)
            self.opens += len(t)

        def note_close(self, t, took):
            assert len(t) == len(took)
            self.closes += len(t)

        def note_open_wait(self, t, waited):
            self.waited += waited

    counts = Counts()
    before = fds_open()
    files_ = ShardFiles(paths, sizes, False, counts, threads=2)
    fds = files_.open([0, 1], then=[2, 3, 4])
    assert [os.pread(fd, 8, 0) for fd in fds] == [i.to_bytes(8, "little") for i in (0, 1)]
    assert files_.opened.tolist() == [[os.fstat(fd).st_size, os.fstat(fd).st_dev] for fd in fds]
    fds = files_.open([4, 5], then=[6])                # 2 and 3 passed over: dropped
    assert [os.pread(fd, 8, 0) for fd in fds] == [i.to_bytes(8, "little") for i in (4, 5)]
    assert files_.opened.tolist() == [[int(sizes[4]), os.fstat(fds[0]).st_dev], [int(sizes[5]), os.fstat(fds[1]).st_dev]]
    files_.open([5, 6])                                # 5 was open: what its open found is not at hand
    assert files_.opened is None
    files_.close([0, 1, 4])
    assert (counts.opens, counts.closes) == (5, 3)
    assert counts.waited > 0
    files_.close_all()
    assert counts.closes == 5
    assert fds_settled(before)


@pytest.mark.strace
def test_the_engine_takes_each_open_fstat_instead_of_its_own(files, tmp_path):
    """Engine.run given ShardFiles.opened (what each fd's open found through it) makes no fstat of
    those fds, and reads and counts the same: bytes, and the cache's (the file's filesystem told by
    the device the opener saw); without it, one fstat per file, as before."""
    paths, sizes = files
    files_ = ShardFiles(paths, sizes, False, threads=2)
    fds = files_.open(list(range(10)))
    opened = files_.opened
    rows = plan.shard_plan(sizes[:10], 64)
    seen = []
    try:
        for given in (None, opened, None):
            out = tmp_path / f"strace-{len(seen)}.out"
            with _native.Engine("psync", block_size=64, cache_check=True) as eng, Strace(str(out), "fstat,newfstatat"):
                stats = eng.run(fds, rows, np.zeros(_native.HIST_BUCKETS, dtype=np.int64), opened=given)
            calls = re.findall(r"(?:newfstatat|fstat)\((\d+),", out.read_text())
            seen.append((sum(int(fd) in fds for fd in calls), stats["bytes"], stats["cached_bytes"],
                         stats["cache_unmeasured_bytes"]))
        with pytest.raises(ValueError, match="opened"), _native.Engine("psync") as eng:   # not one row per fd
            eng.run(fds, rows, np.zeros(_native.HIST_BUCKETS, dtype=np.int64), opened=opened[:5])
    finally:
        files_.close_all()
    total = int(sizes[:10].sum())
    assert seen[0] == seen[2] and seen[0][:2] == (10, total)   # without: one fstat per file
    assert seen[1] == (0,) + seen[0][1:]                        # with: none, the same counts


def _open_threads_waits() -> int:
    """How many times this process's open threads went to sleep (voluntary context switches)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "iodl-open":
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                n += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", f.read(), re.M).group(1))
        except OSError:
            pass   # a thread that just ended
    return n


def test_fast_opens_wake_one_thread_a_batch_not_all(files):
    """Opens the caches answer (5-20 us) wake no thread: waking all eight for each batch cost more
    CPU than the opens, and even one thread's wake-up costs more than such an open (native/opener.c
    SHARE_NS, FAST_NS): the taker runs them. Each woken thread sleeps again when the queue is
    empty, so the threads' sleeps count the wake-ups: 8 a batch when every batch woke them all (the
    pool at first), about 1 with one thread per share of work, 0 now (an open slowed by a busy
    machine can wake one for a while). The first batch, before any open was timed, wakes all."""
    paths, sizes = files
    pool = _native.opener(8, False, paths.inside)
    batch, batches = 24, 30

    def one_batch():
        first = pool.submit(_packed(paths[:batch]), sizes[:batch])
        got = np.frombuffer(pool.take(np.arange(first, first + batch, dtype=np.int64)), dtype=np.int64)
        fds = np.ascontiguousarray(got.reshape(-1, COLS)[:, 0])
        assert (fds >= 0).all()
        pool.close_fds(fds)
        time.sleep(0.002)   # the threads back asleep, as between a step's batches

    one_batch()
    before = _open_threads_waits()
    for _ in range(batches):
        one_batch()
    woken = (_open_threads_waits() - before) / batches
    pool.close()
    print(f"{woken:.1f} woken a batch")
    assert woken <= 4, f"{woken:.1f} open threads woken a batch of {batch} cached opens"


def _result():
    from iodl.metrics import RankResult

    return RankResult(rank=0, host="h", mount=0)


def _batch(files, result, shards, *, taking: bool):
    """One batch of whole files read through a Cursor: the engine taking them from the open
    threads (run_taking) or the reader opening, running and closing them (open, run, close)."""
    from iodl.cursor import Cursor

    paths, sizes = files
    files_ = ShardFiles(paths, sizes, False, result, threads=2)
    rows = plan.shard_plan(sizes[shards], 64)
    with _native.Engine("psync", block_size=64, cache_check=True) as eng:
        cursor = Cursor(eng, result, 0)
        if taking:
            tickets = files_.claim_batch(shards)
            assert tickets is not None and cursor.run_taking(files_, tickets, shards, rows)
            assert not files_.fds                     # nothing left to close: closed in the call
        else:
            fds = files_.open(shards)
            cursor.run(fds, rows, files_.names(shards), opened=files_.opened)
            files_.close(shards)
    files_.close_all()


def test_a_batch_taken_read_and_closed_in_one_call_counts_as_open_run_close(files):
    """Engine.run given the open threads' tickets (Cursor.run_taking) reads the same bytes and
    counts the same opens, closes and waits as the batch opened, run and closed from Python."""
    paths, sizes = files
    shards = [7, 3, 30, 12, 0, 25]
    before = fds_open()
    got = {}
    for taking in (False, True):
        result = got[taking] = _result()
        _batch(files, result, shards, taking=taking)
        assert fds_settled(before)                       # every fd closed, by the engine's call too
    old, new = got[False], got[True]
    assert new.bytes == old.bytes == int(sizes[shards].sum())
    assert new.ios == old.ios and new.hist.sum() == old.hist.sum() == new.ios
    assert new.cached_bytes == old.cached_bytes       # the opens' fstat facts reached the engine
    assert (new.opens, new.closes) == (old.opens, old.closes) == (len(shards), len(shards))
    assert new.open_hist.sum() == new.close_hist.sum() == len(shards)
    assert 0 < new.open_max_ns and 0 < new.close_max_ns
    assert new.open_wait_s > 0


def test_a_batch_taken_outside_the_window_is_read_and_closed_but_not_counted(files):
    result = _result()
    result.window_ns = (1, 2)                         # a window that ended long ago
    before = fds_open()
    _batch(files, result, [1, 2, 3], taking=True)
    assert fds_settled(before)
    assert (result.bytes, result.opens, result.closes, result.open_wait_s) == (0, 0, 0, 0.0)
    assert result.open_hist.sum() == result.close_hist.sum() == 0


def test_a_batch_with_a_refused_open_reads_nothing_and_names_the_file(files, tmp_path):
    """An open the threads refused (a FIFO in a shard's place): the call reads nothing and hands
    the take back; the batch then says the file and why in one line, and no fd stays open."""
    from iodl.cursor import Cursor

    paths, sizes = files
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    mixed = Paths([paths[0], str(fifo), paths[2]], paths.inside)
    result = _result()
    before = fds_open()
    files_ = ShardFiles(mixed, np.array([sizes[0], 1, sizes[2]]), False, result, threads=2)
    with _native.Engine("psync", block_size=64) as eng:
        tickets = files_.claim_batch([0, 1, 2])
        with pytest.raises(IodlError, match=f"{fifo}: not a regular file"):
            Cursor(eng, result, 0).run_taking(files_, tickets, [0, 1, 2], plan.shard_plan(sizes[[0, 1, 2]], 64))
    assert result.bytes == 0 and result.opens == 2    # the two good opens counted, as open() counts them
    files_.close_all()
    assert fds_settled(before)


def test_run_with_an_opener_takes_tickets_instead_of_fds(files):
    paths, sizes = files
    pool = _native.opener(1, False, paths.inside)
    hist = np.zeros(_native.HIST_BUCKETS, dtype=np.int64)
    rows = plan.shard_plan(sizes[:1], 64)
    try:
        with _native.Engine("psync", block_size=64) as eng:
            with pytest.raises(ValueError, match="no fds"):
                eng.run([3], rows, hist, opener=pool, tickets=np.array([0]), open_hist=hist.copy(),
                        close_hist=hist.copy())
            with pytest.raises(TypeError, match="Opener"):
                eng.run(None, rows, hist, opener=object(), tickets=np.array([0]), open_hist=hist.copy(),
                        close_hist=hist.copy())
            with pytest.raises(ValueError, match="not waiting"):
                eng.run(None, rows, hist, opener=pool, tickets=np.array([5]), open_hist=hist.copy(),
                        close_hist=hist.copy())
    finally:
        pool.close()
