"""MLPerf Storage's rules where iodl applies them: the dataset-size rule, which runs are CLOSED,
the run procedure and its aggregate, and the checkpointing rules.

Sources (cited by commit, as the built-ins cite their numbers): mlcommons/storage Rules.md
(@0366ccfc9fc629dde3379a8022cb4c4ff8285b53: §2.1.17 six runs, the first a warm-up; §3.1.2 the
dataset size; §4.3.5 subset mode; §4.6 CLOSED checkpointing; §4.7.1 the 30 s gap),
mlpstorage_py/config.py (@0889d5cb275e40846b178f10ae59df7d9a0eb784: MODELS_CLOSED,
ACCELERATORS_CLOSED, LLM_ALLOWED_VALUES), mlpstorage/rules/utils.py
(@4234cd9b37e760b096855c452f40a37f70c18a4f: calculate_training_data_size) and
mlpstorage_py/report_generator.py (@0366ccfc9fc629dde3379a8022cb4c4ff8285b53: _aggregate_training)."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from .records import record
from .result import STEP_FIELDS

MIN_STEPS = 500          # the dataset holds at least 500 steps of every accelerator's batch...
RAM_MULTIPLE = 5         # ...and at least 5x the memory of all client hosts together
GiB = 1 << 30

# CLOSED training: these models on these accelerators; every other MLPerf training workload
# (a100, h100; resnet50, cosmoflow, dlrm, flux) is "whatif" (Rules.md Table 3: "whatif only")
CLOSED_MODELS = ("unet3d", "retinanet")
CLOSED_ACCELERATORS = ("b200", "mi355")
RUNS = 6                 # run directories per CLOSED training result (Rules.md §2.1.17)...
WARMUP_RUNS = 1          # ...the first of them a warm-up, left out of what is reported
# CLOSED checkpointing: model -> processes (TP x PP x DP of Table 2); subset mode exists for llama3-8b only
CLOSED_CHECKPOINT_RANKS = {"llama3-8b": 8, "llama3-70b": 64, "llama3-405b": 512, "llama3-1t": 1024}
SUBSET_MODEL, SUBSET_RANKS = "llama3-8b", 8
CHECKPOINTS = 10         # writes, then reads (Rules.md §4.6 Table 3: only 10, or 0 in a two-invocation run)
MIN_RANKS_PER_HOST = 4   # Rules.md §4.6.2 / Table 3 "--ppn ... minimal 4"
CACHE_MULTIPLE = 3       # a node's checkpoint share under 3x its memory: clear the cache before reading (§4.3.1)
READ_GAP_S = 30.0        # a read-only invocation starts within this of the writes' end (Rules.md §4.7.1)


def training_category(wl) -> str | None:
    """"CLOSED", "whatif" (MLPerf's numbers, outside the CLOSED models and accelerators) or None
    (iodl's own workload). By the built-in's name model_accelerator, as mlpstorage names them."""
    if wl.dataset is None:
        return None
    model, _, accelerator = wl.name.rpartition("_")
    if model in CLOSED_MODELS and accelerator in CLOSED_ACCELERATORS:
        return "CLOSED"
    return "whatif" if ("mlcommons/storage" in wl.origin or "MLPerf Storage" in wl.origin) else None


def run_category(wl, args) -> str | None:
    """A training run's category: its workload's (training_category), but INVALID when the batch or
    the compute time was changed: neither is among the parameters CLOSED or OPEN may change
    (Rules.md §3.6.2, §3.6.3), so mlpstorage's checker fails such a run."""
    category = training_category(wl)
    if category and (args.batch_size is not None or args.compute_time is not None):
        return "INVALID"
    return category


def checkpoint_category(model: str, ranks: int, full_ranks: int, writes: int, reads: int, fsync: bool,
                        ranks_per_host: list[int]) -> dict:
    """What MLPerf Storage's rules make of a checkpoint run: {"category": "CLOSED" | "OPEN" |
    "INVALID", "reasons": [...]}. Subset mode (fewer ranks than TP x PP x DP) is defined only for
    llama3-8b at 8 processes (§4.3.5): any other subset run is INVALID. CLOSED asks the table's
    process count, 10 writes and 10 reads (or 10 and 0, or 0 and 10: the two-invocation form),
    fsync, and at least 4 processes per host; OPEN may scale the processes in multiples of TP x PP."""
    reasons = []
    if model not in CLOSED_CHECKPOINT_RANKS:
        return {"category": None, "reasons": [f"{model} is not one of MLPerf Storage's checkpoint models"]}
    if ranks < full_ranks:
        if (model, ranks) != (SUBSET_MODEL, SUBSET_RANKS):
            return {"category": "INVALID", "reasons": [
                f"subset mode ({ranks} of {full_ranks} ranks) is defined only for {SUBSET_MODEL} at "
                f"{SUBSET_RANKS} processes (Rules.md 4.3.5)"]}
    category = "CLOSED"
    if ranks != CLOSED_CHECKPOINT_RANKS[model]:
        category = "OPEN"
        reasons.append(f"{ranks} processes: CLOSED runs {model} on {CLOSED_CHECKPOINT_RANKS[model]}")
    if (writes, reads) not in ((CHECKPOINTS, CHECKPOINTS), (CHECKPOINTS, 0), (0, CHECKPOINTS)):
        category = "OPEN"
        reasons.append(f"{writes} writes and {reads} reads: CLOSED writes {CHECKPOINTS} then reads {CHECKPOINTS}")
    if not fsync:
        return {"category": "INVALID", "reasons": reasons + ["every checkpoint write is fsync'd (Rules.md 4.3.2)"]}
    if ranks_per_host and min(ranks_per_host) < MIN_RANKS_PER_HOST:
        category = "OPEN" if category == "CLOSED" else category
        reasons.append(f"{min(ranks_per_host)} process(es) on a host: CLOSED asks at least {MIN_RANKS_PER_HOST}")
    return {"category": category, "reasons": reasons}


@record(frozen=True)
class DataSize:
    """The smallest dataset the dataset-size rule accepts, and what decided it."""
    accelerators: int
    hosts: int
    host_memory_bytes: int
    files_by_steps: int          # files that hold 500 x batch x accelerators samples
    files_by_memory: int         # whole files in 5 x hosts x host memory bytes
    files: int                   # the larger: what the rule asks
    bytes: int                   # files x samples per file x record length (mlpstorage's total_disk_bytes)
    dictated_by: str             # "steps" or "memory"

    def to_dict(self) -> dict:
        return asdict(self)


def data_size(wl, accelerators: int, hosts: int, host_memory_bytes: int) -> DataSize:
    """The dataset MLPerf Storage asks for this workload, run on `accelerators` ranks over `hosts`
    client hosts of `host_memory_bytes` each, exactly as mlpstorage computes it (its submission
    checker fails a run whose count differs): both minimums in whole files, rounded down
    (calculate_training_data_size: dataset_size_bytes // file_size_bytes and
    min_samples // num_samples_per_file), the larger one."""
    d = wl.dataset
    file_bytes = d.samples_per_file * d.sample_size
    by_steps = MIN_STEPS * wl.train.batch_size * accelerators // d.samples_per_file
    by_memory = RAM_MULTIPLE * hosts * host_memory_bytes // file_bytes
    files = max(by_steps, by_memory)
    return DataSize(accelerators=accelerators, hosts=hosts, host_memory_bytes=host_memory_bytes,
                    files_by_steps=by_steps, files_by_memory=by_memory, files=files, bytes=files * file_bytes,
                    dictated_by="memory" if by_memory > by_steps else "steps")


def summary(per_rank: list, au_threshold: float) -> dict | None:
    """MLPerf Storage's figures of a step run, beside iodl's own (docs/numbers.md, "MLPerf's view").

    Per rank and epoch, as the rules define them: AU = total compute time / total running time,
    leaving out the first step (its time and its compute); samples/s = the epoch's samples / its
    whole time, first step included. AU is then the mean over ranks, samples/s the sum over
    ranks, each a mean over epochs; pass: AU >= the workload's threshold. per_rank: each rank's
    step records (training.STEP_FIELDS)."""
    col = {name: i for i, name in enumerate(STEP_FIELDS)}
    au: dict[int, list[float]] = {}
    rate: dict[int, list[float]] = {}
    for rows in per_rank:
        if not len(rows):
            continue
        for epoch in np.unique(rows[:, col["epoch"]]).tolist():
            steps = rows[rows[:, col["epoch"]] == epoch]
            # DLIO ends its measured block before a checkpoint and starts a new one after it:
            # the time the epoch's steps spent checkpointing is in neither figure
            saving = steps[:, col["checkpoint"]]
            whole = steps[-1, col["t_end"]] - steps[0, col["t_start"]] - saving.sum()
            rest = steps[-1, col["t_end"]] - steps[0, col["t_end"]] - saving[1:].sum()   # all but the first step
            if rest > 0:
                au.setdefault(epoch, []).append(float(steps[1:, col["compute"]].sum() / rest))
            if whole > 0:
                rate.setdefault(epoch, []).append(float(steps[:, col["samples"]].sum() / whole))
    if not au:
        return None   # no epoch of any rank had two steps: MLPerf's AU is not defined
    mean_au = float(np.mean([np.mean(v) for v in au.values()]))
    return {"au": mean_au, "samples_per_s": float(np.mean([np.sum(v) for v in rate.values()])),
            "au_threshold": au_threshold, "pass": mean_au >= au_threshold, "epochs": len(au)}


def fmean(values) -> float:
    """statistics.fmean, the same float (the exact sum, divided by the count): statistics imports
    random, fractions and decimal, ~2.5 ms of the start-up of every rank (the step patterns import
    this module), ~0.09 s at 72 ranks on 2 cores."""
    values = list(values)
    return math.fsum(values) / len(values)


def aggregate_runs(results: list[dict], dlio: list[dict | None]) -> dict:
    """Runs back to back, put together as MLPerf Storage does (mlpstorage's reportgen,
    _aggregate_training): the first WARMUP_RUNS left out; of the others, the mean of each run's
    mean AU and samples/s (DLIO's figures) and the read bandwidth: the mean of the runs'
    train_io_mean_MB_per_second (MiB/s) / 1024, in GiB/s. Every measured run must meet its AU; a
    CLOSED result has RUNS runs. iodl's own bandwidth is averaged beside it (MB/s)."""

    runs = []
    for i, (res, s) in enumerate(zip(results, dlio)):
        m = (s or {}).get("metric") or {}
        runs.append({"run": i + 1, "warmup": i < WARMUP_RUNS, "bandwidth_MBps": res["total"]["bandwidth_MBps"],
                     "au": (res.get("train") or {}).get("au"), "partial": res["partial"],
                     "dlio_au_percentage": m.get("train_au_mean_percentage"),
                     "dlio_samples_per_s": m.get("train_throughput_mean_samples_per_second"),
                     "dlio_io_MiBps": m.get("train_io_mean_MB_per_second"),
                     "dlio_au_meet_expectation": m.get("train_au_meet_expectation")})
    measured = [r for r in runs if not r["warmup"]]
    measured_dlio = [s for s, r in zip(dlio, runs) if not r["warmup"] and s and s.get("metric")]
    out = {"runs": runs, "warmup_runs": WARMUP_RUNS, "measured_runs": len(measured),
           "bandwidth_MBps": fmean(r["bandwidth_MBps"] for r in measured) if measured else None,
           "complete": len(runs) == RUNS and not any(r["partial"] for r in runs)}
    if measured and len(measured_dlio) == len(measured):
        ms = [s["metric"] for s in measured_dlio]
        out.update(mean_of_au_percentage=fmean(fmean(m["train_au_percentage"]) for m in ms),
                   mean_of_throughput_samples_per_second=fmean(
                       fmean(m["train_throughput_samples_per_second"]) for m in ms),
                   read_bw_GiBps=fmean(m["train_io_mean_MB_per_second"] for m in ms) / 1024,
                   every_run_meets_au=all(m["train_au_meet_expectation"] == "success" for m in ms))
    parts = [f"{len(runs)} run(s), the first {WARMUP_RUNS} a warm-up"]
    if out["bandwidth_MBps"] is not None:
        parts.append(f"mean of the other {len(measured)}: {out['bandwidth_MBps']:,.1f} MB/s (iodl)")
    if "read_bw_GiBps" in out:
        parts.append(f"MLPerf read B/W {out['read_bw_GiBps']:,.3f} GiB/s, AU {out['mean_of_au_percentage']:.2f} % "
                     f"({'every run meets' if out['every_run_meets_au'] else 'not every run meets'} its AU)")
    if not out["complete"]:
        parts.append(f"MLPerf's procedure is {RUNS} complete runs")
    out["summary"] = "; ".join(parts)
    return out


def checkpoint_view(result: dict, writes: int, reads: int, read_gap_s: float | None,
                    host_memory_bytes: int = 0) -> dict:
    """The mlperf block of an `iodl checkpoint` result: its category (checkpoint_category); for a
    run that writes and then reads back buffered, whether the page cache had to be cleared between
    (a node's checkpoint share under CACHE_MULTIPLE x its memory, §4.3.1) and was; for a read-only
    invocation, the gap from the last checkpoint written to its start (at most READ_GAP_S, §4.7.1).
    host_memory_bytes: a node's memory (rank 0's, taken as every node's)."""
    blocks = [b for b in (result["checkpoint"].get("write"), result["checkpoint"].get("read")) if b]
    hosts = [p["host"] for p in blocks[0]["per_rank"]] if blocks else []
    view = checkpoint_category(result["model"], result["ranks"], result["full_ranks"], writes, reads,
                               result["fsync"], [hosts.count(h) for h in sorted(set(hosts))])
    write = result["checkpoint"].get("write")
    if (view["category"] in ("CLOSED", "OPEN") and write and result["checkpoint"].get("read")
            and not result["direct"] and not result["drop_caches"] and host_memory_bytes):
        per_node = max(sum(p["bytes"] for p in write["per_rank"] if p["host"] == h) for h in set(hosts))
        per_node //= max(write["rounds"], 1)
        if per_node < CACHE_MULTIPLE * host_memory_bytes:
            view["category"] = "INVALID"
            view["reasons"].append(f"a node writes {per_node / GiB:,.1f} GiB a checkpoint, under {CACHE_MULTIPLE} x its "
                                   f"{host_memory_bytes / GiB:,.1f} GiB of memory, and the page cache was not "
                                   "cleared before the reads (--drop-caches; Rules.md 4.3.1)")
    view["read_gap_s"] = read_gap_s           # null unless this run only read
    if read_gap_s is not None:
        if read_gap_s > READ_GAP_S:
            view["reasons"].append(f"the reads started {read_gap_s:,.1f} s after the last write ended: "
                                   f"MLPerf asks at most {READ_GAP_S:g} s (Rules.md 4.7.1)")
            if view["category"] in ("CLOSED", "OPEN"):
                view["category"] = "INVALID"
    return view
