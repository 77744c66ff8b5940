"""train-sync and infer-async: each rank is an accelerator taking batches (the step loop and its
sample streams: iodl/training.py). train-sync's ranks meet at a barrier after every step and are
measured over their steps' span; infer-async's ranks are not in step and are measured over a
window fixed in advance."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import UsageError
from ..reduce import emulator_cpu, set_window, steps_run_window
from ..mlperf import summary
from ..sizing import demand_MBps
from ..training import (STEP_FIELDS, counted_steps, data_wait_share, planned_steps, run_steps, steps_window,
                        summarize_steps)
from .base import Pattern, Run, duration_default


class Steps(Pattern):
    accelerators = True

    def run(self, run: Run) -> bool:
        run.part = np.empty((0, len(STEP_FIELDS)))   # no step yet: what a run stopped before its first hands over
        run.part, partial = run_steps(run)
        return partial

    def summarize(self, spec, parts, reduced, partial):
        steps = [records if records is not None else np.empty((0, len(STEP_FIELDS))) for _m, records in parts]
        window = steps_run_window(spec.fixed_window, partial, spec.ramp_s, spec.duration_s, reduced["span"],
                                  steps_window(steps))
        set_window(reduced, window[1] - window[0])
        au_threshold = spec.workload.metric.au_threshold
        train = summarize_steps(steps, spec.pattern, au_threshold, window)
        train["epochs_checked"], train["epochs_wrong"] = reduced["epochs_checked"], reduced["epochs_wrong"]
        train["shuffle"] = spec.shuffle if spec.sampling == "epoch" else "random shards"
        # the emulator's own CPU, per rank and over all ranks (parts and per_rank: both in rank order)
        ranks = reduced["per_rank"]
        train["emulator"] = emulator_cpu(steps, counted_steps(steps)[0], [p["rank"] for p in ranks],
                                         [p["host"] for p in ranks], [p["cores"] for p in ranks], train["au"],
                                         au_threshold,
                                         # no storage at all: null reads, no delay, no in-training checkpoints
                                         spec.engine == "null" and not spec.delay_ns and not spec.checkpoint_roots)
        train["mlperf"] = summary(steps, au_threshold)
        if train["mlperf"] is not None:
            train["mlperf"]["category"] = spec.mlperf_category
        return {"train": train}

    def demand(self, spec, parts, n_mounts):
        # the workload as run: --batch-size/--compute-time change what an accelerator asks for
        shares = [data_wait_share([r for mount, r in parts if mount == m and r is not None]) for m in range(n_mounts)]
        return demand_MBps(spec.batch_size, spec.workload.dataset.sample_size, spec.compute_time_s), shares

    def planned_steps(self, spec, total_samples, ranks_in_mount):
        return planned_steps(spec, total_samples, ranks_in_mount)[0]


class TrainSync(Steps):
    name = "train-sync"


class InferAsync(Steps):
    name = "infer-async"

    def configure(self, spec):
        if spec.steps:
            raise UsageError("--steps: infer-async runs for --duration (its ranks are not in step: the window "
                             "they are measured over together is fixed in advance)")
        spec = duration_default(spec)
        return dataclasses.replace(spec, fixed_window=spec.duration_s > 0)


TRAIN_SYNC, INFER_ASYNC = TrainSync(), InferAsync()
