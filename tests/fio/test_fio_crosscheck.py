"""The parser and the file layout checked against the real fio: `--debug=parse` prints every value it
parsed (`out=`), `--showcmd` the options it read, and a run shows the files it lays out."""
import os
import re
import subprocess
from pathlib import Path

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


# ---------------------------------------------------------------------------------------------
# Keyword arithmetic, option tables and the job-file battery, each against the installed fio

def test_keyword_arithmetic_matches_fio(tmp_path):
    """fio 3.33 replaces $pagesize/$mb_memory/$ncpus and then hands the value to bc (options.c
    bc_calc); this machine's keywords, so the numbers are the ones fio computes here."""
    path = tmp_path / "job.fio"
    path.write_text("[a]\nsize=5*1024*1024*$mb_memory/8\nnumjobs=$ncpus*2\nbs=$pagesize*2\n"
                    "iodepth=$ncpus+30/4\nio_size=($mb_memory-1)*2\nfilesize=1G\nrw=read\n")
    theirs = fio_outs(str(path))
    job = jf.parse(str(path))[0]
    assert job.values["size"] == theirs["size"][0] and job.values["numjobs"] == theirs["numjobs"][0]
    assert job.values["bs"][0] == theirs["bs"][0] and job.values["iodepth"] == theirs["iodepth"][0]
    assert job.values["io_size"] == theirs["io_size"][0]
    assert job.values["filesize"] == [(1 << 30, 1 << 30)] and theirs["filesize"][0] == 1 << 30
    assert job.values["size"] > 5 * 1024 * 1024   # not the 5 the old parser read


def _names(text: str) -> set:
    return set(re.findall(r"^\s*([A-Za-z0-9_-]+)\s*:", text, re.M))


def test_option_tables_match_fio():
    """Every option `fio --cmdhelp=all` lists is in iodl's table, and every engine's options are the
    ones `fio --enghelp=ENGINE` lists (for each engine this fio has)."""
    listed = _names(subprocess.run(["fio", "--cmdhelp=all"], capture_output=True, text=True).stdout)
    assert len(listed) > 150
    assert listed - opts.CORE - set(opts.ALIASES) == set()
    out = subprocess.run(["fio", "--enghelp"], capture_output=True, text=True).stdout
    engines = [line.strip() for line in out.splitlines()[1:] if line.strip()]
    assert "libaio" in engines and "psync" in engines
    aliases = {"proto", "chunck_size"}   # engine aliases: fio's help does not list them
    for engine in engines:
        theirs = _names(subprocess.run(["fio", f"--enghelp={engine}"], capture_output=True, text=True).stdout)
        assert theirs == opts.ENGINE_OPTIONS.get(engine, set()) - aliases, engine


def _trace_by_section(path, env):
    """[(section name, {option: [out values]})] in fio's parse order, from its --debug=parse trace."""
    out = subprocess.run(["fio", "--parse-only", "--debug=parse", str(path)], capture_output=True, text=True,
                         env=dict(os.environ, **env), cwd=path.parent).stdout
    sections, current = [], None
    for line in out.splitlines():
        m = re.search(r"Parsing section \[(.*)\]$", line)
        if m:
            sections.append((m.group(1), {}))
            continue
        m = re.search(r"\bhandle_option=(\S+), ptr=", line)
        if m and "__handle_option" not in line and sections:
            current = m.group(1)
            sections[-1][1][current] = []
            continue
        m = re.search(r"ret=0, out=(\d+)", line)
        if m and current and sections:
            sections[-1][1][current].append(int(m.group(1)))
    return sections


def _comparable(name, ours, outs):
    if opts.TYPE.get(name) == "range":
        if len(outs) == 1:   # one value given: fio stores it as both ends
            return [ours[0][0], ours[0][1]], outs * 2
        return list(ours[0]), sorted(outs[:2])
    if isinstance(ours, jf.Percent):
        return [(1 << 64) - 1 - ours.value], outs[:1]
    if isinstance(ours, list):
        return ours[: len(outs)], outs[: len(ours)]
    return [ours], outs[:1]


JOBS = Path(__file__).parent / "jobs"
BATTERY = sorted(JOBS.glob("*.fio"))
BATTERY_ENV = {"IODL_JOB_ALIGN": "4096", "IODL_JOB_SIZE": "64k", "IODL_TEST_DEV": ""}


@pytest.mark.parametrize("path", BATTERY, ids=lambda p: p.name)
def test_battery_parses_as_fio_parses(path, monkeypatch):
    """Every value iodl reads from the battery's job files equals the one fio's parse trace prints
    for the same option of the same section; iodl calls an option unknown only when fio does."""
    for k, v in BATTERY_ENV.items():
        monkeypatch.setenv(k, v)
    fio = subprocess.run(["fio", "--parse-only", str(path)], capture_output=True, text=True,
                         env=dict(os.environ, **BATTERY_ENV), cwd=path.parent)
    try:
        sections = jf.read_sections(str(path))
        jobs = jf.resolve(sections)
    except jf.JobFileError as exc:
        if "unknown option" in str(exc):
            assert "Bad option" in fio.stderr + fio.stdout, (str(exc), fio.stderr)
        return
    if "not loadable" in fio.stderr + fio.stdout:
        return   # an engine this fio lacks: it cannot check that engine's options or their values
    assert "Bad option" not in fio.stderr + fio.stdout, fio.stderr   # fio knows all iodl parsed
    value_of = {}
    for job in jobs:
        for name, o in job.where.items():
            value_of[o] = (name, job.values[name])
    theirs = _trace_by_section(path, BATTERY_ENV)
    checked = 0
    for section, (fio_name, outs_by_option) in zip(sections, theirs):
        assert section.name == fio_name
        for o in section.options:
            outs = outs_by_option.get(o.key) or outs_by_option.get(opts.canonical(o.key) or o.key)
            if not outs or o not in value_of or opts.TYPE.get(value_of[o][0]) == "float":
                continue   # a string, or a [global] value every job below overrode
            name, ours = value_of[o]
            if isinstance(ours, (jf.Zones, str)):
                continue
            if o.key == "buffered":
                ours = 1 - ours   # stored as direct (one field in fio)
            ours, outs = _comparable(name, ours, outs)
            assert ours == outs, f"{section.name}.{o.key}: iodl {ours} fio {outs}"
            checked += 1
    sizes = [o for s in sections for o in s.options if o in value_of and opts.TYPE.get(value_of[o][0]) == "int"
             and not isinstance(value_of[o][1], jf.Zones)]
    assert checked or not sizes, "fio's trace had none of the values iodl read"
