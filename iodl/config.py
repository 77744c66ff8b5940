"""What a rank runs: the read options every pattern takes, and the step patterns' additions."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(kw_only=True)
class ReadConfig:
    pattern: str
    engine: str
    direct: bool
    iodepth: int
    block_size: int
    seed: int
    duration_s: float = 0.0      # the measured seconds (0: no limit: the pattern's own end)
    ramp_s: float = 0.0          # fixed-window patterns: unmeasured seconds before the window
    delay_ns: int = 0            # null engine: latency of each request
    engine_extra: dict = field(default_factory=dict)   # e.g. the null engine's shared device


@dataclass(kw_only=True)
class StepConfig(ReadConfig):
    """train-sync and infer-async: each rank is an accelerator taking batches."""
    batch_size: int
    compute_time_s: float
    prefetch: int
    sampling: str = "epoch"      # epoch: each epoch's shards split over ranks | random
    shuffle: str = "file"        # none | file | sample | file+sample (workload.SHUFFLES)
    shuffle_size: int = 1024     # samples in the sample-shuffle buffer (tf.data's and DLIO's shuffle_size)
    epochs: int = 1
    steps: int = 0               # total steps; 0: as many as the epochs need
    sample_access: bool = False  # samples read one by one at their offsets (indexed_binary: training.SampleAccessStream)
    read_threads: int = 0        # threads opening shards ahead of the reader (0: the reader opens them)
    total_steps: int = 0         # most steps each epoch runs (0: as many as its data makes; DLIO's total_training_steps)
    records: bool = False        # tfrecord read record by record: header, data, footer (TFRecordDataset without a buffer)
    npz_load: bool = False       # npz shards read as np.load reads them (plan.npz_load_plan)
    # parquet: (rows per row group, [(n, 2) [offset, length] reads of each row group]) (training.RowGroupStream)
    row_groups: tuple | None = None

    @property
    def fixed_window(self) -> bool:
        """infer-async's ranks are not in step: the measured window is fixed in advance,
        [ramp, ramp + duration] after the start barrier, and every rank reads through it."""
        return self.pattern == "infer-async" and self.duration_s > 0
