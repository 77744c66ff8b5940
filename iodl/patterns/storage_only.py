"""storage-only: every rank reads whole shards in its own random order, as fast as the storage
serves them, for a window fixed in advance: [ramp, ramp + duration] after the start barrier."""
from __future__ import annotations

import dataclasses

from .. import plan
from ..data.tables import int_rows
from ..errors import UsageError
from ..sizing import workload_demand_MBps
from .base import Pattern, Run, duration_default
from .shards import read_shards


class StorageOnly(Pattern):
    name = "storage-only"

    def configure(self, spec):
        return dataclasses.replace(duration_default(spec), fixed_window=True)

    def run(self, run: Run) -> bool:
        sizes = int_rows(run.sizes)
        if not len(sizes) or not sizes.sum():
            raise UsageError("the dataset holds no bytes to read")
        spec, rank = run.spec, run.comm.rank
        return read_shards(run, lambda epoch: plan.random_order(len(sizes), spec.seed, rank, epoch),
                           (spec.ramp_s, spec.duration_s))

    def demand(self, spec, parts, n_mounts):
        # the workload's accelerator (its batch and compute time); no steps: the mount is the limit
        return workload_demand_MBps(spec.workload), [None] * n_mounts


STORAGE_ONLY = StorageOnly()
