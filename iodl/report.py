"""What rank 0 shows and writes: the rich tables and the result file (the result keys: docs/report.md, docs/numbers.md)."""
from __future__ import annotations

import json
import os

# rich is imported inside the functions: only rank 0 prints, and 72 ranks need not pay for it

from .result import RESULT as SCHEMA  # noqa: F401  (read.py writes it)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _row(name: str, ranks: str, s: dict, buffered: bool) -> list[str]:
    lat = s["latency_us"]
    cells = [name, ranks, f"{s['bandwidth_MBps']:,.1f}", f"{s['iops']:,.0f}",
             f"{lat['p50']:,.0f}", f"{lat['p99']:,.0f}", f"{lat['p999']:,.0f}", f"{lat['max']:,.0f}"]
    if buffered:
        predicted = s.get("cache", {}).get("predicted_hit_fraction")
        storage = s["storage_bandwidth_MBps"]
        cells += [_pct(s["cache_hit_fraction"]), _pct(predicted), "-" if storage is None else f"{storage:,.1f}"]
    return cells


def make_console():
    """The terminal's width; 80 columns when output is not a terminal (a pipe, mpirun's rank 0, a
    log); COLUMNS says otherwise in both cases. Tables are fitted to it by print_table."""
    from rich.console import Console

    return Console()


def print_table(console, title: str | None, columns: list[tuple[str, str]], rows: list, keep: int = 1,
                paths: int | None = None) -> None:
    """Print a table no wider than the console, with no cell cut.

    columns: (header, justify); rows: lists of cells (rich markup allowed), ("section", None) for
    a rule before the next row, or (cells, style). Headers wrap at their spaces when space is
    short. When the columns still do not fit side by side, the first `keep` columns (the row
    names) are repeated and the others go on in a second table (a third ...) rather than being
    squeezed and cut; a single cell wider than the console (a very long path) is folded onto more
    lines, never cut with an ellipsis.
    """
    from rich.table import Table
    from rich.text import Text

    if paths is not None:
        # column `paths` holds mount paths: when the table is too wide for them, the prefix they
        # share is printed once above it and each cell keeps what is left
        listed = [(r if isinstance(r, list) else r[0]) for r in rows]
        full = [c[paths] for c in listed if c != "section"]
        natural = sum(max([Text.from_markup(c[i]).cell_len for c in listed if c != "section"] + [len(h)])
                      for i, (h, _j) in enumerate(columns)) + 3 * len(columns) + 1
        prefix, short = short_paths(full)
        if prefix and natural > console.width:
            console.print(f"mounts under {prefix}", highlight=False, markup=False)
            names = dict(zip(full, short))

            def shorten(cells):
                return cells if cells == "section" else [names.get(c, c) if i == paths else c
                                                         for i, c in enumerate(cells)]
            rows = [shorten(r) if isinstance(r, list) else (shorten(r[0]), r[1]) for r in rows]

    cells = [r if isinstance(r, list) else r[0] for r in rows]
    cells = [c for c in cells if c != "section"]
    longest = [max([Text.from_markup(row[i]).cell_len for row in cells] + [0]) for i in range(len(columns))]
    natural = [max(w, len(h)) for w, (h, _j) in zip(longest, columns)]
    narrow = [max([w] + [len(word) for word in h.split()]) for w, (h, _j) in zip(longest, columns)]

    def width(cols, widths) -> int:   # a rich table with the default box: "│ a │ b │"
        return sum(widths[i] for i in cols) + 3 * len(cols) + 1

    def build(cols: list[int], with_title: bool) -> Table:
        # headers wrap first; spare columns go back to the headers that wrapped, widest need first
        widths = {i: narrow[i] for i in cols}
        spare = console.width - width(cols, widths)
        for i in sorted(cols, key=lambda i: natural[i] - narrow[i]):
            give = min(max(spare, 0), natural[i] - narrow[i])
            widths[i] += give
            spare -= give
        if spare < 0:   # one column alone is too wide: it folds (width None lets rich share it out)
            widths = {i: None if natural[i] > console.width // 2 else narrow[i] for i in cols}
        table = Table(title=title if with_title else None)
        for i in cols:
            header, justify = columns[i]
            table.add_column(header, justify=justify, overflow="fold", width=widths[i])
        for row in rows:
            row_cells, style = (row, None) if isinstance(row, list) else row
            if row_cells == "section":
                table.add_section()
            else:
                table.add_row(*[row_cells[i] for i in cols], style=style)
        return table

    head = list(range(min(keep, len(columns))))
    groups, group = [], []
    for i in range(len(head), len(columns)):
        if group and width(head + group + [i], narrow) > console.width:
            groups.append(group)
            group = []
        group.append(i)
    groups.append(group)
    for n, group in enumerate(groups):
        console.print(build(head + group, n == 0))


def short_paths(paths: list[str]) -> tuple[str, list[str]]:
    """('/mnt/data/', ['a', 'b']) for ['/mnt/data/a', '/mnt/data/b']: the prefix mounts share,
    printed once above a table, and what is left of each; ('', paths) when there is nothing to factor."""
    distinct = sorted(set(paths))
    if len(distinct) < 2 or not all(p.startswith("/") for p in distinct):
        return "", list(paths)
    common = os.path.commonpath(distinct)
    if common in distinct:          # nested roots (/a and /a/b): keep the last part of the shorter
        common = os.path.dirname(common)
    if common in ("/", ""):
        return "", list(paths)
    prefix = common.rstrip("/") + "/"
    return prefix, [p[len(prefix):] for p in paths]


def print_result(result: dict, console=None) -> None:
    console = console or make_console()
    buffered = not result["direct"]
    title = (f"iodl {result['pattern']}: {result['ranks']} rank(s), engine {result['engine']}, "
             f"{'buffered' if buffered else 'O_DIRECT'}, iodepth {result['iodepth']}, "
             f"window {result['window_s']:.2f} s")
    columns = [("mount", "left"), ("ranks", "right"), ("MB/s", "right"), ("IOPS", "right"), ("p50 µs", "right"),
               ("p99 µs", "right"), ("p99.9 µs", "right"), ("max µs", "right")]
    if buffered:
        columns += [("cache hit", "right"), ("predicted", "right"), ("storage MB/s", "right")]
    mounts = result["mounts"]
    rows = [_row(m["path"], _ranks(m["ranks"]), m, buffered) for m in mounts]
    if len(mounts) > 1:
        rows += [("section", None), (_row("total", str(result["ranks"]), result["total"], buffered), "bold")]
    print_table(console, title, columns, rows, paths=0)
    for m in (mounts if len(mounts) > 1 else []) + [result["total"]]:
        if m.get("opens"):   # small files: the opens can bound an epoch (docs/numbers.md)
            o = m["open_latency_us"]
            c = m.get("close_latency_us") or {"p50": 0.0, "p99": 0.0}
            console.print(f"{'opens' if m is result['total'] else m['path'] + ': opens'}: {m['opens']:,} "
                          f"({m['opens_per_s']:,.1f}/s), open latency p50 {o['p50']:,.1f} µs, p99 {o['p99']:,.1f} µs, "
                          f"max {o['max']:,.1f} µs; readers waited {m.get('open_wait_s', 0.0):,.3f} s for opens; "
                          f"{m.get('closes', 0):,} closes, p50 {c['p50']:,.1f} µs, p99 {c['p99']:,.1f} µs",
                          highlight=False, markup=False)
    if buffered and result["total"].get("cache_hit_fraction", 0.0) is None:
        console.print("cache hit, storage MB/s: not measurable here (the kernel does not account these reads "
                      "to the reader: NFS, FUSE, overlay, or no task I/O accounting); '-' is not a zero")
    if result.get("nodes"):
        _print_nodes(result["nodes"], console)
    if result.get("train"):
        _print_train(result["train"], result["pattern"], console)
    if result.get("validate"):
        v = result["validate"]
        console.print(f"validate: {v['shards']} shards, {v['bytes']} of {v['expected_bytes']} bytes read, "
                      f"checked: {v['checked']} (regular files, manifest sizes, whole reads; no framing/CRC)")
    if result.get("sizing"):
        _print_sizing(result["sizing"], result["workload"].get("name", "?"), console)
    if result.get("partial"):
        console.print("[yellow]stopped early by a signal: the result is partial[/]")
    if result["total"]["errors"]:
        console.print(f"[red]{result['total']['errors']} read error(s)[/]")


def _print_train(t: dict, pattern: str, console) -> None:
    au = f"{100 * t['au']:.1f}%"
    au = f"[green]{au}[/]" if t["au"] >= t["au_threshold"] else f"[red]{au}[/]"
    columns = [(c, "right") for c in ("steps/rank", "AU", "samples/s", "step p50 s", "step p99 s", "compute s",
                                      "data wait s", "barrier wait s")]
    row = [str(t["steps"]), au, f"{t['samples_per_s']:,.1f}", f"{t['step_time_s']['p50']:.4f}",
           f"{t['step_time_s']['p99']:.4f}", f"{t['compute_s_per_step']:.4f}",
           f"{t['data_wait_s_per_step']:.4f}", f"{t['barrier_wait_s_per_step']:.4f}"]
    print_table(console, f"{pattern}: accelerator view (AU leaves out: {t['au_excluded_steps']})", columns, [row],
                keep=0)
    spread = t.get("per_rank_samples_per_s")
    if spread:
        total = f", sum {spread['sum']:,.1f} (the total: every rank over the same window)" if "sum" in spread else ""
        console.print(f"per-rank samples/s: min {spread['min']:,.1f}, median {spread['median']:,.1f}, "
                      f"max {spread['max']:,.1f}{total}")
    if "consumed_MBps" in t:   # (older result files have no such figure)
        console.print(f"window {t['window_s']:.2f} s (the table's): consumed {t['consumed_MBps']:,.1f} MB/s, the "
                      f"samples the accelerators took; MB/s above is what reads completed in it (read-ahead included)")
    m = t.get("mlperf")
    if m:
        verdict = "[green]pass[/]" if m["pass"] else "[red]fail[/]"
        console.print(f"MLPerf Storage's view: AU {100 * m['au']:.1f}% ({verdict} at {100 * m['au_threshold']:.0f}%; "
                      f"compute / run time per rank and epoch, first step left out), {m['samples_per_s']:,.1f} "
                      "samples/s (first step included)")
    if "epochs_checked" in t:
        wrong = f", [red]{t['epochs_wrong']} NOT[/]" if t["epochs_wrong"] else ""
        console.print(f"order: shuffle {t['shuffle']}; {t['epochs_checked']} finished epoch share(s) checked, "
                      f"every sample taken exactly once{wrong}")


def _print_nodes(nodes: list[dict], console) -> None:
    """Page cache per host: what it could hold, what it held, what it was predicted to serve, and did."""
    columns = [("host", "left"), ("mount", "left"), ("RAM GB", "right"), ("page cache GB", "right"),
               ("dataset GB", "right"), ("at start", "right"), ("predicted", "right"), ("cache hit", "right")]
    rows = [[h["host"], m["path"], f"{h['mem_total_bytes'] / 1e9:,.1f}", f"{h['page_cache_bytes'] / 1e9:,.1f}",
             f"{m['dataset_bytes'] / 1e9:,.3f}", _pct(m["resident_at_start_fraction"]),
             _pct(m["predicted_hit_fraction"]), _pct(m["cache_hit_fraction"])] for h in nodes for m in h["mounts"]]
    print_table(console, "page cache per node (predicted = min(1, page cache / dataset bytes the node reads))",
                columns, rows, keep=2, paths=1)


def _print_sizing(sizing: dict, workload: str, console) -> None:
    demand = sizing["demand_MBps_per_accelerator"]
    title = (f"sizing: one {workload} accelerator at full utilisation reads {demand:,.1f} MB/s "
             "(batch x mean sample / compute time)")
    rows = []
    for m in sizing["mounts"]:
        # not storage-bound: the ranks never waited, the storage could have given more
        if m["storage_MBps"] is None:
            fed = "- (the storage's share of the bytes was not measurable)"
        elif m["storage_MBps"] <= 0:
            fed = "- (every byte came from the page cache)"
        elif m["storage_bound"]:
            fed = f"{m['accelerators_fed']}"
        else:
            fed = f">= {m['accelerators_fed']} (not storage-bound)"
        rows.append([m["path"], "-" if m["storage_MBps"] is None else f"{m['storage_MBps']:,.1f}", fed])
    print_table(console, title, [("mount", "left"), ("storage MB/s", "right"), ("accelerators fed", "right")], rows,
                paths=0)


def _ranks(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) if len(ranks) <= 6 else f"{len(ranks)} ranks"


def check_output_path(flag: str, path: str) -> None:
    """A UsageError unless `path` can be written as an output file (checked before any I/O)."""
    from .errors import UsageError

    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory (name a file)")
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: directory {parent} is not writable")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: exists and is not a regular file")


def write_text_atomically(path: str, write) -> None:
    """write(f) into an exclusively created temporary file beside `path`, renamed over it when
    complete: a reader never sees half a file, and no temporary file is left on any failure."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", newline="") as f:
            write(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_result(result: dict, path: str) -> None:
    def dump(f):
        json.dump(result, f, indent=2)
        f.write("\n")
    write_text_atomically(path, dump)
