"""One definition of what a completion counts for (native/account.c), used by the C loop per
completion and by _native.account for the asyncio engine's recorded completions.

First _native.account against values computed by hand (known times, a window, known buckets);
then the same plan through the asyncio engine and psync, with a window that cuts the run in the
middle and a series: both must obey the definition alike.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from iodl import _native, histogram
from iodl.asyncio_engine import AsyncioEngine
from iodl.engine import open_for_read
from iodl.plan import PLAN_DTYPE
from tests.helpers import write_random_files

U64 = np.uint64

# five completions around a window [1000, 5000): (reaped at, bytes, cached, latency, unmeasured)
DONE = np.array([
    (500, 10, 1, 50, 0),        # before the window: live only
    (1000, 20, 2, 200, 0),      # the window's first ns: counted, series row 1
    (2500, 30, 0, 3000, 1),     # counted, its hits not measurable: row 2
    (4999, 40, 4, 70, 0),       # counted, row 4 -> past the 3 rows: filed in row 2, clamped
    (5000, 50, 5, 9, 0),        # the window's end is exclusive: live only
], dtype=U64).T.copy()
W0, W1 = 1000, 5000


def account(**kw):
    hist, clat, slat = histogram.empty(), histogram.empty(), histogram.empty()
    series = histogram.series_empty(3)
    live = np.zeros(3, np.int64)
    args = dict(window_start_ns=W0, window_end_ns=W1, series=series, series_origin_ns=0, series_bucket_ns=1000,
                live=live, clat_hist=clat, slat_hist=slat, unmeasured=DONE[4], t_start_ns=400, t_end_ns=5000)
    args.update(kw)
    st = _native.account(DONE[0], DONE[1], DONE[2], DONE[3], hist, **args)
    return st, hist, clat, slat, series, live


def test_account_by_hand():
    # the buckets, by hand from core.h: < 128 ns exact; 200 = 2^7 + 72: group 2, sub-bucket 200 >> 1 & 63 = 36;
    # 3000 = 2^11 + 952: group 6, sub-bucket 3000 >> 5 & 63 = 29
    assert [_native.hist_index(v) for v in (70, 200, 3000)] == [70, 2 * 64 + 36, 6 * 64 + 29]
    submit = np.array([400, 900, 1000, 2000, 4999, 5000], U64)
    inflight = np.array([1, 2, 3, 8, 64, 4], U64)
    st, hist, clat, slat, series, live = account(submit_ns=submit, inflight=inflight)

    assert st == {"ios": 3, "bytes": 20 + 30 + 40, "cached_bytes": 2 + 0 + 4, "cache_unmeasured_bytes": 30,
                  "t_start_ns": W0,             # first submit 400, clipped to the window
                  "t_end_ns": W1,               # a completion at 5000 >= the window's end
                  "max_ns": 3000, "depth": [0, 1, 0, 1, 0, 0, 1],    # submits at 1000 (3), 2000 (8), 4999 (64)
                  "series_clamped": 1}
    expect = histogram.empty()
    expect[[164, 413, 70]] = 1
    assert np.array_equal(hist, expect)
    # no clat_ns: a sync read, clat is all of it; no slat_ns: no slat samples (fio's sync engines)
    assert np.array_equal(clat, hist) and slat.sum() == 0
    lat_col = histogram.SERIES_LAT
    want = histogram.series_empty(3)
    want[1, :3] = (20, 1, 2)
    want[1, lat_col + (164 >> 3)] = 1
    want[2, :3] = (30 + 40, 2, 0 + 4)
    want[2, lat_col + (413 >> 3)] = want[2, lat_col + (70 >> 3)] = 1
    assert np.array_equal(series, want)
    # the series adds up to the stats, and live moved at every completion, window or not
    assert series[:, 0].sum() == st["bytes"] and series[:, 1].sum() == st["ios"]
    assert series[:, lat_col:].sum() == st["ios"]
    assert live.tolist() == [150, 5, 12]


def test_account_split_end_and_empty():
    # clat/slat given: both filed for the counted ones, as the async engines' split
    clat_ns, slat_ns = DONE[3] // 4, DONE[3] - DONE[3] // 4
    st, hist, clat, slat, _, _ = account(clat_ns=clat_ns, slat_ns=slat_ns, t_end_ns=4999)
    assert st["t_end_ns"] == 4999                # the last counted completion: nothing was in flight at 5000
    assert st["depth"] == [0] * histogram.DEPTH_BUCKETS     # no submits given: no depth samples
    counted = slice(1, 4)
    want_c, want_s = histogram.empty(), histogram.empty()
    histogram.add(want_c, clat_ns[counted])
    histogram.add(want_s, slat_ns[counted])
    assert np.array_equal(clat, want_c) and np.array_equal(slat, want_s)
    # a window that misses every completion: nothing counted, ends 0 (Engine.run's rule)
    st, hist, *_ = account(window_start_ns=10_000, window_end_ns=20_000)
    assert (st["ios"], st["bytes"], st["t_start_ns"], st["t_end_ns"], int(hist.sum())) == (0, 0, 0, 0, 0)
    # no window: everything counts and the ends are the run's own; nothing issued: the call time
    st, hist, *_ = account(window_start_ns=0, window_end_ns=0, series=None, t_start_ns=400, t_end_ns=5000)
    assert (st["ios"], st["bytes"], st["t_start_ns"], st["t_end_ns"], int(hist.sum())) == (5, 150, 400, 5000, 5)
    before = _native.monotonic_ns()
    empty = np.empty(0, U64)
    st = _native.account(empty, empty, None, empty, histogram.empty())
    assert st["ios"] == 0 and before <= st["t_start_ns"] == st["t_end_ns"] <= _native.monotonic_ns()


def test_account_refuses_bad_columns():
    col = np.zeros(3, U64)
    with pytest.raises(ValueError, match="nbytes has 2 entries, not 3"):
        _native.account(col, col[:2], None, col, histogram.empty())
    with pytest.raises(ValueError, match="lat_ns must be a 1-d contiguous"):
        _native.account(col, col, None, col.astype(np.float64), histogram.empty())
    with pytest.raises(ValueError, match="lat_ns must be a 1-d contiguous"):
        _native.account(col, col, None, np.zeros(6, U64)[::2], histogram.empty())
    with pytest.raises(ValueError, match="go together"):
        _native.account(col, col, None, col, histogram.empty(), submit_ns=col)
    with pytest.raises(TypeError, match="hist must be"):
        _native.account(col, col, None, col, np.zeros(10, np.int64))
    with pytest.raises(ValueError, match="series must be"):
        _native.account(col, col, None, col, histogram.empty(), series=np.zeros((2, 3), np.int64))


def _run(engine, fd, plan, w0, w1, deadline, bs):
    hist, clat, slat = histogram.empty(), histogram.empty(), histogram.empty()
    rows = 4
    series = histogram.series_empty(rows)
    live = np.zeros(3, np.int64)
    st = engine.run([fd], plan, hist, deadline_ns=deadline, window_start_ns=w0, window_end_ns=w1, series=series,
                    series_origin_ns=w0, series_bucket_ns=(w1 - w0) // rows, live=live, clat_hist=clat,
                    slat_hist=slat)
    return st, hist, clat, slat, series, live


@pytest.mark.asyncio
@pytest.mark.flaky(reruns=1)  # needs completions on both sides of the window: a busy VM may start the loop late
def test_asyncio_and_psync_count_one_plan_alike(tmp_path):
    bs = 64 << 10
    size = 8 << 20
    path = write_random_files(str(tmp_path), 1, size, prefix="acct")[0]
    n = 200_000
    plan = np.zeros(n, dtype=PLAN_DTYPE)
    plan["file"], plan["offset"], plan["length"] = 0, (np.arange(n) * bs) % size, bs
    fd = open_for_read(path, False)
    results = {}
    try:
        os.pread(fd, size, 0)                   # cached: both read the same cache state
        for name, make in (("psync", lambda: _native.Engine("psync", block_size=bs, cache_check=True)),
                           ("asyncio", lambda: AsyncioEngine(depth=2, block_size=bs, cache_check=True))):
            with make() as eng:
                now = _native.monotonic_ns()
                w0, w1 = now + 100_000_000, now + 300_000_000
                results[name] = (eng.depth, w0, w1) + _run(eng, fd, plan, w0, w1, w1 + 100_000_000, bs)
    finally:
        os.close(fd)
    for name, (depth, w0, w1, st, hist, clat, slat, series, live) in results.items():
        where = f"{name}: {st}"
        assert st["errors"] == 0 and st["short_rows"] == 0, where
        # the window cut the run: completions before and after it were read but not counted
        assert 0 < st["ios"] < st["done"] < n, where
        assert live[1] == st["done"] and live[0] == bs * st["done"], where       # live: every completion
        # requests were in flight at both edges: the ends are the window's
        assert (st["t_start_ns"], st["t_end_ns"]) == (w0, w1), where
        assert st["bytes"] == bs * st["ios"] and 0 < st["max_ns"], where
        # one sample per counted completion in each histogram; sync reads: clat is lat, no slat
        assert int(hist.sum()) == st["ios"] and np.array_equal(clat, hist) and slat.sum() == 0, where
        assert histogram.UPPER[np.flatnonzero(hist)[-1]] >= st["max_ns"] >= histogram.LOWER[np.flatnonzero(hist)[-1]]
        # the series adds up to the stats, and every row of the window saw completions
        assert series[:, histogram.SERIES_BYTES].sum() == st["bytes"], where
        assert series[:, histogram.SERIES_IOS].sum() == st["ios"], where
        assert series[:, histogram.SERIES_CACHED].sum() == st["cached_bytes"], where
        assert series[:, histogram.SERIES_LAT:].sum() == st["ios"] and st["series_clamped"] == 0, where
        assert (series[:, histogram.SERIES_IOS] > 0).all(), where
        # depth is sampled at submits inside the window: they differ from the counted completions
        # only by what was in flight at the window's edges
        assert abs(sum(st["depth"]) - st["ios"]) <= depth, where
        assert sum(st["depth"][depth.bit_length():]) == 0, where     # never more than depth in flight
        # every byte was in the cache: each counted one is a hit, or (a filesystem that does not
        # account reads to the reader) not measurable, for both alike
        if st["cache_unmeasured_bytes"]:
            assert st["cache_unmeasured_bytes"] == st["bytes"] and st["cached_bytes"] == 0, where
        else:
            assert st["cached_bytes"] == st["bytes"], where
