"""fio job files as people write them: options at fio's defaults, options that change nothing in the
job at hand, fio's command line, group_reporting, the exit codes, and the /dev guard.

The classes come from real job files (bench/check_job_corpus.py tallies them; bench/results/
fio-job-corpus.md lists their sources): Kubernetes storage tools, cloud/FUSE filesystem benchmarks
(e.g. longhorn/kbench `fio/common-include.fio` writes `verify=0`; awslabs/mountpoint-s3's write
jobs `unlink=1`; its `read_latency/ttfb.fio` reads 1 byte with direct=1). The job texts here are
written for these tests; each value iodl parses is held to `fio --parse-only --debug=parse`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from iodl.fio import compare
from iodl.fio import jobfile as jf
from iodl.fio import layout
from iodl.fio import options as opts
from iodl.fio.run import pass_plan, plan_job

from .test_fio_crosscheck import fio_outs


def plan(text: str, tmp_path=None):
    path = str(tmp_path / "job.fio") if tmp_path else "t.fio"
    return [plan_job(j, files=False) for j in jf.parse(path, text, env={}, keywords={})]


def fio_compare(*args, cwd=None, env=None, timeout=120):
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", *map(str, args)], capture_output=True,
                       text=True, cwd=cwd, env=dict(os.environ, **(env or {})), timeout=timeout)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    return r


def one_line(r, code=2) -> str:
    assert r.returncode == code, (r.returncode, r.stderr, r.stdout[-2000:])
    assert r.stderr.startswith("iodl: error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


# ---------------------------------------------------------------------------------------------
# Every option at fio's default

def _written_default(name: str) -> str | None:
    """fio's default of `name` as a job file would write it (None: no default to write)."""
    text = opts.DEFAULTS[name]
    if text == "":
        return None if opts.TYPE.get(name) in ("str", "float", "range") else "0"
    return text


AT_DEFAULT = sorted((n, v) for n in opts.DEFAULTS if (v := _written_default(n)) is not None)


@pytest.mark.parametrize("name,value", AT_DEFAULT)
def test_every_option_at_fios_default_is_accepted(name, value):
    plan(f"[a]\nrw=read\nsize=1m\n{name}={value}\n")


@pytest.mark.fio
def test_fio_takes_every_default_too_and_the_table_is_fios(tmp_path):
    """One job with every option at its default: fio parses it. The table's names are those of
    `fio --cmdhelp=all`, and a sample of its defaults is what `fio --cmdhelp=NAME` says."""
    path = tmp_path / "defaults.fio"
    # options fio parses only with other options set, or that name things: left out of the one job
    skip = {"name", "description", "filename", "directory", "filename_format", "lockfile", "ioengine",
            "kb_base", "unit_base", "exit_what", "io_submit_mode", "cpus_allowed_policy", "numa_mem_policy",
            "mem", "hugepage-size", "zonemode", "cgroup_weight", "uid", "gid", "prioclass", "prio", "nice",
            "replay_time_scale", "replay_scale", "clocksource", "log_hist_coarseness"}
    given = {n: v for n, v in AT_DEFAULT if n not in skip}
    for _ in range(3):
        path.write_text("[a]\nrw=read\nsize=1m\n" + "".join(f"{n}={v}\n" for n, v in given.items()))
        r = subprocess.run(["fio", "--parse-only", str(path)], capture_output=True, text=True)
        if r.returncode == 0:
            break
        # a zero fio will not take (ba=0: "min value out of range") is only ever "no default"
        rejected = set(re.findall(r"failed parsing ([\w-]+)=", r.stderr + r.stdout)) - {"a"}
        assert rejected and all(opts.DEFAULTS[n] == "" for n in rejected), r.stderr
        given = {n: v for n, v in given.items() if n not in rejected}
    assert r.returncode == 0, r.stderr + r.stdout
    assert len(given) > 150
    plan_job(jf.parse(str(path), env={}, keywords={})[0], files=False)
    names = subprocess.run(["fio", "--cmdhelp=all"], capture_output=True, text=True).stdout
    assert {ln.split(":")[0].strip() for ln in names.splitlines() if ":" in ln} <= set(opts.DEFAULTS)
    for name in sorted(opts.DEFAULTS)[::17]:
        out = subprocess.run(["fio", f"--cmdhelp={name}"], capture_output=True, text=True).stdout
        m = re.search(r"^\s*default: (.*)$", out, re.M)
        assert (m.group(1) if m and m.group(1) != "no default" else "") == opts.DEFAULTS[name], name


# ---------------------------------------------------------------------------------------------
# What changes nothing in the job at hand, and what still does

NO_EFFECT = [
    "verify_fatal=1\ndo_verify=0\nverify_dump=1\n",     # no verify= set
    "thinktime_blocks=4\nthinktime_spin=10\n",          # no thinktime= set
    "rwmixread=70\n",                                  # rw=read does not mix
    "percentage_random=50\nnorandommap=1\nrandom_distribution=zipf:1.2\n",   # rw=read is sequential
    "fsync=1\nend_fsync=1\nfdatasync=4\nfsync_on_close=1\n",   # a read job syncs nothing
    "refill_buffers=1\nscramble_buffers=0\nbuffer_compress_percentage=50\n",   # a read job fills no buffer
    "exitall_on_error=1\ncontinue_on_error=all\nignore_error=EIO\n",          # error flags
    "gtod_reduce=1\n", "disable_lat=1\ndisable_clat=1\ndisable_slat=1\n",
    "unlink=1\n",
]


@pytest.mark.fio
@pytest.mark.parametrize("lines", NO_EFFECT)
def test_what_changes_nothing_is_accepted_and_parsed_as_fio_does(lines, tmp_path):
    text = "[a]\nrw=read\nbs=4k\nsize=64k\n" + lines
    path = tmp_path / "job.fio"
    path.write_text(text)
    plan(text, tmp_path)
    theirs = fio_outs(str(path))
    job = jf.parse(str(path), env={}, keywords={})[0]
    for name, outs in theirs.items():
        name = opts.canonical(name)
        if outs and name in job.values and isinstance(job.values[name], (int, list)):
            ours = job.values[name] if isinstance(job.values[name], list) else [job.values[name]]
            assert ours[: len(outs)] == outs[: len(ours)], name


@pytest.mark.parametrize("text,refused", [
    ("[a]\nrw=read\nverify=crc32c\n", "'verify'"),
    ("[a]\nrw=read\nthinktime=10\n", "'thinktime'"),
    ("[a]\nrw=read\nloops=2\nunlink_each_loop=1\n", "'unlink_each_loop'"),   # fio fails: ENOENT
    ("[a]\nrw=read\nhipri=1\nioengine=io_uring\n", "'hipri'"),
])
def test_what_changes_the_io_is_still_refused(text, refused):
    with pytest.raises(jf.JobFileError, match=refused):
        plan(text)


# ---------------------------------------------------------------------------------------------
# fio's command line

def test_command_line_options_are_defaults_the_job_file_overrides(tmp_path):
    """fio parses job options given before the job file into def_thread (init.c parse_cmd_line), the
    defaults every job starts from: a value the file sets wins; one after another, so a command-line
    kb_base governs only what follows it."""
    path = tmp_path / "job.fio"
    path.write_text("[global]\nbs=8k\n[a]\nrw=read\n[b]\nrw=read\nsize=128k\n")
    cli = [("size", "64k"), ("bs", "16k"), ("ioengine", "libaio"), ("time_based", None), ("runtime", "2")]
    _, jobs = compare.derive_jobfile(str(path), cli_options=cli, env={})
    a, b = jobs
    assert a.values["size"] == 65536 and b.values["size"] == 131072
    assert a.values["bs"][0] == 8192 and a.values["ioengine"] == "libaio" and a.values["time_based"] == 1
    _, jobs = compare.derive_jobfile(str(path), cli_options=[("size", "1MiB"), ("kb_base", "1000")], env={})
    assert jobs[0].values["size"] == 10**6   # parsed before kb_base, as fio does


@pytest.mark.fio
def test_command_line_size_matches_fios_parse(tmp_path):
    path = tmp_path / "job.fio"
    path.write_text("[a]\nrw=read\nbs=4k\n")
    out = subprocess.run(["fio", "--parse-only", "--debug=parse", "--size=96k", "--iodepth=4", str(path)],
                         capture_output=True, text=True).stdout
    assert "size" in out
    _, jobs = compare.derive_jobfile(str(path), cli_options=[("size", "96k"), ("iodepth", "4")], env={})
    sizes = [int(m) for m in re.findall(r"handle_option=size, ptr=.*?\n.*?ret=0, out=(\d+)", out, re.S)]
    assert sizes and jobs[0].values["size"] == sizes[-1] == 96 * 1024
    assert jobs[0].values["iodepth"] == 4


@pytest.mark.fio
def test_a_template_without_size_runs_with_size_on_the_command_line(tmp_path):
    """A template written for `fio --size=... --filename=...` (the kbench style): --size and any
    --OPTION=VALUE reach every job; --section picks jobs; both tools run the result."""
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "job.fio"
    job.write_text("[global]\nioengine=psync\nbs=4k\n[seq]\nrw=read\n[rand]\nrw=randread\nstonewall\n")
    out = tmp_path / "out.json"
    r = fio_compare(job, "--size", "256k", "--numjobs=2", "--group_reporting", "--section", "rand",
                    "--directory", d, "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [j["name"] for j in doc["jobs"]] == ["rand"]
    group = doc["groups"][0]
    assert group["fio"]["bytes"] == group["iodl"]["bytes"] == 2 * 256 * 1024
    # group_reporting: fio's figures are in the printed table, beside iodl's
    table = r.stdout[r.stdout.index("reporting group 0"):]
    row = next(ln for ln in table.splitlines() if "bandwidth MB/s" in ln)
    assert len(re.findall(r"\d[\d,]*\.\d", row)) >= 2 and " - " not in row, row


def test_unknown_command_line_options_and_name_are_refused(tmp_path):
    job = tmp_path / "job.fio"
    job.write_text("[a]\nrw=read\nsize=64k\n")
    assert "unrecognized arguments: --nosuch=1" in fio_compare(job, "--no-fio", "--nosuch=1").stderr
    assert "--name starts a job" in one_line(fio_compare(job, "--no-fio", "--name=x"))
    assert "bad value for 'bs'" in one_line(fio_compare(job, "--no-fio", "--bs=abc"))


def test_environment_variables_are_expanded_and_an_unset_one_is_empty(tmp_path):
    job = tmp_path / "job.fio"
    job.write_text("[a]\nrw=read\nsize=${SIZE}\nbs=${BS}\n")
    _, jobs = compare.derive_jobfile(str(job), env={"SIZE": "64k", "BS": "8k"})
    assert jobs[0].values["size"] == 65536 and jobs[0].values["bs"][0] == 8192
    # unset: empty, and fio fails parsing bs= (its "failed parsing bs=")
    err = one_line(fio_compare(job, "--no-fio", env={"SIZE": "64k", "BS": ""}))
    assert "bad value for 'bs'" in err and "job.fio:4" in err


def test_startdelay_is_capped_by_a_short_runtime(tmp_path):
    job = tmp_path / "job.fio"
    job.write_text("[a]\nrw=read\nsize=64k\nstartdelay=2m\nruntime=10m\ntime_based\n")
    _, jobs = compare.derive_jobfile(str(job), runtime_s=0.5, env={})
    assert jobs[0].values["startdelay"] == 500_000 and jobs[0].values["runtime"] == 500_000
    _, jobs = compare.derive_jobfile(str(job), env={})
    assert jobs[0].values["startdelay"] == 120_000_000   # as written without --runtime


# ---------------------------------------------------------------------------------------------
# Runs: latency switched off, create_only, unlink

def side_by_side(tmp_path, text: str):
    """fio and iodl on `text` in a fresh directory: (the process, the first job's entry, the directory)."""
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "job.fio"
    job.write_text(text)
    out = tmp_path / "out.json"
    r = fio_compare(job, "--directory", d, "--out", out)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())["jobs"][0], d

@pytest.mark.fio
def test_gtod_reduce_compares_bandwidth_and_says_latency_is_not_measured(tmp_path):
    r, entry, _ = side_by_side(tmp_path, "[a]\nrw=read\nbs=4k\nsize=256k\nioengine=psync\ngtod_reduce=1\n")
    for side in (entry["fio"], entry["iodl"]):
        assert side["bytes"] == 256 * 1024 and side["not_measured"] == ["lat_us", "latency_us", "slat_us"]
        assert all(v is None for v in side["latency_us"].values())
    assert entry["ratio"]["bandwidth"] > 0
    assert re.search(r"clat µs\s+│\s+not measured\s+│\s+not measured", r.stdout), r.stdout


@pytest.mark.fio
def test_create_only_lays_out_and_does_no_io_on_both_sides(tmp_path):
    _, entry, d = side_by_side(tmp_path, "[a]\nrw=read\nbs=4k\nsize=128k\nnrfiles=2\ncreate_only=1\n")
    assert entry["fio"]["bytes"] == entry["iodl"]["bytes"] == 0
    assert sorted(os.listdir(d)) == ["a.0.0", "a.0.1"] and all(layout.is_marked(d / f) for f in os.listdir(d))


def test_unlink_removes_iodls_own_files_only(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    mine = d / "user.dat"
    mine.write_bytes(b"u" * 65536)
    job = tmp_path / "job.fio"
    job.write_text("[own]\nrw=read\nbs=4k\nsize=64k\nunlink=1\n[user]\nrw=read\nbs=4k\nfilename=user.dat\nunlink=1\n")
    r = fio_compare(job, "--no-fio", "--directory", d, "--keep-jobfile", tmp_path / "derived.fio")
    assert r.returncode == 0, r.stderr
    assert os.listdir(d) == ["user.dat"] and mine.read_bytes() == b"u" * 65536
    assert "unlink=0" in (tmp_path / "derived.fio").read_text()   # fio removes nothing either


# ---------------------------------------------------------------------------------------------
# Exit codes

def test_nothing_to_do_at_this_scale_is_exit_2_and_names_the_direction(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "job.fio"
    job.write_text("[w]\nrw=write\nbs=64k\nsize=1m\n")
    assert "[w] has nothing to write at --scale 0.01" in one_line(fio_compare(job, "--no-fio", "--directory", d,
                                                                               "--scale", "0.01"))
    job.write_text("[r]\nrw=randread\nbs=64k\nsize=1m\n")
    assert "[r] has nothing to read at --scale 0.01" in one_line(fio_compare(job, "--no-fio", "--directory", d,
                                                                              "--scale", "0.01"))
    assert os.listdir(d) == []


@pytest.mark.fio
def test_a_one_byte_direct_read_fails_as_fio_fails(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "job.fio"
    job.write_text("[a]\nrw=read\nbs=1\nsize=100\ndirect=1\nioengine=psync\n")
    fio = subprocess.run(["fio", "--output=/dev/null", f"--directory={d}", "--size=1", str(job)],
                         capture_output=True, text=True)
    assert fio.returncode != 0 and "Invalid argument" in fio.stderr + fio.stdout
    err = one_line(fio_compare(job, "--no-fio", "--directory", d, "--scale", "0.01"))
    assert "reads 1 bytes with direct=1" in err and "job.fio:3" in err


def test_a_job_that_did_no_io_never_exits_0(tmp_path):
    """Two clones that both name one file: the second gets no file (fio's add_file), so it reads
    nothing; a job all of whose clones read nothing fails (fio too does no I/O for it)."""
    from iodl.cmd.fio_compare import _check_did_io
    from iodl.errors import IodlError

    jobs = jf.parse("t.fio", "[a]\nrw=read\nsize=64k\n", env={}, keywords={})
    doc = {"jobs": [{"name": "a", "fio": None, "iodl": {"ios": 0, "syncs": None}}]}
    with pytest.raises(IodlError, match=r"\[a\] did no I/O"):
        _check_did_io(doc, jobs, set())
    _check_did_io(doc, jobs, {0})   # create_only: no I/O is what it asks for


# ---------------------------------------------------------------------------------------------
# Never anything under /dev, /proc or /sys

@pytest.mark.parametrize("target,rw", [("/dev/sdz-iodl-test", "write"), ("/dev/sdz-iodl-test", "read"),
                                       ("/proc/iodl-test", "write"), ("/sys/iodl-test", "write")])
def test_a_missing_device_path_is_refused_and_nothing_appears_there(tmp_path, target, rw):
    assert not os.path.lexists(target)
    parent = os.path.dirname(target)
    def listing():   # /proc's process entries come and go: they are not ours to compare
        return {n for n in os.listdir(parent) if not n.isdigit()}

    before = listing()
    job = tmp_path / "job.fio"
    job.write_text(f"[w]\nfilename={target}\nrw={rw}\nbs=4k\nsize=1m\n")
    err = one_line(fio_compare(job, "--no-fio"))
    assert f"{target} does not exist and is under {parent}" in err
    assert not os.path.lexists(target) and listing() == before


# ---------------------------------------------------------------------------------------------
# offset_increment: numjobs clones on disjoint, evenly spaced parts (vendor guides' throughput jobs)

@pytest.mark.fio
def test_offset_increment_starts_each_clone_further_on_as_fio(tmp_path):
    """Clone n starts offset + n x offset_increment into its file (fio filesetup.c get_start_offset): the
    files fio lays out for it (create_only=1) are the sizes iodl lays out, and clone n's pass reads
    [offset + n x increment, + size) in order."""
    text = "[global]\nrw=read\nbs=64k\nsize=1m\noffset=128k\noffset_increment=1m\nnumjobs=3\n"
    fio_dir, d = tmp_path / "fio", tmp_path / "d"
    fio_dir.mkdir()
    d.mkdir()
    fio_job = tmp_path / "fio.fio"
    fio_job.write_text(f"{text}directory={fio_dir}\ncreate_only=1\n[s]\n")
    subprocess.run(["fio", "--output=/dev/null", str(fio_job)], check=True, capture_output=True, timeout=60)
    (job,) = jf.parse(str(tmp_path / "job.fio"), f"{text}directory={d}\n[s]\n", env={}, keywords={})
    p = plan_job(job)
    assert len(p.files) == 3
    for n, clone in enumerate(p.files):
        (spec,) = clone
        start = (128 << 10) + n * (1 << 20)
        assert spec.offset == start and spec.needed == start + (1 << 20) == os.path.getsize(fio_dir / f"s.{n}.0")
        rows = pass_plan(p, clone, np.random.default_rng(0))
        assert rows["offset"].tolist() == list(range(start, start + (1 << 20), 64 << 10))


@pytest.mark.parametrize("text, message", [
    ("[r]\nrw=read\nsize=1m\nnumjobs=2\noffset_increment=10%\n", "unsupported value 'offset_increment=10%'"),
    ("[w]\nrw=write\nsize=1m\nnumjobs=2\ndirect=1\noffset_increment=1000\n",
     "direct=1 writes need block sizes and offsets in multiples of 4096"),
])
def test_offset_increment_iodl_cannot_place_is_one_line(tmp_path, text, message):
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "job.fio"
    job.write_text(text)
    assert message in one_line(fio_compare(job, "--no-fio", "--directory", d))
    assert os.listdir(d) == []
