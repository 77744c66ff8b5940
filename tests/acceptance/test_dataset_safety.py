"""Datasets on disk never lead iodl outside a root, never write through a link, and fail in one line.

Real parts only: real symlinks, real FIFOs (an open of one that iodl must not do would block the run,
so a finished run proves it was not opened), small tmpfs mounts for ENOSPC, RLIMIT_NOFILE set on the
child. Every planted target outside a root is checksummed before and after.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import resource
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import iodl, load_json, mpiexec
from tests.conftest import require_or_skip

TINY = ("--workload", "tiny")


def _one_line_error(proc, *words):
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("iodl: error: ") for ln in lines), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns


def _generate(root, files=2, copies=1):
    proc = iodl("generate", *TINY, "--root", root, "--files", str(files), "--copies", str(copies), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return root


def _no_temps(root):
    assert not glob.glob(os.path.join(root, "**", "*.iodl-tmp"), recursive=True)


def _validate(root, *extra, timeout=60, **kw):
    return iodl("read", "--pattern", "validate", "--root", root, "--progress", "off", *extra, timeout=timeout, **kw)


@pytest.fixture
def dataset(tmp_path):
    return _generate(str(tmp_path / "ds"))


def _edit_manifest(root, fn):
    path = os.path.join(root, "iodl-dataset.json")
    with open(path) as f:
        manifest = json.load(f)
    fn(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def _as_schema_1(root):
    """The manifest as iodl wrote it before schema 2 (every file listed in the JSON; no file-sizes table)."""
    import numpy as np

    sizes_file = os.path.join(root, "iodl-file-sizes.npy")
    sizes = np.load(sizes_file)
    os.unlink(sizes_file)
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "copy-0000", "*")))

    def edit(m):
        del m["file_sizes"], m["total_bytes"]
        m.update(schema="iodl.dataset/1", files=[{"path": n, "size": int(s), "samples": 64} for n, s in zip(names, sizes)])
    _edit_manifest(root, edit)


def _edit_file_sizes(root, fn):
    import numpy as np

    path = os.path.join(root, "iodl-file-sizes.npy")
    sizes = np.load(path)
    fn(sizes)
    np.save(path, sizes)


# ---------------------------------------------------------------- manifests stay inside -------

@pytest.mark.parametrize("where", ["copies", "sample_sizes", "extents", "file_sizes", "file_sizes_absolute"])
def test_manifest_entry_outside_root_is_refused(tmp_path, dataset, where):
    # The outside target is a FIFO: an open of it would block, so a run that ends proves it was not opened.
    # The manifest names no shard (names follow from indices): only its copies and tables can point out.
    outside = str(tmp_path / "outside")
    os.mkfifo(outside)
    edits = {
        "copies": lambda m: m.update(copies=["../"]),
        "sample_sizes": lambda m: m.update(sample_sizes="../outside"),
        "extents": lambda m: m.update(extents="../outside"),
        "file_sizes": lambda m: m.update(file_sizes="../outside"),
        "file_sizes_absolute": lambda m: m.update(file_sizes=outside),
    }
    _edit_manifest(dataset, edits[where])
    proc = _validate(dataset, timeout=30)
    _one_line_error(proc, "iodl-dataset.json")


def test_symlinked_copy_dir_pointing_out_is_refused_when_reading(tmp_path, dataset):
    elsewhere = tmp_path / "elsewhere"
    os.rename(os.path.join(dataset, "copy-0000"), elsewhere)
    os.symlink(elsewhere, os.path.join(dataset, "copy-0000"))
    _one_line_error(_validate(dataset), "copy-0000", "outside")


def test_shard_symlink_pointing_out_is_refused(tmp_path, dataset):
    shard = sorted(glob.glob(os.path.join(dataset, "copy-0000", "*")))[0]
    outside = tmp_path / "outside"
    os.rename(shard, outside)
    os.symlink(outside, shard)
    _one_line_error(_validate(dataset), os.path.basename(shard), "outside")


def test_manifest_naming_too_many_shards_is_refused_fast(dataset):
    _edit_manifest(dataset, lambda m: m.update(copies=[f"c{i}" for i in range(100_001)], files=m["files"] * 60))
    t0 = time.monotonic()
    _one_line_error(_validate(dataset), "copies")
    assert time.monotonic() - t0 < 20


def test_pickled_sizes_file_is_refused(dataset):
    import numpy as np

    np.save(os.path.join(dataset, "iodl-sample-sizes.npy"), np.array([{"x": 1}, {"y": 2}], dtype=object),
            allow_pickle=True)
    _one_line_error(_validate(dataset), "iodl-dataset.json")


def test_every_rank_exits_nonzero_on_a_bad_manifest(dataset):
    require_or_skip("mpiexec", bool(mpiexec()), "mpiexec not found next to the test interpreter")
    _edit_manifest(dataset, lambda m: m.update(file_sizes="/etc/passwd"))
    marker = "rank-exit"
    # each rank's exit code is printed by a wrapper shell, so every rank's status is seen, not only mpiexec's
    import sys
    cmd = [mpiexec(), "-n", "2", "sh", "-c",
           f'{sys.executable} -m iodl read --pattern validate --progress off --root {dataset}; echo {marker}=$?']
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60, "a refused manifest must end the job promptly"
    codes = [int(ln.split("=")[1]) for ln in proc.stdout.splitlines() if ln.startswith(marker)]
    assert len(codes) == 2 and all(c != 0 for c in codes), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_forged_npy_header_is_refused_before_allocating(dataset):
    # a header promising 8 TB of sizes in a file of a few bytes: refused from the header, no allocation
    path = os.path.join(dataset, "iodl-sample-sizes.npy")
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 500000000000), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 16)
    t0 = time.monotonic()
    _one_line_error(_validate(dataset), "iodl-sample-sizes.npy", "header promises")
    assert time.monotonic() - t0 < 20


def test_manifest_whose_samples_reach_past_a_shard_is_refused(dataset):
    def shorten(sizes):
        sizes[1] -= 1
    _edit_file_sizes(dataset, shorten)
    _one_line_error(_validate(dataset), "iodl-dataset.json", "train-00001", "past")


def test_schema_1_manifest_is_refused_and_generate_brings_it_up_to_date(tmp_path):
    # a dataset an older iodl made: one line saying what to run; running it rewrites the manifest only
    root = _generate(str(tmp_path / "ds"), files=3, copies=2)
    shards = {p: _digest(p) for p in glob.glob(os.path.join(root, "copy-*", "*"))}
    _as_schema_1(root)
    proc = _validate(root)
    assert proc.returncode == 2
    _one_line_error(proc, "iodl-dataset.json", "older iodl", "iodl generate", root)
    proc = iodl("generate", *TINY, "--root", root, "--files", "3", "--copies", "2")
    assert proc.returncode == 0, proc.stderr
    assert "(0 written, 6 already there)" in " ".join(proc.stdout.split()), proc.stdout
    assert {p: _digest(p) for p in glob.glob(os.path.join(root, "copy-*", "*"))} == shards
    assert load_json(os.path.join(root, "iodl-dataset.json"))["schema"] == "iodl.dataset/2"
    out = str(tmp_path / "o.json")
    proc = _validate(root, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert load_json(out)["validate"]["shards"] == 6


def test_forged_subfolders_are_refused(dataset):
    _edit_manifest(dataset, lambda m: m.update(subfolders=10**9))
    _one_line_error(_validate(dataset), "iodl-dataset.json", "subfolders")


def test_subfolder_that_is_a_link_out_is_refused(tmp_path):
    root = str(tmp_path / "ds")
    proc = iodl("generate", *TINY, "--root", root, "--files", "4", "--subfolders", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    os.rename(os.path.join(root, "copy-0000", "1"), tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", os.path.join(root, "copy-0000", "1"))
    _one_line_error(_validate(root), "folder", "outside")


def test_generate_refuses_one_root_given_twice_through_a_link(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    os.symlink(root, tmp_path / "alias")
    proc = iodl("generate", *TINY, "--root", str(root), "--root", str(tmp_path / "alias"), "--files", "1")
    _one_line_error(proc, "twice")
    assert os.listdir(root) == []


# ---------------------------------------------------------------- non-regular files and sizes -

@pytest.mark.parametrize("direct", [False, True])
def test_open_for_read_refuses_a_fifo_without_blocking(tmp_path, direct):
    # O_DIRECT on a FIFO fails with EINVAL: that must still say "not a regular file", not blame the filesystem
    from iodl.engine import open_for_read
    from iodl.errors import IodlError

    fifo = str(tmp_path / "f")
    os.mkfifo(fifo)
    with pytest.raises(IodlError, match="not a regular file"):
        open_for_read(fifo, direct, 4096)


def test_fifo_in_place_of_a_shard_fails_in_one_line(dataset):
    shard = sorted(glob.glob(os.path.join(dataset, "copy-0000", "*")))[1]
    os.unlink(shard)
    os.mkfifo(shard)
    _one_line_error(_validate(dataset, timeout=30), shard, "not a regular file")


def test_foreign_root_with_fifo_is_refused(tmp_path):
    root = tmp_path / "foreign"
    root.mkdir()
    (root / "a.bin").write_bytes(b"x" * 4096)
    os.mkfifo(root / "b.fifo")
    _one_line_error(_validate(str(root), timeout=30), "b.fifo", "not a regular file")


def test_truncated_shard_names_expected_and_actual_size(dataset):
    shard = sorted(glob.glob(os.path.join(dataset, "copy-0000", "*")))[0]
    size = os.path.getsize(shard)
    os.truncate(shard, size * 3 // 4)
    line = _one_line_error(_validate(dataset), shard, str(size), str(size * 3 // 4))
    assert "expected" in line


def test_validate_says_what_it_checked(tmp_path):
    root = _generate(str(tmp_path / "ds"), files=3, copies=2)
    out = str(tmp_path / "o.json")
    proc = _validate(root, "--out", out)
    assert proc.returncode == 0, proc.stderr
    block = load_json(out)["validate"]
    manifest = load_json(os.path.join(root, "iodl-dataset.json"))
    assert block["shards"] == 6
    assert block["bytes"] == block["expected_bytes"] == manifest["total_bytes"]
    assert block["checked"] == "sizes"


def test_validate_runs_within_a_small_file_limit(tmp_path):
    # 40 shards, 32 descriptors: the stream must open fewer shards at once than the limit allows
    root = str(tmp_path / "many")
    proc = iodl("generate", "--workload", _small_workload(tmp_path, files=40), "--root", root, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = str(tmp_path / "o.json")
    proc = _validate(root, "--out", out, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))
    assert proc.returncode == 0, proc.stderr
    assert load_json(out)["validate"]["shards"] == 40


@pytest.mark.parametrize("inherited", [0, 1, 2])
def test_validate_of_400_shards_on_4_ranks_under_ulimit_32_runs_or_says_one_line(tmp_path, inherited):
    # MPI's own descriptors fill most of `ulimit -n 32` (~30 on a rank with MPICH 5.0), and a shell
    # may pass on a few more (`inherited`, as a terminal's or a job runner's; with 2 a rank has none
    # left, with 3 mpiexec cannot start the ranks): the run reads every shard, or ends in one line,
    # exit 2, naming the limit; never a traceback
    if not mpiexec():
        pytest.skip("mpiexec not found next to the test interpreter")
    root = str(tmp_path / "many")
    proc = iodl("generate", "--workload", _small_workload(tmp_path, files=400), "--root", root, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = str(tmp_path / "o.json")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(inherited)]
    try:
        proc = subprocess.run([mpiexec(), "-n", "4", sys.executable, "-m", "iodl", "read", "--pattern", "validate",
                               "--root", root, "--progress", "off", "--out", out], pass_fds=held,
                              capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))
    finally:
        for fd in held:
            os.close(fd)
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 0:
        assert load_json(out)["validate"]["shards"] == 400
        return
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("iodl: ")]
    assert proc.returncode == 2 and len(ours) == 1, proc.stderr
    assert ours[0].startswith("iodl: error") and "ulimit -n 32" in ours[0], ours[0]


def _small_workload(tmp_path, files):
    path = tmp_path / "w.toml"
    path.write_text(f'[workload]\nname = "s"\n[dataset]\nformat = "tfrecord"\nfiles = {files}\nsamples_per_file = 4\n'
                    'sample_size = "4000B"\nsample_size_stdev = "0B"\n[train]\nbatch_size = 2\ncompute_time_s = 0\n')
    return str(path)


# ---------------------------------------------------------------- generate never writes through links

def _incomplete_root(tmp_path):
    """A root whose generation was cut short: manifest written, no shard yet."""
    root = _generate(str(tmp_path / "ds"))
    _edit_manifest(root, lambda m: m.update(status="incomplete"))
    for shard in glob.glob(os.path.join(root, "copy-0000", "*")):
        os.unlink(shard)
    return root


def test_generate_does_not_write_through_a_planted_temp_symlink(tmp_path):
    root = _incomplete_root(tmp_path)
    target = tmp_path / "precious"
    target.write_bytes(b"keep me" * 100)
    before = _digest(target)
    shard = os.path.join(root, "copy-0000", "train-00000-of-00002.tfrecord")
    os.symlink(target, shard + ".iodl-tmp")
    os.symlink(target, os.path.join(root, "iodl-dataset.json.iodl-tmp"))
    _generate(root)
    assert _digest(target) == before
    assert os.path.isfile(shard) and not os.path.islink(shard)
    _no_temps(root)


def test_generate_refuses_a_symlinked_copy_dir(tmp_path):
    root = _incomplete_root(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rmdir(os.path.join(root, "copy-0000"))
    os.symlink(elsewhere, os.path.join(root, "copy-0000"))
    proc = iodl("generate", *TINY, "--root", root, "--files", "2", "--copies", "1")
    _one_line_error(proc, "copy-0000")
    assert os.listdir(elsewhere) == []


def test_generate_replaces_a_final_shard_symlink_without_touching_its_target(tmp_path):
    root = _incomplete_root(tmp_path)
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    before = _digest(target)
    shard = os.path.join(root, "copy-0000", "train-00001-of-00002.tfrecord")
    os.symlink(target, shard)
    _generate(root)
    assert _digest(target) == before and not os.path.islink(shard)


# ---------------------------------------------------------------- ENOSPC ----------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    require_or_skip("root", os.geteuid() == 0, "mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounts = []

    def mount(opts):
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], check=True)
        mounts.append(mnt)
        return str(mnt)

    yield mount
    for m in mounts:
        subprocess.run(["umount", str(m)], check=False)


def test_generate_refuses_up_front_when_the_dataset_cannot_fit(small_tmpfs):
    mnt = small_tmpfs("size=2m")
    root = os.path.join(mnt, "r")
    proc = iodl("generate", *TINY, "--root", root, "--files", "4", "--copies", "1")
    line = _one_line_error(proc, root, "free")
    need, free = [int(w) for w in line.replace(",", " ").split() if w.isdigit()][-2:]
    assert need > 16_000_000 and 1_900_000 < free <= 2 * 1024 * 1024
    assert not glob.glob(os.path.join(root, "copy-0000", "*"))


def test_two_roots_on_one_filesystem_add_up(small_tmpfs):
    mnt = small_tmpfs("size=6m")
    proc = iodl("generate", *TINY, "--root", os.path.join(mnt, "a"), "--root", os.path.join(mnt, "b"),
                "--files", "1", "--copies", "1")
    _one_line_error(proc, "/a", "/b", "free")


def test_enospc_at_create_names_the_file_and_leaves_no_temp(small_tmpfs):
    # room for the bytes (the up-front check passes) but not for the inodes: the kernel's ENOSPC mid-run
    mnt = small_tmpfs("size=16m,nr_inodes=6")
    root = os.path.join(mnt, "r")
    proc = iodl("generate", *TINY, "--root", root, "--files", "2", "--copies", "1")
    _one_line_error(proc, "writing the dataset: " + root, "No space left on device")
    _no_temps(root)


@pytest.mark.flaky(reruns=1)
def test_enospc_mid_write_names_the_file_and_leaves_no_temp(small_tmpfs):
    # the check passes; a filler then takes the free space while the first shard is being written
    mnt = small_tmpfs("size=40m")
    root = os.path.join(mnt, "r")
    done = threading.Event()

    def fill():
        while not done.is_set():
            if glob.glob(os.path.join(root, "copy-0000", "*.iodl-tmp")):
                st = os.statvfs(mnt)
                with open(os.path.join(mnt, "filler"), "wb") as f:
                    try:
                        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)
                    except OSError:
                        pass
                return
            time.sleep(0.0005)

    filler = threading.Thread(target=fill)
    filler.start()
    try:
        proc = iodl("generate", *TINY, "--root", root, "--files", "8", "--copies", "1")
    finally:
        done.set()
        filler.join()
    _one_line_error(proc, "writing the dataset: " + root, ".tfrecord", "No space left on device")
    _no_temps(root)


@pytest.mark.parametrize("fmt", ["hdf5", "npz"])
def test_enospc_in_a_library_writer_names_the_file(small_tmpfs, fmt):
    # h5py and zipfile raise ENOSPC without a file name; the check is made to pass (statvfs reports
    # plenty) so that the kernel's ENOSPC arrives mid-write, as when another writer fills the disk
    mnt = small_tmpfs("size=3m")
    root = os.path.join(mnt, "r")
    import sys
    code = ("import os, sys; from iodl import cli; real = os.statvfs\n"
            "os.statvfs = lambda p: os.statvfs_result((4096, 4096, 1 << 30, 1 << 30, 1 << 30) + tuple(real(p))[5:])\n"
            "sys.exit(cli.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "generate", *TINY, "--format", fmt, "--root", root,
                           "--files", "2", "--copies", "1"], capture_output=True, text=True, timeout=60)
    _one_line_error(proc, "writing the dataset: " + root, "." + {"hdf5": "h5"}.get(fmt, fmt), "No space left on device")
    _no_temps(root)
