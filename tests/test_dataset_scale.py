"""Datasets of many small files: subfolders, generation speed, metadata that does not grow per rank."""
import os

import numpy as np
import pytest

from iodl import dataset as D
from iodl import workload as W
from iodl.comm import SerialComm

COMM = SerialComm()
RAW = """
[workload]
name = "smallfiles"
[dataset]
format = "raw"
files = {files}
samples_per_file = 1
sample_size = "{size}"
{extra}
[train]
batch_size = 4
compute_time_s = 0.0
"""


def raw(tmp_path, files, size="4KiB", extra=""):
    p = tmp_path / f"raw-{files}.toml"
    p.write_text(RAW.format(files=files, size=size, extra=extra))
    return W.load_workload(str(p))


def entries_per_dir(root):
    return {os.path.relpath(d, root): len(dirs) + len(files) for d, dirs, files in os.walk(root)}


def test_subfolders_spread_files_by_index_and_read_back(tmp_path):
    root = str(tmp_path / "ds")
    D.generate(raw(tmp_path, 30, "100B"), [root], COMM, copies=2, subfolders=4)
    ds = D.open_dataset(root)
    assert len(ds.shards) == 60
    for i, s in enumerate(ds.shards):
        copy, folder, name = os.path.relpath(s.path, root).split(os.sep)
        assert copy == D.copy_dir(i // 30) and folder == str((i % 30) % 4)
        assert name == D.shard_name("raw", i % 30, 30) and os.path.getsize(s.path) == s.size == 100
    assert entries_per_dir(os.path.join(root, "copy-0000")) == {".": 4, "0": 8, "1": 8, "2": 7, "3": 7}


def test_subfolders_from_a_dlio_yaml(tmp_path):
    y = tmp_path / "w.yaml"
    y.write_text("model: {name: x}\nframework: pytorch\nworkflow: {generate_data: true, train: true}\n"
                 "dataset: {format: npz, num_files_train: 12, num_samples_per_file: 1, record_length_bytes: 64,\n"
                 "          num_subfolders_train: 3}\nreader: {batch_size: 2}\ntrain: {computation_time: 0.0}\n")
    wl = W.load_workload(str(y))
    assert wl.dataset.subfolders == 3


def test_a_root_continues_only_in_its_own_layout(tmp_path):
    from iodl.errors import UsageError

    root = str(tmp_path / "ds")
    D.generate(raw(tmp_path, 6, "10B"), [root], COMM, subfolders=2)
    with pytest.raises(UsageError, match="2 folder"):
        D.generate(raw(tmp_path, 6, "10B"), [root], COMM, subfolders=3)
    assert D.generate(raw(tmp_path, 6, "10B"), [root], COMM, subfolders=2).shards_skipped == 6


def test_no_generated_folder_holds_more_than_10000_entries(tmp_path):
    root = str(tmp_path / "ds")
    D.generate(raw(tmp_path, 20_001, "1B"), [root], COMM)
    counts = entries_per_dir(root)
    assert max(counts.values()) <= 10_000, sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    assert counts["copy-0000"] == 3 and sum(counts.values()) - counts["."] - 3 == 20_001
    ds = D.open_dataset(root)
    assert len(ds.shards) == 20_001 and all(os.path.exists(ds.shards[i].path) for i in (0, 9_999, 20_000))
