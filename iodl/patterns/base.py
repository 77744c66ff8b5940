"""What a pattern is: the protocol `iodl read` drives (iodl/runner.py), and one rank's part of a run.

A pattern is an object with a name and three duties: configure the resolved run (its defaults and
what it refuses), run one rank's part through the cursor into that rank's RankResult, and, on rank
0, summarize what the ranks handed over into the result's own blocks. A subclass of Pattern gets
the defaults of the optional hooks (sizing demand, planned steps for the progress line).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from ..metrics import RankResult
from ..records import record

if TYPE_CHECKING:
    from ..runspec import RunSpec

# storage-only and infer-async when no --duration and no --steps bound them
DEFAULT_DURATION_S = 10.0


@record
class Run:
    """One rank's part of a run: what every pattern is given."""
    comm: object
    spec: "RunSpec"
    paths: list[str] | None      # the mount's shards (None: the null engine without a dataset)
    sizes: np.ndarray            # or a dataset's TableRows (rows read when looked up)
    sample_ends: Callable | None = None   # shard -> its samples' end offsets (step patterns)
    batch_ends: Callable | None = None    # shards -> theirs at once (Dataset.batch_ends; None: shard by shard)
    mount: int = 0
    n_mounts: int = 1
    host: str = ""
    result: RankResult | None = None   # where to count (it may carry a series and live counters); None: a new one
    stop: Callable[[], bool] = lambda: False   # True once the user asked to stop
    on_epoch: Callable | None = None   # called between epochs (step patterns)
    after_step: Callable | None = None # train-sync's in-training checkpoint (training.run_steps)
    total_samples: int | None = None   # samples of the mount's shards (None: counted from sample_ends)
    # what this rank hands the pattern's summarize on rank 0 (step records, shards checked): set by
    # the pattern's run as early as it is known, so that a run stopped anywhere still hands it over
    part: object = None

    def __post_init__(self):
        if self.result is None:
            self.result = RankResult(rank=self.comm.rank, host=self.host, mount=self.mount)


class Pattern(Protocol):
    """A read pattern as `iodl read` drives it. A write pattern (iodl/patterns/checkpoint.py) keeps
    the three duties, but its spec is its own and its command drives it: it opens no dataset."""
    name: str
    # each rank emulates an accelerator taking batches (steps, AU): the null engine may run it
    # without a dataset, and MLPerf's dataset-size rule and DLIO's output files apply to it
    accelerators: bool = False

    def configure(self, spec: "RunSpec") -> "RunSpec":
        """The run as this pattern runs it (its defaults filled in); UsageError for what it cannot run."""
        return spec

    def run(self, run: Run) -> bool:
        """One rank's part; True when it was stopped before its end (partial)."""
        ...

    def summarize(self, spec: "RunSpec", parts: list[tuple[int, object]], reduced: dict, partial: bool) -> dict:
        """Rank 0: the result's blocks of this pattern from every rank's (mount, run.part) and the
        reduced counters (which it may take over another window)."""
        return {}

    def demand(self, spec: "RunSpec", parts: list[tuple[int, object]], n_mounts: int):
        """(MB/s one accelerator asks for, per mount the share of step time spent waiting for data
        or None) for the sizing block; None: no sizing."""
        return None

    def planned_steps(self, spec: "RunSpec", total_samples: int, ranks_in_mount: int) -> int:
        """Steps each rank will run (0: unknown, or none): the progress line's end."""
        return 0


def duration_default(spec: "RunSpec") -> "RunSpec":
    """A pattern measured over a duration runs DEFAULT_DURATION_S unless --duration or --steps bounds it."""
    if spec.duration_s or spec.steps:
        return spec
    return dataclasses.replace(spec, duration_s=DEFAULT_DURATION_S)
