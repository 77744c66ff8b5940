"""`iodl sizing`: what one accelerator of each workload asks of the storage, and how many of them
the storage of a measured run can feed."""
from __future__ import annotations

from .. import workload
from ..report import make_console, print_table
from ..result import RESULT, load
from ..sizing import accelerators_fed, storage_MBps, workload_demand_MBps


def add_arguments(p) -> None:
    p.add_argument("--workload", action="append", default=[], metavar="NAME|FILE",
                   help="workload(s) to size (repeatable; default: every built-in one)")
    p.add_argument("--result", action="append", default=[], metavar="FILE",
                   help="an `iodl read --out` result: add, per mount, how many accelerators its storage MB/s feeds")


def run(comm, args) -> int:
    if args.workload:
        wls = [workload.load_workload(w) for w in args.workload]
    else:   # the built-ins that read a dataset (the checkpoint-only ones have no demand to size)
        wls = [w for w in (workload.load_workload(n, need_dataset=False) for n in workload.builtin_names())
               if w.dataset is not None]
    results = [(path, load(path, (RESULT,))) for path in args.result]
    mounts = [(path, m) for path, r in results for m in r["mounts"]]
    console = make_console()
    columns = [("workload", "left"), ("pattern", "left"), ("batch", "right"), ("sample KB", "right"),
               ("compute s", "right"), ("MB/s per accelerator", "right")]
    # a measured mount's column is numbered; the legend below says which result file and mount it is
    for n, (_path, m) in enumerate(mounts, 1):
        storage = storage_MBps(m)
        columns.append((f"[{n}] fed ({'not measurable' if storage is None else f'{storage:,.1f} MB/s'})", "right"))
    rows = []
    for wl in wls:
        demand = workload_demand_MBps(wl)
        cells = [wl.name, wl.pattern, str(wl.train.batch_size), f"{wl.dataset.sample_size / 1e3:,.1f}",
                 f"{wl.train.compute_time_s:g}", f"{demand:,.1f}"]
        cells += ["-" if storage_MBps(m) is None else str(accelerators_fed(storage_MBps(m), demand)) for _p, m in mounts]
        rows.append(cells)
    print_table(console, "storage demand per accelerator at full utilisation (batch x mean sample / compute time)",
                columns, rows)
    if mounts:
        for n, (path, m) in enumerate(mounts, 1):
            console.print(f"[{n}] {path}, mount {m['path']}", highlight=False, markup=False)
        console.print("A mount's count holds for the storage MB/s it delivered in that run; it is the storage's limit "
                      "only if the run was storage-bound (storage-only, or ranks waiting for data).")
    return 0

