"""parquet and MLPerf Storage v3.0's dlrm_b200 / flux_b200: DLIO YAMLs in their shape run as they
are (null engine under MPI), and a scaled-down generated dataset read under MPI reads, per row group
a rank takes, exactly the chunks of the `read: true` columns (truth: pyarrow's own footer reading),
every row once per epoch. The YAMLs are written here from the shape of the MLPerf files
(mlcommons/storage configs/dlio/workload/dlrm_b200.yaml): a few columns, not their 200."""
import numpy as np
import pytest

from tests.helpers import device_bytes_of_direct_read, iodl, load_json, mpiexec

import pyarrow.parquet as pq   # the test extra reads the files back

COLUMNS = [("feature_000", "float16", False), ("feature_001", "float64", True), ("feature_002", "int8", False),
           ("feature_003", "float32", True), ("feature_004", "float32", True), ("feature_005", "int8", True)]

DLRM_SHAPE = """\
model:
  name: dlrm
framework: pytorch
workflow:
  generate_data: False
  train: True
  checkpoint: False
dataset:
  data_folder: data/dlrm/
  format: parquet
  num_files_train: {files}
  num_samples_per_file: {rows}
  record_length_bytes: {record}
  compression: none
  parquet:
    row_group_size: {group}
    read_mode: row_group
    columns:
{columns}
reader:
  data_loader: pytorch
  batch_size: {batch}
  prefetch_size: 2
  read_threads: 4
  file_shuffle: seed
train:
  epochs: {epochs}
  computation_time: {compute}
metric:
  au: 0.70
"""

ITEM = {"float16": 2, "float32": 4, "float64": 8, "int8": 1}


def dlrm_yaml(tmp_path, files, rows, group, batch, epochs=1, compute=0.000375):
    cols = "\n".join(f"      - name: {n}\n        dtype: {d}\n        read: {str(r).lower()}" for n, d, r in COLUMNS)
    path = tmp_path / "dlrm_shape.yaml"
    path.write_text(DLRM_SHAPE.format(files=files, rows=rows, group=group, batch=batch, epochs=epochs, compute=compute,
                                      columns=cols, record=sum(ITEM[d] for _n, d, _r in COLUMNS)))
    return str(path)


def test_the_dlrm_b200_shape_runs_under_mpi_with_the_null_engine(tmp_path):
    """dlrm_b200's own numbers (1,024 files x 4,718,592 rows, row groups of 6,144, batch 16,384):
    3 steps on 2 ranks, no dataset; the part of a rank is walked, never held (4.8 G rows)."""
    assert mpiexec(), "mpiexec not found (pip install mpich)"
    out = tmp_path / "r.json"
    r = iodl("read", "--workload", dlrm_yaml(tmp_path, 1024, 4718592, 6144, 16384), "--engine", "null",
             "--steps", "3", "--out", str(out), ranks=2, timeout=120)
    assert r.returncode == 0, r.stderr
    res = load_json(out)
    assert res["workload"]["dataset"]["format"] == "parquet" and res["workload"]["dataset"]["row_group_size"] == 6144
    assert res["train"]["steps"] == 3 and res["train"]["samples"] == 2 * 3 * 16384
    # each rank's part begins a file (512 files each); 3 x 16,384 rows from there are 8 whole row
    # groups of 6,144; each reads its 4 read columns' chunks: 6,144 values of 8 + 4 + 4 + 4 bytes
    # (int8 is an INT32 in parquet) plus a page header each (at most 32 bytes)
    data = 2 * 8 * 6144 * (8 + 4 + 4 + 4)
    assert res["train"]["consumed_bytes"] == res["total"]["bytes"]
    assert data < res["total"]["bytes"] <= data + 2 * 8 * 4 * 32


FILES, ROWS, GROUP, BATCH, EPOCHS = 4, 2048, 512, 512, 2


def _truth(path) -> int:
    """Bytes of the read columns' chunks of every row group of one file, from pyarrow's footer."""
    f = pq.ParquetFile(path)
    want = {n for n, _d, r in COLUMNS if r}
    md = f.metadata
    return sum(md.row_group(g).column(c).total_compressed_size for g in range(md.num_row_groups)
               for c in range(md.num_columns) if md.row_group(g).column(c).path_in_schema in want)


@pytest.mark.parametrize("engine", ["psync", pytest.param("aio", marks=pytest.mark.aio)])
def test_a_scaled_dlrm_b200_reads_the_read_columns_once_per_row_group_under_mpi(tmp_path, engine):
    """4 files x 2,048 rows, row groups of 512, 2 epochs on 2 ranks: each rank's part is two whole
    files, so every row group is read once per epoch: the bytes read are exactly 2 x the read
    columns' chunk bytes of the 4 files (pyarrow's footer), every row taken once per epoch."""
    root = tmp_path / "ds"
    work = dlrm_yaml(tmp_path, FILES, ROWS, GROUP, BATCH, epochs=EPOCHS, compute=0.001)
    gen = iodl("generate", "--workload", work, "--root", str(root), "--quiet", ranks=2, timeout=120)
    assert gen.returncode == 0, gen.stderr
    files = sorted((root / "copy-0000").glob("*.parquet"))
    assert len(files) == FILES
    t = pq.read_table(files[0])
    assert t.num_rows == ROWS and pq.ParquetFile(files[0]).metadata.num_row_groups == ROWS // GROUP
    assert [str(t.schema.field(n).type) for n, _d, _r in COLUMNS] == ["halffloat", "double", "int8", "float",
                                                                      "float", "int8"]
    out = tmp_path / "r.json"
    r = iodl("read", "--workload", work, "--root", str(root), "--engine", engine, "--out", str(out), ranks=2,
             timeout=120)
    assert r.returncode == 0, r.stderr
    res = load_json(out)
    truth = EPOCHS * sum(_truth(f) for f in files)
    assert res["total"]["bytes"] == res["train"]["consumed_bytes"] == truth
    assert res["train"]["samples"] == EPOCHS * FILES * ROWS
    assert (res["train"]["epochs_checked"], res["train"]["epochs_wrong"]) == (2 * EPOCHS, 0)
    # another column split of the same row size does not describe these files: refused in one line
    other = tmp_path / "other.yaml"
    other.write_text(open(work).read().replace("feature_005\n        dtype: int8\n        read: true",
                                               "feature_005\n        dtype: int8\n        read: false"))
    r = iodl("read", "--workload", str(other), "--root", str(root), "--engine", engine)
    assert r.returncode != 0 and "does not describe the dataset" in r.stderr and "columns" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_parquet_compression_other_than_none_is_refused_in_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(open(dlrm_yaml(tmp_path, 2, 64, 16, 8)).read().replace("compression: none", "compression: gzip"))
    r = iodl("read", "--workload", str(path), "--engine", "null", "--steps", "1")
    assert r.returncode != 0 and "c.yaml:" in r.stderr and "compression" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.odirect
def test_a_scaled_dlrm_b200_read_direct_is_what_the_device_delivers(tmp_path):
    """O_DIRECT reads of the scaled dataset on a loop-mounted ext4: what the device delivered (its
    own sector count, /sys/block/loopN/stat) is, within 32 KiB (8 blocks of ~144; seen: 15-21 KiB
    under the prediction, the metadata run's own spread is a few blocks), the read columns' chunk ranges
    of every row group (pyarrow's footer), each widened to the 4 KiB blocks O_DIRECT reads, x 2 epochs.
    The metadata a run reads (manifest, tables, inodes) is measured apart: the same run with the null
    engine from a cold cache opens all and reads no data."""
    from iodl.groundtruth import LoopMount

    with LoopMount(64 << 20) as m:
        import os

        root = os.path.join(m.path, "ds")
        work = dlrm_yaml(tmp_path, FILES, ROWS, GROUP, BATCH, epochs=EPOCHS, compute=0.001)
        gen = iodl("generate", "--workload", work, "--root", root, "--quiet", ranks=2, timeout=120)
        assert gen.returncode == 0, gen.stderr
        want = {n for n, _d, r in COLUMNS if r}
        spans = 0
        for path in \
                sorted(os.path.join(root, "copy-0000", p) for p in os.listdir(os.path.join(root, "copy-0000"))
                       if p.endswith(".parquet")):
            md = pq.ParquetFile(path).metadata
            for g in range(md.num_row_groups):
                cols = [md.row_group(g).column(c) for c in range(md.num_columns)]
                ranges = []   # adjacent read chunks make one range
                for c in cols:
                    if c.path_in_schema in want:
                        s, e = c.data_page_offset, c.data_page_offset + c.total_compressed_size
                        if ranges and ranges[-1][1] == s:
                            ranges[-1][1] = e
                        else:
                            ranges.append([s, e])
                spans += sum(-(-e // 4096) * 4096 - s // 4096 * 4096 for s, e in ranges)

        metadata = device_bytes_of_direct_read(m, work, root, "null", tmp_path / "null.json")
        device = device_bytes_of_direct_read(m, work, root, "psync", tmp_path / "r.json")
    res = load_json(tmp_path / "r.json")
    assert (res["train"]["epochs_checked"], res["train"]["epochs_wrong"]) == (2 * EPOCHS, 0)
    assert device - metadata == pytest.approx(EPOCHS * spans, abs=32 << 10), (device, metadata, spans)
    # iodl counts the bytes it asks for: from each range's aligned start to its end, never more than the device
    assert EPOCHS * spans - 4096 * 2 * 16 * EPOCHS <= res["total"]["bytes"] <= EPOCHS * spans


@pytest.mark.parametrize("shuffle", ["none", "file", "sample", "file+sample"])
def test_row_group_stream_takes_every_row_once_and_reads_each_group_once_per_rank_and_epoch(shuffle):
    """3 shards x 100 rows, row groups of 16 (the last one short), 2 ranks, batches of 7, 2 epochs:
    across the ranks every row is taken once per epoch; a rank reads each row group its part touches
    exactly once per epoch, and the bytes it counts are those groups' ranges."""
    from iodl.formats import Parquet, Reading, parquet_record_bytes
    from iodl.runspec import RunSpec
    from iodl.training import RowGroupStream

    cols = [{"name": n, "dtype": d, "read": r} for n, d, r in COLUMNS]
    rpg, reads = Parquet(cols, 16).row_group_reads(np.full(100, parquet_record_bytes(cols)))
    group_bytes = [int(r[:, 1].sum()) for r in reads]
    seen = {e: [] for e in range(2)}
    for rank in range(2):
        cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=1 << 20, seed=3,
                      batch_size=7, compute_time_s=0, prefetch=0, shuffle=shuffle,
                      reading=Reading("row_groups", row_groups=(rpg, reads)))
        stream = RowGroupStream(cfg, 3, 100, rank, 2, rank)
        stream.trace = []
        for epoch in range(2):
            stream.trace.clear()
            left, groups, counted = 150, [], 0
            while left:
                segments, consumed = stream.take(min(7, left))
                groups += [s for s, _rows, _d in segments]
                counted += consumed
                left -= min(7, left)
            pairs = [(int(s), int(k)) for sh, sm in stream.trace for s, k in zip(sh, sm)]
            seen[epoch] += pairs
            touched = {(s, k // rpg) for s, k in pairs}
            assert len(groups) == len(touched)                      # each touched group read once
            assert counted == sum(group_bytes[g] for _s, g in touched)
        stream.finish()
        assert (stream.epochs_checked, stream.epochs_wrong) == (2, 0)
    for epoch in range(2):
        assert sorted(seen[epoch]) == [(s, k) for s in range(3) for k in range(100)]
