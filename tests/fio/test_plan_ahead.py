"""time_based: fio-compare draws a clone's next engine call while the engine runs the current one
(run.py _PlanAhead), as fio, which draws each offset when it issues it, keeps its queue full across passes.
Ground truth: the rows each Engine.run was given against the passes drawn one after the other from the
same seed (the same passes, in the same order), when each pass was drawn against when the runs were on,
and a write job's fsync=N spacing across calls (fio's should_fsync: a sync before the I/O after every N
writes, the count running on over passes).
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from iodl import cursor
from iodl.fio import run as R
from iodl.fio.jobfile import parse
from iodl.plan import OP_FSYNC, OP_WRITE

pytestmark = [pytest.mark.fio]

JOB = """[n]
ioengine=null
rw=randrw
rwmixread=70
bs=4k
size=256m
iodepth=8
time_based
runtime=1
"""


def test_next_pass_is_drawn_during_the_run_and_passes_are_unchanged(tmp_path, monkeypatch):
    job_file = tmp_path / "n.fio"
    job_file.write_text(JOB)
    plan = R.plan_job(parse(str(job_file))[0], files=True)
    runs, draws = [], []
    run, draw = cursor.Cursor.run, R.pass_plan

    def timed_run(self, fds, rows, names, deadline_ns=0):
        t0 = time.monotonic()
        st = run(self, fds, rows, names, deadline_ns=deadline_ns)
        runs.append((t0, time.monotonic(), rows.copy(), threading.get_ident()))
        return st

    def timed_draw(*a, **k):
        t0 = time.monotonic()
        rows = draw(*a, **k)
        draws.append((t0, threading.get_ident()))
        return rows

    monkeypatch.setattr(cursor.Cursor, "run", timed_run)
    monkeypatch.setattr(R, "pass_plan", timed_draw)
    res = R.run_clone(plan, 0, 0)
    assert not res.error and res.ios + res.write_ios > 0
    assert len(runs) >= 3, "a pass a run: 1 s of 65536-row passes makes several runs"
    driver = runs[0][3]
    # every pass after the first was drawn outside the driver thread, started once the run before it was
    # handed its rows (just before Engine.run) and before that run ended: drawn while it was on. The last
    # run is cut at the deadline and may last microseconds, so its draw may start after it: only its start
    # is bounded (a CI run saw one start 58 us after such a run)
    assert draws[0][1] == driver and all(t != driver for _, t in draws[1:])
    ends = [0.0] + [end for _, end, _, _ in runs]
    for k, (drawn, _) in enumerate(draws[1:len(runs) + 1]):
        assert ends[k] <= drawn
        if k < len(runs) - 1:
            assert drawn <= ends[k + 1]
    # the passes the engine ran are those drawn one after the other from the clone's seed
    rng = np.random.default_rng([plan.seed, 0])
    for _, _, rows, _ in runs[:-1]:   # the last run may have been cut at the deadline
        expected = R._write_rows(plan, draw(plan, plan.files[0], rng), R._SyncState())
        assert np.array_equal(rows, expected)


WRITE_JOB = """[w]
ioengine=null
rw=randwrite
bs=4k
size=4m
fsync=3
time_based
runtime=1
"""


def test_a_write_jobs_syncs_run_on_across_calls_drawn_ahead(tmp_path, monkeypatch):
    """1024 writes a pass, 64 passes a call (65,536 rows): 65,536 is not a multiple of 3, so a sync count
    that started afresh with each call drawn ahead, or that the unused draw at the deadline moved on,
    would break the spacing at a call's boundary."""
    job_file = tmp_path / "w.fio"
    job_file.write_text(WRITE_JOB)
    plan = R.plan_job(parse(str(job_file))[0], files=True)
    runs = []
    run = cursor.Cursor.run

    def recorded_run(self, fds, rows, names, deadline_ns=0):
        st = run(self, fds, rows, names, deadline_ns=deadline_ns)
        runs.append(rows[:st["done"]].copy())
        return st

    monkeypatch.setattr(cursor.Cursor, "run", recorded_run)
    res = R.run_clone(plan, 0, 0)
    assert not res.error and res.syncs > 0
    assert len(runs) >= 3
    ops = np.concatenate([r["op"] for r in runs])
    syncs = np.nonzero(ops == OP_FSYNC)[0]
    writes_before = np.cumsum(ops == OP_WRITE)[syncs]
    # the k-th sync comes after exactly 3k writes, and one comes right before writes 4, 7, 10, ...
    # (past the first call: more than 65,536 writes)
    assert np.array_equal(writes_before, 3 * np.arange(1, len(syncs) + 1))
    at = np.nonzero(ops == OP_WRITE)[0][3::3]
    assert len(at) > (1 << 16) // 3 and np.all(ops[at - 1] == OP_FSYNC)
