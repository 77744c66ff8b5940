"""DLIO / MLPerf Storage checkpoint YAML (model.*, checkpoint.*, workflow.checkpoint) as iodl reads
it: files written here, nested as MLPerf Storage's configs/dlio/workload/llama3_*.yaml nest their
keys, plan exactly as the llama3-* built-ins do."""
import json

import pytest

from iodl import checkpoint as C
from iodl.cmd.checkpoint import plan_dict
from iodl.errors import UsageError
from iodl.workload import load_workload
from tests.helpers import iodl

# name in the file -> (built-in, layers, hidden, ffn, heads, kv heads, TP, PP, ZeRO)
MODELS = {
    "llama_8b": ("llama3-8b", 32, 4096, 14336, 32, 8, 1, 1, 3),
    "llama_70b": ("llama3-70b", 80, 8192, 28672, 128, 8, 8, 1, 3),
    "llama_405b": ("llama3-405b", 126, 16384, 53248, 128, 8, 8, 32, 1),
    "llama_1t": ("llama3-1t", 128, 25872, 98304, 192, 32, 8, 64, 1),
}


def checkpoint_yaml(name: str, extra_parallelism: str = "", extra_checkpoint: str = "") -> str:
    _b, layers, hidden, ffn, heads, kv, tp, pp, zero = MODELS[name]
    return f"""# written for iodl's tests in the shape of an MLPerf Storage checkpointing workload file
model:
  name: {name}
  type: transformer
  num_layers: {layers}
  model_datatype: fp16
  optimizer_datatype: fp32
  parallelism:
    tensor: {tp}
    pipeline: {pp}
    zero_stage: {zero}{extra_parallelism}
  transformer:
    vocab_size: 128256
    hidden_size: {hidden}
    ffn_hidden_size: {ffn}
    num_attention_heads: {heads}
    num_kv_heads: {kv}

framework: pytorch

workflow:
  generate_data: False
  train: False
  checkpoint: True

checkpoint:
  checkpoint_folder: checkpoints/{name}
  time_between_checkpoints: 5
  num_checkpoints_write: 10
  num_checkpoints_read: 10
  fsync: True{extra_checkpoint}
"""


def _same_plan(a, b):
    da, db = plan_dict(a), plan_dict(b)
    da.pop("model"), db.pop("model")
    return da == db


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_mlperf_checkpoint_file_plans_as_the_builtin(tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(checkpoint_yaml(name))
    wl = load_workload(str(path), need_dataset=False)
    builtin = load_workload(MODELS[name][0], need_dataset=False)
    assert wl.dataset is None
    assert (wl.model, wl.parallelism, wl.checkpoint) == (builtin.model, builtin.parallelism, builtin.checkpoint)
    assert _same_plan(C.plan(wl.checkpoint_model()), C.plan(builtin.checkpoint_model()))


def test_the_plan_commands_agree_byte_for_byte(tmp_path):
    path = tmp_path / "llama_405b.yaml"
    path.write_text(checkpoint_yaml("llama_405b"))
    a = iodl("checkpoint", "--workload", str(path), "--plan", "--json", timeout=60)
    b = iodl("checkpoint", "--workload", "llama3-405b", "--plan", "--json", timeout=60)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert (da.pop("model"), db.pop("model")) == ("llama_405b", "llama3-405b")
    assert da == db


def test_subset_mode_as_mlpstorage_writes_it(tmp_path):
    # mlpstorage on fewer ranks than the closed run: checkpoint.mode subset, model.parallelism.data set
    path = tmp_path / "sub.yaml"
    path.write_text(checkpoint_yaml("llama_70b", "\n    data: 8", "\n  mode: subset"))
    wl = load_workload(str(path), need_dataset=False)
    assert wl.parallelism.data == 8
    sub = C.plan(wl.checkpoint_model(), 8)
    assert sub.layout.subset and sub.files == C.plan(load_workload("llama3-70b", need_dataset=False)
                                                     .checkpoint_model()).files[:8]


def test_a_training_file_with_checkpoints_carries_them():
    # tests/dlio/unet3d_like.yaml: workflow.checkpoint True, model.model_size, checkpoint after epoch 5, every 2
    wl = load_workload(__file__.replace("test_dlio_checkpoint.py", "unet3d_like.yaml"))
    assert wl.dataset is not None and (wl.model.type, wl.model.model_size) == ("cnn", 499_153_191)
    assert (wl.checkpoint.after_epoch, wl.checkpoint.every_epochs, wl.checkpoint.fsync) == (5, 2, False)


@pytest.mark.parametrize("edit,says", [
    (lambda t: t.replace("  num_layers: 32\n", "  num_layers: 32\n  hidden_size: 4096\n"),
     ":6: [model] hidden_size: not honoured: DLIO reads it under model.transformer only"),
    (lambda t: t.replace("    num_kv_heads: 8", "    num_kv_head: 8"),
     ":17: [model] transformer.num_kv_head: not a DLIO key iodl knows (did you mean transformer.num_kv_heads?)"),
    (lambda t: t.replace("    tensor: 1", "    tensor: 0"), ":9: [model] parallelism.tensor: must be a positive"),
    (lambda t: t.replace("zero_stage: 3", "zero_stage: 5"), ":11: [model] parallelism.zero_stage: must be one of"),
    (lambda t: t.replace("name: llama_8b", "name: custom") + "  mode: subset\n",
     ":32: [checkpoint] mode: subset needs model.parallelism.data"),
    (lambda t: t.replace("  checkpoint: True", "  checkpoint: False"),
     ":23: [workflow] train: False: iodl read emulates training (train: true); this file neither trains nor"),
    (lambda t: t.replace("  fsync: True", "  fsync: yes please"), ":31: [checkpoint] fsync: must be True or False"),
])
def test_bad_checkpoint_keys_are_one_line_with_file_and_line(tmp_path, edit, says):
    path = tmp_path / "w.yaml"
    path.write_text(edit(checkpoint_yaml("llama_8b")))
    with pytest.raises(UsageError) as err:
        load_workload(str(path), need_dataset=False)
    msg = str(err.value)
    assert msg.startswith("w.yaml" + says), msg
    assert "\n" not in msg


def test_reading_a_checkpoint_file_is_one_line(tmp_path):
    path = tmp_path / "llama_8b.yaml"
    path.write_text(checkpoint_yaml("llama_8b"))
    proc = iodl("read", "--workload", str(path), "--engine", "null", "--steps", "1", timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("iodl: error: llama_8b.yaml:23: [workflow] train: False")
    assert "iodl checkpoint" in lines[0]
