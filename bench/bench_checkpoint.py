"""iodl checkpoint against fio on the same mount and sizes, interleaved rounds.

4 ranks each write 256 MiB (a flat model with ZeRO 1: every rank one file), fsync it, then read
it back (with --disk after dropping the page cache); fio does the same with 4 jobs:
  write: rw=write bs=1M direct=1 ioengine=libaio iodepth=8 end_fsync=1  (goal: iodl >= 0.95x fio)
  read:  rw=read  bs=1M direct=1 ioengine=libaio iodepth=8
on a loop-mounted ext4 served from the host page cache (LoopMount(direct_io=False)): the device
is memcpy-fast, so what differs is the software on the way. --disk serves the loop device from
its backing file with direct I/O instead (the VM's disk: slower, noisier).

iodl's figure is its bandwidth_MBps (all bytes / the slowest rank's time from the barrier to its
fsync); fio's is its group's bw (bytes / the job's runtime, end_fsync included).

Usage (root): python bench/bench_checkpoint.py [--reps 3] [--disk] [--out bench/results]
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from iodl import cache, groundtruth  # noqa: E402

RANKS, PER_RANK, DEPTH = 4, 256 << 20, 8
MODEL = f"""\
[workload]
name = "bench-256MiB-per-rank"

[model]
type = "cnn"
model_size = {PER_RANK}

[parallelism]
data = {RANKS}
zero_stage = 1
"""
BIN = os.path.dirname(sys.executable)


def iodl_round(model: str, root: str, drop: bool) -> dict:
    out = os.path.join(tempfile.mkdtemp(), "r.json")
    cmd = [os.path.join(BIN, "mpiexec"), "-n", str(RANKS), sys.executable, "-m", "iodl", "checkpoint",
           "--workload", model, "--root", root, "--engine", "aio", "--direct", "--iodepth", str(DEPTH),
           "--block-size", "1MiB", "--writes", "1", "--reads", "1", "--out", out] + (["--drop-caches"] if drop else [])
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(out) as f:
        ck = json.load(f)["checkpoint"]
    return {"write": ck["write"]["bandwidth_MBps"], "read": ck["read"]["bandwidth_MBps"],
            "bytes": ck["write"]["bytes"]}


def fio_job(directory: str, rw: str) -> float:
    cmd = ["fio", "--name=ckpt", f"--directory={directory}", f"--rw={rw}", "--bs=1M", "--direct=1",
           "--ioengine=libaio", f"--iodepth={DEPTH}", f"--numjobs={RANKS}", f"--size={PER_RANK}",
           "--group_reporting", "--output-format=json"] + (["--end_fsync=1"] if rw == "write" else [])
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    job = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"] / 1e6


def fio_round(directory: str, drop: bool) -> dict:
    shutil.rmtree(directory, ignore_errors=True)
    os.mkdir(directory)
    write = fio_job(directory, "write")
    if drop:
        cache.drop_caches()
    return {"write": write, "read": fio_job(directory, "read")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--disk", action="store_true", help="loop device on the VM's disk (direct I/O), not the page cache")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="iodl-bench-ckpt-")
    model = os.path.join(work, "model.toml")
    with open(model, "w") as f:
        f.write(MODEL)
    rows = []
    with groundtruth.LoopMount(3 << 30, direct_io=args.disk) as m:
        root, fio_dir = os.path.join(m.path, "iodl"), os.path.join(m.path, "fio")
        # O_DIRECT reads never meet the filesystem's cache: a drop is needed only where it does not
        # also empty the host cache that serves the loop device itself (--disk)
        drop = args.disk
        # warm-up, not counted: the sparse image's blocks get allocated (twice each: a round reuses
        # the blocks its predecessor freed only once the journal has committed the free, so the
        # first round after one warm-up still lands on blocks the image file has never held)
        for _ in range(2):
            iodl_round(model, root, drop)
            fio_round(fio_dir, drop)
        for rep in range(args.reps):
            # alternate which tool goes first, so that neither always meets a fresher device
            order = ("iodl", "fio") if rep % 2 == 0 else ("fio", "iodl")
            got = {}
            for tool in order:
                got[tool] = iodl_round(model, root, drop) if tool == "iodl" else fio_round(fio_dir, drop)
            rows.append(got)
            print(f"rep {rep}: write iodl {got['iodl']['write']:.0f} fio {got['fio']['write']:.0f} MB/s; "
                  f"read iodl {got['iodl']['read']:.0f} fio {got['fio']['read']:.0f} MB/s", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for op in ("write", "read"):
        ratios = [r["iodl"][op] / r["fio"][op] for r in rows]
        summary[op] = {"iodl_MBps": statistics.median(r["iodl"][op] for r in rows),
                       "fio_MBps": statistics.median(r["fio"][op] for r in rows),
                       "ratio_median": statistics.median(ratios), "ratios": ratios}
    doc = {"bench": "checkpoint-vs-fio", "device": "loop, backing file " + ("direct I/O (disk)" if args.disk
                                                                          else "in the host page cache"),
           "ranks": RANKS, "bytes_per_rank": PER_RANK, "iodepth": DEPTH, "block_size": 1 << 20,
           "reps": rows, "summary": summary}
    name = "checkpoint-vs-fio" + ("-disk" if args.disk else "")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(doc, f, indent=2)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(f"# iodl checkpoint vs fio ({doc['device']})\n\n"
                f"{RANKS} ranks / fio jobs x {PER_RANK >> 20} MiB, 1 MiB O_DIRECT requests, iodepth {DEPTH}, libaio; "
                f"write with fsync at the end (fio end_fsync=1), then read back" + (" after dropping the page cache" if args.disk else "") + "; "
                f"{args.reps} interleaved rounds, medians.\n\n"
                "| | iodl MB/s | fio MB/s | iodl / fio (median) | per round |\n|---|---|---|---|---|\n")
        for op, s in summary.items():
            f.write(f"| {op} | {s['iodl_MBps']:,.0f} | {s['fio_MBps']:,.0f} | {s['ratio_median']:.2f} | "
                    f"{', '.join(f'{x:.2f}' for x in s['ratios'])} |\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
