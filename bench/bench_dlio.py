"""DLIO (dlio_benchmark) and iodl on one DLIO workload file, the same data and the same mount.

A scaled-down unet3d-shaped workload (npz, one sample per file) is written as a DLIO workload
YAML. DLIO's own generator lays the data out once on a fresh ext4 loop mount (losetup
--direct-io=on, so reads reach the device); then, in interleaved rounds, each tool trains on it
with the same file: `mpiexec -n RANKS dlio_benchmark --config-dir CFG workload=NAME` and
`mpiexec -n RANKS python -m iodl read --workload FILE.yaml --root DATA/train`. Before each run
the page cache is dropped; each run's processes (mpiexec and every rank and its workers) run in
a fresh cgroup v1 blkio group, whose io_service_bytes tell the bytes the device served them.

Per run: samples/s and AU as each tool reports them (DLIO: summary.json's
train_throughput_mean_samples_per_second and train_au_mean_percentage; iodl: train.samples_per_s,
train.au and MLPerf's view train.mlperf.{samples_per_s,au}); start-up (DLIO: launch to epoch 1's
start in per_epoch_stats.json; iodl: launch to the ranks' first step, its per_rank startup_s
plus mpiexec's own start); wall time of the whole launch; peak RSS per rank measured from outside
the same way for both (VmHWM of each rank process, and of the rank with its data-loader worker
processes, polled every 0.1 s); bytes the device served.

DLIO must be installed in its own venv (docs/dlio.md, "Running DLIO beside iodl"); without it
this prints one line `not run: <reason>` and exits 0.

`python bench/bench_dlio.py io` compares the I/O instead (bench/results/dlio-io-vs-iodl.{md,json}):
unet3d-shaped npz with reader.odirect off (PyPI's DLIO 2.0.0) and on (the DLIO fork MLPerf Storage
v3.0 runs: PyPI's DLIO has no odirect), resnet50-shaped tfrecord with a reader.transfer_size: the
bytes the device served, the size of each request it completed (ftrace), the opens (strace).
Options: --dlio-venv, --dlio-fork-venv, --ranks, --npz-files, --npz-mib, --tfr-files,
--tfr-samples, --transfer-size, --cases, --rounds, --out. The odirect case also runs DLIO's odirect
read code alone, `python bench/bench_dlio.py odirect-reader DIR WORKERS` (odirect_reader).

Usage (root, cgroup v1 blkio): python bench/bench_dlio.py [--dlio-venv /var/tmp/dlio-venv]
    [--reps 3] [--ranks 2] [--files 128] [--record-mib 2] [--batch 2] [--compute 0.05,0.2]
    [--epochs 1] [--read-threads 1] [--out bench/results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from iodl import cache, groundtruth  # noqa: E402

NAME = "iodl_dlio_bench"


def workload_yaml(a, compute: float) -> str:
    """The workload both tools run: unet3d's shape (npz, 1 sample a file, pytorch loader, file
    and sample shuffle), scaled down. DLIO 2.0.0's key names (record_length)."""
    return f"""# written by bench/bench_dlio.py: unet3d_a100's shape, scaled down
model: unet3d
framework: pytorch
workflow:
  generate_data: False
  train: True
  checkpoint: False
dataset:
  data_folder: data/{NAME}/
  format: npz
  num_files_train: {a.files}
  num_samples_per_file: 1
  record_length: {a.record_mib << 20}
reader:
  data_loader: pytorch
  batch_size: {a.batch}
  read_threads: {a.read_threads}
  file_shuffle: seed
  sample_shuffle: seed
train:
  epochs: {a.epochs}
  computation_time: {compute}
metric:
  au: 0.90
"""


def why_not(venv: str) -> str | None:
    """None when DLIO and this bench can run here, else the reason in a few words."""
    exe = os.path.join(venv, "bin", "dlio_benchmark")
    if not os.path.isfile(exe):
        return f"no DLIO install: {exe} missing (docs/dlio.md, 'Running DLIO beside iodl')"
    if not os.path.isfile(os.path.join(venv, "bin", "mpiexec")):
        return f"no mpiexec in {venv}/bin (pip install mpich there)"
    probe = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                            "import dlio_benchmark.main, tensorflow, torch"], capture_output=True, text=True)
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"DLIO in {venv} does not import: {last}"
    if os.geteuid() != 0:
        return "needs root (loop mount, drop_caches, blkio cgroup)"
    if not os.path.isdir(groundtruth.BLKIO_ROOT):
        return f"no cgroup v1 blkio at {groundtruth.BLKIO_ROOT}"
    if not shutil.which("mpiexec", path=os.path.dirname(sys.executable)):
        return f"no mpiexec beside {sys.executable} (pip install -e '.[mpi]')"
    return None


def versions(venv: str) -> dict:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('dlio-benchmark', 'tensorflow-cpu', 'torch', 'pydftracer', 'hydra-core', 'mpi4py', 'mpich', 'numpy')}))")
    dlio = json.loads(subprocess.run([os.path.join(venv, "bin", "python"), "-c", code],
                                     capture_output=True, text=True, check=True).stdout)
    from importlib import metadata

    return {"dlio_venv": dlio, "iodl": metadata.version("iodl"), "iodl_mpich": _version("mpich"),
            "python": sys.version.split()[0], "kernel": os.uname().release}


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


class Memory:
    """Peak RSS (VmHWM) of every process in a cgroup, polled from outside. A rank is a process
    whose parent is MPICH's hydra_pmi_proxy; its workers are its descendants."""

    def __init__(self, group_path: str, every: float = 0.1):
        self.procs = os.path.join(group_path, "cgroup.procs")
        self.every = every
        self.peak: dict[int, int] = {}     # pid -> VmHWM kB
        self.parent: dict[int, int] = {}
        self.comm: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Memory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def sample(self) -> None:
        try:
            with open(self.procs) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            hwm = int(status.get("VmHWM", "0 kB").split()[0])
            self.peak[pid] = max(self.peak.get(pid, 0), hwm)
            self.parent[pid] = int(status["PPid"])
            self.comm[pid] = status["Name"].strip()

    def ranks(self) -> list[dict]:
        ranks = [p for p in self.peak if self.comm.get(self.parent[p]) == "hydra_pmi_proxy"]

        def descendants(pid):
            kids = [c for c, par in self.parent.items() if par == pid]
            return kids + [d for k in kids for d in descendants(k)]

        out = []
        for r in sorted(ranks):
            workers = descendants(r)
            out.append({"rss_mb": self.peak[r] / 1024, "workers": len(workers),
                        "rss_with_workers_mb": (self.peak[r] + sum(self.peak[w] for w in workers)) / 1024})
        return out


def launch(cmd: list[str], log: str, env: dict | None = None) -> dict:
    """Run cmd (an mpiexec) after dropping caches, inside a fresh blkio group; time it, count the
    device's bytes and the ranks' memory."""
    cache.drop_caches()
    with groundtruth.BlkioGroup(f"iodl-dlio-bench-{int(time.time() * 1000)}") as group:
        with open(log, "w") as out, Memory(group.path) as mem:
            t0 = time.time()
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=group.enter, env=env)
            rc = p.wait()
            wall = time.time() - t0
        served = group.read_bytes(MAJMIN)
    if rc:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{cmd[:4]}... exited {rc}; log {log}:\n{tail}")
    return {"t0": t0, "wall_s": wall, "device_read_bytes": served, "ranks_mem": mem.ranks()}


MAJMIN = ""


def dlio_cmd(a, cfg_dir: str, name: str, data: str, out: str, *extra: str) -> list[str]:
    return [os.path.join(a.dlio_venv, "bin", "mpiexec"), "-n", str(a.ranks),
            os.path.join(a.dlio_venv, "bin", "dlio_benchmark"), "--config-dir", cfg_dir, f"workload={name}",
            f"++workload.dataset.data_folder={data}", f"++workload.output.folder={out}",
            f"hydra.run.dir={out}", *extra]


def run_dlio(a, cfg_dir: str, name: str, data: str, work: str, tag: str) -> dict:
    out = os.path.join(work, f"dlio-{tag}")
    r = launch(dlio_cmd(a, cfg_dir, name, data, out), out + ".log")
    with open(os.path.join(out, "summary.json")) as f:
        metric = json.load(f)["metric"]
    with open(os.path.join(out, "per_epoch_stats.json")) as f:
        epochs = json.load(f)
    # DLIO stamps its log with datetime.now() (local time, no zone): so is t0 read here
    first = datetime.datetime.strptime(epochs["1"]["start"], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    return {"tool": "dlio", "samples_per_s": metric["train_throughput_mean_samples_per_second"],
            "au": metric["train_au_mean_percentage"] / 100, "startup_s": first - r["t0"],
            "epoch_s": [float(e["duration"]) for e in epochs.values()], **_common(r)}


def run_iodl(a, wl_path: str, data: str, work: str, tag: str) -> dict:
    out = os.path.join(work, f"iodl-{tag}.json")
    cmd = [shutil.which("mpiexec", path=os.path.dirname(sys.executable)), "-n", str(a.ranks), sys.executable,
           "-m", "iodl", "read", "--workload", wl_path, "--root", os.path.join(data, "train"),
           "--progress", "off", "--out", out]
    r = launch(cmd, out + ".log")
    with open(out) as f:
        res = json.load(f)
    train = res["train"]
    per_rank = res["per_rank"]
    mlperf = train.get("mlperf") or {}
    # iodl's startup_s: each rank's process age at its first step (mpiexec's own start, before
    # the ranks exist, is not in it; DLIO's figure, taken from the launch, has it)
    return {"tool": "iodl", "samples_per_s": train["samples_per_s"], "au": train["au"],
            "mlperf_samples_per_s": mlperf.get("samples_per_s"), "mlperf_au": mlperf.get("au"),
            "startup_s": max(p["startup_s"] for p in per_rank), "steps": train.get("steps"),
            "iodl_bytes": res["total"]["bytes"],
            "iodl_max_rss_mb": max(p["max_rss_mb"] for p in per_rank),
            "iodl_pss_mb": max(p["pss_mb"] for p in per_rank), **_common(r)}


def _common(r: dict) -> dict:
    mem = r["ranks_mem"]
    return {"wall_s": r["wall_s"], "device_read_bytes": r["device_read_bytes"], "ranks_seen": len(mem),
            "rss_mb_per_rank": max((m["rss_mb"] for m in mem), default=None),
            "rss_with_workers_mb_per_rank": max((m["rss_with_workers_mb"] for m in mem), default=None),
            "workers_per_rank": max((m["workers"] for m in mem), default=None)}


CAVEATS = """## Caveats

- Same bytes, different CPU. Both tools read every file once (one epoch): the device served the
  same bytes to each (the files plus a little ext4 metadata). DLIO's lower samples/s and AU at the
  short computation_time are its own data path, not storage: its PyTorch DataLoader (read_threads 1:
  one worker process per rank) np.load()s and slices each npz and pickles the batch back to the
  rank; on this 2-core VM the 2 ranks and 2 workers share the cores, and the wait shows in AU.
  iodl reads the bytes without decoding them and has no worker processes. At computation_time
  0.2 s both are near the compute-bound ceiling.
- Start-up: DLIO imports TensorFlow (unconditionally, even for framework pytorch), torch, hydra
  and pydftracer, then starts its loader workers. DLIO's figure is from mpiexec's launch to epoch
  1's start (rank 0's log stamp); iodl's is each rank's process age at its first step, which
  leaves out mpiexec's own start (a fraction of a second). The wall time of the launch is measured
  the same way for both.
- RSS: VmHWM of each process of the run's cgroup, polled every 0.1 s from outside, the same for
  both; shared pages (TensorFlow's and torch's libraries) count in full in every process. iodl's
  own figures (per_rank max_rss_mb, pss_mb) are in the JSON.
- AU and samples/s: DLIO's are MLPerf's definitions (AU leaves out the first step; samples/s is
  the epoch's samples over its whole time, summed over ranks), so DLIO's own figure is its MLPerf
  figure; iodl gives its own (train.au) and MLPerf's (train.mlperf.au) beside each other.
- Small and short on purpose (others share the machine): one epoch of a dataset that fits in
  memory, caches dropped before each run, so the second-epoch cache effect is not measured. The
  rounds' spread comes from the shared 2 cores (see each run).
- DLIO ran with its defaults beyond the workload file (its pydftracer profiling included), from
  the venv of docs/dlio.md, "Running DLIO beside iodl".
"""


# ---------------------------------------------------------------- the I/O side by side --------
#
# `bench_dlio.py io`: the keys that change the I/O (reader.odirect, reader.transfer_size), DLIO and
# iodl on the same files of one loop mount, judged by the kernel: the bytes the device served
# (/sys/block/loopN/stat), the size of every request it completed (ftrace block_rq_complete, in a
# tracing instance of this bench's own, filtered on the loop device), and the opens of the data
# files (strace -f -y over the whole mpiexec: ranks, DLIO's loader workers, iodl's open threads).

IO_CASES = {
    # name: (DLIO venv option, generator venv option, format, the workload's reader keys)
    "unet3d-npz-buffered": ("dlio_venv", "dlio_venv", "npz", "odirect: False"),
    "unet3d-npz-odirect": ("dlio_fork_venv", "dlio_venv", "npz", "odirect: True"),
    "resnet50-tfrecord-transfer": ("dlio_venv", "dlio_fork_venv", "tfrecord", "transfer_size: {transfer}"),
}


def io_yaml(a, case: str) -> str:
    """unet3d's shape (npz, one sample a file, sizes spread) or resnet50's (tfrecord, many records a
    file, tensorflow loader), scaled down; the record sizes under both DLIO 2.0.0's names (record_length)
    and the fork's (record_length_bytes): each DLIO reads its own and ignores the other's."""
    _dv, _gv, fmt, keys = IO_CASES[case]
    keys = keys.format(transfer=a.transfer_size)
    if fmt == "npz":
        return f"""# written by bench/bench_dlio.py io: unet3d's shape, scaled down
model: unet3d
framework: pytorch
workflow: {{generate_data: False, train: True, checkpoint: False}}
dataset:
  data_folder: data/{NAME}/
  format: npz
  num_files_train: {a.npz_files}
  num_samples_per_file: 1
  record_length: {a.npz_mib << 20}
  record_length_bytes: {a.npz_mib << 20}
  record_length_stdev: {a.npz_mib << 18}
  record_length_bytes_stdev: {a.npz_mib << 18}
reader:
  data_loader: pytorch
  batch_size: 2
  read_threads: 2
  file_shuffle: seed
  sample_shuffle: seed
  {keys}
train:
  epochs: 1
  computation_time: 0.01
"""
    return f"""# written by bench/bench_dlio.py io: resnet50's shape, scaled down
model: resnet50
framework: tensorflow
workflow: {{generate_data: False, train: True, checkpoint: False}}
dataset:
  data_folder: data/{NAME}/
  format: tfrecord
  num_files_train: {a.tfr_files}
  num_samples_per_file: {a.tfr_samples}
  record_length: 114660
  record_length_bytes: 114660
reader:
  data_loader: tensorflow
  batch_size: 16
  read_threads: 2
  computation_threads: 2
  {keys}
train:
  epochs: 1
  computation_time: 0.01
"""


def iodl_yaml(case: str, text: str) -> str:
    """The workload file as the case's DLIO reads it, for iodl. The fork reads only the
    record_length_bytes names (its utils/config.py): the file given to it, less the
    record_length lines it ignores, which would make iodl read the file as DLIO 2.0.0 read it
    (dlio.dlio_version_of), without odirect."""
    if IO_CASES[case][0] != "dlio_fork_venv":
        return text
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.strip().startswith(("record_length:", "record_length_stdev:")))


RequestSizes = groundtruth.RequestSizes   # ftrace block_rq_complete on one device


def histogram(sizes: list[int]) -> dict[str, dict[str, int]]:
    """Requests and bytes per power-of-two size bucket ('<= 4 KiB', ..., '<= 2 MiB')."""
    out: dict[str, dict[str, int]] = {}
    for n in sizes:
        top = 4096
        while top < n:
            top *= 2
        key = f"<= {top >> 10} KiB"
        b = out.setdefault(key, {"requests": 0, "bytes": 0, "top": top})
        b["requests"] += 1
        b["bytes"] += n
    return dict(sorted(out.items(), key=lambda kv: kv[1]["top"]))


def compare_histograms(d: dict, i: dict, share: float = 0.01, tol: float = 0.10) -> dict:
    """Per bucket holding at least `share` of either tool's bytes: requests within `tol` of each
    other (relative to the larger). Buckets below it (ext4 metadata, a file's tail) are listed,
    not judged."""
    total_d = sum(b["bytes"] for b in d.values()) or 1
    total_i = sum(b["bytes"] for b in i.values()) or 1
    rows, ok = [], True
    for key in sorted(set(d) | set(i), key=lambda k: (d.get(k) or i.get(k))["top"]):
        rd, ri = (d.get(key) or {}).get("requests", 0), (i.get(key) or {}).get("requests", 0)
        bd, bi = (d.get(key) or {}).get("bytes", 0), (i.get(key) or {}).get("bytes", 0)
        judged = bd / total_d >= share or bi / total_i >= share
        diff = abs(rd - ri) / max(rd, ri, 1)
        agree = diff <= tol if judged else None
        ok = ok and agree is not False
        rows.append({"bucket": key, "dlio_requests": rd, "iodl_requests": ri, "dlio_bytes": bd, "iodl_bytes": bi,
                     "judged": judged, "difference": diff, "agree": agree})
    return {"rows": rows, "agree": ok, "tolerance": tol, "judged_share": share}


# summary.json keys whose value follows from the run's set-up alone (DLIO's definitions, which
# iodl's --dlio-dir writes: docs/mlperf.md): they must be equal. The measured ones (AU, samples/s,
# MB/s, times) are set side by side.
SUMMARY_FIXED = ("num_accelerators", "num_hosts", "hostname", "host_memory_GB", "host_cpu_count", "num_files_train",
                 "num_files_eval", "num_samples_per_file", "data_size_per_host_GB", "potential_caching", "epochs")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def compare_summaries(dlio: dict, iodl: dict) -> dict:
    """Every key both summary.json files hold: equal or not (the fixed ones must be), or side by
    side (measured); the keys only one of them holds."""
    d, i = _flat(dlio), _flat(iodl)
    rows = []
    for k in sorted(set(d) & set(i)):
        if k in ("host_cpuinfo", "host_meminfo", "start", "end"):
            continue   # /proc snapshots and clock times: never alike
        rows.append({"key": k, "dlio": d[k], "iodl": i[k], "fixed": k in SUMMARY_FIXED, "equal": d[k] == i[k]})
    return {"rows": rows, "fixed_agree": all(r["equal"] for r in rows if r["fixed"]),
            "only_dlio": sorted(set(d) - set(i)), "only_iodl": sorted(set(i) - set(d))}


def opens_of(trace: str, data_dir: str) -> tuple[dict[str, int], int]:
    """({data file: opens}, opens by iodl's page-cache probe) that strace -f -y saw. The probe
    (iodl/cache.py: cachestat of each file before the run, no read) opens with O_NOFOLLOW, which
    neither DLIO nor iodl's reader of a listed directory (the case here) does: counted apart."""
    import re

    pat = re.compile(r'open(?:at)?\([^"]*"(' + re.escape(data_dir.rstrip("/")) + r'/[^"]+)", ([A-Z_|]+)')
    out: dict[str, int] = {}
    probe = 0
    with open(trace) as f:
        for line in f:
            m = pat.search(line)
            if (not m or m.group(1).endswith((".idx", "/")) or "O_DIRECTORY" in m.group(2)
                    or os.path.basename(m.group(1)).startswith("iodl-")):   # iodl looking for its manifest
                continue
            if "O_NOFOLLOW" in m.group(2):
                probe += 1
                continue
            name = os.path.relpath(m.group(1), data_dir)
            out[name] = out.get(name, 0) + 1
    return out, probe


def odirect_reader(directory: str, workers: int, index: int | None = None) -> None:
    """DLIO's odirect read of each file (the fork's reader/npy_reader_odirect.py, odirect_read and
    allocate_aligned_buffer, as they are) without DLIO around it: `workers` processes, each reading
    every workers-th file of the directory, a batch of 2 buffers alive at a time. What the device
    sees then is that allocation in a plain process, beside DLIO's loader workers and iodl."""
    import ctypes

    names = sorted(os.listdir(directory))
    if index is None:
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "odirect-reader", directory,
                                   str(workers), str(k)]) for k in range(workers)]
        if any(p.wait() for p in procs):
            raise SystemExit("odirect-reader: a worker failed")
        return
    alignment, batch = 4096, []
    for name in names[index::workers]:
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            file_size = os.path.getsize(path)
            buffer_size = ((file_size + alignment - 1) // alignment) * alignment
            buf_size = buffer_size + (alignment - 1)
            raw_memory = bytearray(buf_size)
            raw_address = ctypes.addressof((ctypes.c_char * buf_size).from_buffer(raw_memory))
            offset_to_aligned = (alignment - raw_address % alignment) % alignment
            aligned = (ctypes.c_char * (buf_size - offset_to_aligned)).from_buffer(raw_memory, offset_to_aligned)
            if os.readv(fd, [memoryview(aligned)[0:buffer_size]]) != file_size:
                raise SystemExit(f"{path}: short read")
        finally:
            os.close(fd)
        batch.append((raw_memory, aligned))
        if len(batch) == 2:
            batch.clear()


def io_run(mount, cmd: list[str], log: str, trace: str, data_dir: str, env=None, tries: int = 4) -> dict:
    # tries=1 where drops do not matter: O_DIRECT reads bypass the page cache, and the DLIO fork
    # drops it itself before each epoch (main.py: sudo -n ... drop_caches)
    """One run from a cold cache: the device's bytes and requests, the data files' opens. A run
    during which someone else dropped the page cache (machine-wide: readahead's pages evicted
    before they were read, and read again) is run again, up to `tries` times."""
    for attempt in range(tries):
        cache.drop_caches()
        drops = groundtruth.page_cache_drops()
        before = mount.device_stat()
        with RequestSizes(mount.majmin) as rq:
            t0 = time.time()
            with open(log, "w") as out:
                rc = subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=open,openat", "-o", trace, *cmd],
                                    stdout=out, stderr=subprocess.STDOUT, env=env).returncode
            wall = time.time() - t0
        after = mount.device_stat()
        spoiled = groundtruth.page_cache_drops() != drops
        if rc or not spoiled or attempt + 1 == tries:
            break
        print(f"  (someone else dropped the page cache during the run: again, {attempt + 1} of {tries})", flush=True)
    if rc:
        with open(log) as f:
            raise RuntimeError(f"{cmd[:4]}... exited {rc}; log {log}:\n{f.read()[-3000:]}")
    opens, probe = opens_of(trace, data_dir)
    return {"wall_s": wall, "device_read_bytes": (after[2] - before[2]) * 512,
            "device_reads": after[0] - before[0], "requests_traced": len(rq.sizes),
            "histogram": histogram(rq.sizes), "opens": sum(opens.values()), "files_opened": len(opens),
            "opens_per_file": opens, "probe_opens": probe, "spoiled_tries": attempt, "spoiled": spoiled,
            "files_opened_twice": sorted(n for n, k in opens.items() if k > 1)}


def io_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="DLIO and iodl side by side on the I/O: device bytes, request "
                                 "sizes, opens (reader.odirect, reader.transfer_size)")
    ap.add_argument("--dlio-venv", default="/var/tmp/dlio-venv", help="PyPI's dlio-benchmark (2.0.0)")
    ap.add_argument("--dlio-fork-venv", default="/var/tmp/dlio-fork-venv",
                    help="the DLIO fork MLPerf Storage v3.0 runs (mlcommons/DLIO_local_changes): odirect")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--npz-files", type=int, default=32)
    ap.add_argument("--npz-mib", type=int, default=8)
    ap.add_argument("--tfr-files", type=int, default=4)
    ap.add_argument("--tfr-samples", type=int, default=256)
    ap.add_argument("--transfer-size", type=int, default=4 << 20)
    ap.add_argument("--cases", default=",".join(IO_CASES))
    ap.add_argument("--rounds", type=int, default=2, help="DLIO runs of each case (its own spread)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    cases = a.cases.split(",")
    for case in cases:
        for venv in {getattr(a, IO_CASES[case][0]), getattr(a, IO_CASES[case][1])}:
            reason = why_not(venv)
            if reason:
                print(f"not run: {case}: {reason}")
                return 0
    for reason in (RequestSizes.can(), None if shutil.which("strace") else "no strace"):
        if reason:
            print(f"not run: {reason}")
            return 0
    load = [os.getloadavg()]   # the machine may be shared: timings depend on it, the I/O does not
    work = tempfile.mkdtemp(prefix="iodl-dlio-io-", dir="/var/tmp")
    results: dict = {}
    yamls: dict = {}
    try:
        cfg_dir = os.path.join(work, "cfg")
        os.makedirs(os.path.join(cfg_dir, "workload"))
        size = 2 * (a.npz_files * (a.npz_mib << 20) + a.tfr_files * a.tfr_samples * 120_000) + (256 << 20)
        with groundtruth.LoopMount(size=size, direct_io=True) as mnt:
            global MAJMIN
            MAJMIN = mnt.majmin          # launch() counts the generator's bytes on it
            generated: dict = {}
            for case in cases:
                dlio_venv, gen_venv, fmt, _keys = IO_CASES[case]
                tries = 1 if "odirect" in case else 4
                name = f"{NAME}_{case.replace('-', '_')}"
                yamls[case] = io_yaml(a, case)
                with open(os.path.join(cfg_dir, "workload", f"{name}.yaml"), "w") as f:
                    f.write(yamls[case])
                wl_path = os.path.join(work, f"{name}.iodl.yaml")
                with open(wl_path, "w") as f:
                    f.write(iodl_yaml(case, yamls[case]))
                data = os.path.join(mnt.path, f"data-{fmt}")
                gv = getattr(a, gen_venv)
                if fmt not in generated:
                    t = time.time()
                    gen_a = argparse.Namespace(**{**vars(a), "dlio_venv": gv})
                    launch(dlio_cmd(gen_a, cfg_dir, name, data, os.path.join(work, f"gen-{fmt}"),
                                    "++workload.workflow.generate_data=True", "++workload.workflow.train=False"),
                           os.path.join(work, f"gen-{fmt}.log"))
                    files = sorted(os.listdir(os.path.join(data, "train")))
                    generated[fmt] = {"generator": gv, "files": len(files), "generate_s": time.time() - t,
                                      "bytes": sum(os.path.getsize(os.path.join(data, "train", n)) for n in files)}
                    print(f"{fmt}: DLIO ({gv}) generated {generated[fmt]['files']} files, "
                          f"{generated[fmt]['bytes']:,} bytes", flush=True)
                train = os.path.join(data, "train")
                dv = getattr(a, dlio_venv)
                dlio_rounds = []
                for rnd in range(a.rounds):   # DLIO again: how much its own requests vary from run to run
                    out = os.path.join(work, f"dlio-{case}-{rnd}")
                    dlio_rounds.append(io_run(mnt, dlio_cmd(argparse.Namespace(**{**vars(a), "dlio_venv": dv}), cfg_dir,
                                                            name, data, out), out + ".log", out + ".strace", train,
                                              tries=tries))
                    with open(os.path.join(out, "summary.json")) as f:
                        dlio_rounds[-1]["summary"] = json.load(f)
                r_d = dlio_rounds[0]
                # odirect: also iodl's psync engine, one pread at a time as DLIO's loader worker
                # makes one readv at a time (both engines read each file into a buffer of its own,
                # as DLIO does: docs/dlio.md)
                iodl_runs = {}
                for engine in (("auto", "psync") if "odirect" in case else ("auto",)):
                    iodl_out = os.path.join(work, f"iodl-{case}-{engine}.json")
                    dlio_dir = os.path.join(work, f"iodl-{case}-{engine}-dlio")
                    cmd = [shutil.which("mpiexec", path=os.path.dirname(sys.executable)), "-n", str(a.ranks),
                           sys.executable, "-m", "iodl", "read", "--workload", wl_path, "--root", train,
                           "--engine", engine, "--progress", "off", "--out", iodl_out, "--dlio-dir", dlio_dir]
                    r_i = io_run(mnt, cmd, iodl_out + ".log", iodl_out + ".strace", train, tries=tries)
                    found = [os.path.join(d, "summary.json") for d, _s, names in os.walk(dlio_dir) if "summary.json" in names]
                    with open(found[0]) as f:
                        r_i["summary"] = json.load(f)
                    with open(iodl_out) as f:
                        res = json.load(f)
                    r_i.update(direct=res["direct"], engine=res["engine"], iodl_bytes=res["total"]["bytes"],
                               iodl_requests=res["total"]["ios"], access=res["workload"]["read"].get("access"),
                               iodepth=res["workload"]["read"]["iodepth"])
                    iodl_runs[engine] = r_i
                r_i = iodl_runs["auto"]
                # bytes of the files DLIO opened more than once: the fork's loader "pre-warm" (main.py:
                # next(iter(loader)) before each epoch) reads batches it then reads again in the epoch
                r_d["reread_file_bytes"] = sum(os.path.getsize(os.path.join(train, n)) * (r_d["opens_per_file"][n] - 1)
                                               for n in r_d["files_opened_twice"])
                cmp = compare_histograms(r_d["histogram"], r_i["histogram"])
                results[case] = {"dlio": {**r_d, "venv": dv}, "iodl": r_i, "histogram_agreement": cmp,
                                 "dataset": generated[fmt], "summary": compare_summaries(r_d["summary"], r_i["summary"])}
                if len(dlio_rounds) > 1:
                    results[case]["dlio_rounds"] = dlio_rounds[1:]
                    results[case]["histogram_dlio_vs_dlio"] = compare_histograms(r_d["histogram"],
                                                                                dlio_rounds[1]["histogram"])
                if "odirect" in case:
                    # DLIO's own read code in plain processes, as many as DLIO's loader workers
                    out = os.path.join(work, f"reader-{case}")
                    results[case]["dlio_reader_alone"] = io_run(
                        mnt, [sys.executable, os.path.abspath(__file__), "odirect-reader", train,
                              str(a.ranks * 2)], out + ".log", out + ".strace", train, tries=1)
                    results[case]["histogram_reader_alone"] = compare_histograms(
                        r_d["histogram"], results[case]["dlio_reader_alone"]["histogram"])
                if "psync" in iodl_runs:
                    results[case]["iodl_psync"] = iodl_runs["psync"]
                    results[case]["histogram_agreement_psync"] = compare_histograms(r_d["histogram"],
                                                                                   iodl_runs["psync"]["histogram"])
                print(f"{case}: device bytes DLIO {r_d['device_read_bytes']:,} iodl {r_i['device_read_bytes']:,}; "
                      f"requests {r_d['requests_traced']} / {r_i['requests_traced']}; histogram "
                      f"{'agrees' if cmp['agree'] else 'DIFFERS'}; opens {r_d['opens']} / {r_i['opens']} "
                      f"({r_d['files_opened']} / {r_i['files_opened']} files)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    vers = {"dlio_pypi": versions(a.dlio_venv)["dlio_venv"], "iodl": _version("iodl"),
            "kernel": os.uname().release, "python": sys.version.split()[0]}
    try:
        vers["dlio_fork"] = versions(a.dlio_fork_venv)["dlio_venv"]
    except (subprocess.CalledProcessError, OSError):
        pass
    load.append(os.getloadavg())
    write_io_results(a, results, yamls, vers, load=load)
    return 0


IO_NOTES = """How to read it:

- Buffered npz (DLIO 2.0.0, np.load): iodl reads as np.load does (its first small reads, then the
  file in order, one request at a time), and the device sees DLIO's requests, bucket by bucket.
- npz with odirect (the DLIO fork; PyPI's 2.0.0 has no odirect): the fork's loader reads a few
  batches before the epoch (its worker pre-warm) and reads them again in it: the files it opened
  twice. Less those, the device served the same bytes. The sizes of a direct read's requests are
  the block layer's: it joins the reader buffer's physically adjacent pages, up to the device's
  max_sectors_kb (1280 KiB here; 128 segments of at most 64 KiB), so they follow where the
  buffer's pages lie in memory. iodl reads each file into a buffer allocated as DLIO's reader
  allocates one (malloc'd and zeroed per file, size rounded up to 4 KiB plus 4095, one read of
  the whole), with either engine. Where the kernel's page allocator puts those pages is not the
  reader's: DLIO's mix moves from one run to the next, and so does that of DLIO's own read code
  run alone in plain processes; neither iodl nor that code alone gets the share of 1280 KiB
  requests DLIO's loader workers got in this bench's runs (the same code, the same calls: why the
  workers' pages lie more often in long physical runs was not found). Not within 10% per bucket,
  by a memory-layout effect no reader of this kind chooses. iodl is given the file less its
  record_length lines, which the fork does not read (iodl would read it as DLIO 2.0.0 did).
- Before iodl read into buffers of its own (this bench, 2026-11-26T14:35, the same files and
  kernel): iodl's uring engine read into its registered pool, one page a segment, so 531 of its
  551 requests were of at most 512 KiB and none larger (DLIO: 291 at most 512 KiB, 103 up to
  1 MiB, 125 over it); its psync engine, one reused buffer: 397, 133, 0.
- resnet50 tfrecord with transfer_size: the same bytes and opens; the bucket holding nine tenths
  of the bytes agrees; the small ones (the readahead's timing) do not, and DLIO's two runs here
  agreed with each other (at 14:35 they had moved by 46% and 58% in two of them).
- summary.json: every key fixed by the run's set-up is equal; AU and samples/s are each tool's
  own speed on 2 shared cores (DLIO's loader workers and Python decode against iodl's C reads).
"""


def write_io_results(a, results: dict, yamls: dict, vers: dict, when: str | None = None,
                     load: list | None = None) -> None:
    """bench/results/dlio-io-vs-iodl.{json,md}; when: the run's time, load: the 1/5/15-minute load
    averages at its start and end (again from the JSON: python -c 'import bench_dlio as b, json,
    argparse; d = json.load(open(J)); b.write_io_results(argparse.Namespace(ranks=d["ranks"], out=OUT),
    d["cases"], d["workload_yaml"], d["versions"], d["when"], d.get("load"))')."""
    when = when or time.strftime("%Y-%m-%dT%H:%M:%S")
    doc = {"schema": "iodl.bench.dlio-io/1", "when": when, "versions": vers, "ranks": a.ranks, "load": load,
           "mount": "ext4 on loop (direct_io=on), page cache dropped before each run",
           "ground_truth": {"bytes": "/sys/block/loopN/stat sectors read", "request_sizes": "ftrace "
                            "block_rq_complete on the loop device", "opens": "strace -f -y open/openat of the data files"},
           "workload_yaml": yamls, "cases": results}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "dlio-io-vs-iodl.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"# DLIO vs iodl: the I/O of reader.odirect and reader.transfer_size ({when}, kernel {vers['kernel']})",
             "", f"{a.ranks} ranks each, one ext4 loop mount (losetup --direct-io=on), the page cache dropped before "
             "each run, the data generated once by DLIO's own generator and read by both. Ground truth: bytes the "
             "device served (/sys/block/loopN/stat), the size of every read request it completed (ftrace "
             "block_rq_complete on that device), the opens of the data files (strace -f -y over the whole "
             "mpiexec: ranks, DLIO's loader workers, iodl's open threads). A size bucket is judged when it holds "
             "at least 1% of either tool's bytes: its request counts within 10% of each other."
             + (f" Load averages (1, 5, 15 min; 2 CPUs, shared): {', '.join(f'{x:.1f}' for x in load[0])} at the "
                f"start, {', '.join(f'{x:.1f}' for x in load[-1])} at the end: timings depend on them, the "
                "bytes, requests and opens do not." if load else ""), "", IO_NOTES, ""]
    for case, r in results.items():
        d, i, cmp = r["dlio"], r["iodl"], r["histogram_agreement"]
        lines += [f"## {case}", "", f"DLIO: `{d['venv']}`; data: {r['dataset']['files']} files, "
                  f"{r['dataset']['bytes']:,} bytes. iodl: engine {i['engine']}, direct {i['direct']}, access "
                  f"{i['access']}, iodepth {i['iodepth']}: {i['iodl_requests']:,} requests of "
                  f"{i['iodl_bytes'] / max(i['iodl_requests'], 1):,.0f} bytes on average ({i['iodl_bytes']:,} bytes).", "",
                  "```yaml", yamls[case].rstrip(), "```", "",
                  "| | DLIO | iodl |", "|---|---:|---:|",
                  f"| bytes the device served | {d['device_read_bytes']:,} | {i['device_read_bytes']:,} |",
                  f"| read requests the device completed | {d['requests_traced']:,} | {i['requests_traced']:,} |",
                  f"| bytes of files read again (DLIO: opened twice) | {d['reread_file_bytes']:,} | - |",
                  f"| bytes the device served, less those | {d['device_read_bytes'] - d['reread_file_bytes']:,} | "
                  f"{i['device_read_bytes']:,} |",
                  f"| opens of data files (files) | {d['opens']} ({d['files_opened']}) | {i['opens']} "
                  f"({i['files_opened']}) |",
                  f"| iodl's page-cache probe: opens (cachestat, no read) | - | {i['probe_opens']} |",
                  f"| tries another's drop_caches spoiled, run again (O_DIRECT: not) | {d['spoiled_tries']} | "
                  f"{i['spoiled_tries']} |",
                  f"| wall time of the launch, under strace (s) | {d['wall_s']:.1f} | {i['wall_s']:.1f} |", "",
                  f"Request sizes at the device ({'agree' if cmp['agree'] else 'DIFFER'} within 10% in every "
                  "judged bucket):", "", *_size_table(cmp)]
        if "histogram_dlio_vs_dlio" in r:
            dd = r["histogram_dlio_vs_dlio"]
            lines += [f"DLIO against itself, a second run ({'agree' if dd['agree'] else 'DIFFER'} within 10%; "
                      "its second run in the iodl column):", "", *_size_table(dd)]
        sm = r["summary"]
        lines += [f"summary.json (DLIO's, and iodl's `--dlio-dir`): the keys fixed by the set-up "
                  f"{'all agree' if sm['fixed_agree'] else 'DIFFER'}; measured ones side by side:", "",
                  "| key | DLIO | iodl | |", "|---|---|---|---|"]
        # the /proc/cpuinfo and /proc/meminfo snapshots (host_cpuinfo.*, host_meminfo.*) are in the JSON
        snap = [row for row in sm["rows"] if row["key"].startswith(("host_cpuinfo.", "host_meminfo."))]
        lines += [f"| `{row['key']}` | {row['dlio']} | {row['iodl']} | "
                  f"{('equal' if row['equal'] else 'DIFFERS') if row['fixed'] else 'measured'} |"
                  for row in sm["rows"] if row not in snap]
        lines += ["", f"Also in both: {len(snap)} fields of the /proc/cpuinfo and /proc/meminfo snapshots "
                  f"(host_cpuinfo, host_meminfo; {sum(r['equal'] for r in snap)} alike: in the JSON). Only in DLIO's: "
                  f"{', '.join(sm['only_dlio']) or 'none'}. Only in iodl's: {', '.join(sm['only_iodl']) or 'none'}.", ""]
        if "iodl_psync" in r:
            p, cmp = r["iodl_psync"], r["histogram_agreement_psync"]
            lines += [f"iodl with `--engine psync` (its device bytes {p['device_read_bytes']:,}, "
                      f"{p['requests_traced']:,} requests; {'agree' if cmp['agree'] else 'DIFFER'} within 10%):", "",
                      *_size_table(cmp)]
        if "dlio_reader_alone" in r:
            p, cmp = r["dlio_reader_alone"], r["histogram_reader_alone"]
            lines += [f"DLIO's odirect read code alone (`bench_dlio.py odirect-reader`: its odirect_read and "
                      f"allocate_aligned_buffer in {a.ranks * 2} plain processes, as many as its loader workers; "
                      f"device bytes {p['device_read_bytes']:,}, {p['requests_traced']:,} requests; "
                      f"{'agree' if cmp['agree'] else 'DIFFER'} within 10%; in the iodl column):", "", *_size_table(cmp)]
    with open(os.path.join(a.out, "dlio-io-vs-iodl.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _size_table(cmp: dict) -> list[str]:
    lines = ["| size | DLIO requests | iodl requests | DLIO MB | iodl MB | judged | difference |",
             "|---|---:|---:|---:|---:|---|---:|"]
    lines += [f"| {row['bucket']} | {row['dlio_requests']} | {row['iodl_requests']} | {row['dlio_bytes'] / 1e6:.1f} | "
              f"{row['iodl_bytes'] / 1e6:.1f} | {'yes' if row['judged'] else 'no'} | {row['difference']:.1%} |"
              for row in cmp["rows"]]
    return lines + [""]


def main() -> int:
    global MAJMIN
    if sys.argv[1:2] == ["io"]:
        return io_main(sys.argv[2:])
    if sys.argv[1:2] == ["odirect-reader"]:
        odirect_reader(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlio-venv", default="/var/tmp/dlio-venv")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--files", type=int, default=128)
    ap.add_argument("--record-mib", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--compute", default="0.05,0.2",
                    help="computation_time of each case, comma-separated (default: 0.05,0.2)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--read-threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    computes = [float(c) for c in a.compute.split(",")]
    reason = why_not(a.dlio_venv)
    if reason:
        print(f"not run: {reason}")
        return 0
    vers = versions(a.dlio_venv)
    dataset_bytes = a.files * (a.record_mib << 20)
    work = tempfile.mkdtemp(prefix="iodl-dlio-bench-", dir="/var/tmp")
    runs: list[dict] = []
    yamls: dict[str, str] = {}
    try:
        cfg_dir = os.path.join(work, "cfg")
        os.makedirs(os.path.join(cfg_dir, "workload"))
        names = {}
        for k, compute in enumerate(computes):
            names[compute] = f"{NAME}_{k}"
            yamls[f"{compute:g}"] = workload_yaml(a, compute)
            with open(os.path.join(cfg_dir, "workload", f"{names[compute]}.yaml"), "w") as f:
                f.write(yamls[f"{compute:g}"])
        with groundtruth.LoopMount(size=2 * dataset_bytes + (256 << 20), direct_io=True) as mnt:
            MAJMIN = mnt.majmin
            data = os.path.join(mnt.path, "data")
            t = time.time()
            launch(dlio_cmd(a, cfg_dir, names[computes[0]], data, os.path.join(work, "dlio-generate"),
                            "++workload.workflow.generate_data=True", "++workload.workflow.train=False"),
                   os.path.join(work, "dlio-generate.log"))
            files = sorted(os.listdir(os.path.join(data, "train")))
            on_disk = sum(os.path.getsize(os.path.join(data, "train", n)) for n in files)
            generate_s = time.time() - t
            print(f"DLIO generated {len(files)} files, {on_disk:,} bytes, in {generate_s:.1f} s", flush=True)
            for rep in range(a.reps):
                for compute in computes:
                    # interleaved, the first tool alternating, so that drift hits both alike
                    order = ("dlio", "iodl") if rep % 2 == 0 else ("iodl", "dlio")
                    name = names[compute]
                    for tool in order:
                        tag = f"{name}-{rep}"
                        r = (run_dlio(a, cfg_dir, name, data, work, tag) if tool == "dlio"
                             else run_iodl(a, os.path.join(cfg_dir, "workload", f"{name}.yaml"), data, work, tag))
                        r["rep"], r["compute_s"] = rep, compute
                        runs.append(r)
                        print(f"rep {rep} compute {compute:g} {tool:4s} {r['samples_per_s']:7.2f} samples/s  "
                              f"AU {r['au']:.3f}  start-up {r['startup_s']:5.1f} s  wall {r['wall_s']:5.1f} s  "
                              f"RSS/rank {r['rss_mb_per_rank'] or 0:5.0f} MB (+workers "
                              f"{r['rss_with_workers_mb_per_rank'] or 0:5.0f})  "
                              f"device {r['device_read_bytes'] / 1e6:7.1f} MB", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = ("samples_per_s", "au", "mlperf_samples_per_s", "mlperf_au", "startup_s", "wall_s",
            "rss_mb_per_rank", "rss_with_workers_mb_per_rank", "workers_per_rank", "device_read_bytes",
            "iodl_max_rss_mb", "iodl_pss_mb", "iodl_bytes")
    summary: dict = {}
    for compute in computes:
        for tool in ("dlio", "iodl"):
            mine = [r for r in runs if r["tool"] == tool and r["compute_s"] == compute]
            summary.setdefault(f"{compute:g}", {})[tool] = {
                k: statistics.median(r[k] for r in mine) for k in keys if all(r.get(k) is not None for r in mine)}
    result = {"schema": "iodl.bench.dlio-vs-iodl/1", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "versions": vers, "cpus": os.cpu_count(), "ranks": a.ranks, "reps": a.reps,
              "mount": "ext4 on loop (direct_io=on), caches dropped before each run",
              "dataset": {"generator": "DLIO 'generate_data' (npz)", "files": len(files), "bytes_on_disk": on_disk,
                          "record_length": a.record_mib << 20, "generate_s": generate_s},
              "workload_yaml": yamls, "summary_by_compute_s": summary, "runs": runs,
              "caveats": CAVEATS}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "dlio-vs-iodl.json"), "w") as f:
        json.dump(result, f, indent=1)

    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    dv = vers["dlio_venv"]
    lines = [f"# DLIO vs iodl on one DLIO workload file ({result['when']}, kernel {vers['kernel']}, "
             f"{result['cpus']} CPUs)", "",
             f"dlio-benchmark {dv['dlio-benchmark']} (torch {dv['torch']}, tensorflow-cpu {dv['tensorflow-cpu']}, "
             f"pydftracer {dv['pydftracer']}, hydra-core {dv['hydra-core']}, mpich {dv['mpich']}) beside iodl "
             f"{vers['iodl']} (mpich {vers['iodl_mpich']}), {a.ranks} ranks each, {a.reps} interleaved rounds "
             f"(medians; the first tool alternates). Data: {len(files)} npz files, {on_disk / 1e6:.1f} MB, "
             f"generated once by DLIO's own generator ({generate_s:.0f} s) on a fresh ext4 loop mount "
             f"(losetup --direct-io=on), read by both; page cache dropped before each run; bytes served from the "
             f"blkio cgroup the run's mpiexec, ranks and workers ran in. The workload (computation_time per case):",
             "", "```yaml", yamls[f"{computes[0]:g}"].rstrip(), "```", ""]
    for compute in computes:
        d, i = summary[f"{compute:g}"]["dlio"], summary[f"{compute:g}"]["iodl"]
        bound = a.ranks * a.batch / compute
        rows = [("samples/s (tool's own)", fmt(d.get("samples_per_s"), ".2f"), fmt(i.get("samples_per_s"), ".2f")),
                ("samples/s, MLPerf's view", fmt(d.get("samples_per_s"), ".2f"),
                 fmt(i.get("mlperf_samples_per_s"), ".2f")),
                ("AU (tool's own)", fmt(d.get("au"), ".3f"), fmt(i.get("au"), ".3f")),
                ("AU, MLPerf's view", fmt(d.get("au"), ".3f"), fmt(i.get("mlperf_au"), ".3f")),
                ("start-up to first step (s)", fmt(d.get("startup_s"), ".1f"), fmt(i.get("startup_s"), ".1f")),
                ("wall time of the launch (s)", fmt(d.get("wall_s"), ".1f"), fmt(i.get("wall_s"), ".1f")),
                ("peak RSS per rank, rank process (MB)", fmt(d.get("rss_mb_per_rank"), ".0f"),
                 fmt(i.get("rss_mb_per_rank"), ".0f")),
                ("peak RSS per rank with its loader workers (MB)", fmt(d.get("rss_with_workers_mb_per_rank"), ".0f"),
                 fmt(i.get("rss_with_workers_mb_per_rank"), ".0f")),
                ("loader worker processes per rank", fmt(d.get("workers_per_rank"), ".0f"),
                 fmt(i.get("workers_per_rank"), ".0f")),
                ("bytes the device served (blkio, MB)", fmt(d["device_read_bytes"] / 1e6, ".1f"),
                 fmt(i["device_read_bytes"] / 1e6, ".1f"))]
        lines += [f"## computation_time {compute:g} s (compute-bound ceiling: {a.ranks} ranks x batch {a.batch} "
                  f"/ {compute:g} s = {bound:.1f} samples/s)", "", "| median of the rounds | DLIO | iodl |",
                  "|---|---:|---:|"]
        lines += [f"| {n} | {x} | {y} |" for n, x, y in rows]
        lines += [""]
    lines += ["## Each run", "", "| compute s | round | tool | samples/s | AU | MLPerf AU | start-up s | wall s | "
              "RSS/rank MB | +workers MB | device MB |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['compute_s']:g} | {r['rep']} | {r['tool']} | {r['samples_per_s']:.2f} | {r['au']:.3f} | "
                     f"{fmt(r.get('mlperf_au'), '.3f') if r['tool'] == 'iodl' else fmt(r['au'], '.3f')} | "
                     f"{r['startup_s']:.1f} | {r['wall_s']:.1f} | {fmt(r['rss_mb_per_rank'], '.0f')} | "
                     f"{fmt(r['rss_with_workers_mb_per_rank'], '.0f')} | {r['device_read_bytes'] / 1e6:.1f} |")
    lines += ["", CAVEATS.rstrip()]
    with open(os.path.join(a.out, "dlio-vs-iodl.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
