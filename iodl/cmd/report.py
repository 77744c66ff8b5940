"""`iodl report FILE...`: print result files again, write a run's time series as CSV, or plot them."""
from __future__ import annotations

import json
import os
from dataclasses import fields

from ..errors import UsageError
from ..plot import check_path, plot, require_matplotlib
from ..report import make_console, print_result
from ..result import kind, load, printable
from ..series import write_csv
from ..sweep import Point, print_sweep


def add_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="iodl.result/1 (iodl read --out) or iodl.sweep/1 (iodl sweep --out) files")
    p.add_argument("--detail", action="store_true",
                   help="read results: print every table (latency percentiles, opens, queue depth, page cache per "
                        "node, per rank)")
    p.add_argument("--csv", metavar="OUT",
                   help="write the per-second series of one read result as CSV (see docs/report.md)")
    p.add_argument("--plot", metavar="OUT", help="draw the files to OUT.png or OUT.html (one self-contained page); "
                                                   "several files of the same kind are overlaid")


def run(comm, args) -> int:
    # everything that can be wrong is found before anything is printed or written
    docs = [(path, load(_json_file(path))) for path in args.files]
    if args.plot:
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
            _print_read(path, doc, console, args.detail)

    if args.csv:
        write_csv(docs[0][1], args.csv)
        console.print(f"time series written to {args.csv}")
    if args.plot:
        plot(docs, args.plot)
        console.print(f"plot written to {args.plot}")
    return 0


def _json_file(path: str) -> str:
    """path, or a one-line UsageError when it is not JSON at all (say, a CSV or a log given by mistake)."""

    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except OSError:
        pass   # load() says why it cannot be read
    except ValueError:   # bad JSON or bad UTF-8
        raise UsageError(f"{path}: not a JSON result file (iodl read --out and iodl sweep --out write one)") from None
    return path


def _print_read(path: str, doc: dict, console, detail: bool) -> None:
    try:
        print_result(printable(doc), console, detail)
    except (KeyError, TypeError) as exc:   # a key this iodl's table needs and the file lacks
        raise UsageError(f"{path}: cannot show this result: missing or odd key {exc}") from None


def _print_sweep(path: str, doc: dict, console) -> None:
    """The table `iodl sweep` printed (iodl.sweep.print_sweep), from whatever the file holds."""

    names = [f.name for f in fields(Point)]
    nan = float("nan")
    defaults = {"au": nan, "samples_per_s": nan, "bandwidth_MBps": nan, "storage_bandwidth_MBps": nan,
                "result": None, "exit_code": 0}
    points = sorted((p for p in doc.get("points") or [] if isinstance(p, dict) and isinstance(p.get("ranks"), int)),
                    key=lambda p: p["ranks"])   # the linear reference starts from the smallest rank count
    w = doc.get("workload")
    shown = dict(doc, workload=w if isinstance(w, dict) else {"name": str(w or "?")},
                 points=[{k: p.get(k, defaults.get(k)) for k in names} for p in points])
    for key, value in (("pattern", "?"), ("engine", "?"), ("launch", "?"), ("au_threshold", 0.9),
                       ("demand_MBps_per_accelerator", None)):
        shown.setdefault(key, value)
    try:
        print_sweep(shown, console)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: cannot show this sweep: missing or odd key {exc}") from None
