"""`iodl checkpoint --plan` as a user runs it: fast, no MPI, JSON as documented
(docs/checkpoint.md), and bad input in one line."""
import json
import os
import re
import time

import pytest

from iodl import workload
from tests.helpers import iodl

GiB = 2 ** 30


def test_plan_405b_json_is_fast_and_has_the_documented_keys():
    start = time.monotonic()
    proc = iodl("checkpoint", "--workload", "llama3-405b", "--plan", "--json", timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 2.0, elapsed
    d = json.loads(proc.stdout)
    assert set(d) == {"model", "ranks", "total_bytes", "per_rank_bytes", "files", "writes", "reads", "fsync"}
    assert (d["writes"], d["reads"], d["fsync"]) == (10, 10, True)     # MLPerf's 10 writes then 10 reads, fsync'd
    assert (d["model"], d["ranks"], d["total_bytes"]) == ("llama3-405b", 512, 5_682_508_791_808)
    assert len(d["per_rank_bytes"]) == len(d["files"]) == 512
    assert all(isinstance(b, int) for b in d["per_rank_bytes"]) and sum(d["per_rank_bytes"]) == d["total_bytes"]
    assert all(set(f) == {"name", "bytes"} for fs in d["files"] for f in fs)
    assert [f["name"] for f in d["files"][256]] == ["zero_pp_rank_1_mp_rank_0_optim_states.pt"]


def test_plan_imports_no_mpi():
    proc = iodl("checkpoint", "--workload", "llama3-1t", "--plan", "--json", env={"PYTHONVERBOSE": "1"}, timeout=60)
    assert proc.returncode == 0
    assert "mpi4py" not in proc.stderr and round(json.loads(proc.stdout)["total_bytes"] / GiB, 2) == 15426.59


def test_plan_table_fits_80_columns_and_says_subset():
    proc = iodl("checkpoint", "--workload", "llama3-405b", "--plan", "--ranks", "8", env={"COLUMNS": "80"},
                timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = " ".join(proc.stdout.split())
    assert "8 x 32 x 2 = 512" in text and "ZeRO stage │ 1" in text
    assert "subset mode (MLPerf): 8 of the 512 ranks" in text
    assert "98.54 GiB" in text


@pytest.mark.parametrize("name,total", [("llama3-8b", "104.70 GiB"), ("llama3-70b", "911.21 GiB"),
                                        ("llama3-1t", "15,426.59 GiB")])
def test_plan_table_totals(name, total):
    proc = iodl("checkpoint", "--workload", name, "--plan", env={"COLUMNS": "80"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert total in proc.stdout


def _refused(proc, mention):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("iodl: error:"), proc.stderr
    assert mention in lines[0], lines[0]


def _llama_with(tmp_path, old, new):
    with open(os.path.join(workload.BUILTIN_DIR, "llama3-8b.toml")) as f:
        text = f.read()
    text, n = re.subn(rf"^{old}.*$", new, text, flags=re.M)
    assert n == 1, old
    path = tmp_path / "w.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("args,mention", [
    (["--workload", "{unknown_key}", "--plan"], "[model] num_layer: unknown key (did you mean 'num_layers'?)"),
    (["--workload", "{tensor0}", "--plan"], "[parallelism] tensor: must be a positive integer, got 0"),
    (["--workload", "llama3-405b", "--plan", "--ranks", "600"], "--ranks 600: not a multiple of TP x PP"),
    (["--workload", "llama3-405b", "--plan", "--ranks", "0"], "--ranks"),
    (["--workload", "tiny", "--plan"], "no [model]: nothing to checkpoint"),
    (["--workload", "llama3-8b"], "or --plan"),
    (["--workload", "nope", "--plan"], "unknown workload 'nope'"),
])
def test_bad_input_is_one_line(tmp_path, args, mention):
    files = {"{unknown_key}": lambda: _llama_with(tmp_path, "num_layers", "num_layer = 32"),
             "{tensor0}": lambda: _llama_with(tmp_path, "tensor", "tensor = 0")}
    args = [files[a]() if a in files else a for a in args]
    _refused(iodl("checkpoint", *args, timeout=60), mention)


@pytest.mark.parametrize("command", [["read", "--engine", "null", "--steps", "1"], ["generate", "--root", "{tmp}"],
                                     ["datasize", "--accelerators", "8"]])
def test_dataset_commands_refuse_a_checkpoint_only_workload_in_one_line(tmp_path, command):
    command = [str(tmp_path / "ds") if a == "{tmp}" else a for a in command]
    proc = iodl(command[0], "--workload", "llama3-8b", *command[1:], timeout=60)
    _refused(proc, "llama3-8b.toml:11: workload llama3-8b is checkpoint-only")
    assert not (tmp_path / "ds").exists()
