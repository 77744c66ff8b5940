"""The sample order of the step patterns: none, file, sample, file+sample.

Every rank of a mount is simulated with the stream iodl runs (shard_source + SampleStream), and
what each takes is counted: per epoch, the ranks together take every sample of the dataset
exactly once; the order changes between epochs and is the same for the same seed."""
import numpy as np
import pytest

from iodl import plan
from iodl.runspec import RunSpec
from iodl.training import SampleStream, buffer_size, shard_source

SHARDS, PER_SHARD, RANKS, BATCH = 12, 40, 3, 16
SIZES = np.random.default_rng(7).integers(1000, 9000, size=(SHARDS, PER_SHARD))   # sample sizes, per shard
ENDS = np.cumsum(SIZES, axis=1)
BS = 4096


def _epochs(shuffle: str, seed: int = 1, epochs: int = 2, shuffle_size: int = 50, per_shard: int = PER_SHARD):
    """Per rank, per epoch: the (shard, sample) pairs taken in order, the bytes read, the bytes
    taken; and each rank's own check of its finished epochs."""
    cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=BS, seed=seed,
                  batch_size=BATCH, compute_time_s=0, prefetch=0, shuffle=shuffle, shuffle_size=shuffle_size)
    ends = ENDS[:, :per_shard]
    buffer = buffer_size(shuffle, shuffle_size, per_shard)
    share = SHARDS // RANKS * per_shard          # samples a rank takes per epoch
    out, checks = [], []
    for rank in range(RANKS):
        stream = SampleStream(shard_source(cfg, SHARDS, rank, RANKS, rank, buffer), lambda i: ends[i],
                              ends[:, -1], BS, buffer, rng=np.random.default_rng([seed, rank, 1]))
        stream.trace = []
        per_epoch = []
        for _epoch in range(epochs):
            stream.trace.clear()
            read = taken = 0
            left = share
            while left:
                segments, nbytes = stream.take(min(BATCH, left))
                read += sum(int(rows["length"].sum()) for _s, rows, _d in segments)
                taken += nbytes
                left -= min(BATCH, left)
            pairs = [(int(s), int(k)) for sh, sm in stream.trace for s, k in zip(sh, sm)]
            per_epoch.append((pairs, read, taken))
        stream.take(1)                           # starts the next epoch: the last one is checked
        out.append(per_epoch)
        checks.append((stream.epochs_checked, stream.epochs_wrong))
    return out, checks


@pytest.mark.parametrize("shuffle", ["none", "file", "sample", "file+sample"])
def test_every_sample_is_taken_exactly_once_per_epoch(shuffle):
    runs, checks = _epochs(shuffle, epochs=3)
    every = {(s, k) for s in range(SHARDS) for k in range(PER_SHARD)}
    for epoch in range(3):
        taken = [p for rank in runs for p in rank[epoch][0]]
        assert len(taken) == len(every) and set(taken) == every
        # whole shards read once each: the bytes read are the shards' bytes; the bytes taken, the samples'
        assert sum(rank[epoch][2] for rank in runs) == int(SIZES.sum())
        assert sum(rank[epoch][1] for rank in runs) == pytest.approx(int(SIZES.sum()), abs=SHARDS * BS)
    assert checks == [(3, 0)] * RANKS            # each rank's own count agrees


@pytest.mark.parametrize("shuffle", ["file", "sample", "file+sample"])
def test_the_order_changes_between_epochs_and_repeats_with_the_seed(shuffle):
    runs, _ = _epochs(shuffle)
    again, _ = _epochs(shuffle)
    other, _ = _epochs(shuffle, seed=2)
    for rank, rank_again, rank_other in zip(runs, again, other):
        assert rank[0][0] != rank[1][0]
        assert [e[0] for e in rank] == [e[0] for e in rank_again]
        assert [e[0] for e in rank] != [e[0] for e in rank_other]


def test_what_each_order_shuffles():
    def shards(pairs):
        return list(dict.fromkeys(s for s, _k in pairs))

    none, _ = _epochs("none")
    file, _ = _epochs("file")
    sample, _ = _epochs("sample")
    both, _ = _epochs("file+sample")
    for rank in range(RANKS):
        mine = list(range(rank, SHARDS, RANKS))
        # none: the rank's shards in index order, samples in file order, every epoch
        assert none[rank][0][0] == none[rank][1][0] == [(s, k) for s in mine for k in range(PER_SHARD)]
        # file: samples in file order within each shard (the shard order: below)
        for epoch in file[rank]:
            assert [k for s, k in epoch[0] if s == epoch[0][0][0]] == list(range(PER_SHARD))
        # sample: shards loaded in index order, samples drawn from the buffer out of file order
        assert [k for s, k in sample[rank][0][0] if s == mine[0]] != list(range(PER_SHARD))
        assert sample[rank][0][0][0][0] in mine[:2]   # the first draws come from the first shards loaded
        assert both[rank][0][0] != sample[rank][0][0]
    # file: the shards are dealt from a permutation, not in index order
    assert any(shards(file[rank][e][0]) != list(range(rank, SHARDS, RANKS)) for rank in range(RANKS) for e in (0, 1))


def test_one_sample_shards_shuffle_samples_as_shards():
    """With one sample per shard a sample order is a shard order: no buffer, shards permuted."""
    assert buffer_size("file+sample", 50, 1) == 0 and buffer_size("sample", 50, 2) == 50
    runs, checks = _epochs("sample", per_shard=1)
    assert checks == [(2, 0)] * RANKS
    assert any([s for s, _k in rank[0][0]] != list(range(r, SHARDS, RANKS)) for r, rank in enumerate(runs))
    assert sorted(s for rank in runs for s, _k in rank[0][0]) == list(range(SHARDS))


def test_plans_are_whole_block_reads():
    assert plan.shard_plan([10_000], BS)["length"].tolist() == [4096, 4096, 1808]


def test_the_shard_order_is_a_permutation_the_same_for_the_same_seed_and_epoch_and_fair():
    """_native.shuffled_range, the order ShardShares deals from: 0..n-1 each once, in both widths;
    the same order for the same (seed, epoch) and another for another; every order of 4 items about
    equally often over 24,000 epochs (chi-square, 23 degrees of freedom: 49.7 is its 0.999 point);
    a dtype it cannot fill refused."""
    from iodl import _native

    orders = {}
    for dtype in (np.int32, np.int64):
        for seed, epoch in ((1, 0), (1, 1), (2, 0), (0, 1), (2**64 - 1, 0)):
            a = np.empty(1000, dtype=dtype)
            _native.shuffled_range(a, seed, epoch)
            assert sorted(a.tolist()) == list(range(1000))
            orders.setdefault((seed, epoch), a.tolist())
            assert orders[(seed, epoch)] == a.tolist()   # int32 and int64 alike
    assert len({tuple(o) for o in orders.values()}) == len(orders)
    counts: dict[tuple, int] = {}
    four = np.empty(4, dtype=np.int64)
    for epoch in range(24_000):
        _native.shuffled_range(four, 7, epoch)
        counts[tuple(four.tolist())] = counts.get(tuple(four.tolist()), 0) + 1
    assert len(counts) == 24
    assert sum((c - 1000) ** 2 / 1000 for c in counts.values()) < 49.7
    for bad in (np.empty(3), np.empty(3, dtype=np.uint32), np.empty(6, dtype=np.int64)[::2], b"abcd"):
        with pytest.raises(ValueError, match="int32 or int64"):
            _native.shuffled_range(bad, 1, 1)
    empty = np.empty(0, dtype=np.int32)
    _native.shuffled_range(empty, 1, 1)
