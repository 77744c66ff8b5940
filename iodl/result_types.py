"""The read result's schema (iodl.result/1) as types: docs/numbers.md explains every key, and
tests/cmd/test_result_docs.py holds real results, these types and that page to one another.

Apart from iodl/result.py, which every rank imports (STEP_FIELDS): making these classes was ~4 ms of
a rank's start-up, and only a type checker and that test use them."""
from __future__ import annotations

from typing import TypedDict


class Latency(TypedDict):
    p50: float
    p90: float
    p99: float
    p999: float
    max: float


class Block(TypedDict):
    """A group of ranks' figures: the total, or one mount (reduce.read_block and rates)."""
    bytes: int
    ios: int
    cached_bytes: int
    cache_measured: bool
    window_s: float
    bandwidth_MBps: float
    iops: float
    cache_hit_fraction: float | None
    storage_bandwidth_MBps: float | None
    latency_us: Latency
    errors: int
    depth: list[int]
    latency_hist: dict
    opens: int
    opens_per_s: float
    open_latency_us: Latency
    open_wait_s: float
    closes: int
    close_latency_us: Latency
    retries: int            # object storage: requests sent again (0 on files)
    ttfb_us: Latency        # object storage: time to first byte per GET (all 0 on files)
    lists: int              # object storage: LISTs of the dataset's prefix before the run (0 on files)
    list_ops_per_s: float   # ... over the slowest rank's listing time


class _Mount(Block):
    path: str
    ranks: list[int]


class Mount(_Mount, total=False):
    cache: dict             # buffered runs (cache.cache_blocks)


class Endpoint(Block):
    """An s3 run's ranks on one --endpoint (docs/s3.md)."""
    url: str
    ranks: list[int]


class Total(Block, total=False):
    cache: dict


MLPerfView = TypedDict("MLPerfView", {"au": float, "samples_per_s": float, "au_threshold": float, "pass": bool,
                                      "epochs": int, "category": "str | None"})   # iodl/mlperf.py run_category


class _Train(TypedDict):
    """The accelerator view of a step pattern (training.summarize_steps)."""
    steps: int
    au: float
    au_threshold: float
    au_excluded_steps: str
    samples_per_s: float
    samples: int
    samples_in_window: float
    window_s: float
    consumed_bytes: float
    consumed_MBps: float
    step_time_s: dict
    data_wait_s_per_step: float
    barrier_wait_s_per_step: float
    compute_s_per_step: float
    checkpoint_s_per_step: float
    epochs_checked: int
    epochs_wrong: int
    shuffle: str
    mlperf: MLPerfView | None


class Emulator(TypedDict):
    """The emulator's own CPU over the counted steps (reduce.emulator_cpu)."""
    cpu_s_per_step: float
    cpu_s_per_sample: float
    loader_cpu_s_per_step: float
    client_cpu_share: float
    client_bound: bool
    by_rank: list[dict]     # {"rank", "cpu_s_per_step", "cpu_s_per_sample", "loader_cpu_s_per_step"}


class Train(_Train, total=False):
    per_rank_samples_per_s: dict    # infer-async
    emulator: Emulator


class PerRank(TypedDict):
    """One rank's counters (metrics.RankResult.scalars)."""
    rank: int
    host: str
    mount: int
    bytes: int
    ios: int
    cached_bytes: int
    cache_unmeasured_bytes: int
    errors: int
    t_start: float | None
    t_end: float | None
    max_ns: int
    startup_s: float
    started_s: float
    cpu_s: float
    cores: int
    max_rss_mb: float
    pss_mb: float
    epochs_checked: int
    epochs_wrong: int
    opens: int
    open_max_ns: int
    open_wait_s: float
    closes: int
    close_max_ns: int
    retries: int
    ttfb_max_ns: int
    lists: int
    list_s: float


class _Result(TypedDict):
    schema: str
    pattern: str
    engine: str
    direct: bool
    iodepth: int
    block_size: int
    ranks: int
    hosts: list[str]
    workload: dict
    seed: int
    duration_s: float | None
    ramp_s: float | None
    partial: bool
    window_s: float
    total: Total
    mounts: list[Mount]
    per_rank: list[PerRank]


class Result(_Result, total=False):
    """A read result; the keys below appear when they apply."""
    train: Train                    # step patterns
    nodes: list[dict]               # buffered runs (cache.node_view)
    drop_caches: str | None         # buffered runs
    sizing: dict                    # all but validate (sizing.sizing_block)
    validate: dict                  # validate (data.open.validate_block)
    series: dict                    # metrics.series_block
    missing_ranks: list[int]        # after a stop some rank did not answer
    checkpoint: dict                # train-sync with --checkpoint-root: {"write": ..., "fsync", "roots"}
    endpoints: list[Endpoint]       # s3:// roots: per --endpoint (metrics.reduce_results)


RESULT_KEYS = tuple(_Result.__annotations__)
OPTIONAL_KEYS = tuple(k for k in Result.__annotations__ if k not in _Result.__annotations__)
