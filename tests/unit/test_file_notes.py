"""RankResult.note_open / note_close take a batch's files at once (one C call): each counts exactly
as a request's completion does, by when it returned, against numbers written out by hand."""
import numpy as np

from iodl import histogram
from iodl.metrics import RankResult


def test_a_batch_counts_inside_the_window_only():
    r = RankResult(rank=0, host="h", mount=0, window_ns=(1_000, 2_000))
    # returned at 999 (before), 1000 (first ns in), 1999 (last ns in), 2000 (after)
    r.note_open(np.array([999, 1_000, 1_999, 2_000]), np.array([9_000_000, 30, 5_000, 7_000_000]))
    assert (r.opens, r.open_max_ns) == (2, 5_000)                    # the slowest of the two counted
    assert r.open_hist.sum() == 2
    assert r.open_hist[histogram.index_one(30)] == 1 and r.open_hist[histogram.index_one(5_000)] == 1
    r.note_close(np.array([1_500]), np.array([800]))
    r.note_close(np.array([2_500]), np.array([10**9]))               # outside: not a close of the window
    assert (r.closes, r.close_max_ns, int(r.close_hist.sum())) == (1, 800, 1)
    assert (r.opens, int(r.open_hist.sum())) == (2, 2)               # closes go to their own counters


def test_no_window_counts_every_file_and_batches_add_up():
    r = RankResult(rank=0, host="h", mount=0)
    r.note_open([5, 6, 7], [100, 300, 200])
    r.note_open(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))   # a batch with nothing opened
    r.note_open([8], [250])
    assert (r.opens, r.open_max_ns, int(r.open_hist.sum())) == (4, 300, 4)
    assert (r.closes, int(r.close_hist.sum())) == (0, 0)
