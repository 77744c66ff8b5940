"""npy, jpeg and png shards: real files, read back by their own libraries (numpy, Pillow)."""
import os
import zlib

import numpy as np
import pytest

from iodl import formats as F
from iodl import workload as W
from iodl.comm import SerialComm
from iodl.data.generate import generate
from iodl.data.open import open_dataset
from iodl.errors import UsageError
from tests.helpers import iodl

from PIL import Image   # jpeg/png shards are written and read with Pillow (a dependency)

COMM = SerialComm()
TOML = """
[workload]
name = "t"
[dataset]
format = "{fmt}"
files = {files}
samples_per_file = {spf}
sample_size = "{size}"
sample_size_stdev = "{stdev}"
[train]
batch_size = 4
compute_time_s = 0.001
"""


def wl_file(tmp_path, fmt, files=5, spf=1, size="3000B", stdev="900B"):
    p = tmp_path / f"{fmt}.toml"
    p.write_text(TOML.format(fmt=fmt, files=files, spf=spf, size=size, stdev=stdev))
    return str(p)


def small(tmp_path, fmt, **kw):
    return W.load_workload(wl_file(tmp_path, fmt, **kw))


def test_npy_loads_in_numpy_and_extents_are_the_samples(tmp_path):
    wl = small(tmp_path, "npy", files=3, spf=30, size="5000B", stdev="3000B")   # some 1-byte samples
    generate(wl, [str(tmp_path / "n")], COMM)
    ds = open_dataset(str(tmp_path / "n"))
    assert ds.manifest["extents"] is None            # computed from the sizes: the header length is exact
    for i, shard in enumerate(ds.shards):
        sizes = ds.sample_sizes(i)
        arr = np.load(shard.path, allow_pickle=False)
        assert arr.dtype == np.uint8 and arr.shape == (int(sizes.sum()),)
        raw = open(shard.path, "rb").read()
        ext = ds.sample_extents(i).astype(np.int64)
        assert ext[:, 1].tolist() == sizes.tolist()
        assert (ext[1:, 0] == ext[:-1].sum(axis=1)).all() and ext[-1].sum() == len(raw) == shard.size
        ends = np.cumsum(sizes)
        for (off, n), end in zip(ext.tolist(), ends.tolist()):
            assert raw[off:off + n] == arr[end - n:end].tobytes()
        assert len(zlib.compress(arr.tobytes())) > 0.99 * arr.size    # incompressible


def test_npy_header_is_what_numpy_writes():
    import io

    for n in (0, 1, 9, 10, 12345):
        b = io.BytesIO()
        np.save(b, np.zeros(n, np.uint8), allow_pickle=False)
        assert b.getvalue() == F.Npy.header(n) + bytes(n)
    assert len(F.Npy.header(10**15)) == 128   # 64-byte aligned, the same length for any shard


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_images_open_in_pillow_with_the_planned_size(tmp_path, fmt):
    form = F.FORMATS[fmt]
    low = form.minimum()
    sizes = [1, 2, low - 1, low, low + 1, low + 3, 1000, 4096, 65535, 65537, 65553, 65554, 65555,
             131_074, 131_075, 131_076, 300_001]
    for j, size in enumerate(sizes):
        path = tmp_path / f"s{j}.{form.suffix}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            form.write(form.prepare(np.array([size]), (3, 0, j)), fd)
        finally:
            os.close(fd)
        assert os.path.getsize(path) == form.file_size(size) == max(size, low)
        with Image.open(path) as im:
            assert im.format == fmt.upper()
            im.load()                             # decodes the pixels
        with Image.open(path) as im:
            im.verify()                           # PNG: every chunk's CRC
        assert form.check_file(str(path), np.array([size]))
        assert not form.check_file(str(path), np.array([max(size, low) + 1]))


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_large_image_sample_is_sized_without_pillow(fmt):
    """file_size of a sample of LARGE bytes or more answers without encoding the base image (a
    rank's start-up imports no Pillow: a fresh interpreter is asked), and the base image's minimum
    is far below LARGE, so the answer is the one minimum() would give."""
    import subprocess
    import sys

    code = (f"import sys; from iodl import formats as F; f = F.FORMATS[{fmt!r}]; "
            "print(f.size_of([322_957]), f.file_size(f.LARGE), 'PIL' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["322957", str(F.FORMATS[fmt].LARGE), "False"]
    assert F.FORMATS[fmt].minimum() + 4096 <= F.FORMATS[fmt].LARGE


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_image_dataset_sizes_across_the_stdev_and_content(tmp_path, fmt):
    # a mean close to the minimum and a wide stdev: tiny sizes (raised) and larger ones
    wl = small(tmp_path, fmt, files=40, size="600B", stdev="2000B")
    root = tmp_path / fmt
    generate(wl, [str(root)], COMM)
    ds = open_dataset(str(root))
    form = F.FORMATS[fmt]
    drawn = [int(ds.sample_sizes(i)[0]) for i in range(len(ds.shards))]
    assert min(drawn) < form.minimum() < max(drawn)
    blobs = []
    for i, shard in enumerate(ds.shards):
        size = os.path.getsize(shard.path)
        assert size == shard.size == max(drawn[i], form.minimum())
        assert ds.sample_extents(i).tolist() == [[0, size]]
        with Image.open(shard.path) as im:
            im.load()
        blobs.append(open(shard.path, "rb").read())
    assert len(set(blobs)) == len(blobs)              # no two files alike, even at the minimum
    big = max(blobs, key=len)
    assert len(zlib.compress(big)) > 0.98 * len(big)


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_images_hold_one_sample_per_file(tmp_path, fmt):
    with pytest.raises(UsageError, match=r"holds one sample per file.*samples_per_file is 4"):
        small(tmp_path, fmt, spf=4)
    wl = small(tmp_path, "tfrecord", spf=4)
    with pytest.raises(UsageError, match="--format: format .* holds one sample per file"):
        wl.with_overrides(format=fmt)
    r = iodl("generate", "--workload", "tiny", "--format", fmt, "--root", str(tmp_path / "x"))
    assert r.returncode == 2 and "one sample per file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("fmt", ["npy", "jpeg", "png"])
def test_generate_and_validate_round_trip(tmp_path, fmt):
    spf = 8 if fmt == "npy" else 1
    work = wl_file(tmp_path, fmt, files=6, spf=spf, size="20KiB", stdev="8KiB")
    root = str(tmp_path / "ds")
    r = iodl("generate", "--workload", work, "--root", root)
    assert r.returncode == 0, r.stderr
    r = iodl("generate", "--workload", work, "--root", root)          # a re-run finds every shard complete
    assert r.returncode == 0 and "(0 written, 6 already there)" in r.stdout, r.stdout + r.stderr
    r = iodl("read", "--root", root, "--pattern", "validate")
    assert r.returncode == 0, r.stderr
    ds = open_dataset(root)
    total = sum(s.size for s in ds.shards)
    assert f"{total:,} of {total:,} bytes read" in " ".join(r.stdout.split())   # the report wraps at 80 columns


def _dlio_index(path: str, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) the way DLIO's indexed_binary reader loads them (reader/indexed_binary_reader.py:
    np.empty(n, int64) filled by readinto from NAME.off.idx and NAME.sz.idx); the mmap reader's
    uint64 view of the same bytes must agree."""
    got = []
    for suffix in (".off.idx", ".sz.idx"):
        a = np.empty(samples, dtype=np.int64)
        with open(path + suffix, "rb") as f:
            assert f.readinto(a) == a.nbytes and f.read() == b""   # exactly one 8-byte entry per sample
        mapped = np.frombuffer(memoryview(np.memmap(path + suffix, mode="r", order="C")), dtype=np.uint64)
        assert mapped.tolist() == a.tolist()
        got.append(a)
    return got[0], got[1]


def test_indexed_binary_opens_as_dlios_reader_opens_it(tmp_path):
    """The data file and its two index files: the offsets and sizes numpy reads from the index are
    the samples iodl planned (sizes drawn with a spread), tiling the data file; each sample read at
    its offset is the bytes iodl's own extents say."""
    wl = small(tmp_path, "indexed_binary", files=3, spf=24, size="5000B", stdev="3000B")
    root = tmp_path / "ib"
    generate(wl, [str(root)], COMM)
    ds = open_dataset(str(root))
    assert ds.manifest["extents"] is None              # computed from the sizes (they tile the file)
    for i, shard in enumerate(ds.shards):
        assert shard.path.endswith(".indexed_binary")
        offsets, sizes = _dlio_index(shard.path, 24)
        assert sizes.tolist() == ds.sample_sizes(i).tolist() and len(set(sizes.tolist())) > 1
        assert offsets.tolist() == ds.sample_extents(i)[:, 0].tolist()
        assert offsets[0] == 0 and (offsets[1:] == offsets[:-1] + sizes[:-1]).all()
        data = open(shard.path, "rb").read()
        assert len(data) == shard.size == int(sizes.sum())
        with open(shard.path, "rb") as f:             # DLIO's get_sample: seek, readinto a uint8 array
            for (off, n), (e_off, e_n) in zip(zip(offsets.tolist(), sizes.tolist()), ds.sample_extents(i).tolist()):
                f.seek(off)
                sample = np.empty(n, dtype=np.uint8)
                assert f.readinto(sample) == n and sample.tobytes() == data[e_off:e_off + e_n]
        assert len(zlib.compress(data)) > 0.99 * len(data)


def test_indexed_binary_rerun_rewrites_a_shard_whose_index_is_missing_or_wrong(tmp_path):
    work = wl_file(tmp_path, "indexed_binary", files=3, spf=16, size="4KiB", stdev="0B")
    root = tmp_path / "ds"
    assert iodl("generate", "--workload", work, "--root", str(root)).returncode == 0
    copy = root / "copy-0000"
    names = sorted(p.name for p in copy.iterdir())
    assert names == sorted(f"train-{i:05d}-of-00003.indexed_binary{s}" for i in range(3) for s in ("", ".off.idx", ".sz.idx"))
    (copy / "train-00001-of-00003.indexed_binary.sz.idx").unlink()
    with open(copy / "train-00002-of-00003.indexed_binary.off.idx", "r+b") as f:
        f.write(b"\xff")
    r = iodl("generate", "--workload", work, "--root", str(root))
    assert r.returncode == 0 and "(2 written, 1 already there)" in r.stdout, r.stdout + r.stderr
    for i in range(3):
        offsets, sizes = _dlio_index(str(copy / f"train-{i:05d}-of-00003.indexed_binary"), 16)
        assert sizes.tolist() == [4096] * 16 and offsets.tolist() == list(range(0, 16 * 4096, 4096))
    assert not [p for p in copy.iterdir() if p.name.endswith(".iodl-tmp")]
    r = iodl("read", "--root", str(root), "--pattern", "validate")
    assert r.returncode == 0, r.stderr


def test_indexed_binary_data_is_raws_bytes_written_in_bounded_pieces():
    """The data file is the raw format's bytes for the same key, streamed in pieces of at most
    PIECE bytes even when one sample is larger (dlrm's are 640 MiB)."""
    form = F.FORMATS["indexed_binary"]
    sizes = np.array([3, form.PIECE + 5000, 70_000, 2 * form.PIECE])
    asked = []

    def buffer(n):
        asked.append(n)
        return F.content_buffer(n)

    pieces = [p.copy() for p in form.pieces(sizes, (4, 0, 1), buffer)]
    assert np.concatenate(pieces).tobytes() == F.FORMATS["raw"].prepare(sizes, (4, 0, 1)).tobytes()
    assert max(len(p) for p in pieces) == form.PIECE and max(asked) <= form.PIECE + 2 * F.BLOCK
    assert sum(len(p) for p in pieces) == form.size_of(sizes) == int(sizes.sum())


# ---------------------------------------------------------------- parquet --------------------

PQ_COLUMNS = [{"name": "h", "dtype": "float16", "read": False}, {"name": "b", "dtype": "int8"},
              {"name": "d", "dtype": "float64"}, {"name": "v", "dtype": "float32", "size": 5, "read": False},
              {"name": "u", "dtype": "uint64"}]
PQ_TYPES = {"h": "halffloat", "b": "int8", "d": "double", "v": "fixed_size_binary[20]", "u": "uint64"}


def test_parquet_opens_in_pyarrow_with_its_schema_row_groups_and_values():
    """A shard iodl writes without pyarrow is real parquet to pyarrow: schema, row groups (the last
    one short), values (the PLAIN bytes at the chunk's place), and the chunk table iodl reads by."""
    import io

    import pyarrow.parquet as pq   # the test extra reads the file back
    form = F.Parquet(PQ_COLUMNS, 512)
    rows = 2048 + 100
    sizes = np.full(rows, F.parquet_record_bytes(PQ_COLUMNS))
    buf = form.prepare(sizes, (7, 0, 3))
    assert len(buf) == form.size_of(sizes)
    f = pq.ParquetFile(io.BytesIO(buf.tobytes()))
    md = f.metadata
    assert (md.num_rows, md.num_row_groups) == (rows, 5)
    assert [md.row_group(g).num_rows for g in range(5)] == [512] * 4 + [100]
    assert {n: str(f.schema_arrow.field(n).type) for n in PQ_TYPES} == PQ_TYPES
    table = f.read()
    chunks = form.layout(sizes)
    for g in range(5):
        for c, col in enumerate(PQ_COLUMNS):
            m = md.row_group(g).column(c)
            start, head, data, n = chunks[g, c].tolist()
            assert (m.data_page_offset, m.total_compressed_size, m.num_values) == (start, head + data, n)
    # row 600 (row group 1, its row 88) of the float64 column: its 8 bytes in the chunk
    start, head = chunks[1, 2, 0], chunks[1, 2, 1]
    assert table.column("d")[600].as_py() == np.frombuffer(buf[start + head + 88 * 8:][:8], "<f8")[0] or \
        np.isnan(table.column("d")[600].as_py())
    # a row group's reads: the read columns' chunks, adjacent ones (b, d) in one range
    rpg, reads = form.row_group_reads(sizes)
    assert rpg == 512 and reads[1].tolist() == [[chunks[1, 1, 0], chunks[1, 3, 0] - chunks[1, 1, 0]],
                                                [chunks[1, 4, 0], chunks[1, 4, 1] + chunks[1, 4, 2]]]
    # incompressible as every format's content
    assert len(zlib.compress(buf.tobytes(), 1)) > 0.99 * len(buf)


def test_parquet_columns_must_make_the_sample_size(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[workload]\nname = "p"\n[dataset]\nformat = "parquet"\nfiles = 2\nsamples_per_file = 8\n'
                    'sample_size = "9B"\ncolumns = [{ name = "a", dtype = "float64" }]\n'
                    '[train]\nbatch_size = 2\ncompute_time_s = 0\n')
    with pytest.raises(UsageError, match="rows of 8 bytes, but sample_size is 9"):
        W.load_workload(str(path))
