"""iodl checkpoint --root: what it writes, where, and what it never touches (docs/checkpoint.md).

Runs as one process (MLPerf's subset mode: rank 0's share of the model) on the test's own
directories; the figures against throttled devices are in tests/system/test_checkpoint_truth.py."""
import json
import os

import pytest

from iodl import checkpoint
from iodl.comm import SerialComm
from iodl.errors import UsageError
from iodl.cmd.checkpoint import WRITE_PATTERNS
from iodl.patterns.checkpoint import CheckpointRunSpec, execute
from iodl.workload import load_workload
from tests.helpers import REPO, iodl, load_json, transformer_toml

MODEL = transformer_toml("small", layers=1, hidden=256, ffn=512, heads=4, vocab=1000, data=2)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(MODEL)
    return str(path)


def run(model, root, *extra, ranks=0):
    return iodl("checkpoint", "--workload", model, "--root", str(root), *extra, ranks=ranks, timeout=120)


def planned(model, ranks):
    proc = iodl("checkpoint", "--workload", model, "--plan", "--ranks", str(ranks), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_line_error(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_writes_the_planned_files_and_reads_them_back(tmp_path, model):
    root, out = tmp_path / "ckpt", tmp_path / "r.json"
    proc = run(model, root, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    want = planned(model, 1)["files"][0]
    got = sorted(os.listdir(root / "ckpt-000001"))
    assert got == sorted(f["name"] for f in want)
    for f in want:
        assert os.path.getsize(root / "ckpt-000001" / f["name"]) == f["bytes"]
    result = load_json(out)
    assert result["schema"] == "iodl.checkpoint/1" and result["subset"] is True and result["full_ranks"] == 2
    write, read = result["checkpoint"]["write"], result["checkpoint"]["read"]
    assert write["bytes"] == read["bytes"] == sum(f["bytes"] for f in want)
    assert write["fsyncs"] == len(want) and write["rounds"] == read["rounds"] == 1


def test_the_checkpoint_pattern_runs_in_process_from_its_registry(tmp_path, model):
    """The pattern without the command: configured from WRITE_PATTERNS, run on a one-process
    communicator; its bytes are the model's (iodl/checkpoint.py) and the files on disk."""
    pattern = WRITE_PATTERNS["checkpoint"]
    wl = load_workload(model, need_dataset=False)
    root = str(tmp_path / "ckpt")
    spec = pattern.configure(CheckpointRunSpec(workload=wl, ranks=1, roots=(root,), writes=2, reads=3, engine="psync"))
    assert (spec.writes, spec.reads, spec.fsync, spec.layout.subset) == (2, 3, True, True)
    result = execute(SerialComm(), spec, lambda: False)
    want = checkpoint.rank_files(wl.checkpoint_model(), 0, 1)
    latest = os.path.join(root, "ckpt-000002")
    on_disk = {n: os.path.getsize(os.path.join(latest, n)) for n in os.listdir(latest)}
    assert on_disk == dict(want)   # only the latest checkpoint is kept
    write, read = result["checkpoint"]["write"], result["checkpoint"]["read"]
    assert (write["rounds"], read["rounds"]) == (2, 3)
    assert write["bytes"] == 2 * sum(on_disk.values()) and read["bytes"] == 3 * sum(on_disk.values())
    assert write["fsyncs"] == 2 * len(want) and result["pattern"] == "checkpoint" and not result["partial"]
    with pytest.raises(UsageError, match="nothing to do"):
        pattern.configure(CheckpointRunSpec(workload=wl, ranks=1, roots=(root,), writes=0, reads=0))


def test_refuses_roots_it_does_not_own_in_one_line_and_writes_nothing(tmp_path, model):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("a user's file")
    one_line_error(run(model, foreign), "iodl did not write")
    assert os.listdir(foreign) == ["mine.txt"]
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    one_line_error(run(model, tmp_path / "link"), "symlink")
    assert os.listdir(target) == []
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "iodl-dataset.json").write_text("{}")
    one_line_error(run(model, dataset), "dataset")
    assert os.listdir(dataset) == ["iodl-dataset.json"]
    one_line_error(run(model, tmp_path / "no" / "such"), "does not exist")


def test_a_new_checkpoint_removes_only_what_iodl_wrote_in_the_old_one(tmp_path, model):
    root = tmp_path / "ckpt"
    assert run(model, root, "--reads", "0").returncode == 0
    old = root / "ckpt-000001"
    names = sorted(os.listdir(old))
    # a user's file beside iodl's, and one of iodl's files replaced by a link to a victim
    (old / "notes.txt").write_text("keep me")
    victim = tmp_path / "victim"
    victim.write_bytes(b"x" * 4096)
    os.unlink(old / names[0])
    os.symlink(victim, old / names[0])
    proc = run(model, root, "--reads", "0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(old)) == sorted(["notes.txt", names[0]])   # the link left, never followed
    assert victim.read_bytes() == b"x" * 4096 and (old / "notes.txt").read_text() == "keep me"
    assert sorted(os.listdir(root / "ckpt-000002")) == names


def test_reads_back_a_checkpoint_written_by_an_earlier_run_only_if_it_matches(tmp_path, model):
    root, out = tmp_path / "ckpt", tmp_path / "r.json"
    one_line_error(run(model, root, "--writes", "0"), "no complete checkpoint")
    assert run(model, root, "--reads", "0").returncode == 0
    proc = run(model, root, "--writes", "0", "--reads", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    assert result["checkpoint"]["write"] is None and result["checkpoint"]["read"]["rounds"] == 2
    assert result["checkpoint"]["read"]["bytes"] == 2 * planned(model, 1)["total_bytes"]
    one_line_error(run(model, root, "--writes", "0", "--direct"), "direct")   # written buffered: other sizes


@pytest.mark.parametrize("extra, words", [
    (("--writes", "0", "--reads", "0"), ("nothing to do",)),
    (("--ranks", "2"), ("--ranks is for --plan",)),
    (("--engine", "asyncio"), ("reads only",)),
    (("--block-size", "3"), ("--block-size",)),
    (("--iodepth", "0"), ("--iodepth",)),
    (("--plan",), ("--plan does no I/O",)),
])
def test_bad_input_is_one_line(tmp_path, model, extra, words):
    root = tmp_path / "ckpt"
    one_line_error(run(model, root, *extra), *words)
    assert not root.exists()


def test_a_workload_without_a_model_is_refused(tmp_path):
    one_line_error(iodl("checkpoint", "--workload", "tiny", "--root", str(tmp_path / "c")), "no [model]")


def test_bad_input_under_mpi_is_one_line_on_every_rank_and_ends_the_job(tmp_path, model):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("a user's file")
    proc = run(model, foreign, ranks=2)
    assert proc.returncode != 0
    assert proc.stderr.count("iodl did not write") >= 1 and "Traceback" not in proc.stderr
    assert os.listdir(foreign) == ["mine.txt"]


def test_every_key_of_a_real_result_is_in_docs_numbers_and_back(tmp_path, model):
    """docs/numbers.md's checkpoint schema block against a real result with writes and reads."""
    import re

    docs = open(os.path.join(REPO, "docs", "numbers.md")).read()
    section = docs[docs.index("Result file, schema `iodl.checkpoint/1`"):]
    block = section[section.index("```") + 3:section.index("```", section.index("```") + 3)]
    documented = set(re.findall(r'"([A-Za-z_0-9]+)"', block)) - {"iodl", "checkpoint/1"}
    out = tmp_path / "r.json"
    assert run(model, tmp_path / "ckpt", "--out", str(out)).returncode == 0

    def keys(obj):
        if isinstance(obj, dict):
            return set(obj) | {k for v in obj.values() for k in keys(v)}
        if isinstance(obj, list):
            return {k for v in obj for k in keys(v)}
        return set()

    result = load_json(out)
    found = keys({k: v for k, v in result.items() if k != "workload"}) | {"workload"}
    assert found - documented == set(), "keys the docs do not list"
    assert documented - found - {"checkpoint"} == set(), "documented keys a result lacks"
