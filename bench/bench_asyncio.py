"""What a Python data loader costs against the native path: the asyncio engine (aiofiles on
uvloop) vs the native aio/uring/psync engines on the same files, same mount, interleaved runs.

The mount is a loop device served from the host page cache (LoopMount(direct_io=False)), so the
"storage" is memcpy-fast and the CPU each engine spends per byte shows. Cases:
  direct   seq1m     1 MiB sequential O_DIRECT reads      asyncio vs aio, uring
  direct   rand128k  128 KiB random O_DIRECT reads        asyncio vs aio, uring
  buffered seq1m     1 MiB sequential reads, file in the mount's page cache (pure memcpy)
                                                          asyncio vs uring, psync
  buffered rand128k  128 KiB random reads, same           asyncio vs uring, psync
Every engine keeps DEPTH requests in flight (asyncio: DEPTH reader tasks on DEPTH executor
threads, as `read_threads`; psync: 1). Each run is one Engine.run of a plan longer than the run,
ended by a deadline, as iodl drives it. CPU = the process's user+system time (getrusage, all
threads) over the run, per GB read. Truths checked on every run: bytes == ios x block size (no
EOF in the plan), histogram count == ios, no errors. Engine order rotates per repetition; the
figure is the median of the repetitions.

Usage (root): python bench/bench_asyncio.py [--reps 3] [--seconds 3] [--out bench/results]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from iodl import _native, groundtruth, histogram  # noqa: E402
from iodl.engine import open_for_read  # noqa: E402
from iodl.engines import open_engine  # noqa: E402
from iodl.plan import PLAN_DTYPE  # noqa: E402
from bench_engine import read_plan  # noqa: E402  (bench/ is on the path: this script's directory)

FILE_SIZE = 1 << 30
DEPTH = 8
CASES = {"seq1m": 1 << 20, "rand128k": 128 << 10}
ENGINES = {True: ["asyncio", "aio", "uring"], False: ["asyncio", "uring", "psync"]}
NATIVE_REF = {True: "uring", False: "uring"}     # the ratio column: asyncio / this engine


def whole_file_plan(bs: int = 1 << 20) -> np.ndarray:
    plan = np.zeros(FILE_SIZE // bs, dtype=PLAN_DTYPE)
    plan["file"], plan["offset"], plan["length"] = 0, np.arange(len(plan), dtype=np.uint64) * bs, bs
    return plan


def warm(path: str, buffered: bool) -> None:
    """Read the file once through O_DIRECT, so that the loop's backing file is in the host cache;
    for the buffered cases also once buffered, so that the file is in the mount's page cache."""
    for direct in ([True, False] if buffered else [True]):
        fd = open_for_read(path, direct)
        with _native.Engine("psync" if not direct else "aio", depth=8, block_size=1 << 20, direct=direct) as eng:
            eng.run([fd], whole_file_plan(), histogram.empty())
        os.close(fd)


def fully_cached(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _native.resident_bytes(fd, 0, FILE_SIZE) == FILE_SIZE
    finally:
        os.close(fd)


def plan_for(case: str, seconds: float) -> np.ndarray:
    bs = CASES[case]
    # more rows than any engine reads here: the deadline ends the run
    return read_plan(bs, int(seconds * 10e9 / bs), case == "seq1m", FILE_SIZE)


def run_one(engine: str, case: str, direct: bool, path: str, plan: np.ndarray, seconds: float) -> dict:
    bs = CASES[case]
    fd = open_for_read(path, direct)
    hist = histogram.empty()
    with open_engine(engine, depth=DEPTH, block_size=bs, direct=direct) as eng:
        depth = eng.depth
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        st = eng.run([fd], plan, hist, deadline_ns=_native.monotonic_ns() + int(seconds * 1e9))
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.close(fd)
    assert st["errors"] == 0, st
    assert st["bytes"] == st["ios"] * bs, st               # truth: whole blocks, no EOF in the plan
    assert int(hist.sum()) == st["ios"] and st["done"] < len(plan), st
    secs = (st["t_end_ns"] - st["t_start_ns"]) / 1e9
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    p = histogram.percentiles(hist, [50, 99])
    return {"bw_MBps": st["bytes"] / secs / 1e6, "iops": st["ios"] / secs, "bytes": st["bytes"],
            "cpu_s": cpu, "cpu_s_per_GB": cpu / (st["bytes"] / 1e9), "cpu_util": cpu / secs, "runtime_s": secs,
            "lat_p50_us": p[50], "lat_p99_us": p[99], "depth": depth}


METRICS = ("bw_MBps", "iops", "cpu_s_per_GB", "cpu_util", "lat_p50_us", "lat_p99_us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    runs: dict = {}
    plans = {case: plan_for(case, args.seconds) for case in CASES}
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with groundtruth.LoopMount(size=FILE_SIZE + (512 << 20), direct_io=False) as mnt:
        path = os.path.join(mnt.path, "data.bin")
        groundtruth.write_incompressible(path, FILE_SIZE)
        for rep in range(args.reps):
            for direct in (True, False):
                mode = "direct" if direct else "buffered"
                for case in CASES:
                    names = ENGINES[direct]
                    order = names[rep % len(names):] + names[:rep % len(names)]   # rotate: no engine always first
                    # the caches must hold across one round of engines: if anything on the machine
                    # drops them meanwhile, the round is re-warmed and run again
                    for _attempt in range(10):
                        warm(path, buffered=not direct)
                        drops = groundtruth.page_cache_drops()
                        got = {e: run_one(e, case, direct, path, plans[case], args.seconds) for e in order}
                        if groundtruth.page_cache_drops() == drops and (direct or fully_cached(path)):
                            break
                        print(f"rep {rep} {mode}/{case}: page cache dropped by another process, again", flush=True)
                    else:
                        sys.exit("the page cache keeps being dropped; cannot benchmark now")
                    for e, r in got.items():
                        runs.setdefault(f"{mode}/{case}", {}).setdefault(e, []).append(r)
                    print(f"rep {rep} {mode:8s} {case:8s} " + " | ".join(
                        f"{e} {r['bw_MBps']:7.0f} MB/s {r['cpu_s_per_GB']:.3f} CPU s/GB" for e, r in got.items()),
                        flush=True)
    summary = {}
    for key, per_engine in runs.items():
        mode = key.split("/")[0]
        med = {e: {m: statistics.median(x[m] for x in rs) for m in METRICS} for e, rs in per_engine.items()}
        ref = NATIVE_REF[mode == "direct"]
        summary[key] = {"median": med, "reps": per_engine, "ref": ref,
                        "asyncio_vs_ref": {"bw": med["asyncio"]["bw_MBps"] / med[ref]["bw_MBps"],
                                           "cpu_per_GB": med["asyncio"]["cpu_s_per_GB"] / med[ref]["cpu_s_per_GB"]}}
    meta = {"date": started, "kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "file_size": FILE_SIZE, "depth": DEPTH, "seconds": args.seconds, "reps": args.reps,
            "mount": "ext4 on loop, direct_io=off (backing file in the host page cache)",
            "load_avg_at_end": os.getloadavg()}
    import aiofiles
    import uvloop
    meta["aiofiles"], meta["uvloop"] = getattr(aiofiles, "__version__", "?"), uvloop.__version__
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "asyncio-vs-native.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary}, f, indent=1)
    lines = [f"# asyncio engine (aiofiles on uvloop) vs native engines ({started}, kernel {meta['kernel']}, "
             f"{meta['cpus']} CPUs, Python {meta['python']}, uvloop {meta['uvloop']})", "",
             f"1 GiB file on ext4 on loop (direct_io=off: the backing file is in the host page cache, so the "
             f"device is memcpy-fast and software cost shows). {DEPTH} requests in flight per engine "
             f"(asyncio: {DEPTH} reader tasks / executor threads; psync: 1), {args.seconds:g} s per run, "
             f"{args.reps} interleaved runs each (engine order rotated), medians. Buffered cases: the file is in "
             f"the mount's page cache too (pure memcpy). CPU = user+system of the whole process per GB read; "
             f"CPU util = CPU s per wall s (2 = both cores). Load average at the end: "
             f"{meta['load_avg_at_end'][0]:.1f} (the VM is shared).", "",
             "| mode | case | engine | MB/s | IOPS | CPU s/GB | CPU util | p50 µs | p99 µs | asyncio / uring MB/s | asyncio / uring CPU s/GB |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, s in summary.items():
        mode, case = key.split("/")
        for e, m in s["median"].items():
            ratio = (f"{s['asyncio_vs_ref']['bw']:.2f}x", f"{s['asyncio_vs_ref']['cpu_per_GB']:.2f}x") \
                if e == "asyncio" else ("", "")
            lines.append(f"| {mode} | {case} | {e} | {m['bw_MBps']:.0f} | {m['iops']:.0f} | {m['cpu_s_per_GB']:.3f} | "
                         f"{m['cpu_util']:.2f} | {m['lat_p50_us']:.0f} | {m['lat_p99_us']:.0f} | {ratio[0]} | {ratio[1]} |")
    with open(os.path.join(args.out, "asyncio-vs-native.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
