"""The Python histogram mirrors the C bucket function; percentiles follow fio's method."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iodl import _native, histogram


def test_constants_agree_with_c():
    assert (histogram.HIST_BITS, histogram.HIST_BUCKETS, histogram.DEPTH_BUCKETS) == (
        _native.HIST_BITS, _native.HIST_BUCKETS, _native.DEPTH_BUCKETS)
    assert (histogram.SERIES_SHIFT, histogram.SERIES_WIDTH) == (_native.SERIES_SHIFT, _native.SERIES_WIDTH)
    assert histogram.HIST_BUCKETS == 2048
    assert (histogram.SERIES_LAT_BUCKETS, histogram.SERIES_WIDTH) == (256, 3 + 256)
    assert histogram.LOWER[-1] + histogram.WIDTH[-1] == 2 ** 37


def _edges():
    vals = set(range(0, 300))
    for k in range(7, 40):
        for d in (-1, 0, 1):
            vals.add(2 ** k + d)
    return sorted(vals)


def test_c_and_python_agree_on_edges():
    vals = _edges()
    assert [_native.hist_index(v) for v in vals] == histogram.index(vals).tolist()


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=0, max_value=2 ** 40))
def test_c_and_python_agree(ns):
    idx = _native.hist_index(ns)
    assert idx == int(histogram.index(ns))
    if ns < 2 ** 37:
        assert histogram.LOWER[idx] <= ns <= histogram.UPPER[idx]
    else:
        assert idx == histogram.HIST_BUCKETS - 1


def test_buckets_tile_the_range_and_midpoints_are_within_one_percent():
    lo, hi = histogram.LOWER, histogram.UPPER
    assert lo[0] == 0 and np.all(lo[1:] == hi[:-1] + 1)          # contiguous, no gaps or overlap
    vals = np.concatenate([lo, hi])                              # the worst cases: bucket edges
    idx = histogram.index(vals)
    err = np.abs(histogram.MID[idx] - vals) / np.maximum(vals, 1)
    assert err.max() <= 1 / 128 + 1e-12                          # 0.78%
    assert np.all(err[vals < 128] == 0)                          # exact below 128 ns


def test_percentiles_of_a_known_distribution():
    rng = np.random.default_rng(1)
    ns = rng.lognormal(mean=np.log(200_000), sigma=0.8, size=200_000).astype(np.int64)
    h = histogram.empty()
    histogram.add(h, ns)
    assert h.sum() == len(ns)
    got = histogram.percentiles(h, [50, 90, 99, 99.9])
    for p, us in got.items():
        truth = np.percentile(ns, p, method="inverted_cdf") / 1e3
        assert abs(us - truth) / truth <= 1 / 128 + 1e-9, p
    assert histogram.max_us(h) >= ns.max() / 1e3
    assert histogram.max_us(h) <= ns.max() / 1e3 * (1 + 1 / 64)


def test_percentile_is_fios_first_bucket_reaching_p():
    h = histogram.empty()
    histogram.add(h, [10] * 50 + [1000] * 49 + [100_000])
    p = histogram.percentiles(h, [50, 51, 99, 100])
    assert p[50] == 0.010                      # 50 of 100 samples reach p50 at the first bucket
    assert p[51] == pytest.approx(1.0, rel=1 / 128)
    assert p[99] == pytest.approx(1.0, rel=1 / 128)
    assert p[100] == pytest.approx(100.0, rel=1 / 128)
    assert histogram.percentiles(histogram.empty(), [50]) == {50: 0.0}


def test_merge_is_addition():
    a, b = histogram.empty(), histogram.empty()
    histogram.add(a, np.arange(1000, 5000))
    histogram.add(b, np.arange(3000, 90000, 7))
    both = histogram.empty()
    histogram.add(both, np.concatenate([np.arange(1000, 5000), np.arange(3000, 90000, 7)]))
    assert np.array_equal(histogram.merge(a, b), both)
    s = histogram.summary_us(both)
    assert set(s) == {"p50", "p90", "p99", "p999", "max"}
    assert histogram.summary_us(both, max_ns=89_999)["max"] == 89.999


def test_engine_fills_the_bucket_of_each_latency():
    """One null request with a delay: its sample lands in the bucket of the exact max_ns it reports."""
    h = histogram.empty()
    plan = np.array([(0, 0, 1, 0)], dtype=[("file", "<u8"), ("offset", "<u8"), ("length", "<u8"), ("op", "<u8")])
    with _native.Engine("null", delay_ns=1_000_000) as eng:
        st = eng.run([-1], plan, h)
    assert h.sum() == 1 and h[_native.hist_index(st["max_ns"])] == 1
    assert st["max_ns"] >= 1_000_000


# --- time series: coarse latency buckets --------------------------------------------------------

def test_coarse_buckets_tile_the_range_and_midpoints_are_within_a_sixteenth():
    """A coarse bucket is 8 fine ones: contiguous ranges, and its midpoint within 1/16 (6.25%) of
    any value >= 128 ns in it (a power of two split in 64, then 8 of those merged)."""
    lo, width = histogram.COARSE_LOWER, histogram.COARSE_WIDTH
    assert len(lo) == histogram.SERIES_LAT_BUCKETS and lo[0] == 0
    assert np.all(lo[1:] == lo[:-1] + width[:-1])
    vals = np.concatenate([histogram.LOWER, histogram.UPPER])
    c = histogram.coarse_index(vals)
    assert np.all(c == histogram.index(vals) // 8)
    assert np.all((lo[c] <= vals) & (vals < lo[c] + width[c]))
    big = vals >= 128
    err = np.abs(histogram.COARSE_MID[c] - vals) / vals.clip(1)
    assert err[big].max() <= 1 / 16 + 1e-12


def test_c_and_python_agree_on_coarse_edges():
    vals = _edges()
    assert [_native.hist_index(v) >> _native.SERIES_SHIFT for v in vals] == histogram.coarse_index(vals).tolist()


@pytest.mark.parametrize("sigma", [0.3, 0.8, 1.5])
def test_series_percentiles_of_known_values_within_7_percent(sigma):
    """Known latencies filed as the engine files them (_native.account): every coarse
    percentile is within 7% of the exact one (fio's method, numpy's inverted_cdf)."""
    rng = np.random.default_rng(3)
    ns = rng.lognormal(mean=np.log(300_000), sigma=sigma, size=100_000).astype(np.int64)
    series = histogram.series_empty(1)
    assert _file(series, np.zeros(len(ns)), ns, ns // 4, ns) == 0
    row = series[0]
    assert (row[0], row[1], row[2]) == (ns.sum(), len(ns), (ns // 4).sum())
    for q in (1, 50, 90, 99, 99.9, 100):
        truth = np.percentile(ns, q, method="inverted_cdf") / 1e3
        got = histogram.series_percentile_us(row[histogram.SERIES_LAT:], q)
        assert abs(got - truth) / truth < 0.07, (q, got, truth)
        assert abs(got - truth) / truth <= 1 / 16 + 1e-9
    assert histogram.series_p99_us(series)[0] == histogram.series_percentile_us(row[histogram.SERIES_LAT:], 99)


def _file(series, end_ns, nbytes, cached, lat_ns, origin_ns=0, bucket_ns=1_000_000_000) -> int:
    """Completions filed into series by the engine's own accounting; how many fell past the last row."""
    st = _native.account(np.asarray(end_ns, dtype=np.int64), np.asarray(nbytes, dtype=np.int64),
                         np.asarray(cached, dtype=np.int64), np.asarray(lat_ns, dtype=np.int64), histogram.empty(),
                         series=series, series_origin_ns=origin_ns, series_bucket_ns=bucket_ns)
    return st["series_clamped"]


def test_series_files_rows_by_completion_time():
    """Row = (t - origin) // bucket, before the origin row 0, past the end the last row (counted)."""
    series = histogram.series_empty(3)
    t = np.array([5, 99, 100, 250, 299, 300, 10_000])          # origin 100, rows of 100
    lat = np.array([1_000, 2_000, 1_000_000, 1_000_000, 5_000_000, 7, 8])
    clamped = _file(series, t, np.arange(1, 8), np.zeros(7), lat, origin_ns=100, bucket_ns=100)
    assert clamped == 1                                        # 300 is in row 2; 10_000 is past it
    assert series[:, histogram.SERIES_IOS].tolist() == [3, 2, 2]
    assert series[:, histogram.SERIES_BYTES].tolist() == [1 + 2 + 3, 4 + 5, 6 + 7]
    assert series[:, histogram.SERIES_LAT:].sum(axis=1).tolist() == [3, 2, 2]
    assert series[1, histogram.SERIES_LAT + histogram.coarse_index(5_000_000)] == 1


def test_series_p99_per_row_and_empty_rows():
    """One p99 per row; a row without ios is 0.0; each equals series_percentile_us of the row."""
    rng = np.random.default_rng(5)
    series = histogram.series_empty(4)
    for row, scale in ((0, 100_000), (2, 2_000_000), (3, 50_000_000)):
        ns = rng.exponential(scale, size=20_000).astype(np.int64) + 1
        _file(series, np.full(len(ns), row), ns, np.zeros(len(ns)), ns, bucket_ns=1)
        truth = np.percentile(ns, 99, method="inverted_cdf") / 1e3
        assert abs(histogram.series_p99_us(series)[row] - truth) / truth < 0.07
    p99 = histogram.series_p99_us(series)
    assert p99.shape == (4,) and p99[1] == 0.0
    for i in range(4):
        assert p99[i] == histogram.series_percentile_us(series[i, histogram.SERIES_LAT:], 99)
    assert histogram.series_percentile_us(np.zeros(histogram.SERIES_LAT_BUCKETS), 99) == 0.0
    assert histogram.series_p99_us(series[:0]).shape == (0,)


def test_no_percentile_is_above_the_observed_max():
    # 1000 requests all at 1,000,500 ns: their bucket's midpoint lies above that exact maximum
    hist = histogram.empty()
    hist[histogram.index(np.array([1_000_500]))[0]] += 1000
    mid_us = float(histogram.MID[histogram.index(np.array([1_000_500]))[0]]) / 1e3
    assert mid_us > 1000.5          # the case the clamp exists for
    s = histogram.summary_us(hist, max_ns=1_000_500)
    assert s["max"] == 1000.5
    assert all(s[k] == 1000.5 for k in ("p50", "p90", "p99", "p999")), s
