"""SampleStream.take_batch: a batch of one-sample shards made at once is take()'s batch.

Two streams of the same seed, one taking batches the vectorised way, the other through take()
and as_batch: the same shards, rows (offsets, lengths, file column), bytes, trace and order
checks, over several epochs, for each shuffle; and with shards of one and of two samples mixed
(the batch goes on through take() where a shard of more samples begins); and with the batch's
sample ends looked up at once. take_whole, the same batches with their opens started on real
files, on its own and handing over to the general way.
"""
import os

import numpy as np
import pytest

from iodl import _native, plan
from iodl.runspec import RunSpec
from iodl.training import SampleStream, ShardLookahead, as_batch, shard_source
from tests.helpers import fds_open, fds_settled

SHARDS, RANKS, BATCH, BS = 50, 2, 7, 4096
SIZES = np.random.default_rng(3).integers(100, 3 * BS, size=SHARDS)


def _stream(shuffle: str, ends_of, rank: int, batch_ends=None, lookahead: bool = False, tables=()) -> SampleStream:
    cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=BS, seed=5,
                  batch_size=BATCH, compute_time_s=0, prefetch=0, shuffle=shuffle, shuffle_size=0)
    source = shard_source(cfg, SHARDS, rank, RANKS, rank, 0)
    if lookahead:   # as run_steps gives it: a batch's shards drawn in one call, some drawn ahead before
        source = ShardLookahead(source, *tables)
        source.ahead(BATCH + 3)
    stream = SampleStream(source, ends_of, SIZES, BS, 0, rng=np.random.default_rng(1), batch_ends=batch_ends)
    stream.trace = []
    return stream


def _pairs(stream: SampleStream) -> list[tuple[int, int]]:
    return [(int(x), int(y)) for sh, sm in stream.trace for x, y in zip(sh, sm)]


def _same(ends_of, shuffle: str, batch_ends=None, lookahead: bool = False, tables=()) -> int:
    batches = 0
    for rank in range(RANKS):
        fast, slow = _stream(shuffle, ends_of, rank, batch_ends, lookahead, tables), _stream(shuffle, ends_of, rank)
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


@pytest.mark.parametrize("shuffle", ["none", "file"])
def test_one_sample_shards_looked_up_as_they_are_drawn(shuffle):
    # run_steps's look-ahead given the tables: each chunk of the order looked up once as drawn, a batch
    # of one-sample shards then made of its slices (ShardLookahead.peek), the same batches
    batch_ends = lambda shards: SIZES[shards].reshape(-1, 1)   # noqa: E731
    assert _same(lambda i: np.array([SIZES[i]]), shuffle, batch_ends, True, (SIZES, batch_ends)) > 0


def test_mixed_shards_with_tables_fall_back_where_a_shard_holds_more():
    def ends_of(i):
        return np.array([SIZES[i] * 2 // 5, SIZES[i]]) if i % 5 == 0 else np.array([SIZES[i]])
    batch_ends = lambda shards: [ends_of(int(s)) for s in shards]   # noqa: E731  (counts differ: a list)
    assert _same(ends_of, "file", batch_ends, True, (SIZES, batch_ends)) > 0


def test_the_shares_drawn_as_arrays_are_the_shares_drawn_one_by_one():
    cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=BS, seed=5,
                  batch_size=BATCH, compute_time_s=0, prefetch=0, shuffle="file", shuffle_size=0)
    for shards, ranks in ((SHARDS, RANKS), (3, 5)):   # more ranks than shards: each still gets one a epoch
        for rank in range(ranks):
            one, many = shard_source(cfg, shards, rank, ranks, rank), shard_source(cfg, shards, rank, ranks, rank)
            singles = [one() for _ in range(4 * max(shards // ranks, 1) + 3)]
            got, epochs = [], []
            for n in (1, 5, 2, 9, 100):
                s, e = many.draw(n)
                got += s.tolist()
                epochs += e.tolist()
            assert list(zip(got, epochs))[:len(singles)] == singles
            # each epoch's share: every R-th place of the epoch's order, from the rank's index
            share = max(shards // ranks, 1) if shards % ranks == 0 or shards < ranks else None
            if share:
                for ep in range(3):
                    order = np.empty(shards, dtype=np.int64)
                    _native.shuffled_range(order, 5, ep)   # the epoch's order (test_shuffle.py: a fair one)
                    want = order[np.arange(rank, max(shards, ranks), ranks) % shards].tolist()
                    assert [s for s, e in zip(got, epochs) if e == ep] == want


@pytest.mark.parametrize("wrong", [False, True])
def test_the_order_check_of_batches_made_at_once_fails_a_wrong_order(wrong):
    """take_batch's one-sample batches are counted for the order's check a batch at a time and
    checked as the epoch ends: an order that gives a shard twice in an epoch (and another not at
    all) is found wrong, the right one is not."""
    class Source:   # epochs of 0..27; with `wrong`, epoch 0 gives shard 5 twice and no 6
        def __init__(self):
            self.out = []

        def draw(self, n):
            while len(self.out) < n:
                epoch = len(self.out) // 28
                order = list(range(28))
                if wrong and epoch == 0:
                    order[6] = 5
                self.out += [(s, epoch) for s in order]
            got, self.out = self.out[:n], self.out[n:]
            return np.array([s for s, _ in got], dtype=np.int64), np.array([e for _, e in got], dtype=np.int64)

    batch_ends = lambda shards: SIZES[shards].reshape(-1, 1)   # noqa: E731
    stream = SampleStream(ShardLookahead(Source(), SIZES, batch_ends), lambda i: np.array([SIZES[i]]), SIZES, BS,
                          batch_ends=batch_ends)
    for _ in range(3 * 28 // BATCH):   # three epochs, batches that end where epochs do
        stream.take_batch(BATCH)
    stream.finish()
    assert (stream.epochs_checked, stream.epochs_wrong) == ((2, 1) if wrong else (3, 0))


def _files(tmp_path) -> list[str]:
    paths = []
    for i, size in enumerate(SIZES.tolist()):
        paths.append(str(tmp_path / f"s{i:03d}"))
        with open(paths[-1], "wb") as f:
            f.write(b"\1" * size)
    return paths


def _whole_stream(shuffle: str, rank: int) -> tuple[SampleStream, ShardLookahead]:
    cfg = RunSpec(pattern="train-sync", engine="null", direct=False, iodepth=1, block_size=BS, seed=5,
                  batch_size=BATCH, compute_time_s=0, prefetch=0, shuffle=shuffle, shuffle_size=0)
    sizes = SIZES.astype(np.int64)

    def batch_ends(shards):
        return sizes[np.asarray(shards)].reshape(-1, 1)
    la = ShardLookahead(shard_source(cfg, SHARDS, rank, RANKS, rank, 0), sizes, batch_ends)
    stream = SampleStream(la, lambda i: np.array([SIZES[i]]), SIZES, BS, 0, rng=np.random.default_rng(1),
                          batch_ends=batch_ends)
    stream.trace = []
    return stream, la


def _took(files, tickets, shards, paths) -> None:
    """The batch's opens, taken: each fd is its shard's file; closed."""
    got = np.frombuffer(files.pool.take(tickets), dtype=np.int64).reshape(-1, 6)
    assert (got[:, 1] == 0).all()
    assert [os.readlink(f"/proc/self/fd/{fd}") for fd in got[:, 0].tolist()] == [paths[s] for s in shards]
    for fd in got[:, 0].tolist():
        os.close(fd)


@pytest.mark.parametrize("shuffle", ["none", "file"])
def test_take_whole_is_take_batch_with_the_batchs_opens_started(tmp_path, shuffle):
    """take_whole (one-sample shards, the open threads' tickets kept by position) against take():
    the same shards, rows, bytes, trace and order checks, epochs cut short now and then (the rest of
    a share passed over, its opens dropped); each ticket opens its shard's file; nothing left open."""
    from iodl.cursor import ShardFiles

    paths = _files(tmp_path)
    before = fds_open()
    for rank in range(RANKS):
        files = ShardFiles(paths, SIZES, False, None, threads=2)
        fast, la = _whole_stream(shuffle, rank)
        slow = _stream(shuffle, lambda i: np.array([SIZES[i]]), rank)
        for k in range(5 * SHARDS // RANKS // BATCH):
            got = fast.take_whole(BATCH, 5, files)
            assert got is not None
            shards, rows, consumed, tickets = got
            want = as_batch(*slow.take(BATCH))
            assert shards == want[0] and consumed == want[3] and np.array_equal(rows, want[1])
            _took(files, tickets, shards, paths)
            if k % 7 == 6:   # an epoch cut short (total_steps): both pass over the rest of the share
                assert fast.end_epoch() == slow.end_epoch() == []
        assert _pairs(fast) == _pairs(slow)
        assert (fast.epochs_checked, fast.epochs_wrong) == (slow.epochs_checked, slow.epochs_wrong)
        assert fast.epochs_checked >= 1 and fast.epochs_wrong == 0
        files.close_all()
    assert fds_settled(before)


def test_take_whole_hands_its_opens_to_the_files_when_the_stream_goes_another_way(tmp_path):
    """After whole batches, a batch taken the general way (take_batch, ShardFiles.open) claims the
    opens take_whole started for it (adopted: not opened twice); take_whole is refused while such
    opens are outstanding, and takes up again once the stream is past them."""
    from iodl.cursor import ShardFiles

    paths = _files(tmp_path)
    before = fds_open()
    files = ShardFiles(paths, SIZES, False, None, threads=2)
    fast, la = _whole_stream("file", 0)
    slow = _stream("file", lambda i: np.array([SIZES[i]]), 0)
    for _ in range(3):
        shards, _rows, _consumed, tickets = fast.take_whole(BATCH, 2 * BATCH, files)
        assert shards == as_batch(*slow.take(BATCH))[0]
        _took(files, tickets, shards, paths)
    shards = fast.take_batch(BATCH)[0]   # the general way: what take_whole started is the files' now
    assert shards == as_batch(*slow.take(BATCH))[0]
    assert files._ahead_shards[files._at:files._at + BATCH] == shards
    fds = files.open(shards)
    assert [os.readlink(f"/proc/self/fd/{fd}") for fd in fds] == [paths[s] for s in shards]
    files.close(shards)
    assert fast.take_whole(BATCH, 0, files) is None   # the files' opens of the next batch are outstanding
    while la._given > la._drawn:
        shards = fast.take_batch(BATCH)[0]
        assert shards == as_batch(*slow.take(BATCH))[0]
        files.open(shards)
        files.close(shards)
    shards, _rows, _consumed, tickets = fast.take_whole(BATCH, BATCH, files)
    assert shards == as_batch(*slow.take(BATCH))[0]
    _took(files, tickets, shards, paths)
    files.close_all()
    assert fds_settled(before)   # an open begun ahead finishes, and is closed, on its thread
