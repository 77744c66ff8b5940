"""Sizing: what one accelerator asks of the storage, and how many a measured storage can feed.

An accelerator at full utilisation consumes one batch per compute time, so its demand is
batch_size x mean sample size / compute_time_s (MB/s, MB = 10^6 bytes). A storage that delivered
S MB/s from the device feeds floor(S / demand) of them — a true count only when the run was
storage-bound (ranks waited for data); otherwise the storage had more to give and the count is a
lower bound.
"""
from __future__ import annotations

import math

MB = 1e6


def demand_MBps(batch_size: int, sample_size: float, compute_time_s: float) -> float:
    """MB/s one accelerator reads at 100% utilisation (inf when compute takes no time)."""
    if compute_time_s <= 0:
        return math.inf
    return batch_size * sample_size / compute_time_s / MB


def workload_demand_MBps(wl) -> float:
    """demand_MBps for a Workload (iodl.workload) or its to_dict() form."""
    if isinstance(wl, dict):
        return demand_MBps(wl["train"]["batch_size"], wl["dataset"]["sample_size"], wl["train"]["compute_time_s"])
    return demand_MBps(wl.train.batch_size, wl.dataset.sample_size, wl.train.compute_time_s)


def storage_MBps(block: dict) -> float | None:
    """What the storage itself delivered in a result block: the read bandwidth under O_DIRECT (no
    storage_bandwidth_MBps key), None where the cache's share could not be measured."""
    return block["storage_bandwidth_MBps"] if "storage_bandwidth_MBps" in block else block["bandwidth_MBps"]


def accelerators_fed(storage_MBps: float, demand: float) -> int:
    """How many accelerators S MB/s keeps at full utilisation."""
    if not demand or math.isinf(demand) or storage_MBps <= 0:
        return 0
    # a hair of tolerance: 4 x 10 MB/s measured as 39.9999 still feeds 4
    return int(math.floor(storage_MBps / demand + 1e-9))


BOUND_SHARE = 0.02   # ranks that wait for data longer than this share of a step are held up by storage


def sizing_block(result: dict, demand: float, wait_shares: list[float | None]) -> dict:
    """The result's `sizing` block: per mount, the storage MB/s it delivered, what its ranks ask at
    full utilisation and how many accelerators that storage feeds; the same for the run.

    wait_shares: per mount, the share of step time its ranks waited for data (None: no steps, as
    storage-only, where the mount is the limit by construction). A mount whose ranks waited is
    storage-bound and its count is a measurement; otherwise the storage had more to give (its
    ranks waited for compute or for other mounts at the barrier) and the count is a lower bound.
    Each rank reads one mount, so the run feeds the sum of its mounts' counts and asks the sum
    of their demands.
    """
    mounts = []
    for m, share in zip(result["mounts"], wait_shares):
        storage = storage_MBps(m)
        mounts.append({"path": m["path"], "storage_MBps": storage, "demand_MBps": len(m["ranks"]) * demand,
                       "accelerators_fed": None if storage is None else accelerators_fed(storage, demand),
                       "storage_bound": share is None or share > BOUND_SHARE})
    fed = [m["accelerators_fed"] for m in mounts]
    return {"demand_MBps_per_accelerator": demand, "demand_MBps": sum(m["demand_MBps"] for m in mounts),
            "accelerators_fed": None if None in fed else sum(fed),
            "storage_bound": all(m["storage_bound"] for m in mounts), "mounts": mounts}


def meets(au: float, threshold: float) -> bool:
    """AU at the threshold or above: the rule of "accelerators supported" wherever it is applied."""
    return au >= threshold - 1e-12  # an AU printed as exactly 90.0% counts as 90%
