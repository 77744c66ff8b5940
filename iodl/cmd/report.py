"""`iodl report FILE...`: print result files again, write a run's time series as CSV, or plot them."""
from __future__ import annotations

import json
import os

HELP = "print result files again, write their time series as CSV, or plot them"

RESULT = "iodl.result/1"
SWEEP = "iodl.sweep/1"


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="iodl.result/1 (iodl read --out) or iodl.sweep/1 (iodl sweep --out) files")
    p.add_argument("--csv", metavar="OUT",
                   help="write the per-second series of one read result as CSV (see docs/report.md)")
    p.add_argument("--plot", metavar="OUT", help="draw the files to OUT.png or OUT.html (one self-contained page); "
                                                   "several files of the same kind are overlaid")


def load(path: str) -> dict:
    """A result or sweep document, or a one-line UsageError that names the file."""
    from ..errors import UsageError

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:   # ValueError: bad JSON or bad UTF-8
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{path}: cannot read: {reason}") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema not in (RESULT, SWEEP):
        raise UsageError(f"{path}: not an iodl result" + (f" (schema {schema!r})" if schema else ""))
    return doc


def kind(doc: dict) -> str:
    return "sweep" if doc["schema"] == SWEEP else "result"


def describe(doc: dict) -> str:
    """'train-sync result', 'train-sync sweep': what errors call a document."""
    return f"{doc.get('pattern') or 'unknown-pattern'} {kind(doc)}"


def workload_name(doc: dict) -> str:
    w = doc.get("workload")
    return str((w.get("name") if isinstance(w, dict) else w) or "?")


def run(args) -> int:
    from ..errors import UsageError
    from ..report import make_console

    # everything that can be wrong is found before anything is printed or written
    docs = [(path, load(path)) for path in args.files]
    if args.plot:
        from ..plot import check_path, require_matplotlib

        check_path(args.plot)
        require_matplotlib()
        kinds = {kind(d) for _p, d in docs}
        if len(kinds) > 1:
            raise UsageError("--plot overlays files of one kind: give read results or sweeps, not both")
    if args.csv:
        if len(docs) != 1 or kind(docs[0][1]) != "result":
            raise UsageError("--csv writes the time series of one read result: give exactly one iodl.result/1 file")
        if not (docs[0][1].get("series") or {}).get("mounts"):
            raise UsageError(f"{docs[0][0]}: no time series in this result (written by an older iodl?)")

    console = make_console()
    for path, doc in docs:
        if len(docs) > 1:
            console.rule(os.path.basename(path))
        if kind(doc) == "sweep":
            _print_sweep(path, doc, console)
        else:
            _print_read(path, doc, console)

    if args.csv:
        from ..series import write_csv

        write_csv(docs[0][1], args.csv)
        console.print(f"time series written to {args.csv}")
    if args.plot:
        from ..plot import plot

        plot(docs, args.plot)
        console.print(f"plot written to {args.plot}")
    return 0


def _print_read(path: str, doc: dict, console) -> None:
    from ..errors import UsageError
    from ..report import print_result

    try:
        print_result(_printable(doc), console)
    except (KeyError, TypeError) as exc:   # a key this iodl's table needs and the file lacks
        raise UsageError(f"{path}: cannot show this result: missing or odd key {exc}") from None


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


def _printable(doc: dict) -> dict:
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


def _print_sweep(path: str, doc: dict, console) -> None:
    """The table `iodl sweep` printed (iodl.sweep.print_sweep), from whatever the file holds."""
    from dataclasses import fields

    from ..errors import UsageError
    from ..sweep import Point, print_sweep

    names = [f.name for f in fields(Point)]
    defaults = {"au": _NAN, "samples_per_s": _NAN, "bandwidth_MBps": _NAN, "storage_bandwidth_MBps": _NAN,
                "result": None, "exit_code": 0}
    points = sorted((p for p in doc.get("points") or [] if isinstance(p, dict) and isinstance(p.get("ranks"), int)),
                    key=lambda p: p["ranks"])   # the linear reference starts from the smallest rank count
    w = doc.get("workload")
    printable = dict(doc, workload=w if isinstance(w, dict) else {"name": str(w or "?")},
                     points=[{k: p.get(k, defaults.get(k)) for k in names} for p in points])
    for key, value in (("pattern", "?"), ("engine", "?"), ("launch", "?"), ("au_threshold", 0.9),
                       ("demand_MBps_per_accelerator", None)):
        printable.setdefault(key, value)
    try:
        print_sweep(printable, console)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: cannot show this sweep: missing or odd key {exc}") from None
