"""iodl generate under MPI at any size: ranks share the shards round-robin, the result is one dataset."""
import os

import numpy as np
import pytest

from iodl import workload as W
from iodl.comm import MpiComm
from iodl.data.generate import generate
from iodl.data.open import open_dataset
from iodl.errors import IodlError

pytestmark = pytest.mark.mpi

import crc32c as crc32c_pkg   # the independent CRC32C check (a dependency)


def _wl(mpi_tmp_path, files=7, fmt="tfrecord"):
    comm = MpiComm()
    path = os.path.join(mpi_tmp_path, "w.toml")
    if comm.rank == 0:
        with open(path, "w") as f:
            f.write(f'[workload]\nname = "m"\n[dataset]\nformat = "{fmt}"\nfiles = {files}\nsamples_per_file = 5\n'
                    'sample_size = "3000B"\nsample_size_stdev = "1000B"\n[train]\nbatch_size = 2\ncompute_time_s = 0\n')
    comm.barrier()
    return comm, W.load_workload(path)


def _masked(data):
    c = crc32c_pkg.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _check_tfrecord(path, sizes):
    blob = open(path, "rb").read()
    pos = 0
    for n in sizes:
        assert int.from_bytes(blob[pos:pos + 8], "little") == n
        assert int.from_bytes(blob[pos + 8:pos + 12], "little") == _masked(blob[pos:pos + 8])
        assert int.from_bytes(blob[pos + 12 + n:pos + 16 + n], "little") == _masked(blob[pos + 12:pos + 12 + n])
        pos += 16 + n
    assert pos == len(blob)


def test_ranks_split_the_shards_over_roots_and_copies(mpi_tmp_path):
    comm, wl = _wl(mpi_tmp_path)
    roots = [os.path.join(mpi_tmp_path, "a"), os.path.join(mpi_tmp_path, "b")]
    res = generate(wl, roots, comm, copies=2)
    items = 2 * 2 * 7
    assert res.written_by_rank == [len(range(r, items, comm.size)) for r in range(comm.size)]
    assert res.shards_written == items and res.shards_skipped == 0
    for root in roots:
        ds = open_dataset(root)
        assert len(ds.shards) == 14
        for i in range(comm.rank, len(ds.shards), comm.size):   # every rank checks a share
            _check_tfrecord(ds.shards[i].path, ds.sample_sizes(i).tolist())
    again = generate(wl, roots, comm, copies=2)
    assert (again.shards_written, again.shards_skipped) == (0, items)


def test_npz_extents_are_gathered_from_every_rank(mpi_tmp_path):
    comm, wl = _wl(mpi_tmp_path, files=5, fmt="npz")
    root = os.path.join(mpi_tmp_path, "z")
    generate(wl, [root], comm)
    ds = open_dataset(root)
    for i, shard in enumerate(ds.shards):
        ext = ds.sample_extents(i)
        with np.load(shard.path) as z:
            arrays = [z[n] for n in sorted(z.files)]
        blob = open(shard.path, "rb").read()
        for (off, n), arr in zip(ext.tolist(), arrays):
            assert blob[off:off + n].endswith(arr.tobytes())


def test_a_bad_root_fails_on_every_rank_without_hanging(mpi_tmp_path):
    comm, wl = _wl(mpi_tmp_path)
    foreign = os.path.join(mpi_tmp_path, "theirs")
    if comm.rank == 0:
        os.makedirs(foreign)
        with open(os.path.join(foreign, "x"), "w") as f:
            f.write("x")
    comm.barrier()
    with pytest.raises(IodlError, match="did not create") as e:
        generate(wl, [foreign], comm)
    assert e.value.exit_code == 2
    assert os.listdir(foreign) == ["x"]
