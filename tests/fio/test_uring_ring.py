"""fio-compare's io_uring side makes its ring and requests as fio 3.33's io_uring engine does at its
defaults (engines/io_uring.c fio_ioring_queue_init, fio_ioring_commit): CQSIZE = iodepth and
COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN at setup, IORING_ENTER_GETEVENTS on every submit, and the
buffers registered only with fixedbufs=1 (else plain READ/WRITE, pages pinned per request). Ground
truth: the io_uring calls each tool makes, as strace decodes them.

The SINGLE_ISSUER ring belongs to the thread that runs it: made disabled, enabled by the first submit.
An engine made in one thread and run in another works (fio-compare opens and runs in the clone's
thread; a test makes sure a different opener would too).
"""
from __future__ import annotations

import errno
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from iodl import _native, histogram
from iodl import plan as P

pytestmark = [pytest.mark.fio, pytest.mark.uring,
              pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")]

JOB = """[r]
filename={path}
ioengine=io_uring
iodepth=8
rw=randread
bs=4k
size=1m
{extra}"""

SINGLE_ISSUER, DEFER_TASKRUN = 1 << 12, 1 << 13


def _uring_calls(cmd, tmp_path) -> tuple[list[str], list[str], list[str]]:
    """(io_uring_setup flags of each ring made with more than 2 entries, io_uring_register ops,
    io_uring_enter lines) of cmd and its threads. strace prints flags it has no name for as hex."""
    out = tmp_path / "strace.txt"
    r = subprocess.run(["strace", "-f", "-o", str(out), "-e", "trace=io_uring_setup,io_uring_register,io_uring_enter",
                        *cmd], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    setups = [m.group(2) for m in re.finditer(r"io_uring_setup\((\d+), \{flags=([^,]+),", text) if int(m.group(1)) > 2]
    registers = re.findall(r"io_uring_register\(\d+, (\w+)", text)
    enters = re.findall(r"io_uring_enter\(\d+, (\d+), \d+, ([^,]+),", text)
    return setups, registers, enters


def _flag_bits(text: str) -> int:
    names = {"IORING_SETUP_CQSIZE": 1 << 3, "IORING_SETUP_COOP_TASKRUN": 1 << 8, "IORING_SETUP_R_DISABLED": 1 << 6,
             "IORING_SETUP_SINGLE_ISSUER": SINGLE_ISSUER, "IORING_SETUP_DEFER_TASKRUN": DEFER_TASKRUN}
    return sum(names[p] if p in names else int(p, 16) for p in text.split("|") if p != "0")


@pytest.mark.parametrize("fixedbufs", [False, True])
def test_ring_set_up_and_entered_as_fio(tmp_path, fixedbufs):
    data = tmp_path / "data"
    data.write_bytes(bytes(1 << 20))
    job = tmp_path / "job.fio"
    job.write_text(JOB.format(path=data, extra="fixedbufs\n" if fixedbufs else ""))
    fio = _uring_calls(["fio", str(job), "--output-format=json", "--output", str(tmp_path / "fio.json")], tmp_path)
    iodl = _uring_calls([sys.executable, "-m", "iodl", "fio-compare", str(job), "--no-fio", "--out",
                         str(tmp_path / "o.json")], tmp_path)
    (fio_setup,), (iodl_setup,) = fio[0], iodl[0]
    # the same flags, but iodl's ring is made disabled (its issuer is the thread that first submits)
    assert _flag_bits(iodl_setup) & ~(1 << 6) == _flag_bits(fio_setup), (fio_setup, iodl_setup)
    assert _flag_bits(fio_setup) & (SINGLE_ISSUER | DEFER_TASKRUN) == SINGLE_ISSUER | DEFER_TASKRUN
    for setups, registers, enters in (fio, iodl):
        assert ("IORING_REGISTER_BUFFERS" in registers) == fixedbufs, registers
        submits = [flags for n, flags in enters if int(n) > 0]
        assert len(submits) >= 256 and all("IORING_ENTER_GETEVENTS" in f for f in submits), submits[:5]


def _read_plan(n: int) -> np.ndarray:
    plan = P.new_plan(n)
    plan["file"] = 0
    plan["offset"] = np.arange(n) * 4096
    plan["length"] = 4096
    plan["op"] = P.OP_READ
    return plan


def test_fio_ring_runs_in_a_thread_other_than_its_opener(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(bytes(range(256)) * 256)   # 64 KiB
    f = open(data, "rb")
    fd = f.fileno()
    eng = _native.Engine("uring", depth=4, block_size=4096, fio_ring=True, fixed_buffers=False)
    out = {}

    def run(key):
        try:
            out[key] = eng.run([fd], _read_plan(16), histogram.empty())
        except OSError as exc:
            out[key] = exc

    try:
        assert not eng.fixed_buffers
        worker = threading.Thread(target=run, args=("first",))
        worker.start()
        worker.join()
        assert out["first"]["ios"] == 16 and out["first"]["bytes"] == 16 * 4096
        run("again")   # the ring now belongs to the worker thread: another's submit is refused
        again = out["again"]
        assert (again.errno if isinstance(again, OSError) else again["first_errno"]) == errno.EEXIST
    finally:
        eng.close()
        f.close()
