"""`iodl workloads`: the built-in workloads, their shape and where their numbers come from."""
from __future__ import annotations

import json

from ..checkpoint import plan
from ..mlperf import CLOSED_CHECKPOINT_RANKS, training_category
from ..report import make_console, print_table
from ..sizing import workload_demand_MBps
from ..workload import builtin_names, load_workload


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print every built-in's resolved spec as JSON")


def category(w) -> str | None:
    """The MLPerf Storage category a built-in runs in (iodl/mlperf.py); checkpoints: at their ranks."""
    if w.dataset is None:
        return "CLOSED" if w.name in CLOSED_CHECKPOINT_RANKS else None
    return training_category(w)


def run(comm, args) -> int:
    wls = [load_workload(n, need_dataset=False) for n in builtin_names()]
    if args.json:
        print(json.dumps([{**w.to_dict(), "mlperf_category": category(w)} for w in wls], indent=2))
        return 0
    columns = [("name", "left"), ("pattern", "left"), ("dataset", "left"), ("batch", "right"),
               ("compute s", "right"), ("MB/s per acc.", "right"), ("MLPerf", "left")]
    rows = [[w.name, w.pattern, f"{w.dataset.files:,} {w.dataset.format} x {w.dataset.samples_per_file:,} x "
             f"{w.dataset.sample_size / 1e3:,.1f} kB", str(w.train.batch_size), f"{w.train.compute_time_s:g}",
             f"{workload_demand_MBps(w):,.1f}", training_category(w) or "-"] for w in wls if w.dataset is not None]
    console = make_console()
    print_table(console, "built-in workloads (--workload NAME; a TOML or DLIO YAML file works too)", columns, rows)
    checkpoints = [w for w in wls if w.dataset is None]
    if checkpoints:
        crows = []
        for w in checkpoints:
            p, par = plan(w.checkpoint_model()), w.parallelism
            crows.append([w.name, f"{par.tensor} x {par.pipeline} x {p.layout.data}", str(par.zero_stage),
                          f"{p.layout.ranks:,}", f"{p.total_bytes / (1 << 30):,.2f}",
                          f"CLOSED at {CLOSED_CHECKPOINT_RANKS[w.name]:,} ranks" if w.name in CLOSED_CHECKPOINT_RANKS
                          else "-"])
        print_table(console, "checkpoint workloads (iodl checkpoint --workload NAME --plan)",
                    [("name", "left"), ("TP x PP x DP", "left"), ("ZeRO", "right"), ("ranks", "right"),
                     ("GiB per checkpoint", "right"), ("MLPerf", "left")], crows)
    console.print("MLPerf: CLOSED training is unet3d and retinanet on b200 and mi355; the other MLPerf "
                  "workloads are whatif only (docs/mlperf.md)", highlight=False, markup=False)
    for w in wls:
        if w.origin:
            console.print(f"{w.name}: {w.origin}", overflow="fold")
    return 0
