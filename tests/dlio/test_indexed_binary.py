"""indexed_binary and MLPerf Storage's dlrm: samples read one at a time at their offsets, one
file's samples shared by the ranks, every sample once per epoch (iodl.training.SampleAccessStream);
the dlrm workload file read as it is; a scaled-down dlrm dataset generated and read under MPI.

The workload files here are written from dlrm's numbers (dlio_benchmark/configs/workload/dlrm.yaml
in mlcommons/DLIO_local_changes, the DLIO MLPerf Storage v3.0 runs): one file of 1,024 samples of
671,088,640 B, batch 1, sample_shuffle random, computation_time 0.064296 s, one epoch."""
import os

import numpy as np
import pytest

from iodl import _native
from iodl.formats import Reading
from iodl.runspec import RunSpec
from iodl.training import SampleAccessStream, sample_reads
from iodl.workload import load_workload
from tests.helpers import device_bytes_of_direct_read, iodl, load_json, mpiexec

DLRM = """\
model:
  name: dlrm
framework: pytorch
workflow:
  generate_data: False
  train: True
dataset:
  data_folder: data/dlrm
  format: indexed_binary
  num_files_train: {files}
  num_files_eval: 1
  num_samples_per_file: {samples}
  record_length_bytes: {record}
reader:
  data_loader: pytorch
  batch_size: 1
  sample_shuffle: random
train:
  epochs: {epochs}
  computation_time: {compute}
"""


def dlrm_yaml(tmp_path, name="dlrm.yaml", files=1, samples=1024, record=671088640, epochs=1, compute=0.064296):
    path = tmp_path / name
    path.write_text(DLRM.format(files=files, samples=samples, record=record, epochs=epochs, compute=compute))
    return str(path)


# ---------------------------------------------------------------- the order, all ranks simulated ----

BS = 4096


def _runs(shuffle, shards=1, per_shard=40, ranks=2, epochs=2, batch=3, seed=5, direct=False):
    """Every rank's stream for `epochs` epochs: per rank, per epoch, the (shard, sample) pairs taken
    in order with each one's read rows; and each rank's own check. Sample sizes vary (1..9000 B)."""
    sizes = np.random.default_rng(3).integers(1, 9000, size=(shards, per_shard))
    ends = np.cumsum(sizes, axis=1)
    total = shards * per_shard
    out, checks = [], []
    for rank in range(ranks):
        cfg = RunSpec(pattern="train-sync", engine="null", direct=direct, iodepth=1, block_size=BS, seed=seed,
                      batch_size=batch, compute_time_s=0, prefetch=0, shuffle=shuffle, reading=Reading("samples"))
        stream = SampleAccessStream(cfg, lambda i: ends[i], shards, per_shard, rank, ranks, rank,
                                    align=_native.ALIGN if direct else 1)
        stream.trace = []
        part = max(1, (rank + 1) * total // ranks - rank * total // ranks)
        per_epoch = []
        for _epoch in range(epochs):
            stream.trace.clear()
            taken, left = [], part
            while left:
                segments, consumed = stream.take(min(batch, left))
                assert all(done for _s, _rows, done in segments)    # every sample's file closed after it
                taken += [(s, rows) for s, rows, _d in segments]
                left -= min(batch, left)
            pairs = [(int(s), int(k)) for sh, sm in stream.trace for s, k in zip(sh, sm)]
            assert [s for s, _rows in taken] == [s for s, _k in pairs]
            per_epoch.append(list(zip(pairs, [rows for _s, rows in taken])))
        stream.finish()                            # the last part is checked at the run's end
        out.append(per_epoch)
        checks.append((stream.epochs_checked, stream.epochs_wrong))
    return out, checks, sizes, ends


@pytest.mark.parametrize("shuffle", ["none", "file", "sample", "file+sample"])
@pytest.mark.parametrize("shards,ranks", [(1, 2), (1, 3), (3, 2), (2, 4)])
def test_every_sample_is_read_once_per_epoch_across_the_ranks_at_its_offset(shuffle, shards, ranks):
    runs, checks, sizes, ends = _runs(shuffle, shards=shards, ranks=ranks)
    every = {(s, k) for s in range(shards) for k in range(40)}
    for epoch in range(2):
        taken = [pair for rank in runs for pair, _rows in rank[epoch]]
        assert len(taken) == len(every) and set(taken) == every          # each sample once, none left out
        read = 0
        for rank in runs:
            for (s, k), rows in rank[epoch]:
                start = int(ends[s, k - 1]) if k else 0
                # the sample's bytes, exactly: requests of at most BS, back to back from its offset
                assert int(rows["offset"][0]) == start and (rows["file"] == 0).all()
                assert (rows["offset"][1:] == rows["offset"][:-1] + rows["length"][:-1]).all()
                assert int(rows["length"].sum()) == int(sizes[s, k]) and int(rows["length"].max()) <= BS
                read += int(rows["length"].sum())
        assert read == int(sizes.sum())
    assert checks == [(2, 0)] * ranks


def test_one_file_is_split_in_contiguous_parts_as_dlio_splits_it():
    """DLIO gives rank i of R the global samples [i*N/R, (i+1)*N/R); unshuffled, in order."""
    runs, _c, _s, _e = _runs("none", shards=1, per_shard=40, ranks=3)
    parts = [[k for (_s, k), _r in rank[0]] for rank in runs]
    assert parts == [list(range(0, 13)), list(range(13, 26)), list(range(26, 40))]
    assert [[k for (_s, k), _r in rank[1]] for rank in runs] == parts          # the same every epoch
    shuffled, _c, _s, _e = _runs("sample", shards=1, per_shard=40, ranks=3)
    for part, rank in zip(parts, shuffled):
        e0, e1 = ([k for (_s, k), _r in rank[e]] for e in (0, 1))
        assert sorted(e0) == sorted(e1) == part and e0 != part and e0 != e1     # the part permuted, anew each epoch


def test_the_order_repeats_with_the_seed_and_changes_with_it():
    def order(seed):
        runs, _c, _s, _e = _runs("file+sample", shards=3, ranks=2, seed=seed)
        return [[pair for pair, _r in epoch] for rank in runs for epoch in rank]
    assert order(5) == order(5) and order(5) != order(6)


def test_fewer_samples_than_ranks_gives_every_rank_a_sample():
    runs, checks, _s, _e = _runs("sample", shards=1, per_shard=3, ranks=5, batch=1)
    assert [[pair for pair, _r in rank[0]] for rank in runs] == [[(0, i % 3)] for i in range(5)]
    assert checks == [(2, 0)] * 5


def test_direct_reads_start_on_the_aligned_offset_below_the_sample():
    rows = sample_reads(5000, 14000, 8192, _native.ALIGN)
    assert rows["offset"].tolist() == [4096, 12288] and rows["length"].tolist() == [8192, 14000 - 12288]
    runs, _c, sizes, ends = _runs("sample", shards=2, ranks=2, direct=True, batch=4)
    for rank in runs:
        for (s, k), rows in rank[0]:
            start = int(ends[s, k - 1]) if k else 0
            assert int(rows["offset"][0]) == start - start % 4096 and (rows["offset"] % 4096 == 0).all()
            assert int(rows["offset"][-1] + rows["length"][-1]) == int(ends[s, k])


# ---------------------------------------------------------------- the workload file and the built-in --

def test_dlrm_yaml_maps_to_the_builtin_dlrm(tmp_path):
    wl, builtin = load_workload(dlrm_yaml(tmp_path)), load_workload("dlrm")
    d, t = wl.dataset, wl.train
    assert (d.format, d.files, d.samples_per_file, d.sample_size, d.sample_size_stdev) == \
        ("indexed_binary", 1, 1024, 671_088_640, 0)
    assert (t.batch_size, t.compute_time_s, t.epochs, t.shuffle, t.seed, wl.read.read_threads,
            wl.metric.au_threshold) == (1, 0.064296, 1, "sample", 123, 1, 0.90)
    assert (wl.dataset, wl.train, wl.read, wl.metric, wl.pattern) == \
        (builtin.dataset, builtin.train, builtin.read, builtin.metric, builtin.pattern)
    assert builtin.origin.startswith("MLPerf Storage v3.0") and "DLIO_local_changes@" in builtin.origin \
        and builtin.origin.endswith("dlio_benchmark/configs/workload/dlrm.yaml")
    listed = iodl("workloads")
    assert listed.returncode == 0 and "dlrm" in listed.stdout


def test_mmap_indexed_binary_is_refused_with_its_reason(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(open(dlrm_yaml(tmp_path)).read().replace("format: indexed_binary", "format: mmap_indexed_binary"))
    r = iodl("read", "--workload", str(path), "--engine", "null", "--steps", "1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "m.yaml:9:" in lines[0] and "through mmap" in lines[0], r.stderr


def test_the_dlrm_file_runs_under_mpi_with_the_null_engine(tmp_path):
    """3 steps of batch 1 on 2 ranks: 6 samples of 671,088,640 B, each read whole (the null engine
    counts the bytes it is asked for), no dataset needed."""
    assert mpiexec(), "mpiexec not found (pip install mpich)"
    out = tmp_path / "r.json"
    r = iodl("read", "--workload", dlrm_yaml(tmp_path), "--engine", "null", "--steps", "3", "--compute-time", "0",
             "--out", str(out), ranks=2, timeout=120)
    assert r.returncode == 0, r.stderr
    res = load_json(out)
    assert res["workload"]["dataset"]["format"] == "indexed_binary" and res["workload"]["train"]["compute_time_s"] == 0.064296
    assert res["train"]["steps"] == 3 and res["train"]["samples"] == 6
    assert res["train"]["consumed_bytes"] == res["total"]["bytes"] == 6 * 671_088_640
    assert [p["bytes"] for p in res["per_rank"]] == [3 * 671_088_640] * 2


# ---------------------------------------------------------------- a scaled-down dlrm, real reads ------

SMALL = dict(samples=64, record=65536, epochs=2, compute=0.001)


def _generate_small(tmp_path, root) -> str:
    work = dlrm_yaml(tmp_path, "dlrm_small.yaml", **SMALL)
    gen = iodl("generate", "--workload", work, "--root", str(root), "--quiet", ranks=2, timeout=120)
    assert gen.returncode == 0, gen.stderr
    return work


def _check_every_sample_once(res, ranks=2):
    """2 epochs of 64 samples of 64 KiB over 2 ranks: each rank's part is 32 samples an epoch; the
    bytes read are the samples' bytes exactly, and every rank's check of its parts passed."""
    assert res["train"]["steps"] == 2 * 64 // ranks and res["train"]["samples"] == 2 * 64
    assert res["total"]["bytes"] == res["train"]["consumed_bytes"] == 2 * 64 * 65536
    assert [p["bytes"] for p in res["per_rank"]] == [2 * 64 * 65536 // ranks] * ranks
    assert (res["train"]["epochs_checked"], res["train"]["epochs_wrong"]) == (2 * ranks, 0)
    assert res["total"]["ios"] == 2 * 64                        # one request per sample (64 KiB < block size)


@pytest.mark.parametrize("engine", ["psync", pytest.param("aio", marks=pytest.mark.aio)])
def test_a_scaled_dlrm_dataset_reads_every_sample_once_per_epoch_under_mpi(tmp_path, engine):
    root = tmp_path / "ds"
    work = _generate_small(tmp_path, root)
    data = root / "copy-0000" / "train-00000-of-00001.indexed_binary"
    assert os.path.getsize(data) == 64 * 65536
    assert np.fromfile(str(data) + ".off.idx", dtype="<u8").tolist() == list(range(0, 64 * 65536, 65536))
    out = tmp_path / "r.json"
    r = iodl("read", "--workload", work, "--root", str(root), "--engine", engine, "--out", str(out), ranks=2,
             timeout=120)
    assert r.returncode == 0, r.stderr
    _check_every_sample_once(load_json(out))


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.odirect
def test_a_scaled_dlrm_read_direct_is_what_the_device_delivers(tmp_path):
    """O_DIRECT reads of the scaled dlrm on a loop-mounted ext4 (direct I/O to its backing file):
    what the device delivered (its own sector count, /sys/block/loopN/stat) is the 2 epochs x 64
    samples x 64 KiB iodl counts, within 64 KiB. The metadata a run reads (manifest, tables, inodes)
    is measured apart: the same run with the null engine from a cold cache opens all and reads no data."""
    from iodl.groundtruth import LoopMount

    with LoopMount(64 << 20) as m:
        root = os.path.join(m.path, "ds")
        work = _generate_small(tmp_path, root)

        metadata = device_bytes_of_direct_read(m, work, root, "null", tmp_path / "null.json")
        device = device_bytes_of_direct_read(m, work, root, "psync", tmp_path / "r.json")
    res = load_json(tmp_path / "r.json")
    _check_every_sample_once(res)
    assert device - metadata == pytest.approx(2 * 64 * 65536, abs=64 << 10), (device, metadata)
