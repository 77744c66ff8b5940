"""iodl's native engines against fio on the same files, same loop mount, interleaved runs.

The mount is a loop device served from the host page cache (LoopMount(direct_io=False)), so the
"storage" is memcpy-fast and the software overhead of the submit/reap loop shows. Cases:
  seq1m:  1 MiB sequential O_DIRECT reads, iodepth 32   (goal: iodl >= 0.95x fio bandwidth)
  rand4k: 4 KiB random O_DIRECT reads, iodepth 32       (goal: iodl >= 0.90x fio IOPS)
each for aio vs fio libaio and uring vs fio io_uring. iodl runs a plan through Engine.run (the
way iodl itself drives it); fio runs with its defaults. CPU is the process's user+system time
(getrusage for iodl, fio's usr_cpu+sys_cpu x runtime), per GB read.

Usage (root): python bench/bench_engine.py [--reps 3] [--seconds 3] [--out bench/results]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from iodl import _native, groundtruth, histogram  # noqa: E402
from iodl.engine import open_for_read  # noqa: E402
from iodl.plan import PLAN_DTYPE  # noqa: E402
from iodl.metrics import LIVE_SLOT, new_series  # noqa: E402

FILE_SIZE = 1 << 30
CASES = {
    "seq1m": {"bs": 1 << 20, "rw": "read"},
    "rand4k": {"bs": 4096, "rw": "randread"},
}
PAIRS = [("aio", "libaio"), ("uring", "io_uring")]
DEPTH = 32
QUIET_STEAL = 0.05   # a run that lost more of the CPU than this to the hypervisor is not judged


def warm(path: str) -> None:
    """Read the file once through O_DIRECT so that the loop's backing file is in the host cache."""
    fd = open_for_read(path, True)
    plan = np.zeros(FILE_SIZE >> 20, dtype=PLAN_DTYPE)
    plan["file"], plan["offset"], plan["length"] = 0, np.arange(len(plan)) << 20, 1 << 20
    with _native.Engine("aio", depth=8, block_size=1 << 20, direct=True) as eng:
        eng.run([fd], plan, histogram.empty())
    os.close(fd)


def read_plan(bs: int, rows: int, sequential: bool, file_size: int = FILE_SIZE) -> np.ndarray:
    """`rows` requests of bs over one file: in order (wrapping), or at seeded random blocks."""
    blocks = file_size // bs
    plan = np.zeros(rows, dtype=PLAN_DTYPE)
    plan["file"] = 0
    if sequential:
        plan["offset"] = (np.arange(rows, dtype=np.uint64) % blocks) * bs
    else:
        plan["offset"] = np.random.default_rng(1).integers(0, blocks, rows, dtype=np.uint64) * bs
    plan["length"] = bs
    return plan


def iodl_plan(case: str, seconds: float) -> np.ndarray:
    bs = CASES[case]["bs"]
    # more rows than the run can finish: the deadline ends it, as fio's time_based runtime does
    return read_plan(bs, int(seconds * (4e9 / bs if case == "seq1m" else 1.5e6)), case == "seq1m")


def run_iodl(engine: str, case: str, path: str, seconds: float, track: bool = True, submit_batch: int = 1) -> dict:
    bs = CASES[case]["bs"]
    plan = iodl_plan(case, seconds)
    fd = open_for_read(path, True)
    hist = histogram.empty()
    # as `iodl read` runs it: filling the per-second series and the live progress counters
    series, live = new_series(seconds), np.zeros(LIVE_SLOT // 8, dtype=np.int64)
    with _native.Engine(engine, depth=DEPTH, block_size=bs, direct=True, submit_batch=submit_batch) as eng:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = _native.monotonic_ns()
        extra = {"series": series, "series_origin_ns": t0, "live": live} if track else {}
        st = eng.run([fd], plan, hist, deadline_ns=t0 + int(seconds * 1e9), **extra)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.close(fd)
    assert st["errors"] == 0, st
    secs = (st["t_end_ns"] - st["t_start_ns"]) / 1e9
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"bw_MBps": st["bytes"] / secs / 1e6, "iops": st["ios"] / secs, "bytes": st["bytes"],
            "cpu_s": cpu, "cpu_s_per_GB": cpu / (st["bytes"] / 1e9), "runtime_s": secs,
            "lat_p50_us": histogram.percentiles(hist, [50])[50], "fixed_buffers": eng.fixed_buffers}


def stolen(run, *args, **kw) -> dict:
    """run(*args) with the share of the CPU the hypervisor took meanwhile (/proc/stat steal)."""
    with groundtruth.CpuSteal() as steal:
        out = run(*args, **kw)
    return {**out, "steal": round(steal.share, 4)}


def run_fio(ioengine: str, case: str, path: str, seconds: float) -> dict:
    c = CASES[case]
    cmd = ["fio", "--name=bench", f"--filename={path}", f"--ioengine={ioengine}", "--direct=1",
           f"--iodepth={DEPTH}", f"--bs={c['bs']}", f"--rw={c['rw']}", f"--size={FILE_SIZE}",
           f"--runtime={seconds}", "--time_based", "--output-format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    rd = job["read"]
    runtime_s = job["job_runtime"] / 1e3
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * runtime_s
    return {"bw_MBps": rd["bw_bytes"] / 1e6, "iops": rd["iops"], "bytes": rd["io_bytes"],
            "cpu_s": cpu, "cpu_s_per_GB": cpu / (rd["io_bytes"] / 1e9), "runtime_s": runtime_s,
            "lat_p50_us": rd["clat_ns"]["percentile"]["50.000000"] / 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio not on PATH")
    runs: dict = {}
    with groundtruth.LoopMount(size=FILE_SIZE + (512 << 20), direct_io=False) as mnt:
        path = os.path.join(mnt.path, "data.bin")
        groundtruth.write_incompressible(path, FILE_SIZE)
        warm(path)
        for rep in range(args.reps):
            for case in CASES:
                for engine, ioengine in PAIRS:
                    key = f"{case}/{engine}"
                    # interleaved: fio, iodl, fio, iodl... so that drift hits both alike. The
                    # loop's backing file must stay cached: if anything on the machine drops the
                    # page cache during a pair, the pair is re-warmed and run again.
                    for _attempt in range(10):
                        warm(path)
                        drops = groundtruth.page_cache_drops()
                        f = stolen(run_fio, ioengine, case, path, args.seconds)
                        i = stolen(run_iodl, engine, case, path, args.seconds)
                        # the same engine submitting every free slot in one call (submit_batch=0)
                        b = stolen(run_iodl, engine, case, path, args.seconds, submit_batch=0)
                        if groundtruth.page_cache_drops() == drops:
                            break
                        print(f"rep {rep} {key}: page cache dropped by another process, again", flush=True)
                    else:
                        sys.exit("the page cache keeps being dropped; cannot benchmark now")
                    runs.setdefault(key, {"fio": [], "iodl": [], "iodl_batch_all": []})
                    runs[key]["fio"].append(f)
                    runs[key]["iodl"].append(i)
                    runs[key]["iodl_batch_all"].append(b)
                    print(f"rep {rep} {key:14s} fio {f['bw_MBps']:9.1f} MB/s {f['iops']:9.0f} IOPS | "
                          f"iodl {i['bw_MBps']:9.1f} MB/s {i['iops']:9.0f} IOPS | batch-all {b['iops']:9.0f} IOPS | "
                          f"steal {f['steal']:.1%}/{i['steal']:.1%}/{b['steal']:.1%}", flush=True)
    summary = {}
    for key, r in runs.items():
        med = {side: {m: statistics.median(x[m] for x in r[side])
                      for m in ("bw_MBps", "iops", "cpu_s_per_GB", "lat_p50_us")}
               for side in ("fio", "iodl", "iodl_batch_all")}
        case = key.split("/")[0]
        # each round ran back to back: the ratio is the median of the rounds' ratios, taken over the
        # quiet rounds (neither fio's run nor iodl's lost more than QUIET_STEAL of the CPU to the
        # hypervisor) when there are at least 3 of them; otherwise over all, and the row says so
        rounds = list(zip(r["fio"], r["iodl"], r["iodl_batch_all"]))
        quiet = [x for x in rounds if max(x[0]["steal"], x[1]["steal"]) <= QUIET_STEAL]
        judged = quiet if len(quiet) >= 3 else rounds
        ratio_bw = statistics.median(i["bw_MBps"] / f["bw_MBps"] for f, i, _b in judged)
        ratio_iops = statistics.median(i["iops"] / f["iops"] for f, i, _b in judged)
        ratio_batch_all = statistics.median(b["iops"] / f["iops"] for f, _i, b in judged)
        goal = ("bw", 0.95) if case == "seq1m" else ("iops", 0.90)
        got = ratio_bw if goal[0] == "bw" else ratio_iops
        summary[key] = {"median": med, "ratio_bw": ratio_bw, "ratio_iops": ratio_iops,
                        "ratio_batch_all_iops": ratio_batch_all,
                        "rounds_judged": len(judged), "rounds_quiet": len(quiet), "rounds": len(rounds),
                        "ratio_cpu_per_GB": med["iodl"]["cpu_s_per_GB"] / med["fio"]["cpu_s_per_GB"],
                        "goal": f"{goal[0]} >= {goal[1]}x fio", "goal_met": got >= goal[1]}
    result = {"schema": "iodl.bench.engine-vs-fio/1", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "kernel": os.uname().release, "fio": subprocess.run(["fio", "--version"], capture_output=True,
                                                                    text=True).stdout.strip(),
              "cpus": os.cpu_count(), "file_size": FILE_SIZE, "depth": DEPTH, "seconds": args.seconds,
              "reps": args.reps, "mount": "ext4 on loop (direct_io=off, backing file in host page cache)",
              "summary": summary, "runs": runs}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "engine-vs-fio.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"# iodl engines vs fio ({result['when']}, kernel {result['kernel']}, {result['fio']}, "
             f"{result['cpus']} CPUs)", "",
             f"1 GiB file on {result['mount']}; O_DIRECT, iodepth {DEPTH}, {args.seconds:g} s per run, "
             f"{args.reps} interleaved runs each; sides are medians, ratios the median of the pairs' ratios. "
             "iodl fills its per-second series and live counters, as `iodl read` does, and submits each "
             "request alone (submit_batch=1, fio's default). `batch-all/fio`: the same engine submitting "
             "every free slot in one call (submit_batch=0), run in the same round. Sides are medians of "
             f"every round; ratios are judged on the quiet rounds (neither fio's nor iodl's run lost more than "
             f"{QUIET_STEAL:.0%} of the CPU to the hypervisor, /proc/stat steal) when there are 3 or more, else "
             "on all; `quiet` gives quiet/all.", "",
             "| case | iodl engine vs fio | fio MB/s | iodl MB/s | bw ratio | fio IOPS | iodl IOPS | IOPS ratio "
             "| batch-all/fio | CPU s/GB fio | CPU s/GB iodl | quiet | goal | met |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for key, s in summary.items():
        case, engine = key.split("/")
        f, i = s["median"]["fio"], s["median"]["iodl"]
        lines.append(f"| {case} | {engine} vs {dict(PAIRS)[engine]} | {f['bw_MBps']:.0f} | {i['bw_MBps']:.0f} | "
                     f"{s['ratio_bw']:.3f} | {f['iops']:.0f} | {i['iops']:.0f} | {s['ratio_iops']:.3f} | "
                     f"{s['ratio_batch_all_iops']:.3f} | "
                     f"{f['cpu_s_per_GB']:.3f} | {i['cpu_s_per_GB']:.3f} | {s['rounds_quiet']}/{s['rounds']} | {s['goal']} | "
                     f"{'yes' if s['goal_met'] else 'NO'} |")
    with open(os.path.join(args.out, "engine-vs-fio.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(s["goal_met"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
