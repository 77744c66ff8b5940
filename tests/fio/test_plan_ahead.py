"""time_based: fio-compare draws a clone's next pass while the engine runs the current one (run.py _drive),
as fio, which draws each offset when it issues it, keeps its queue full across passes. Ground truth: the
rows each Engine.run was given against the passes drawn one after the other from the same seed (the
same passes, in the same order), and when each pass was drawn against when the runs were on.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from iodl import cursor
from iodl.fio import run as R
from iodl.fio.jobfile import parse

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
    # handed its rows (just before Engine.run) and before that run ended: drawn while it was on
    assert draws[0][1] == driver and all(t != driver for _, t in draws[1:])
    ends = [0.0] + [end for _, end, _, _ in runs]
    for k, (drawn, _) in enumerate(draws[1:len(runs) + 1]):
        assert ends[k] <= drawn <= ends[k + 1]
    # the passes the engine ran are those drawn one after the other from the clone's seed
    rng = np.random.default_rng([plan.seed, 0])
    for _, _, rows, _ in runs[:-1]:   # the last run may have been cut at the deadline
        expected = R._write_rows(plan, draw(plan, plan.files[0], rng), R._SyncState())
        assert np.array_equal(rows, expected)
