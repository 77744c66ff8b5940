"""`iodl fio-compare` as a user runs it: bad job files end with one line naming file:line, exit 2."""
import json
import os
import subprocess
import sys

import pytest


def iodl(*args, **kw):
    return subprocess.run([sys.executable, "-m", "iodl", "fio-compare", *args], capture_output=True, text=True, **kw)


@pytest.mark.parametrize("text,message", [
    ("[a]\nrw=read\nbs=4k\n[b\n", "bad section header '[b' (JOB:4)"),
    ("[a]\nrw=randtrim\n", "unsupported value 'rw=randtrim' (iodl runs reads, writes and their mixes: trim "
                           "workloads are not emulated) in [a] (JOB:2)"),
    ("[a]\nrw=read\nverify=md5\n", "unsupported option 'verify' in [a]: verification and trims are not emulated (iodl reads) (JOB:3)"),
    ("[global]\nthinktime=10\n[a]\nrw=read\n", "unsupported option 'thinktime' in [a]: think time is not emulated (JOB:2)"),
    ("[a]\nrw=read\nioengine=mmap\n", "unsupported value 'ioengine=mmap' (iodl has null, psync, sync, pvsync, pvsync2, libaio, io_uring, filecreate, filestat, filedelete) in [a] (JOB:3)"),
    ("[a]\nrw=read\nnumjob=2\n", "unknown option 'numjob' in [a] (did you mean 'numjobs'?) (JOB:3)"),
    ("[a]\nrw=read\ndirect=yes\n", "bad value for 'direct' in [a]: 'yes': expects 0 or 1 (JOB:3)"),
    ("[a]\nrw=read\ninclude missing.fio\n", "include file not found: missing.fio (JOB:3)"),
])
def test_bad_job_files_fail_with_one_line(tmp_path, text, message):
    job = tmp_path / "bad.fio"
    job.write_text(text)
    r = iodl(str(job), "--no-fio", "--directory", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr == f"iodl: error: {message.replace('JOB', str(job))}\n"
    assert "Traceback" not in r.stdout + r.stderr


def test_missing_job_file(tmp_path):
    r = iodl(str(tmp_path / "nope.fio"), "--no-fio")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope.fio" in r.stderr


def test_bad_fio_json(tmp_path):
    job = tmp_path / "a.fio"
    job.write_text(f"[a]\nrw=read\nsize=64k\ndirectory={tmp_path}\n")
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    r = iodl(str(job), "--fio-json", str(bad))
    assert r.returncode == 2 and "not fio JSON output" in r.stderr and "Traceback" not in r.stderr


def test_never_starts_mpi_outside_mpirun(tmp_path):
    """The command imports, parses and checks without mpi4py.MPI (which would run MPI_Init)."""
    job = tmp_path / "a.fio"
    job.write_text("[a]\nrw=write\n")
    code = ("import sys; from iodl.cli import main; rc = main(['fio-compare', sys.argv[1], '--no-fio']);"
            "print('mpi4py.MPI' in sys.modules, rc)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    r = subprocess.run([sys.executable, "-c", code, str(job)], capture_output=True, text=True, env=env)
    assert r.stdout.split() == ["False", "2"]


@pytest.mark.fio
def test_fio_json_is_compared_without_running_fio_again(tmp_path):
    """A real fio result of a null-engine job, fed back with --fio-json; iodl runs its null engine."""
    job = tmp_path / "n.fio"
    job.write_text(f"[n]\nioengine=null\nrw=read\nbs=64k\nsize=64m\nnumjobs=2\ndirectory={tmp_path}\n")
    res = tmp_path / "fio.json"
    subprocess.run(["fio", "--output-format=json+", f"--output={res}", str(job)], check=True, capture_output=True)
    out = tmp_path / "cmp.json"
    r = iodl(str(job), "--fio-json", str(res), "--out", str(out), env={**os.environ, "PATH": "/nonexistent"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "iodl.fio-compare/1"
    (entry,) = doc["jobs"]
    fio = json.loads(res.read_text())["jobs"]
    # fio's own numbers come back unchanged: bytes summed over clones, runtime the longest (ms)
    assert entry["fio"]["bytes"] == sum(j["read"]["io_bytes"] for j in fio) == 2 * 64 * 2**20
    assert entry["fio"]["runtime_s"] == max(j["read"]["runtime"] for j in fio) / 1000
    assert entry["iodl"]["bytes"] == 2 * 64 * 2**20 and entry["iodl"]["ios"] == 2 * 1024
    assert set(entry["fio"]["latency_us"]) >= {"p50", "p99", "p999"}
    # made without lat_percentiles/slat_percentiles: fio gives means but no percentiles of those;
    # the comparison shows what fio gave (None), while clat (latency_us) has them on both sides
    assert entry["fio"]["lat_us"]["p50"] is None and entry["fio"]["lat_us"]["mean"] is not None
    assert entry["fio"]["slat_us"]["p50"] is None
    for kind in ("latency_us", "slat_us", "lat_us"):
        assert entry["iodl"][kind]["p50"] is not None
    assert entry["iodl"]["lat_us"]["p50"] >= entry["iodl"]["latency_us"]["p50"]


JOB = """[global]
ioengine=psync
rw=read
bs=1M
size=8M
nrfiles=2
numjobs=4
[small]
"""


@pytest.mark.parametrize("ranks", [0, 2])
def test_no_fio_runs_a_job_alone_serially_and_under_mpiexec(tmp_path, ranks):
    """--no-fio runs iodl's side alone, laying out fio's files; under mpiexec the four clones are
    spread over the ranks. Not time-based: every clone reads its 8 MiB once, so iodl must read
    exactly 4 x 8 MiB in 32 requests of 1 MiB, whatever the rank count."""
    from tests.helpers import mpiexec

    job = tmp_path / "job.fio"
    job.write_text(JOB)
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "iodl", "fio-compare", str(job), "--no-fio", "--directory", str(tmp_path),
           "--out", str(out)]
    if ranks:
        assert mpiexec(), "mpiexec not found next to the test interpreter (pip install mpich)"
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["ranks"] == max(ranks, 1)
    [j] = doc["jobs"]
    assert j["fio"] is None and j["ratio"] is None
    assert (j["iodl"]["bytes"], j["iodl"]["ios"]) == (4 * (8 << 20), 32)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("small.")) == \
        [f"small.{c}.{f}" for c in range(4) for f in range(2)]
