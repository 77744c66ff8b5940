"""Where each key of docs/numbers.md is made: the one function that defines it.

Every key of the result schemas on that page (as a dotted path: `result.total.bandwidth_MBps`,
`checkpoint.OP.per_round.bytes`) is either made by exactly one function named here, or written as
the run had it (AS_RUN: settings, names, the run's outcome). tests/unit/test_figures.py holds the
page, this table and the code to one another: every documented key is here once, each function
names its key, and no other function divides to make a figure of the same name.

Functions are named as "module:qualname" so that this table imports nothing.
"""
from __future__ import annotations

_LATENCY = ("p50", "p90", "p99", "p999", "max")
_READ_COUNTS = ("bytes", "ios", "cached_bytes", "cache_measured", "errors", "depth", "opens", "open_wait_s",
                "closes", "latency_us", "open_latency_us", "close_latency_us", "retries", "ttfb_us", "lists",
                "list_ops_per_s")
_READ_RATES = ("window_s", "bandwidth_MBps", "iops", "opens_per_s", "cache_hit_fraction", "storage_bandwidth_MBps")
_OP = ("rounds", "bytes", "ios", "duration_s", "bandwidth_MBps", "min_rank_bandwidth_MBps", "latency_us", "fsync",
       "fsyncs", "fsync_latency_us", "cache_hit_fraction", "per_round.bytes", "per_round.duration_s",
       "per_round.bandwidth_MBps", "per_round.min_rank_bandwidth_MBps", "lists", "list_ops_per_s")
_KV = ("tokens", "tokens_per_s", "prefill_tokens", "bytes_per_token", "requests", "entries_written", "entry_reads",
       "evictions", "cpu_entries", "cpu_reads", "demotions", "written_bytes", "read_bytes", "window_s", "write_bandwidth_MBps", "read_bandwidth_MBps",
       "write_ios", "read_ios", "fsyncs", "errors", "cache_hit_rate", "device_read_fraction", "read_latency_us",
       "write_latency_us", "fsync_latency_us", "entry_read_latency_us", "entry_write_latency_us",
       "request_storage_latency_us")

DEFINED_BY: dict[str, tuple[str, ...]] = {
    # a group of ranks' read figures: reduced over ranks, then rated over one window
    "iodl.reduce:read_block": tuple(f"result.total.{k}" for k in _READ_COUNTS),
    "iodl.reduce:rates": tuple(f"result.total.{k}" for k in _READ_RATES),
    "iodl.reduce:latency_hist": ("result.latency_hist.ns", "result.latency_hist.count"),
    "iodl.histogram:summary_us": (*(f"result.total.latency_us.{k}" for k in _LATENCY),
                                  *(f"checkpoint.OP.latency_us.{k}" for k in _LATENCY)),
    "iodl.metrics:reduce_results": ("result.window_s", "result.ranks", "result.hosts", "result.mounts.path",
                                    "result.mounts.ranks", "result.endpoints.url", "result.endpoints.ranks",
                                    "result.train.epochs_checked", "result.train.epochs_wrong"),
    # one rank's counters
    "iodl.metrics:RankResult.add": tuple(f"result.per_rank.{k}" for k in ("bytes", "ios", "cached_bytes",
                                                                           "cache_unmeasured_bytes", "errors",
                                                                           "max_ns", "t_start", "t_end", "retries",
                                                                           "ttfb_max_ns")),
    "iodl.s3dataset:open_s3_dataset": ("result.per_rank.lists", "result.per_rank.list_s"),   # the listing, timed
    "iodl.metrics:RankResult.note_open": ("result.per_rank.opens", "result.per_rank.open_max_ns"),
    "iodl.metrics:RankResult.note_close": ("result.per_rank.closes", "result.per_rank.close_max_ns"),
    "iodl.metrics:RankResult.note_open_wait": ("result.per_rank.open_wait_s",),
    "iodl.metrics:RankResult.note_start": ("result.per_rank.started_s",),
    "iodl.metrics:RankResult.note_process": tuple(f"result.per_rank.{k}" for k in ("startup_s", "cpu_s", "cores",
                                                                                    "max_rss_mb", "pss_mb")),
    "iodl.metrics:RankResult.scalars": ("result.per_rank.rank", "result.per_rank.host", "result.per_rank.mount"),
    "iodl.training:run_steps": ("result.per_rank.epochs_checked", "result.per_rank.epochs_wrong"),
    # the time series
    "iodl.metrics:series_block": tuple(f"result.series.{k}" for k in ("bucket_s", "mounts.path", "mounts.t_s",
                                                                       "mounts.bytes", "mounts.ios",
                                                                       "mounts.cached_bytes", "mounts.p99_us")),
    # the accelerator view
    "iodl.training:summarize_steps": tuple(f"result.train.{k}" for k in (
        "steps", "au", "au_threshold", "au_excluded_steps", "samples_per_s", "samples", "samples_in_window",
        "window_s", "consumed_bytes", "consumed_MBps", "data_wait_s_per_step", "barrier_wait_s_per_step",
        "compute_s_per_step", "checkpoint_s_per_step", *(f"step_time_s.{q}" for q in ("p50", "p90", "p99", "max")),
        *(f"per_rank_samples_per_s.{q}" for q in ("min", "median", "max", "sum")))),
    "iodl.reduce:emulator_cpu": tuple(f"result.train.emulator.{k}" for k in (
        "cpu_s_per_step", "cpu_s_per_sample", "loader_cpu_s_per_step", "client_cpu_share", "client_bound",
        "by_rank.rank", "by_rank.cpu_s_per_step", "by_rank.cpu_s_per_sample", "by_rank.loader_cpu_s_per_step")),
    "iodl.mlperf:summary": tuple(f"result.train.mlperf.{k}" for k in ("au", "samples_per_s", "au_threshold", "pass",
                                                                      "epochs")),
    "iodl.mlperf:run_category": ("result.train.mlperf.category",),
    # the page cache per node, and per mount and total
    "iodl.cache:node_view": tuple(f"result.nodes.{k}" for k in (
        "host", "ranks", "mem_total_bytes", "page_cache_bytes", "dataset_bytes", "predicted_hit_fraction",
        "mounts.mount", "mounts.path", "mounts.dataset_bytes", "mounts.resident_at_start_bytes",
        "mounts.resident_at_start_fraction", "mounts.predicted_hit_fraction", "mounts.copies")),
    "iodl.cache:_counted": tuple(f"result.nodes.{k}" for k in ("bytes", "cached_bytes", "cache_hit_fraction",
                                                                "mounts.bytes", "mounts.cached_bytes",
                                                                "mounts.cache_hit_fraction")),
    "iodl.cache:cache_blocks": tuple(f"result.cache.{k}" for k in ("predicted_hit_fraction",
                                                                    "resident_at_start_fraction", "dataset_bytes",
                                                                    "page_cache_bytes", "resident_at_start_note")),
    # sizing, validate
    "iodl.sizing:sizing_block": tuple(f"result.sizing.{k}" for k in ("demand_MBps_per_accelerator", "mounts.path",
                                                                      "mounts.storage_MBps", "mounts.accelerators_fed",
                                                                      "mounts.storage_bound", "mounts.demand_MBps",
                                                                      "demand_MBps", "accelerators_fed",
                                                                      "storage_bound")),
    "iodl.data.open:validate_block": tuple(f"result.validate.{k}" for k in ("shards", "bytes", "expected_bytes",
                                                                          "checked")),
    # checkpoints: each operation's figures, per mount and per rank
    "iodl.reduce:checkpoint_block": tuple(f"checkpoint.OP.{k}" for k in _OP),
    "iodl.reduce:checkpoint_rank": tuple(f"checkpoint.OP.per_rank.{k}" for k in (
        "rank", "host", "mount", "bytes", "duration_s", "bandwidth_MBps", "fsync_s", "round_s", "lists", "list_s")),
    "iodl.reduce:reduce_checkpoint": ("checkpoint.OP.mounts.path", "checkpoint.OP.mounts.ranks", "checkpoint.hosts",
                                      "checkpoint.checkpoint.write", "checkpoint.checkpoint.read",
                                      "result.checkpoint.write"),
    "iodl.mlperf:checkpoint_view": ("checkpoint.mlperf.category", "checkpoint.mlperf.reasons",
                                    "checkpoint.mlperf.read_gap_s"),
    # the KV-cache workload (iodl kvcache): a group of ranks' figures, the run's, each rank's
    "iodl.patterns.kvcache:kv_block": tuple(f"kvcache.KV.{k}" for k in _KV),
    "iodl.kvcache_mlperf:option_summary": tuple(f"kvcache.MLPERF.{k}" for k in (
        "option", "aggregated_read_bandwidth_gbps", "aggregated_write_bandwidth_gbps",
        "aggregated_avg_throughput_tokens_per_sec", "aggregated_storage_throughput_tokens_per_sec",
        "aggregated_p95_latency_ms", "aggregated_device_read_p95_ms", "aggregated_device_write_p95_ms", "rank_count",
        "trial_count", "partial_failure", "missing_files", "cpu_tier_ranks")),
    "iodl.cmd.kvcache:_result": ("kvcache.kvcache", "kvcache.mlperf", "kvcache.trials.kvcache",
                                 "kvcache.trials.mlperf", "kvcache.ranks", "kvcache.hosts"),
    "iodl.cmd.kvcache:_block": ("kvcache.KV.mounts.path", "kvcache.KV.mounts.ranks"),
    "iodl.cmd.kvcache:_gathered": tuple(f"kvcache.KV.per_rank.{k}" for k in (
        "rank", "host", "mount", "end_s", "tokens", "requests", "written_bytes", "read_bytes", "entries_written",
        "entry_reads", "evictions", "errors", "cpu_s", "max_rss_mb")),
}

# modules that write another tool's figures by that tool's definitions: DLIO's summary and
# per-rank files (docs/mlperf.md) share names such as "au" with iodl's, not their definitions
OTHER_TOOLS = {"iodl.dlio_output": "DLIO's own figures of the same steps (docs/mlperf.md)"}

# written as the run had them: the settings it ran with, names, what happened to it
AS_RUN = (
    *(f"result.{k}" for k in ("schema", "pattern", "engine", "direct", "iodepth", "block_size", "workload", "seed",
                              "duration_s", "ramp_s", "partial", "missing_ranks", "drop_caches", "train.shuffle",
                              "checkpoint.fsync", "checkpoint.roots", "checkpoint.endpoints", "checkpoint.part_size")),
    *(f"checkpoint.{k}" for k in ("schema", "pattern", "engine", "direct", "iodepth", "block_size", "ranks",
                                  "workload", "model", "subset", "full_ranks", "fsync", "drop_caches", "roots",
                                  "partial")),
    *(f"kvcache.{k}" for k in ("schema", "pattern", "option", "model", "users", "duration_s", "seed", "engine",
                               "direct", "block_size", "workers", "cpu_memory_gb", "max_concurrent_writes",
                               "multi_turn",
                               "prefill_only", "context", "max_requests", "trial_count", "root", "partial")),
)


def definitions() -> dict[str, str]:
    """Documented key path -> the function that defines it."""
    return {path: fn for fn, paths in DEFINED_BY.items() for path in paths}
