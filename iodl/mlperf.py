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
