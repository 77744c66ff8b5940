"""DL patterns: train-sync (fetch a batch, compute, barrier) and infer-async (no barrier).

Each rank is one accelerator. A reader thread keeps `prefetch` batches ready ahead of compute,
as tf.data's prefetch does: the engine releases the GIL while it reads, so reads of the next
steps really overlap the emulated compute (a sleep, never a spin). Python runs once per step.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import _native, plan
from .engine import open_engine, open_for_read, raise_for_errors
from .metrics import LIVE_STEPS, RankResult

WAIT_SLICE_S = 0.1   # the compute loop's longest wait before it looks for a stop request again


class _Cancelled(Exception):
    """The reader's engine was cancelled: the run is stopping, not failing."""


STEP_FIELDS = ("t_start", "t_end", "data_wait", "compute", "barrier", "bytes", "ios", "cached", "samples", "epoch")


@dataclass
class StepConfig:
    pattern: str                 # train-sync | infer-async
    engine: str
    direct: bool
    iodepth: int
    block_size: int
    seed: int
    batch_size: int
    compute_time_s: float
    prefetch: int
    sampling: str = "epoch"      # epoch: a seeded permutation per epoch split over ranks | random
    epochs: int = 1
    steps: int = 0               # total steps; 0: as many as the epochs need
    duration_s: float = 0.0      # stop at the first step boundary after this (0: no limit)
    delay_ns: int = 0
    engine_extra: dict = field(default_factory=dict)   # e.g. the null engine's shared device


class SampleStream:
    """A rank's endless stream of samples, from whole shards read sequentially.

    take(n) returns the requests that deliver the next n samples: a shard is read in whole
    block_size requests from its start, as far as the last sample needed (to its end once its
    last sample is taken), then the next shard begins.
    """

    CACHED_SHARDS = 64   # layouts kept per rank: an epoch revisits shards, 72 ranks share the RAM

    def __init__(self, next_shard, sample_ends, sizes: np.ndarray, block_size: int):
        self._next_shard, self._sample_ends, self._sizes, self._bs = next_shard, sample_ends, sizes, block_size
        self._shard, self._ends, self._rows, self._sample, self._row = None, None, None, 0, 0
        self._layouts: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _layout(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(sample end offsets, read plan) of a shard, computed once while it stays in use."""
        layout = self._layouts.get(shard)
        if layout is None:
            if len(self._layouts) >= self.CACHED_SHARDS:
                self._layouts.pop(next(iter(self._layouts)))
            layout = (np.asarray(self._sample_ends(shard)), plan.shard_plan([self._sizes[shard]], self._bs))
            self._layouts[shard] = layout
        return layout

    def size_of(self, shard: int) -> int:
        return int(self._sizes[shard])

    def take(self, n: int) -> list[tuple[int, np.ndarray, bool]]:
        """[(shard, rows, shard_finished)] for the next n samples."""
        out = []
        while n > 0:
            if self._shard is None:
                self._shard = self._next_shard()
                self._ends, self._rows = self._layout(self._shard)
                self._sample = self._row = 0
                if not len(self._ends):            # a shard without samples adds nothing
                    self._shard = None
                    continue
            k = min(n, len(self._ends) - self._sample)
            self._sample += k
            n -= k
            done = self._sample == len(self._ends)
            upto = len(self._rows) if done else -(-int(self._ends[self._sample - 1]) // self._bs)
            out.append((self._shard, self._rows[self._row:upto], done))
            self._row = upto
            if done:
                self._shard = None
        return out


def shard_source(cfg: StepConfig, n_shards: int, index_in_mount: int, ranks_in_mount: int, rank: int):
    """next_shard() for this rank, and the number of shards one epoch gives it."""
    if cfg.sampling == "random":
        rng = np.random.default_rng([cfg.seed, rank])
        return (lambda: int(rng.integers(n_shards))), None

    # epoch: one permutation per epoch shared by the mount's ranks; rank i takes every R-th shard.
    # With more ranks than shards each rank still gets a whole shard (some are read twice).
    def shares():
        epoch = 0
        while True:
            perm = np.random.default_rng([cfg.seed, epoch]).permutation(n_shards)
            yield from (int(perm[j % n_shards]) for j in range(index_in_mount, max(n_shards, ranks_in_mount), ranks_in_mount))
            epoch += 1

    it = shares()
    return (lambda: next(it)), None


@dataclass
class StepRecords:
    rows: list = field(default_factory=list)

    def add(self, **kw) -> None:
        self.rows.append(tuple(kw[f] for f in STEP_FIELDS))

    def array(self) -> np.ndarray:
        return np.array(self.rows, dtype=float).reshape(-1, len(STEP_FIELDS))


class _Reader(threading.Thread):
    """Fetches whole batches through the engine, `prefetch` ahead of the compute loop."""

    def __init__(self, stream: SampleStream, paths, cfg: StepConfig, engine, result: RankResult, t0_ns: int):
        super().__init__(daemon=True, name="iodl-reader")
        self.stream, self.paths, self.cfg, self.engine, self.result, self.t0 = stream, paths, cfg, engine, result, t0_ns
        self.out: queue.Queue = queue.Queue(maxsize=max(cfg.prefetch, 1))
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.fds: dict[int, int] = {}

    def _fd(self, shard: int) -> int:
        if shard not in self.fds:
            if self.cfg.engine == "null" and self.paths is None:
                self.fds[shard] = -1              # no dataset: the null engine never touches fds
            else:
                # the size the dataset promises: a shorter (truncated) shard is refused by name
                self.fds[shard] = open_for_read(self.paths[shard], self.cfg.direct, self.stream.size_of(shard))
        return self.fds[shard]

    def fetch(self) -> tuple[int, int, int]:
        """Read one batch; returns (bytes, ios, cached bytes)."""
        segments = self.stream.take(self.cfg.batch_size)
        fds = [self._fd(shard) for shard, _rows, _done in segments]
        if len(segments) == 1:
            rows = segments[0][1]            # one shard's plan: its file column is already 0
        else:
            parts = []
            for i, (_shard, part, _done) in enumerate(segments):
                part = part.copy()
                part["file"] = i
                parts.append(part)
            rows = np.concatenate(parts) if parts else np.empty(0, dtype=plan.PLAN_DTYPE)
        stats = self.engine.run(fds, rows, self.result.hist, **self.result.engine_args(self.t0))
        self.result.add(stats, self.t0)
        if stats.get("interrupted"):
            raise _Cancelled()
        raise_for_errors(stats, rows, [self.paths[s] if self.paths else f"shard {s}" for s, _r, _d in segments])
        for shard, _rows, done in segments:
            if done and shard in self.fds:
                self._close(shard)
        return stats["bytes"], stats["ios"], stats["cached_bytes"]

    def _close(self, shard: int) -> None:
        fd = self.fds.pop(shard)
        if fd >= 0:
            os.close(fd)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                item = self.fetch()
                while not self.stop.is_set():
                    try:
                        self.out.put(item, timeout=0.05)
                        break
                    except queue.Full:
                        continue
        except _Cancelled:
            pass
        except BaseException as exc:  # the compute loop looks at it every slice of its wait
            self.error = exc

    def get(self, stop_flag):
        """The next batch; waits in short slices so that a stop request or a dead reader is seen
        at once (a batch on slow storage can take many seconds)."""
        while True:
            try:
                return self.out.get(timeout=WAIT_SLICE_S)
            except queue.Empty:
                pass
            if self.error is not None:
                raise self.error
            if stop_flag():
                raise KeyboardInterrupt
            if not self.is_alive():
                raise RuntimeError("the reader thread ended without a batch or an error")

    def close(self) -> None:
        """Stop reading: the engine's cancel() ends a read in progress within ~100 ms (plus the
        bounded drain of what is in flight), so this never waits for slow storage."""
        self.stop.set()
        self.engine.cancel()
        self.join(timeout=5)
        if not self.is_alive():
            for shard in list(self.fds):
                self._close(shard)


def planned_steps(cfg: StepConfig, n_samples: int, ranks_in_mount: int) -> tuple[int, int]:
    """(steps to run, 0 when only a duration bounds them; steps per epoch) for one rank."""
    steps_per_epoch = max(1, -(-n_samples // (ranks_in_mount * cfg.batch_size)))
    return cfg.steps or (0 if cfg.duration_s else steps_per_epoch * cfg.epochs), steps_per_epoch


def run_steps(comm, cfg: StepConfig, paths, sizes, sample_ends, mount: int, index_in_mount: int,
              ranks_in_mount: int, host: str, stop_flag=None, result: RankResult | None = None, on_epoch=None):
    """Run train-sync or infer-async on this rank. Returns (RankResult, step records array).

    paths None with the null engine: no dataset, the shard layout comes from the workload spec.
    stop_flag: a callable returning True when the user asked to stop (SIGINT/SIGTERM).
    result: where to count (it may carry a series and live counters); on_epoch(epoch): called
    between the last step of an epoch and the first of the next (after the barrier in train-sync).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    next_shard, _ = shard_source(cfg, len(sizes), index_in_mount, ranks_in_mount, comm.rank)
    stream = SampleStream(next_shard, sample_ends, sizes, cfg.block_size)
    total_samples = sum(len(sample_ends(i)) for i in range(len(sizes)))
    steps, steps_per_epoch = planned_steps(cfg, total_samples, ranks_in_mount)

    result = result or RankResult(rank=comm.rank, host=host, mount=mount)
    records = StepRecords()
    engine = open_engine(cfg.engine, depth=cfg.iodepth, block_size=cfg.block_size, direct=cfg.direct,
                         delay_ns=cfg.delay_ns, cache_check=not cfg.direct and paths is not None, **cfg.engine_extra)
    sync = cfg.pattern == "train-sync"
    stop_flag = stop_flag or (lambda: False)
    comm.barrier()
    t0 = _native.monotonic_ns()
    clock = lambda: (_native.monotonic_ns() - t0) / 1e9  # noqa: E731
    reader = _Reader(stream, paths, cfg, engine, result, t0)
    prefetching = cfg.prefetch > 0
    if prefetching:
        reader.start()
    partial = False
    try:
        step = 0
        while True:
            start = clock()
            try:
                if stop_flag():
                    raise KeyboardInterrupt   # a stop seen before this step began (e.g. during set-up)
                if prefetching:
                    nbytes, ios, cached = reader.get(stop_flag)
                else:
                    nbytes, ios, cached = reader.fetch()
                fetched = clock()
                time.sleep(cfg.compute_time_s)
                computed = clock()
                step += 1
                want_stop = (steps and step >= steps) or (cfg.duration_s and computed >= cfg.duration_s)
                interrupted = stop_flag()
                if sync:
                    # the barrier stands in for the gradient all-reduce; it also agrees on stopping
                    flags = comm.step_sync(int(bool(want_stop)) | (2 if interrupted else 0))
                    want_stop, interrupted = bool(flags & 1), bool(flags & 2)
            except (KeyboardInterrupt, _Cancelled):
                # a stop request seen mid-step (waiting for data, computing, at the barrier): every
                # rank got the signal too, so none waits for this one; the unfinished step is dropped
                partial = True
                break
            end = clock()
            records.add(t_start=start, t_end=end, data_wait=fetched - start, compute=computed - fetched,
                        barrier=end - computed, bytes=nbytes, ios=ios, cached=cached, samples=cfg.batch_size,
                        epoch=(step - 1) // steps_per_epoch)
            if result.live is not None:
                result.live[LIVE_STEPS] = step
            if interrupted:
                partial = True
                break
            if want_stop:
                break
            if on_epoch and step % steps_per_epoch == 0:
                on_epoch(step // steps_per_epoch)
    except (KeyboardInterrupt, _Cancelled):
        partial = True   # the signal landed between two steps' waits
    finally:
        if prefetching:
            reader.close()
        if not reader.is_alive():
            for shard in list(reader.fds):
                reader._close(shard)
            engine.close()
    return result, records.array(), partial, steps_per_epoch


def _col(a: np.ndarray, name: str) -> np.ndarray:
    return a[:, STEP_FIELDS.index(name)]


def _measured(a: np.ndarray) -> np.ndarray:
    """Mask of the steps that count for AU: all but the first step of each epoch."""
    epoch = _col(a, "epoch")
    first = np.ones(len(a), dtype=bool)
    first[1:] = epoch[1:] != epoch[:-1]
    return ~first


def summarize_steps(per_rank: list[np.ndarray], pattern: str, au_threshold: float) -> dict:
    """The train block of the result: steps, AU, samples/s, step times, where the time went."""
    rows = [a for a in per_rank if len(a)]
    allsteps = np.concatenate(rows) if rows else np.empty((0, len(STEP_FIELDS)))
    mask = np.concatenate([_measured(a) for a in rows]) if rows else np.empty(0, dtype=bool)
    excluded = "first step of each epoch"
    if not mask.any():                       # a one-step epoch leaves nothing: use every step, say so
        mask, excluded = np.ones(len(allsteps), dtype=bool), "none (too few steps to leave out the first of each epoch)"
    m = allsteps[mask]
    step_time = _col(m, "t_end") - _col(m, "t_start")
    au = float(np.mean(_col(m, "compute") / step_time)) if len(m) else 0.0
    samples = float(_col(allsteps, "samples").sum())
    if pattern == "train-sync" or not rows:
        window = (max(a[-1, 1] for a in rows) - min(a[0, 0] for a in rows)) if rows else 0.0
        in_window = samples
    else:
        lo, hi = common_window(rows)
        window = max(hi - lo, 0.0)
        in_window = float(sum(_col(a, "samples")[(_col(a, "t_end") > lo) & (_col(a, "t_end") <= hi)].sum() for a in rows))
    pct = (lambda q: float(np.percentile(step_time, q)) if len(step_time) else 0.0)
    out = {
        "steps": int(max((len(a) for a in rows), default=0)),
        "au": au,
        "au_threshold": au_threshold,
        "au_excluded_steps": excluded,
        "samples_per_s": in_window / window if window > 0 else 0.0,
        "samples": int(samples),
        "window_s": window,
        "step_time_s": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "max": float(step_time.max()) if len(step_time) else 0.0},
        "data_wait_s_per_step": float(_col(m, "data_wait").mean()) if len(m) else 0.0,
        "barrier_wait_s_per_step": float(_col(m, "barrier").mean()) if len(m) else 0.0,
        "compute_s_per_step": float(_col(m, "compute").mean()) if len(m) else 0.0,
    }
    if pattern == "infer-async" and rows:
        rates = np.array([_col(a, "samples").sum() / (a[-1, 1] - a[0, 0]) for a in rows if a[-1, 1] > a[0, 0]])
        if len(rates):
            out["per_rank_samples_per_s"] = {"min": float(rates.min()), "median": float(np.median(rates)),
                                             "max": float(rates.max())}
    return out


def data_wait_share(rows: list[np.ndarray]) -> float | None:
    """Share of the counted steps' time that these ranks spent waiting for data (None: no steps)."""
    rows = [a[_measured(a)] if _measured(a).any() else a for a in rows if len(a)]
    if not rows:
        return None
    steps = np.concatenate(rows)
    total = float((_col(steps, "t_end") - _col(steps, "t_start")).sum())
    return float(_col(steps, "data_wait").sum()) / total if total > 0 else 0.0


def common_window(rows: list[np.ndarray]) -> tuple[float, float]:
    """From the last rank's first step start to the first rank's last step end (docs/numbers.md, "The window")."""
    return max(a[0, 0] for a in rows), min(a[-1, 1] for a in rows)


def window_io(rows: list[np.ndarray], lo: float, hi: float) -> dict:
    """Bytes, requests and cached bytes of the steps that ended inside [lo, hi]."""
    def total(name):
        return int(sum(_col(a, name)[(_col(a, "t_end") > lo) & (_col(a, "t_end") <= hi)].sum() for a in rows))
    return {"bytes": total("bytes"), "ios": total("ios"), "cached": total("cached")}
