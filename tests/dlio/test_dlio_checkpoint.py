"""DLIO / MLPerf Storage checkpoint YAML (model.*, checkpoint.*, workflow.checkpoint) as iodl reads
it: files written here, nested as MLPerf Storage's configs/dlio/workload/llama3_*.yaml nest their
keys, plan exactly as the llama3-* built-ins do."""
import json

import pytest

from iodl import checkpoint as C
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
    da, db = a.to_dict(), b.to_dict()
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
    # tests/dlio/unet3d_like.yaml: workflow.checkpoint True, model.model_size, checkpoint after epoch 5, every 2.
    # No DLIO reads model.model_size (DLIO since 2025 reads model.model_size_bytes): the checkpoint DLIO
    # writes for this file is its default 10,240-byte flat model, from rank 0
    wl = load_workload(__file__.replace("test_dlio_checkpoint.py", "unet3d_like.yaml"))
    assert wl.dataset is not None and (wl.model.type, wl.model.model_size, wl.model.layout) == ("cnn", 10240, "dlio")
    assert (wl.checkpoint.after_epoch, wl.checkpoint.every_epochs, wl.checkpoint.fsync) == (5, 2, False)
    assert C.plan(wl.checkpoint_model(), 4).files == [[("model_states-0.pt", 10240)], [], [], []]


# MLPerf Storage v1.0's unet3d, as submitted (modelled on mlcommons/storage_results_v1.0@64c2ce4
# Closed/DDN/results/AI400X2T_24x14TiB_nvme_8xNDR200_18clients/unet3d-h100/runs/*/configs/config.yaml;
# v0.5's is the same shape: mlcommons/storage_results_v0.5@92b88d7 closed/ANL/results/
# polaris-lustre-Nacc8-Nhosts1/unet3d/run1/*/.hydra/config.yaml)
LEGACY_UNET3D = """workload:
  model: unet3d
  framework: pytorch
  workflow:
    generate_data: false
    train: true
    checkpoint: true
  dataset:
    data_folder: /data/unet3d
    format: npz
    num_files_train: 16
    num_samples_per_file: 1
    record_length: 146600628
    record_length_stdev: 68341808
    record_length_resize: 2097152
  reader:
    data_loader: pytorch
    batch_size: 7
    read_threads: 4
    file_shuffle: seed
    sample_shuffle: seed
  train:
    epochs: 5
    computation_time: 0.323
  checkpoint:
    checkpoint_folder: checkpoints/unet3d
    checkpoint_after_epoch: 5
    epochs_between_checkpoints: 2
    model_size: 499153191
  metric:
    au: 0.9
"""


@pytest.mark.parametrize("version,files", [
    # DLIO 2fcdbfa4 (v1.0.1's submodule): rank 0 torch.saves {"a": int8[model_size]} and, with the
    # default num_layers 1 and layer_parameters [17371, 24740228], one layer file
    (None, [("model-0.pt", 499_153_191), ("layer-0-0.pt", 17371 + 24740228)]),
    ("1.0", [("model-0.pt", 499_153_191), ("layer-0-0.pt", 17371 + 24740228)]),
    # DLIO 60782fe7 (v0.5's submodule): rank 0 writes "x" * model_size to model-E-S.bin
    ("0.5", [("model.bin", 499_153_191)]),
    # the DLIO of later rounds does not read checkpoint.model_size: its default 10,240 B
    ("3.0", [("model_states-0.pt", 10240)]),
])
def test_a_v1_0_unet3d_file_plans_the_checkpoint_that_rounds_dlio_wrote(tmp_path, version, files):
    path = tmp_path / "config.yaml"
    path.write_text(LEGACY_UNET3D)
    wl = load_workload(str(path), need_dataset=False, dlio_version=version)
    p = C.plan(wl.checkpoint_model(), 8)
    assert p.files[0] == files and all(not fs for fs in p.files[1:])


def test_a_v1_0_datagen_file_is_refused_as_data_generation_only(tmp_path):
    # mlcommons/storage_results_v1.0@64c2ce4 Closed/DDN/generation_logs/*/unet3d-a100/configs/config.yaml:
    # generate_data true, train false, checkpoint true. DLIO 2.0.0 and before: generate_only
    path = tmp_path / "config.yaml"
    path.write_text(LEGACY_UNET3D.replace("generate_data: false\n    train: true", "generate_data: true\n    train: false"))
    with pytest.raises(UsageError) as err:
        load_workload(str(path), need_dataset=False)
    msg = str(err.value)
    assert msg.startswith("config.yaml:6: [workflow] train: False: a data-generation file: DLIO 2.0.0 and before "
                          "(MLPerf Storage v0.5, v1.0) only generated data") and "\n" not in msg, msg


@pytest.mark.parametrize("edit,says", [
    (lambda t: t.replace("  num_layers: 32\n", "  num_layers: 32\n  hidden_size: 4096\n"),
     ":6: [model] hidden_size: not honoured: no DLIO version reads it here, only under model.transformer"),
    (lambda t: t.replace("    num_kv_heads: 8", "    num_kv_head: 8"),
     ":17: [model] transformer.num_kv_head: not a key any DLIO version reads (did you mean transformer.num_kv_heads?)"),
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


def test_the_plan_json_says_writes_reads_and_fsync_of_a_training_file(tmp_path):
    # a v1.0 unet3d training file: 5 epochs, a checkpoint after epoch 5 then every 2: one write, no
    # read back, no fsync (DLIO's default: the file gives none)
    path = tmp_path / "config.yaml"
    path.write_text(LEGACY_UNET3D)
    proc = iodl("checkpoint", "--workload", str(path), "--plan", "--json", "--ranks", "8", timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["total_bytes"], d["per_rank_bytes"][1:], d["writes"], d["reads"], d["fsync"]) == \
        (499_153_191 + 24_757_599, [0] * 7, 1, 0, False)


def test_dlio_1_0s_every_rank_checkpoint_is_refused_with_its_line(tmp_path):
    # DLIO 2.0.0's checkpoint.type all_ranks had every rank write the model (base_checkpointing.py);
    # iodl plans rank_zero, DLIO's default, which every published file uses
    path = tmp_path / "config.yaml"
    path.write_text(LEGACY_UNET3D.replace("    model_size: 499153191\n", "    model_size: 499153191\n    type: all_ranks\n"))
    with pytest.raises(UsageError) as err:
        load_workload(str(path), need_dataset=False)
    assert str(err.value).startswith("config.yaml:30: [checkpoint] type: all_ranks: DLIO 1.0's every-rank"), err.value
