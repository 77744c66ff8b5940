"""MLPerf Storage's rules where iodl applies them (the training rules of mlcommons/storage,
Submission_guidelines.md: the dataset-size rule; mlpstorage/rules.py computes the same)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

MIN_STEPS = 500          # the dataset holds at least 500 steps of every accelerator's batch...
RAM_MULTIPLE = 5         # ...and at least 5x the memory of all client hosts together
GiB = 1 << 30


@dataclass(frozen=True)
class DataSize:
    accelerators: int
    hosts: int
    host_memory_bytes: int
    files_by_steps: int          # files that hold 500 x batch x accelerators samples
    files_by_memory: int         # files that hold 5 x hosts x host memory bytes
    files: int                   # the larger: what the rule asks
    bytes: int                   # files x samples per file x record length
    dictated_by: str             # "steps" or "memory"

    def to_dict(self) -> dict:
        return asdict(self)


def data_size(wl, accelerators: int, hosts: int, host_memory_bytes: int) -> DataSize:
    """The smallest dataset MLPerf Storage accepts for this workload, run on `accelerators` ranks
    over `hosts` client hosts of `host_memory_bytes` each. Rounded up to whole files so that both
    minimums hold (mlpstorage rounds down, which can leave the memory rule a file short)."""
    d = wl.dataset
    file_bytes = d.samples_per_file * d.sample_size
    by_steps = -(-MIN_STEPS * wl.train.batch_size * accelerators // d.samples_per_file)
    by_memory = -(-RAM_MULTIPLE * hosts * host_memory_bytes // file_bytes)
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
    import numpy as np

    from .training import STEP_FIELDS

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
