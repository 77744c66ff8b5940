"""What rank 0 shows and writes: the rich tables and the result file (the result keys: docs/report.md, docs/numbers.md)."""
from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .cache import RAM_MULTIPLE
from .histogram import DEPTH_LABELS
from .sizing import meets, storage_MBps

# rich at the top: this is the printing side, which of a run's ranks only rank 0 imports (iodl/cmd/read.py)


# a measured cache-hit fraction above what a dataset of RAM_MULTIPLE x RAM leaves to the page cache
# in steady state (MLPerf Storage's rule): the run measured memory more than the storage
CACHE_SAYS_LITTLE = 1 / RAM_MULTIPLE


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _share(v: float) -> str:
    """A threshold as it was set: 90%, 87.5%."""
    return f"{100 * v:.4g}%"


def make_console():
    """The terminal's width; 80 columns when output is not a terminal (a pipe, mpirun's rank 0, a
    log); COLUMNS says otherwise in both cases. Tables are fitted to it by print_table."""
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

    def split(head: list[int]) -> list[list[int]]:
        groups, group = [], []
        for i in range(len(head), len(columns)):
            if group and width(head + group + [i], narrow) > console.width:
                groups.append(group)
                group = []
            group.append(i)
        return groups + [group]

    head = list(range(min(keep, len(columns))))
    groups = split(head)
    if len(groups) > 1 and not head:   # split with nothing repeated, a part could be one lone column
        head = [0]
        groups = split(head)
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


def print_result(result: dict, console=None, detail: bool = False) -> None:
    """The answer first (does the storage keep the accelerators busy, how many each mount feeds,
    its bandwidth against the demand, whether the page cache did the work), then one table per
    concern; `detail` adds the rest (latency percentiles, opens, queue depth, per node, per rank).
    Every figure is printed as the result holds it (docs/report.md)."""
    console = console or make_console()
    console.print(_heading(result), style="bold", highlight=False, markup=False)
    for line in _answer(result):
        console.print(line, highlight=False)
    if result.get("sizing"):
        _print_sizing(result, console)
    if result.get("train"):
        _print_train(result["train"], result["pattern"], console)
    _print_reads(result, console)
    _print_endpoints(result, console)
    if not result["direct"]:
        _print_cache(result, console)
    if not detail:
        console.print("more with --detail: latency percentiles, opens, queue depth, page cache per node, per-rank "
                      "figures", style="dim", highlight=False, markup=False)
        return
    _print_latency(result, console)
    _print_opens(result, console)
    _print_depth(result, console)
    if result.get("nodes"):
        _print_nodes(result["nodes"], console)
    if result.get("per_rank"):
        _print_ranks(result["per_rank"], console)
    t = result.get("train") or {}
    if "epochs_checked" in t and not t["epochs_wrong"]:   # (a wrong one is among the answer's lines)
        console.print(f"order: shuffle {escape(str(t['shuffle']))}; {t['epochs_checked']} finished epoch share(s) "
                      "checked, every sample taken exactly once", highlight=False)


def _heading(result: dict) -> str:
    workload = (result.get("workload") or {}).get("name", "?")
    return (f"iodl {result['pattern']}, workload {workload}: {result['ranks']} rank(s), engine {result['engine']}, "
            f"{'O_DIRECT' if result['direct'] else 'buffered'}, iodepth {result['iodepth']}, "
            f"window {result['window_s']:.2f} s")


def _answer(result: dict) -> list[str]:
    """The lines that answer the run's question, in words, before any table."""
    lines = []
    if result.get("partial"):
        lines.append("[yellow]stopped early by a signal: the result is partial[/]")
    if result["total"]["errors"]:
        lines.append(f"[red]{result['total']['errors']} read error(s)[/]")
    if (result.get("train") or {}).get("epochs_wrong"):   # never expected: the order's own check failed
        t = result["train"]
        lines.append(f"[red]order: of {t['epochs_checked']} finished epoch share(s) checked, {t['epochs_wrong']} did "
                     f"NOT take every sample exactly once[/] (shuffle {escape(str(t['shuffle']))})")
    t, sizing, total = result.get("train"), result.get("sizing"), result["total"]
    if t and result["pattern"] == "train-sync":   # ranks in step: AU against the threshold is the answer
        au, threshold = t["au"], t["au_threshold"]
        verdict = (f"[green]yes[/]: AU {_pct(au)} ≥ {_share(threshold)}" if meets(au, threshold) else
                   f"[red]no[/]: AU {_pct(au)} < {_share(threshold)} (a step waited "
                   f"{t['data_wait_s_per_step']:.4f} s for data, {t['barrier_wait_s_per_step']:.4f} s at the "
                   "barrier)")
        lines.append(f"Does the storage keep the {result['ranks']} accelerator(s) busy? {verdict}")
    if t:
        m = t.get("mlperf")
        if m:
            passed = "[green]pass[/]" if m["pass"] else "[red]fail[/]"
            lines.append(f"MLPerf Storage's view: AU {_pct(m['au'])}, {passed} at {_share(m['au_threshold'])} "
                         f"(compute / run time per rank and epoch, first step left out); "
                         f"{m['samples_per_s']:,.1f} samples/s (first step included)")
        emu = t.get("emulator")
        if emu:
            lines.append(_emulator_line(emu, result))
        spread = t.get("per_rank_samples_per_s")
        if spread:
            lines.append(f"per-rank samples/s: min {spread['min']:,.1f}, median {spread['median']:,.1f}, max "
                         f"{spread['max']:,.1f}" + (f"; their sum {spread['sum']:,.1f} is the run's samples/s"
                                                     if "sum" in spread else ""))
    elif result.get("validate"):
        v = result["validate"]
        lines.append(f"validate: {v['shards']} shards, {v['bytes']:,} of {v['expected_bytes']:,} bytes read, "
                     f"checked: {v['checked']} (regular files, manifest sizes, whole reads; no framing/CRC)")
    lines.append(_bandwidth_line(result, t, sizing))
    if not result["direct"]:
        hit = total.get("cache_hit_fraction", 0.0)
        if hit is None:
            lines.append("cache hit, storage MB/s: not measurable here (the kernel does not account these reads "
                         "to the reader: NFS, FUSE, overlay, or no task I/O accounting); '-' is not a zero")
        elif hit > CACHE_SAYS_LITTLE:
            predicted = (total.get("cache") or {}).get("predicted_hit_fraction")
            lines.append(f"[yellow]warning:[/] {_pct(hit)} of the bytes read came from the page cache (predicted "
                         f"{_pct(predicted)}), more than the {_share(CACHE_SAYS_LITTLE)} a dataset of {RAM_MULTIPLE}x "
                         "RAM leaves to it (MLPerf Storage's rule): this run says little about the storage. "
                         "Read with --direct, or a larger dataset (iodl datasize)")
    return lines


def _emulator_line(emu: dict, result: dict) -> str:
    """The emulator's own CPU, and in words when it, not the storage, held AU down."""
    cost = (f"{emu['cpu_s_per_step'] * 1e3:,.2f} ms per step per rank ({emu['cpu_s_per_sample'] * 1e6:,.0f} µs per "
            f"sample; loader {emu['loader_cpu_s_per_step'] * 1e3:,.2f} ms), {_pct(emu['client_cpu_share'])} of the "
            "busiest host's CPU while the accelerators compute")
    if not emu["client_bound"]:
        return f"emulator CPU: {cost}"
    why = ("there was no storage (--engine null): what held AU down is the emulator's own cost on this client"
           if result["engine"] == "null" and not emu["client_cpu_share"] >= 1.0 else
           "its own work does not fit in a step on this host's cores: fewer ranks per client, or more cores")
    return f"[yellow]the client, not the storage, limits AU[/]: emulator CPU {cost}; {why}"


def _bandwidth_line(result: dict, t: dict | None, sizing: dict | None) -> str:
    """The storage's bandwidth against what the accelerators ask; unless the ranks ran in step
    (train-sync, whose answer is the AU), how many accelerators that storage feeds."""
    total = result["total"]
    storage = storage_MBps(total)
    said = (f"the storage delivered {storage:,.1f} MB/s" if storage is not None
            else "the storage's share is not measurable")
    line = f"Bandwidth: {said} (of {total['bandwidth_MBps']:,.1f} MB/s read, {total['iops']:,.0f} IOPS)"
    each = sizing and f"{sizing['demand_MBps_per_accelerator']:,.1f} MB/s"
    if t:
        took = (f"took {t['consumed_MBps']:,.1f} MB/s" if "consumed_MBps" in t else "")   # (older files lack it)
        ask = (f"ask {sizing['demand_MBps']:,.1f} MB/s at full AU ({each} each)"
               if sizing and "demand_MBps" in sizing else "")
        if took or ask:
            line += "; the accelerators " + " and ".join(x for x in (took, ask) if x)
    elif sizing:
        line += f"; one {(result.get('workload') or {}).get('name', '?')} accelerator asks {each} at full AU"
    fed = sizing.get("accelerators_fed") if sizing else None
    if fed is not None and result["pattern"] != "train-sync":
        line += f": this feeds {'' if sizing['storage_bound'] else '>= '}{fed}"
    return line


def _print_sizing(result: dict, console) -> None:
    sizing, steps = result["sizing"], bool(result.get("train"))
    title = "accelerators each mount feeds at full AU"
    # the ranks are the accelerators of a step pattern: what they ask beside what the storage gave
    # (a result written before sizing held the demand has no such column)
    demand = steps and all("demand_MBps" in m for m in sizing["mounts"])
    columns = [("mount", "left"), ("ranks", "right"), ("demand MB/s", "right"), ("storage MB/s", "right"),
               ("accelerators fed", "right")]
    shown = [0, 1, 2, 3, 4] if demand else [0, 1, 3, 4] if steps else [0, 3, 4]

    def row(name, ranks, m):
        cells = [name, ranks, f"{m['demand_MBps']:,.1f}" if demand else "",
                 "-" if m["storage_MBps"] is None else f"{m['storage_MBps']:,.1f}", _fed(m)]
        return [cells[i] for i in shown]

    rows = [row(s["path"], _ranks(m["ranks"]), s) for s, m in zip(sizing["mounts"], result["mounts"])]
    if len(rows) > 1 and "accelerators_fed" in sizing:
        rows += [("section", None), (row("total", str(result["ranks"]), dict(sizing, storage_MBps=storage_MBps(
            result["total"]))), "bold")]
    print_table(console, title, [columns[i] for i in shown], rows, paths=0)


def _fed(m: dict) -> str:
    """A mount's (or the run's) count: a measurement when storage-bound, else a lower bound."""
    if m["accelerators_fed"] is None or m["storage_MBps"] is None:
        return "- (not measurable)"
    if m["storage_MBps"] <= 0:
        return "- (all from page cache)"
    return f"{m['accelerators_fed']}" if m["storage_bound"] else f">= {m['accelerators_fed']} (not storage-bound)"


def _print_train(t: dict, pattern: str, console) -> None:
    au = f"[green]{_pct(t['au'])}[/]" if meets(t["au"], t["au_threshold"]) else f"[red]{_pct(t['au'])}[/]"
    columns = [(c, "right") for c in ("steps per rank", "AU", "samples/s", "step p50 s", "step p99 s", "compute s",
                                      "data wait s", "barrier wait s")]
    row = [str(t["steps"]), au, f"{t['samples_per_s']:,.1f}", f"{t['step_time_s']['p50']:.4f}",
           f"{t['step_time_s']['p99']:.4f}", f"{t['compute_s_per_step']:.4f}",
           f"{t['data_wait_s_per_step']:.4f}", f"{t['barrier_wait_s_per_step']:.4f}"]
    print_table(console, f"{pattern}: accelerator view (AU leaves out: {t['au_excluded_steps']})", columns, [row],
                keep=0)


def _per_mount(result: dict, cells) -> list:
    """Rows of cells(block) per mount, and a bold total row when there are several mounts."""
    mounts = result["mounts"]
    rows = [[m["path"], *cells(m)] for m in mounts]
    if len(mounts) > 1:
        rows += [("section", None), (["total", *cells(result["total"])], "bold")]
    return rows


def _print_reads(result: dict, console) -> None:
    columns = [("mount", "left"), ("ranks", "right"), ("MB/s", "right"), ("IOPS", "right"), ("p50 µs", "right"),
               ("p99 µs", "right")]
    ranks = {id(m): _ranks(m["ranks"]) for m in result["mounts"]} | {id(result["total"]): str(result["ranks"])}
    rows = _per_mount(result, lambda b: [ranks[id(b)], f"{b['bandwidth_MBps']:,.1f}", f"{b['iops']:,.0f}",
                                         f"{b['latency_us']['p50']:,.0f}", f"{b['latency_us']['p99']:,.0f}"])
    print_table(console, "reads per mount", columns, rows,
                paths=0)


def _print_endpoints(result: dict, console) -> None:
    """An s3 run over several endpoints: each one's figures (docs/s3.md)."""
    endpoints = result.get("endpoints") or []
    if len(endpoints) < 2:
        return
    columns = [("endpoint", "left"), ("ranks", "right"), ("MB/s", "right"), ("GET/s", "right"), ("p50 µs", "right"),
               ("p99 µs", "right"), ("ttfb p50 µs", "right"), ("retries", "right"), ("errors", "right"),
               ("LISTs", "right"), ("LIST/s", "right")]
    rows = [[e["url"], _ranks(e["ranks"]), f"{e['bandwidth_MBps']:,.1f}", f"{e['iops']:,.0f}",
             f"{e['latency_us']['p50']:,.0f}", f"{e['latency_us']['p99']:,.0f}", f"{e['ttfb_us']['p50']:,.0f}",
             str(e["retries"]), str(e["errors"]), str(e["lists"]), f"{e['list_ops_per_s']:,.1f}"] for e in endpoints]
    print_table(console, "GETs per endpoint (LISTs: of the dataset's prefix, before the run)", columns, rows, paths=0)


def _print_cache(result: dict, console) -> None:
    def cells(b):
        cache = b.get("cache") or {}
        storage = b["storage_bandwidth_MBps"]
        return [_pct(b["cache_hit_fraction"]), _pct(cache.get("predicted_hit_fraction")),
                _pct(cache.get("resident_at_start_fraction")), "-" if storage is None else f"{storage:,.1f}"]

    columns = [("mount", "left"), ("cache hit", "right"), ("predicted", "right"), ("at start", "right"),
               ("storage MB/s", "right")]
    print_table(console, "page cache per mount", columns,
                _per_mount(result, cells), paths=0)


def _print_latency(result: dict, console) -> None:
    keys = ("p50", "p90", "p99", "p999", "max")
    columns = [("mount", "left")] + [(f"{k.replace('p999', 'p99.9')} µs", "right") for k in keys]
    rows = _per_mount(result, lambda b: [_num(b["latency_us"].get(k)) for k in keys])
    print_table(console, "request latency per mount (submit to completion)", columns, rows, paths=0)


def _print_opens(result: dict, console) -> None:
    """Small files: the opens can bound an epoch (docs/numbers.md)."""
    if not result["total"].get("opens"):
        return
    columns = [("mount", "left"), ("opens", "right"), ("opens/s", "right"), ("open p50 µs", "right"),
               ("open p99 µs", "right"), ("open max µs", "right"), ("reader wait s", "right")]
    rows = _per_mount(result, lambda b: [f"{b['opens']:,}", f"{b['opens_per_s']:,.1f}",
                                         *(_num(b["open_latency_us"][k], 1) for k in ("p50", "p99", "max")),
                                         f"{b.get('open_wait_s', 0.0):,.3f}"])
    print_table(console, "opens per mount (reader wait: readers blocked on a file not open yet, summed)", columns,
                rows, paths=0)
    if result["total"].get("closes"):
        columns = [("mount", "left"), ("closes", "right"), ("close p50 µs", "right"), ("close p99 µs", "right"),
                   ("close max µs", "right")]
        rows = _per_mount(result, lambda b: [f"{b['closes']:,}",
                                             *(_num(b["close_latency_us"][k], 1) for k in ("p50", "p99", "max"))])
        print_table(console, "closes per mount", columns, rows, paths=0)


def _print_depth(result: dict, console) -> None:
    if not result["total"].get("depth"):
        return
    columns = [("mount", "left")] + [(label, "right") for label in DEPTH_LABELS]
    rows = _per_mount(result, lambda b: [f"{n:,}" for n in b["depth"]])
    print_table(console, "requests in flight at submission (bin 4: 4 to 7)", columns,
                rows, paths=0)


def _print_nodes(nodes: list[dict], console) -> None:
    """Page cache per host: what it could hold, what it held, what it was predicted to serve, and did."""
    columns = [("host", "left"), ("ranks", "right"), ("RAM GB", "right"), ("page cache GB", "right"),
               ("dataset GB", "right"), ("predicted", "right"), ("cache hit", "right")]
    rows = [[h["host"], _ranks(h.get("ranks") or []), f"{h['mem_total_bytes'] / 1e9:,.1f}",
             f"{h['page_cache_bytes'] / 1e9:,.1f}", f"{h['dataset_bytes'] / 1e9:,.3f}",
             _pct(h.get("predicted_hit_fraction")), _pct(h.get("cache_hit_fraction"))] for h in nodes]
    print_table(console, "page cache per node (page cache: MemAvailable at the start)", columns, rows)
    columns = [("host", "left"), ("mount", "left"), ("dataset GB", "right"), ("at start", "right"),
               ("predicted", "right"), ("cache hit", "right")]
    rows = [[h["host"], m["path"], f"{m['dataset_bytes'] / 1e9:,.3f}", _pct(m["resident_at_start_fraction"]),
             _pct(m["predicted_hit_fraction"]), _pct(m["cache_hit_fraction"])] for h in nodes for m in h["mounts"]]
    print_table(console, "page cache per node and mount", columns, rows, keep=2, paths=1)


def _print_ranks(ranks: list[dict], console) -> None:
    columns = [("rank", "right"), ("host", "left"), ("mount", "right"), ("MB read", "right"),
               ("MB from cache", "right"), ("requests", "right"), ("slowest µs", "right"), ("errors", "right")]
    rows = [[str(r["rank"]), r["host"], str(r["mount"]), f"{r['bytes'] / 1e6:,.1f}",
             f"{r['cached_bytes'] / 1e6:,.1f}", f"{r['ios']:,}", _num(r["max_ns"] / 1e3), f"{r['errors']:,}"]
            for r in ranks]
    print_table(console, "reads per rank (mount: the --root's index, from 0)", columns, rows)
    columns = [("rank", "right"), ("start s", "right"), ("end s", "right"), ("startup s", "right"),
               ("CPU s", "right"), ("max RSS MB", "right"), ("PSS MB", "right")]
    rows = [[str(r["rank"]), _num(r.get("t_start"), 3), _num(r.get("t_end"), 3), _num(r.get("startup_s"), 2),
             _num(r.get("cpu_s"), 2), _num(r.get("max_rss_mb"), 1), _num(r.get("pss_mb"), 1)] for r in ranks]
    print_table(console, "each rank's process (start, end: seconds since the start barrier)", columns, rows)


def _num(v, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ranks(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) if len(ranks) <= 6 else f"{len(ranks)} ranks"
