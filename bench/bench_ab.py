"""Two iodl trees against each other on the emulator's own cost: the same train-sync run, the trees
alternated round after round (this VM's speed drifts by several per cent within minutes, so a
change of a few per cent shows only in interleaved runs, as a mean over several).

    python bench/bench_ab.py --root DIR --tree before=/tmp/old --tree after=. [--ranks 16] [--rounds 6]
                             [--steps 150] [--workload retinanet_b200] [--out NAME]

Each TREE is a checkout whose native module is built (pip install -e, or a copy of one), run as
PYTHONPATH=TREE python -m iodl under this interpreter's mpiexec. Per run: AU and the result's
train.emulator (process CPU a sample and the loader's a step). Writes bench/results/NAME.json and
NAME.md (every run, then per tree the mean, min and max).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def one(tree: str, ranks: int, args, out: str) -> dict:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "iodl", "read", "--workload", args.workload, "--root",
           args.root, "--engine", args.engine, "--steps", str(args.steps), "--progress", "off", "--out", out]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    # run from the tree: `python -m` puts the working directory first on sys.path, before PYTHONPATH
    subprocess.run(cmd, env=env, cwd=os.path.abspath(tree), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(out) as f:
        train = json.load(f)["train"]
    emu = train["emulator"]
    return {"au": round(train["au"], 4), "cpu_us_per_sample": round(emu["cpu_s_per_sample"] * 1e6, 1),
            "loader_us_per_step": round(emu["loader_cpu_s_per_step"] * 1e6), "load_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="a dataset of the workload, in the page cache")
    ap.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR", help="twice or more")
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--workload", default="retinanet_b200")
    ap.add_argument("--engine", default="psync")
    ap.add_argument("--out", default="ab")
    a = ap.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    a.root = os.path.abspath(a.root)
    rows = []
    with tempfile.TemporaryDirectory(prefix="iodl-ab-") as tmp:
        for r in range(a.rounds):
            for label, tree in trees:
                row = {"round": r + 1, "tree": label, **one(tree, a.ranks, a, os.path.join(tmp, "r.json"))}
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(os.path.join(RESULTS, a.out + ".json"), "w") as f:
        json.dump({"nproc": os.cpu_count(), "ranks": a.ranks, "steps": a.steps, "workload": a.workload,
                   "engine": a.engine, "trees": dict(trees), "rows": rows}, f, indent=1)
    with open(os.path.join(RESULTS, a.out + ".md"), "w") as f:
        f.write(f"# {a.out}: {a.workload} train-sync, {a.ranks} ranks, {a.steps} steps, --engine {a.engine}, "
                f"{os.cpu_count()} cores (bench/bench_ab.py, {a.rounds} interleaved rounds)\n\n")
        f.write("| tree | runs | CPU µs a sample: mean (min-max) | loader µs a step: mean | AU: mean |\n|---|---:|---:|---:|---:|\n")
        for label, _tree in trees:
            mine = [r for r in rows if r["tree"] == label]
            cpu = [r["cpu_us_per_sample"] for r in mine]
            f.write(f"| {label} | {len(mine)} | {statistics.mean(cpu):.1f} ({min(cpu)}-{max(cpu)}) | "
                    f"{statistics.mean(r['loader_us_per_step'] for r in mine):.0f} | "
                    f"{statistics.mean(r['au'] for r in mine):.4f} |\n")
        f.write("\nEvery run:\n\n| round | tree | AU | CPU µs a sample | loader µs a step | load |\n|---:|---|---:|---:|---:|---:|\n")
        for r in rows:
            f.write(f"| {r['round']} | {r['tree']} | {r['au']} | {r['cpu_us_per_sample']} | {r['loader_us_per_step']} "
                    f"| {r['load_1min']} |\n")


if __name__ == "__main__":
    main()
