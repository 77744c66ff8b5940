"""fio-compare's libaio side reaps completions the way fio's libaio engine does (fio 3.33
engines/libaio.c): one io_getevents call per reap, unless the job sets userspace_reap and
iodepth_batch_complete_min=0, when both read the mmapped completion ring instead. Ground truth: the
syscalls each tool makes, counted by strace, against the I/Os fio's JSON and iodl's --out report.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.fio, pytest.mark.aio,
              pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")]

JOB = """[r]
filename={path}
ioengine=libaio
iodepth=8
rw=randread
bs=4k
size=1m
loops=2
{extra}"""


def _calls(cmd, tmp_path) -> dict:
    """Syscall counts of cmd and its threads (strace -c -f)."""
    out = tmp_path / "strace.txt"
    r = subprocess.run(["strace", "-f", "-c", "-o", str(out), "-e", "trace=io_submit,io_getevents", *cmd],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls = {}
    for line in out.read_text().splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(io_\w+)$", line)
        if m:
            calls[m.group(2)] = int(m.group(1))
    return calls


@pytest.mark.parametrize("extra,per_io", [("", True), ("userspace_reap\niodepth_batch_complete_min=0\n", False)])
def test_reaps_as_fio(tmp_path, extra, per_io):
    data = tmp_path / "data"
    data.write_bytes(bytes(1 << 20))   # buffered: each read is done inside io_submit, its event is ready
    job = tmp_path / "job.fio"
    job.write_text(JOB.format(path=data, extra=extra))
    fio = _calls(["fio", str(job), "--output-format=json", "--output", str(tmp_path / "fio.json")], tmp_path)
    fio_ios = json.loads((tmp_path / "fio.json").read_text())["jobs"][0]["read"]["total_ios"]
    iodl = _calls([sys.executable, "-m", "iodl", "fio-compare", str(job), "--no-fio", "--out",
                   str(tmp_path / "o.json")], tmp_path)
    iodl_ios = json.loads((tmp_path / "o.json").read_text())["jobs"][0]["iodl"]["ios"]
    assert fio_ios == iodl_ios == 512
    for calls, ios in ((fio, fio_ios), (iodl, iodl_ios)):
        reaps = calls.get("io_getevents", 0)
        if per_io:
            # one call per completion (fio reaps one at a time), but at a loop's end, draining: fewer
            assert ios * 0.95 <= reaps <= ios * 1.05, calls
        else:
            assert reaps <= ios * 0.05, calls          # from the ring: a call only to wait
