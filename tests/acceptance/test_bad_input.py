"""Absurd numbers get one line and exit 2, at once, on every rank: never a traceback, a hang,
an allocation that cannot fit, or a file written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from iodl import workload
from tests.helpers import iodl, mpiexec
from tests.conftest import require_or_skip

TIME_BOUND_S = 10.0   # generous for start-up on a busy 2-core VM; the bugs were hangs of minutes


def _workload_with(tmp_path, key: str, value: str) -> str:
    """The built-in tiny workload with one key's value replaced (a file nobody else wrote)."""
    with open(os.path.join(workload.BUILTIN_DIR, "tiny.toml")) as f:
        text = f.read()
    text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    assert n == 1, key
    path = tmp_path / "w.toml"
    path.write_text(text)
    return str(path)


def _assert_refused(proc, elapsed: float, mention: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("iodl: error:"), proc.stderr
    assert mention in lines[0], lines[0]
    assert elapsed < TIME_BOUND_S, elapsed


def _timed(*args, ranks: int = 0):
    start = time.monotonic()
    proc = iodl(*args, ranks=ranks, timeout=60)
    return proc, time.monotonic() - start


WORKLOAD_CASES = [
    ("files", "1000000000000", "files"),
    ("files", "0", "files"),
    ("files", "1.5", "files"),
    ("samples_per_file", "-3", "samples_per_file"),
    ("sample_size", '"1EB"', "sample_size"),
    ("sample_size", '"-4KiB"', "sample_size"),
    ("copies", "1000000000", "copies"),
    ("compute_time_s", "1e300", "compute_time_s"),
    ("compute_time_s", "nan", "compute_time_s"),
    ("compute_time_s", "inf", "compute_time_s"),
    ("compute_time_s", "-1.0", "compute_time_s"),
    ("batch_size", "1000000000", "batch_size"),
    ("iodepth", "1000000", "iodepth"),
    ("block_size", '"1TiB"', "block_size"),
    ("epochs", "10000000000", "epochs"),
    ("seed", "-1", "seed"),
    ("prefetch", "100000000", "prefetch"),
]


@pytest.mark.parametrize("key,value,mention", WORKLOAD_CASES, ids=[f"{k}={v}" for k, v, _m in WORKLOAD_CASES])
def test_absurd_workload_values_are_refused_by_read_and_generate(tmp_path, key, value, mention):
    path = _workload_with(tmp_path, key, value)
    proc, elapsed = _timed("read", "--workload", path, "--engine", "null")
    _assert_refused(proc, elapsed, mention)
    root = tmp_path / "root"
    root.mkdir()
    proc, elapsed = _timed("generate", "--workload", path, "--root", str(root))
    _assert_refused(proc, elapsed, mention)
    assert os.listdir(root) == [], "a refused generate wrote into the root"


@pytest.mark.parametrize("key,value,mention", [("files", "0", "files"), ("sample_size", "[", "invalid TOML")])
def test_a_bad_workload_file_under_mpi_is_one_line_and_every_rank_exits_2(tmp_path, key, value, mention):
    """Rank 0 alone reads the workload (runner._setup) and sends the others its refusal: each rank
    exits 2 (a wrapper shell prints every rank's status), and the line is printed once."""
    require_or_skip("mpiexec", bool(mpiexec()), "mpiexec not found next to the test interpreter")
    path = _workload_with(tmp_path, key, value)
    cmd = [mpiexec(), "-n", "3", "sh", "-c",
           f"{sys.executable} -m iodl read --workload {path} --engine null --progress off; echo rank-exit=$?"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    codes = [line for line in proc.stdout.splitlines() if line.startswith("rank-exit=")]
    assert codes == ["rank-exit=2"] * 3, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("iodl: error: ") and mention in lines[0], proc.stderr
    assert "rank" not in lines[0]   # every rank refused alike: no rank is named
    assert time.monotonic() - start < TIME_BOUND_S


def test_a_sample_table_that_cannot_fit_in_memory_is_refused(tmp_path):
    # each key alone is within bounds; 50M files x 64 samples is a 76.8 GB table of sizes
    path = _workload_with(tmp_path, "files", "50000000")
    root = tmp_path / "root"
    root.mkdir()
    proc, elapsed = _timed("generate", "--workload", path, "--root", str(root))
    _assert_refused(proc, elapsed, "samples")
    assert os.listdir(root) == []


READ_CASES = [
    (["--duration", "1e300"], "--duration"),
    (["--duration", "nan"], "--duration"),
    (["--duration", "0"], "--duration"),
    (["--ramp", "inf"], "--ramp"),
    (["--seed", "-1"], "--seed"),
    (["--delay-us", "1e300"], "--delay-us"),
    (["--delay-us", "nan"], "--delay-us"),
    (["--batch-size", "1000000000"], "--batch-size"),
    (["--steps", "0"], "--steps"),
    (["--iodepth", "100000"], "--iodepth"),
    (["--compute-time", "1e300"], "--compute-time"),
    (["--prefetch", "-1"], "--prefetch"),
    (["--block-size", "1TiB"], "--block-size"),
    (["--block-size", "1GiB", "--iodepth", "60000"], "available"),
    # argparse would refuse these with its usage block: one line instead
    (["--steps", "1.5"], "--steps"),
    (["--iodepth", "abc"], "--iodepth"),
    (["--seed", "1e3"], "--seed"),
    (["--epochs", "-1"], "--epochs"),
    (["--compute-time=-inf"], "--compute-time"),
    (["--block-size", "1.5"], "--block-size"),
    (["--block-size=-4KiB"], "--block-size"),
    # each value within its bound, the step's plan is not: 1M samples of ~64 KiB in 512 B requests
    (["--block-size", "512", "--batch-size", "1048576"], "16,777,216 per plan"),
]



@pytest.mark.parametrize("given", ["resnet50", "yaml"])
def test_a_workload_of_another_shape_is_not_read_from_the_default_dataset(tmp_path, given):
    """No --root reads the default dataset, of workload tiny's shape: a workload of another shape
    (a built-in, a DLIO file of a user's model) is refused in one line naming --root, before the
    default dataset is generated; the same workload runs with --engine null, and tiny itself reads."""
    if given == "yaml":
        given = str(tmp_path / "mine.yaml")
        with open(given, "w") as f:
            f.write("model:\n  name: mine\nworkflow:\n  train: True\ndataset:\n  format: npz\n"
                    "  num_files_train: 64\n  num_samples_per_file: 4\n  record_length_bytes: 65536\n"
                    "reader:\n  batch_size: 8\ntrain:\n  epochs: 1\n  computation_time: 0.01\n")
    env = {"IODL_DATA": str(tmp_path / "data")}
    start = time.monotonic()
    proc = iodl("read", "--workload", given, "--steps", "2", env=env, timeout=60)
    _assert_refused(proc, time.monotonic() - start, "--root DIR")
    assert not os.path.exists(tmp_path / "data"), "the default dataset was generated for a refused run"
    assert iodl("read", "--workload", given, "--engine", "null", "--steps", "2", env=env, timeout=60).returncode == 0
    assert iodl("read", "--workload", "tiny", "--steps", "2", env=env, timeout=60).returncode == 0

@pytest.mark.parametrize("args,mention", READ_CASES, ids=[" ".join(a) for a, _m in READ_CASES])
def test_absurd_read_flags_are_refused(args, mention):
    proc, elapsed = _timed("read", "--engine", "null", *args)
    _assert_refused(proc, elapsed, mention)


def test_unaligned_direct_block_size_is_refused_before_reading(tmp_path):
    # storage-only with --block-size 3 --direct once grew to 4.2 GB and exited 0 with 0 bytes
    (tmp_path / "shard.bin").write_bytes(os.urandom(1 << 16))
    proc, elapsed = _timed("read", "--pattern", "storage-only", "--root", str(tmp_path), "--block-size", "3",
                           "--direct", "--duration", "1", "--ramp", "0")
    _assert_refused(proc, elapsed, "multiple of 4096")


def test_unaligned_direct_block_size_of_the_workload_is_refused(tmp_path):
    path = _workload_with(tmp_path, "block_size", '"1000B"')
    proc, elapsed = _timed("read", "--workload", path, "--engine", "null", "--direct")
    _assert_refused(proc, elapsed, "[read] block_size: 1000: with --direct a request must be a positive multiple of 4096")


def _sparse_shard(directory, size: int) -> None:
    """A real shard of `size` bytes that takes no disk space (a hole reads as zeros)."""
    with open(os.path.join(directory, "shard.bin"), "wb") as f:
        f.truncate(size)


@pytest.mark.parametrize("pattern", ["storage-only", "validate"])
def test_tiny_buffered_requests_are_refused_by_plan_size(tmp_path, pattern):
    # without --direct, storage-only --block-size 3 once built a 4.2 GB plan for 78 s before reading
    _sparse_shard(tmp_path, 64 << 20)
    proc, elapsed = _timed("read", "--pattern", pattern, "--root", str(tmp_path), "--engine", "null",
                           "--block-size", "3", "--duration", "1", "--ramp", "0")
    _assert_refused(proc, elapsed, "at most 16,777,216 per plan")
    assert os.listdir(tmp_path) == ["shard.bin"]


def test_plans_that_do_not_fit_the_hosts_memory_are_refused(tmp_path):
    # 10.5M rows of 128 B requests are within the plan bound; enough ranks on this host (the
    # launcher's MPI_LOCALNRANKS) make them more than MemAvailable
    from iodl import limits

    _sparse_shard(tmp_path, 1 << 30)
    _rows, need, _what = limits.plan_needs("storage-only", [1 << 30], 1, 128, 1)
    ranks = 2 * limits.mem_available() // need + 1
    start = time.monotonic()
    proc = iodl("read", "--pattern", "storage-only", "--root", str(tmp_path), "--engine", "null",
                "--block-size", "128", "--duration", "1", "--ramp", "0", env={"MPI_LOCALNRANKS": str(ranks)}, timeout=60)
    _assert_refused(proc, time.monotonic() - start, f"{need:,} bytes per rank x {ranks} rank(s)")


def _peak_rss_bytes(*args: str) -> int:
    """Peak RSS of `iodl ARGS` run alone (a wrapper process, so no other child's peak counts)."""
    import subprocess
    import sys

    # the run's own error line reaches the wrapper's stderr (a failed run says why)
    code = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "iodl", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (args, proc.returncode, proc.stderr[-2000:])
    return int(proc.stdout) * 1024


@pytest.mark.parametrize("pattern,args", [
    ("storage-only", ["--block-size", "128", "--duration", "0.5", "--ramp", "0"]),
    ("train-sync", ["--block-size", "512", "--batch-size", "16384", "--steps", "2"]),
], ids=["storage-only", "train-sync"])
def test_plan_memory_formula_bounds_what_a_run_takes(tmp_path, pattern, args):
    """limits.plan_needs is an upper bound of the plans' real peak (RSS above the same run with
    1 MiB requests) and not a wild one: within 2x (measured 67% and 91%)."""
    from iodl import limits

    if pattern == "storage-only":
        _sparse_shard(tmp_path, 1 << 30)
        run = ["read", "--pattern", pattern, "--root", str(tmp_path), "--engine", "null"]
        sizes, per_shard = [1 << 30], 1
    else:   # the null engine's dataset: tiny's shards as the workload describes them
        wl = workload.load_workload("tiny")
        run = ["read", "--pattern", pattern, "--engine", "null"]
        sizes, per_shard = [wl.dataset.samples_per_file * wl.dataset.sample_size] * wl.dataset.files, wl.dataset.samples_per_file
    opts = dict(zip(args[::2], args[1::2]))
    _rows, need, _what = limits.plan_needs(pattern, sizes, per_shard, int(opts["--block-size"]),
                                           int(opts.get("--batch-size", 1)))
    base_args = list(args)
    base_args[base_args.index("--block-size") + 1] = "1MiB"
    base = _peak_rss_bytes(*run, *base_args)
    peak = _peak_rss_bytes(*run, *args)
    assert need / 2 <= peak - base <= need, (peak - base, need)


@pytest.mark.parametrize("args", [["--files", "0"], ["--copies", "1000000000"], ["--seed", "-1"],
                                  ["--files", "1.5"], ["--copies", "abc"]],
                         ids=lambda a: " ".join(a))
def test_absurd_generate_flags_are_refused(tmp_path, args):
    proc, elapsed = _timed("generate", "--root", str(tmp_path), *args)
    _assert_refused(proc, elapsed, args[0])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [["read", "--engine", "null", "--delay-us", "1e300"],
                                  ["read", "--engine", "null", "--batch-size", "1000000000"],
                                  # refused after the shards' sizes are known (the plan check)
                                  ["read", "--engine", "null", "--block-size", "512", "--batch-size", "1048576"]],
                         ids=["delay-us", "batch-size", "plan"])
def test_every_rank_refuses_under_mpiexec(args):
    import subprocess
    import sys

    exe = mpiexec()
    require_or_skip("mpiexec", exe is not None, "mpiexec not found next to the test interpreter")
    # each rank says its own exit status after iodl ends (hydra reports only the largest)
    script = 'python="$1"; shift; "$python" -m iodl "$@"; s=$?; echo "rank $PMI_RANK exit $s" >&2; exit $s'
    start = time.monotonic()
    proc = subprocess.run([exe, "-n", "2", "sh", "-c", script, "sh", sys.executable, *args],
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    errors = [line for line in proc.stderr.splitlines() if line.startswith("iodl: error")]
    exits = sorted(line for line in proc.stderr.splitlines() if line.startswith("rank "))
    assert exits == ["rank 0 exit 2", "rank 1 exit 2"], proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(errors) == 1, proc.stderr     # said once, by rank 0
    assert elapsed < TIME_BOUND_S + 10, elapsed


@pytest.mark.parametrize("args,mention", [
    (["--ranks", "1000000000"], "--ranks: 1000000000"),
    (["--ranks", "1", "--timeout", "1e300"], "--timeout"),
    (["--ranks", "1", "--", "--engine", "null", "--steps", "0"], "--steps: 0"),
    (["--ranks", "1", "--", "--engine", "null", "--batch-size", "1e9"], "--batch-size"),
    (["--ranks", "1", "--", "--engine", "null", "--block-size", "3", "--direct"], "multiple of 4096"),
], ids=["ranks", "timeout", "steps", "batch-size", "direct"])
def test_absurd_sweep_values_are_refused_before_any_launch(tmp_path, args, mention):
    keep = tmp_path / "keep"
    proc, elapsed = _timed("sweep", "--keep", str(keep), *args)
    _assert_refused(proc, elapsed, mention)
    assert "point" not in proc.stderr          # refused by the sweep itself, no mpiexec started
    assert not keep.exists() or os.listdir(keep) == []
