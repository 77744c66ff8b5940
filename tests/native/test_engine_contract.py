"""One contract, every engine x {buffered, direct}: exact bytes and ios, EOF tails, deadlines,
errors, pacing, histogram truth, page-cache hits, the time series and the live counters. Real
files on /tmp (ext4), no mocks.

Engines the kernel refuses are skipped with the probe's reason (tests/conftest.py markers).
The native engines and `asyncio` (iodl/asyncio_engine.py: aiofiles on uvloop, same interface)
run the same bodies.
"""
from __future__ import annotations

import errno
import os
import subprocess
import time

import numpy as np
import pytest

from iodl import _native, cache, groundtruth, histogram
from iodl.asyncio_engine import AsyncioEngine
from iodl.engine import as_plan, open_for_read
from iodl.plan import PLAN_DTYPE
from tests.helpers import NotJudged

ALIGN = _native.ALIGN
BS = 64 << 10
DEPTH = 8
# sizes that are not multiples of the block or the page: the EOF tail must be counted exactly
SIZES = [(1 << 20) + 123, 4095, 1, 0, 3 * BS, 5 * BS + ALIGN]

_MARKS = {"aio": [pytest.mark.aio], "uring": [pytest.mark.uring],
          "asyncio": [pytest.mark.asyncio]}
ENGINES = [
    pytest.param(name, direct, id=f"{name}-{'direct' if direct else 'buffered'}",
                 marks=_MARKS.get(name, []) + ([pytest.mark.odirect] if direct else []))
    for name in _native.engines() + ["asyncio"] for direct in (False, True)
]


def make_files(tmp_path, sizes):
    paths = []
    for i, size in enumerate(sizes):
        p = tmp_path / f"f{i}.bin"
        with open(p, "wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())   # else the first O_DIRECT read of a range waits for its writeback
        paths.append(str(p))
    return paths


def whole_file_plan(sizes, bs=BS):
    """Each file read whole in bs requests; a 0-byte file still gets one request (it must return 0)."""
    rows = []
    for f, size in enumerate(sizes):
        for off in range(0, max(size, 1), bs):
            rows.append((f, off, bs))
    return as_plan(rows)


class Opened:
    def __init__(self, paths, direct):
        self.fds = [open_for_read(p, direct) for p in paths]

    def __enter__(self):
        return self.fds

    def __exit__(self, *exc):
        for fd in self.fds:
            os.close(fd)


def engine(name, direct, **kw):
    kw.setdefault("depth", DEPTH)
    kw.setdefault("block_size", BS)
    if name == "asyncio":
        return AsyncioEngine(direct=direct, **kw)
    return _native.Engine(name, direct=direct, **kw)


def expected_bytes(name, plan, sizes):
    if name == "null":       # no file behind it: every request returns its full length
        return int(plan["length"].sum())
    ends = np.minimum(plan["offset"] + plan["length"], np.asarray(sizes, dtype=np.uint64)[plan["file"]])
    return int(np.maximum(ends.astype(np.int64) - plan["offset"].astype(np.int64), 0).sum())


@pytest.mark.parametrize("name,direct", ENGINES)
def test_reads_every_byte_exactly(tmp_path, name, direct):
    paths = make_files(tmp_path, SIZES)
    plan = whole_file_plan(SIZES)
    hist = histogram.empty()
    with Opened(paths, direct) as fds, engine(name, direct) as eng:
        st = eng.run(fds, plan, hist)
    assert st["errors"] == 0 and st["first_errno"] == 0 and st["first_error_row"] == -1
    assert st["done"] == len(plan)
    # no short read before EOF on a local file: one request per row, the tails included
    assert st["ios"] == len(plan)
    assert st["bytes"] == expected_bytes(name, plan, SIZES)
    assert int(hist.sum()) == st["ios"]
    assert sum(st["depth"]) == st["ios"]
    assert st["t_end_ns"] >= st["t_start_ns"] > 0
    assert histogram.index(st["max_ns"]) == np.flatnonzero(hist)[-1]
    if eng.depth > 1:   # the async engines really kept DEPTH requests in flight
        assert st["depth"][3] > 0          # fio bin "8"
    else:
        assert st["depth"][0] == st["ios"]


WARM = [p for p in ENGINES if p.values[0] in ("uring", "aio")]


@pytest.mark.parametrize("name,direct", WARM)
def test_reap_ready_gives_a_cache_hits_slot_to_the_next_read(tmp_path, name, direct):
    """reap_ready (the DL patterns' way): a read the kernel finished inside its submit is reaped before
    the next row is taken, so the next read reuses its slot (the free slots are a stack) instead of
    each of the `depth` slots in turn. Cached files read whole at depth 8: with it every read is
    submitted with nothing else in flight (fio's depth bin "1" only: one slot in use); without it
    (fio's way) the reads pile up to 8 before one is reaped. Either way every byte is read. Direct
    reads are not finished inside the submit: their bytes are all read, whatever the depth."""
    sizes = [300_000 + 4096 * i for i in range(24)]
    paths = make_files(tmp_path, sizes)
    plan = whole_file_plan(sizes, bs=1 << 20)
    for path in paths:   # in the page cache (make_files wrote them; read once to be sure)
        with open(path, "rb") as f:
            f.read()
    stats = {}
    for ready in (True, False):
        with Opened(paths, direct) as fds, engine(name, direct, block_size=1 << 20, reap_ready=ready) as eng:
            stats[ready] = st = eng.run(fds, plan, histogram.empty())
        assert st["errors"] == 0 and st["done"] == st["ios"] == len(plan)
        assert st["bytes"] == sum(sizes) and sum(st["depth"]) == st["ios"]
    if not direct:
        assert list(stats[True]["depth"]) == [len(plan)] + [0] * (histogram.DEPTH_BUCKETS - 1), stats[True]["depth"]
        assert stats[False]["depth"][3] > 0, stats[False]["depth"]   # fio bin "8"


@pytest.mark.parametrize("name,direct", ENGINES)
def test_random_rows_and_rerun(tmp_path, name, direct):
    """Random aligned 4 KiB..BS reads over two files, then the same engine again: counters per run."""
    sizes = [(2 << 20) + 777, (1 << 20)]
    paths = make_files(tmp_path, sizes)
    rng = np.random.default_rng(7)
    n = 500
    files = rng.integers(0, 2, n)
    offsets = rng.integers(0, np.asarray(sizes)[files] // ALIGN + 1) * ALIGN
    lengths = rng.integers(1, BS // ALIGN + 1, n) * ALIGN
    plan = as_plan(np.stack([files, offsets, lengths], axis=1))
    with Opened(paths, direct) as fds, engine(name, direct) as eng:
        for _ in range(2):
            hist = histogram.empty()
            st = eng.run(fds, plan, hist)
            assert (st["done"], st["ios"], st["errors"]) == (n, n, 0)
            assert st["bytes"] == expected_bytes(name, plan, sizes)
            assert int(hist.sum()) == n


@pytest.mark.flaky(reruns=1)  # the drain bound is a timing claim (a Python engine's drain waits on a busy VM)
@pytest.mark.parametrize("name,direct", ENGINES)
def test_deadline_stops_submitting_and_drains(tmp_path, name, direct):
    size = 4 << 20
    paths = make_files(tmp_path, [size])
    rows = 200_000
    plan = np.zeros(rows, dtype=PLAN_DTYPE)
    plan["file"] = 0
    plan["offset"] = (np.arange(rows) * ALIGN) % size
    plan["length"] = ALIGN
    kw = {"delay_ns": 100_000} if name == "null" else {}
    with Opened(paths, direct) as fds, engine(name, direct, **kw) as eng:
        deadline = _native.monotonic_ns() + 50_000_000
        st = eng.run(fds, plan, histogram.empty(), deadline_ns=deadline)
    assert 0 < st["done"] < rows
    assert st["errors"] == 0
    # started rows are drained, none is left half done
    assert st["ios"] == st["done"]
    assert st["bytes"] == st["done"] * ALIGN
    # nothing was submitted after the deadline: the drain is at most one batch of DEPTH requests
    # (~1 ms here; 50 ms leaves room for a loaded 2-core VM, the run itself would take seconds). A read
    # in flight at the deadline ends within its own latency, which for asyncio includes the hand-offs
    # to its thread and back: with three busy processes on the 2 cores its drains took 0.1-15 ms, and
    # CI reran an asyncio case of this test (its one timing claim is this bound) in five runs running.
    # The bound is then the slowest read's latency (max_ns) and 5 ms more; a loop that kept submitting
    # would still end far past both.
    assert st["t_end_ns"] - deadline < max(50_000_000, st["max_ns"] + 5_000_000), st["max_ns"]


@pytest.mark.parametrize("name,direct", [p for p in ENGINES if p.values[0] != "null"])
def test_first_error_stops_the_run(tmp_path, name, direct):
    paths = make_files(tmp_path, [1 << 20])
    rows = [(0, i * BS, BS) for i in range(10)] + [(1, 0, BS)] + [(0, i * BS, BS) for i in range(10)]
    plan = as_plan(rows)
    with Opened(paths, direct) as fds, engine(name, direct) as eng:
        bad = os.open(os.devnull, os.O_RDONLY)
        os.close(bad)                               # a closed descriptor: EBADF
        st = eng.run([fds[0], bad], plan, histogram.empty())
        assert st["errors"] >= 1
        assert st["first_errno"] == errno.EBADF
        assert st["first_error_row"] == 10
        assert st["done"] == 10
        # the rows before it were read whole
        assert st["bytes"] >= 10 * BS
        # and the engine is still usable after an error
        ok = eng.run(fds, plan[:10], histogram.empty())
        assert (ok["errors"], ok["bytes"]) == (0, 10 * BS)


@pytest.mark.odirect
@pytest.mark.parametrize("name", [p.values[0] for p in ENGINES if p.values[0] != "null" and p.values[1]])
def test_direct_misaligned_offset_is_an_error(tmp_path, name):
    paths = make_files(tmp_path, [1 << 20])
    with Opened(paths, True) as fds, engine(name, True) as eng:
        st = eng.run(fds, as_plan([(0, 0, BS), (0, 100, BS)]), histogram.empty())
    assert (st["errors"], st["first_errno"], st["first_error_row"], st["done"]) == (1, errno.EINVAL, 1, 1)


@pytest.mark.parametrize("name,direct", [p for p in ENGINES if p.values[0] in ("null", "asyncio") and not p.values[1]])
def test_bad_plans_are_refused_before_any_io(tmp_path, name, direct):
    with engine(name, direct) as eng:
        with pytest.raises(ValueError, match="only 1 fds"):
            eng.run([0], as_plan([(0, 0, 1), (1, 0, 1)]), histogram.empty())
        with pytest.raises(ValueError, match="exceeds block_size"):
            eng.run([0], as_plan([(0, 0, BS + 1)]), histogram.empty())
        with pytest.raises(TypeError):
            eng.run([0], as_plan([(0, 0, 1)]), np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError, match="closed"):
        eng.run([0], as_plan([(0, 0, 1)]), histogram.empty())
    with pytest.raises(ValueError, match="unknown engine"):
        _native.Engine("nope")
    with pytest.raises(ValueError, match="null engine only"):
        _native.Engine("psync", delay_ns=5)


@pytest.mark.flaky(reruns=1)  # the 5% budget holds wake-up latency of a quiet box, not a load spike
@pytest.mark.parametrize("depth", [1, 4])
def test_null_delay_is_histogram_truth(depth):
    """N requests of delay D at depth d take N/d * D; the histogram's p50 is D within 5%.

    Error budget: bucket midpoint <= 0.78%, plus the wake-up latency of clock_nanosleep on this
    VM (timer slack is set to 1 ns during sleeps; measured ~50-120 us, i.e. 1-2.5% of 5 ms).
    """
    delay, n = 5_000_000, 40
    plan = as_plan([(0, 0, 4096)] * n)
    hist = histogram.empty()
    with _native.Engine("null", depth=depth, block_size=4096, delay_ns=delay) as eng:
        st = eng.run([-1], plan, hist)
    elapsed = st["t_end_ns"] - st["t_start_ns"]
    ideal = n // depth * delay
    # never early; late only by wake-ups (loose: the 2-core VM is shared with other work)
    assert ideal <= elapsed < ideal * 1.5
    if depth == 1:   # back to back: the latencies the histogram holds add up to the elapsed time
        assert abs(float((hist * histogram.MID).sum()) - elapsed) / elapsed < 0.03
    p = histogram.percentiles(hist, [50, 99])
    assert abs(p[50] * 1e3 - delay) / delay < 0.05
    assert st["max_ns"] >= delay and st["ios"] == n
    # the 4 due together complete together; refilled one by one (submit_batch=1, fio's default)
    # they see depth 1, 2, 3, 4 each round: buckets 1, 2-3, 4-7
    assert list(st["depth"][:3]) == {1: [n, 0, 0], 4: [n // 4, n // 2, n // 4]}[depth]


GAP_NS = 10_000_000     # 100 requests/s


@pytest.mark.flaky(reruns=1)  # a rate is a timing claim: sleeps wake late on a busy VM; a pacing bug fails both runs
@pytest.mark.parametrize("name,direct", ENGINES)
def test_rate_pacing_quiesces_to_depth_one(tmp_path, name, direct):
    """fio's rate: achieved rate within 5% of rate_bps, and the depth histogram collapses to 1.

    The gap between requests is 10 ms, far above a 64 KiB read here (~0.2 ms), so each request
    finds the previous one done. If the device is contended (other work on this shared VM) a
    read can outlast the gap; requests then fall behind schedule and are rightly issued at
    once, so the depth check needs quiet storage: it is "not judged", saying so, when the p99
    latency was not below gap/4. test_rate_pacing_null covers the quiesce deterministically.
    """
    size = 8 << 20
    paths = make_files(tmp_path, [size])
    n = 50
    rate = BS * 1_000_000_000 // GAP_NS
    plan = as_plan([(0, (i * BS) % size, BS) for i in range(n)])
    hist = histogram.empty()
    with Opened(paths, direct) as fds, engine(name, direct, rate_bps=rate) as eng:
        st = eng.run(fds, plan, hist)
    assert st["ios"] == n and st["bytes"] == n * BS
    # the first request goes at t_start, request i at t_start + i*BS/rate: the window holds
    # n-1 gaps plus the last latency, hence the (n - 1)/n
    achieved = st["bytes"] / ((st["t_end_ns"] - st["t_start_ns"]) / 1e9)
    assert abs(achieved * (n - 1) / n - rate) / rate < 0.05
    if name != "psync":
        with Opened(paths, direct) as fds, engine(name, direct) as eng:
            unpaced = eng.run(fds, plan, histogram.empty())
        assert unpaced["depth"][0] / sum(unpaced["depth"]) < 0.25    # unpaced it runs deep
    p99_ms = histogram.percentiles(hist, [99])[99] / 1e3
    if p99_ms * 1e6 >= GAP_NS / 4:
        raise NotJudged(f"device contended: p99 read latency {p99_ms:.1f} ms vs a {GAP_NS / 1e6:.0f} ms gap")
    # late wake-ups on a loaded VM can still put a few behind schedule (null has no latency to
    # skip on); the strict check with known latencies is test_rate_pacing_null
    assert st["depth"][0] / sum(st["depth"]) >= 0.8


@pytest.mark.flaky(reruns=1)  # sleeps that wake late on a busy VM; a pacing bug fails both runs
@pytest.mark.parametrize("delay_ms,depth_one", [(1, True), (35, False)])
def test_rate_pacing_null(delay_ms, depth_one):
    """Ahead of schedule -> quiesce, depth 1; behind (latency 35 ms > 10 ms gap) -> issue at once,
    depth grows to ~4 and the rate is still met. Wake-up lateness on this VM is << the gap.
    Behind schedule, requests go out in catch-up bursts, so the last one may leave up to one latency
    late: 200 requests (2 s) keep that under 2% of the window, inside the 5% asked."""
    n = 200
    rate = 4096 * 1_000_000_000 // GAP_NS
    plan = as_plan([(0, 0, 4096)] * n)
    with _native.Engine("null", depth=8, block_size=4096, delay_ns=delay_ms * 1_000_000, rate_bps=rate) as eng:
        st = eng.run([-1], plan, histogram.empty())
    achieved = st["bytes"] / ((st["t_end_ns"] - st["t_start_ns"]) / 1e9)
    # window = (n-1) gaps + one latency
    expected = n * 4096 / (((n - 1) * GAP_NS + delay_ms * 1_000_000) / 1e9)
    assert abs(achieved - expected) / expected < 0.05
    ones = st["depth"][0] / sum(st["depth"])
    if depth_one:
        assert ones >= 0.95
    else:
        # catch-up bursts of ~35/10 requests, each handed over alone (submit_batch=1, as fio):
        # they see depth 1, 2, 3, 4, so about 1 in 3.5 is at depth 1, and some reach fio bin "4"
        assert ones < 0.45 and st["depth"][2] > 0


def fincore_bytes(path):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])


def device_read_bytes(device):
    """Bytes read from a block device so far (/sys/block/NAME/stat, field 3: sectors read)."""
    with open(f"/sys/block/{os.path.basename(device)}/stat") as f:
        return int(f.read().split()[2]) * 512


def settle(device, timeout=10.0):
    """Wait until the readahead that earlier reads started has reached the device's count (it is
    counted on completion): two equal samples 100 ms apart."""
    deadline = time.monotonic() + timeout
    last = device_read_bytes(device)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = device_read_bytes(device)
        if now == last:
            return
        last = now
    raise AssertionError(f"reads from {device} did not settle in {timeout} s")


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.parametrize("name, direct", [p for p in ENGINES if p.values[0] != "null" and not p.values[1]])
def test_cache_hits_are_what_the_device_did_not_deliver(tmp_path, name, direct):
    """cached_bytes = bytes read - bytes the loop device delivered during the run, with half the
    file warmed, then all of it, then none (evicted through the same fd: a hit is decided at the
    read, nothing is remembered per fd). The kernel's readahead, which reads ahead of the reader
    inside the file, comes from the device and must be a miss.

    Tolerance: the native engines are exact (their reads submit all of the device's reads, in
    their own thread); asyncio's reads run in depth threads, so a read waiting on pages another
    thread is fetching may complete before that thread reports them: at most depth x block
    bytes stay uncharged at the end of a run (docs/engines.md)."""
    size, bs, depth = 32 << 20, 1 << 20, 4
    slack = depth * bs if name == "asyncio" else 0
    with groundtruth.LoopMount(128 << 20) as m:
        path = make_files_in(m.path, size)
        for _attempt in range(5):
            if _cache_hits_once(m, path, name, size, bs, depth, slack):
                return
    pytest.fail("the page cache was dropped under the test 5 times (another process runs drop_caches)")


def _cache_hits_once(m, path, name, size, bs, depth, slack) -> bool:
    """False if someone else dropped the page cache meanwhile (drop_caches is machine-wide)."""
    cache.drop_caches()
    drops = groundtruth.page_cache_drops()
    with open(path, "rb", buffering=0) as f:
        f.read(size // 2)
    plan = whole_file_plan([size], bs=bs)
    with Opened([path], False) as fds, engine(name, False, depth=depth, block_size=bs, cache_check=True) as eng:
        for step in ("half", "all", "evicted"):
            if step == "evicted":
                os.posix_fadvise(fds[0], 0, 0, os.POSIX_FADV_DONTNEED)
            settle(m.device)
            before = device_read_bytes(m.device)
            st = eng.run(fds, plan, histogram.empty())
            device = device_read_bytes(m.device) - before
            if groundtruth.page_cache_drops() != drops:
                return False
            assert st["bytes"] == size and st["cache_unmeasured_bytes"] == 0
            assert size - device - slack <= st["cached_bytes"] <= size - device + slack, step
            if step == "half":
                # the warm-up did what it meant to (its readahead went on past the half)
                assert size / 4 <= device <= size / 2
            elif step == "all":
                assert device < size / 100     # a few pages the kernel reclaimed meanwhile, at most
            else:
                assert device >= size * 0.95
    return True


def make_files_in(directory, size):
    path = os.path.join(directory, "f.bin")
    groundtruth.write_incompressible(path, size)
    return path


@pytest.mark.parametrize("name, direct", [p for p in ENGINES if p.values[0] != "null" and not p.values[1]])
def test_direct_and_uncached_runs_count_no_hits(tmp_path, name, direct):
    """O_DIRECT never reads from the page cache; without cache_check nothing is measured."""
    path = make_files(tmp_path, [1 << 20])[0]
    plan = whole_file_plan([1 << 20])
    for direct, check in ((True, True), (False, False)):
        with Opened([path], direct) as fds, engine(name, direct, cache_check=check) as eng:
            st = eng.run(fds, plan, histogram.empty())
        assert st["bytes"] == 1 << 20
        assert st["cached_bytes"] == st["cache_unmeasured_bytes"] == 0


def test_resident_bytes_against_fincore(tmp_path):
    size = (4 << 20) + 100
    path = make_files(tmp_path, [size])[0]
    os.chmod(path, 0o644)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)                                          # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert _native.resident_bytes(fd, 0, size) == 0
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)     # no readahead: exactly what we read
        os.pread(fd, 8192, 4096)
        os.pread(fd, 100, size - 100)
        assert _native.resident_bytes(fd, 0, size) == 8192 + (size % 4096)
        assert fincore_bytes(path) == 8192 + 4096
        assert _native.resident_bytes(fd, 4096 + 1000, 10_000) == 8192 - 1000
        assert _native.resident_bytes(fd, size, 10) == 0
        with pytest.raises(OSError, match="originated from fstat"):
            _native.resident_bytes(-1, 0, 1)
        if os.geteuid() == 0:
            # another user, who may read but neither owns nor may write it: the kernel will not
            # say (mincore would claim every page resident), so neither do we
            assert _as_nobody(lambda: _native.resident_bytes(fd, 0, size)) is None
    finally:
        os.close(fd)


def _as_nobody(fn):
    """fn() in a child process running as uid/gid 65534, its result sent back through a pipe."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            os.write(w, pickle.dumps(fn()))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_engine_errors_name_the_syscall():
    assert _native.probe("null") == 0
    with pytest.raises(ValueError):
        _native.probe("nope")
    with pytest.raises(ValueError, match="depth"):
        _native.Engine("aio", depth=0)


def test_a_signal_stops_the_run_promptly():
    """Ctrl-C must not wait for the plan: the loop looks for signals every 100 ms (GIL released,
    and the signal may land on another thread, so EINTR alone cannot be relied on)."""
    import signal

    class Stop(Exception):
        pass

    def handler(*_):
        raise Stop

    old = signal.signal(signal.SIGALRM, handler)
    eng = _native.Engine("null", depth=1, block_size=4096, delay_ns=10_000_000)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Stop):
            eng.run([-1], as_plan([(0, 0, 4096)] * 1000), histogram.empty())   # 10 s of work
        assert time.monotonic() - t0 < 0.2 + 0.5
        assert eng.run([-1], as_plan([(0, 0, 1)]), histogram.empty())["ios"] == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        eng.close()


def test_window_counts_depth_and_requests_alike():
    """Requests submitted during the ramp are neither counted nor sampled for depth, so the depth
    histogram stays one sample per counted request (give or take the one in flight at each edge)."""
    plan = as_plan([(0, 0, 4096)] * 200_000)     # more than either engine finishes: the deadline ends it
    for name in ("null", "psync"):
        fd = os.open(__file__, os.O_RDONLY)
        try:
            with _native.Engine(name, depth=1, block_size=4096, delay_ns=200_000 if name == "null" else 0) as eng:
                t = _native.monotonic_ns()
                # a wide window: a stalled VM must not leave it empty (what is checked is the count, not time)
                st = eng.run([fd], plan, histogram.empty(), deadline_ns=t + 400_000_000,
                             window_start_ns=t + 20_000_000, window_end_ns=t + 400_000_000)
        finally:
            os.close(fd)
        assert st["ios"] > 0
        assert abs(sum(st["depth"]) - st["ios"]) <= 1, (name, st["depth"], st["ios"])


ASYNC_NATIVE = [p for p in ENGINES if p.values[0] in ("null", "aio", "uring")]


@pytest.mark.parametrize("name,direct", ASYNC_NATIVE)
@pytest.mark.parametrize("batch,buckets", [
    (1, [1, 2, 4, 1]),   # fio's default: each request submitted alone, seeing depth 1, 2, ..., 8
    (3, [0, 3, 3, 2]),   # 3 at depth 3, 3 at 6, and the last 2 (no rows left) at 8
    (4, [0, 0, 4, 4]),
    (0, [0, 0, 0, 8]),   # every free slot in one call: all 8 see depth 8
    (99, [0, 0, 0, 8]),  # deeper than the queue is the same as 0 (fio caps iodepth_batch at iodepth)
])
def test_submit_batch_hands_requests_over_as_fio_iodepth_batch(tmp_path, name, direct, batch, buckets):
    """fio's iodepth_batch_submit: the first DEPTH requests of a run go to the kernel `batch` at a
    time, and each sees the depth its batch brought the queue to. Nothing is reaped while the
    queue fills, so the depth of each is exact (buckets 1, 2-3, 4-7, 8-15)."""
    paths = make_files(tmp_path, [DEPTH * BS])
    plan = whole_file_plan([DEPTH * BS])
    assert len(plan) == DEPTH
    extra = {"delay_ns": 1_000_000} if name == "null" else {}
    with Opened(paths, direct) as fds, engine(name, direct, submit_batch=batch, **extra) as eng:
        st = eng.run(fds, plan, histogram.empty())
    assert st["errors"] == 0 and st["ios"] == DEPTH
    assert list(st["depth"][:4]) == buckets and sum(st["depth"]) == DEPTH


@pytest.mark.parametrize("bad", [-1, 65537])  # 0..MAX_DEPTH (65536)
def test_submit_batch_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="submit_batch"):
        _native.Engine("null", depth=4, submit_batch=bad)


# --- the time series and the live counters (same contract for every engine) ----------------------

SW = _native.SERIES_WIDTH


@pytest.mark.parametrize("name,direct", ENGINES)
def test_series_and_live_add_up_to_the_stats(tmp_path, name, direct):
    """Over all rows the series columns are the run's bytes, ios and cached bytes, and its coarse
    latency columns are the fine histogram folded 8 to 1, exactly. Rows are completion times: the
    last non-empty row of a run is the one of t_end_ns (its last completion), none is before the row
    of t_start_ns (its first submit). Two runs accumulate (nothing is cleared); without a window the
    live counters equal the stats. A run may fit in one row (the null engine does): the runs are
    kept apart by a pause of two rows, so the second one's rows must come after the first one's."""
    paths = make_files(tmp_path, SIZES)
    plan = whole_file_plan(SIZES)
    cache_check = name != "null" and not direct      # buffered reads of fresh files: cached_bytes > 0
    bucket = 1_000_000                               # 1 ms rows
    series = np.zeros((100_000, SW), dtype=np.int64)
    live = np.zeros(3, dtype=np.int64)
    hist = histogram.empty()
    total = {"bytes": 0, "ios": 0, "cached_bytes": 0}
    spans = []
    with Opened(paths, direct) as fds, engine(name, direct, cache_check=cache_check) as eng:
        origin = _native.monotonic_ns()
        for _ in range(2):
            before = series.copy()
            st = eng.run(fds, plan, hist, series=series, series_origin_ns=origin, series_bucket_ns=bucket, live=live)
            time.sleep(2 * bucket / 1e9)
            assert st["series_clamped"] == 0
            for k in total:
                total[k] += st[k]
            added = series - before                   # this run's rows
            assert (added[:, 0].sum(), added[:, 1].sum(), added[:, 2].sum()) == (st["bytes"], st["ios"], st["cached_bytes"])
            rows = np.flatnonzero(added[:, histogram.SERIES_IOS])
            assert rows[0] >= (st["t_start_ns"] - origin) // bucket
            assert rows[-1] == (st["t_end_ns"] - origin) // bucket
            spans.append((rows[0], rows[-1]))
    assert spans[0][1] < spans[1][0], spans             # rows follow the clock, not the run
    assert total["ios"] == 2 * len(plan) and total["bytes"] == 2 * expected_bytes(name, plan, SIZES)
    if cache_check:
        assert total["cached_bytes"] > 0
    sums = series.sum(axis=0)
    assert (sums[0], sums[1], sums[2]) == (total["bytes"], total["ios"], total["cached_bytes"])
    assert int(sums[histogram.SERIES_LAT:].sum()) == total["ios"]
    assert np.array_equal(sums[histogram.SERIES_LAT:], hist.reshape(-1, 1 << _native.SERIES_SHIFT).sum(axis=1))
    assert live.tolist() == [total["bytes"], total["ios"], total["cached_bytes"]]


@pytest.mark.flaky(reruns=1)  # needs completions inside an 80 ms window: a VM stalled that long has none
@pytest.mark.parametrize("name,direct", [p for p in ENGINES if not p.values[1]])
def test_live_counts_the_ramp_and_the_series_only_the_window(tmp_path, name, direct):
    """With a window, live counts every completion (progress moves during the ramp), the series
    and stats only the counted ones. Every row of the plan is one request here (no short reads),
    so live's ios are the rows done and its bytes their lengths."""
    size = 4 << 20
    paths = make_files(tmp_path, [size])
    rows = 200_000
    plan = np.zeros(rows, dtype=PLAN_DTYPE)
    plan["file"], plan["offset"], plan["length"] = 0, (np.arange(rows) * ALIGN) % size, ALIGN
    kw = {"delay_ns": 200_000} if name == "null" else {}
    series = np.zeros((10, SW), dtype=np.int64)
    live = np.zeros(3, dtype=np.int64)
    with Opened(paths, direct) as fds, engine(name, direct, **kw) as eng:
        t = _native.monotonic_ns()
        st = eng.run(fds, plan, histogram.empty(), deadline_ns=t + 120_000_000, window_start_ns=t + 40_000_000,
                     window_end_ns=t + 120_000_000, series=series, series_origin_ns=t, series_bucket_ns=100_000_000,
                     live=live)
    assert st["errors"] == 0 and 0 < st["ios"] < st["done"]
    assert live.tolist()[:2] == [st["done"] * ALIGN, st["done"]]
    assert live[0] > st["bytes"] and live[1] > st["ios"]
    sums = series.sum(axis=0)
    assert (sums[0], sums[1], sums[2]) == (st["bytes"], st["ios"], st["cached_bytes"])
    assert int(sums[histogram.SERIES_LAT:].sum()) == st["ios"]
    assert st["series_clamped"] == 0 and series[2:].sum() == 0     # the run ended at 120 ms: rows 0 and 1


@pytest.mark.parametrize("name,direct", [p for p in ENGINES if not p.values[1]])
def test_series_rows_are_clamped_into_range(tmp_path, name, direct):
    """Completions before the origin go to row 0, those past the last row to the last row, counted
    in series_clamped: with 1 ns rows every completion is past a 3-row series."""
    paths = make_files(tmp_path, [1 << 20])
    plan = whole_file_plan([1 << 20])
    with Opened(paths, direct) as fds, engine(name, direct) as eng:
        late = np.zeros((3, SW), dtype=np.int64)
        st = eng.run(fds, plan, histogram.empty(), series=late, series_origin_ns=1, series_bucket_ns=1)
        assert st["series_clamped"] == st["ios"] == len(plan)
        assert late[:2].sum() == 0 and late[2, histogram.SERIES_IOS] == len(plan)
        early = np.zeros((3, SW), dtype=np.int64)
        st = eng.run(fds, plan, histogram.empty(), series=early,
                     series_origin_ns=_native.monotonic_ns() + 3600 * 10**9)
        assert st["series_clamped"] == 0
        assert early[1:].sum() == 0 and early[0, histogram.SERIES_IOS] == len(plan)
        st = eng.run(fds, plan, histogram.empty())
        assert st["series_clamped"] == 0


@pytest.mark.parametrize("name,direct", [p for p in ENGINES if p.values[0] in ("null", "asyncio") and not p.values[1]])
def test_bad_series_live_and_device_are_refused(name, direct):
    import mmap

    plan = as_plan([(0, 0, 1)])
    bad_series = [np.zeros((2, SW), dtype=np.float64), np.zeros((2, SW), dtype=np.int32),
                  np.zeros((2, SW), dtype=np.uint64), np.zeros((2, SW - 1), dtype=np.int64),
                  np.zeros((0, SW), dtype=np.int64), np.zeros(SW, dtype=np.int64),
                  np.zeros((2, 2 * SW), dtype=np.int64)[:, ::2], np.zeros((2, SW), dtype=">i8"),
                  [[0] * SW], np.zeros((2, SW), dtype=np.int64)]
    bad_series[-1].setflags(write=False)
    page = mmap.mmap(-1, 4096)
    bad_live = [np.zeros(2, dtype=np.int64), bytes(24), memoryview(page)[4:36], np.zeros(3, np.int64)]
    bad_live[-1].setflags(write=False)
    with engine(name, direct) as eng:
        for s in bad_series:
            with pytest.raises(ValueError, match=f"series must be .*SERIES_WIDTH={SW}"):
                eng.run([-1], plan, histogram.empty(), series=s)
        for lv in bad_live:
            with pytest.raises(ValueError, match="live must be a writable, 8-byte aligned buffer"):
                eng.run([-1], plan, histogram.empty(), live=lv)
        with pytest.raises(ValueError, match="series_bucket_ns > 0"):
            eng.run([-1], plan, histogram.empty(), series=np.zeros((1, SW), np.int64), series_bucket_ns=0)
        # a shared mapping, as the callers pass it, is fine (and nothing bad was half-used)
        live = np.frombuffer(page, dtype=np.int64, count=3, offset=64)
        st = eng.run([0], plan, histogram.empty(), live=live)
        assert live.tolist()[1] == st["ios"] == 1
        del live
    with pytest.raises(ValueError, match="device= is for the null engine only"):
        engine("asyncio" if name == "null" else "psync", False, device=np.zeros(1, np.uint64))
    if name == "null":
        for dev in (bytearray(4), bytes(8), memoryview(page)[4:12]):
            with pytest.raises(ValueError, match="device must be a writable, 8-byte aligned buffer"):
                _native.Engine("null", delay_ns=1, device=dev)


@pytest.mark.flaky(reruns=1)  # a median wake-up later than D/2 on a loaded VM
def test_series_percentiles_of_known_latencies():
    """Two null engines into one series row: 90 requests of 2 ms and 10 of 10 ms, so fio's p50 is
    a 2 ms one, p95 and p99 10 ms ones. The exact p-th latency lies in the fine bucket of the fine
    histogram's percentile (fine buckets hold their values exactly); the coarse percentile is
    within 7% of every value of that bucket (the coarse midpoint is within 6.25% of any value of
    its 8 fine buckets). And the latencies are the known ones: never below the delay, and the
    median late only by a wake-up (~0.1-0.3 ms; D/2 allowed). The tail, p95 and p99, can be late
    by a whole time slice of a loaded VM (10 ms seen): no upper bound there."""
    series = np.zeros((1, SW), dtype=np.int64)
    hist = histogram.empty()
    origin = _native.monotonic_ns()
    for delay, n in ((2_000_000, 90), (10_000_000, 10)):
        with _native.Engine("null", depth=4, block_size=4096, delay_ns=delay) as eng:
            st = eng.run([-1], as_plan([(0, 0, 4096)] * n), hist, series=series, series_origin_ns=origin,
                         series_bucket_ns=3600 * 10**9)
            assert st["ios"] == n and st["series_clamped"] == 0
    coarse = series[0, histogram.SERIES_LAT:]
    for q, delay in ((50, 2e6), (95, 10e6), (99, 10e6)):
        ns = histogram.series_percentile_us(coarse, q) * 1e3
        fine = histogram.index(int(histogram.percentiles(hist, [q])[q] * 1e3))
        lo, hi = histogram.LOWER[fine], histogram.UPPER[fine]
        assert abs(ns - lo) / lo < 0.07 and abs(ns - hi) / hi < 0.07, (q, ns, lo, hi)
        assert delay <= hi, (q, lo, hi)                # never early
        if q == 50:                                    # late only by wake-ups (the tail: by time slices)
            assert lo < delay * 1.5, (q, lo, hi)
    assert histogram.series_p99_us(series)[0] == histogram.series_percentile_us(coarse, 99)
