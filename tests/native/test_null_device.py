"""The null engine's emulated shared device: requests of every engine sharing one "busy until"
word are served one at a time, each for delay_ns. Ground truth is the queue itself: a device
serving one request per D is busy for (requests) x D, and a request submitted behind k others
in flight completes (k + 1) x D later.

Two processes share the word through an anonymous MAP_SHARED page mapped before fork (as MPI
ranks of a node share an mmap of a /dev/shm file); two threads share a numpy array.
"""
from __future__ import annotations

import json
import mmap
import os
import threading
import time
import traceback

import numpy as np
import pytest

from iodl import _native, histogram
from iodl.engine import as_plan

D = 2_000_000        # ns each request occupies the device
N = 150              # requests per engine
DEPTH = 4
GO = 8               # byte offset of the common start time in the shared page
LIVE = 64            # byte offset of the first child's live counters (3 int64 each, 32 bytes apart)


def run_null(device, n=N, live=None, depth=DEPTH) -> dict:
    """n requests at `depth` through a null engine on `device`; the stats and latency percentiles (ns)."""
    hist = histogram.empty()
    with _native.Engine("null", depth=depth, block_size=4096, delay_ns=D, device=device) as eng:
        st = eng.run([-1], as_plan([(0, 0, 4096)] * n), hist, live=live)
    return {"t_start": st["t_start_ns"], "t_end": st["t_end_ns"], "ios": st["ios"],
            "p50": histogram.percentiles(hist, [50])[50] * 1e3, "sum": float((hist * histogram.MID).sum()),
            "min": int(histogram.LOWER[np.flatnonzero(hist)[0]]), "max": st["max_ns"]}


def sleep_until(t_ns: int) -> None:
    while (left := t_ns - _native.monotonic_ns()) > 0:
        time.sleep(left / 1e9)


def in_children(k: int, body) -> list:
    """body(i) in k forked processes at once; their JSON-able return values, in order."""
    kids = []
    for i in range(k):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                with os.fdopen(w, "wb") as f:
                    f.write(json.dumps(body(i)).encode())
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(w)
        kids.append((pid, r))
    out = []
    for pid, r in kids:
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"child {pid} failed (traceback above)"
        out.append(json.loads(data))
    return out


def assert_near(got: float, want: float, tol: float, what: str) -> None:
    assert abs(got - want) / want < tol, f"{what}: {got / 1e6:.2f} ms, the queue says {want / 1e6:.2f} ms"


# This VM wakes a sleeper late by > 1.7 ms one time in 10 and by up to ~10 ms (measured, idle box).
# An engine that wakes later than the queue ahead of it (here 7 x D = 14 ms shared) leaves the
# device idle, which only the upper bounds can notice (the lower bounds are exact); under the load
# of other suites that happens in ~1 attempt in 10, so those tests get two reruns. A device that is
# not shared, or not serial, fails every attempt.
@pytest.mark.flaky(reruns=2)
def test_two_processes_share_one_device():
    """Each of 2 processes keeps DEPTH requests in flight on a device serving one per D.

    Whole run: the device never idles, so 2N requests take 2N x D (within 10%: the start skew of
    two processes and the last wake-up), where one process alone takes N x D and without a device
    N/DEPTH x D. Latency: in steady state every request is submitted behind the 2 x DEPTH - 1
    others in flight, so it takes 2 x DEPTH x D: each process's p50 is that (within 10%). A process
    that wakes late (by 20 ms at times on this VM) leaves the device to the other for a while,
    moving single latencies up and down, but not their mean: 2 x DEPTH requests are in flight and
    one is served per D (Little's law), less the ramp and the drain, where fewer are in flight
    (~2% of 2N requests here), plus wake-up lateness; within 10% again. No request beats D.
    The live counters (one set per process, in the shared page) are read by the parent mid-run."""
    page = mmap.mmap(-1, 4096)          # anonymous, MAP_SHARED: the children see one page
    words = np.frombuffer(page, dtype=np.uint64, count=2)
    go = _native.monotonic_ns() + 200_000_000
    words[1] = go

    def child(i):
        device = np.frombuffer(page, dtype=np.uint64, count=1)
        live = np.frombuffer(page, dtype=np.int64, count=3, offset=LIVE + 32 * i)
        sleep_until(int(np.frombuffer(page, dtype=np.uint64, count=1, offset=GO)[0]))
        return run_null(device, live=live)

    lives = [np.frombuffer(page, dtype=np.int64, count=3, offset=LIVE + 32 * i) for i in range(2)]
    mid = {}

    def watch():        # another process's counters, read while it runs
        sleep_until(go + N * D)
        mid["ios"] = [int(lv[1]) for lv in lives]

    watcher = threading.Thread(target=watch)
    watcher.start()
    res = in_children(2, child)
    watcher.join()

    elapsed = max(r["t_end"] for r in res) - min(r["t_start"] for r in res)
    assert elapsed >= 2 * N * D                 # the device serves one request per D, never faster
    assert_near(elapsed, 2 * N * D, 0.10, "2 processes, whole run")
    for r in res:
        assert r["ios"] == N
        assert r["min"] >= histogram.LOWER[histogram.index(D)]
        assert_near(r["p50"], 2 * DEPTH * D, 0.10, "2 processes, p50")
    assert_near(sum(r["sum"] for r in res) / (2 * N), 2 * DEPTH * D, 0.10, "2 processes, mean latency")
    assert all(0 < x < N for x in mid["ios"]), mid
    assert [lv.tolist() for lv in lives] == [[N * 4096, N, 0]] * 2
    # the word: 2N reservations of D, none before the first submit, each reaped after its end
    assert min(r["t_start"] for r in res) + 2 * N * D <= int(words[0]) <= max(r["t_end"] for r in res)

    words = lives = None   # the views of the shared page go before it does (not `del`: watch() reads lives)


@pytest.mark.flaky(reruns=2)
def test_one_engine_alone_on_the_device():
    """Unshared, the device serves the same N requests in N x D (half the shared run) at any depth,
    each behind the depth - 1 others of its engine: depth x D. At DEPTH 4 alone only 3 x D = 6 ms
    are queued ahead, which this VM's late wake-ups often exceed (idling the device), so the whole
    run is timed at depth 16 (30 ms ahead) and DEPTH's latency by its median. Without a device the
    delays are independent, DEPTH at a time: ceil(N / DEPTH) x D plus a wake-up per batch (the
    queue of a device hides those), so there only the bounds are held."""
    deep = run_null(np.zeros(1, dtype=np.uint64), depth=16)
    assert deep["t_end"] - deep["t_start"] >= N * D
    assert_near(deep["t_end"] - deep["t_start"], N * D, 0.10, "1 process, whole run")
    assert_near(deep["p50"], 16 * D, 0.10, "1 process at depth 16, p50")
    alone = run_null(np.zeros(1, dtype=np.uint64))
    assert alone["t_end"] - alone["t_start"] >= N * D
    assert_near(alone["p50"], DEPTH * D, 0.10, "1 process, p50")
    free = run_null(None)
    assert -(-N // DEPTH) * D <= free["t_end"] - free["t_start"] < N * D / 2
    assert free["min"] >= histogram.LOWER[histogram.index(D)]


@pytest.mark.flaky(reruns=2)
def test_two_threads_share_one_device():
    """Two engines in two threads of one process (the GIL is released while they run): the same
    queue as two processes, 2N x D in all, 2 x DEPTH x D per request."""
    device = np.zeros(1, dtype=np.uint64)
    barrier = threading.Barrier(2)
    res = [None, None]

    def worker(i):
        barrier.wait()
        res[i] = run_null(device)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = max(r["t_end"] for r in res) - min(r["t_start"] for r in res)
    assert elapsed >= 2 * N * D
    assert_near(elapsed, 2 * N * D, 0.10, "2 threads, whole run")
    for r in res:
        assert r["ios"] == N
        assert_near(r["p50"], 2 * DEPTH * D, 0.10, "2 threads, p50")
    assert_near(sum(r["sum"] for r in res) / (2 * N), 2 * DEPTH * D, 0.10, "2 threads, mean latency")


def test_a_busy_device_delays_even_a_zero_delay_engine():
    """Sharing is by the word, not by the delay: an engine with delay 0 on a device another engine
    has reserved 50 ms ahead waits for it (its requests queue behind), and one without it does not."""
    device = np.zeros(1, dtype=np.uint64)
    device[0] = _native.monotonic_ns() + 50_000_000
    plan = as_plan([(0, 0, 1)] * 3)
    with _native.Engine("null", depth=2, block_size=1, device=device) as eng:
        st = eng.run([-1], plan, histogram.empty())
    assert st["ios"] == 3 and st["t_end_ns"] >= int(device[0]) and st["max_ns"] >= 40_000_000
    with _native.Engine("null", depth=2, block_size=1) as eng:
        st = eng.run([-1], plan, histogram.empty())
    assert st["max_ns"] < 40_000_000


def test_the_engine_holds_the_device_until_closed():
    """The device memory must outlive the runs: the engine holds the buffer, so an mmap cannot be
    closed under it (BufferError) until the engine is."""
    page = mmap.mmap(-1, 4096)
    eng = _native.Engine("null", delay_ns=1000, device=page)
    with pytest.raises(BufferError):
        page.close()
    assert eng.run([-1], as_plan([(0, 0, 1)]), histogram.empty())["ios"] == 1
    assert int(np.frombuffer(page, dtype=np.uint64, count=1)[0]) > 0      # it reserved there
    eng.close()
    page.close()
