"""per_rank.started_s (the start-up goal's "first step") against a start barrier whose wait is known: rank 1
sleeps DELAY_S between being ready and opening its engine, so rank 0 waits that long at the start
barrier; both leave it together."""
import json
import subprocess
import sys
import time

import pytest

from tests.helpers import mpiexec

DELAY_S = 1.0
# process ages come from /proc in clock ticks (10 ms); hydra starts the two processes within a few
# ms of each other; the barrier's sleep-polling sees its end at most 1/20 of the wait late (comm.py)
TOLERANCE_S = 0.15

CODE = f"""
import os, sys, time
import iodl.training
from iodl.cli import main
if os.environ["PMI_RANK"] == "1":
    opened = iodl.training.open_reader
    def late(*a, **k):
        time.sleep({DELAY_S})
        return opened(*a, **k)
    iodl.training.open_reader = late
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.mpiexec
def test_started_s_ends_at_the_start_barrier(tmp_path):
    exe = mpiexec()
    assert exe, "mpiexec not found next to the test interpreter (pip install mpich)"
    out = tmp_path / "r.json"
    t = time.monotonic()
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-c", CODE, "read", "--pattern", "train-sync",
                           "--engine", "null", "--steps", "2", "--compute-time", "0.01", "--progress", "off",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    wall = time.monotonic() - t
    assert proc.returncode == 0, proc.stderr
    ranks = {r["rank"]: r for r in json.loads(out.read_text())["per_rank"]}
    zero, one = ranks[0], ranks[1]
    # rank 0 was ready, then waited at the barrier for rank 1's DELAY_S; rank 1 slept it before the barrier
    assert zero["started_s"] - zero["startup_s"] >= DELAY_S - TOLERANCE_S, zero
    assert one["started_s"] - one["startup_s"] >= DELAY_S, one
    # the two left the barrier together, and before the job ended
    assert abs(zero["started_s"] - one["started_s"]) <= TOLERANCE_S, (zero, one)
    assert max(zero["started_s"], one["started_s"]) < wall
