"""DLIO / MLPerf Storage workload files that read object storage (`storage_type: s3`), as their
authors write them: the bucket, the endpoint and DLIO's client options in `storage`, keys and all.

iodl takes the workload's shape from them and reads the bucket given as --root s3://...; it records
that the data is object storage and the endpoint the file names, never the keys the file holds.
Without a bucket to read (and not --engine null) the run is refused in one line: read from a
directory instead, it would measure storage other than the one the file describes.
"""
import json

from tests.helpers import iodl

# shaped as DLIO's S3 configurations are (unet3d's npz samples, pytorch loader), scaled down: 1 MiB samples
CONFIG = """model:
  name: unet3d_s3_small
  type: cnn
framework: pytorch
workflow:
  generate_data: False
  train: True
  checkpoint: False
dataset:
  data_folder: s3://{bucket}/unet3d
  format: npz
  num_files_train: 12
  num_samples_per_file: 1
  record_length_bytes: 1048576
  record_length_bytes_stdev: 0
storage:
  storage_type: s3
  storage_root: {bucket}
  storage_options:
    access_key_id: {key}
    secret_access_key: {secret}
    endpoint_url: {endpoint}
    region: us-east-1
    s3_force_path_style: True
    s3_max_attempts: 5
reader:
  data_loader: pytorch
  batch_size: 4
  read_threads: 2
  file_shuffle: seed
  sample_shuffle: seed
train:
  epochs: 1
  computation_time: 0.01
metric:
  au: 0.90
"""


def _config(tmp_path, seaweed, bucket, secret="in-the-file-" + "x" * 8):
    path = tmp_path / "unet3d_s3_small.yaml"
    path.write_text(CONFIG.format(bucket=bucket, key="file-key", secret=secret, endpoint=seaweed.endpoint))
    return path, secret


def test_the_file_runs_with_the_null_engine_and_says_where_its_data_is(seaweed, bucket, tmp_path):
    config, secret = _config(tmp_path, seaweed, bucket)
    out = tmp_path / "r.json"
    proc = iodl("read", "--workload", str(config), "--engine", "null", "--steps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    read = json.loads(out.read_text())["workload"]["read"]
    assert read["storage"] == "object" and read["endpoint"] == seaweed.endpoint
    assert secret not in proc.stdout + proc.stderr + out.read_text()


def test_without_a_bucket_to_read_the_run_is_one_line(seaweed, bucket, tmp_path):
    config, _ = _config(tmp_path, seaweed, bucket)
    proc = iodl("read", "--workload", str(config), "--steps", "2", "--root", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"iodl: error: workload unet3d_s3_small: its data is in a bucket at {seaweed.endpoint} (DLIO storage_type "
        "s3): give --root s3://BUCKET/PREFIX (docs/s3.md), or --engine null")


def test_generating_it_into_a_directory_is_one_line(seaweed, bucket, tmp_path):
    config, _ = _config(tmp_path, seaweed, bucket)
    proc = iodl("generate", "--workload", str(config), "--root", str(tmp_path / "ds"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"iodl: error: workload unet3d_s3_small: its data is in a bucket at {seaweed.endpoint} (DLIO storage_type "
        "s3): give --root s3://BUCKET/PREFIX (docs/s3.md)")
    assert not (tmp_path / "ds").exists()


def test_scaled_down_against_the_server_reads_every_sample_of_its_steps(seaweed, bucket, tmp_path):
    """generate the file's dataset into the bucket at the endpoint the file names (no --endpoint),
    then train-sync on it: 3 steps x 4 samples of 1 MiB (one per object) each GET once, whole. A
    command-line --endpoint wins over the file's: with the file naming another server (the same
    SeaweedFS's master port: HTTP, no buckets), the run given --endpoint reads, and the run without
    asks that one for the manifest and is refused in one line naming it."""
    config, secret = _config(tmp_path, seaweed, bucket)
    root = f"s3://{bucket}/unet3d"
    gen = iodl("generate", "--workload", str(config), "--root", root, "--quiet", env=seaweed.env())
    assert gen.returncode == 0, gen.stderr
    other = f"http://127.0.0.1:{seaweed.base}"
    config.write_text(config.read_text().replace(seaweed.endpoint, other))
    out = tmp_path / "t.json"
    proc = iodl("read", "--workload", str(config), "--root", root, "--endpoint", seaweed.endpoint,
                "--pattern", "train-sync", "--steps", "3", "--out", str(out), env=seaweed.env())
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    listed = seaweed.client().list_objects_v2(Bucket=bucket, Prefix="unet3d/copy-")["Contents"]
    assert len(listed) == 12 and all(o["Size"] > 1 << 20 for o in listed)   # npz: the sample and its header
    assert doc["train"]["samples"] == 12
    assert [e["url"] for e in doc["endpoints"]] == [seaweed.endpoint]
    # the 12 steps' objects, each read as np.load reads an npz (DLIO's reader): the member, and the zip's
    # directory records read again ahead of it (~8 KiB an object)
    stored = sum(o["Size"] for o in listed)
    assert stored <= doc["total"]["bytes"] <= stored + 12 * (16 << 10), (doc["total"]["bytes"], stored)
    assert secret not in proc.stdout + proc.stderr + out.read_text()
    elsewhere = iodl("read", "--workload", str(config), "--root", root, "--steps", "1", env=seaweed.env())
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.strip().startswith(f"iodl: error: {other}: {root}: no iodl-dataset.json"), elsewhere.stderr


CHECKPOINT = """model:
  name: llama3_8b_s3
  type: transformer
  num_layers: 32
  parallelism: {tensor: 1, pipeline: 1, zero_stage: 0}
  transformer: {vocab_size: 128256, hidden_size: 4096, ffn_hidden_size: 14336, num_attention_heads: 32,
                num_kv_heads: 8}
framework: pytorch
workflow: {generate_data: False, train: False, checkpoint: True}
checkpoint: {checkpoint_folder: s3://ckpt-bkt/llama3-8b, num_checkpoints_write: 10, num_checkpoints_read: 10}
storage:
  storage_type: s3
  storage_root: ckpt-bkt
  storage_options: {endpoint_url: "http://127.0.0.1:9000"}
"""


def test_checkpoints_to_a_bucket_plan_and_are_not_written_into_a_directory(tmp_path):
    """DLIO writes such a file's checkpoints to the bucket; iodl plans them, and refuses to write them
    to a directory instead (other storage than the file's) in one line, before making anything."""
    config = tmp_path / "ck.yaml"
    config.write_text(CHECKPOINT)
    plan = iodl("checkpoint", "--workload", str(config), "--plan", "--ranks", "8", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["ranks"] == 8
    proc = iodl("checkpoint", "--workload", str(config), "--root", str(tmp_path / "ck"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("iodl: error: workload ck: its checkpoints go to a bucket (DLIO storage_type s3): "
                                   "give --root s3://BUCKET/PREFIX and --endpoint URL (docs/s3.md); in a directory "
                                   "they would be other storage. --plan shows what each rank writes")
    assert not (tmp_path / "ck").exists()
