"""What one rank writes of a checkpoint and what it counts doing so: shared by the pattern's
files (iodl/patterns/checkpoint.py) and buckets (iodl/s3checkpoint.py), which the pattern loads
only for s3:// roots."""
from dataclasses import field

import numpy as np

from .. import histogram
from ..metrics import RankResult
from ..records import record


@record
class RankShare:
    """The files of one rank's share of a checkpoint: names (in the checkpoint's directory) and sizes."""
    names: list[str]
    sizes: list[int]

    @property
    def bytes(self) -> int:
        return int(sum(self.sizes))


@record
class OpCounters(RankResult):
    """A rank's counters of one operation (write or read) over all rounds: RankResult's, plus
    the fsyncs and each round's time and bytes."""
    fsync_hist: np.ndarray = field(default_factory=histogram.empty)
    fsyncs: int = 0
    fsync_ns: int = 0
    round_s: list = field(default_factory=list)
    round_bytes: list = field(default_factory=list)

    def engine_args(self, t0_ns: int) -> dict:
        return dict(super().engine_args(t0_ns), fsync_hist=self.fsync_hist)

    def add(self, stats: dict, t0_ns: int) -> None:
        super().add(stats, t0_ns)
        self.fsyncs += stats.get("fsyncs", 0)
        self.fsync_ns += stats.get("fsync_ns", 0)
