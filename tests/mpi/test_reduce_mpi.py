"""The reducer at any size: per-rank values set by hand, their MIN/MAX/SUM per mount and over all
worked out here from the same values; a mount that no rank reads holds each operation's identity
and its figures are zero."""
import numpy as np
import pytest

from iodl import histogram, reduce
from iodl.patterns.checkpoint_share import OpCounters
from iodl.comm import MpiComm
from iodl.metrics import RankResult, reduce_results

pytestmark = pytest.mark.mpi

MOUNTS = 3   # ranks go to mounts 0 and 1; mount 2 is read by nobody


def _mount(rank: int) -> int:
    return rank % 2


def test_a_figure_of_another_kind_on_one_rank_is_an_error_on_every_rank():
    """Rank 0's "t" an int where the others' is a float: the int and float buffers would pair wrongly
    (figures silently wrong); every rank raises instead. At one rank there is nothing to disagree with."""
    comm = MpiComm()
    values = {"n": 3, "t": 0 if comm.rank == 0 else 0.5}
    if comm.size == 1:
        assert reduce.across_ranks(comm, 0, 1, sum=values)[1] == {"n": 3, "t": 0}
        return
    with pytest.raises(RuntimeError, match="ranks reduce different figures"):
        reduce.across_ranks(comm, 0, 1, sum=values)


def test_across_ranks_is_min_max_sum_per_mount_and_over_all():
    comm = MpiComm()
    r = comm.rank
    got = reduce.across_ranks(comm, _mount(r), MOUNTS, sum={"n": r + 1, "h": np.array([r, 1]), "w": 0.25 * r},
                              max={"end": float(r), "big": 10 * r}, min={"start": r + 0.5})
    if r != 0:
        assert got is None
        return
    mounts, total = got
    for m in range(MOUNTS):
        ranks = [x for x in range(comm.size) if _mount(x) == m]
        assert mounts[m]["n"] == sum(x + 1 for x in ranks)
        assert mounts[m]["h"].tolist() == [sum(ranks), len(ranks)]
        assert mounts[m]["w"] == pytest.approx(0.25 * sum(ranks))
        assert mounts[m]["end"] == (max(ranks) if ranks else -np.inf)
        assert mounts[m]["big"] == (10 * max(ranks) if ranks else 0)
        assert mounts[m]["start"] == (min(ranks) + 0.5 if ranks else np.inf)
    everyone = range(comm.size)
    assert total["n"] == sum(x + 1 for x in everyone)
    assert total["h"].tolist() == [sum(everyone), comm.size]
    assert (total["end"], total["big"], total["start"]) == (comm.size - 1, 10 * (comm.size - 1), 0.5)


def _rank_result(rank: int) -> RankResult:
    """A rank that read (rank + 1) MiB in (rank + 1) x 100 requests of 200 us, from t = 1 + rank
    to t = 3 + 2 x rank, an eighth of it from the page cache."""
    me = RankResult(rank=rank, host="h", mount=_mount(rank))
    me.bytes, me.ios, me.cached_bytes = (rank + 1) << 20, (rank + 1) * 100, (rank + 1) << 17
    me.t_start, me.t_end, me.max_ns = 1.0 + rank, 3.0 + 2 * rank, 200_000
    me.hist[histogram.index_one(200_000)] = me.ios
    return me


def test_a_read_result_is_its_ranks_counters_over_the_ranks_window():
    comm = MpiComm()
    out = reduce_results(comm, _rank_result(comm.rank), [f"/m{m}" for m in range(MOUNTS)])
    if comm.rank != 0:
        assert out is None
        return
    everyone = [_rank_result(r) for r in range(comm.size)]
    for m, block in enumerate([*out["mounts"], out["total"]]):
        ranks = [x for x in everyone if m == MOUNTS or x.mount == m]
        window = (max(x.t_end for x in ranks) - min(x.t_start for x in ranks)) if ranks else 0.0
        nbytes, cached = sum(x.bytes for x in ranks), sum(x.cached_bytes for x in ranks)
        assert block["window_s"] == window
        assert block["bytes"] == nbytes and block["ios"] == sum(x.ios for x in ranks)
        assert block["bandwidth_MBps"] == (nbytes / window / 1e6 if ranks else 0.0)
        assert block["cache_hit_fraction"] == (cached / nbytes if ranks else 0.0)
        assert block["latency_us"]["max"] == (200.0 if ranks else 0.0)
        assert sum(block["latency_hist"]["count"]) == block["ios"]
    assert out["span"] == (1.0, 3.0 + 2 * (comm.size - 1))
    assert [p["rank"] for p in out["per_rank"]] == list(range(comm.size))


def _op_counters(rank: int) -> OpCounters:
    """A rank that ran 1 + rank % 2 rounds: round i took (1 + rank) x (i + 1) s for (i + 2) MB."""
    c = OpCounters(rank=rank, host="h", mount=_mount(rank))
    for i in range(1 + rank % 2):
        c.round_s.append((1.0 + rank) * (i + 1))
        c.round_bytes.append((i + 2) * 1_000_000)
    c.ios, c.max_ns = 10, 1000
    c.hist[histogram.index_one(1000)] = 10
    if rank % 2 == 0:   # object storage's prefix checks: even ranks made 2 + rank LISTs in 0.1 x (1 + rank) s
        c.lists, c.list_s = 2 + rank, 0.1 * (1 + rank)
    return c


def test_a_checkpoint_round_is_its_slowest_rank_and_its_least_rank_bandwidth():
    comm = MpiComm()
    rounds = int(comm.allreduce(len(_op_counters(comm.rank).round_s), "max"))
    got = reduce.reduce_checkpoint_op(comm, _op_counters(comm.rank), MOUNTS, rounds)
    if comm.rank != 0:
        assert got is None
        return
    mounts, total = got
    everyone = [_op_counters(r) for r in range(comm.size)]
    for m, g in enumerate([*mounts, total]):
        block = reduce.checkpoint_block(g, fsync=None, cache=False)
        ranks = [c for c in everyone if m == MOUNTS or c.mount == m]
        assert block["rounds"] == rounds
        for i, r in enumerate(block["per_round"]):
            ran = [(c.round_s[i], c.round_bytes[i]) for c in ranks if i < len(c.round_s)]
            duration = max((t for t, _b in ran), default=0.0)
            assert r["duration_s"] == duration
            assert r["bytes"] == sum(b for _t, b in ran)
            assert r["min_rank_bandwidth_MBps"] == min((b / t / 1e6 for t, b in ran), default=0.0)
            assert r["bandwidth_MBps"] == (r["bytes"] / duration / 1e6 if duration else 0.0)
        assert block["duration_s"] == sum(r["duration_s"] for r in block["per_round"])
        assert block["ios"] == 10 * len(ranks)
        # LISTs add up over the group's ranks, over the longest time one of them spent in its own
        lists = sum(c.lists for c in ranks)
        assert block["lists"] == lists
        assert block["list_ops_per_s"] == (lists / max(c.list_s for c in ranks) if lists else 0.0)
