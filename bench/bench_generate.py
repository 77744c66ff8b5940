"""iodl generate vs dd: the same bytes, the same filesystem, the same flush at the end.

    python bench/bench_generate.py [--gb 3] [--runs 5] [--ranks 1] [--dir /var/tmp]

What is compared (goal: iodl's bandwidth >= 0.8 x dd's):
- dd:   dd if=/dev/zero of=FILE bs=1M count=N conv=fdatasync   (buffered writes, one fdatasync at the end)
- iodl: iodl generate --workload resnet50 --files K --root DIR, then syncfs on the filesystem (`sync -f`)
  (buffered writes of incompressible, CRC-framed TFRecords, flushed once at the end), timed from the
  command's start, interpreter start-up included.
Both write the same number of bytes (dd's count is rounded to the dataset's size in MiB). After
--warmup unrecorded rounds (a VM pays once for touching guest memory: the first GBs written run several
times slower, whoever writes them), runs are interleaved (dd, iodl, iodl, dd, ...) on a fresh loop-mounted ext4 (iodl.groundtruth.LoopMount,
losetup --direct-io=on, so the backing file's page cache does not absorb the flush) when running as
root, else in a directory of --dir. Files are deleted and the page cache dropped (root) between runs.
Results: bench/results/generate-vs-dd.{json,md}.

    python bench/bench_generate.py --small-files 100000 [--runs 5] [--ranks 1] [--dir /var/tmp]

Small files (goal: iodl's files/s >= 1.0 x a plain loop's): the `raw` workload, 1 sample of 4 KiB
per file, against a plain Python loop on the same filesystem in the same run, each into a fresh
directory (os.open O_CREAT|O_EXCL, os.write 4 KiB, os.close; no content generation, no names to
derive, no subfolders). Both are timed in this process from the call to its return (`write`) and
to the end of a syncfs after it (`synced`); iodl with --ranks > 1 runs under mpiexec and is timed
as a command, interpreter start-up included. Interleaved, on a fresh loop-mounted ext4 when root.
After each iodl run the bench asserts that no folder it generated holds more than 10,000 entries.
Results: bench/results/generate-small-files.{json,md} (--name to write others, e.g. at 1,000,000 files).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from iodl import workload  # noqa: E402
from iodl.data.generate import generate  # noqa: E402
from iodl.data.layout import FOLDER_FILES, sample_sizes  # noqa: E402
from iodl.formats import FORMATS, crc32c_version  # noqa: E402


def _expected_bytes(files: int) -> int:
    wl = workload.load_workload("resnet50").with_overrides(files=files)
    sizes = sample_sizes(wl.dataset, wl.train.seed)
    return sum(FORMATS["tfrecord"].size_of(row) for row in sizes)


def _clean(fsdir: str) -> None:
    for name in os.listdir(fsdir):
        if name == "lost+found":
            continue
        path = os.path.join(fsdir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    subprocess.run(["sync", "-f", fsdir], check=True)
    if os.geteuid() == 0:
        from iodl.cache import drop_caches

        drop_caches()
    time.sleep(0.5)


def _run_dd(fsdir: str, mib: int) -> float:
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={os.path.join(fsdir, 'dd.bin')}", "bs=1M", f"count={mib}",
                    "conv=fdatasync"], check=True, capture_output=True)
    return time.perf_counter() - t


def _run_iodl(fsdir: str, files: int, ranks: int) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "iodl", "generate", "--workload", "resnet50", "--files", str(files),
           "--root", os.path.join(fsdir, "ds")]
    if ranks > 1:
        cmd = [shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]),
               "-n", str(ranks)] + cmd
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    subprocess.run(["sync", "-f", fsdir], check=True)
    return time.perf_counter() - t, out.stdout.strip().splitlines()[-1]


def _syncfs(path: str) -> None:
    subprocess.run(["sync", "-f", path], check=True)


def _plain_loop(directory: str, files: int, data: bytes) -> None:
    os.mkdir(directory)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for i in range(files):
        fd = os.open(f"{directory}/f{i:07d}", flags, 0o644)
        os.write(fd, data)
        os.close(fd)


def _largest_folder(root: str) -> int:
    """Entries of the fullest directory under root."""
    return max(len(dirs) + len(files) for _d, dirs, files in os.walk(root))


def _small_workload(files: int, path: str) -> str:
    with open(path, "w") as f:
        f.write(f'[workload]\nname = "raw4k"\n[dataset]\nformat = "raw"\nfiles = {files}\nsamples_per_file = 1\n'
                f'sample_size = "4KiB"\n[train]\nbatch_size = 1\ncompute_time_s = 0\n')
    return path


def _run_small_iodl(root: str, files: int, ranks: int, toml: str) -> tuple[float, float]:
    from iodl.comm import SerialComm

    t = time.perf_counter()
    if ranks > 1:
        cmd = [shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]),
               "-n", str(ranks), sys.executable, "-m", "iodl", "generate", "--workload", toml, "--root", root,
               "--quiet"]
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        subprocess.run(cmd, check=True, env=env)
    else:
        generate(workload.load_workload(toml), [root], SerialComm())
    wrote = time.perf_counter() - t
    _syncfs(root)
    return wrote, time.perf_counter() - t


def small_files(args) -> int:
    files = args.small_files
    data = os.urandom(4096)
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0 and shutil.which("losetup"):
            from iodl.groundtruth import LoopMount

            need = files * 24576 + (2 << 30)   # ext4 makes an inode per 16 KiB: 1.5 per file, one tree at a time
            loop = stack.enter_context(LoopMount(size=need, fstype="ext4", direct_io=True, workdir=args.dir))
            fsdir, fs = loop.path, f"loop-mounted ext4 ({loop.device}, direct-io=on) backed by {args.dir}"
        else:
            fsdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="iodl-bench-", dir=args.dir))
            fs = f"directory in {args.dir}"
        toml = _small_workload(files, os.path.join(fsdir, "raw4k.toml"))
        runs = []
        for j in range(-args.warmup, args.runs):
            row = {}
            for who in (("loop", "iodl") if j % 2 == 0 else ("iodl", "loop")):
                _syncfs(fsdir)
                where = os.path.join(fsdir, f"{who}-{j + args.warmup}")
                if who == "loop":
                    t = time.perf_counter()
                    _plain_loop(where, files, data)
                    wrote = time.perf_counter() - t
                    _syncfs(fsdir)
                    row["loop_write_s"], row["loop_synced_s"] = wrote, time.perf_counter() - t
                else:
                    row["iodl_write_s"], row["iodl_synced_s"] = _run_small_iodl(where, files, args.ranks, toml)
                    row["iodl_largest_folder"] = _largest_folder(where)
                    assert row["iodl_largest_folder"] <= FOLDER_FILES, \
                        f"a generated folder holds {row['iodl_largest_folder']:,} entries"
                shutil.rmtree(where)   # inodes: a fresh ext4 has ~1 per 16 KiB of its size
            if j < 0:
                continue   # warm-up
            for k in ("write", "synced"):
                row[f"loop_{k}_files_s"] = files / row[f"loop_{k}_s"]
                row[f"iodl_{k}_files_s"] = files / row[f"iodl_{k}_s"]
                row[f"ratio_{k}"] = row[f"iodl_{k}_files_s"] / row[f"loop_{k}_files_s"]
            runs.append(row)
            print(f"run {j}: loop {row['loop_write_files_s']:.0f} files/s, iodl {row['iodl_write_files_s']:.0f} files/s,"
                  f" ratio {row['ratio_write']:.2f} (synced: {row['ratio_synced']:.2f})", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    largest = max(r["iodl_largest_folder"] for r in runs)
    result = {
        "bench": "generate-small-files", "filesystem": fs, "host": platform.node(), "cpus": os.cpu_count(),
        "kernel": platform.release(), "python": platform.python_version(), "iodl_ranks": args.ranks,
        "workload": "raw, 1 sample of 4 KiB per file", "files": files, "runs": runs,
        "median_ratio_write": med["ratio_write"], "median_ratio_synced": med["ratio_synced"],
        "median_loop_write_files_s": med["loop_write_files_s"], "median_iodl_write_files_s": med["iodl_write_files_s"],
        "iodl_largest_folder_entries": largest, "goal": 1.0, "met": med["ratio_write"] >= 1.0,
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [
        "# iodl generate vs a plain create-write-close loop: small files", "",
        f"{files:,} files of 4 KiB per run (`raw`, 1 sample a file), {args.runs} interleaved runs after {args.warmup} "
        f"warm-up round(s), {fs}; {os.cpu_count()} CPUs, kernel {platform.release()}, Python {platform.python_version()}, "
        f"iodl ranks {args.ranks}.",
        "The plain loop: `os.open(O_CREAT|O_EXCL)`, `os.write` 4 KiB, `os.close` per file into one directory (no content",
        "to make, no names to derive). iodl: `data.generate` (its content, subfolders of at most 10,000 files, its",
        "manifest). `write`: from the call to its return; `synced`: to the end of a syncfs after it.", "",
        "| run | loop files/s | iodl files/s | ratio (write) | ratio (synced) |", "|---|---|---|---|---|",
        *[f"| {j} | {r['loop_write_files_s']:.0f} | {r['iodl_write_files_s']:.0f} | {r['ratio_write']:.2f} | "
          f"{r['ratio_synced']:.2f} |" for j, r in enumerate(runs)],
        f"| **median** | {med['loop_write_files_s']:.0f} | {med['iodl_write_files_s']:.0f} | **{med['ratio_write']:.2f}** | "
        f"{med['ratio_synced']:.2f} |", "",
        f"Goal: ratio (write) >= 1.0 — {'met' if result['met'] else 'NOT met'}. Largest folder iodl generated: "
        f"{largest:,} entries (at most 10,000, asserted after every run).", "",
        "Reproduce: `python bench/bench_generate.py " + " ".join(sys.argv[1:]) + "`",
    ]
    with open(os.path.join(HERE, "results", f"{args.name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"median ratio {med['ratio_write']:.2f} (synced {med['ratio_synced']:.2f}; goal 1.0)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=3.0, help="bytes per run, GB (default 3)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=1, help="iodl ranks (mpiexec -n) (default 1)")
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded dd+iodl rounds first (default 1)")
    ap.add_argument("--dir", default="/var/tmp", help="where the loop image (or, not root, the files) go")
    ap.add_argument("--small-files", type=int, default=0, metavar="N",
                    help="compare N 4 KiB files against a plain create-write-close loop instead of dd")
    ap.add_argument("--name", default="generate-small-files",
                    help="--small-files: results go to bench/results/NAME.{json,md} (default generate-small-files)")
    args = ap.parse_args()
    if args.small_files:
        return small_files(args)

    shard = 1251 * 114_660 + 16 * 1251
    files = max(1, round(args.gb * 1e9 / shard))
    nbytes = _expected_bytes(files)
    mib = round(nbytes / (1 << 20))
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0 and shutil.which("losetup"):
            from iodl.groundtruth import LoopMount

            loop = stack.enter_context(LoopMount(size=int(nbytes * 1.3) + (1 << 30), fstype="ext4", direct_io=True,
                                                 workdir=args.dir))
            fsdir, fs = loop.path, f"loop-mounted ext4 ({loop.device}, direct-io=on) backed by {args.dir}"
        else:
            fsdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="iodl-bench-", dir=args.dir))
            fs = f"directory in {args.dir}"
        for _ in range(args.warmup):  # a VM pays for its first touch of guest memory: not in the results
            _clean(fsdir)
            _run_dd(fsdir, mib)
            _clean(fsdir)
            _run_iodl(fsdir, files, args.ranks)
        runs = []
        for j in range(args.runs):
            order = ("dd", "iodl") if j % 2 == 0 else ("iodl", "dd")
            row = {}
            for who in order:
                _clean(fsdir)
                if who == "dd":
                    row["dd_s"] = _run_dd(fsdir, mib)
                else:
                    row["iodl_s"], row["iodl_says"] = _run_iodl(fsdir, files, args.ranks)
            _clean(fsdir)
            row["dd_MBps"] = mib * (1 << 20) / row["dd_s"] / 1e6
            row["iodl_MBps"] = nbytes / row["iodl_s"] / 1e6
            row["ratio"] = row["iodl_MBps"] / row["dd_MBps"]
            runs.append(row)
            print(f"run {j}: dd {row['dd_MBps']:.0f} MB/s, iodl {row['iodl_MBps']:.0f} MB/s, ratio {row['ratio']:.2f}",
                  flush=True)
    ratio = statistics.median(r["ratio"] for r in runs)
    result = {
        "bench": "generate-vs-dd", "filesystem": fs, "host": platform.node(), "cpus": os.cpu_count(),
        "kernel": platform.release(), "python": platform.python_version(), "crc32c": crc32c_version(),
        "iodl_ranks": args.ranks, "workload": "resnet50", "files": files, "bytes_iodl": nbytes,
        "bytes_dd": mib * (1 << 20), "flush": "dd conv=fdatasync; iodl: syncfs (sync -f) after the command",
        "runs": runs, "median_ratio": ratio,
        "median_dd_MBps": statistics.median(r["dd_MBps"] for r in runs),
        "median_iodl_MBps": statistics.median(r["iodl_MBps"] for r in runs),
        "goal": 0.8, "met": ratio >= 0.8,
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "generate-vs-dd.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [
        "# iodl generate vs dd", "",
        f"{nbytes / 1e9:.2f} GB per run ({files} resnet50 TFRecord shards; dd: {mib} x 1 MiB), {args.runs} interleaved runs,",
        f"{fs}; {os.cpu_count()} CPUs, kernel {platform.release()}, Python {platform.python_version()}, "
        f"CRC32C by `{crc32c_version()}`, iodl ranks {args.ranks}.",
        "Both write through the page cache and flush once at the end (dd `conv=fdatasync`; iodl: `sync -f` after the",
        "command, whose time includes interpreter start-up). Page cache dropped and files deleted between runs;",
        f"{args.warmup} unrecorded warm-up round(s) first. Interleaved order: dd first in even runs, iodl first in odd.", "",
        "| run | dd MB/s | iodl MB/s | ratio |", "|---|---|---|---|",
        *[f"| {j} | {r['dd_MBps']:.0f} | {r['iodl_MBps']:.0f} | {r['ratio']:.2f} |" for j, r in enumerate(runs)],
        f"| **median** | {result['median_dd_MBps']:.0f} | {result['median_iodl_MBps']:.0f} | **{ratio:.2f}** |", "",
        f"Goal: ratio >= 0.8 — {'met' if result['met'] else 'NOT met'}.", "",
        "Reproduce: `python bench/bench_generate.py " + " ".join(sys.argv[1:]) + "`",
    ]
    with open(os.path.join(HERE, "results", "generate-vs-dd.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"median ratio {ratio:.2f} (goal 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
