"""Scale on a small box: start-up time, memory and CPU per rank at 2 and 72 ranks.

Runs `iodl read --pattern train-sync` under the pip-installed mpiexec. The null engine (no
dataset) isolates what iodl itself costs; `--root DIR --workload resnet50` adds a real run.
Ranks that wait (barrier, compute sleep) must not spin: CPU seconds per rank per wall second
is reported as `busy`, and should stay far below 2 cores / ranks.

    python bench/bench_scale.py [--ranks 2,72] [--root DIR] [--runs N] [--label TEXT]

Adds its rows (each with its date, the checkout's commit, the load average before it and --label)
to bench/results/scale.json, whose earlier rows stay, and writes bench/results/scale.md from all
of them. The start-up goal's figure is `first_step_s_median`: the median rank's `started_s`, from its process
start to its first step (the start barrier passed); `startup_s_median` its `startup_s`, to ready.

    python bench/bench_scale.py --floor [--ranks 72] [--runs 3]

The start-up's floor beside iodl's own, interleaved: at each rank count, the median rank's age at
the point where each of these has its ranks together: a bare interpreter (`pass`, then a
sleep-polled barrier over a file count), the same importing numpy, the same initialising MPI
(mpi4py, iodl's MPI settings, a sleep-polled Ibarrier), numpy and MPI both (what every iodl rank
needs before anything of its own), and iodl (`first_step_s_median`, null engine). iodl's own
start-up is the last minus the one before it; the goal's 8 s holds only where the floor allows it.
Writes bench/results/startup-floor.{json,md} (rows added, earlier ones kept).

    python bench/bench_scale.py --pair VAR=A,B [--ranks 72] [--runs 6] [--name NAME]

One setting of the environment, two values, in interleaved pairs (this VM drifts by more than most
effects from one minute to the next): each round a null-engine start with VAR=A and one with VAR=B,
their order swapped every round; per run the median rank's first step and CPU (`cpu_s`, the whole
process). Writes bench/results/NAME.{json,md} (default startup-pair): the runs, and in how many pairs
B came sooner and used less CPU. Two trees: `--pair PYTHONPATH=/tmp/old,` (a worktree of the
commit before, its native module copied in) run from outside any checkout: `-m iodl` puts the
working directory ahead of PYTHONPATH. What a millisecond of a rank's start-up costs the job:
`PYTHONPATH=bench/startup_burn --pair IODL_BURN_MS=0,40` (a sitecustomize that spins that much CPU).

    python bench/bench_scale.py --files 10000,200000 [--ranks 4] [--data /var/tmp/iodl-scale]

Dataset size instead: the `raw` workload, 1 sample of 4 KiB per file, generated once per file
count under --data (kept for re-runs), read by `iodl read --pattern train-sync --steps 20` at each
--ranks; per-rank RSS and PSS (median over ranks) and start-up (the slowest rank) at each size, and
what going from the smallest to the largest adds. Goal: <= 10 MB RSS and <= 0.5 s start-up.
Writes bench/results/scale-files.{json,md} (--name NAME: NAME.{json,md}).

    python bench/bench_scale.py --listing 200000 [--data /var/tmp/iodl-scale] [--repeat 5] [--cold]

Listing a plain directory (no manifest): N files of 4 KiB made by a plain create-write-close loop
into one directory (kept under --data for re-runs), listed in this process by iodl.data.listing's
list_plain (names by readdir and sizes by fstatat on several threads, in C) and by the
os.scandir walk it replaced (kept below as the reference), warm (inodes cached) and with --cold
also cold (the machine's caches dropped before each listing: root only, and felt by anyone else
running on the machine), interleaved, --repeat rounds, medians; both must give the same names
and sizes. Writes bench/results/listing-plain-dir.{json,md}.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def _python() -> str:
    """The ranks' interpreter: its start-up CPU differs by build (pyenv's default vs Debian's PGO build)."""
    return f"{os.path.realpath(sys.executable)} {platform.python_version()}"


def _commit() -> str:
    """The checkout's commit, "+" when its code (iodl/) has changes not committed."""
    head = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no", "--", "../iodl"],
                           capture_output=True, text=True).stdout
    return head.strip() + ("+" if dirty.strip() else "")


def run(ranks: int, extra: list[str], env: dict | None = None) -> dict:
    load = os.getloadavg()[0]   # before the run: its own ranks are load too
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "iodl", "read", "--pattern", "train-sync",
               "--out", out, *extra]
        t = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        wall = time.monotonic() - t
        if proc.returncode:
            raise SystemExit(proc.stderr[-2000:])
        with open(out) as f:
            result = json.load(f)
    per = result["per_rank"]
    return {
        "ranks": ranks, "args": extra, "wall_s": round(wall, 2),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": _commit(),
        "load": round(load, 1),
        "startup_s_max": round(max(p["startup_s"] for p in per), 3),
        "startup_s_median": round(statistics.median(p["startup_s"] for p in per), 3),
        # the start-up goal's figure: to the first step (a result from before started_s has none)
        **({"first_step_s_median": round(statistics.median(p["started_s"] for p in per), 3),
            "first_step_s_max": round(max(p["started_s"] for p in per), 3)} if "started_s" in per[0] else {}),
        "rss_mb_max": round(max(p["max_rss_mb"] for p in per), 1),
        "rss_mb_rank0": round(next(p["max_rss_mb"] for p in per if p["rank"] == 0), 1),
        "rss_mb_max_others": round(max((p["max_rss_mb"] for p in per if p["rank"] != 0), default=0.0), 1),
        "rss_mb_median": round(statistics.median(p["max_rss_mb"] for p in per), 1),
        "pss_mb_median": round(statistics.median(p.get("pss_mb", 0.0) for p in per), 1),
        "cpu_s_per_rank_median": round(statistics.median(p["cpu_s"] for p in per), 3),
        "busy": round(statistics.median(p["cpu_s"] for p in per) / wall, 4),
        "au": round(result["train"]["au"], 4),
        "barrier_wait_s_per_step": round(result["train"]["barrier_wait_s_per_step"], 5),
        "steps": result["train"]["steps"],
    }


def write_table(f, cols: list[str], rows: list[dict]) -> None:
    """rows as a Markdown table of cols (a row without a column shows it empty)."""
    f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for r in rows:
        f.write("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |\n")


RAW4K = """[workload]
name = "raw4k"
[dataset]
format = "raw"
files = {files}
samples_per_file = 1
sample_size = "4KiB"
[train]
batch_size = 32
compute_time_s = 0.01
epochs = 1
"""


def by_files(args) -> None:
    counts = [int(x) for x in args.files.split(",")]
    ranks = [int(x) for x in args.ranks.split(",")]
    os.makedirs(args.data, exist_ok=True)
    rows = []
    for files in counts:
        root = os.path.join(args.data, f"raw4k-{files}")
        toml = os.path.join(args.data, f"raw4k-{files}.toml")
        with open(toml, "w") as f:
            f.write(RAW4K.format(files=files))
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "iodl", "generate", "--workload", toml, "--root", root, "--quiet"],
                       check=True)
        gen_s = time.monotonic() - t
        # the generated dataset, and its copy directory read as a plain directory (no manifest:
        # listed by one rank per node, its listing shared)
        for layout, extra in (("iodl", ["--root", root]),
                              ("plain", ["--root", os.path.join(root, "copy-0000"), "--workload", toml])):
            for n in ranks:
                best = None
                for _ in range(args.repeat):   # the quietest of a few runs: others share these 2 cores
                    row = run(n, [*extra, "--steps", "20"])
                    if best is None or row["startup_s_max"] < best["startup_s_max"]:
                        best = row
                best.update(files=files, layout=layout, generate_or_check_s=round(gen_s, 2))
                rows.append(best)
                print(json.dumps(best), flush=True)
    growth = []
    for n, layout in [(n, layout) for layout in ("iodl", "plain") for n in ranks]:
        mine = [r for r in rows if r["ranks"] == n and r["layout"] == layout]
        lo, hi = mine[0], mine[-1]
        growth.append({"ranks": n, "layout": layout, "from_files": lo["files"], "to_files": hi["files"],
                       "rss_mb_median": round(hi["rss_mb_median"] - lo["rss_mb_median"], 1),
                       "pss_mb_median": round(hi["pss_mb_median"] - lo["pss_mb_median"], 1),
                       "startup_s_max": round(hi["startup_s_max"] - lo["startup_s_max"], 3)})
    met = all(g["rss_mb_median"] <= 10 and g["startup_s_max"] <= 0.5 for g in growth if g["layout"] == "iodl")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = args.name or "scale-files"
    with open(os.path.join(HERE, "results", f"{name}.json"), "w") as f:
        json.dump({"nproc": os.cpu_count(), "rows": rows, "growth": growth, "goal": {"rss_mb": 10, "startup_s": 0.5},
                   "met": met}, f, indent=2)
    cols = ["layout", "files", "ranks", "startup_s_max", "startup_s_median", "rss_mb_median", "pss_mb_median", "rss_mb_rank0",
            "wall_s", "steps"]
    with open(os.path.join(HERE, "results", f"{name}.md"), "w") as f:
        f.write(f"# Per-rank cost of a dataset's size on {os.cpu_count()} cores (`python bench/bench_scale.py "
                f"--files {args.files} --ranks {args.ranks}`)\n\n"
                "`raw` workload, 1 sample of 4 KiB per file, `iodl read --pattern train-sync --steps 20` (batch 32);\n"
                f"the run with the quickest start-up of {args.repeat} per row. RSS and PSS: the median rank's peak RSS and\n"
                "its PSS (pages shared by the node's ranks, such as MPI's shared memory or a plain directory's\n"
                "shared listing, split among them).\n"
                "Start-up: the slowest rank's, from process start to its first I/O. `plain`: the same files read\n"
                "as a plain directory (the copy directory, no manifest): listed by one rank per node, shared.\n\n")
        write_table(f, cols, rows)
        f.write("\n| layout | ranks | files | RSS added (MB) | PSS added (MB) | start-up added (s) |\n"
                "|---|---|---|---|---|---|\n")
        for g in growth:
            f.write(f"| {g['layout']} | {g['ranks']} | {g['from_files']:,} -> {g['to_files']:,} | {g['rss_mb_median']} | "
                    f"{g['pss_mb_median']} | {g['startup_s_max']} |\n")
        f.write(f"\nGoal (generated datasets): <= 10 MB RSS and <= 0.5 s start-up added per rank — "
                f"{'met' if met else 'NOT met'}. A plain directory is listed (a stat per file) by one rank\n"
                "per node before any reads: its start-up grows with the files, once per node.\n")


def scandir_listing(root: str) -> tuple[list[bytes], list[int]]:
    """The listing iodl did before _native.list_dir: os.scandir and DirEntry.stat in Python, one
    thread (links and non-regular files left out here: the bench's directory has none)."""
    names, sizes = [], []

    def walk(dirpath: bytes, rel: bytes) -> None:
        with os.scandir(dirpath) as it:
            entries = sorted(it, key=lambda e: e.name)
        subdirs = []
        for e in entries:
            if e.is_dir(follow_symlinks=True):
                subdirs.append(e)
                continue
            st = e.stat(follow_symlinks=True)
            names.append(rel + e.name)
            sizes.append(st.st_size)
        for d in subdirs:
            walk(d.path, rel + d.name + b"/")

    walk(os.fsencode(root), b"")
    return names, sizes


def plain_dir(path: str, files: int) -> str:
    """A directory of `files` 4 KiB files made by a plain loop (not iodl generate), kept for re-runs."""
    done = path + ".done"
    if os.path.exists(done):
        return path
    os.makedirs(path, exist_ok=True)
    data = os.urandom(4096)
    for i in range(files):
        fd = os.open(f"{path}/f{i:07d}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
    open(done, "w").close()
    return path


def by_listing(args) -> None:
    sys.path.insert(0, os.path.dirname(HERE))
    from iodl.data import listing

    files = args.listing
    root = plain_dir(os.path.join(args.data, f"plain-{files}"), files)
    cold_ok = args.cold and os.geteuid() == 0
    new = listing.list_plain(root)
    names, sizes = scandir_listing(root)
    assert new["sizes"].tolist() == sizes and len(names) == files
    assert new["blob"].tobytes() == b"".join(names), "the two listings differ"
    ways = {"scandir (before)": lambda: scandir_listing(root), "list_dir (after)": lambda: listing.list_plain(root)}
    times: dict[str, list[float]] = {f"{w}, {c}": [] for w in ways for c in ("warm", "cold")}
    for j in range(args.repeat):
        for way in (list(ways) if j % 2 == 0 else list(reversed(ways))):
            for cache in ("cold", "warm") if cold_ok else ("warm",):
                if cache == "cold":
                    from iodl.cache import drop_caches

                    drop_caches()
                t = time.perf_counter()
                ways[way]()
                times[f"{way}, {cache}"].append(time.perf_counter() - t)
        print(json.dumps({k: round(v[-1], 3) for k, v in times.items() if v}), flush=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    result = {"files": files, "root": root, "nproc": os.cpu_count(), "repeat": args.repeat,
              "threads": listing.LIST_THREADS, "seconds": times, "median_s": med}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "listing-plain-dir.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(HERE, "results", "listing-plain-dir.md"), "w") as f:
        f.write(f"# Listing a plain directory of {files:,} files (`python bench/bench_scale.py --listing {files} "
                f"--repeat {args.repeat}`)\n\n"
                f"One directory of {files:,} files of 4 KiB made by a plain create-write-close loop under {args.data}\n"
                f"(ext4 on the VM's disk); {os.cpu_count()} cores shared with other work. Each way lists it whole, names\n"
                "and sizes, in this process: `scandir (before)` is iodl's walk before this change (os.scandir,\n"
                f"DirEntry.stat, one thread); `list_dir (after)` is data.listing.list_plain now (readdir and fstatat in C,\n"
                f"{listing.LIST_THREADS} stat threads, the GIL released)."
                + (" Cold: page, dentry and inode caches dropped first." if cold_ok else "")
                + "\nBoth listings are checked equal, name for name and size for size. Median of "
                f"{args.repeat} interleaved rounds.{(' ' + args.note) if args.note else ''}\n\n"
                "| way | cache | median s | files/s | runs (s) |\n|---|---|---|---|---|\n")
        for k, v in times.items():
            if v:
                way, cache = k.split(", ")
                f.write(f"| {way} | {cache} | {med[k]:.3f} | {files / med[k]:,.0f} | "
                        f"{', '.join(f'{x:.3f}' for x in v)} |\n")
        for cache in ("warm", "cold"):
            a, b = med.get(f"scandir (before), {cache}"), med.get(f"list_dir (after), {cache}")
            if a and b:
                f.write(f"\n{cache.capitalize()}: {a / b:.1f}x quicker ({a:.2f} s -> {b:.2f} s).")
        f.write("\n")


# Each rank's age (from its process start, as iodl's started_s) once every rank is here, printed by
# each rank; what is imported before is the case's. MPI's barrier is sleep-polled as iodl's is.
FLOOR_CODE = """
import os, sys, time
{imports}
def age():
    with open("/proc/self/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) - start / os.sysconf("SC_CLK_TCK")
{together}
os.write(1, f"age {age()}\\n".encode())   # one write: the ranks share one pipe
"""
# no MPI: every rank adds a byte to a file and sleeps until it holds one per rank
FILE_TOGETHER = """
path = os.environ["FLOOR_FILE"]
with open(path, "ab") as f:
    f.write(b"x")
while os.path.getsize(path) < int(os.environ["PMI_SIZE"]):
    time.sleep(0.005)
"""
MPI_TOGETHER = """
from mpi4py import MPI
r = MPI.COMM_WORLD.Ibarrier()
while not r.Test():
    time.sleep(0.001)
"""
FLOOR_CASES = {"python": ("", FILE_TOGETHER), "numpy": ("import numpy", FILE_TOGETHER),
               "mpi": ("", MPI_TOGETHER), "numpy+mpi": ("import numpy", MPI_TOGETHER)}


def floor_case(ranks: int, case: str) -> dict:
    """The median and slowest rank's age when the ranks of one FLOOR_CASES case are together."""
    if os.path.dirname(HERE) not in sys.path:   # this checkout's iodl, for its settings
        sys.path.insert(0, os.path.dirname(HERE))
    from iodl.cli import BLAS_THREADS
    from iodl.launcher import mpi_env_defaults
    imports, together = FLOOR_CASES[case]
    env = {**os.environ, **BLAS_THREADS, **mpi_env_defaults({**os.environ, "MPI_LOCALNRANKS": str(ranks), "PMI_SIZE": str(ranks)})}
    with tempfile.TemporaryDirectory() as tmp:
        env["FLOOR_FILE"] = os.path.join(tmp, "here")
        open(env["FLOOR_FILE"], "wb").close()
        load = os.getloadavg()[0]
        proc = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-c",
                               FLOOR_CODE.replace("{imports}", imports).replace("{together}", together)],
                              capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    ages = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("age ")]
    assert len(ages) == ranks, proc.stdout
    return {"case": case, "ranks": ranks, "load": round(load, 1), "age_s_median": round(statistics.median(ages), 3),
            "age_s_max": round(max(ages), 3)}


def by_floor(args) -> None:
    path = os.path.join(HERE, "results", "startup-floor.json")
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)["rows"]
    date, commit = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), _commit()
    for round_ in range(args.runs):
        for n in [int(x) for x in args.ranks.split(",")]:
            got = [floor_case(n, case) for case in FLOOR_CASES]
            r = run(n, ["--engine", "null", "--steps", "5", "--compute-time", "0.1"])
            got.append({"case": "iodl", "ranks": n, "load": r["load"], "age_s_median": r["first_step_s_median"],
                        "age_s_max": r["first_step_s_max"]})
            for row in got:
                row.update(date=date, commit=commit, round=round_, label=args.label, python=_python())
                print(json.dumps(row), flush=True)
            rows += got
    with open(path, "w") as f:
        json.dump({"nproc": os.cpu_count(), "rows": rows}, f, indent=2)
    cols = ["date", "commit", "python", "label", "round", "ranks", "case", "load", "age_s_median", "age_s_max"]
    with open(os.path.join(HERE, "results", "startup-floor.md"), "w") as f:
        f.write(f"# Start-up floor on {os.cpu_count()} cores (`python bench/bench_scale.py --floor`)\n\n"
                "The median (and slowest) rank's age, from its process start, once every rank of the case is\n"
                "together: `python` an interpreter alone, `numpy` importing numpy, `mpi` MPI initialised (iodl's\n"
                "MPI settings, a sleep-polled barrier), `numpy+mpi` both, `iodl` a null-engine run's first step\n"
                "(`first_step_s`). The cases of one round run back to back; `load` is the 1-minute load average\n"
                "before each. iodl's own part of its start-up is `iodl` minus `numpy+mpi` of the same round.\n"
                "`python` is the interpreter the ranks ran (rows before it was noted: root's pyenv 3.11.7, a\n"
                "default source build); Debian's own python3 is built with profile-guided optimisation, and most\n"
                "cases started sooner on it (startup-trims-1129i.md).\n\n")
        write_table(f, cols, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,72")
    ap.add_argument("--root", help="a resnet50 dataset (iodl generate --workload resnet50 --files 8)")
    ap.add_argument("--files", help="file counts of raw 4 KiB datasets, e.g. 10000,200000 (see above)")
    ap.add_argument("--data", default="/var/tmp/iodl-scale", help="where --files datasets are generated")
    ap.add_argument("--repeat", type=int, default=3, help="--files: runs per row, the quickest start-up kept; "
                    "--listing: rounds")
    ap.add_argument("--name", help="--files (default scale-files), --pair (default startup-pair): results go to "
                    "bench/results/NAME.{json,md}")
    ap.add_argument("--listing", type=int, metavar="N", help="time listing a plain directory of N files (see above)")
    ap.add_argument("--cold", action="store_true", help="--listing: also list after dropping the caches (root)")
    ap.add_argument("--note", default="", help="--listing: a sentence on the run's conditions for the results")
    ap.add_argument("--runs", type=int, default=1, help="runs of each row (start-up and scale: one row each)")
    ap.add_argument("--label", default="", help="what ran, for the table, when not this checkout's code (e.g. the "
                    "commit of a tree run from as the working directory)")
    ap.add_argument("--floor", action="store_true", help="the start-up's floor beside iodl's (see above)")
    ap.add_argument("--pair", metavar="VAR=A,B", help="interleaved starts with VAR=A and VAR=B (see above)")
    args = ap.parse_args()
    if args.floor:
        return by_floor(args)
    if args.pair:
        return by_pair(args)
    if args.listing:
        return by_listing(args)
    if args.files:
        return by_files(args)
    path = os.path.join(HERE, "results", "scale.json")
    with open(path) as f:
        rows = json.load(f)["rows"]   # earlier runs stay: the table is their history
    for _ in range(args.runs):
        for n in [int(x) for x in args.ranks.split(",")]:
            runs = [["--engine", "null", "--steps", "20", "--compute-time", "0.1"]]
            if args.root:
                runs.append(["--workload", "resnet50", "--root", args.root, "--steps", "10"])
            for extra in runs:
                row = {**run(n, extra), "label": args.label}
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(path, "w") as f:
        json.dump({"nproc": os.cpu_count(), "rows": rows}, f, indent=2)
    write_scale_md(rows)


def by_pair(args) -> None:
    var, _, values = args.pair.partition("=")
    if not var or values.count(",") != 1 or len(set(values.split(","))) != 2:
        raise SystemExit(f"bench_scale.py: --pair {args.pair}: give VAR=A,B (one variable, two different values)")
    a, b = values.split(",")
    name = args.name or "startup-pair"
    ranks = int(args.ranks.split(",")[-1])
    rows = []
    for round_ in range(args.runs):
        for value in ((a, b) if round_ % 2 == 0 else (b, a)):
            r = run(ranks, ["--engine", "null", "--steps", "5", "--compute-time", "0.1"], env={**os.environ, var: value})
            row = {"round": round_, var: value, "load": r["load"], "first_step_s_median": r["first_step_s_median"],
                   "cpu_s_per_rank_median": r["cpu_s_per_rank_median"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    by_value = {v: [r for r in rows if r[var] == v] for v in (a, b)}
    pairs = list(zip(by_value[a], by_value[b]))
    med = {v: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("first_step_s_median", "cpu_s_per_rank_median")}
           for v, rs in by_value.items()}
    summary = {"sooner": sum(rb["first_step_s_median"] < ra["first_step_s_median"] for ra, rb in pairs),
               "less_cpu": sum(rb["cpu_s_per_rank_median"] < ra["cpu_s_per_rank_median"] for ra, rb in pairs),
               "pairs": len(pairs), "medians": med}
    head = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": _commit(), "python": _python(),
            "ranks": ranks, "var": var, "a": a, "b": b}
    with open(os.path.join(HERE, "results", name + ".json"), "w") as f:
        json.dump({**head, "summary": summary, "rows": rows}, f, indent=2)
    with open(os.path.join(HERE, "results", name + ".md"), "w") as f:
        f.write(f"# {var}={a} against {b}: the start at {ranks} ranks (`python bench/bench_scale.py --pair`)\n\n"
                f"{head['date']} UTC, {head['commit']}, {head['python']}, {os.cpu_count()} cores. A null-engine run's "
                "median rank: its first step (`started_s`) and its CPU (`cpu_s`); `load` is the 1-minute load "
                "average before the run.\n\n"
                f"{var}={b}: sooner in {summary['sooner']} of {len(pairs)} pairs, less CPU in {summary['less_cpu']}; "
                f"medians: first step {med[a]['first_step_s_median']} s ({a}) against {med[b]['first_step_s_median']} s "
                f"({b}), CPU {med[a]['cpu_s_per_rank_median']} s against {med[b]['cpu_s_per_rank_median']} s.\n\n")
        write_table(f, ["round", var, "load", "first_step_s_median", "cpu_s_per_rank_median"], rows)


def write_scale_md(rows: list[dict]) -> None:
    cols = ["date", "commit", "label", "load", "ranks", "args", "wall_s", "first_step_s_median", "first_step_s_max",
            "startup_s_median", "startup_s_max",
            "cpu_s_per_rank_median", "rss_mb_rank0", "rss_mb_max_others", "rss_mb_median", "pss_mb_median", "busy",
            "au", "barrier_wait_s_per_step"]
    with open(os.path.join(HERE, "results", "scale.md"), "w") as f:
        f.write(f"# Scale on {os.cpu_count()} cores (`python bench/bench_scale.py`)\n\n")
        f.write("Goals: start-up <= 1.5 s at 2 ranks and <= 8 s at 72 (the median rank, to its first\n"
                "step); <= 60 MB RSS per rank. `busy` = CPU seconds per rank per wall second (a rank that waits\n"
                "without spinning stays near 0). RSS counts pages shared by the ranks (MPI's shared memory,\n"
                "libraries) in full in each; PSS splits them among their users. Rank 0 gathers every rank's\n"
                "figures, and so maps the MPI queue pages of every peer: it is shown apart. A real engine adds\n"
                "its request buffers (iodepth x block_size, faulted in before the clock starts: 8 MiB for\n"
                "resnet50), which the null engine never touches.\n\n"
                "Each row: when it ran (UTC), the checkout's commit (`+`: with changes not committed), `label`\n"
                "(what ran when not the checkout's code), the 1-minute load average just before it (other\n"
                "work on these 2 cores; at 72 ranks every figure moves with it). Rows without a date are\n"
                "from before the table kept them.\n\n")
        f.write(STARTUP_NOTE)
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in rows:
            f.write("| " + " | ".join(" ".join(r[c]) if c == "args" else str(r.get(c, "") if r.get(c, "") != "" else "-")
                                      for c in cols) + " |\n")
        if os.path.exists(os.path.join(HERE, "results", "scale-notes.md")):
            with open(os.path.join(HERE, "results", "scale-notes.md")) as notes:
                f.write("\n" + notes.read())


STARTUP_NOTE = """`first_step_s_median` / `first_step_s_max` (the start-up goal's figure): the median and the slowest rank's
`started_s` from the result (docs/numbers.md): from the rank's process start (hydra starts 72
processes within ~0.15 s of the launch) to its first step, which begins when the rank leaves the
start barrier with every other rank (so the ranks' figures differ by when their processes began).
`startup_s_median` / `startup_s_max`: the same for `startup_s`, from the process start to the
moment the rank is ready to run its pattern: interpreter, imports, MPI_Init, the set-up's
collectives; the pattern then opens its engine and meets the others at the start barrier. Rows
from before the result had `started_s` show no first step (that part was measured apart then:
bench/results/scale-notes.md, 0.7-0.75 s at 72 ranks here).

"""


if __name__ == "__main__":
    main()
