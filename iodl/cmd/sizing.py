"""`iodl sizing`: what one accelerator of each workload asks of the storage, and how many of them
the storage of a measured run can feed."""
from __future__ import annotations

import os



def add_arguments(p) -> None:
    p.add_argument("--workload", action="append", default=[], metavar="NAME|FILE",
                   help="workload(s) to size (repeatable; default: every built-in one)")
    p.add_argument("--result", action="append", default=[], metavar="FILE",
                   help="an `iodl read --out` result: add, per mount, how many accelerators its storage MB/s feeds")


def run(args) -> int:
    from .. import workload
    from ..report import make_console, print_table, short_paths
    from ..result import RESULT, load
    from ..sizing import accelerators_fed, storage_MBps, workload_demand_MBps

    wls = [workload.load_workload(w) for w in (args.workload or workload.builtin_names())]
    results = [(path, load(path, (RESULT,))) for path in args.result]
    mounts = [(path, m) for path, r in results for m in r["mounts"]]
    console = make_console()
    columns = [("workload", "left"), ("pattern", "left"), ("batch", "right"), ("sample KB", "right"),
               ("compute s", "right"), ("MB/s per accelerator", "right")]
    # a measured mount's column says which result file and which of its mounts (prefixes printed once below)
    files = _labels([os.path.abspath(path) for path, _m in mounts])
    _prefix, paths = short_paths([m["path"] for _p, m in mounts])
    many = len(results) > 1 or len(mounts) > 1
    for n, ((_path, m), name, where) in enumerate(zip(mounts, files, paths), 1):
        storage = storage_MBps(m)
        label = f"[{n}] {name} {where}" if many else f"{name} {where}"
        columns.append((f"fed by {label} ({'not measurable' if storage is None else f'{storage:,.1f}'} MB/s)", "right"))
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
            console.print(f"{f'[{n}] ' if many else ''}{os.path.abspath(path)}: mount {m['path']}", highlight=False)
        console.print("A mount's count holds for the storage MB/s it delivered in that run; it is the storage's limit "
                      "only if the run was storage-bound (storage-only, or ranks waiting for data).")
    return 0


def _labels(paths: list[str]) -> list[str]:
    """The shortest tail of each file's path that tells them apart: a.json, run1/r.json ..."""
    parts = [p.split(os.sep) for p in paths]
    for depth in range(1, max((len(p) for p in parts), default=1) + 1):
        tails = ["/".join(p[-depth:]) for p in parts]
        if len({t for t in tails}) == len(set(paths)):
            return tails
    return paths

