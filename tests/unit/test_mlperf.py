"""MLPerf Storage's dataset-size rule (iodl/mlperf.py, iodl datasize) against the rule's arithmetic."""
import json

import pytest

from iodl.mlperf import GiB, data_size
from iodl.workload import load_workload
from tests.helpers import iodl


def test_the_rule_is_the_larger_of_500_steps_and_5x_memory_rounded_down_as_mlpstorage_does():
    """mlpstorage's calculate_training_data_size (mlcommons/storage@4234cd9b37e760b096855c452f40a37f70c18a4f
    mlpstorage/rules/utils.py): both minimums in whole files, floor-divided, the larger one; its
    submission checker fails a run whose file count differs from that, so iodl gives the same."""
    wl = load_workload("unet3d")                 # 1 sample of 146,600,628 B per file, batch 7
    spf, rec, batch = wl.dataset.samples_per_file, wl.dataset.sample_size, wl.train.batch_size
    # 8 accelerators, 1 host of 512 GiB: 500 x 7 x 8 = 28,000 samples beat 5 x 512 GiB / 146.6 MB = 18,750.4 files
    s = data_size(wl, 8, 1, 512 * GiB)
    assert s.files_by_steps == 500 * batch * 8 // spf == 28_000
    assert s.files_by_memory == 18_750 and s.files == 28_000 and s.dictated_by == "steps"
    assert s.bytes == 28_000 * spf * rec
    # 2 accelerators on 4 hosts of 2 TiB: memory decides, 5 x 8 TiB = 43,980,465,111,040 B // 146,600,628 B = 300,001 files
    s = data_size(wl, 2, 4, 2048 * GiB)
    assert s.dictated_by == "memory" and s.files == 5 * 4 * 2048 * GiB // rec == 300_001
    assert s.files * rec <= 5 * 4 * 2048 * GiB < (s.files + 1) * rec
    # resnet50 (1,251 samples of 114,660 B a file, batch 400) on 72 accelerators, 9 hosts of 256 GiB:
    # samples 500 x 400 x 72 = 14,400,000 // 1,251 = 11,510 files; memory 5 x 9 x 256 GiB = 12,369,505,812,480 B // 143,439,660 B = 86,234
    r = load_workload("resnet50_h100")
    s = data_size(r, 72, 9, 256 * GiB)
    assert (s.files_by_steps, s.files_by_memory, s.files) == (11_510, 86_234, 86_234)
    assert s.bytes == 86_234 * 1251 * 114_660


def test_datasize_command_prints_the_figures_and_the_generate_command():
    proc = iodl("datasize", "--workload", "resnet50", "--accelerators", "72", "--hosts", "9", "--host-memory-gb", "256",
                "--root", "/data/r50", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    wl = load_workload("resnet50")
    want = data_size(wl, 72, 9, 256 * GiB)
    assert out["files"] == want.files and out["dictated_by"] == want.dictated_by
    assert out["generate"] == f"iodl generate --workload resnet50 --files {want.files} --root /data/r50"
    assert out["mlperf_category"] is None                          # iodl's own resnet50
    # retinanet_mi355 (CLOSED), 16 accelerators on 2 hosts of 512 GiB: 500 x 32 x 16 = 256,000 files
    # by steps; 5 x 2 x 512 GiB = 5,497,558,138,880 B // 322,957 B = 17,022,569 files by memory
    proc = iodl("datasize", "--workload", "retinanet_mi355", "--accelerators", "16", "--hosts", "2",
                "--host-memory-gb", "512", "--json")
    out = json.loads(proc.stdout)
    assert out["mlperf_category"] == "CLOSED" and out["files_by_steps"] == 256_000
    assert out["files"] == out["files_by_memory"] == 17_022_569 and out["bytes"] == 17_022_569 * 322_957


@pytest.mark.parametrize("args", [["--accelerators", "0"], ["--accelerators", "2", "--hosts", "-1"],
                                  ["--accelerators", "2", "--host-memory-gb", "nan"]])
def test_bad_numbers_are_one_line(args):
    proc = iodl("datasize", "--workload", "tiny", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_read_warns_when_the_dataset_is_below_the_rule(tmp_path):
    root = tmp_path / "ds"
    assert iodl("generate", "--workload", "tiny", "--root", str(root), "--quiet").returncode == 0
    proc = iodl("read", "--root", str(root), "--steps", "2", "--engine", "psync")
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert f"{root} holds 16 files; MLPerf Storage's rules ask at least" in flat


def test_mlperf_au_and_samples_per_s_from_known_steps():
    """Two ranks, one epoch of 3 steps each: rank 0 steps of 1.0 s with 0.8 s compute, rank 1 a
    slow first step (3 s) then 1.0 s steps with 0.5 s compute. MLPerf: AU per rank = compute /
    time without the first step: 0.8 and 0.5, mean 0.65; samples/s = 3 x 10 samples / the epoch's
    whole time: 30/3 + 30/5 = 16."""
    import numpy as np

    from iodl.mlperf import summary
    from iodl.training import STEP_FIELDS

    def rank(first, step, compute, saving=0.0):
        rows, t = [], 0.0
        for i, length in enumerate([first, step, step + saving]):
            rows.append({"t_start": t, "t_end": t + length, "data_wait": length - compute, "compute": compute,
                         "barrier": 0.0, "bytes": 100, "samples": 10, "epoch": 0,
                         "checkpoint": saving if i == 2 else 0.0})
            t += length
        return np.array([[r.get(f, 0.0) for f in STEP_FIELDS] for r in rows])

    got = summary([rank(1.0, 1.0, 0.8), rank(3.0, 1.0, 0.5)], 0.7)
    assert got["au"] == pytest.approx(0.65) and got["samples_per_s"] == pytest.approx(16.0)
    assert got["pass"] is False and got["epochs"] == 1
    assert summary([rank(1.0, 1.0, 0.8)[:1]], 0.7) is None      # one step: AU undefined
    # a checkpoint of 7 s in the last step is in neither time (DLIO ends its block before it)
    assert summary([rank(1.0, 1.0, 0.8, saving=7.0), rank(3.0, 1.0, 0.5, saving=7.0)], 0.7) == got


# MLPerf Storage's workload files (mlcommons/storage configs/dlio/workload, v2.0 and v3.0): files,
# samples per file, record bytes, stdev, batch, compute s, epochs, shuffle, read threads, AU
MLPERF = {
    "unet3d_a100": (168, 1, 146_600_628, 68_341_808, 7, 0.636, 5, "file+sample", 4, 0.90),
    "unet3d_h100": (168, 1, 146_600_628, 68_341_808, 7, 0.323, 5, "file+sample", 4, 0.90),
    "unet3d_b200": (7200, 1, 146_600_628, 68_341_808, 7, 0.162, 5, "file+sample", 4, 0.90),
    "resnet50_a100": (1024, 1251, 114_660, 0, 400, 0.435, 5, "none", 8, 0.90),
    "resnet50_h100": (1024, 1251, 114_660, 0, 400, 0.224, 5, "none", 8, 0.90),
    "cosmoflow_a100": (524_288, 1, 2_828_486, 71_311, 1, 0.00551, 5, "file+sample", 4, 0.70),
    "cosmoflow_h100": (524_288, 1, 2_828_486, 71_311, 1, 0.0035, 5, "file+sample", 4, 0.70),
    "retinanet_b200": (1_170_301, 1, 322_957, 0, 24, 0.04755, 8, "file+sample", 8, 0.85),
    # mlcommons/storage@76f45459b8a0ea67cffff896ae82af96cfcdab6c configs/dlio/workload/retinanet_mi355.yaml
    "retinanet_mi355": (1_170_301, 1, 322_957, 0, 32, 0.0634, 8, "file+sample", 8, 0.85),
    "dlrm_b200": (1024, 4_718_592, 761, 0, 16_384, 0.000375, 1, "file", 4, 0.70),
    "flux_b200": (4296, 288, 2_164_832, 0, 48, 1.35, 1, "file", 8, 0.90),
}


@pytest.mark.parametrize("name", sorted(MLPERF))
def test_mlperf_builtins_carry_the_published_numbers_and_their_origin(name):
    w = load_workload(name)
    d, t = w.dataset, w.train
    assert (d.files, d.samples_per_file, d.sample_size, d.sample_size_stdev, t.batch_size, t.compute_time_s, t.epochs,
            t.shuffle, w.read.read_threads, w.metric.au_threshold) == MLPERF[name]
    assert w.origin.startswith(("mlcommons/storage@", "MLPerf Storage v3.0")) and ".yaml" in w.origin


def test_workloads_lists_every_builtin_with_its_origin():
    proc = iodl("workloads", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {w["name"]: w for w in json.loads(proc.stdout)}
    assert set(MLPERF) <= set(listed) and "tiny" in listed
    assert all(listed[n]["origin"] for n in MLPERF)


def test_closed_training_is_unet3d_and_retinanet_on_b200_and_mi355_the_rest_whatif():
    """mlpstorage_py/config.py (mlcommons/storage@0889d5cb275e40846b178f10ae59df7d9a0eb784):
    MODELS_CLOSED = [unet3d, retinanet], ACCELERATORS_CLOSED = [b200, mi355]; Rules.md Table 3:
    h100 and a100 are "whatif only". iodl's own workloads are neither."""
    proc = iodl("workloads", "--json")
    assert proc.returncode == 0, proc.stderr
    cat = {w["name"]: w["mlperf_category"] for w in json.loads(proc.stdout)}
    assert {n for n, c in cat.items() if c == "CLOSED" and not n.startswith("llama3")} == {
        "unet3d_b200", "retinanet_b200", "retinanet_mi355"}
    assert {n for n in MLPERF if cat[n] == "whatif"} == set(MLPERF) - {"unet3d_b200", "retinanet_b200", "retinanet_mi355"}
    assert cat["tiny"] is None and cat["resnet50-infer"] is None
    assert all(cat[f"llama3-{m}"] == "CLOSED" for m in ("8b", "70b", "405b", "1t"))
    table = iodl("workloads").stdout
    assert "CLOSED training is unet3d and retinanet on b200 and mi355" in " ".join(table.split())


@pytest.mark.parametrize("model,ranks,full,writes,reads,fsync,per_host,want", [
    ("llama3-8b", 8, 8, 10, 10, True, [8], "CLOSED"),
    ("llama3-8b", 8, 8, 10, 0, True, [4, 4], "CLOSED"),        # the write invocation of a two-invocation run
    ("llama3-8b", 8, 8, 0, 10, True, [8], "CLOSED"),           # ...and its read invocation
    ("llama3-8b", 8, 8, 5, 5, True, [8], "OPEN"),              # not 10 and 10
    ("llama3-8b", 8, 8, 10, 10, True, [2, 2, 2, 2], "OPEN"),   # fewer than 4 processes on a host
    ("llama3-8b", 4, 8, 10, 10, True, [4], "INVALID"),         # subset below 8 processes
    ("llama3-70b", 8, 64, 10, 10, True, [8], "INVALID"),       # subset mode is 8B's only (Rules.md 4.3.5)
    ("llama3-405b", 256, 512, 10, 10, True, [8] * 32, "INVALID"),
    ("llama3-70b", 64, 64, 10, 10, True, [8] * 8, "CLOSED"),
    ("llama3-70b", 128, 64, 10, 10, True, [8] * 16, "OPEN"),   # OPEN scales processes
    ("llama3-70b", 64, 64, 10, 10, False, [8] * 8, "INVALID"),  # no fsync
    ("my-model", 8, 8, 10, 10, True, [8], None),
])
def test_checkpoint_category_follows_the_rules(model, ranks, full, writes, reads, fsync, per_host, want):
    from iodl.mlperf import checkpoint_category

    got = checkpoint_category(model, ranks, full, writes, reads, fsync, per_host)
    assert got["category"] == want, got
    assert bool(got["reasons"]) == (want != "CLOSED")


def test_a_read_only_checkpoint_run_more_than_30_s_after_the_writes_is_not_closed():
    from iodl.mlperf import checkpoint_view

    per_rank = [{"host": f"h{r // 8}", "rank": r} for r in range(8)]
    result = {"model": "llama3-8b", "ranks": 8, "full_ranks": 8, "fsync": True,
              "checkpoint": {"read": {"per_rank": per_rank}}}
    assert checkpoint_view(result, 0, 10, 29.0)["category"] == "CLOSED"
    late = checkpoint_view(result, 0, 10, 31.0)
    assert late["category"] == "INVALID" and late["read_gap_s"] == 31.0 and "4.7.1" in late["reasons"][0]


def test_a_run_that_changes_batch_or_compute_is_not_closed():
    """batch_size and computation_time are in neither the CLOSED nor the OPEN table of tunables
    (Rules.md 3.6.2, 3.6.3): a run of a CLOSED workload that changes either is INVALID."""
    from types import SimpleNamespace

    from iodl.mlperf import run_category

    wl = load_workload("retinanet_mi355")
    as_is = SimpleNamespace(batch_size=None, compute_time=None)
    assert run_category(wl, as_is) == "CLOSED"
    assert run_category(wl, SimpleNamespace(batch_size=8, compute_time=None)) == "INVALID"
    assert run_category(wl, SimpleNamespace(batch_size=None, compute_time=0.01)) == "INVALID"
    assert run_category(load_workload("unet3d_h100"), as_is) == "whatif"
    assert run_category(load_workload("tiny"), SimpleNamespace(batch_size=8, compute_time=0.01)) is None


@pytest.mark.parametrize("direct,drop,per_rank_gib,want", [
    (False, False, 1, "INVALID"),      # 8 GiB a node, 64 GiB of memory, buffered, not cleared
    (False, True, 1, "CLOSED"),        # cleared (--drop-caches)
    (True, False, 1, "CLOSED"),        # O_DIRECT: nothing cached to clear
    (False, False, 25, "CLOSED"),      # 200 GiB a node: over 3 x 64 GiB
])
def test_a_small_buffered_checkpoint_read_back_uncleared_is_not_closed(direct, drop, per_rank_gib, want):
    """Rules.md 4.3.1: a node's checkpoint data under 3x its memory needs the cache cleared between
    the writes and the reads."""
    from iodl.mlperf import checkpoint_view

    per_rank = [{"host": "h0", "rank": r, "bytes": 10 * per_rank_gib * GiB} for r in range(8)]
    result = {"model": "llama3-8b", "ranks": 8, "full_ranks": 8, "fsync": True, "direct": direct, "drop_caches": drop,
              "checkpoint": {"write": {"per_rank": per_rank, "rounds": 10}, "read": {"per_rank": per_rank}}}
    view = checkpoint_view(result, 10, 10, None, 64 * GiB)
    assert view["category"] == want, view
