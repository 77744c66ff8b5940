"""train-sync and infer-async at any MPI size, with the null engine (no dataset): AU against the
value first principles give, C / (C + D), where C is the compute time and D the data time."""
import numpy as np
import pytest

from iodl.comm import MpiComm
from iodl.patterns import PATTERNS, Run
from iodl.runspec import RunSpec
from iodl.training import run_steps, steps_window, summarize_steps

pytestmark = pytest.mark.mpi

MIB = 1 << 20
SAMPLE = 64 << 10           # 16 samples per 1 MiB request: a batch of 32 is exactly 2 requests
SHARDS, PER_SHARD = 4, 64


def _run(pattern, compute_s, delay_ns, prefetch, steps=0, batch=32, duration_s=0.0, ramp_s=0.0):
    comm = MpiComm()
    ends = np.cumsum(np.full(PER_SHARD, SAMPLE, dtype=np.int64))
    cfg = PATTERNS[pattern].configure(RunSpec(
        pattern=pattern, engine="null", direct=False, iodepth=1, block_size=MIB, seed=5, batch_size=batch,
        compute_time_s=compute_s, prefetch=prefetch, steps=steps, delay_ns=delay_ns, duration_s=duration_s, ramp_s=ramp_s))
    run = Run(comm=comm, spec=cfg, paths=None, sizes=[int(ends[-1])] * SHARDS, sample_ends=lambda i: ends,
              host=comm.hostname())
    records, partial = run_steps(run)
    mine = run.result
    gathered = comm.gather(records)
    assert not partial
    return comm, mine, records, gathered


# Times are long enough that a few ms of scheduler jitter on a busy 2-core box stay within 2%.
C, D_REQUEST = 0.200, 40_000_000               # 200 ms compute; 2 requests of 40 ms per step: D = 80 ms


def test_au_without_prefetch_is_compute_over_compute_plus_data_time():
    comm, mine, records, gathered = _run("train-sync", C, D_REQUEST, prefetch=0, steps=8)
    assert mine.ios == 2 * 8                   # every step read exactly its two requests
    if comm.rank == 0:
        train = summarize_steps(gathered, "train-sync", 0.9, steps_window(gathered))
        assert train["steps"] == 8
        assert train["au"] == pytest.approx(C / (C + 0.080), rel=0.02)
        # each of the two 40 ms sleeps may wake a few ms late when the 2 cores are busy
        assert train["data_wait_s_per_step"] == pytest.approx(0.080, rel=0.10)


def test_prefetch_hides_data_time_shorter_than_compute():
    comm, mine, records, gathered = _run("train-sync", C, D_REQUEST, prefetch=2, steps=8)
    if comm.rank == 0:
        train = summarize_steps(gathered, "train-sync", 0.9, steps_window(gathered))
        assert train["au"] >= 0.97, train
        assert train["au_excluded_steps"] == "first step of each epoch"


def test_train_sync_steps_are_barrier_aligned_across_ranks():
    comm, mine, records, gathered = _run("train-sync", 0.010, 0, prefetch=1, steps=8)
    if comm.rank == 0:
        ends = np.array([g[:, 1] for g in gathered])      # t_end of every step, per rank
        # each step ends at the barrier: all ranks leave it within a few ms of each other
        assert (ends.max(axis=0) - ends.min(axis=0)).max() < 0.02


def test_train_sync_without_a_shared_page_meets_by_mpi_after_the_latest_compute_end(monkeypatch):
    """Where the node's page cannot be made (a full /dev/shm: _shared_file refuses), every rank sleeps
    to its own compute end and then meets the others in an MPI allreduce: the same steps, aligned,
    each released after the latest compute end, the data hidden by prefetch as before."""
    import errno
    from iodl import comm as comm_module

    def refused(size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(comm_module, "_shared_file", refused)
    comm, mine, records, gathered = _run("train-sync", C, D_REQUEST, prefetch=2, steps=6)
    assert comm._node_barrier is not None and comm._node_barrier._mm is None   # the fallback ran
    assert (records[:, 1] - records[:, 0] >= C - 0.002).all()   # each step slept its compute out
    if comm.rank == 0:
        ends = np.array([g[:, 1] for g in gathered])
        assert (ends.max(axis=0) - ends.min(axis=0)).max() < 0.05   # released together
        train = summarize_steps(gathered, "train-sync", 0.9, steps_window(gathered))
        assert train["steps"] == 6 and 0.95 <= train["au"] <= 1.0, train


def test_infer_async_reports_per_rank_spread_and_common_window():
    # a fixed window [0.2 s, 1.2 s] that every rank reads and computes through
    comm, mine, records, gathered = _run("infer-async", 0.020 * (1 + MpiComm().rank), 0, prefetch=1,
                                         duration_s=1.0, ramp_s=0.2)
    if comm.rank == 0:
        infer = summarize_steps(gathered, "infer-async", 0.9, (0.2, 1.2))
        spread = infer["per_rank_samples_per_s"]
        assert infer["samples_per_s"] == pytest.approx(spread["sum"], rel=1e-9)
        assert spread["min"] <= spread["median"] <= spread["max"]
        # rank r computes (r+1) x 20 ms per 32-sample step: its rate is known
        assert spread["max"] == pytest.approx(32 / 0.020, rel=0.10)
        if comm.size > 1:
            assert spread["min"] == pytest.approx(32 / (0.020 * comm.size), rel=0.10)
