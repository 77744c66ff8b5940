"""Latency histograms: the Python mirror of the C bucket function (native/core.h, fio's plat_val_to_idx).

Values are nanoseconds. Below 128 ns every value has its own bucket; above, each power of two is
split into 64 linear buckets, so a bucket's midpoint is within 1/128 (0.78%) of any value in it.
Merging runs or ranks = adding the arrays. Percentiles follow fio (stat.c calc_clat_percentiles):
the first bucket whose cumulative count reaches p/100 * N, reported as that bucket's midpoint.
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
    """p50/p90/p99/p999/max in µs, the DESIGN.md latency keys; max is exact when max_ns is given."""
    p = percentiles(hist, DEFAULT_PERCENTILES)
    return {"p50": p[50.0], "p90": p[90.0], "p99": p[99.0], "p999": p[99.9],
            "max": max_ns / 1e3 if max_ns is not None else max_us(hist)}
