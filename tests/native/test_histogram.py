"""The Python histogram mirrors the C bucket function; percentiles follow fio's method."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iodl import _native, histogram


def test_constants_agree_with_c():
    assert (histogram.HIST_BITS, histogram.HIST_BUCKETS, histogram.DEPTH_BUCKETS) == (
        _native.HIST_BITS, _native.HIST_BUCKETS, _native.DEPTH_BUCKETS)
    assert histogram.HIST_BUCKETS == 2048
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
    plan = np.array([(0, 0, 1)], dtype=[("file", "<u8"), ("offset", "<u8"), ("length", "<u8")])
    with _native.Engine("null", delay_ns=1_000_000) as eng:
        st = eng.run([-1], plan, h)
    assert h.sum() == 1 and h[_native.hist_index(st["max_ns"])] == 1
    assert st["max_ns"] >= 1_000_000
