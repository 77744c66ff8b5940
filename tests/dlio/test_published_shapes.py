"""The shapes of the configurations MLPerf Storage submitters ran, read as the DLIO of their round
read them. Each YAML here is written for these tests after a published run's resolved config (the
comment names the submission it is modelled on); bench/check_published_configs.py walks them all
(bench/results/published-configs.md)."""
import json
import os
import re

import pytest

from iodl import checkpoint as C
from iodl.errors import UsageError
from iodl.workload import load_workload
from tests.helpers import iodl, load_json

GiB = 2 ** 30

# mlcommons/storage_results_v3.0@068d91f closed/SAMSUNG/results/MEMORY_AE/training/unet3d/run/
# 20260720_155319/dlio_config/config.yaml: mlpstorage's skip_listing, reader.odirect, 32 read threads
V3_UNET3D_ODIRECT = """workload:
  model:
    name: unet3d
    type: cnn
    model_size: 499153191
  framework: pytorch
  workflow:
    generate_data: false
    train: true
    checkpoint: false
  dataset:
    data_folder: /mnt/nvme/training/unet3d
    format: npz
    num_files_train: 2800
    num_samples_per_file: 1
    record_length_bytes: 146600628
    record_length_bytes_stdev: 68341808
    record_length_bytes_resize: 2097152
    num_subfolders_train: 2
    skip_listing: true
    listing_validation_interval: 10
  reader:
    data_loader: pytorch
    batch_size: 7
    read_threads: 32
    multiprocessing_context: fork
    file_shuffle: seed
    sample_shuffle: seed
    odirect: true
  train:
    epochs: 5
    computation_time: 0.162
  checkpoint:
    checkpoint_folder: checkpoints/unet3d
    checkpoint_after_epoch: 5
    epochs_between_checkpoints: 2
  metric:
    au: 0.9
"""

# ... closed/Nebius/results/nebius-s3-retinanet-32nx24-cm64/training/retinanet/run/20260722_142556/
# dlio_config/config.yaml: object storage, as mlpstorage --object writes it
V3_RETINANET_S3 = """workload:
  model:
    name: retinanet
    type: cnn
  framework: pytorch
  workflow:
    generate_data: false
    train: true
    checkpoint: false
  dataset:
    data_folder: s3://bucket/retinanet
    format: jpeg
    num_files_train: 340451
    num_samples_per_file: 1
    record_length_bytes: 322957
    num_subfolders_train: 34
    skip_listing: true
    listing_validation_interval: 10000
  reader:
    data_loader: pytorch
    batch_size: 24
    read_threads: 2
    file_shuffle: seed
    sample_shuffle: seed
  train:
    epochs: 8
    computation_time: 0.04755
  metric:
    au: 0.85
  storage:
    storage_type: s3
    storage_root: bucket
    storage_options:
      storage_library: s3dlio
      uri_scheme: s3
    s3_force_path_style: true
"""

# ... closed/SAMSUNG/results/MEMORY_AE/checkpointing/llama3-8b/20260721_000424/dlio_config/config.yaml,
# whose summary.json says num_accelerators 8, checkpoint_size_GB 104.70452117919922
V3_LLAMA3_8B = """workload:
  model:
    name: llama_8b
    type: transformer
    num_layers: 32
    model_datatype: fp16
    optimizer_datatype: fp32
    parallelism:
      pipeline: 1
      tensor: 1
      zero_stage: 3
    transformer:
      vocab_size: 128256
      hidden_size: 4096
      ffn_hidden_size: 14336
      num_attention_heads: 32
      num_kv_heads: 8
  framework: pytorch
  workflow:
    generate_data: false
    train: false
    checkpoint: true
  checkpoint:
    checkpoint_folder: /mnt/nvme/checkpoint/llama3-8b
    time_between_checkpoints: 5
    num_checkpoints_write: 10
    num_checkpoints_read: 10
    fsync: true
"""

# ... closed/SAMSUNG/results/MEMORY_AE/training/unet3d/datagen/20260720_152253/dlio_config/config.yaml
# (the same run's dataset section, generate_data true, train false, and no reader or train sections)
V3_UNET3D_DATAGEN = V3_UNET3D_ODIRECT.replace("generate_data: false\n    train: true", "generate_data: true\n    train: false") \
    .split("  reader:")[0]

# mlcommons/storage_results_v1.0@64c2ce4 Closed/DDN/results/AI400X2T_24x14TiB_nvme_8xNDR200_16clients/
# cosmoflow-h100/runs/run1/c002/configs/config.yaml: DLIO 2.0.0's key names, prefetch_size 0,
# computation_threads, a storage section
V1_COSMOFLOW = """workload:
  model: cosmoflow
  framework: tensorflow
  workflow:
    generate_data: false
    train: true
    profiling: false
  dataset:
    data_folder: /lustre/datagen_cosmoflow_h100
    num_files_train: 29761
    num_samples_per_file: 1
    record_length: 2828486
    record_length_stdev: 71311
    format: tfrecord
  reader:
    data_loader: tensorflow
    read_threads: 2
    batch_size: 1
    file_shuffle: seed
    sample_shuffle: seed
    shuffle_size: 2
    prefetch_size: 0
    computation_threads: 4
    transfer_size: 0
  train:
    epochs: 5
    computation_time: 0.0035
  metric:
    au: 0.7
  storage:
    storage_type: local_fs
    storage_root: /lustre
  checkpoint:
    checkpoint_folder: /lustre/checkpoint_cosmoflow_h100
  profiling:
    profiler: none
"""

# mlcommons/storage_results_v0.5@92b88d7 closed/ANL/results/polaris-lustre-Nacc8-Nhosts128/bert/run0/
# x3009c0s7b1n0/.hydra/config.yaml: workflow.debug, total_training_steps, transfer_size, a checkpoint
# every 250 steps of a 4,034,713,312-byte model
V05_BERT = """workload:
  model: bert
  framework: tensorflow
  workflow:
    generate_data: false
    train: true
    debug: false
    checkpoint: true
  dataset:
    data_folder: ./data/bert
    format: tfrecord
    num_files_train: 219
    num_samples_per_file: 3135
    record_length: 2500
    file_prefix: part
  train:
    seed_change_epoch: false
    computation_time: 0.968
    total_training_steps: 1000
  reader:
    data_loader: tensorflow
    read_threads: 1
    computation_threads: 1
    transfer_size: 262144
    batch_size: 48
    file_shuffle: seed
    sample_shuffle: seed
  checkpoint:
    checkpoint_folder: checkpoints/bert
    steps_between_checkpoints: 250
    model_size: 4034713312
"""


def _file(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_v3_odirect_unet3d_runs_with_its_numbers_in_the_result(tmp_path):
    path = _file(tmp_path, V3_UNET3D_ODIRECT)
    out = tmp_path / "r.json"
    proc = iodl("read", "--workload", path, "--engine", "null", "--steps", "3", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    w = load_json(out)["workload"]
    assert (w["dataset"]["files"], w["dataset"]["sample_size"], w["dataset"]["subfolders"]) == (2800, 146600628, 2)
    assert (w["train"]["batch_size"], w["train"]["compute_time_s"], w["read"]["read_threads"]) == (7, 0.162, 32)
    assert (w["read"]["direct"], w["read"]["skip_listing"], w["read"]["listing_validation_interval"]) == (True, True, 10)
    # the flat model no DLIO reads (model.model_size) changes nothing: no checkpoint
    assert w["metric"]["au_threshold"] == 0.9 and "model" not in w


def test_a_v3_object_storage_file_is_read_as_a_bucket_and_data_generation_is_one_line(tmp_path):
    # a v3.0 s3 submission's training file: its shape, and that its data is in a bucket (docs/s3.md)
    w = load_workload(_file(tmp_path, V3_RETINANET_S3))
    assert (w.dataset.files, w.dataset.sample_size, w.dataset.subfolders) == (340451, 322957, 34)
    assert (w.read.storage, w.read.endpoint, w.read.direct) == ("object", None, False)
    with pytest.raises(UsageError) as err:
        load_workload(_file(tmp_path, V3_UNET3D_DATAGEN, "datagen.yaml"))
    assert "[workflow] train: False: iodl read emulates training (train: true); this file neither" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_v3_llama3_8b_plans_dlios_checkpoint_size_and_schedule(tmp_path):
    proc = iodl("checkpoint", "--workload", _file(tmp_path, V3_LLAMA3_8B), "--plan", "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    # DLIO's summary.json: checkpoint_size_GB is the ranks' bytes / 2^30
    assert d["ranks"] == 8 and abs(d["total_bytes"] / GiB - 104.70452117919922) < 1e-9
    assert (d["writes"], d["reads"], d["fsync"]) == (10, 10, True)


def test_v1_and_v0_5_files_are_read_as_their_dlio_read_them(tmp_path):
    w = load_workload(_file(tmp_path, V1_COSMOFLOW))
    assert (w.dataset.files, w.dataset.sample_size, w.dataset.sample_size_stdev) == (29761, 2828486, 71311)
    assert (w.train.prefetch, w.read.computation_threads, w.read.transfer_size, w.read.read_threads) == (0, 4, 0, 2)
    assert w.metric.au_threshold == 0.7 and w.read.direct is False
    bert = _file(tmp_path, V05_BERT, "bert.yaml")
    w = load_workload(bert, dlio_version="0.5")
    assert (w.train.total_steps, w.read.transfer_size, w.dataset.samples_per_file) == (1000, 262144, 3135)
    # DLIO 0.5 wrote the model as one .bin of model_size bytes from rank 0, every 250 steps
    assert w.checkpoint.every_steps == 250
    assert C.plan(w.checkpoint_model(), 4).files == [[("model.bin", 4_034_713_312)], [], [], []]


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_published_configs_check_counts_and_fails_on_a_mismatch(tmp_path):
    """bench/check_published_configs.py over a tree in the results repositories' layout: the
    checkpoint file plans its summary's size, the s3 training file runs carrying its numbers and
    `[read] storage: object`, the data-generation file is refused; a summary whose size iodl does
    not plan is a mismatch (exit 1)."""
    import subprocess
    import sys

    run = "closed/X/results/sys/checkpointing/llama3-8b/1/"
    _tree(tmp_path, {
        run + "dlio_config/config.yaml": V3_LLAMA3_8B,
        run + "summary.json": json.dumps({"num_accelerators": 8, "metric": {"checkpoint_size_GB": 104.70452117919922}}),
        "closed/X/results/sys/training/retinanet/run/2/dlio_config/config.yaml": V3_RETINANET_S3,
        "closed/X/results/sys/training/unet3d/datagen/3/dlio_config/config.yaml": V3_UNET3D_DATAGEN,
        "closed/X/code/dlio_benchmark/configs/config.yaml": "defaults:\n  - workload: default\n",
    })
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
    script = [sys.executable, os.path.join(bench, "check_published_configs.py"), str(tmp_path), "--round", "v3.0"]
    proc = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = dict(re.findall(r"^\| ([a-z-]+) \| (\d+) \|$", proc.stdout, re.M))
    assert counts == {"run": "1", "planned": "1", "refused-datagen": "1", "refused-object": "0", "mismatch": "0"}
    (tmp_path / run / "summary.json").write_text(json.dumps({"num_accelerators": 8,
                                                             "metric": {"checkpoint_size_GB": 104.71}}))
    proc = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "checkpoint_size_GB 104.71 at 8 ranks" in proc.stdout, proc.stdout
