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
    """Rich narrows tables to 80 columns when output is not a terminal: give logs the full width."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=180)


def print_result(result: dict, console=None) -> None:
    from rich.table import Table

    console = console or make_console()
    buffered = not result["direct"]
    title = (f"iodl {result['pattern']}: {result['ranks']} rank(s), engine {result['engine']}, "
             f"{'buffered' if buffered else 'O_DIRECT'}, iodepth {result['iodepth']}, "
             f"window {result['window_s']:.2f} s")
    table = Table(title=title)
    for col in ("mount", "ranks", "MB/s", "IOPS", "p50 µs", "p99 µs", "p99.9 µs", "max µs"):
        table.add_column(col, justify="left" if col == "mount" else "right")
    if buffered:
        table.add_column("cache hit", justify="right")
        table.add_column("predicted", justify="right")
        table.add_column("storage MB/s", justify="right")
    mounts = result["mounts"]
    for m in mounts:
        table.add_row(*_row(m["path"], _ranks(m["ranks"]), m, buffered))
    if len(mounts) > 1:
        table.add_section()
        table.add_row(*_row("total", str(result["ranks"]), result["total"], buffered), style="bold")
    console.print(table)
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
    from rich.table import Table

    table = Table(title=f"{pattern}: accelerator view (AU leaves out: {t['au_excluded_steps']})")
    for col in ("steps/rank", "AU", "samples/s", "step p50 s", "step p99 s", "compute s", "data wait s", "barrier wait s"):
        table.add_column(col, justify="right")
    au = f"{100 * t['au']:.1f}%"
    au = f"[green]{au}[/]" if t["au"] >= t["au_threshold"] else f"[red]{au}[/]"
    table.add_row(str(t["steps"]), au, f"{t['samples_per_s']:,.1f}", f"{t['step_time_s']['p50']:.4f}",
                  f"{t['step_time_s']['p99']:.4f}", f"{t['compute_s_per_step']:.4f}",
                  f"{t['data_wait_s_per_step']:.4f}", f"{t['barrier_wait_s_per_step']:.4f}")
    console.print(table)
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
    from rich.table import Table

    table = Table(title="page cache per node (predicted = min(1, page cache / dataset bytes the node reads))")
    for col in ("host", "mount", "RAM GB", "page cache GB", "dataset GB", "at start", "predicted", "cache hit"):
        table.add_column(col, justify="left" if col in ("host", "mount") else "right")
    for h in nodes:
        for m in h["mounts"]:
            table.add_row(h["host"], m["path"], f"{h['mem_total_bytes'] / 1e9:,.1f}", f"{h['page_cache_bytes'] / 1e9:,.1f}",
                          f"{m['dataset_bytes'] / 1e9:,.3f}", _pct(m["resident_at_start_fraction"]),
                          _pct(m["predicted_hit_fraction"]), _pct(m["cache_hit_fraction"]))
    console.print(table)


def _print_sizing(sizing: dict, workload: str, console) -> None:
    from rich.table import Table

    demand = sizing["demand_MBps_per_accelerator"]
    table = Table(title=f"sizing: one {workload} accelerator at full utilisation reads {demand:,.1f} MB/s "
                        "(batch x mean sample / compute time)")
    for col in ("mount", "storage MB/s", "accelerators fed"):
        table.add_column(col, justify="left" if col == "mount" else "right")
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
        table.add_row(m["path"], "-" if m["storage_MBps"] is None else f"{m['storage_MBps']:,.1f}", fed)
    console.print(table)


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
