"""Two builds of iodl's native engine against each other, each paired with fio, interleaved.

For a change to the per-I/O loop on a noisy VM: fio's own rate swings between runs, so each tree's
run is paired with a fio run just before it and the two trees alternate; a regression shows as
the new tree reading less than the old one in the same round. Trees are checkouts with the
extension built in place (e.g. `git worktree add /tmp/old REV && cd /tmp/old && python setup.py
build_ext --inplace`).

    python bench/bench_ab_trees.py OLD_TREE NEW_TREE [--rounds 4] [--engine uring]

4 KiB random O_DIRECT reads, iodepth 32, 2 s each, on a loop mount served from the host cache.
Writes bench/results/ab-trees.md.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_engine as b  # noqa: E402
from iodl import groundtruth  # noqa: E402

ONE = """
import sys
sys.path.insert(0, sys.argv[1])
from iodl import _native, histogram
from iodl.engine import open_for_read
from iodl.plan import PLAN_DTYPE
import numpy as np
# the plan is built here, not by bench_engine: an old tree's iodl may lack what bench_engine imports
plan = np.zeros(3_000_000, dtype=PLAN_DTYPE)
plan["file"], plan["length"] = 0, 4096
plan["offset"] = np.random.default_rng(1).integers(0, (1 << 30) // 4096, len(plan), dtype=np.uint64) * 4096
fd = open_for_read(sys.argv[2], True)
with _native.Engine(sys.argv[3], depth=32, block_size=4096, direct=True) as eng:
    t0 = _native.monotonic_ns()
    st = eng.run([fd], plan, histogram.empty(), deadline_ns=t0 + 2_000_000_000)
print(st["ios"] / ((st["t_end_ns"] - st["t_start_ns"]) / 1e9))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--engine", default="uring", choices=("uring", "aio"))
    args = ap.parse_args()
    fio_engine = {"uring": "io_uring", "aio": "libaio"}[args.engine]
    rows = []
    with groundtruth.LoopMount(size=b.FILE_SIZE + (512 << 20), direct_io=False) as mnt:
        path = os.path.join(mnt.path, "data.bin")
        groundtruth.write_incompressible(path, b.FILE_SIZE)
        for rnd in range(args.rounds):
            row = [rnd]
            for tree in (args.old, args.new):
                b.warm(path)
                fio = b.run_fio(fio_engine, "rand4k", path, 2)["iops"]
                out = subprocess.run([sys.executable, "-c", ONE, os.path.abspath(tree), path, args.engine],
                                     capture_output=True, text=True, cwd="/", check=True).stdout
                row += [float(out), fio]
            print(row, flush=True)
            rows.append(row)
    with open(os.path.join(HERE, "results", "ab-trees.md"), "w") as f:
        f.write(f"# {args.engine} 4 KiB randread QD32: {args.old} (old) vs {args.new} (new), each paired with fio\n\n")
        f.write("| round | old IOPS | fio | old/fio | new IOPS | fio | new/fio | new/old |\n|---|---|---|---|---|---|---|---|\n")
        for rnd, o, fo, n, fn in rows:
            f.write(f"| {rnd} | {o:,.0f} | {fo:,.0f} | {o / fo:.3f} | {n:,.0f} | {fn:,.0f} | {n / fn:.3f} | {n / o:.3f} |\n")


if __name__ == "__main__":
    main()
