"""`iodl datasize`: the smallest dataset MLPerf Storage accepts for a workload, and the command that makes it."""
from __future__ import annotations

import json
import shlex

from .. import cache, limits
from ..limits import cli_float, cli_int
from ..mlperf import GiB, data_size, training_category
from ..workload import load_workload


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, metavar="NAME|FILE", help="built-in name, TOML or DLIO/MLPerf YAML file")
    p.add_argument("--accelerators", type=cli_int, required=True, metavar="N",
                   help="emulated accelerators of the run (MPI ranks over all hosts)")
    p.add_argument("--hosts", type=cli_int, default=1, metavar="N", help="client hosts (default 1)")
    p.add_argument("--host-memory-gb", type=cli_float, metavar="GIB",
                   help="memory of each client host in GiB (default: this machine's MemTotal)")
    p.add_argument("--root", default="DIR", metavar="DIR", help="the root to put in the generate command")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(comm, args) -> int:
    limits.check_range("--accelerators", args.accelerators, 1, limits.MAX_RANKS, integer=True)
    limits.check_range("--hosts", args.hosts, 1, limits.MAX_RANKS, integer=True)
    if args.host_memory_gb is not None:
        limits.check_range("--host-memory-gb", args.host_memory_gb, 0.001, 1 << 30)
    wl = load_workload(args.workload)
    memory = int(args.host_memory_gb * GiB) if args.host_memory_gb is not None else cache.meminfo().get("MemTotal", 0)
    size = data_size(wl, args.accelerators, args.hosts, memory)
    command = (f"iodl generate --workload {shlex.quote(args.workload)} --files {size.files} "
               f"--root {shlex.quote(args.root)}")
    category = training_category(wl)
    if args.json:
        print(json.dumps({"workload": wl.name, "mlperf_category": category, **size.to_dict(), "generate": command},
                         indent=2))
        return 0
    d = wl.dataset
    print(f"{wl.name}" + (f" (MLPerf: {category})" if category else "")
          + f": {args.accelerators} accelerator(s) on {args.hosts} host(s) of {memory / GiB:,.1f} GiB")
    print(f"  500 steps x batch {wl.train.batch_size} x {args.accelerators} accelerators = "
          f"{500 * wl.train.batch_size * args.accelerators:,} samples: {size.files_by_steps:,} files")
    print(f"  5 x {args.hosts} x {memory / GiB:,.1f} GiB of client memory: {size.files_by_memory:,} whole files "
          f"of {d.samples_per_file} x {d.sample_size:,} B")
    print(f"  {size.files:,} files = {size.bytes / 1e9:,.1f} GB (set by the {size.dictated_by} rule)")
    print("  (both in whole files rounded down, as mlpstorage's checker counts them)")
    print(f"  {command}")
    return 0
