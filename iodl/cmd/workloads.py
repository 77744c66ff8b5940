"""`iodl workloads`: the built-in workloads, their shape and where their numbers come from."""
from __future__ import annotations

HELP = "list the built-in workloads (iodl's own and MLPerf Storage's), their shape and their source"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print every built-in's resolved spec as JSON")


def run(args) -> int:
    import json

    from rich.table import Table

    from ..report import make_console
    from ..sizing import workload_demand_MBps
    from ..workload import builtin_names, load_workload

    wls = [load_workload(n) for n in builtin_names()]
    if args.json:
        print(json.dumps([w.to_dict() for w in wls], indent=2))
        return 0
    table = Table(title="built-in workloads (--workload NAME; a TOML or DLIO YAML file works too)")
    for col in ("name", "pattern", "dataset", "batch", "compute s", "MB/s per acc."):
        table.add_column(col, justify="left" if col in ("name", "pattern", "dataset") else "right")
    for w in wls:
        d = w.dataset
        table.add_row(w.name, w.pattern, f"{d.files:,} {d.format} x {d.samples_per_file:,} x {d.sample_size / 1e3:,.1f} kB",
                      str(w.train.batch_size), f"{w.train.compute_time_s:g}", f"{workload_demand_MBps(w):,.1f}")
    console = make_console()
    console.print(table)
    for w in wls:
        if w.origin:
            console.print(f"{w.name}: {w.origin}")
    return 0
