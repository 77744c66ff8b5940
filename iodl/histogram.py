"""Latency histograms: the Python mirror of the C bucket function (native/core.h, fio's plat_val_to_idx).

Values are nanoseconds. Below 128 ns every value has its own bucket; above, each power of two is
split into 64 linear buckets, so a bucket's midpoint is within 1/128 (0.78%) of any value in it.
Merging runs or ranks = adding the arrays. Percentiles follow fio (stat.c calc_clat_percentiles):
the first bucket whose cumulative count reaches p/100 * N, reported as that bucket's midpoint.

Time series (Engine.run(series=...)): rows of SERIES_WIDTH int64, one per series_bucket_ns of
completion time: bytes, ios, cached bytes, then SERIES_LAT_BUCKETS coarse latency buckets, coarse
bucket c = fine buckets [c << SERIES_SHIFT, (c + 1) << SERIES_SHIFT). A coarse bucket's midpoint
is within 1/16 (6.25%) of any value >= 128 ns in it: enough for a per-second p99.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

HIST_BITS = 6
HIST_GROUPS = 32
HIST_BUCKETS = HIST_GROUPS << HIST_BITS      # 2048, reaching 2**37 ns (~137 s)
DEPTH_BUCKETS = 7
DEPTH_LABELS = ("1", "2", "4", "8", "16", "32", ">=64")   # fio's "IO depths" bins
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0, 99.9)

SERIES_SHIFT = 3
SERIES_LAT_BUCKETS = HIST_BUCKETS >> SERIES_SHIFT           # 256
SERIES_BYTES, SERIES_IOS, SERIES_CACHED, SERIES_LAT = 0, 1, 2, 3   # columns; SERIES_LAT is the first latency one
SERIES_WIDTH = SERIES_LAT + SERIES_LAT_BUCKETS               # 259

_VAL = 1 << HIST_BITS


def _bounds() -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(HIST_BUCKETS, dtype=np.int64)
    exact = idx < 2 * _VAL
    error_bits = np.where(exact, 0, (idx >> HIST_BITS) - 1)
    base = np.where(exact, idx, np.left_shift(1, error_bits + HIST_BITS))
    lower = np.where(exact, idx, base + np.left_shift(idx % _VAL, error_bits))
    width = np.left_shift(1, error_bits)
    return lower, width


LOWER, WIDTH = _bounds()
LOWER.flags.writeable = WIDTH.flags.writeable = False
UPPER = LOWER + WIDTH - 1            # largest value (ns) a bucket holds (the last one also holds all above)
MID = np.where(WIDTH == 1, LOWER, LOWER + WIDTH / 2.0)   # fio plat_idx_to_val
UPPER.flags.writeable = MID.flags.writeable = False


_SPAN = 1 << SERIES_SHIFT
# the value range of a coarse bucket is that of its first fine bucket to that of its last
COARSE_LOWER = LOWER[::_SPAN]
COARSE_WIDTH = UPPER[_SPAN - 1::_SPAN] + 1 - COARSE_LOWER
COARSE_MID = COARSE_LOWER + COARSE_WIDTH / 2.0                 # as MID: the middle of the range
COARSE_WIDTH.flags.writeable = COARSE_MID.flags.writeable = False


def _check_native() -> None:
    """The constants above are the C engine's (native/core.h): a build made from other sources
    would file latencies in other buckets, so refuse it at import rather than misreport."""
    try:
        from . import _native
    except ImportError:                 # not built (reading result files needs no engine)
        return
    names = ("HIST_BITS", "HIST_BUCKETS", "DEPTH_BUCKETS", "SERIES_SHIFT", "SERIES_WIDTH")
    ours = tuple(globals()[k] for k in names)
    theirs = tuple(getattr(_native, k, None) for k in names)
    if ours != theirs:
        raise ImportError(f"iodl._native was built with {dict(zip(names, theirs))}, iodl.histogram has "
                          f"{dict(zip(names, ours))}: rebuild it (python setup.py build_ext --inplace)")


_check_native()


def empty() -> np.ndarray:
    return np.zeros(HIST_BUCKETS, dtype=np.int64)


def index(ns) -> np.ndarray:
    """Bucket of each value (ns), exactly as the C engine files it."""
    v = np.asarray(ns, dtype=np.uint64)
    msb = np.zeros(v.shape, dtype=np.int64)
    nz = v > 0
    # exact integer log2: float64 rounding could move a value like 2**53 - 1 to the next power
    msb[nz] = np.frexp(v[nz].astype(np.float64))[1] - 1
    fix = nz & (np.left_shift(np.uint64(1), msb.astype(np.uint64)) > v)
    msb[fix] -= 1
    exact = v < 2 * _VAL
    error_bits = np.where(exact, 0, msb - HIST_BITS).astype(np.uint64)
    idx = ((error_bits.astype(np.int64) + 1) << HIST_BITS) + (np.right_shift(v, error_bits) & np.uint64(_VAL - 1)).astype(np.int64)
    return np.minimum(np.where(exact, v.astype(np.int64), idx), HIST_BUCKETS - 1)


def index_one(ns: int) -> int:
    """index() of one value, in plain integers: ~100x cheaper than the array form for one file's
    open or close."""
    if ns < 2 * _VAL:
        return max(int(ns), 0)
    error_bits = int(ns).bit_length() - 1 - HIST_BITS
    return min(((error_bits + 1) << HIST_BITS) + ((int(ns) >> error_bits) & (_VAL - 1)), HIST_BUCKETS - 1)


def add(hist: np.ndarray, ns) -> None:
    """File latencies (ns) into hist in place, as the engine would."""
    np.add.at(hist, index(ns), 1)


def merge(*hists: np.ndarray) -> np.ndarray:
    out = empty()
    for h in hists:
        out += h
    return out


def percentiles(hist: np.ndarray, ps: Iterable[float] = DEFAULT_PERCENTILES) -> dict[float, float]:
    """{p: latency in µs}; 0.0 for an empty histogram."""
    hist = np.asarray(hist, dtype=np.int64)
    n = int(hist.sum())
    ps = list(ps)
    if not n:
        return {p: 0.0 for p in ps}
    cum = np.cumsum(hist)
    out = {}
    for p in ps:
        i = int(np.searchsorted(cum, p / 100.0 * n, side="left"))
        out[p] = float(MID[min(i, HIST_BUCKETS - 1)]) / 1e3
    return out


def max_us(hist: np.ndarray) -> float:
    """Upper bound of the highest non-empty bucket, µs (within 1/64 above the true max)."""
    nz = np.flatnonzero(np.asarray(hist))
    return float(UPPER[nz[-1]]) / 1e3 if len(nz) else 0.0


def summary_us(hist: np.ndarray, max_ns: int | None = None) -> dict[str, float]:
    """p50/p90/p99/p999/max in µs, the latency keys of docs/numbers.md; max is exact when max_ns is given."""
    p = percentiles(hist, DEFAULT_PERCENTILES)
    top = max_ns / 1e3 if max_ns is not None else max_us(hist)
    # a bucket's midpoint can lie above the largest value in it: no percentile exceeds the max
    return {"p50": min(p[50.0], top), "p90": min(p[90.0], top), "p99": min(p[99.0], top),
            "p999": min(p[99.9], top), "max": top}


# --- time series ----------------------------------------------------------------------------------

def series_empty(rows: int) -> np.ndarray:
    """Zeroed rows for Engine.run(series=...)."""
    return np.zeros((rows, SERIES_WIDTH), dtype=np.int64)


def coarse_index(ns) -> np.ndarray:
    """Coarse latency bucket of each value (ns), as the engine files it in a series row."""
    return index(ns) >> SERIES_SHIFT


def series_percentile_us(coarse_counts, q: float) -> float:
    """The q-th percentile (q in %) of SERIES_LAT_BUCKETS coarse counts (one series row's latency
    columns), µs, fio's way: the first bucket whose cumulative count reaches q/100 * N, reported as
    its midpoint; 0.0 when empty."""
    counts = np.asarray(coarse_counts, dtype=np.int64)
    n = int(counts.sum())
    if not n:
        return 0.0
    i = int(np.searchsorted(np.cumsum(counts), q / 100.0 * n, side="left"))
    return float(COARSE_MID[min(i, SERIES_LAT_BUCKETS - 1)]) / 1e3


def series_percentiles_us(series_rows, q: float) -> np.ndarray:
    """series_percentile_us of every row (an (n, SERIES_WIDTH) array); 0.0 where a row has no ios."""
    lat = np.asarray(series_rows, dtype=np.int64).reshape(-1, SERIES_WIDTH)[:, SERIES_LAT:]
    cum = np.cumsum(lat, axis=1)
    n = cum[:, -1]
    i = np.minimum((cum >= (q / 100.0 * n)[:, None]).argmax(axis=1), SERIES_LAT_BUCKETS - 1)
    return np.where(n > 0, COARSE_MID[i] / 1e3, 0.0)


def series_p99_us(series_rows) -> np.ndarray:
    """Per row p99 latency, µs (0.0 where a row has no ios)."""
    return series_percentiles_us(series_rows, 99.0)
