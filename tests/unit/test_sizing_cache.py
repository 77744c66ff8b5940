"""Sizing and cache-accounting arithmetic: the studies' anchors, and the per-node bookkeeping."""
import math

import numpy as np
import pytest

from iodl import cache, sizing, workload
from iodl.training import STEP_FIELDS, data_wait_share


@pytest.mark.parametrize("name, quoted, rel", [
    ("resnet50", 90.0, 0.10),            # "~90 MB/s per GPU" (ResNet-50 training, small images)
    ("resnet50-infer", 160.0, 0.02),     # "~160 MB/s" (inference)
    ("inception-v4-large", 300.0, 0.02), # "~300 MB/s" (Inception-v4, large images)
])
def test_builtin_workload_demand_matches_the_studies(name, quoted, rel):
    assert sizing.workload_demand_MBps(workload.load_workload(name)) == pytest.approx(quoted, rel=rel)


def test_demand_is_batch_times_sample_over_compute():
    assert sizing.demand_MBps(256, 114_660, 0.36) == pytest.approx(256 * 114_660 / 0.36 / 1e6)
    assert math.isinf(sizing.demand_MBps(32, 65536, 0.0))
    wl = workload.load_workload("tiny")
    assert sizing.workload_demand_MBps(wl.to_dict()) == sizing.workload_demand_MBps(wl)


def test_accelerators_fed_is_the_floor():
    assert sizing.accelerators_fed(90.0, 41.943) == 2
    assert sizing.accelerators_fed(4 * 10.0, 10.0) == 4          # exactly enough still feeds it
    assert sizing.accelerators_fed(39.99, 10.0) == 3
    assert sizing.accelerators_fed(0.0, 10.0) == 0
    assert sizing.accelerators_fed(100.0, math.inf) == 0


def test_sizing_block_marks_storage_bound_mounts_per_mount():
    result = {"mounts": [{"path": "a", "ranks": [0, 3], "bandwidth_MBps": 50.0, "storage_bandwidth_MBps": 40.0},
                         {"path": "b", "ranks": [1], "bandwidth_MBps": 50.0, "storage_bandwidth_MBps": 30.0},
                         {"path": "c", "ranks": [2], "bandwidth_MBps": 20.0}]}
    block = sizing.sizing_block(result, 10.0, [0.3, 0.001, None])
    assert [m["accelerators_fed"] for m in block["mounts"]] == [4, 3, 2]
    assert [m["storage_bound"] for m in block["mounts"]] == [True, False, True]
    # what each mount's ranks ask at full utilisation, and the run: each rank reads one mount
    assert [m["demand_MBps"] for m in block["mounts"]] == [20.0, 10.0, 10.0]
    assert (block["demand_MBps"], block["accelerators_fed"], block["storage_bound"]) == (40.0, 9, False)
    unmeasured = dict(result["mounts"][0], storage_bandwidth_MBps=None)
    block = sizing.sizing_block({"mounts": [unmeasured]}, 10.0, [0.3])
    assert block["accelerators_fed"] is None        # a mount without a figure leaves the run's count unknown


def _steps(*rows):
    a = np.zeros((len(rows), len(STEP_FIELDS)))
    for i, (t0, t1, wait, epoch) in enumerate(rows):
        a[i, STEP_FIELDS.index("t_start")], a[i, STEP_FIELDS.index("t_end")] = t0, t1
        a[i, STEP_FIELDS.index("data_wait")], a[i, STEP_FIELDS.index("epoch")] = wait, epoch
    return a


def test_data_wait_share_leaves_out_each_epochs_first_step():
    # the first step waited 0.9 s (pipeline filling); the others 0.1 of 1 s
    a = _steps((0, 1, 0.9, 0), (1, 2, 0.1, 0), (2, 3, 0.1, 0))
    assert data_wait_share([a]) == pytest.approx(0.1)
    assert data_wait_share([]) is None


MEMINFO = """MemTotal:       24000000 kB
MemFree:        20000000 kB
MemAvailable:   22000000 kB
Cached:          1000000 kB
HugePages_Total:       0
"""


def test_meminfo_parses_kernel_format(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    info = cache.meminfo(str(path))
    assert info["MemTotal"] == 24_000_000 * 1024 and info["MemAvailable"] == 22_000_000 * 1024
    assert info["HugePages_Total"] == 0
    assert cache.meminfo(str(tmp_path / "missing")) == {}


def test_prediction_and_copies_needed():
    assert cache.predicted_hit_fraction(10, 40) == 0.25
    assert cache.predicted_hit_fraction(80, 40) == 1.0
    assert cache.predicted_hit_fraction(80, 0) is None
    # 5 x 24 GB of RAM from a 10 GB copy needs 12 copies; a dataset already big enough keeps its copies
    assert cache.copies_needed(10 * 10**9, 1, 24 * 10**9) == 12
    assert cache.copies_needed(20 * 10**9, 2, 24 * 10**9) == 12
    assert cache.copies_needed(200 * 10**9, 3, 24 * 10**9) == 3


def test_node_view_shares_one_page_cache_between_the_mounts_of_a_host():
    """Two hosts; host x reads mounts 0 and 1 (its cache holds 30 of their 60 bytes: predicted
    0.5), host y only mount 0 (cache 40 for 20 bytes: 1.0)."""
    probes = [
        {"rank": 0, "host": "x", "mount": 0, "path": "/a", "mem_total": 100, "mem_available": 30,
         "dataset_bytes": 20, "resident_bytes": 5, "copies": 1},
        {"rank": 1, "host": "x", "mount": 1, "path": "/b", "dataset_bytes": 40, "resident_bytes": 0, "copies": 2},
        {"rank": 2, "host": "y", "mount": 0, "path": "/a", "mem_total": 100, "mem_available": 40,
         "dataset_bytes": 20, "resident_bytes": 20, "copies": 1},
    ]
    per_rank = [{"rank": 0, "mount": 0, "bytes": 100, "cached_bytes": 50},
                {"rank": 1, "mount": 1, "bytes": 100, "cached_bytes": 0},
                {"rank": 2, "mount": 0, "bytes": 300, "cached_bytes": 300}]
    nodes = cache.node_view(probes, per_rank)
    x, y = nodes
    assert (x["host"], x["dataset_bytes"], x["predicted_hit_fraction"]) == ("x", 60, 0.5)
    assert (y["host"], y["dataset_bytes"], y["predicted_hit_fraction"]) == ("y", 20, 1.0)
    assert x["cache_hit_fraction"] == pytest.approx(50 / 200)
    assert [m["resident_at_start_fraction"] for m in x["mounts"]] == [0.25, 0.0]
    total, mounts = cache.cache_blocks(nodes, 2)
    # mount 0 is read by both hosts: weighted by bytes read there (100 on x, 300 on y)
    assert mounts[0]["predicted_hit_fraction"] == pytest.approx((100 * 0.5 + 300 * 1.0) / 400)
    assert mounts[0]["page_cache_bytes"] == 70 and mounts[0]["dataset_bytes"] == 20
    assert total["dataset_bytes"] == 60
    # 60 bytes < 5 x 100 bytes of RAM on x: warned, with the copies that fix it
    warnings = cache.small_dataset_warnings(nodes)
    assert len(warnings) == 2 and f"--copies {cache.copies_needed(60, 2, 100)}" in warnings[0]
