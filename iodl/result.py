"""The result documents iodl writes and reads back: their schemas' names (the read result's keys
are typed in iodl/result_types.py), loading, and what an older file lacks. The keys and every
figure in them are defined in docs/numbers.md (a test holds a real result against that list); the
figures themselves are made where they are defined once: reduce.rates (rates, cache),
training.summarize_steps (the accelerator view), sizing.sizing_block, cache.node_view."""
from __future__ import annotations

import json

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


