"""Generation and opening of datasets, checked against independent readers (crc32c, h5py, numpy)."""
import json
import os
import struct
import time
import zlib

import numpy as np
import pytest

from iodl import formats as F
from iodl import workload as W
from iodl.comm import SerialComm
from iodl.data.generate import ensure_default_dataset, generate
from iodl.data.layout import MANIFEST, default_data_dir, sample_sizes
from iodl.data.open import open_dataset
from iodl.errors import UsageError
from tests.helpers import iodl
from tests.conftest import require_or_skip

import crc32c as crc32c_pkg   # the independent CRC32C reader (a dependency)

COMM = SerialComm()
TOML = """
[workload]
name = "t"
[dataset]
format = "tfrecord"
files = {files}
samples_per_file = {spf}
sample_size = "{size}"
sample_size_stdev = "{stdev}"
[train]
batch_size = 4
compute_time_s = 0.001
"""


def small(tmp_path, files=5, spf=7, size="3000B", stdev="900B"):
    p = tmp_path / "small.toml"
    p.write_text(TOML.format(files=files, spf=spf, size=size, stdev=stdev))
    return W.load_workload(str(p))


def tree(root):
    """path -> (size, mtime_ns) of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def read_tfrecords(path):
    """An independent TFRecord reader: the crc32c package checks both masked CRCs of every record."""
    def masked(data):
        c = crc32c_pkg.crc32c(data)
        return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

    records = []
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert len_crc == masked(header), f"{path}@{pos}: length CRC"
        data = blob[pos + 12:pos + 12 + length]
        assert len(data) == length, f"{path}@{pos}: truncated record"
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked(data), f"{path}@{pos}: data CRC"
        records.append((pos, length))
        pos += 16 + length
    assert pos == len(blob)
    return records


def test_tfrecord_shards_pass_an_independent_crc_check(tmp_path):
    wl = small(tmp_path, files=3, spf=40, size="5000B", stdev="3000B")   # many short and a few 1-byte samples
    root = tmp_path / "ds"
    generate(wl, [str(root)], COMM)
    ds = open_dataset(str(root))
    assert len(ds.shards) == 3
    for i, shard in enumerate(ds.shards):
        records = read_tfrecords(shard.path)
        assert [n for _o, n in records] == ds.sample_sizes(i).tolist()
        ext = ds.sample_extents(i)
        assert ext.dtype == np.uint64 and ext.shape == (40, 2)
        assert ext.tolist() == [[o, n + 16] for o, n in records]
        assert shard.size == os.path.getsize(shard.path) == int(ext[-1].sum())


def test_crc32c_of_records_at_awkward_offsets_and_lengths():
    rng = np.random.default_rng(5)
    lengths = np.array([1, 2, 3, 4, 5, 7, 8, 9, 1023, 1024, 1025, 4096, 70_000, 1 << 20] + rng.integers(1, 9000, 50).tolist())
    buf = rng.integers(0, 256, int(lengths.sum()) + 3, dtype=np.uint8)
    offsets = 3 + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    got = F.crc32c_records(buf, offsets, lengths)
    assert got.tolist() == [crc32c_pkg.crc32c(buf[o:o + n].tobytes()) for o, n in zip(offsets, lengths)]
    assert F.crc32c(b"123456789") == 0xE3069283                      # the check value of CRC-32C
    assert F.crc32c(bytes(32)) == 0x8A9136AA                         # RFC 3720 B.4: 32 bytes of zeros
    assert F._length_crcs(np.array([0, 255, 1 << 40])).tolist() == [
        crc32c_pkg.crc32c(int(n).to_bytes(8, "little")) for n in (0, 255, 1 << 40)]


def test_raw_extents_tile_the_file(tmp_path):
    wl = small(tmp_path)
    generate(wl, [str(tmp_path / "r")], COMM, fmt="raw")
    ds = open_dataset(str(tmp_path / "r"))
    for i, shard in enumerate(ds.shards):
        ext = ds.sample_extents(i).astype(np.int64)
        assert ext[0, 0] == 0 and (ext[1:, 0] == ext[:-1].sum(axis=1)).all()
        assert ext[-1].sum() == os.path.getsize(shard.path) == ds.sample_sizes(i).sum()


def test_hdf5_opens_in_h5py_with_the_right_samples(tmp_path):
    import h5py
    wl = small(tmp_path, files=2, spf=9)
    generate(wl, [str(tmp_path / "h")], COMM, fmt="hdf5")
    ds = open_dataset(str(tmp_path / "h"))
    for i, shard in enumerate(ds.shards):
        sizes = ds.sample_sizes(i)
        ext = ds.sample_extents(i)
        with h5py.File(shard.path, "r") as f:
            assert f.attrs["samples"] == 9
            assert f["lengths"][()].tolist() == sizes.tolist()
            assert f["data"].shape == (int(sizes.sum()),)
            samples = [f["data"][o:o + n] for o, n in zip(f["offsets"][()], f["lengths"][()])]
        raw = open(shard.path, "rb").read()
        for (off, n), sample in zip(ext.tolist(), samples):   # extents locate the real bytes
            assert raw[off:off + n] == sample.tobytes()


def test_npz_loads_in_numpy_and_extents_cover_each_member(tmp_path):
    wl = small(tmp_path, files=2, spf=4)
    generate(wl, [str(tmp_path / "z")], COMM, fmt="npz")
    ds = open_dataset(str(tmp_path / "z"))
    for i, shard in enumerate(ds.shards):
        ext = ds.sample_extents(i).tolist()
        raw = open(shard.path, "rb").read()
        with np.load(shard.path) as z:
            names = sorted(z.files)
            assert len(names) == 4
            for (off, n), name, size in zip(ext, names, ds.sample_sizes(i).tolist()):
                arr = z[name]
                assert arr.dtype == np.uint8 and arr.size == size
                member = raw[off:off + n]
                assert member.startswith(b"PK\x03\x04") and member.endswith(arr.tobytes())
        # members follow each other; the central directory ends the file
        assert all(a[0] + a[1] == b[0] for a, b in zip(ext, ext[1:]))


def test_unet3d_shaped_npz_one_sample_per_file(tmp_path):
    import dataclasses

    wl = W.load_workload("unet3d").with_overrides(files=2)
    small_wl = dataclasses.replace(wl, dataset=dataclasses.replace(wl.dataset, sample_size=300_000,
                                                                   sample_size_stdev=100_000))
    generate(small_wl, [str(tmp_path / "u")], COMM)
    ds = open_dataset(str(tmp_path / "u"))
    assert [s.samples for s in ds.shards] == [1, 1]
    for i, s in enumerate(ds.shards):
        with np.load(s.path) as z:
            assert z[z.files[0]].size == ds.sample_sizes(i)[0]


def test_content_is_incompressible_and_seeded(tmp_path):
    wl = small(tmp_path, files=2, spf=20, size="20000B", stdev="0B")
    a, b, c = (str(tmp_path / x) for x in "abc")
    generate(wl, [a, b], COMM)
    generate(wl, [c], COMM, seed=2)
    pa, pb, pc = (open_dataset(r).shards[0].path for r in (a, b, c))
    data = open(pa, "rb").read()
    assert len(zlib.compress(data, 6)) > 0.99 * len(data)
    assert data == open(pb, "rb").read()          # same seed: same bytes on every root
    assert data != open(pc, "rb").read()          # another seed: other bytes
    assert open_dataset(a).shards[0].path != open_dataset(a).shards[1].path
    assert open(open_dataset(a).shards[1].path, "rb").read()[100:200] != data[100:200]


def test_sample_sizes_follow_mean_and_stdev_and_are_prefix_stable(tmp_path):
    spec = W.load_workload("resnet50").dataset
    sizes = sample_sizes(spec, 1)
    assert sizes.shape == (1024, 1251) and sizes.min() >= 1
    assert sizes.mean() == pytest.approx(114_660, rel=0.002)
    assert sizes.std() == pytest.approx(22_932, rel=0.01)
    fewer = sample_sizes(W.load_workload("resnet50").with_overrides(files=16).dataset, 1)
    assert (fewer == sizes[:16]).all()
    clipped = sample_sizes(small(tmp_path, size="10B", stdev="100B").dataset, 1)
    assert clipped.min() == 1


def test_rerun_skips_complete_shards_and_rewrites_broken_ones(tmp_path):
    wl = small(tmp_path)
    root = str(tmp_path / "ds")
    first = generate(wl, [root], COMM)
    assert (first.shards_written, first.shards_skipped) == (5, 0)
    before = tree(root)
    time.sleep(0.02)
    again = generate(wl, [root], COMM)
    assert (again.shards_written, again.shards_skipped, again.bytes_written) == (0, 5, 0)
    assert {k: v for k, v in tree(root).items() if "copy-" in k} == {k: v for k, v in before.items() if "copy-" in k}
    shards = open_dataset(root).shards
    with open(shards[1].path, "r+b") as f:          # an interrupted write cut short
        f.truncate(100)
    os.remove(shards[3].path)
    third = generate(wl, [root], COMM)
    assert (third.shards_written, third.shards_skipped) == (2, 3)
    assert [os.path.getsize(s.path) for s in shards] == [s.size for s in shards]
    assert not [p for p in tree(root) if p.endswith(".iodl-tmp")]


def test_incomplete_dataset_is_refused_then_finished(tmp_path):
    wl = small(tmp_path)
    root = tmp_path / "ds"
    generate(wl, [str(root)], COMM)
    m = json.loads((root / MANIFEST).read_text())
    m["status"] = "incomplete"
    (root / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(UsageError, match="incomplete"):
        open_dataset(str(root))
    generate(wl, [str(root)], COMM)
    assert open_dataset(str(root)).manifest["status"] == "complete"


def test_foreign_root_is_refused_and_untouched(tmp_path):
    root = tmp_path / "theirs"
    (root / "sub").mkdir(parents=True)
    (root / "a.jpg").write_bytes(b"x" * 100)
    (root / "sub" / "b.jpg").write_bytes(b"y" * 10)
    before = tree(root)
    with pytest.raises(UsageError, match=r"holds files that iodl did not create"):
        generate(small(tmp_path), [str(tmp_path / "mine"), str(root)], COMM)
    assert tree(root) == before
    # ...and it opens read-only as a foreign dataset: every file a shard, one extent each
    ds = open_dataset(str(root))
    assert ds.manifest is None and [os.path.relpath(s.path, root) for s in ds.shards] == ["a.jpg", "sub/b.jpg"]
    assert ds.total_bytes == 110 and [s.samples for s in ds.shards] == [1, 1]
    assert ds.sample_extents(0).tolist() == [[0, 100]] and ds.sample_extents(1).tolist() == [[0, 10]]
    assert tree(root) == before


def _walk_truth(root):
    """(relative name, size) of every file a plain root holds, in the order a foreign dataset lists
    them: in each directory its files by name (links followed, dangling ones skipped), then its
    subdirectories by name. Plain os.listdir and os.stat, one at a time."""
    out = []

    def walk(d, rel):
        subs = []
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if os.path.isdir(p):
                subs.append(n)
            elif os.path.exists(p):
                out.append((rel + n, os.stat(p).st_size))
        for n in subs:
            walk(os.path.join(d, n), rel + n + b"/")

    walk(os.fsencode(root), b"")
    return out


def test_plain_root_listing_matches_a_walk_and_stat(tmp_path):
    """20,000 files (one flat directory of 15,000, stat'ed on several threads, and small nested
    ones), sizes all different, odd names, a link to a file inside, a dangling link, an empty
    directory: the listing is a plain walk's, file for file and byte for byte."""
    root = tmp_path / "plain"
    flat, deep = root / "flat", root / "a" / "b c" / "d"
    flat.mkdir(parents=True)
    deep.mkdir(parents=True)
    (root / "empty").mkdir()
    for i in range(15_000):
        with open(flat / f"f{(i * 7919) % 15_000:05d}.bin", "wb") as f:
            f.truncate(i)
    for i in range(5_000):
        d = [root, root / "a", root / "a" / "b c", deep][i % 4]
        with open(os.path.join(os.fsencode(d), b"n\xff-%d" % i), "wb") as f:   # not UTF-8
            f.truncate(100_000 + i)
    os.symlink(flat / "f00003.bin", root / "a" / "link.bin")
    os.symlink(root / "missing", root / "a" / "dangling")
    truth = _walk_truth(root)
    assert len(truth) == 20_001
    ds = open_dataset(str(root))
    got = [(os.fsencode(os.path.relpath(p, root)), int(s)) for p, s in zip(ds.paths, ds.sizes)]
    assert got == truth
    assert ds.total_bytes == sum(s for _n, s in truth)


def test_plain_root_links_are_followed_only_inside(tmp_path):
    root = tmp_path / "plain"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.bin").write_bytes(b"x" * 10)
    os.symlink(root / "sub", root / "alias")        # a directory inside: listed under its name
    assert [os.path.relpath(s.path, root) for s in open_dataset(str(root)).shards] == ["alias/x.bin", "sub/x.bin"]
    os.symlink(root, root / "sub" / "up")            # a loop
    with pytest.raises(UsageError, match="loop"):
        open_dataset(str(root))
    os.unlink(root / "sub" / "up")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"s")
    os.symlink(outside, root / "sub" / "out")        # a directory outside: refused, never listed
    with pytest.raises(UsageError, match="outside the root"):
        open_dataset(str(root))
    os.unlink(root / "sub" / "out")
    os.mkfifo(root / "sub" / "pipe")                 # listed, never opened: no hang
    with pytest.raises(UsageError, match="pipe is not a regular file"):
        open_dataset(str(root))


def test_another_iodl_dataset_on_the_root_is_refused(tmp_path):
    root = str(tmp_path / "ds")
    generate(small(tmp_path), [root], COMM)
    before = tree(root)
    with pytest.raises(UsageError, match="holds another iodl dataset"):
        generate(small(tmp_path, files=6), [root], COMM)
    with pytest.raises(UsageError, match="holds another iodl dataset"):
        generate(small(tmp_path), [root], COMM, seed=7)
    assert tree(root) == before


def test_copies_are_distinct_files_with_the_same_layout(tmp_path):
    wl = small(tmp_path, files=3)
    root = str(tmp_path / "ds")
    res = generate(wl, [root], COMM, copies=3)
    ds = open_dataset(root)
    assert len(ds.shards) == 9 and res.shards_written == 9
    assert sorted({os.path.basename(os.path.dirname(s.path)) for s in ds.shards}) == ["copy-0000", "copy-0001", "copy-0002"]
    assert ds.total_bytes == 3 * sum(s.size for s in ds.shards[:3]) == res.total_bytes
    assert open(ds.shards[0].path, "rb").read() != open(ds.shards[3].path, "rb").read()
    assert (ds.sample_extents(0) == ds.sample_extents(3)).all()
    for s in ds.shards:
        read_tfrecords(s.path)
    more = generate(wl, [root], COMM, copies=4)       # adding a copy writes only the new one
    assert (more.shards_written, more.shards_skipped) == (3, 9)


def test_every_root_gets_the_whole_dataset(tmp_path):
    roots = [str(tmp_path / f"m{i}") for i in range(3)]
    generate(small(tmp_path), roots, COMM)
    sets = [[(os.path.relpath(s.path, r), s.size) for s in open_dataset(r).shards] for r in roots]
    assert sets[0] == sets[1] == sets[2] and len(sets[0]) == 5


def test_root_creation_rules(tmp_path):
    with pytest.raises(UsageError, match="parent directory .* does not exist"):
        generate(small(tmp_path), [str(tmp_path / "no" / "ds")], COMM)
    assert not (tmp_path / "no").exists()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        generate(small(tmp_path), [str(f)], COMM)
    empty = tmp_path / "empty"
    empty.mkdir()
    generate(small(tmp_path), [str(empty)], COMM)      # an existing empty directory is fine
    assert open_dataset(str(empty)).manifest["workload"] == "t"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_parent(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(UsageError, match="not writable"):
        generate(small(tmp_path), [str(ro / "ds")], COMM)


def test_open_errors(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        open_dataset(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="is empty"):
        open_dataset(str(tmp_path / "empty"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / MANIFEST).write_text("{not json")
    with pytest.raises(UsageError, match="unreadable dataset manifest"):
        open_dataset(str(bad))
    (bad / MANIFEST).write_text('{"schema": "other/1"}')
    with pytest.raises(UsageError, match="not an iodl dataset manifest"):
        open_dataset(str(bad))
    (bad / MANIFEST).write_text('{"schema": "iodl.dataset/2", "status": "complete"}')
    with pytest.raises(UsageError, match="unreadable dataset manifest"):
        open_dataset(str(bad))


def test_manifest_of_1024_shards_loads_fast(tmp_path):
    wl = small(tmp_path, files=1024, spf=2, size="16B", stdev="4B")
    root = str(tmp_path / "ds")
    generate(wl, [root], COMM)
    best = min(_timed(lambda: open_dataset(root)) for _ in range(3))
    assert best < 0.2, f"open_dataset took {best:.3f} s"
    ds = open_dataset(root)
    assert len(ds.shards) == 1024 and ds.total_bytes == sum(os.path.getsize(s.path) for s in ds.shards)
    m = ds.manifest
    assert m["schema"] == "iodl.dataset/2" and m["seed"] == 1 and m["format"] == "tfrecord"
    assert m["spec"]["files"] == m["files"] == 1024 and ds.samples_per_shard == 2
    assert np.load(os.path.join(root, m["file_sizes"])).tolist() == [s.size for s in ds.shards]


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def test_progress_callback_reaches_the_total(tmp_path):
    seen = []
    generate(small(tmp_path), [str(tmp_path / "ds")], COMM, progress=lambda done, total: seen.append((done, total)))
    # small shards are written (and reported) in batches: at least one call, never going back
    assert seen and all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert seen[-1][0] == seen[-1][1] == open_dataset(str(tmp_path / "ds")).total_bytes


def test_default_dataset_generated_once(tmp_path, monkeypatch):
    monkeypatch.setenv("IODL_DATA", str(tmp_path / "data"))
    assert default_data_dir() == str(tmp_path / "data")
    said = []
    root = ensure_default_dataset(COMM, say=said.append)
    assert len(said) == 1 and "tiny" in said[0]
    ds = open_dataset(root)
    assert ds.manifest["workload"] == "tiny" and len(ds.shards) == 16
    assert ensure_default_dataset(COMM, say=said.append) == root and len(said) == 1
    monkeypatch.delenv("IODL_DATA")
    assert default_data_dir() == os.path.join(os.path.expanduser("~"), ".cache", "iodl", "data")


# ---- the command line, as a user runs it ----

def test_cli_generate_and_rerun(tmp_path):
    root = str(tmp_path / "ds")
    r = iodl("generate", "--workload", "tiny", "--root", root, "--files", "4", "--format", "raw")
    assert r.returncode == 0, r.stderr
    assert "4 files (4 written, 0 already there)" in r.stdout and "MB/s" in r.stdout
    r = iodl("generate", "--workload", "tiny", "--root", root, "--files", "4", "--format", "raw")
    assert r.returncode == 0 and "(0 written, 4 already there)" in r.stdout
    assert len(open_dataset(root).shards) == 4


@pytest.mark.parametrize("args,message", [
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--files", "-3"], "--files: must be a positive integer, got -3"),
    (["--copies", "0"], "--copies: must be a positive integer, got 0"),
    (["--workload", "WL"], "bad.toml:4: [dataset] files: must be a positive integer, got -3"),
    (["--root", "FOREIGN"], "holds files that iodl did not create"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "bad.toml").write_text('[workload]\nname = "x"\n[dataset]\nfiles = -3\n')
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    args = [str(tmp_path / "bad.toml") if a == "WL" else str(foreign) if a == "FOREIGN" else a for a in args]
    if "--root" not in args:
        args += ["--root", str(tmp_path / "ds")]
    r = iodl("generate", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iodl: error: ") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert (foreign / "keep.txt").read_text() == "mine" and os.listdir(foreign) == ["keep.txt"]


def test_cli_under_mpiexec_3_splits_and_completes(tmp_path):
    from tests.helpers import mpiexec

    require_or_skip("mpiexec", mpiexec() is not None, "no mpiexec next to the interpreter (pip install mpich)")
    root = str(tmp_path / "ds")
    r = iodl("generate", "--workload", "tiny", "--root", root, "--files", "5", "--copies", "2", ranks=3, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "3 rank(s)" in r.stdout and "10 files (10 written" in r.stdout
    assert r.stdout.count("iodl generate:") == 2          # rank 0 alone talks
    ds = open_dataset(root)
    assert len(ds.shards) == 10
    for s in ds.shards:
        read_tfrecords(s.path)
    bad = iodl("generate", "--workload", "nope", "--root", root, ranks=3, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown workload 'nope'" in bad.stderr


def test_content_has_no_duplicate_blocks_and_does_not_depend_on_piece_size(tmp_path, monkeypatch):
    root = str(tmp_path / "ds")
    generate(small(tmp_path, files=3, spf=40, size="60000B", stdev="20000B"), [root], COMM, copies=2)
    ds = open_dataset(root)
    blocks = set()
    count = 0
    for s in ds.shards:                       # storage-side dedupe sees 4 KiB blocks at file offsets
        data = open(s.path, "rb").read()
        for k in range(0, len(data) - 4095, 4096):
            blocks.add(data[k:k + 4096])
            count += 1
    assert count > 1000 and len(blocks) == count
    sizes = ds.sample_sizes(0)
    whole = F.FORMATS["tfrecord"].prepare(sizes, (1, 0, 0))
    monkeypatch.setattr(F.Format, "PIECE", 5000)          # many small pieces, records cut nowhere
    assert (F.FORMATS["tfrecord"].prepare(sizes, (1, 0, 0)) == whole).all()
    assert whole.tobytes() == open(ds.shards[0].path, "rb").read()


def test_a_fresh_mount_point_with_only_lost_and_found_is_accepted(tmp_path):
    root = tmp_path / "mnt"
    (root / "lost+found").mkdir(parents=True)
    generate(small(tmp_path), [str(root)], COMM)
    assert len(open_dataset(str(root)).shards) == 5 and (root / "lost+found").is_dir()


def test_batch_ends_are_each_shards_sample_ends(tmp_path):
    """Dataset.batch_ends (a batch's look-up at once) gives each shard's sample_ends, in order:
    extents from the table (jpeg), from the sample sizes (raw, several samples), a copy's
    shards, and a plain directory's files."""
    wl = small(tmp_path, files=6, spf=1, size="3000B", stdev="900B")
    shards = np.array([4, 0, 7, 4, 11, 2])
    for fmt, copies in (("jpeg", 2), ("raw", 2)):
        generate(wl, [str(tmp_path / fmt)], COMM, fmt=fmt, copies=copies)
        ds = open_dataset(str(tmp_path / fmt))
        got = ds.batch_ends(shards)
        assert [np.asarray(e).tolist() for e in got] == [ds.sample_ends(int(s)).tolist() for s in shards], fmt
    generate(small(tmp_path, files=3, spf=5), [str(tmp_path / "many")], COMM, fmt="raw")
    ds = open_dataset(str(tmp_path / "many"))
    assert [e.tolist() for e in ds.batch_ends([2, 0])] == [ds.sample_ends(2).tolist(), ds.sample_ends(0).tolist()]
    plain = tmp_path / "plain"
    plain.mkdir()
    for name, n in (("a", 100), ("b", 0), ("c", 7)):
        (plain / name).write_bytes(b"x" * n)
    ds = open_dataset(str(plain))
    assert ds.batch_ends([2, 0, 1]).tolist() == [[7], [100], [0]] == [ds.sample_ends(i).tolist() for i in (2, 0, 1)]
