"""What DLIO writes for a run, written from an iodl train-sync run (summary.json, each rank's
<rank>_output.json and <rank>_per_epoch_stats.json, dlio_config/) or checkpoint run (summary.json,
dlio_config/), in the run directory mlpstorage's report generator reads (docs/mlperf.md, "DLIO's
output files").

The figures follow DLIO's own code, the fork MLPerf Storage v3.0 runs
(mlcommons/DLIO_local_changes@f6796ed281e39ccc83a450e2b1f21b9c909d8fd0,
dlio_benchmark/utils/statscounter.py and main.py's _train), not iodl's definitions:
- a *block* is the steps between in-training checkpoints (most often a whole epoch); it starts
  as the first step starts waiting for data and ends after the last step's barrier, before the
  checkpoint that ends it;
- per rank and block, with the first step left out (output.metric.exclude_start_steps = 1):
  au = sum(compute[1:]) / (block time - proc[0]) x 100, throughput = (steps - 1) x batch / the
  same time, where proc = load (waiting for data) + compute; a block of one step counts 0 and 0;
- per rank and epoch: the blocks' figures weighted by their steps; per epoch: AU the mean over
  ranks, throughput the sum over ranks; summary: means and population stdevs over epochs;
- "MB/s" is MiB/s: mean samples/s x the workload's nominal record length / 2^20.
"""
from __future__ import annotations

import json
import os
import stat
import time
from datetime import datetime

import numpy as np

from .cache import meminfo
from .errors import UsageError
from .result import STEP_FIELDS

MiB = 1 << 20
GiB = 1 << 30
TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"     # DLIO's utcnow(): local time, despite the name
RUN_DIR_FORMAT = "%Y%m%d_%H%M%S"        # mlpstorage's DATETIME_STR
_COL = {name: i for i, name in enumerate(STEP_FIELDS)}


def check_directory(path: str) -> None:
    """--dlio-dir: a directory iodl may create files in (never through a link); before any run."""
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        raise UsageError(f"--dlio-dir {path}: not a directory (iodl never writes through links)")
    parent = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise UsageError(f"--dlio-dir {path}: cannot create files there")


def _ts(wall: float) -> str:
    return datetime.fromtimestamp(wall).strftime(TS_FORMAT)


def blocks(rows: np.ndarray) -> list[tuple[int, np.ndarray, float, float]]:
    """(epoch, steps, start, end) of each of a rank's blocks, in order (DLIO's start_block/end_block):
    a step that checkpointed ends its block, its checkpoint time outside it."""
    out = []
    if not len(rows):
        return out
    for epoch in np.unique(rows[:, _COL["epoch"]]).tolist():
        steps = rows[rows[:, _COL["epoch"]] == epoch]
        ends = np.flatnonzero(steps[:, _COL["checkpoint"]] > 0).tolist()
        first = 0
        for last in ends + ([len(steps) - 1] if not ends or ends[-1] != len(steps) - 1 else []):
            b = steps[first:last + 1]
            out.append((int(epoch), b, float(b[0, _COL["t_start"]]),
                        float(b[-1, _COL["t_end"]] - b[-1, _COL["checkpoint"]])))
            first = last + 1
    return out


def block_figures(steps: np.ndarray, start: float, end: float) -> tuple[float, float]:
    """(au %, samples/s) of one rank's block, as statscounter.compute_metrics_train."""
    proc = steps[:, _COL["data_wait"]] + steps[:, _COL["compute"]]
    total = end - start - proc[0]
    if len(steps) < 2 or total <= 0:
        return 0.0, 0.0
    compute = steps[1:, _COL["compute"]].sum()
    return (float(compute / total * 100) if compute > 0 else 0.0,
            float(steps[1:, _COL["samples"]].sum() / total))


def rank_epochs(rows: np.ndarray) -> dict[int, dict]:
    """Per epoch of one rank: its blocks (load, proc, compute lists; au, throughput) and the
    step-weighted epoch figures (statscounter.end_train)."""
    out: dict[int, dict] = {}
    for epoch, steps, start, end in blocks(rows):
        e = out.setdefault(epoch, {"blocks": [], "start": start})
        au, rate = block_figures(steps, start, end)
        e["blocks"].append({"load": steps[:, _COL["data_wait"]].tolist(),
                            "proc": (steps[:, _COL["data_wait"]] + steps[:, _COL["compute"]]).tolist(),
                            "compute": steps[:, _COL["compute"]].tolist(), "au": au, "throughput": rate,
                            "start": start, "end": end})
        e["end"] = float(steps[-1, _COL["t_end"]])
    for e in out.values():
        n = np.array([len(b["proc"]) for b in e["blocks"]], dtype=float)
        e["au"] = float(np.dot([b["au"] for b in e["blocks"]], n) / n.sum())
        e["throughput"] = float(np.dot([b["throughput"] for b in e["blocks"]], n) / n.sum())
    return out


def train_metric(per_rank: list[np.ndarray], record_length: int, au_threshold: float) -> dict:
    """summary.json's train_* figures (statscounter.end_run) from every rank's step records."""
    epochs = [rank_epochs(r) for r in per_rank]
    n = max((max(e) + 1 for e in epochs if e), default=0)
    au = np.zeros(n)
    rate = np.zeros(n)
    for e in epochs:                  # allreduce(sum): a rank without an epoch adds nothing to it
        for k, v in e.items():
            au[k] += v["au"]
            rate[k] += v["throughput"]
    au /= max(len(per_rank), 1)       # ...and AU is then divided by every rank (comm.size)
    if not n:
        return {}
    return {"train_au_percentage": au.tolist(), "train_au_mean_percentage": float(np.mean(au)),
            "train_au_meet_expectation": "success" if np.mean(au) >= au_threshold * 100 else "fail",
            "train_au_stdev_percentage": float(np.std(au)),
            "train_throughput_samples_per_second": rate.tolist(),
            "train_throughput_mean_samples_per_second": float(np.mean(rate)),
            "train_throughput_stdev_samples_per_second": float(np.std(rate)),
            "train_io_mean_MB_per_second": float(np.mean(rate)) * record_length / MiB,
            "train_io_stdev_MB_per_second": float(np.std(rate)) * record_length / MiB}


def checkpoint_metric(rank0: np.ndarray, checkpoint_bytes: int) -> dict:
    """summary.json's save_checkpoint_* figures: rank 0's time for each in-training checkpoint
    (DLIO times rank 0, start_save_ckpt to end_save_ckpt) and the checkpoint's size in GiB."""
    seconds = rank0[rank0[:, _COL["checkpoint"]] > 0, _COL["checkpoint"]] if len(rank0) else np.empty(0)
    if not len(seconds):
        return {}
    size = checkpoint_bytes / GiB
    rate = size / seconds
    return {"save_checkpoint_io_mean_GB_per_second": float(np.mean(rate)),
            "save_checkpoint_io_stdev_GB_per_second": float(np.std(rate)),
            "save_checkpoint_duration_mean_seconds": float(np.mean(seconds)),
            "save_checkpoint_duration_stdev_seconds": float(np.std(seconds)),
            "checkpoint_size_GB": size}


def checkpoint_run_metric(result: dict) -> dict:
    """summary.json's figures of a checkpoint run (`iodl checkpoint`): per direction, rank 0's time
    in each round (DLIO's start_/end_save_ckpt and _load_ckpt time rank 0, without rank_sync) and
    the checkpoint's size in GiB / that time, mean and population stdev; checkpoint_size_GB: one
    checkpoint's bytes over every rank / 2^30 (DLIO's allreduce of the ranks' GiB)."""
    out = {}
    size = None
    for op, name in (("write", "save"), ("read", "load")):
        b = result["checkpoint"].get(op)
        if not b:
            continue
        if size is None:
            size = b["bytes"] / b["rounds"] / GiB
        seconds = np.array(next(p for p in b["per_rank"] if p["rank"] == 0)["round_s"])
        rate = size / seconds
        out.update({f"{name}_checkpoint_io_mean_GB_per_second": float(np.mean(rate)),
                    f"{name}_checkpoint_io_stdev_GB_per_second": float(np.std(rate)),
                    f"{name}_checkpoint_duration_mean_seconds": float(np.mean(seconds)),
                    f"{name}_checkpoint_duration_stdev_seconds": float(np.std(seconds))})
    if size is not None:
        out["checkpoint_size_GB"] = size
    return out


def host_facts() -> dict:
    """What DLIO records of a rank's host: memory (psutil's total is MemTotal) and CPUs."""
    return {"host": os.uname().nodename, "host_memory_GB": meminfo().get("MemTotal", 0) / GiB,
            "host_cpu_count": os.cpu_count() or 0}


def _proc_text(path: str) -> dict:
    """A /proc file of "key: value" lines as DLIO's lines_to_dict keeps it: strings ("123 kB"),
    the last value of a repeated key (cpuinfo: the last CPU's), no "processor"."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, sep, v = line.partition(":")
                if sep and k.strip() != "processor":
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def _meminfo_text() -> dict:
    return _proc_text("/proc/meminfo")


def _hosts(facts: list[dict], hosts_of_ranks: list[str]) -> tuple[list[str], dict]:
    nodes = sorted(set(hosts_of_ranks), key=hosts_of_ranks.index)
    return nodes, {h: next(f for f, r in zip(facts, hosts_of_ranks) if r == h) for h in nodes}


def summary(per_rank: list[np.ndarray], facts: list[dict], hosts_of_ranks: list[str], wl, files: int,
            start: float, end: float, checkpoint_bytes: int = 0) -> dict:
    """summary.json of a training run: DLIO's keys, rank 0's view (statscounter.__init__, end_run,
    finalize). facts: host_facts() of every rank; hosts_of_ranks: the node each rank ran on."""
    d = wl.dataset
    size = len(per_rank)
    npernode = hosts_of_ranks.count(hosts_of_ranks[0]) if hosts_of_ranks else 1
    per_host_gib = npernode * d.samples_per_file * files // max(size, 1) * d.sample_size / GiB
    metric = train_metric(per_rank, d.sample_size, wl.metric.au_threshold)
    if checkpoint_bytes and per_rank:
        metric.update(checkpoint_metric(per_rank[0], checkpoint_bytes))
    return _summary(facts, hosts_of_ranks, start, end, metric, per_host_gib,
                    num_files_train=files, num_samples_per_file=d.samples_per_file,
                    epochs=len(metric.get("train_au_percentage", [])))


def checkpoint_summary(result: dict, facts: list[dict], start: float, end: float) -> dict:
    """summary.json of a checkpoint run (`iodl checkpoint`): no training, the checkpoint figures."""
    hosts = [p["host"] for p in sorted(next(b for b in (result["checkpoint"].get("write"),
                                                         result["checkpoint"].get("read")) if b)["per_rank"],
                                       key=lambda p: p["rank"])]
    return _summary(facts, hosts, start, end, checkpoint_run_metric(result), 0.0,
                    num_files_train=0, num_samples_per_file=1, epochs=0)


def _summary(facts, hosts_of_ranks, start, end, metric, per_host_gib, **counts) -> dict:
    nodes, per_node = _hosts(facts, hosts_of_ranks)
    memory = [per_node[h]["host_memory_GB"] for h in nodes]
    return {"start": _ts(start), "num_accelerators": len(hosts_of_ranks), "num_hosts": len(nodes),
            "hostname": hosts_of_ranks[0] if hosts_of_ranks else os.uname().nodename,
            "metric": metric, "num_files_train": counts["num_files_train"], "num_files_eval": 0,
            "num_samples_per_file": counts["num_samples_per_file"],
            "host_cpu_count": [int(per_node[h]["host_cpu_count"]) for h in nodes],
            "host_processor_name": os.uname().machine, "host_cpuinfo": _proc_text("/proc/cpuinfo"),
            # DLIO's list: 1 where the host's memory exceeds the data it reads (it may cache it)
            "potential_caching": [0 if m <= per_host_gib else 1 for m in memory],
            "host_meminfo": _meminfo_text(), "host_memory_GB": memory,
            "data_size_per_host_GB": per_host_gib, "epochs": counts["epochs"], "end": _ts(end)}


def rank_output(rows: np.ndarray, fact: dict, per_host_gib: float, wall0: float) -> tuple[dict, dict]:
    """(<rank>_output.json, <rank>_per_epoch_stats.json) of one rank; epochs numbered from 1 as
    DLIO's are. The stats' times are wall clock (wall0 + seconds since the run's start); the step
    lists are seconds."""
    out = {"host_memory_GB": fact["host_memory_GB"], "host_cpu_count": fact["host_cpu_count"],
           "host_processor_name": os.uname().machine, "host_cpuinfo": _proc_text("/proc/cpuinfo"),
           "potential_caching": int(per_host_gib <= fact["host_memory_GB"])}
    stats = {}
    for epoch, e in rank_epochs(rows).items():
        key = str(epoch + 1)
        bl = {f"block{i + 1}": b for i, b in enumerate(e["blocks"])}
        out[key] = {k: {name: b[k] for name, b in bl.items()} for k in ("load", "proc", "throughput", "au", "compute")}
        out[key]["host_meminfo"] = _meminfo_text()
        stats[key] = {"start": _ts(wall0 + e["start"]), "end": _ts(wall0 + e["end"]),
                      "duration": f"{e['end'] - e['start']:.2f}"}
        for name, b in bl.items():
            stats[key][name] = {"start": _ts(wall0 + b["start"]), "end": _ts(wall0 + b["end"]),
                                "duration": f"{b['end'] - b['start']:.2f}"}
    out["hostname"] = fact["host"]
    return out, stats


def _yaml(value, indent: int = 0) -> str:
    """A small YAML writer for the config dicts below (strings, numbers, booleans, dicts, lists)."""
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:\n{_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{k}: {_scalar(v)}")
        return "\n".join(lines)
    return "\n".join(f"{pad}- {_scalar(v)}" for v in value)


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (dict, list)):
        return "{}" if isinstance(v, dict) else "[]"
    return json.dumps(str(v))     # a JSON string is a YAML string


def dlio_config(wl, files: int, batch: int, compute_s: float, epochs: int, checkpoint: bool, steps: int = 0) -> dict:
    """dlio_config/config.yaml's `workload:` as DLIO resolves it: the keys mlpstorage reads
    (model.name, workflow, dataset, reader, train, metric)."""
    d = wl.dataset
    model = wl.name.rpartition("_")[0] or wl.name
    return {"workload": {
        "model": {"name": model},
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": True, "checkpoint": bool(checkpoint)},
        "dataset": {"data_folder": "", "format": d.format, "num_files_train": files,
                    "num_samples_per_file": d.samples_per_file, "record_length_bytes": d.sample_size,
                    "record_length_bytes_stdev": d.sample_size_stdev},
        "reader": {"data_loader": "pytorch", "batch_size": batch, "read_threads": wl.read.read_threads},
        "train": {"epochs": epochs, "computation_time": compute_s, "seed": wl.train.seed,
                  **({"total_training_steps": steps} if steps else {})},
        "metric": {"au": wl.metric.au_threshold}}}


def checkpoint_config(result: dict, wl, writes: int, reads: int, root: str) -> dict:
    """dlio_config/config.yaml of a checkpoint run: what mlpstorage reads (model.name as MLPerf's
    llama3_8b.yaml spells it, llama_8b, which mlpstorage reads back as llama3-8b; its parallelism;
    workflow; checkpoint counts and mode)."""
    par = wl.parallelism
    return {"workload": {
        "model": {"name": result["model"].replace("llama3-", "llama_").replace("-", "_"),
                  "parallelism": {"tensor": par.tensor, "pipeline": par.pipeline, "zero_stage": par.zero_stage}},
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": False, "checkpoint": True},
        "checkpoint": {"checkpoint_folder": root, "num_checkpoints_write": writes, "num_checkpoints_read": reads,
                       "mode": "subset" if result["subset"] else "default", "fsync": result["fsync"]}}}


def write_checkpoint_run(base: str, result: dict, wl, writes: int, reads: int, facts: list[dict],
                         wall_start: float) -> str:
    """DLIO's files of an `iodl checkpoint` run in mlpstorage's layout; the run directory."""
    root = result["roots"][0]
    summary_ = checkpoint_summary(result, facts, wall_start, time.time())
    overrides = [f"workload={result['model'].replace('-', '_')}",     # MLPerf's file: llama3_8b.yaml
                 f"++workload.checkpoint.checkpoint_folder={root}",
                 f"++workload.checkpoint.num_checkpoints_write={writes}",
                 f"++workload.checkpoint.num_checkpoints_read={reads}"]
    return write_run(base, run_directory(base, result["model"], wall_start, kind="checkpointing"), summary_, [],
                     checkpoint_config(result, wl, writes, reads, root), overrides, result)


def write_run(base: str, directory: str, summary_: dict, outputs: list[tuple[dict, dict]], config: dict,
              overrides: list[str], iodl_result: dict) -> str:
    """One run directory: summary.json, <rank>_output.json, <rank>_per_epoch_stats.json,
    dlio_config/{config,hydra,overrides}.yaml and iodl's own result beside them. Files are created
    exclusively: an existing run directory is never written into."""
    _make_dirs(base, directory)
    os.mkdir(os.path.join(directory, "dlio_config"))

    def put(name: str, text: str) -> None:
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    put("summary.json", json.dumps(summary_, indent=4))
    for rank, (out, stats) in enumerate(outputs):
        put(f"{rank}_output.json", json.dumps(out, indent=4))
        put(f"{rank}_per_epoch_stats.json", json.dumps(stats, indent=4))
    put("dlio_config/config.yaml", _yaml(config) + "\n")
    put("dlio_config/overrides.yaml", _yaml(overrides) + "\n")
    put("dlio_config/hydra.yaml", _yaml({"hydra": {"job": {"name": "iodl"},
                                                   "runtime": {"output_dir": os.path.abspath(directory)}}}) + "\n")
    put("iodl_result.json", json.dumps(iodl_result, indent=1))
    return directory


def _make_dirs(base: str, directory: str) -> None:
    """directory and the ones between base (--dlio-dir, checked) and it, never through a symlink:
    an existing component must be a real directory (lstat), a missing one is created."""
    parts = os.path.relpath(directory, base).split(os.sep)
    path = base
    for i, part in enumerate([""] + parts):
        path = os.path.join(path, part) if part else base
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
            continue
        if i == len(parts):
            raise UsageError(f"--dlio-dir: {path} exists; a run directory is always a new one")
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"--dlio-dir: {path} is not a directory (iodl never writes through links)")


def run_directory(base: str, model: str, wall: float | None = None, kind: str = "training") -> str:
    """mlpstorage's run directory (rules/utils.py generate_output_location): training runs
    <results>/training/<model>/run/<YYYYMMDD_HHmmss>, checkpoint runs
    <results>/checkpointing/<model>/<YYYYMMDD_HHmmss>; a second later when that one exists."""
    wall = time.time() if wall is None else wall
    parts = [kind, model] + (["run"] if kind == "training" else [])
    while True:
        path = os.path.join(base, *parts, datetime.fromtimestamp(wall).strftime(RUN_DIR_FORMAT))
        if not os.path.exists(path):
            return path
        wall += 1.0
