"""fio vs iodl on loop mounts: the acceptance comparisons (reads, then random and mixed writes), recorded in bench/results/.

Run as root: /work/venv/bin/python bench/bench_fio_compare.py [--runtime S] [--ramp S] [--repeat N]
                                                                  [--backing DIR] [--cases A,B] [--out PREFIX]

Each case runs fio and iodl --repeat times each, interleaved (fio-compare --repeat): sides are
medians, the ratio is the median of per-round ratios. The throttled case runs without a ramp
(docs/fio-compare.md: fio's per-clone ramp end under 1.8 s of queue).

--backing picks where the loop images live. The default (/var/tmp) puts them on this VM's disk,
which other tenants share: its speed can swing 5x within a run. --backing /dev/shm puts them
in RAM, so the unthrottled cases compare what the two tools cost per request, undisturbed by
the disk. The hypervisor's share of the CPU (steal) is recorded per case: above a few percent
the ratios are noise.

--cpu N runs both tools (fio-compare and the fio it starts inherit the affinity) and the kernel's
unbound workqueues — the loop devices' workers — on CPU N alone. On two vCPUs a request to a
RAM-backed loop device costs what the scheduler's placement of the loop worker makes it (beside
the tool, or across CPUs, woken from idle; docs/fio-compare.md), and the placement can differ
between the two tools and from run to run: pinned, the comparison is of the tools' own work.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from iodl.groundtruth import BlkioGroup, CpuSteal, LoopMount, UnboundWorkqueues

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIO = os.path.join(REPO, "workloads", "fio")
# name, job file, extra args, blkio limit (B/s), metric, tolerance description
CASES = [
    ("reference-rate", "reference-job1.fio", ["--scale", "0.001"], None, "both", "within 5%"),
    ("reference-throttled", "NORATE", ["--scale", "0.001", "--ramp-time", "0"], 150 * 10**6, "both", "within 5%"),
    ("seq-1m-qd32", "seq-1m-qd32.fio", [], None, "bandwidth", ">= 0.95"),
    ("rand-4k-qd32", "randread-4k-qd32.fio", [], None, "iops", ">= 0.90"),
    # random and mixed writes (iodl's own files only): IOPS of each direction, and mixed 1 MiB bandwidth
    ("randrw-4k-qd32-libaio", "randrw-4k-qd32.fio", [], None, "iops each direction", "0.95-1.10"),
    ("randrw-4k-qd32-io_uring", "randrw-4k-qd32-uring.fio", [], None, "iops each direction", "0.95-1.10"),
    ("randwrite-4k-qd32", "randwrite-4k-qd32.fio", [], None, "iops", "0.95-1.10"),
    ("rw-1m-qd32", "rw-1m-qd32.fio", [], None, "bandwidth each direction", "within 5%"),
]


def run_case(name, job, extra, limit, runtime, ramp, repeat, tmp, backing, cpu=None):
    if job == "NORATE":
        job = os.path.join(tmp, "norate.fio")
        with open(os.path.join(FIO, "reference-job1.fio")) as src, open(job, "w") as dst:
            dst.writelines(ln for ln in src if not ln.startswith("rate_iops"))
    else:
        job = os.path.join(FIO, job)
    out = os.path.join(tmp, f"{name}.json")
    def enter():
        if limit:
            group.enter()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    pinned = UnboundWorkqueues(cpu) if cpu is not None else contextlib.nullcontext()
    with LoopMount(1536 << 20, workdir=backing) as m, BlkioGroup("bench-fio") as group, pinned, CpuSteal() as steal:
        if limit:
            group.throttle_read(m.majmin, limit)
        cmd = [sys.executable, "-m", "iodl", "fio-compare", job, "--directory", m.path, "--runtime", str(runtime),
               "--ramp-time", str(ramp), "--repeat", str(repeat), "--out", out, *extra]   # extra wins
        r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=enter)
    if r.returncode:
        return {"name": name, "error": r.stderr.strip()}
    (entry,) = json.load(open(out))["jobs"]
    # the machine's run queue over the case (1-minute load average at its end): other work on the CPUs,
    # beyond the hypervisor's steal, shows here (above the core count the rounds' ratios are noise)
    return {**entry, "name": name, "throttle_Bps": limit, "steal": round(steal.share, 4),
            "load": round(os.getloadavg()[0], 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=float, default=5)
    ap.add_argument("--ramp", type=float, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backing", default="/var/tmp", help="directory of the loop images (default /var/tmp)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "fio-compare"))
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--cpu", type=int, help="run both tools and the kernel's unbound workqueues on this CPU alone")
    a = ap.parse_args()
    cases = [c for c in CASES if not a.cases or c[0] in a.cases.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [dict(run_case(n, j, x, lim, a.runtime, a.ramp, a.repeat, tmp, a.backing, a.cpu), criterion=c, metric=met)
                for n, j, x, lim, met, c in cases]
    doc = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "runtime_s": a.runtime, "ramp_s": a.ramp, "repeat": a.repeat,
           "backing": a.backing, "cpu": a.cpu, "kernel": os.uname().release, "cases": rows}
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["| case | fio MB/s | iodl MB/s | bw ratio | fio IOPS | iodl IOPS | IOPS ratio | rounds (IOPS ratio) | criterion "
             "| steal | load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error']} |||||||||")
            continue
        # a job of reads and writes: a row per direction (fio's read and write objects beside iodl's)
        for d in [d for d in ("read", "write") if r["fio"].get(d)] or [None]:
            f, i, q = ((r["fio"][d], r["iodl"][d], r["ratio"][d]) if d else (r["fio"], r["iodl"], r["ratio"]))
            name = f"{r['name']} {d}s" if d else r["name"]
            # each round's own ratio: the median hides how far apart the rounds were (a busy machine)
            per_round = " / ".join(f"{(x['ratio'][d] if d else x['ratio'])['iops']:.2f}" for x in r.get("rounds", []))
            lines.append(f"| {name} | {f['bandwidth_MBps']:.1f} | {i['bandwidth_MBps']:.1f} | {q['bandwidth']:.3f} | "
                         f"{f['iops']:.0f} | {i['iops']:.0f} | {q['iops']:.3f} | {per_round or '-'} | "
                         f"{r['criterion']} ({r['metric']}) | {r['steal']:.1%} | {r.get('load', '-')} |")
    pin = "" if a.cpu is None else f", both tools and the unbound workqueues on CPU {a.cpu}"
    with open(a.out + ".md", "w") as f:
        f.write(f"# fio-compare on loop mounts backed by {a.backing} ({doc['when']}, runtime {a.runtime}s, ramp {a.ramp}s, "
                f"{a.repeat} interleaved runs per tool{pin}; medians, ratio = median of per-round ratios)\n\n")
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
