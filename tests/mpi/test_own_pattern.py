"""Adding a pattern is one module: a pattern written here, in a registry of the test's own, runs
through `iodl read` in-process at any MPI size, with nothing else changed; its counts are checked
against the files on disk."""
import argparse
import json
import os

import numpy as np
import pytest

from iodl.cmd import read
from iodl.comm import MpiComm
from iodl.patterns import PATTERNS, Pattern, read_shards

pytestmark = pytest.mark.mpi

SIZES = [(1 << 20) + 123, 4095, 1, 3 << 20, 700_001]
BLOCK = 1 << 20


class OneShard(Pattern):
    """Each rank reads one shard whole, once: shard rank % shards."""
    name = "one-shard"

    def run(self, run):
        shard = run.comm.rank % len(run.sizes)
        run.part = os.path.getsize(run.paths[shard])   # the truth, from the file system
        return read_shards(run, lambda epoch: np.array([shard]) if epoch == 0 else None, None)

    def summarize(self, spec, parts, reduced, partial):
        return {"one_shard": {"bytes": [size for _mount, size in parts]}}


def test_a_pattern_from_a_test_file_runs_through_iodl_read(mpi_tmp_path):
    comm = MpiComm()
    root = os.path.join(mpi_tmp_path, "data")
    out = os.path.join(mpi_tmp_path, "result.json")
    if comm.rank == 0:
        os.makedirs(root)
        for i, size in enumerate(SIZES):
            with open(os.path.join(root, f"s{i}"), "wb") as f:
                f.write(os.urandom(size))
    comm.barrier()
    patterns = {**PATTERNS, OneShard.name: OneShard()}
    parser = argparse.ArgumentParser()
    read.add_arguments(parser, patterns)
    args = parser.parse_args(["--pattern", "one-shard", "--root", root, "--engine", "psync", "--block-size", "1MiB",
                              "--progress", "off", "--out", out])
    assert read.run(comm, args, patterns) == 0
    comm.barrier()
    with open(out) as f:
        result = json.load(f)
    read_by_rank = [SIZES[r % len(SIZES)] for r in range(comm.size)]   # the shards are listed s0, s1, ...
    assert result["pattern"] == "one-shard" and result["ranks"] == comm.size
    assert result["one_shard"]["bytes"] == read_by_rank
    assert result["total"]["bytes"] == sum(read_by_rank)
    assert result["total"]["ios"] == sum(-(-size // BLOCK) for size in read_by_rank)
    assert result["total"]["errors"] == 0 and not result["partial"]
