"""The per-second time series of a result (its "series" key) as CSV: one row per second per mount."""
from __future__ import annotations

import csv

from . import reduce
from .errors import UsageError
from .outputs import write_text_atomically

# fixed decimals: plain numbers any CSV reader takes, and nothing below a byte/s or a nanosecond is lost
FORMATS = {"t_s": "{:.3f}", "MBps": "{:.6f}", "iops": "{:.3f}", "p99_us": "{:.3f}", "cache_hit_fraction": "{:.6f}"}
COLUMNS = ("t_s", "mount", "path", "bytes", "ios", "MBps", "iops", "p99_us", "cached_bytes", "cache_hit_fraction")


def csv_rows(result: dict) -> list[dict]:
    """Rows ordered by time, then mount; rates are per bucket (MB = 10^6 bytes).

    The last bucket of a run usually covers less than a full second: its rates are still divided by
    bucket_s, as every other row's, so that the columns add up (the dip at the end is real time).
    """
    series = result.get("series")
    if not isinstance(series, dict) or not series.get("mounts"):
        raise UsageError("this result has no time series (it was written by an iodl without one)")
    bucket_s = float(series.get("bucket_s") or 1.0)
    rows = []
    for m, entry in enumerate(series["mounts"]):
        cols = [entry.get(k) or [] for k in ("t_s", "bytes", "ios", "cached_bytes", "p99_us")]
        # all lists should have one value per bucket; a shorter one (a truncated file) bounds the rows
        n = min(len(cols[0]), len(cols[1]), len(cols[2]))
        for i in range(n):
            t, nbytes, ios = cols[0][i], int(cols[1][i]), int(cols[2][i])
            cached = int(cols[3][i]) if i < len(cols[3]) else 0
            p99 = float(cols[4][i]) if i < len(cols[4]) else 0.0
            rows.append({
                "t_s": float(t), "mount": m, "path": entry.get("path", f"mount {m}"),
                "bytes": nbytes, "ios": ios,
                "MBps": reduce.mbps(nbytes, bucket_s), "iops": reduce.rate(ios, bucket_s), "p99_us": p99,
                "cached_bytes": cached, "cache_hit_fraction": reduce.hit_fraction(nbytes, cached),
            })
    rows.sort(key=lambda r: (r["t_s"], r["mount"]))
    return rows


def write_csv(result: dict, path: str) -> None:
    """Write csv_rows(result) to path atomically: a reader never sees half a file."""
    rows = csv_rows(result)

    def write(f):
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")  # Unix line ends (the csv module's default is CRLF)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (FORMATS[k].format(v) if k in FORMATS else v) for k, v in row.items()})
    write_text_atomically(path, write)
