"""A group's clones start together and count their time from one instant (iodl.fio.run.StartLine).

fio-compare's group figure is fio's rule, sum(bytes) / max(window). It reads true only when the
clones' windows coincide: clones that each read the clock after waking (one GIL, the others drawing
their plans) started up to 0.85 s apart on this VM, and an 8-clone job on a 150 MB/s throttled mount
read 159 MB/s (tests/fio/test_e2e.py). The null engine here: the plans, not a disk, are the work.
"""
import pytest

from iodl.comm import SerialComm
from iodl.fio import compare
from iodl.fio.run import plan_job, run_clones

pytestmark = pytest.mark.fio

JOB = """[global]
time_based=1
runtime=1
ioengine=null
numjobs=8
iodepth=32
[j]
rw=read
nrfiles=30
size=64MiB
bs=1MiB
"""


def test_clones_share_one_start_and_deadline(tmp_path):
    job = tmp_path / "j.fio"
    job.write_text(JOB)
    (tmp_path / "d").mkdir()
    _, jobs = compare.derive_jobfile(str(job), str(tmp_path / "d"))
    results = run_clones({0: plan_job(jobs[0])}, SerialComm())
    assert len(results) == 8 and all(r.ios for r in results)
    # one instant for all: the same ramp end and deadline, to the nanosecond
    assert len({r.measure_ns for r in results}) == 1
    # each clone's first request goes out at the common start: its plan was drawn before it
    # (before the fix, 850 ms apart; one GIL hand-off each now, ~30 ms on an idle VM)
    firsts = [r.first_ns for r in results]
    assert max(firsts) - min(firsts) < 250e6
    assert min(firsts) >= results[0].measure_ns[0]
