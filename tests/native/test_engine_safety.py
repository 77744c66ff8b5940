"""Never hang, never misread: stopping (Engine.cancel(), signals) on slow and hung storage,
O_DIRECT continuations, files shorter than their plan, and bad input to the C engine.

Real parts only: an ext4 filesystem on a loop device (direct I/O), throttled with a cgroup v1
blkio read limit that this test process joins, so that "slow" and "hung" storage are real
block devices at a known rate. Engines the kernel refuses are skipped with the probe's reason.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from iodl import _native, histogram
from iodl.engine import as_plan, open_for_read, raise_for_errors
from iodl.errors import IodlError
from iodl.groundtruth import BlkioGroup, LoopMount, write_incompressible
from tests.helpers import Strace

SLOW = 256_000          # B/s: a slow mount
HUNG = 4096             # B/s: a 1 MiB read takes ~4 minutes, i.e. never within a test

_MARKS = {"aio": [pytest.mark.aio], "uring": [pytest.mark.uring]}
REAL = [pytest.param(n, marks=_MARKS.get(n, [])) for n in ("psync", "aio", "uring")]
ASYNC = [p for p in REAL if p.values[0] != "psync"]

pytestmark = [pytest.mark.root, pytest.mark.loopdev, pytest.mark.blkio]


class Storage:
    """A loop-mounted ext4 whose reads by this process go through a blkio group."""

    def __init__(self, mount: LoopMount, group: BlkioGroup):
        self.mount, self.group = mount, group
        self.dir = mount.path

    def file(self, name: str, size: int) -> str:
        path = os.path.join(self.dir, name)
        write_incompressible(path, size)
        return path

    def throttle(self, bps: int) -> "Throttle":
        return Throttle(self, bps)

    def inflight(self) -> int:
        dev = os.path.basename(self.mount.device)
        with open(f"/sys/block/{dev}/inflight") as f:
            return sum(int(x) for x in f.read().split())


class Throttle:
    """Reads of the mount at `bps` while inside; on exit the limit is lifted and whatever a test
    left in flight (an abandoned request) is waited for, so no test waits behind another's."""

    def __init__(self, storage: Storage, bps: int):
        self.s, self.bps = storage, bps

    def __enter__(self):
        self.s.group.throttle_read(self.s.mount.majmin, self.bps)
        return self

    def __exit__(self, *exc):
        self.s.group.throttle_read(self.s.mount.majmin, 0)     # 0 removes the rule
        deadline = time.monotonic() + 20
        while self.s.inflight() and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def storage():
    with LoopMount(256 << 20, direct_io=True) as m, BlkioGroup("iodl-safety") as g:
        g.enter()        # this process: its reads of the loop device are throttled and counted
        yield Storage(m, g)


def run_in_thread(eng, fds, plan):
    """eng.run in another thread; returns (thread, box) where box gets 'stats' or 'exc' and 't_end'."""
    box = {}

    def body():
        try:
            box["stats"] = eng.run(fds, plan, histogram.empty())
        except BaseException as exc:      # noqa: BLE001 - handed to the test
            box["exc"] = exc
        box["t_end"] = time.monotonic()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, box


def seq_plan(size: int, bs: int):
    return as_plan([(0, off, bs) for off in range(0, size, bs)])


# -- stopping: cancel() from another thread, a signal in the main thread ---------------------

@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize("name", REAL)
def test_cancel_from_another_thread_stops_a_slow_run(storage, name):
    """8 KiB reads at depth 4 (psync: 1) of a 256 KB/s mount: 32 s of work. cancel() ends the run
    within 0.5 s (notice <= 100 ms, drain of <= 32 KiB ~ 125 ms), with exact partial counts."""
    bs, size = 8192, 8 << 20
    path = storage.file(f"cancel-{name}.bin", size)
    fd = open_for_read(path, True)
    try:
        with storage.throttle(SLOW), _native.Engine(name, depth=4, block_size=bs, direct=True) as eng:
            t, box = run_in_thread(eng, [fd], seq_plan(size, bs))
            time.sleep(0.6)
            assert t.is_alive(), box
            t_cancel = time.monotonic()
            eng.cancel()
            cancelled_by_ns = _native.monotonic_ns()
            t.join(5)
            assert not t.is_alive(), "run() did not return after cancel()"
            st = box["stats"]
            took = box["t_end"] - t_cancel
            assert took < 0.5, f"run returned {took:.2f} s after cancel()"
            assert st["interrupted"] is True and st["errors"] == 0 and st["abandoned"] == 0
            # every row started was drained: rows [0, done) complete; only what completed before the
            # cancel is counted (the run ended there), the drain is not
            assert 0 < st["ios"] <= st["done"] < size // bs
            assert st["bytes"] == st["ios"] * bs
            assert st["t_end_ns"] <= cancelled_by_ns
            # a cancelled engine never starts again
            t0 = time.monotonic()
            again = eng.run([fd], seq_plan(size, bs), histogram.empty())
            assert time.monotonic() - t0 < 0.05
            assert (again["done"], again["bytes"], again["interrupted"]) == (0, 0, True)
            assert eng.cancelled
    finally:
        os.close(fd)


class Stop(Exception):
    pass


def raise_stop(signum, frame):
    raise Stop()


@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize("name", REAL)
def test_signal_stops_a_slow_run_at_depth_1(storage, name):
    """The main thread runs the engine (GIL released); SIGINT whose handler raises ends it within
    0.5 s, psync at depth 1 included, and the exception carries the partial stats."""
    bs, size = 16384, 8 << 20
    path = storage.file(f"sig-{name}.bin", size)
    fd = open_for_read(path, True)

    old = signal.signal(signal.SIGINT, raise_stop)
    sent = {}

    def kill_later():
        time.sleep(0.6)
        sent["t"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    try:
        with storage.throttle(SLOW), _native.Engine(name, depth=1, block_size=bs, direct=True) as eng:
            threading.Thread(target=kill_later, daemon=True).start()
            with pytest.raises(Stop) as info:
                eng.run([fd], seq_plan(size, bs), histogram.empty())
            took = time.monotonic() - sent["t"]
            assert took < 0.5, f"run ended {took:.2f} s after SIGINT"
            st = info.value.stats
            assert st["interrupted"] is True and 0 < st["done"] < size // bs
            assert st["bytes"] == st["done"] * bs
    finally:
        signal.signal(signal.SIGINT, old)
        os.close(fd)


def test_null_engine_waits_in_slices(storage):
    """No storage at all: requests due in 0.8 s; cancel() after 0.2 s is seen within ~100 ms and
    the run returns once they are due (drained, not abandoned, and not counted: they completed
    after the cancel, which ended the run)."""
    with _native.Engine("null", depth=4, block_size=4096, delay_ns=800_000_000) as eng:
        t, box = run_in_thread(eng, [-1], as_plan([(0, 0, 4096)] * 100))
        time.sleep(0.2)
        t0 = time.monotonic()
        eng.cancel()
        t.join(5)
        st = box["stats"]
        assert st["interrupted"] and st["done"] == 4 and st["ios"] == 0 and st["abandoned"] == 0
        assert box["t_end"] - t0 < 0.9


# -- hung storage: a request that does not complete ------------------------------------------

@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize("name", ASYNC)
@pytest.mark.parametrize("how", ["cancel", "signal"])
def test_stop_on_hung_storage_is_bounded(storage, name, how):
    """A 1 MiB O_DIRECT read at 4096 B/s (~4 min). The stop is seen within 100 ms and the drain is
    given up after 1 s: the run returns within 1.5 s, reporting the request it left behind
    (abandoned=1); the engine never runs again and its buffers are left to the kernel.
    psync is not here: a pread in flight cannot be interrupted, so its stop waits for that one
    request (the design's "plus one request's service time")."""
    bs = 1 << 20
    path = storage.file(f"hung-{name}-{how}.bin", 2 * bs)
    fd = open_for_read(path, True)
    old = signal.signal(signal.SIGINT, raise_stop)
    try:
        with storage.throttle(HUNG):
            eng = _native.Engine(name, depth=1, block_size=bs, direct=True)
            plan = seq_plan(2 * bs, bs)
            if how == "cancel":
                t, box = run_in_thread(eng, [fd], plan)
                time.sleep(0.3)
                t0 = time.monotonic()
                eng.cancel()
                t.join(10)
                assert not t.is_alive()
                st, took = box["stats"], box["t_end"] - t0
            else:
                def kill_later():
                    time.sleep(0.3)
                    sent["t"] = time.monotonic()
                    os.kill(os.getpid(), signal.SIGINT)
                sent = {}
                threading.Thread(target=kill_later, daemon=True).start()
                with pytest.raises(Stop) as info:
                    eng.run([fd], plan, histogram.empty())
                st, took = info.value.stats, time.monotonic() - sent["t"]
            assert took < 1.5, f"returned {took:.2f} s after the stop"
            assert (st["interrupted"], st["abandoned"], st["bytes"], st["done"]) == (True, 1, 0, 0)
            assert eng.cancelled
            again = eng.run([fd], plan, histogram.empty())
            assert (again["done"], again["interrupted"]) == (0, True)
            eng.close()      # does not wait for the hung request
    finally:
        signal.signal(signal.SIGINT, old)
        os.close(fd)


# -- O_DIRECT continuations and files shorter than their plan --------------------------------

@pytest.mark.parametrize("name", REAL)
def test_direct_sizes_not_multiple_of_4096_exact(storage, name):
    """Rows cut to the file's size (as plans are made): every byte counted once, no error."""
    sizes = [4097, 10000, (1 << 20) + 123, 65535]
    paths = [storage.file(f"odd-{name}-{i}.bin", s) for i, s in enumerate(sizes)]
    bs = 65536
    rows = [(f, off, min(bs, s - off)) for f, s in enumerate(sizes) for off in range(0, s, bs)]
    fds = [open_for_read(p, True) for p in paths]
    try:
        with _native.Engine(name, depth=4, block_size=bs, direct=True) as eng:
            st = eng.run(fds, as_plan(rows), histogram.empty())
        assert (st["errors"], st["short_rows"], st["first_short_row"]) == (0, 0, -1)
        assert st["bytes"] == sum(sizes) and st["done"] == len(rows)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.strace
@pytest.mark.parametrize("name", REAL)
def test_direct_short_read_continues_aligned(storage, name, tmp_path):
    """File A is truncated to an unaligned size while a slow read of file B runs, after A's size
    was taken: A's next row reads 1000 bytes and is continued, and the continuation of an O_DIRECT
    read must start at an aligned offset (the old one started at 66536: EINVAL before EOF; at EOF
    this kernel returns 0 before checking alignment, so strace checks the offsets). Exact bytes,
    no error, two short rows, and every read of A at a multiple of 4096 (psync, aio)."""
    a = storage.file(f"trunc-a-{name}.bin", 256 << 10)
    b = storage.file(f"trunc-b-{name}.bin", 256 << 10)
    fds = [open_for_read(a, True), open_for_read(b, True)]
    plan = as_plan([(0, 0, 65536), (1, 0, 256 << 10), (0, 65536, 65536), (0, 131072, 65536)])
    new_size = 65536 + 1000
    try:
        with storage.throttle(SLOW), _native.Engine(name, depth=1, block_size=256 << 10, direct=True) as eng, \
                Strace(str(tmp_path / "strace.out")) as trace:
            t, box = run_in_thread(eng, fds, plan)
            time.sleep(0.5)          # row 0 (A, ~0.25 s) is done, row 1 (B, ~1 s) is in flight
            os.truncate(a, new_size)
            t.join(10)
        st = box["stats"]
        assert st["done"] == 4 and st["errors"] == 0, st
        assert st["bytes"] == 65536 + (256 << 10) + 1000
        assert (st["short_rows"], st["first_short_row"], st["short_file_size"]) == (2, 2, new_size)
        with pytest.raises(IodlError, match=rf"{a}: shorter than expected: {new_size} bytes, "
                                            rf"the plan reads up to 131072"):
            raise_for_errors(st, plan, [a, b])
        if name != "uring":
            offs = trace.read_offsets(fds[0])
            # row 0, row 2, row 2's continuation (from 65536 again), row 3
            assert sorted(offs) == [0, 65536, 65536, 131072], offs
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
@pytest.mark.parametrize("name", REAL)
def test_file_shorter_than_plan_is_reported(storage, name, direct):
    """A plan made for 16384 bytes over a file of 10000: the second row meets EOF after 1808."""
    path = storage.file(f"short-{name}-{direct}.bin", 10000)
    plan = as_plan([(0, 0, 8192), (0, 8192, 8192)])
    fd = open_for_read(path, direct)
    try:
        with _native.Engine(name, depth=2, block_size=8192, direct=direct) as eng:
            st = eng.run([fd], plan, histogram.empty())
    finally:
        os.close(fd)
    assert st["bytes"] == 10000 and st["errors"] == 0 and st["interrupted"] is False
    assert (st["short_rows"], st["first_short_row"], st["short_file_size"]) == (1, 1, 10000)
    with pytest.raises(IodlError) as info:
        raise_for_errors(st, plan, [path])
    assert str(info.value) == f"{path}: shorter than expected: 10000 bytes, the plan reads up to 16384"


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["null", "psync"])
def test_bad_inputs_are_value_errors(name):
    fds = [-1] if name == "null" else [0]
    with _native.Engine(name, depth=2, block_size=4096) as eng:
        hist = histogram.empty()
        with pytest.raises(ValueError, match="plan must be"):
            eng.run(fds, np.zeros((2, 3), dtype=np.float64), hist)
        with pytest.raises(ValueError, match="plan must be"):
            eng.run(fds, np.zeros((2, 3), dtype=np.uint64)[:, ::-1], hist)     # not C-contiguous
        with pytest.raises(ValueError, match="plan must be"):
            eng.run(fds, np.zeros(2, dtype=[("a", "<u8"), ("b", "<u8"), ("c", "<u8")]), hist)
        with pytest.raises(ValueError, match="negative"):
            eng.run(fds, np.array([[0, -4096, 1]], dtype=np.int64), hist)
        for fd in (2**31, 2**70, -2):
            with pytest.raises(ValueError, match="not a file descriptor"):
                eng.run([fd], as_plan([(0, 0, 1)]), hist)
        # int64 and uint64 (n, 3) arrays are plans
        assert eng.run(fds, np.array([[0, 0, 1]], dtype=np.int64), hist)["done"] == 1
    if name == "psync":
        with pytest.raises(ValueError, match="not a file descriptor"):
            _native.Engine(name).run([-1], as_plan([(0, 0, 1)]), histogram.empty())


@pytest.mark.parametrize("name", ["null", "aio", "uring"])
def test_huge_buffer_pool_is_refused(name):
    with pytest.raises(ValueError, match=r"depth 65536 x block_size 1073741824 needs 70368744177664 bytes"):
        _native.Engine(name, depth=65536, block_size=1 << 30)
    with pytest.raises(ValueError, match="depth 8192 x block_size 1048576"):
        _native.Engine(name, depth=8192, block_size=1 << 20)     # 8 GiB
    _native.Engine(name, depth=64, block_size=1 << 20).close()  # 64 MiB is fine


@pytest.mark.parametrize("name", REAL)
def test_plan_mutated_during_run_is_not_read(storage, name):
    """Another thread rewrites the plan array while the run (GIL released) is reading it: the run
    reads the plan as it was when run() was called."""
    bs, n = 4096, 64          # ~16 ms a row at 256 KB/s: ~1 s of rows
    path = storage.file(f"mut-{name}.bin", n * bs)
    plan = seq_plan(n * bs, bs)
    fd = open_for_read(path, True)
    try:
        with storage.throttle(SLOW), _native.Engine(name, depth=1, block_size=bs, direct=True) as eng:
            t, box = run_in_thread(eng, [fd], plan)
            time.sleep(0.2)
            plan["length"] = 0
            plan["offset"] = 0
            t.join(10)
        st = box["stats"]
        assert (st["done"], st["ios"], st["bytes"], st["errors"]) == (n, n, n * bs, 0)
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["null", "psync"])
def test_plan_rows_carry_an_op_and_unknown_ops_are_refused(tmp_path, name):
    """The op column: (n, 4) rows and PLAN_DTYPE rows say what each request is; a read (0) runs,
    writes and syncs run too (tests/native/test_engine_writes.py), an op past OP_FDATASYNC is refused
    by number, before anything runs."""
    from iodl import plan as P

    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    fd = os.open(path, os.O_RDWR)
    try:
        with _native.Engine(name, depth=2, block_size=4096) as eng:
            rows = P.new_plan(2)
            rows["offset"], rows["length"] = [0, 4096], 4096
            assert (rows["op"] == P.OP_READ).all()
            assert eng.run([fd], rows, histogram.empty())["bytes"] == 8192
            assert eng.run([fd], np.array([[0, 0, 4096, P.OP_READ]], dtype=np.uint64), histogram.empty())["ios"] == 1
            for op in (P.OP_FDATASYNC + 1, 1 << 40):
                bad = rows.copy()
                bad["op"][1] = op
                with pytest.raises(ValueError, match=f"plan row 1: op {op} is not read"):
                    eng.run([fd], bad, histogram.empty())
            assert path.read_bytes() == b"x" * 8192
    finally:
        os.close(fd)
