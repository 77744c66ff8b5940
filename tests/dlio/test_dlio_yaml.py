"""DLIO / MLPerf Storage workload YAML as iodl reads it (iodl/dlio.py), with files written for
these tests in the shapes DLIO uses (a workload file, a run's resolved config)."""
import os
import re

import pytest

from iodl import dlio
from iodl.errors import UsageError
from iodl.workload import load_workload
from tests.helpers import iodl, load_json

HERE = os.path.dirname(os.path.abspath(__file__))
UNET = os.path.join(HERE, "unet3d_like.yaml")
RESNET = os.path.join(HERE, "resnet_like_resolved.yaml")
DOC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "dlio.md")


def test_a_workload_file_becomes_its_numbers():
    w = load_workload(UNET)
    assert (w.name, w.pattern) == ("unet3d_like", "train-sync")
    d, t = w.dataset, w.train
    assert (d.format, d.files, d.samples_per_file, d.sample_size, d.sample_size_stdev) == ("npz", 24, 1, 65536, 8192)
    assert (t.batch_size, t.compute_time_s, t.epochs, t.shuffle, t.seed) == (3, 0.05, 2, "file+sample", 123)
    assert w.read.read_threads == 4 and w.metric.au_threshold == 0.90


def test_a_resolved_config_with_old_key_names_and_a_fractional_record():
    w = load_workload(RESNET)
    # record_length (DLIO 2.0.0's name) honoured; 20000.07 bytes rounded to whole bytes
    assert (w.dataset.files, w.dataset.samples_per_file, w.dataset.sample_size) == (8, 40, 20000)
    # no shuffle keys: DLIO's default is no shuffling, not iodl's
    assert (w.train.batch_size, w.train.compute_time_s, w.train.shuffle, w.train.epochs) == (16, 0.02, "none", 1)


def _variant(tmp_path, old: str, new: str) -> str:
    text = open(UNET).read()
    assert old in text
    path = tmp_path / "w.yaml"
    path.write_text(text.replace(old, new))
    return str(path)


def _line_of(path: str, needle: str) -> int:
    return next(i for i, line in enumerate(open(path), start=1) if needle in line)


@pytest.mark.parametrize("old,new,needle,says", [
    ("record_length_bytes: 65536", "record_length_byte: 65536", "record_length_byte:",
     "[dataset] record_length_byte: not a key any DLIO version reads (did you mean record_length_bytes?)"),
    ("batch_size: 3", "batch_size: three", "batch_size: three", "[reader] batch_size: must be a number"),
    ("format: npz", "format: csv", "format: csv", "[dataset] format: iodl lays out"),
    ("computation_time: 0.05", "computation_time: {mean: 0.05, stdev: 0.01}", "computation_time",
     "[train] computation_time: iodl's compute is a fixed sleep"),
    ("  train: True", "  train: False", "train: False", "[workflow] train: False: iodl read emulates training"),
    ("metric:", "metrics:", "metrics:", "metrics: unknown section (did you mean metric?)"),
    ("  epochs: 2", "  epochs: 2\n  epochs: 3", "epochs: 3", "epochs: given twice (first at line"),
    ("  au: 0.90", "  au: 1.5", "au: 1.5", "[metric] au:"),
])
def test_a_bad_key_is_one_line_with_file_and_line(tmp_path, old, new, needle, says):
    path = _variant(tmp_path, old, new)
    with pytest.raises(UsageError) as err:
        load_workload(path)
    msg = str(err.value)
    assert msg.startswith(f"w.yaml:{_line_of(path, needle)}: "), msg
    assert says in msg and "\n" not in msg


def test_the_same_workload_in_both_forms_is_the_same(tmp_path):
    body = "".join("  " + line if line.strip() else line for line in open(UNET) if not line.startswith("#"))
    path = tmp_path / "resolved.yaml"
    path.write_text("workload:\n" + body + "hydra:\n  run:\n    dir: x\n")
    a, b = load_workload(UNET), load_workload(str(path))
    assert (a.dataset, a.train, a.read, a.metric, a.pattern) == (b.dataset, b.train, b.read, b.metric, b.pattern)


def test_the_docs_table_is_the_key_table():
    """docs/dlio.md lists every key iodl knows, with what it does, exactly as iodl/dlio.py has them."""
    rows = set()
    for line in open(DOC, encoding="utf-8"):
        m = re.match(r"\| `([a-z_]+)` \| `?([a-z_0-9.]*)`? \| (honoured|informational|refused) \| (.*) \|$", line.strip())
        if m:
            rows.add((m.group(1), m.group(2), m.group(3), m.group(4)))
    assert rows == {(s, k, how, why.replace("|", "\\|")) for s, k, how, why in dlio.key_table()}


def test_null_engine_runs_a_yaml_workload_under_mpi(tmp_path):
    out = tmp_path / "r.json"
    proc = iodl("read", "--workload", UNET, "--engine", "null", "--steps", "3", "--out", str(out), ranks=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = load_json(out)
    assert r["workload"]["dataset"]["sample_size"] == 65536 and r["workload"]["train"]["batch_size"] == 3
    assert r["train"]["steps"] == 3 and r["train"]["samples"] == 2 * 3 * 3


def test_generate_then_read_a_yaml_workload_with_a_real_engine(tmp_path):
    root = tmp_path / "ds"
    gen = iodl("generate", "--workload", RESNET, "--root", str(root), "--quiet", timeout=120)
    assert gen.returncode == 0, gen.stderr
    out = tmp_path / "r.json"
    proc = iodl("read", "--root", str(root), "--engine", "psync", "--out", str(out), ranks=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = load_json(out)
    assert r["workload"]["name"] == "resnet_like_resolved"          # the dataset's own workload
    assert r["train"]["samples"] == 8 * 40 // (2 * 16) * 2 * 16     # one epoch, whole batches per rank
    assert r["total"]["bytes"] >= 8 * 40 * 20000


def test_dlio_2_0_0s_model_given_by_name_alone_is_read(tmp_path):
    """DLIO 2.0.0's bundled files say `model: unet3d`, a name and no mapping."""
    text = open(UNET).read()
    block = "model:\n  name: unet3d\n  type: cnn\n  model_size: 499153191\n"
    assert block in text
    path = tmp_path / "w.yaml"
    path.write_text(text.replace(block, "model: unet3d\n"))
    wl = load_workload(str(path))
    assert wl.dataset.files == load_workload(UNET).dataset.files


def test_object_storage_is_a_bucket_aistore_refused_and_local_fs_read(tmp_path):
    # DLIO's storage section: s3 is a bucket (read from --root s3://...), aistore a store iodl does not speak;
    # local_fs is a path
    text = open(UNET).read() + "\nstorage:\n  storage_type: {}\n  storage_root: /data\n"
    path = tmp_path / "w.yaml"
    path.write_text(text.format("s3") + "  storage_options: {endpoint_url: 'http://s3.example:9000'}\n")
    w = load_workload(str(path))
    assert (w.read.storage, w.read.endpoint, w.read.direct) == ("object", "http://s3.example:9000", False)
    assert w.dataset == load_workload(UNET).dataset
    path.write_text(text.format("aistore"))
    with pytest.raises(UsageError) as err:
        load_workload(str(path))
    assert str(err.value).startswith(f"w.yaml:{_line_of(str(path), 'storage_type')}: [storage] storage_type: ")
    assert "aistore is an object store iodl does not speak" in str(err.value)
    assert "\n" not in str(err.value)
    for posix, direct in (("local_fs", False), ("parallel_fs", False), ("direct_fs", True)):
        path.write_text(text.format(posix))
        w = load_workload(str(path))
        assert w.dataset == load_workload(UNET).dataset and w.read.direct is direct
    # mlpstorage --o-direct's other form: the fork's local readers go O_DIRECT on uri_scheme direct
    path.write_text(text.format("local_fs") + "  storage_options: {storage_library: s3dlio, uri_scheme: direct}\n")
    assert load_workload(str(path)).read.direct is True


def test_a_file_without_a_dataset_trains_on_dlios_default_dataset(tmp_path):
    # DLIO's own llama files that train and checkpoint give no dataset: DLIO then reads its
    # defaults (utils/config.py: tfrecord, 8 files of 1 sample of 64 KiB), and so does iodl
    path = tmp_path / "w.yaml"
    path.write_text("model:\n  name: m\n  model_size: 4096\nworkflow:\n  train: True\n  checkpoint: True\n"
                    "reader:\n  batch_size: 2\n")
    d = load_workload(str(path)).dataset
    assert (d.format, d.files, d.samples_per_file, d.sample_size) == ("tfrecord", 8, 1, 65536)


def test_the_reader_keys_that_change_the_io_land_in_the_spec(tmp_path):
    # the keys of a v3.0 unet3d run (odirect, a transfer_size, listing skipped) and a step bound
    text = open(UNET).read()
    text = text.replace("  read_threads: 4\n", "  read_threads: 4\n  odirect: true\n  transfer_size: 262144\n"
                        "  computation_threads: 3\n  prefetch_size: 5\n")
    text = text.replace("  epochs: 2\n", "  epochs: 2\n  total_training_steps: 7\n")
    text = text.replace("dataset:\n", "dataset:\n  skip_listing: 'True'\n  listing_validation_interval: 50\n")
    path = tmp_path / "w.yaml"
    path.write_text(text)
    w = load_workload(str(path))
    # prefetch: the pytorch loader's 4 workers, each ceil(5 / 4) = 2 batches ahead (DLIO's prefetch_factor)
    assert (w.read.direct, w.read.transfer_size, w.read.computation_threads, w.train.prefetch) == (True, 262144, 3, 8)
    assert (w.train.total_steps, w.read.skip_listing, w.read.listing_validation_interval) == (7, True, 50)
    d = w.to_dict()
    assert d["read"]["direct"] is True and d["read"]["transfer_size"] == 262144 and d["train"]["total_steps"] == 7
    # a file that gives none: DLIO's defaults (buffered, transfer_size not given, no step bound)
    w = load_workload(UNET)
    assert (w.read.direct, w.read.transfer_size, w.train.total_steps, w.read.skip_listing) == (False, None, 0, False)


@pytest.mark.parametrize("section,add", [
    # mlpstorage's overrides in v3.0 resolved configs, and DLIO 2.0.0's workflow.debug (v0.5 files)
    ("dataset:\n", "dataset:\n  skip_listing: True\n  listing_validation_interval: 1\n  total_disk_bytes: 5000000\n"),
    ("workflow:\n", "workflow:\n  debug: False\n"),
    ("reader:\n", "reader:\n  write_threads: 4\n  file_access: multi\n  transformed_record_dims: [3, 4]\n"),
    ("metric:", "output:\n  metric:\n    exclude_start_steps: 1\n    exclude_end_steps: 0\nstorage:\n"
                "  storage_type: parallel_fs\n  post_generation_settle_seconds: 5\nmetric:"),
])
def test_keys_dlio_or_mlpstorage_write_are_accepted(tmp_path, section, add):
    path = _variant(tmp_path, section, add)
    w = load_workload(path)
    assert w.dataset == load_workload(UNET).dataset


def test_dlios_older_data_reader_section_is_its_reader(tmp_path):
    # DLIO reads `data_reader:` where a file has no `reader:` (utils/config.py LoadConfig, every version)
    path = _variant(tmp_path, "reader:", "data_reader:")
    w, ref = load_workload(path), load_workload(UNET)
    assert (w.train, w.read) == (ref.train, ref.read)
