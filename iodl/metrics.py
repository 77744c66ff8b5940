"""Per-rank counters and their reduction to rank 0 (docs/numbers.md).

Times are seconds since the start barrier, taken on each rank's own monotonic clock: the barrier
is the common origin, so ranks on different hosts need no synchronised clocks. Cross-rank
windows follow IOR: MIN of starts, MAX of ends.
"""
from __future__ import annotations

import math
import os
import resource
from dataclasses import field
from typing import TYPE_CHECKING

import numpy as np

from . import _native, histogram, reduce
from .records import record
from .s3root import endpoint_of

if TYPE_CHECKING:
    from .result_types import PerRank

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


@record
class RankResult:
    """One rank's counters of a run (docs/numbers.md, per rank)."""
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
    started_s: float = 0.0    # process start -> the start barrier passed (a step pattern's first step begins)
    cpu_s: float = 0.0        # user + system CPU of the whole process
    cores: int = 0            # CPUs the host has online: what the emulator's own CPU is set against
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
    # object storage (the s3 engine): attempts repeated after a 5xx or a dropped connection, and each
    # counted GET's time to first byte (request handed over -> response headers); 0 and empty on files
    retries: int = 0
    ttfb_max_ns: int = 0
    # ... and the LISTs of the dataset's prefix before the run (s3dataset: as DLIO lists its data
    # folder), with their wall time
    lists: int = 0
    list_s: float = 0.0
    ttfb_hist: np.ndarray = field(default_factory=histogram.empty)

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
        # a run of nothing but failed attempts has retries and its error too (a first GET refused, a
        # server gone before anything of the run completed): counted before the early return below
        self.retries += stats.get("retries", 0)
        self.errors += stats["errors"]
        if not stats["ios"]:
            return
        if "ttfb_hist" in stats:
            self.ttfb_hist += stats["ttfb_hist"]
            self.ttfb_max_ns = max(self.ttfb_max_ns, stats["ttfb_max_ns"])
        self.bytes += stats["bytes"]
        self.ios += stats["ios"]
        self.cached_bytes += stats["cached_bytes"]
        self.cache_unmeasured_bytes += stats.get("cache_unmeasured_bytes", 0)
        self.max_ns = max(self.max_ns, stats["max_ns"])
        self.t_start = min(self.t_start, (stats["t_start_ns"] - t0_ns) / 1e9)
        self.t_end = max(self.t_end, (stats["t_end_ns"] - t0_ns) / 1e9)
        np.add(self.depth, stats["depth"], out=self.depth)   # one numpy call a run, not two

    def _in_window(self, t_ns: int) -> bool:
        lo, hi = self.window_ns
        return not hi or lo <= t_ns < hi

    def _note_files(self, hist: np.ndarray, t_ns, took_ns) -> tuple[int, int]:
        """Files opened or closed, returning at t_ns[i] after took_ns[i] (engine clock): those
        inside the window, as a request's completion is, into hist; (how many, the slowest). One C
        call for a batch's files (_native.account, the engine's own filing): a Python call per
        file was ~1 us of the reader's CPU, twice a sample on one-sample-per-file datasets."""
        t = np.ascontiguousarray(t_ns, dtype=np.int64)
        if not len(t):
            return 0, 0
        lo, hi = self.window_ns
        counted = _native.account(t, np.zeros(len(t), dtype=np.int64), None,
                                  np.ascontiguousarray(took_ns, dtype=np.int64), hist,
                                  window_start_ns=lo if hi else 0, window_end_ns=hi)
        return counted["ios"], counted["max_ns"]

    def note_open(self, t_ns, took_ns) -> None:
        """Files opened, returning at t_ns[i] after took_ns[i] (arrays, engine clock): counted
        when inside the window, as a request's completion is."""
        n, slowest = self._note_files(self.open_hist, t_ns, took_ns)
        self.opens += n
        self.open_max_ns = max(self.open_max_ns, slowest)

    def note_close(self, t_ns, took_ns) -> None:
        """Files closed, returning at t_ns[i] after took_ns[i] (as note_open)."""
        n, slowest = self._note_files(self.close_hist, t_ns, took_ns)
        self.closes += n
        self.close_max_ns = max(self.close_max_ns, slowest)

    def add_files(self, stats: dict) -> None:
        """A batch's opens and closes as Engine.run counted them into open_hist and close_hist
        (given the open threads' tickets: note_open's and note_close's counting, in C), and the
        wait for the opens (note_open_wait)."""
        self.opens += stats["opens"]
        self.open_max_ns = max(self.open_max_ns, stats["open_max_ns"])
        self.closes += stats["closes"]
        self.close_max_ns = max(self.close_max_ns, stats["close_max_ns"])
        self.note_open_wait(stats["open_waited_at_ns"], stats["open_wait_ns"])

    def note_open_wait(self, t_ns: int, waited_ns: int) -> None:
        """The reader waited waited_ns for files to be open, until t_ns (as note_open)."""
        if self._in_window(t_ns):
            self.open_wait_s += waited_ns / 1e9

    def scalars(self) -> "PerRank":
        return {k: getattr(self, k) for k in ("rank", "host", "mount", "bytes", "ios", "cached_bytes",
                                              "cache_unmeasured_bytes", "errors", "t_start", "t_end", "max_ns", "startup_s", "started_s", "cpu_s",
                                              "cores", "max_rss_mb",
                                              "pss_mb", "epochs_checked", "epochs_wrong", "opens", "open_max_ns",
                                              "open_wait_s", "closes", "close_max_ns", "retries", "ttfb_max_ns", "lists", "list_s")}

    def note_start(self) -> None:
        """The run's start barrier is behind this rank (its time 0): how long after its process began.
        What the start-up goal counts (72 ranks on 2 cores: <= 8 s): startup_s, then the pattern's engine
        opened and every rank met."""
        self.started_s = process_age_s()

    def note_process(self, startup_s: float) -> None:
        """What this rank's process cost: start-up time, CPU, peak memory."""

        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.startup_s = startup_s
        self.cpu_s = ru.ru_utime + ru.ru_stime
        self.cores = os.cpu_count() or 1
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


def reduce_results(comm, mine: RankResult, mount_paths: list[str], window_s: float | None = None,
                   endpoints: list[str] | None = None) -> dict | None:
    """Every rank's counters put together on rank 0 (reduce.reduce_read: buffer collectives per
    mount), the per-rank list gathered beside them. window_s: the measured window, when the
    pattern fixes it (reduce.read_block). endpoints: an s3 run's, whose ranks are also put
    together per endpoint (s3root.endpoint_of)."""
    rows = reduce.reduce_read(comm, mine, len(mount_paths))
    by_endpoint = (reduce.reduce_read(comm, mine, len(endpoints), group=endpoint_of(mine.rank, endpoints))
                   if endpoints else None)
    series = reduce_series(comm, mine, len(mount_paths))
    parts = comm.gather(mine.scalars())
    if comm.rank != 0:
        return None
    per_mount, everyone = rows
    parts.sort(key=lambda p: p["rank"])
    mounts = [{"path": path, "ranks": [p["rank"] for p in parts if p["mount"] == m], **reduce.read_block(per_mount[m], window_s)}
              for m, path in enumerate(mount_paths)]
    total = reduce.read_block(everyone, window_s)
    out = {
        "series": series_block(series, mount_paths) if series is not None else None,
        "ranks": len(parts),
        "hosts": sorted({p["host"] for p in parts}),
        "window_s": total["window_s"],
        # every rank's first counted completion and last (MIN, MAX; +inf, -inf when none): the
        # window of a step pattern stopped early (reduce.steps_run_window)
        "span": (float(everyone["t_start"]), float(everyone["t_end"])),
        # step patterns: the order's own check over every rank's epoch shares
        "epochs_checked": int(everyone["epochs_checked"]), "epochs_wrong": int(everyone["epochs_wrong"]),
        "total": total,
        "mounts": mounts,
        "per_rank": [{k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in p.items()}
                     for p in parts],
    }
    if by_endpoint is not None:
        out["endpoints"] = [{"url": url, "ranks": [p["rank"] for p in parts if endpoint_of(p["rank"], endpoints) == e],
                             **reduce.read_block(by_endpoint[0][e], window_s)} for e, url in enumerate(endpoints)]
    return out
