"""SampleStream.take_batch: a batch of one-sample shards made at once is take()'s batch.

Two streams of the same seed, one taking batches the vectorised way, the other through take()
and as_batch: the same shards, rows (offsets, lengths, file column), bytes, trace and order
checks, over several epochs, for each shuffle; and with shards of one and of two samples mixed
(the batch goes on through take() where a shard of more samples begins); and with the batch's
sample ends looked up at once.
"""
import numpy as np
import pytest

from iodl import plan
from iodl.runspec import RunSpec
from iodl.training import SampleStream, ShardLookahead, as_batch, shard_source

SHARDS, RANKS, BATCH, BS = 50, 2, 7, 4096
SIZES = np.random.default_rng(3).integers(100, 3 * BS, size=SHARDS)


def _stream(shuffle: str, ends_of, rank: int, batch_ends=None, lookahead: bool = False) -> SampleStream:
    cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=BS, seed=5,
                  batch_size=BATCH, compute_time_s=0, prefetch=0, shuffle=shuffle, shuffle_size=0)
    source = shard_source(cfg, SHARDS, rank, RANKS, rank, 0)
    if lookahead:   # as run_steps gives it: a batch's shards drawn in one call, some drawn ahead before
        source = ShardLookahead(source)
        source.ahead(BATCH + 3)
    stream = SampleStream(source, ends_of, SIZES, BS, 0, rng=np.random.default_rng(1), batch_ends=batch_ends)
    stream.trace = []
    return stream


def _pairs(stream: SampleStream) -> list[tuple[int, int]]:
    return [(int(x), int(y)) for sh, sm in stream.trace for x, y in zip(sh, sm)]


def _same(ends_of, shuffle: str, batch_ends=None, lookahead: bool = False) -> int:
    batches = 0
    for rank in range(RANKS):
        fast, slow = _stream(shuffle, ends_of, rank, batch_ends, lookahead), _stream(shuffle, ends_of, rank)
        for _ in range(3 * SHARDS // RANKS // BATCH + 2):   # three epochs and more
            a, b = fast.take_batch(BATCH), as_batch(*slow.take(BATCH))
            assert a[0] == b[0] and a[2] == b[2] and a[3] == b[3]
            assert a[1].dtype == plan.PLAN_DTYPE and np.array_equal(a[1], b[1])
            batches += 1
        assert _pairs(fast) == _pairs(slow)
        assert (fast.epochs_checked, fast.epochs_wrong) == (slow.epochs_checked, slow.epochs_wrong)
        assert fast.epochs_checked >= 2 and fast.epochs_wrong == 0
    return batches


@pytest.mark.parametrize("shuffle", ["none", "file", "sample"])
def test_one_sample_shards(shuffle):
    assert _same(lambda i: np.array([SIZES[i]]), shuffle) > 0


def test_mixed_shards_fall_back_where_a_shard_holds_more():
    # every fifth shard holds two samples (the first 40 % of it, then the rest)
    def ends_of(i):
        return np.array([SIZES[i] * 2 // 5, SIZES[i]]) if i % 5 == 0 else np.array([SIZES[i]])
    assert _same(ends_of, "file") > 0


@pytest.mark.parametrize("shuffle", ["none", "file"])
def test_one_sample_shards_looked_up_as_a_batch(shuffle):
    # a dataset's look-up of a whole batch at once (Dataset.batch_ends: an (n, 1) array)
    assert _same(lambda i: np.array([SIZES[i]]), shuffle, lambda shards: SIZES[shards].reshape(-1, 1)) > 0


@pytest.mark.parametrize("shuffle", ["none", "file"])
def test_one_sample_shards_drawn_through_the_lookahead(shuffle):
    # the shard order through a ShardLookahead (its take(n): a batch's draws at once, after opens ahead)
    assert _same(lambda i: np.array([SIZES[i]]), shuffle, lambda shards: SIZES[shards].reshape(-1, 1), True) > 0
