"""`iodl compare A.json B.json`: two results (or two sweeps) side by side, with B/A."""
from __future__ import annotations

import math
import os

from rich.table import Table

from ..errors import UsageError
from ..report import make_console
from ..result import describe, kind, load, workload_name

# (label, key path in a total/mount entry, format); cache rows only when either run was buffered
FIGURES = [("MB/s", ("bandwidth_MBps",), ",.1f"), ("IOPS", ("iops",), ",.0f"),
           ("p50 µs", ("latency_us", "p50"), ",.0f"), ("p99 µs", ("latency_us", "p99"), ",.0f"),
           ("p99.9 µs", ("latency_us", "p999"), ",.0f")]
CACHE = [("cache hit", ("cache_hit_fraction",), "%"), ("storage MB/s", ("storage_bandwidth_MBps",), ",.1f")]
TRAIN = [("AU", ("au",), "%"), ("samples/s", ("samples_per_s",), ",.1f")]
POINT = [("AU", ("au",), "%"), ("samples/s", ("samples_per_s",), ",.1f"), ("MB/s", ("bandwidth_MBps",), ",.1f"),
         ("storage MB/s", ("storage_bandwidth_MBps",), ",.1f")]


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A.json", help="the reference result (iodl read --out or iodl sweep --out)")
    p.add_argument("b", metavar="B.json", help="the result to hold against A; the B/A column is B divided by A")


def run(comm, args) -> int:
    a, b = load(args.a), load(args.b)
    if kind(a) != kind(b) or a.get("pattern") != b.get("pattern"):
        raise UsageError(f"cannot compare a {describe(a)} with a {describe(b)}")
    name_a, name_b = os.path.basename(args.a), os.path.basename(args.b)
    table = Table(title=f"iodl compare ({a.get('pattern', '?')} {kind(a)}): A = {name_a}, B = {name_b}")
    # folded, never cut: a long mount path wraps onto more lines within the console's width
    table.add_column("", justify="left", overflow="fold")
    for col in ("A", "B", "B/A"):
        table.add_column(col, justify="right", overflow="fold")
    notes = []
    _setup_rows(table, a, b)
    if kind(a) == "sweep":
        _sweep_rows(table, a, b)
    else:
        notes = _read_rows(table, a, b)
    console = make_console()
    console.print(table)
    for note in notes:
        console.print(note)
    return 0


def _setup_rows(table, a: dict, b: dict) -> None:
    """What each run was: the reader sees at a glance which knob differs."""
    def mode(d):
        return "?" if "direct" not in d else ("O_DIRECT" if d["direct"] else "buffered")

    rows = [("workload", workload_name(a), workload_name(b)), ("engine", a.get("engine", "?"), b.get("engine", "?"))]
    if kind(a) == "result":
        rows += [("mode", mode(a), mode(b)), ("iodepth", a.get("iodepth", "?"), b.get("iodepth", "?")),
                 ("ranks", a.get("ranks", "?"), b.get("ranks", "?")),
                 ("window s", _fmt(a.get("window_s"), ".2f"), _fmt(b.get("window_s"), ".2f"))]
    for label, x, y in rows:
        table.add_row(label, str(x), str(y), "", style="dim")


def _read_rows(table, a: dict, b: dict) -> list[str]:
    figures = FIGURES + (CACHE if not (a.get("direct") and b.get("direct")) else [])
    _section(table, "total", a.get("total"), b.get("total"), figures)
    notes = []
    ma, mb = a.get("mounts") or [], b.get("mounts") or []
    if len(ma) == len(mb):
        if len(ma) > 1:   # with one mount its rows would repeat the total
            for i, (x, y) in enumerate(zip(ma, mb)):
                pa, pb = x.get("path", "?"), y.get("path", "?")
                _section(table, f"mount {i}: {pa}" + (f" | {pb}" if pb != pa else ""), x, y, figures)
    else:
        notes.append(f"A has {len(ma)} mount(s), B has {len(mb)}: mounts are matched by position, "
                     "so only the totals are compared")
    if a.get("train") or b.get("train"):
        _section(table, "accelerator view", a.get("train"), b.get("train"), TRAIN)
    return notes


def _sweep_rows(table, a: dict, b: dict) -> None:
    pa = {p["ranks"]: p for p in a.get("points") or [] if isinstance(p, dict) and "ranks" in p}
    pb = {p["ranks"]: p for p in b.get("points") or [] if isinstance(p, dict) and "ranks" in p}
    for r in sorted(set(pa) | set(pb)):
        _section(table, f"{r} rank(s)", pa.get(r), pb.get(r), POINT)
    table.add_section()
    table.add_row("accelerators supported", str(a.get("accelerators_supported", "—")),
                  str(b.get("accelerators_supported", "—")),
                  _ratio(a.get("accelerators_supported"), b.get("accelerators_supported")), style="bold")


def _section(table, title: str, x: dict | None, y: dict | None, figures) -> None:
    table.add_section()
    table.add_row(title, "", "", "", style="bold")
    for label, path, spec in figures:
        va, vb = _get(x, path), _get(y, path)
        table.add_row("  " + label, _fmt(va, spec), _fmt(vb, spec), _ratio(va, vb))


def _get(d, path):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _fmt(x, spec: str) -> str:
    if not _num(x):
        return "—"
    return f"{100 * x:.1f}%" if spec == "%" else format(x, spec)


def _ratio(a, b) -> str:
    # no ratio to a zero: a direct run's cache hit of 0 has no meaningful "B times A"
    return f"{b / a:.3f}" if _num(a) and _num(b) and a != 0 else "—"
