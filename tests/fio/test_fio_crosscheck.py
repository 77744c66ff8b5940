"""The parser and the file layout checked against the real fio: `--debug=parse` prints every value it
parsed (`out=`), `--showcmd` the options it read, and a run shows the files it lays out."""
import os
import re
import subprocess

import pytest

from iodl.fio import jobfile as jf
from iodl.fio import options as opts
from iodl.fio.layout import clone_files

pytestmark = pytest.mark.fio

CASES = [
    "[a]\nkb_base=1000\nsize=64GiB\nbs=1024KiB\nrate_iops=83\nruntime=600\nramp_time=60\niodepth=32\nnrfiles=30\n",
    "[a]\nbs=4k-64k\nsize=1mi\nrate=1m,2m\noffset=4kib\nramp_time=1500ms\nthinktime=10\n",
    "[a]\nbs=4ki\nsize=1MiB\nio_size=1gib\nrate_iops=0x10\nfilesize=8k:1k\nbsrange=64k-4k\n",
    "[a]\nkb_base=1000\nbs=4ki\nsize=1mi\nio_size=3t\noffset=7kb\nrate=2mb\nstartdelay=2m\n",
    "[a]\nsize=1MiB\nkb_base=1000\nbs=8k:16k\nruntime=1h\ntime_based\ndirect=1\ngroup_reporting\n",
    "[a]\nbs=512\nsize=512b\niodepth=1k\nnumjobs=0x2\nruntime=10sec\nramp_time=250us\nloops=3\n",
    "[a]\nbs=4kabc\nsize=12%\nrate=1k,\nnrfiles=$ncpus\nsize=$mb_memory\n",
    "[a]\nbs = 16k ; inline\nsize=4m# hash\nrate_iops=10,20,30\nruntime=1d\n",
]


def fio_outs(path):
    """{option: [out values]} from fio's parse trace, for the last section it parsed."""
    out = subprocess.run(["fio", "--parse-only", "--debug=parse", path], capture_output=True, text=True).stdout
    values, current = {}, None
    for line in out.splitlines():
        m = re.search(r"\bhandle_option=(\S+), ptr=", line)
        if m and "__handle_option" not in line:
            current = m.group(1)
            values[current] = []
            continue
        m = re.search(r"ret=0, out=(\d+)", line)
        if m and current:
            values[current].append(int(m.group(1)))
    return values


@pytest.mark.parametrize("text", CASES)
def test_values_match_fio_parse_trace(tmp_path, text):
    path = tmp_path / "job.fio"
    path.write_text(text)
    theirs = fio_outs(str(path))
    job = jf.parse(str(path))[0]
    checked = 0
    for name, outs in theirs.items():
        name = opts.canonical(name)
        if not outs or name not in job.values:
            continue
        ours = job.values[name]
        if opts.TYPE[name] == "range":
            ours, outs = list(ours[0]), sorted(outs[:2])   # the trace prints before the swap
        elif isinstance(ours, list):
            ours = ours[: len(outs)]
        elif isinstance(ours, jf.Percent):
            ours = [(1 << 64) - 1 - ours.value]     # how fio stores a percentage
        else:
            ours = [ours]
        assert ours == outs[: len(ours)], f"{name}: iodl {ours} fio {outs}"
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("line", ["bs=abc", "iodepth=abc", "iodepth_batch=abc", "nrfiles=k", "size=abc"])
def test_both_refuse_a_number_without_digits(tmp_path, line):
    path = tmp_path / "job.fio"
    path.write_text(f"[a]\nrw=read\nsize=1M\n{line}\n")
    fio = subprocess.run(["fio", "--parse-only", str(path)], capture_output=True, text=True)
    assert fio.returncode != 0 and "failed parsing" in fio.stderr + fio.stdout
    with pytest.raises(jf.JobFileError, match="not a number"):
        jf.parse(str(path))


def test_showcmd_lists_the_options_we_read(tmp_path):
    path = tmp_path / "job.fio"
    (tmp_path / "inc.fio").write_text("iodepth=4\n")
    path.write_text("; c\n[global]\nbs=8k # x\n[a]\nrw=randread\ninclude inc.fio\ntime_based\n[b]\nsize=1m\n")
    shown = subprocess.run(["fio", "--showcmd", str(path)], capture_output=True, text=True).stdout.split()
    theirs = [t[2:] for t in shown if t.startswith("--") and not t.startswith("--name=")]
    ours = [o.key if o.value is None else f"{o.key}={o.value}" for s in jf.read_sections(str(path)) for o in s.options]
    assert ours == theirs


def test_fio_lays_out_the_files_we_expect(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    path = tmp_path / "job.fio"
    path.write_text(f"[global]\ndirectory={d1}:{d2}\nioengine=psync\nrw=read\nbs=4k\nnumjobs=3\n"
                    f"[j]\nnrfiles=3\nsize=100001\n[k]\nfilename_format=data.$jobnum.$filenum.bin\nsize=8k\n")
    subprocess.run(["fio", "--output=/dev/null", str(path)], check=True, capture_output=True)
    theirs = {os.path.join(dp, f): os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(tmp_path)
              for f in fs if dp != str(tmp_path)}
    ours = {}
    for job in jf.parse(str(path)):
        for n in range(job.values["numjobs"]):
            for spec in clone_files(job, n):
                ours[spec.path] = spec.needed
    assert ours == theirs
