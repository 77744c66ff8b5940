"""fio's split of a request's latency, in the engine: slat = handed over -> the submit call returned,
clat = returned -> reaped, lat = both (Engine.run's `hist`). Ground truth: per request lat is slat
+ clat exactly, so the histograms' sums must add up within the bucket error; the null engine's
clat is its known delay; a buffered AIO read is done inside io_submit (a kernel fact), so its
time is slat, not clat.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from iodl import _native, histogram
from iodl.engine import as_plan, open_for_read

BUCKET_ERR = 1 / 128      # a bucket's midpoint is within 1/128 of any value in it (core.h)
_MARKS = {"aio": [pytest.mark.aio], "uring": [pytest.mark.uring]}
ENGINES = [pytest.param(name, direct, id=f"{name}-{'direct' if direct else 'buffered'}",
                        marks=_MARKS.get(name, []) + ([pytest.mark.odirect] if direct else []))
           for name in _native.engines() if name != "null" for direct in (False, True)]


def hists():
    return histogram.empty(), histogram.empty(), histogram.empty()


def total_ns(h: np.ndarray) -> float:
    return float((h * histogram.MID).sum())


def data_file(directory, size=8 << 20) -> str:
    path = os.path.join(directory, "slat-clat.dat")
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    return path


@pytest.mark.parametrize("batch", [1, 0])
@pytest.mark.parametrize("name,direct", ENGINES)
def test_lat_is_slat_plus_clat(tmp_path, name, direct, batch):
    """Every counted completion is in all three (psync: none in slat, as fio), and the sums add up:
    |sum(lat) - sum(slat) - sum(clat)| <= (sum(lat) + sum(slat) + sum(clat)) / 128, from the
    midpoints alone (exact per request, so no timing enters)."""
    bs, n = 16 << 10, 512
    path = data_file(str(tmp_path))
    rng = np.random.default_rng(7)
    plan = as_plan([(0, int(o) * bs, bs) for o in rng.integers(0, (8 << 20) // bs, n)])
    lat, clat, slat = hists()
    fd = open_for_read(path, direct)
    try:
        with _native.Engine(name, depth=8, block_size=bs, direct=direct, submit_batch=batch) as eng:
            st = eng.run([fd], plan, lat, clat_hist=clat, slat_hist=slat)
    finally:
        os.close(fd)
    assert st["errors"] == 0 and st["ios"] == n
    assert lat.sum() == clat.sum() == n
    if name == "psync":
        # fio's sync engines: clat is the whole pread (it is lat), slat is not reported
        assert slat.sum() == 0 and np.array_equal(clat, lat)
        return
    assert slat.sum() == n
    gap = abs(total_ns(lat) - total_ns(slat) - total_ns(clat))
    assert gap <= BUCKET_ERR * (total_ns(lat) + total_ns(slat) + total_ns(clat)), (gap, total_ns(lat))
    # percentile by percentile, lat >= clat and lat >= slat (lat_i >= clat_i for every request)
    for p in (50, 90, 99):
        got = {k: histogram.percentiles(h, [p])[p] for k, h in (("lat", lat), ("clat", clat), ("slat", slat))}
        assert got["lat"] >= got["clat"] and got["lat"] >= got["slat"], (p, got)


def test_clat_and_slat_are_only_filled_when_asked_and_checked():
    plan = as_plan([(0, 0, 4096)] * 10)
    lat, clat, slat = hists()
    with _native.Engine("null", depth=2, block_size=4096) as eng:
        eng.run([-1], plan, lat)                         # neither: the lat histogram alone, as iodl read runs it
        assert lat.sum() == 10 and clat.sum() == slat.sum() == 0
        eng.run([-1], plan, lat, clat_hist=clat)         # one without the other
        assert lat.sum() == 20 and clat.sum() == 10 and slat.sum() == 0
        for bad in (np.zeros(10, np.int64), np.zeros(histogram.HIST_BUCKETS, np.float64), [0] * histogram.HIST_BUCKETS):
            with pytest.raises((TypeError, ValueError)):
                eng.run([-1], plan, lat, slat_hist=bad)
        with pytest.raises(TypeError, match="clat_hist must be"):
            eng.run([-1], plan, lat, clat_hist=np.zeros(10, np.int64))


@pytest.mark.flaky(reruns=1)  # the wake-up slack is a quiet box's; a late sleeper on a loaded VM is not a bug
@pytest.mark.parametrize("batch", [1, 0])
def test_null_clat_is_the_delay(batch):
    """null completes a request D after it was handed over, and is "issued" when its submit returns:
    clat = D - slat + the wake-up. clat p50 must be D within the bucket error (0.78%) plus 5% of D
    of wake-up slack (clock_nanosleep on this VM wakes ~50-120 us late with 1 ns timer slack,
    ~1-2.5% of 5 ms); slat is a loop over the batch and one clock read: p50 < 5 us. And a bound
    no timing enters: every clat >= D - that request's slat, so the smallest clat bucket's upper
    end plus the largest slat bucket's upper end reach D."""
    delay, n = 5_000_000, 40
    lat, clat, slat = hists()
    with _native.Engine("null", depth=4, block_size=4096, delay_ns=delay, submit_batch=batch) as eng:
        st = eng.run([-1], as_plan([(0, 0, 4096)] * n), lat, clat_hist=clat, slat_hist=slat)
    assert st["ios"] == clat.sum() == slat.sum() == n
    p_clat = histogram.percentiles(clat, [50])[50] * 1e3
    p_slat = histogram.percentiles(slat, [50, 99])
    assert delay * (1 - BUCKET_ERR) <= p_clat <= delay * (1 + BUCKET_ERR + 0.05), p_clat
    assert p_slat[50] < 5, p_slat   # us
    lowest_clat = histogram.UPPER[np.flatnonzero(clat)[0]]
    highest_slat = histogram.UPPER[np.flatnonzero(slat)[-1]]
    assert lowest_clat + highest_slat >= delay


@pytest.mark.aio
@pytest.mark.flaky(reruns=1)  # a preempted reaper can make one clat long; the medians hold on a quiet box
def test_buffered_aio_reads_inside_io_submit(tmp_path):
    """Buffered AIO has no asynchronous read path: io_submit copies the data before it returns
    (fio's clat of ~0 for buffered libaio). So the 1 MiB copy from the page cache is slat, and
    clat is the reap alone (the completion is already in the ring): clat p50 < slat p50 / 4."""
    path = data_file("/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path), 32 << 20)
    bs = 1 << 20
    lat, clat, slat = hists()
    fd = open_for_read(path, False)
    try:
        with _native.Engine("aio", depth=1, block_size=bs) as eng:
            st = eng.run([fd], as_plan([(0, i * bs, bs) for i in range(32)] * 4), lat, clat_hist=clat, slat_hist=slat)
    finally:
        os.close(fd)
        os.unlink(path)
    assert st["errors"] == 0 and st["ios"] == 128
    p = {k: histogram.percentiles(h, [50])[50] for k, h in (("lat", lat), ("clat", clat), ("slat", slat))}
    assert p["clat"] < p["slat"] / 4, p
    assert p["lat"] >= p["slat"] >= p["clat"], p
