"""Absurd numbers get one line and exit 2, at once, on every rank: never a traceback, a hang,
an allocation that cannot fit, or a file written."""
from __future__ import annotations

import os
import re
import time

import pytest

from iodl import workload
from tests.helpers import iodl, mpiexec

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
]


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


@pytest.mark.parametrize("args", [["--files", "0"], ["--copies", "1000000000"], ["--seed", "-1"]],
                         ids=lambda a: " ".join(a))
def test_absurd_generate_flags_are_refused(tmp_path, args):
    proc, elapsed = _timed("generate", "--root", str(tmp_path), *args)
    _assert_refused(proc, elapsed, args[0])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [["read", "--engine", "null", "--batch-size", "1000000000"],
                                  ["read", "--engine", "null", "--delay-us", "1e300"]],
                         ids=["batch-size", "delay-us"])
def test_every_rank_refuses_under_mpiexec(args):
    if mpiexec() is None:
        pytest.skip("mpiexec not found next to the test interpreter")
    proc, elapsed = _timed(*args, ranks=2)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("iodl: error")]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr     # said once, by rank 0
    assert elapsed < TIME_BOUND_S + 10, elapsed
