"""The result documents iodl writes and reads back: their schemas (typed below), loading, and
what an older file lacks. The keys and every figure in them are defined in docs/numbers.md (a test holds a real
result against that list); the figures themselves are made where they are defined once:
reduce.rates (rates, cache), training.summarize_steps (the accelerator view),
sizing.sizing_block, cache.node_view."""
from __future__ import annotations

import json
from typing import TypedDict

from .errors import UsageError

# The columns of a rank's step records (train-sync, infer-async: one row per step, seconds since the
# start barrier); checkpoint: seconds of the step spent writing an in-training checkpoint (after its barrier);
# cpu: CPU seconds the rank's whole process used from the previous step's end to this one's (every thread:
# the step loop, the reader, the open threads), loop_cpu: those of them the step loop's own thread used
STEP_FIELDS = ("t_start", "t_end", "data_wait", "compute", "barrier", "bytes", "samples", "epoch", "checkpoint",
               "cpu", "loop_cpu")

RESULT = "iodl.result/1"      # iodl read --out
SWEEP = "iodl.sweep/1"        # iodl sweep --out
CHECKPOINT = "iodl.checkpoint/1"   # iodl checkpoint --out
KVCACHE = "iodl.kvcache/1"    # iodl kvcache --out (docs/numbers.md, "KV cache")



# ---- the read result's schema (iodl.result/1), as types: docs/numbers.md explains every key, and
# tests/cmd/test_result_docs.py holds real results, these types and that page to one another.

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


def load(path: str, schemas: tuple[str, ...] = (RESULT, SWEEP)) -> dict:
    """A document of one of these schemas, or a one-line UsageError that names the file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:   # ValueError: bad JSON or bad UTF-8
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{path}: cannot read: {reason}") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema not in schemas:
        what = "an iodl read result" if schemas == (RESULT,) else "an iodl result"
        raise UsageError(f"{path}: not {what}" + (f" (schema {schema!r})" if schema else ""))
    return doc


def kind(doc: dict) -> str:
    return "sweep" if doc["schema"] == SWEEP else "result"


def describe(doc: dict) -> str:
    """'train-sync result', 'train-sync sweep': what errors call a document."""
    return f"{doc.get('pattern') or 'unknown-pattern'} {kind(doc)}"


def workload_name(doc: dict) -> str:
    w = doc.get("workload")
    return str((w.get("name") if isinstance(w, dict) else w) or "?")


_NAN = float("nan")
_FIGURES = {"bandwidth_MBps": _NAN, "iops": _NAN, "cache_hit_fraction": _NAN, "storage_bandwidth_MBps": _NAN,
            "errors": 0, "latency_us": {"p50": _NAN, "p90": _NAN, "p99": _NAN, "p999": _NAN, "max": _NAN}}
_TRAIN = {"steps": "?", "au": _NAN, "au_threshold": 0.9, "au_excluded_steps": "unknown", "samples_per_s": _NAN,
          "step_time_s": {"p50": _NAN, "p90": _NAN, "p99": _NAN, "max": _NAN}, "compute_s_per_step": _NAN,
          "data_wait_s_per_step": _NAN, "barrier_wait_s_per_step": _NAN}


def _filled(d, defaults: dict) -> dict:
    """d with every key of defaults present (recursively): an older file prints 'nan' where it has no figure."""
    out = dict(d) if isinstance(d, dict) else {}
    for k, v in defaults.items():
        out[k] = _filled(out.get(k), v) if isinstance(v, dict) else out.get(k, v)
    return out


def printable(doc: dict) -> dict:
    """A copy of a read result that iodl.report.print_result can show, whatever keys the file lacks."""
    total = _filled(doc.get("total"), _FIGURES)
    mounts = [_filled(m, dict(_FIGURES, path="?", ranks=[])) for m in doc.get("mounts") or []]
    if not mounts:
        mounts = [dict(total, path="total", ranks=[])]
    out = dict(doc, total=total, mounts=mounts)
    out.setdefault("pattern", "?")
    out.setdefault("engine", "?")
    out.setdefault("iodepth", "?")
    out.setdefault("ranks", len(doc.get("per_rank") or []) or sum(len(m["ranks"]) for m in mounts) or "?")
    # no "direct" key: show the cache columns only if the file measured the cache
    out.setdefault("direct", "cache_hit_fraction" not in (doc.get("total") or {}))
    if not isinstance(out.get("window_s"), (int, float)):
        out["window_s"] = total.get("window_s") if isinstance(total.get("window_s"), (int, float)) else _NAN
    if not isinstance(out.get("workload"), dict):
        out["workload"] = {"name": workload_name(doc)}
    if doc.get("train"):
        out["train"] = _filled(doc["train"], _TRAIN)
    return out


