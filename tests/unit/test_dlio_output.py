"""DLIO's output files written from iodl runs (iodl/dlio_output.py): the figures by DLIO's own
definitions (mlcommons/DLIO_local_changes@f6796ed281e39ccc83a450e2b1f21b9c909d8fd0
dlio_benchmark/utils/statscounter.py), from known steps, and derived from the same run's iodl
result; the run directory in mlpstorage's layout; --runs N and MLPerf's aggregate."""
import glob
import importlib.util
import json
import os
from datetime import datetime

import numpy as np
import pytest
import yaml

from iodl import dlio_output
from iodl.training import STEP_FIELDS
from iodl.workload import load_workload
from tests.conftest import require_or_skip
from tests.helpers import iodl, load_json, mpiexec

MiB = 1 << 20
UNET3D_SMALL = """\
[workload]
name = "unet3d_b200"
pattern = "train-sync"

[dataset]
format = "npz"
files = 10
samples_per_file = 1
sample_size = "1MiB"
sample_size_stdev = "0B"

[train]
batch_size = 2
compute_time_s = 0.02
epochs = 2

[read]
block_size = "1MiB"
"""


# the keys the fork's statscounter.py writes into summary.json (__init__, end_run, finalize) for a
# training run without evaluation
SUMMARY_KEYS = {"start", "num_accelerators", "num_hosts", "hostname", "metric", "num_files_train", "num_files_eval",
                "num_samples_per_file", "host_cpu_count", "host_processor_name", "potential_caching", "host_cpuinfo",
                "host_meminfo", "host_memory_GB", "data_size_per_host_GB", "epochs", "end"}
TRAIN_METRIC_KEYS = {"train_au_percentage", "train_au_mean_percentage", "train_au_meet_expectation",
                     "train_au_stdev_percentage", "train_throughput_samples_per_second",
                     "train_throughput_mean_samples_per_second", "train_throughput_stdev_samples_per_second",
                     "train_io_mean_MB_per_second", "train_io_stdev_MB_per_second"}


def _rank(steps, epoch_of=None):
    """Step records from (t_start, data_wait, compute, barrier, checkpoint, samples) tuples."""
    rows = []
    for i, (t, wait, compute, barrier, ck, samples) in enumerate(steps):
        rows.append({"t_start": t, "t_end": t + wait + compute + barrier + ck, "data_wait": wait, "compute": compute,
                     "barrier": barrier, "bytes": 0, "samples": samples, "checkpoint": ck,
                     "epoch": epoch_of(i) if epoch_of else 0})
    return np.array([[r.get(f, 0.0) for f in STEP_FIELDS] for r in rows])


def _steps(start, n, wait, compute, barrier=0.0, first_wait=None, samples=10, ck_at=None, ck=0.0):
    out, t = [], start
    for i in range(n):
        w = first_wait if (i == 0 and first_wait is not None) else wait
        c = ck if i == ck_at else 0.0
        out.append((t, w, compute, barrier, c, samples))
        t += w + compute + barrier + c
    return out


def test_figures_by_dlio_definitions_from_known_steps():
    """Rank 0: one epoch of 4 steps, first waits 2.0 s, others 0.5 s, compute 0.5 s, barrier 0.1 s:
    block 2.6 + 3 x 1.1 = 5.9 s; proc[0] = 2.5; AU = 3 x 0.5 / (5.9 - 2.5) = 44.12 %,
    throughput = 3 x 10 / 3.4 = 8.824 samples/s. Rank 1: 4 steps of 0.1 wait, 0.5 compute, no
    barrier: AU 1.5 / (2.4 - 0.6) = 83.33 %, 30 / 1.8 = 16.667. Epoch: AU the mean over ranks
    (63.73 %), throughput the sum (25.49); MiB/s = 25.49 x 65,536 / 2^20."""
    r0 = _rank(_steps(0.0, 4, 0.5, 0.5, 0.1, first_wait=2.0))
    r1 = _rank(_steps(0.0, 4, 0.1, 0.5))
    m = dlio_output.train_metric([r0, r1], 65_536, 0.6)
    au0, au1 = 1.5 / 3.4 * 100, 1.5 / 1.8 * 100
    rate = 30 / 3.4 + 30 / 1.8
    assert m["train_au_percentage"] == pytest.approx([(au0 + au1) / 2])
    assert m["train_throughput_samples_per_second"] == pytest.approx([rate])
    assert m["train_io_mean_MB_per_second"] == pytest.approx(rate * 65_536 / MiB)
    assert m["train_au_meet_expectation"] == "success" and m["train_au_stdev_percentage"] == 0.0


def test_a_checkpoint_ends_a_block_and_epochs_weight_blocks_by_steps():
    """One rank, one epoch of 6 steps (1 s each: 0.2 wait, 0.8 compute) with a 5 s checkpoint in
    step 2: block 1 = steps 1-2 (2 s, its checkpoint outside), block 2 = steps 3-6 (4 s). Each
    leaves out its own first step: AU 0.8 / (2 - 1) = 80 % and 2.4 / (4 - 1) = 80 %, throughput
    10 / 1 and 30 / 3 = 10 samples/s; the epoch weighs them 2:4. Second epoch: one step only,
    which DLIO counts as 0 and 0 (its metric window is empty)."""
    steps = _steps(0.0, 6, 0.2, 0.8, ck_at=1, ck=5.0) + _steps(11.0, 1, 0.2, 0.8)
    r = _rank(steps, epoch_of=lambda i: 0 if i < 6 else 1)
    ep = dlio_output.rank_epochs(r)
    assert [len(b["proc"]) for b in ep[0]["blocks"]] == [2, 4]
    assert [b["au"] for b in ep[0]["blocks"]] == pytest.approx([80.0, 80.0])
    assert ep[0]["au"] == pytest.approx(80.0) and ep[0]["throughput"] == pytest.approx(10.0)
    assert (ep[1]["au"], ep[1]["throughput"]) == (0.0, 0.0)
    m = dlio_output.train_metric([r], 1000, 0.9)
    assert m["train_au_percentage"] == pytest.approx([80.0, 0.0]) and m["train_au_mean_percentage"] == pytest.approx(40)
    assert m["train_au_stdev_percentage"] == pytest.approx(40.0)           # population stdev, as np.std
    ck = dlio_output.checkpoint_metric(r, 2 << 30)
    assert ck["checkpoint_size_GB"] == 2.0 and ck["save_checkpoint_duration_mean_seconds"] == 5.0
    assert ck["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(0.4)


def _recompute(output: dict, stats: dict, batch: int) -> dict:
    """DLIO's per-block figures again, from what the files themselves hold: the step lists of
    <rank>_output.json and the block times of <rank>_per_epoch_stats.json."""
    def t(s):
        return datetime.strptime(s, dlio_output.TS_FORMAT).timestamp()

    out = {}
    for epoch, e in stats.items():
        for block, b in e.items():
            if not block.startswith("block"):
                continue
            proc, compute = output[epoch]["proc"][block], output[epoch]["compute"][block]
            total = t(b["end"]) - t(b["start"]) - proc[0]
            out[(epoch, block)] = (sum(compute[1:]) / total * 100, (len(proc) - 1) * batch / total)
    return out


@pytest.mark.flaky(reruns=1)   # a timing claim (AU and samples/s of 20 ms requests, within 15 %): serial, not beside other tests
def test_read_writes_dlio_files_in_mlpstorages_layout_derived_from_the_same_run(tmp_path):
    """Two runs named unet3d_b200 on the null engine (one 20 ms emulated request per 1 MiB sample,
    20 ms compute), 2 epochs of 5 steps of 2 samples: every run directory holds what mlpstorage's report generator reads
    (summary.json, dlio_config/{config,overrides,hydra}.yaml: model, workflow, the workload= override
    it takes the accelerator from) and DLIO's per-rank files; summary.json's figures derive from the
    run's own steps as DLIO derives them, and agree with iodl's result where the definitions meet."""
    res = tmp_path / "results"
    out = tmp_path / "runs.json"
    spec = tmp_path / "unet3d_b200.toml"      # unet3d_b200's name and model, samples of one request
    spec.write_text(UNET3D_SMALL)
    proc = iodl("read", "--workload", str(spec), "--engine", "null", "--delay-us", "20000", "--iodepth", "1",
                "--prefetch", "0", "--runs", "2", "--dlio-dir", str(res), "--out", str(out), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    runs = sorted(glob.glob(str(res / "training" / "unet3d" / "run" / "*")))
    assert len(runs) == 2 and all(len(os.path.basename(r)) == len("20260101_120000") for r in runs)
    doc = load_json(out)
    assert doc["schema"] == "iodl.runs/1" and len(doc["runs"]) == 2
    assert [r["seed"] for r in doc["runs"]] == [1, 2]      # the workload's seed, then + 1 ("must change")
    for run_dir, result in zip(runs, doc["runs"]):
        s = load_json(os.path.join(run_dir, "summary.json"))
        cfg = yaml.safe_load(open(os.path.join(run_dir, "dlio_config", "config.yaml")))["workload"]
        overrides = yaml.safe_load(open(os.path.join(run_dir, "dlio_config", "overrides.yaml")))
        assert os.path.exists(os.path.join(run_dir, "dlio_config", "hydra.yaml"))
        # what mlpstorage's DLIOResultParser takes from them (mlpstorage_py/rules/models.py)
        assert cfg["model"]["name"] == "unet3d" and cfg["workflow"]["train"] is True
        assert [o for o in overrides if o.startswith("workload=")][0].split("_")[1] == "b200"
        assert load_json(os.path.join(run_dir, "iodl_result.json"))["total"] == result["total"]
        # the same run
        assert s["num_accelerators"] == result["ranks"] == 1 and s["num_hosts"] == len(result["hosts"])
        assert set(s) == SUMMARY_KEYS and set(s["metric"]) == TRAIN_METRIC_KEYS
        assert s["epochs"] == 2 and s["num_files_train"] == 10 and s["num_samples_per_file"] == 1
        m = s["metric"]
        assert m["train_io_mean_MB_per_second"] == pytest.approx(
            m["train_throughput_mean_samples_per_second"] * MiB / MiB, rel=1e-12)   # record 1 MiB; "MB" is MiB
        output = load_json(os.path.join(run_dir, "0_output.json"))
        stats = load_json(os.path.join(run_dir, "0_per_epoch_stats.json"))
        assert [len(output[e]["proc"]["block1"]) for e in ("1", "2")] == [5, 5]
        for (epoch, block), (au, rate) in _recompute(output, stats, 2).items():
            assert output[epoch]["au"][block] == pytest.approx(au, abs=0.01)        # timestamps: microseconds
            assert output[epoch]["throughput"][block] == pytest.approx(rate, rel=1e-4)
        assert m["train_au_percentage"] == pytest.approx([output[e]["au"]["block1"] for e in ("1", "2")])
        # iodl's AU is the mean of compute / step time over the same steps: the same here (equal steps)
        assert m["train_au_mean_percentage"] / 100 == pytest.approx(result["train"]["au"], abs=0.03)
        # each step is 2 x 20 ms of requests + 20 ms of compute: AU 1/3 and 2 / 0.06 s = 33 samples/s
        assert m["train_au_mean_percentage"] == pytest.approx(100 / 3, rel=0.15)
        assert m["train_throughput_mean_samples_per_second"] == pytest.approx(2 / 0.06, rel=0.15)
    agg = doc["mlperf"]
    assert [r["warmup"] for r in agg["runs"]] == [True, False] and agg["measured_runs"] == 1
    second = load_json(os.path.join(runs[1], "summary.json"))["metric"]
    assert agg["read_bw_GiBps"] == pytest.approx(second["train_io_mean_MB_per_second"] / 1024)
    assert agg["mean_of_au_percentage"] == pytest.approx(np.mean(second["train_au_percentage"]))
    assert agg["complete"] is False and "6 complete runs" in agg["summary"]


@pytest.mark.parametrize("args,mention", [
    (["--pattern", "infer-async", "--dlio-dir", "D"], "--dlio-dir"),
    (["--runs", "0"], "--runs"),
    (["--runs", "2", "--csv", "x.csv"], "--csv"),
])
def test_bad_runs_and_dlio_dir_are_one_line(tmp_path, args, mention):
    args = [a if a != "D" else str(tmp_path / "d") for a in args]
    proc = iodl("read", "--engine", "null", "--workload", "tiny", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and mention in proc.stderr, proc.stderr


def test_the_dlio_config_names_the_workloads_model_and_numbers():
    wl = load_workload("retinanet_mi355")
    cfg = dlio_output.dlio_config(wl, 1000, 32, 0.0634, 8, False)["workload"]
    assert cfg["model"]["name"] == "retinanet" and cfg["dataset"]["record_length_bytes"] == 322_957
    assert cfg["reader"]["batch_size"] == 32 and cfg["metric"]["au"] == 0.85
    assert yaml.safe_load(dlio_output._yaml({"workload": cfg})) == {"workload": cfg}
    assert json.loads(json.dumps(cfg)) == cfg


def test_two_ranks_summary_is_the_mean_au_and_summed_samples_of_their_output_files(tmp_path):
    """Under mpiexec -n 2 each rank has its <rank>_output.json; summary.json's per-epoch AU is the
    mean of the ranks' and its samples/s their sum (statscounter.end_run's allreduce), and the
    summary names 2 accelerators on 1 host."""
    assert mpiexec(), "mpiexec not found (pip install mpich)"
    spec = tmp_path / "unet3d_b200.toml"
    spec.write_text(UNET3D_SMALL)
    res = tmp_path / "results"
    proc = iodl("read", "--workload", str(spec), "--engine", "null", "--delay-us", "5000", "--prefetch", "0",
                "--dlio-dir", str(res), "--progress", "off", ranks=2)
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(str(res / "training" / "unet3d" / "run" / "*"))
    s = load_json(os.path.join(run, "summary.json"))
    outs = [load_json(os.path.join(run, f"{r}_output.json")) for r in (0, 1)]
    assert s["num_accelerators"] == 2 and s["num_hosts"] == 1 and len(s["host_memory_GB"]) == 1
    epochs = sorted(k for k in outs[0] if k.isdigit())
    m = s["metric"]
    assert m["train_au_percentage"] == pytest.approx([np.mean([o[e]["au"]["block1"] for o in outs]) for e in epochs])
    assert m["train_throughput_samples_per_second"] == pytest.approx(
        [sum(o[e]["throughput"]["block1"] for o in outs) for e in epochs])
    # 10 files over 2 ranks: 5 samples each per epoch, in steps of 2 (the last step of 1 sample is not taken)
    assert all(len(o[e]["proc"]["block1"]) >= 2 for o in outs for e in epochs)


MLPSTORAGE_CHECK = """\
import json, sys
from mlpstorage.mlps_logging import setup_logging
from mlpstorage.rules import BenchmarkResult, BenchmarkRun, BenchmarkRunVerifier
log = setup_logging(name="iodl-test")
run = BenchmarkRun(benchmark_result=BenchmarkResult(sys.argv[1], log), logger=log)
verdict = BenchmarkRunVerifier(run, log).verify()
print(json.dumps({"run": run.as_dict(), "num_processes": run.num_processes, "run_datetime": run.run_datetime,
                  "verdict": verdict.value}, default=str))
"""


def test_mlpstorages_own_code_reads_an_iodl_run_directory(tmp_path):
    """mlpstorage's reader (mlpstorage/rules.py BenchmarkResult and BenchmarkRun, mlcommons/storage
    v2.0, the snapshot at caa90c9c7d6a543de815222fff834a846823f922) loaded at test time from a copy
    of that repository named by IODL_MLPSTORAGE (its git directory or a checkout; nothing of it is
    in iodl): it finds a training run of unet3d with iodl's rank count, start time, host memory and
    metrics, and its rules checker judges it (INVALID here: unet3d's rules ask for checkpoints,
    which this run did not write)."""
    import subprocess
    import sys

    source = os.environ.get("IODL_MLPSTORAGE")
    require_or_skip("mlpstorage-src", bool(source),
                    "IODL_MLPSTORAGE is not set (a git directory or checkout of mlcommons/storage)")
    require_or_skip("mlpstorage-src", importlib.util.find_spec("psutil") is not None,
                    "psutil is not installed (mlpstorage/utils.py imports it)")
    code = tmp_path / "mlps"
    code.mkdir()
    if os.path.isdir(os.path.join(source, "mlpstorage")):
        code = source
    else:
        archive = subprocess.run(["git", f"--git-dir={source}", "archive", "HEAD", "mlpstorage"], capture_output=True)
        assert archive.returncode == 0, archive.stderr
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
    spec = tmp_path / "unet3d_b200.toml"
    spec.write_text(UNET3D_SMALL)
    res = tmp_path / "results"
    proc = iodl("read", "--workload", str(spec), "--engine", "null", "--dlio-dir", str(res), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = glob.glob(str(res / "training" / "unet3d" / "run" / "*"))
    check = subprocess.run([sys.executable, "-c", MLPSTORAGE_CHECK, run_dir], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(code)}, timeout=60)
    assert check.returncode == 0, check.stderr
    got = json.loads(check.stdout.strip().splitlines()[-1])
    s = load_json(os.path.join(run_dir, "summary.json"))
    assert got["run"]["benchmark_type"] == "training" and got["run"]["model"] == "unet3d"
    assert got["num_processes"] == s["num_accelerators"] == 1 and got["run_datetime"] == s["start"]
    assert got["run"]["metrics"] == s["metric"]
    assert got["run"]["system_info"]["total_memory_bytes"] == pytest.approx(s["host_memory_GB"][0] * (1 << 30))
    assert got["verdict"] == "invalid" and "workflow.checkpoint" in check.stdout + check.stderr


def test_in_training_checkpoints_split_blocks_and_give_dlios_checkpoint_figures(tmp_path):
    """unet3d-style in-training checkpoints (a flat 4 MiB model, every 3 steps) under --checkpoint-root:
    each checkpoint ends a block, so an epoch of 5 steps has blocks of 3 and 2; summary.json's
    checkpoint_size_GB is one checkpoint's bytes from iodl's result / 2^30 and its
    save_checkpoint_duration_mean_seconds rank 0's (here the only rank's) time in them, which is
    iodl's per-round duration plus the checkpoint's barriers and bookkeeping."""
    spec = tmp_path / "unet3d_b200.toml"
    spec.write_text(UNET3D_SMALL + '\n[model]\ntype = "cnn"\nmodel_size = "4MiB"\n\n[checkpoint]\nevery_steps = 3\n')
    res, out = tmp_path / "results", tmp_path / "r.json"
    proc = iodl("read", "--workload", str(spec), "--engine", "null", "--delay-us", "2000", "--prefetch", "0",
                "--checkpoint-root", str(tmp_path / "ck"), "--dlio-dir", str(res), "--out", str(out),
                "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(str(res / "training" / "unet3d" / "run" / "*"))
    s, result = load_json(os.path.join(run, "summary.json")), load_json(out)
    output = load_json(os.path.join(run, "0_output.json"))
    write = result["checkpoint"]["write"]
    assert write["rounds"] == 3                                      # after steps 3, 6 and 9 of 10
    assert [len(output["1"]["proc"][b]) for b in sorted(output["1"]["proc"])] == [3, 2]
    assert [len(output["2"]["proc"][b]) for b in sorted(output["2"]["proc"])] == [1, 3, 1]
    m = s["metric"]
    assert m["checkpoint_size_GB"] == write["bytes"] / write["rounds"] / (1 << 30)
    rounds = np.mean([r["duration_s"] for r in write["per_round"]])
    assert rounds <= m["save_checkpoint_duration_mean_seconds"] <= rounds + 0.25
    # GiB/s is the mean of size / each duration: at least size / the mean duration (they are equal
    # only when the durations are)
    assert m["save_checkpoint_io_mean_GB_per_second"] >= (
        m["checkpoint_size_GB"] / m["save_checkpoint_duration_mean_seconds"] * (1 - 1e-12))
    cfg = yaml.safe_load(open(os.path.join(run, "dlio_config", "config.yaml")))["workload"]
    assert cfg["workflow"]["checkpoint"] is True


def test_checkpoint_dlio_dir_that_is_a_file_is_one_line(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("a user's file")
    spec = tmp_path / "m.toml"
    from tests.helpers import transformer_toml

    spec.write_text(transformer_toml("m", layers=1, hidden=64, ffn=128, heads=4, vocab=256, data=1))
    proc = iodl("checkpoint", "--workload", str(spec), "--root", str(tmp_path / "ck"), "--dlio-dir", str(afile))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--dlio-dir" in proc.stderr, proc.stderr
    assert afile.read_text() == "a user's file" and not (tmp_path / "ck").exists()


def test_a_stop_during_a_series_of_runs_ends_every_rank_with_the_runs_so_far(tmp_path):
    """--runs 3 under mpiexec -n 2, SIGINT in the second run: every rank leaves the series (none
    starts a third run and waits for the others in it), exit 130 within the stop's bound, and --out
    keeps run 1 whole and run 2 partial, with the aggregate of what ran."""
    import signal
    import subprocess
    import sys
    import time

    assert mpiexec(), "mpiexec not found (pip install mpich)"
    out = tmp_path / "runs.json"
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "iodl", "read", "--engine", "null", "--workload", "tiny",
           "--steps", "30", "--compute-time", "0.1", "--runs", "3", "--out", str(out), "--progress", "off"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    seen = ""
    while "MLPerf Storage's view" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()          # run 1's report, printed when it ends
    time.sleep(1.5)                              # into run 2 (run 1: 30 steps of 0.1 s)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert elapsed < 6.0, elapsed
    doc = load_json(out)
    assert [r["partial"] for r in doc["runs"]] == [False, True]
    assert doc["mlperf"]["complete"] is False and doc["mlperf"]["measured_runs"] == 1


def test_the_run_directory_is_made_new_and_never_through_a_link(tmp_path):
    """write_run creates the missing directories under --dlio-dir, refuses a component that is a
    symlink (iodl never writes through links) and an existing run directory (never written into)."""
    from iodl.errors import UsageError

    base = tmp_path / "new-results"                       # missing: created
    run = dlio_output.run_directory(str(base), "unet3d", 0.0)
    dlio_output.write_run(str(base), run, {"metric": {}}, [], {"workload": {}}, [], {})
    assert os.path.isfile(os.path.join(run, "summary.json")) and os.path.isdir(os.path.join(run, "dlio_config"))
    with pytest.raises(UsageError, match="always a new one"):
        dlio_output.write_run(str(base), run, {"metric": {}}, [], {"workload": {}}, [], {})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(elsewhere, linked / "training")
    with pytest.raises(UsageError, match="not a directory"):
        dlio_output.write_run(str(linked), dlio_output.run_directory(str(linked), "unet3d", 0.0), {"metric": {}}, [],
                              {"workload": {}}, [], {})
    assert os.listdir(elsewhere) == []


def test_a_checkpoint_runs_config_names_the_model_as_mlperfs_files_do():
    """MLPerf's llama3_8b.yaml (mlcommons/storage@caa90c9c7d6a543de815222fff834a846823f922) names its
    model llama_8b with the parallelism under model:; mlpstorage's DLIOResultParser turns that back
    into llama3-8b (replace llama_ -> llama3-, _ -> -)."""
    wl = load_workload("llama3-70b", need_dataset=False)
    result = {"model": "llama3-70b", "subset": False, "fsync": True}
    cfg = dlio_output.checkpoint_config(result, wl, 10, 10, "/ck")["workload"]
    assert cfg["model"]["name"] == "llama_70b"
    assert cfg["model"]["name"].replace("llama_", "llama3-").replace("_", "-") == "llama3-70b"
    assert cfg["model"]["parallelism"] == {"tensor": 8, "pipeline": 1, "zero_stage": 3}
    assert cfg["workflow"] == {"generate_data": False, "train": False, "checkpoint": True}
    assert cfg["checkpoint"]["num_checkpoints_write"] == cfg["checkpoint"]["num_checkpoints_read"] == 10
    assert cfg["checkpoint"]["mode"] == "default"
