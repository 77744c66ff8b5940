"""Accelerators per client: the emulator's own cost and AU of a workload's train-sync (retinanet_b200,
resnet50, ...) at several rank counts, with --engine null (no I/O at all) and reading a
page-cache-resident dataset, and the answer: the largest rank count whose AU holds the workload's
threshold, in each case.

Beside each, the floor at the same rank count: processes that only compute (a sleep) and
meet at iodl's barrier (tests/system/bare_steps.py). Per run: AU, samples/s, data and barrier wait
per step, the result's emulator figures
(train.emulator: process CPU per step and per sample, its loader part) and, measured from outside,
each rank's CPU by thread (/proc/PID/task/TID/stat utime+stime, in ticks, over the middle half of the
process's life: the step loop is the main thread, the others are the reader, the open threads and
MPI's; a run of few steps puts start-up in that half, and these columns are then rough). Rank counts
and the two cases are interleaved and repeated, as the machine is shared; the load average at each
run is kept beside it. The physical references: one plain open-read-close loop flat out (one
process, the round's first row), and at each rank count as many such loops at once, each at the
workload's pace (a batch, then the compute time of sleep; for files of one sample each): the same
reads with the wake-ups and the caches cooled by the sleeps that a rank's reads have too, and
nothing of iodl's. A loop reads a one-sample file whole in one call, a file of many samples in
block-size reads into one buffer (as iodl does); its CPU a sample is its CPU a file over the
file's samples. Each loop is run twice: in Python, and in C (bench/c_loop.c, built here with cc):
what the C loop costs, flat or paced, is the kernel's part, which no emulator can go below here.

    python bench/bench_emu_cost.py --root DIR [--workload retinanet_b200] [--ranks 1 4 8 16] [--rounds 2]
                                   [--steps 80] [--engine auto] [--out NAME]

DIR: a dataset of the workload (iodl generate --workload retinanet_b200 --files 4000 --root DIR;
resnet50: --files 8), read once before so that it is in the page cache.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
TICK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the bench takes from the workload: its batch, compute time, samples a file, block size,
    AU threshold."""
    name: str
    batch: int
    compute_s: float
    samples_per_file: int
    block_size: int
    au_threshold: float

    @classmethod
    def of(cls, name: str) -> "Shape":
        from iodl.workload import load_workload

        wl = load_workload(name)
        return cls(name, wl.train.batch_size, wl.train.compute_time_s, wl.dataset.samples_per_file,
                   wl.read.block_size, wl.metric.au_threshold)


def rank_pids(launcher: int) -> list[int]:
    """The iodl rank processes under a launcher (mpiexec's proxy's children)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"iodl" in cmd and b"-m" in cmd and ppid != launcher and int(pid) != launcher:
            out.append(int(pid))
    return out


def threads_cpu(pid: int) -> dict[int, float]:
    """tid -> CPU seconds (utime + stime) of each thread of a process."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        pass
    return out


def warm(root: str) -> None:
    """Read every file of the dataset once, so that the run finds it in the page cache."""
    for d, _s, files in os.walk(root):
        for name in files:
            with open(os.path.join(d, name), "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass


def one(shape: Shape, ranks: int, root: str | None, steps: int, tmp: str, engine: str = "auto") -> dict:
    out = os.path.join(tmp, f"r{ranks}-{'null' if root is None else 'cache'}.json")
    args = ["--workload", shape.name, "--steps", str(steps), "--progress", "off", "--out", out]
    args += ["--engine", "null"] if root is None else ["--root", root, "--engine", engine]
    if root is not None:
        warm(root)   # others on the machine may have dropped the page cache since the last run
    cmd = [sys.executable, "-m", "iodl", "read", *args]
    if ranks > 1:
        cmd = [shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]),
               "-n", str(ranks), *cmd]
    load = os.getloadavg()[0]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[dict[int, dict[int, float]]] = []
    while proc.poll() is None:   # per-thread CPU of every rank, every 0.5 s
        pids = rank_pids(proc.pid) if ranks > 1 else [proc.pid]
        samples.append({pid: threads_cpu(pid) for pid in pids})
        time.sleep(0.5)
    err = proc.stderr.read().decode()
    if proc.returncode:
        raise RuntimeError(err)
    with open(out) as f:
        doc = json.load(f)
    t = doc["train"]
    emu = t.get("emulator") or {k: float("nan") for k in ("cpu_s_per_step", "loader_cpu_s_per_step", "cpu_s_per_sample",
                                                          "client_cpu_share")}   # a result from before the figure
    # per thread class over the middle of the run (the first and last quarter of the samples left
    # out: start-up, the result): main thread, and every other thread together
    lo, hi = samples[len(samples) // 4], samples[max(len(samples) * 3 // 4, len(samples) // 4 + 1) - 1]
    span = (len(samples) * 3 // 4 - len(samples) // 4 - 1) * 0.5 or 0.5
    main, other, n_threads = [], [], []
    for pid, after in hi.items():
        before = lo.get(pid, {})
        main.append((after.get(pid, 0) - before.get(pid, 0)) / span)
        other.append(sum(after[tid] - before.get(tid, 0) for tid in after if tid != pid) / span)
        n_threads.append(len(after))
    return {"ranks": ranks, "case": "null" if root is None else "page cache", "load_1min": round(load, 2),
            "au": round(t["au"], 4), "samples_per_s": round(t["samples_per_s"], 1),
            "data_wait_ms": round(t["data_wait_s_per_step"] * 1e3, 2),
            "barrier_wait_ms": round(t["barrier_wait_s_per_step"] * 1e3, 2),
            "step_p50_ms": round(t["step_time_s"]["p50"] * 1e3, 2),
            "cpu_ms_per_step": round(emu["cpu_s_per_step"] * 1e3, 3),
            "loader_cpu_ms_per_step": round(emu["loader_cpu_s_per_step"] * 1e3, 3),
            "cpu_us_per_sample": round(emu["cpu_s_per_sample"] * 1e6, 1),
            "client_cpu_share": round(emu["client_cpu_share"], 3),
            "proc_main_thread_cores": round(sum(main), 3), "proc_other_threads_cores": round(sum(other), 3),
            "threads_per_rank": max(n_threads, default=0)}


BARE = os.path.join(os.path.dirname(RESULTS), "..", "tests", "system", "bare_steps.py")


def bare(shape: Shape, ranks: int, steps: int) -> dict:
    """The floor: ranks that only sleep the compute time and meet at iodl's barrier (no reader, no
    engine, no bookkeeping: tests/system/bare_steps.py). Its loss is the machine's wake-up skew."""
    load = os.getloadavg()[0]
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([exe, "-n", str(ranks), sys.executable, BARE, str(steps), str(shape.compute_s)], capture_output=True,
                          text=True, check=True)
    return {"ranks": ranks, "case": "bare barrier+sleep", "load_1min": round(load, 2),
            "au": round(json.loads(proc.stdout.strip().splitlines()[-1])["au"], 4)}


def _loop_cpu(shape: Shape, paths: list[str], paced: bool, passes: int, out) -> None:
    """One loop process: open - read whole - close over paths, `passes` times; its CPU per file to out:
    the median pass's (a pass of 2,000 files is ~0.1 s of CPU, and one pass in several is slowed by
    whatever else the host runs then: the median says what the loop costs)."""
    buf = bytearray(shape.block_size)
    per_pass = []
    for _ in range(passes):
        cpu0 = time.process_time()
        for i, path in enumerate(paths):
            with open(path, "rb", buffering=0) as f:
                if shape.samples_per_file == 1:   # a sample's file, in one read (no fstat: the loop's calls are the figure)
                    f.read()
                else:
                    while f.readinto(buf):
                        pass
            if paced and i % shape.batch == shape.batch - 1:
                time.sleep(shape.compute_s)
        per_pass.append((time.process_time() - cpu0) / len(paths))
    out.put(statistics.median(per_pass))


def plain_loop(shape: Shape, root: str, limit: int = 2000, ranks: int = 1, paced: bool = False) -> dict:
    """The physical reference: a plain single-threaded Python loop, open - read whole - close, over
    the same files (in the page cache): files per CPU second of its own (one core), its median pass of
    five. ranks > 1: that many such loops at once, each over its share (three passes), the mean of
    their CPU per file.
    paced: each loop at the workload's pace, a batch of files then a sleep of the compute time, as a rank reads
    them (its wake-ups and its caches cooled by the sleeps are then in the figure too, as they are
    in a rank's)."""
    import multiprocessing

    paths = sorted(os.path.join(d, f) for d, _s, fs in os.walk(root) for f in fs if not f.startswith("iodl-"))[:limit]
    warm(root)
    load = os.getloadavg()[0]
    out = multiprocessing.get_context("fork").Queue()
    procs = [multiprocessing.get_context("fork").Process(target=_loop_cpu, args=(shape, paths[k::ranks], paced,
                                                                                5 if ranks == 1 else 3, out))
             for k in range(ranks)]
    for p in procs:
        p.start()
    per_file = [out.get() for _ in procs]
    for p in procs:
        p.join()
    cpu = statistics.mean(per_file)
    return {"ranks": ranks, "case": "plain loop, paced" if paced else "plain open-read-close loop",
            "load_1min": round(load, 2), "files_per_cpu_s": round(1 / cpu, 1),
            "cpu_us_per_sample": round(cpu / shape.samples_per_file * 1e6, 2)}


def c_loop(shape: Shape, root: str, exe: str, limit: int = 2000, ranks: int = 1, paced: bool = False) -> dict:
    """plain_loop's loops in C (bench/c_loop.c, built as exe): the same files, passes and pace, no Python."""
    paths = sorted(os.path.join(d, f) for d, _s, fs in os.walk(root) for f in fs if not f.startswith("iodl-"))[:limit]
    warm(root)
    load = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile("w", suffix=".list") as listing:
        listing.write("\n".join(paths) + "\n")
        listing.flush()
        block = 0 if shape.samples_per_file == 1 else shape.block_size
        procs = [subprocess.Popen([exe, listing.name, str(k), str(ranks), str(int(paced)), str(shape.batch),
                                   str(shape.compute_s), str(5 if ranks == 1 else 3), str(block)],
                                  stdout=subprocess.PIPE, text=True) for k in range(ranks)]
        outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):   # its own error is on stderr; nothing to parse then
        raise RuntimeError(f"c_loop failed (exit {max(p.returncode for p in procs)})")
    per_file = [float(out) / 1e6 for out in outs]
    cpu = statistics.mean(per_file)
    return {"ranks": ranks, "case": "C loop, paced" if paced else "C open-read-close loop",
            "load_1min": round(load, 2), "files_per_cpu_s": round(1 / cpu, 1),
            "cpu_us_per_sample": round(cpu / shape.samples_per_file * 1e6, 2)}


def build_c_loop(tmp: str) -> str:
    exe = os.path.join(tmp, "c_loop")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", exe, os.path.join(HERE, "c_loop.c")], check=True)
    return exe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--workload", default="retinanet_b200", help="a built-in workload (its dataset is --root)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--out", default="emu-cost", help="a name: bench/results/NAME.json and NAME.md")
    # auto (io_uring here) is what a user runs; results before 2026-11-29 (emu-cost-1129f) read with psync
    ap.add_argument("--engine", default="auto", help="the engine of the page-cache case (default: auto)")
    a = ap.parse_args()
    shape = Shape.of(a.workload)
    rows = []
    with tempfile.TemporaryDirectory(prefix="iodl-emu-cost-") as tmp:
        exe = build_c_loop(tmp)
        for _ in range(a.rounds):
            for row in (plain_loop(shape, a.root), c_loop(shape, a.root, exe)):
                rows.append(row)
                print(json.dumps(row), flush=True)
            for ranks in a.ranks:
                runs = [bare(shape, ranks, a.steps), one(shape, ranks, None, a.steps, tmp),
                        one(shape, ranks, a.root, a.steps, tmp, a.engine)]
                if shape.samples_per_file == 1:   # the pace is a batch of files
                    runs += [plain_loop(shape, a.root, ranks=ranks, paced=True),
                             c_loop(shape, a.root, exe, ranks=ranks, paced=True)]
                for row in runs:
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    write_results(a.out, rows, a.steps, a.rounds, shape, a.engine)


def supported(rows: list[dict], case: str, threshold: float) -> str:
    """The largest rank count whose AU (the median of its rounds) holds threshold, counting up from the
    smallest tested: "N" when the next tested count fell below it, ">= N" when none tested did."""
    counts = sorted({r["ranks"] for r in rows if r["case"] == case})
    held = 0
    for n in counts:
        if statistics.median(r["au"] for r in rows if r["case"] == case and r["ranks"] == n) < threshold:
            return str(held) if held else f"< {n}"
        held = n
    return f">= {held}" if held else "none tested"


def write_results(name: str, rows: list[dict], steps: int, rounds: int, shape: Shape, engine: str) -> None:
    """bench/results/NAME.json (every run) and NAME.md (per case and rank count, the median of the
    rounds; the accelerators per client of each case)."""
    cols = list(next(r for r in rows if r["case"] == "null")) + ["files_per_cpu_s"]   # an iodl run's columns
    groups = {}
    for r in rows:
        groups.setdefault((r["case"], r["ranks"]), []).append(r)
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump({"nproc": os.cpu_count(), "workload": dataclasses.asdict(shape), "engine": engine, "rows": rows}, f,
                  indent=1)

    def median(vals):
        # a count that every round shares stays a count (the median of two ints is a float)
        return vals[0] if all(v == vals[0] for v in vals) else statistics.median(vals)

    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write(f"# {name}: {shape.name} train-sync, {steps} steps, {os.cpu_count()} cores, page cache read with "
                f"--engine {engine} (bench/bench_emu_cost.py; median of {rounds} interleaved rounds)\n\n")
        f.write(f"Accelerators per client (the largest rank count tested whose AU >= {shape.au_threshold}): "
                + ", ".join(f"{case} {supported(rows, case, shape.au_threshold)}"
                            for case in ("bare barrier+sleep", "null", "page cache")) + "\n\n")
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for (case, ranks), rs in sorted(groups.items()):
            med = {c: (median([r[c] for r in rs]) if isinstance(rs[0].get(c, ""), (int, float))
                       else rs[0].get(c, "")) for c in cols}
            f.write("| " + " | ".join(str(round(med[c], 3)) if isinstance(med[c], float) else str(med[c])
                                      for c in cols) + " |\n")


if __name__ == "__main__":
    main()
