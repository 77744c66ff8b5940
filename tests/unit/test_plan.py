import os

import numpy as np
import pytest

from iodl import plan


@pytest.mark.parametrize("sizes,bs", [([10, 4096, 0, 5000], 4096), ([1 << 20, (1 << 20) + 123, 1], 1 << 20), ([7] * 5, 3)])
def test_shard_plan_reads_every_byte_once_in_order(sizes, bs):
    p = plan.shard_plan(sizes, bs)
    for i, size in enumerate(sizes):
        rows = p[p["file"] == i]
        assert int(rows["length"].sum()) == size
        assert (rows["length"] <= bs).all() and (rows["length"] > 0).all()
        ends = rows["offset"] + rows["length"]
        assert (rows["offset"][1:] == ends[:-1]).all()          # sequential, no gap, no overlap
    assert (np.diff(p["file"].astype(np.int64)) >= 0).all()      # shard after shard


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 322_957, 3 << 20])
def test_file_plan_is_shard_plan_of_one_file(size):
    assert plan.file_plan(size, 4096).tolist() == plan.shard_plan([size], 4096).tolist()
    assert plan.file_plan(size, 1 << 20).tolist() == plan.shard_plan([size], 1 << 20).tolist()


def test_random_order_is_seeded_and_differs_per_rank_and_epoch():
    a = plan.random_order(100, 7, 0, 0)
    assert (a == plan.random_order(100, 7, 0, 0)).all()
    assert sorted(a) == list(range(100))
    assert not (a == plan.random_order(100, 7, 1, 0)).all()
    assert not (a == plan.random_order(100, 7, 0, 1)).all()
    assert not (a == plan.random_order(100, 8, 0, 0)).all()


@pytest.mark.parametrize("n_shards,n_ranks", [(8, 3), (3, 8), (1024, 72), (0, 2)])
def test_validate_shares_cover_every_shard_once(n_shards, n_ranks):
    shares = np.concatenate([plan.validate_share(n_shards, j, n_ranks) for j in range(n_ranks)])
    assert sorted(shares.tolist()) == list(range(n_shards))


def test_ranks_map_to_mounts_round_robin():
    assert [plan.mount_of(r, 3) for r in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert plan.ranks_of_mount(1, 3, 7) == [1, 4]


def test_shard_stream_groups_whole_shards_until_exhausted():
    sizes = np.array([100, 200, 300, 400])
    stream = plan.ShardStream(lambda e: np.arange(4) if e == 0 else None, sizes, group_bytes=350, group_files=64)
    groups = []
    while (g := stream.next_group()) is not None:
        groups.append(g.tolist())
    assert groups == [[0, 1, 2], [3]]
    stream = plan.ShardStream(lambda e: np.arange(4), sizes, group_bytes=10**9, group_files=3)
    assert [len(stream.next_group()) for _ in range(3)] == [3, 3, 3]    # endless, bounded in files


FD_BUDGET_SCRIPT = """
import os
from iodl import plan
from iodl.errors import UsageError

held = []
try:
    while True:                      # every descriptor `ulimit -n 64` allows, as MPI's can take a small limit
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
try:
    print("budget", plan.fd_budget())
except UsageError as exc:
    print("error", exc)
for fd in held[-20:]:                # 20 free: 4 beyond the headroom's 16
    os.close(fd)
print("budget", plan.fd_budget())
"""


def test_fd_budget_with_every_descriptor_taken_is_one_line_not_a_traceback():
    # `resource` imported when every descriptor is in use fails with EMFILE: the module holds it already
    import subprocess
    import sys

    proc = subprocess.run(["bash", "-c", f'ulimit -n 64 && exec "{sys.executable}" -c "$0"', FD_BUDGET_SCRIPT],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    full, freed = proc.stdout.splitlines()
    assert full.startswith("error ulimit -n 64: every file descriptor") and "raise ulimit -n" in full, full
    assert freed == "budget 4", freed   # the descriptor that counts them is not counted


def test_shard_plan_rows_written_out():
    # two shards of 10 and 3 bytes in 4-byte requests, an empty one between them: no row for it
    assert plan.shard_plan([10, 0, 3], 4).tolist() == [(0, 0, 4, 0), (0, 4, 4, 0), (0, 8, 2, 0), (2, 0, 3, 0)]
    assert plan.shard_plan([], 4096).dtype == plan.PLAN_DTYPE and len(plan.shard_plan([], 4096)) == 0
    p = plan.shard_plan(np.array([5], dtype=np.uint64), 8)
    p["file"] += 3                                   # writable, as the batch code renumbers files
    assert p.tolist() == [(3, 0, 5, 0)]


def test_shard_plan_in_c_matches_numpy_arithmetic():
    """The C rows against the same plan made with numpy (the arithmetic it replaced)."""
    rng = np.random.default_rng(3)
    for bs, largest in ((1, 100), (7, 1000), (4096, 1 << 20), (262_144, 3 << 20), (1 << 20, 3 << 20)):
        sizes = rng.integers(0, largest, size=50)
        sizes[::7] = 0
        counts = (sizes + bs - 1) // bs
        ref = plan.new_plan(int(counts.sum()))
        ref["file"] = np.repeat(np.arange(len(sizes)), counts)
        offset = (np.arange(len(ref)) - np.repeat(np.cumsum(counts) - counts, counts)) * bs
        ref["offset"] = offset
        ref["length"] = np.minimum(bs, np.repeat(sizes, counts) - offset)
        assert (plan.shard_plan(sizes, bs) == ref).all()


def test_shard_plan_refuses_a_negative_size():
    with pytest.raises(ValueError, match="negative"):
        plan.shard_plan([4, -1], 4096)


@pytest.mark.parametrize("fmt,files,dirs", [("jpeg", 1000, [["/d/a", "/d/b"], ["/c1/a", "/c1/b"]]),
                                            ("npz", 7, [["/r"]]), ("tfrecord", 123_456, [["/é/ü", "/q"]])])
def test_generated_paths_joined_in_c_are_the_names_one_by_one(fmt, files, dirs):
    """GeneratedPaths.joined (C, the open threads' paths) against the names Python makes one by one,
    copies, folders, zero-padding and a non-ASCII directory included; a shard outside is refused."""
    from iodl.cursor import joined_paths
    from iodl.data.layout import GeneratedPaths

    g = GeneratedPaths(dirs, fmt, files, "/")
    n = len(dirs) * files
    shards = [0, n - 1, *np.random.default_rng(1).integers(0, n, 60).tolist()]
    assert joined_paths(g, shards) == b"".join(os.fsencode(g[s]) + b"\0" for s in shards)
    assert joined_paths(g, []) == b""
    for bad in (n, -1):
        with pytest.raises(IndexError):
            g.joined([3, bad])
