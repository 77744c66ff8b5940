"""Per-rank counters and their reduction to rank 0 (docs/numbers.md).

Times are seconds since the start barrier, taken on each rank's own monotonic clock: the barrier
is the common origin, so ranks on different hosts need no synchronised clocks. Cross-rank
windows follow IOR: MIN of starts, MAX of ends.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import histogram

if TYPE_CHECKING:
    from .result import Block, PerRank

MB = 1e6
SERIES_BUCKET_NS = 1_000_000_000   # the time series has one row per second (docs/report.md: CSV, plots)
# a rank's live counters (int64 slots of a node-shared block): bytes, ios, cached bytes are the
# engine's (Engine.run(live=...)); the step count is training's; LIVE_SLOT bytes per rank keep
# ranks off each other's cache lines
LIVE_BYTES, LIVE_IOS, LIVE_CACHED, LIVE_STEPS = range(4)
LIVE_SLOT = 64
SERIES_HOURS = 24                  # rows kept when the run's length is not known in advance


def new_series(seconds: float | None = None) -> np.ndarray:
    """Zeroed per-second rows for Engine.run(series=...). np.zeros takes fresh pages from the
    kernel, so the rows a run never reaches cost address space, not memory."""
    return histogram.series_empty(int(seconds) + 2 if seconds else SERIES_HOURS * 3600)


@dataclass
class RankResult:
    rank: int
    host: str
    mount: int
    bytes: int = 0
    ios: int = 0
    cached_bytes: int = 0
    cache_unmeasured_bytes: int = 0   # of bytes, those whose cache hits the kernel could not tell us
    errors: int = 0
    t_start: float = math.inf
    t_end: float = -math.inf
    max_ns: int = 0
    startup_s: float = 0.0    # process start -> ready to run (imports, MPI init, setup)
    cpu_s: float = 0.0        # user + system CPU of the whole process
    max_rss_mb: float = 0.0
    pss_mb: float = 0.0       # proportional set size: shared pages (MPI's shared memory) split over their users
    hist: np.ndarray = field(default_factory=histogram.empty)
    depth: np.ndarray = field(default_factory=lambda: np.zeros(histogram.DEPTH_BUCKETS, dtype=np.int64))
    # per-second rows of counted completions since the start barrier (new_series), and
    # the node-shared counters that the progress display reads while we run; None: not kept
    series: np.ndarray | None = None
    live: np.ndarray | None = None
    # the measured window on the engine's clock, when fixed in advance (storage-only, infer-async):
    # requests count by completion time inside it; (0, 0): every completion counts
    window_ns: tuple[int, int] = (0, 0)
    epochs_checked: int = 0   # step patterns: epoch shares in which every sample was taken exactly once
    epochs_wrong: int = 0     # ... and those in which not (never expected: the order's own check)
    # opens of dataset files that returned inside the window: how many, their latency (open call
    # to return, fstat and the O_DIRECT set-up included) and the slowest
    opens: int = 0
    open_max_ns: int = 0
    open_hist: np.ndarray = field(default_factory=histogram.empty)
    # seconds the reader was blocked waiting for a file to be open (open threads opening ahead:
    # an fd not ready yet; without them: every open's whole time), waits that ended in the window
    open_wait_s: float = 0.0
    # closes of dataset files that returned inside the window: how many, their latency, the slowest
    closes: int = 0
    close_max_ns: int = 0
    close_hist: np.ndarray = field(default_factory=histogram.empty)

    def engine_args(self, t0_ns: int) -> dict:
        """The keywords that make an Engine.run count in this rank's window and feed its series
        and live counters."""
        out = {"window_start_ns": self.window_ns[0], "window_end_ns": self.window_ns[1]}
        if self.series is not None:
            out.update(series=self.series, series_origin_ns=t0_ns, series_bucket_ns=SERIES_BUCKET_NS)
        if self.live is not None:
            out["live"] = self.live
        return out

    def add(self, stats: dict, t0_ns: int) -> None:
        """Fold one engine run (whose histogram was accumulated into self.hist) into the counters."""
        if not stats["ios"]:
            return
        self.bytes += stats["bytes"]
        self.ios += stats["ios"]
        self.cached_bytes += stats["cached_bytes"]
        self.cache_unmeasured_bytes += stats.get("cache_unmeasured_bytes", 0)
        self.errors += stats["errors"]
        self.max_ns = max(self.max_ns, stats["max_ns"])
        self.t_start = min(self.t_start, (stats["t_start_ns"] - t0_ns) / 1e9)
        self.t_end = max(self.t_end, (stats["t_end_ns"] - t0_ns) / 1e9)
        self.depth += np.asarray(stats["depth"], dtype=np.int64)

    def _in_window(self, t_ns: int) -> bool:
        lo, hi = self.window_ns
        return not hi or lo <= t_ns < hi

    def note_open(self, t_ns: int, took_ns: int) -> None:
        """One file opened, returning at t_ns (engine clock) after took_ns: counted when inside
        the window, as a request's completion is."""
        if self._in_window(t_ns):
            self.opens += 1
            self.open_max_ns = max(self.open_max_ns, took_ns)
            self.open_hist[histogram.index_one(took_ns)] += 1

    def note_close(self, t_ns: int, took_ns: int) -> None:
        """One file closed, returning at t_ns after took_ns (as note_open)."""
        if self._in_window(t_ns):
            self.closes += 1
            self.close_max_ns = max(self.close_max_ns, took_ns)
            self.close_hist[histogram.index_one(took_ns)] += 1

    def note_open_wait(self, t_ns: int, waited_ns: int) -> None:
        """The reader waited waited_ns for files to be open, until t_ns (as note_open)."""
        if self._in_window(t_ns):
            self.open_wait_s += waited_ns / 1e9

    def scalars(self) -> "PerRank":
        return {k: getattr(self, k) for k in ("rank", "host", "mount", "bytes", "ios", "cached_bytes",
                                              "cache_unmeasured_bytes", "errors", "t_start", "t_end", "max_ns", "startup_s", "cpu_s", "max_rss_mb",
                                              "pss_mb", "epochs_checked", "epochs_wrong", "opens", "open_max_ns",
                                              "open_wait_s", "closes", "close_max_ns")}

    def note_process(self, startup_s: float) -> None:
        """What this rank's process cost: start-up time, CPU, peak memory."""
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.startup_s = startup_s
        self.cpu_s = ru.ru_utime + ru.ru_stime
        self.max_rss_mb = ru.ru_maxrss / 1024.0
        self.pss_mb = _pss_kb() / 1024.0


def _pss_kb() -> int:
    """This process's proportional set size (kB): a page shared by n processes counts 1/n. RSS
    counts MPI's node-wide shared memory in full in every rank; PSS says what a rank really costs."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def process_age_s() -> float:
    """Seconds since this process started (from /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def summarize(parts: list[dict], hist: np.ndarray, window_s: float | None = None,
              open_hist: np.ndarray | None = None, close_hist: np.ndarray | None = None) -> "Block":
    """The docs/numbers.md figures for a group of ranks (one mount, or all).

    window_s: the run's measured window when the pattern fixes it; else the group's own, from
    its first counted completion to its last. open_hist, close_hist: the group's open and close
    latencies."""
    def files_latency(h, key):
        return histogram.summary_us(h if h is not None else histogram.empty(),
                                    max((p.get(key, 0) for p in parts), default=0))

    active = [p for p in parts if p["ios"]]
    if window_s is None:
        window_s = (max(p["t_end"] for p in active) - min(p["t_start"] for p in active)) if active else 0.0
    block = {
        "bytes": sum(p["bytes"] for p in parts),
        "ios": sum(p["ios"] for p in parts),
        "cached_bytes": sum(p["cached_bytes"] for p in parts),
        "latency_us": histogram.summary_us(hist, max((p["max_ns"] for p in parts), default=0)),
        # a hit fraction over bytes of which some could not be measured would be a guess: none at all
        "cache_measured": not any(p.get("cache_unmeasured_bytes", 0) for p in parts),
        "errors": sum(p["errors"] for p in parts),
        "opens": sum(p.get("opens", 0) for p in parts),
        "open_latency_us": files_latency(open_hist, "open_max_ns"),
        "open_wait_s": sum(p.get("open_wait_s", 0.0) for p in parts),   # rank-seconds: summed over the ranks
        "closes": sum(p.get("closes", 0) for p in parts),
        "close_latency_us": files_latency(close_hist, "close_max_ns"),
    }
    return rate_block(block, window_s)


def rate_block(block: dict, window_s: float) -> "Block":
    """Every rate of a result block from its counts and one window: count / window_s. The one
    place a block's rates are made, so that bytes / window_s == bandwidth in every block."""
    rate = (lambda x: x / window_s) if window_s > 0 else (lambda x: 0.0)
    nbytes, cached, measured = block["bytes"], block["cached_bytes"], block["cache_measured"]
    block.update(window_s=window_s, bandwidth_MBps=rate(nbytes) / MB, iops=rate(block["ios"]),
                 opens_per_s=rate(block.get("opens", 0)),
                 cache_hit_fraction=(cached / nbytes if nbytes else 0.0) if measured else None,
                 storage_bandwidth_MBps=rate(nbytes - cached) / MB if measured else None)
    return block


def steps_run_window(fixed: bool, partial: bool, ramp_s: float, duration_s: float, per_rank: list[dict],
                     steps_span: tuple[float, float]) -> tuple[float, float]:
    """A step pattern's window, seconds since the start barrier (docs/numbers.md, "The window"):
    [ramp, ramp + duration] when fixed in advance (infer-async); a stopped run's first to last
    counted completion; train-sync's steps' span, stretched to a read that completed after the
    last step (read-ahead drained at the end) so that every counted byte is inside."""
    ran = [p for p in per_rank if p["ios"]]
    starts, ends = [p["t_start"] for p in ran], [p["t_end"] for p in ran]
    if fixed and not partial:
        return ramp_s, ramp_s + duration_s
    if fixed:
        return min(starts, default=0.0), max(ends, default=0.0)
    return min([steps_span[0], *starts]), max([steps_span[1], *ends])


def set_window(reduced: dict, window_s: float) -> None:
    """Take every block of a reduced result over one window (train-sync's: its steps' span)."""
    for block in [reduced["total"], *reduced["mounts"]]:
        rate_block(block, window_s)
    reduced["window_s"] = window_s


def latency_hist(hist: np.ndarray) -> dict:
    """The non-empty buckets of a histogram: {"ns": [bucket value], "count": [requests]}."""
    idx = np.flatnonzero(hist)
    return {"ns": histogram.MID[idx].tolist(), "count": hist[idx].tolist()}


def reduce_series(comm, mine: RankResult, n_mounts: int) -> np.ndarray | None:
    """(mount, second, column) sums over ranks on rank 0; None when no rank kept a series.

    Only the seconds some rank reached are sent: the rows after this rank's last completion are
    zero and were never touched (the array is allocated lazily), and must stay so.
    """
    used = -1                      # -1: no series here; 0: a series, nothing in it yet
    if mine.series is not None:
        used = min(int(mine.t_end * 1e9 // SERIES_BUCKET_NS) + 1, len(mine.series)) if mine.ios else 0
    used = int(comm.allreduce(used, "max"))
    if used < 0:
        return None
    arr = np.zeros((n_mounts, max(used, 1), histogram.SERIES_WIDTH), dtype=np.int64)
    if mine.series is not None and used:
        arr[mine.mount] = mine.series[:used]
    return comm.reduce_array(arr, "sum")


def series_block(series: np.ndarray, mount_paths: list[str]) -> dict:
    """The result's `series`: per mount, one row per second from the first second with a completion."""
    busy = np.flatnonzero(series[:, :, 1].sum(axis=0))
    lo, hi = (int(busy[0]), int(busy[-1]) + 1) if len(busy) else (0, 0)
    step = SERIES_BUCKET_NS / 1e9
    mounts = []
    for m, path in enumerate(mount_paths):
        rows = series[m, lo:hi]
        mounts.append({"path": path, "t_s": [i * step for i in range(lo, hi)], "bytes": rows[:, 0].tolist(),
                       "ios": rows[:, 1].tolist(), "cached_bytes": rows[:, 2].tolist(),
                       "p99_us": [float(v) for v in histogram.series_p99_us(rows)]})
    return {"bucket_s": step, "mounts": mounts}


def reduce_results(comm, mine: RankResult, mount_paths: list[str], window_s: float | None = None) -> dict | None:
    """Gather every rank's counters to rank 0; sum histograms per mount with a buffer collective.
    window_s: the measured window, when the pattern fixes it (summarize)."""
    n = len(mount_paths)
    hists = np.zeros((n, len(mine.hist)), dtype=np.int64)
    hists[mine.mount] = mine.hist
    depth = np.zeros((n, len(mine.depth)), dtype=np.int64)
    depth[mine.mount] = mine.depth
    files = np.zeros((n, 2, len(mine.open_hist)), dtype=np.int64)   # open and close latencies
    files[mine.mount] = (mine.open_hist, mine.close_hist)
    hists = comm.reduce_array(hists, "sum")
    depth = comm.reduce_array(depth, "sum")
    files = comm.reduce_array(files, "sum")
    series = reduce_series(comm, mine, n)
    parts = comm.gather(mine.scalars())
    if comm.rank != 0:
        return None
    parts.sort(key=lambda p: p["rank"])
    mounts = []
    for m, path in enumerate(mount_paths):
        group = [p for p in parts if p["mount"] == m]
        entry = {"path": path, "ranks": [p["rank"] for p in group]}
        entry.update(summarize(group, hists[m], window_s, files[m, 0], files[m, 1]))
        entry["depth"] = depth[m].tolist()
        entry["latency_hist"] = latency_hist(hists[m])
        mounts.append(entry)
    total = summarize(parts, hists.sum(axis=0), window_s, files[:, 0].sum(axis=0), files[:, 1].sum(axis=0))
    total["depth"] = depth.sum(axis=0).tolist()
    total["latency_hist"] = latency_hist(hists.sum(axis=0))
    return {
        "series": series_block(series, mount_paths) if series is not None else None,
        "ranks": len(parts),
        "hosts": sorted({p["host"] for p in parts}),
        "window_s": total["window_s"],
        "total": total,
        "mounts": mounts,
        "per_rank": [{k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in p.items()}
                     for p in parts],
    }
