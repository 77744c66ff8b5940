"""fio-compare never harms: devices, FIFOs, symlinks and users' files are read or refused, never written.

Every test checks the bytes, mtimes or existence of what is *not* iodl's, not only exit codes.
The job-file battery (tests/fio/jobs/*.fio, each saying `; expect: run` or `; expect: refuse TEXT`)
covers fio's grammar and every engine its examples name; see docs/fio-compare.md "Files".
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iodl.fio import jobfile, layout
from iodl.fio.run import plan_job

JOBS = Path(__file__).parent / "jobs"


def fio_compare(*args, cwd=None, env=None, timeout=60):
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", *map(str, args)], capture_output=True,
                       text=True, cwd=cwd, env=dict(os.environ, **(env or {})), timeout=timeout)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    return r


def one_line_error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("iodl: error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


def digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree(root, skip=()) -> dict:
    """Everything under root (links not followed): name -> (type, size, mtime_ns, sha of regular files)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in skip]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            sha = digest(p) if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, sha)
    return out


def user_file(path, size) -> tuple:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))   # an old mtime: any write would move it
    return digest(path), path.stat().st_mtime_ns


@pytest.fixture
def loop_device(tmp_path):
    """A real loop block device over 4 MiB of random bytes; yields (device, backing file)."""
    yield from _loop_device(tmp_path)


def _loop_device(tmp_path):
    image = tmp_path / "backing.img"
    user_file(image, 4 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True).stdout.strip()
    try:
        yield dev, image
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


# ---------------------------------------------------------------------------------------------
# Devices

@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.parametrize("with_fio", [False, pytest.param(True, marks=pytest.mark.fio)])
def test_read_job_on_a_block_device_reads_it_and_never_writes(tmp_path, loop_device, with_fio):
    dev, image = loop_device
    before = digest(dev), digest(image), image.stat().st_mtime_ns
    job = tmp_path / "dev.fio"
    job.write_text(f"[j]\nfilename={dev}\nrw=read\nsize=1M\n")
    out = tmp_path / "cmp.json"
    r = fio_compare(job, *([] if with_fio else ["--no-fio"]), "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [entry] = json.loads(out.read_text())["jobs"]
    assert entry["iodl"]["bytes"] == 1 << 20
    if with_fio:
        assert entry["fio"]["bytes"] == 1 << 20
    assert (digest(dev), digest(image), image.stat().st_mtime_ns) == before
    assert not list(tmp_path.glob("*iodl-tmp*"))


@pytest.mark.root
@pytest.mark.loopdev
def test_job_needing_more_than_the_device_has_is_refused(tmp_path, loop_device):
    dev, image = loop_device
    before = digest(dev), image.stat().st_mtime_ns
    job = tmp_path / "dev.fio"
    job.write_text(f"[j]\nfilename={dev}\nrw=read\nsize=8M\n")
    err = one_line_error(fio_compare(job, "--no-fio", cwd=tmp_path))
    assert dev in err and str(8 << 20) in err and str(4 << 20) in err and "never writes to a device" in err
    assert (digest(dev), image.stat().st_mtime_ns) == before


def test_character_device_is_refused(tmp_path):
    job = tmp_path / "chr.fio"
    job.write_text("[j]\nfilename=/dev/zero\nrw=read\nsize=64k\n")
    before = os.stat("/dev/zero").st_mtime_ns
    assert "/dev/zero is a character device" in one_line_error(fio_compare(job, "--no-fio", cwd=tmp_path))
    assert os.stat("/dev/zero").st_mtime_ns == before


def test_fifo_is_refused_without_blocking(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    os.mkfifo(d / "j.0.0")
    job = tmp_path / "f.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=64k\n")
    t0 = time.monotonic()
    err = one_line_error(fio_compare(job, "--no-fio", timeout=20))
    assert time.monotonic() - t0 < 10
    assert "is a FIFO" in err and str(d / "j.0.0") in err
    assert stat.S_ISFIFO(os.lstat(d / "j.0.0").st_mode) and os.listdir(d) == ["j.0.0"]


def test_fifo_planted_after_the_checks_is_not_opened_blocking(tmp_path):
    os.mkfifo(tmp_path / "p")
    t0 = time.monotonic()
    with pytest.raises(Exception, match="is a FIFO"):
        layout.open_input(str(tmp_path / "p"), direct=False)
    assert time.monotonic() - t0 < 1


# ---------------------------------------------------------------------------------------------
# Users' files and symlinks

def test_existing_short_user_file_is_refused_and_unchanged(tmp_path):
    d = tmp_path / "d"
    sha, mtime = user_file(d / "j.0.0", 100)
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=64k\n")
    err = one_line_error(fio_compare(job, "--no-fio"))
    assert str(d / "j.0.0") in err and "65536" in err and "has 100" in err
    assert "did not create it" in err and "remove it or point directory= elsewhere" in err
    assert (digest(d / "j.0.0"), (d / "j.0.0").stat().st_mtime_ns) == (sha, mtime)
    assert os.listdir(d) == ["j.0.0"]


def test_existing_user_file_big_enough_is_read_as_it_is(tmp_path):
    d = tmp_path / "d"
    sha, mtime = user_file(d / "j.0.0", 128 << 10)
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=64k\n")
    out = tmp_path / "o.json"
    r = fio_compare(job, "--no-fio", "--out", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["jobs"][0]["iodl"]["bytes"] == 64 << 10
    assert (digest(d / "j.0.0"), (d / "j.0.0").stat().st_mtime_ns) == (sha, mtime)


def test_own_file_is_marked_and_only_it_is_extended(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=64k\n")
    assert fio_compare(job, "--no-fio").returncode == 0
    assert layout.is_marked(str(d / "j.0.0")) and (d / "j.0.0").stat().st_size == 64 << 10
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=128k\n")
    assert fio_compare(job, "--no-fio").returncode == 0
    assert layout.is_marked(str(d / "j.0.0")) and (d / "j.0.0").stat().st_size == 128 << 10
    assert sorted(os.listdir(d)) == ["j.0.0"]


@pytest.mark.parametrize("target_size", [10, 1 << 20])
def test_symlink_at_the_final_name_is_never_written_through(tmp_path, target_size):
    """Short target: refused. Big enough: read (as fio would), never written."""
    d = tmp_path / "d"
    d.mkdir()
    outside = tmp_path / "outside.dat"
    sha, mtime = user_file(outside, target_size)
    os.symlink(outside, d / "j.0.0")
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=64k\n")
    r = fio_compare(job, "--no-fio")
    if target_size < 64 << 10:
        assert "is a symlink" in one_line_error(r)
    else:
        assert r.returncode == 0, r.stderr
    assert (digest(outside), outside.stat().st_mtime_ns, outside.stat().st_size) == (sha, mtime, target_size)
    assert os.readlink(d / "j.0.0") == str(outside) and os.listdir(d) == ["j.0.0"]


def test_symlink_at_the_temporary_name_is_left_alone(tmp_path, monkeypatch):
    d = tmp_path / "d"
    d.mkdir()
    outside = tmp_path / "outside.dat"
    sha, mtime = user_file(outside, 10)
    tokens = iter(["planted0", "ours0001"])
    monkeypatch.setattr(layout.secrets, "token_hex", lambda n: next(tokens))
    planted = d / f".j.0.0.iodl-tmp.{os.getpid()}.planted0"
    os.symlink(outside, planted)
    written = layout.lay_out([layout.FileSpec(str(d / "j.0.0"), 0, 64 << 10, str(d))])
    assert written == 64 << 10 and layout.is_marked(str(d / "j.0.0"))
    assert (digest(outside), outside.stat().st_mtime_ns, outside.stat().st_size) == (sha, mtime, 10)
    assert os.readlink(planted) == str(outside)
    assert sorted(os.listdir(d)) == sorted(["j.0.0", planted.name])


def test_symlinked_subdirectory_is_not_created_through(tmp_path):
    d, outside = tmp_path / "d", tmp_path / "elsewhere"
    d.mkdir()
    outside.mkdir()
    os.symlink(outside, d / "sub")
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nfilename_format=sub/data\nrw=read\nsize=64k\n")
    assert "symlink" in one_line_error(fio_compare(job, "--no-fio"))
    assert os.listdir(outside) == []


@pytest.mark.root
def test_no_space_leaves_no_temporary_file(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        job = tmp_path / "j.fio"
        job.write_text(f"[j]\ndirectory={mnt}\nrw=read\nsize=4m\n")
        err = one_line_error(fio_compare(job, "--no-fio"))
        assert "free" in err and str(4 << 20) in err          # refused before writing
        assert os.listdir(mnt) == []
        with pytest.raises(Exception, match="No space left on device"):   # past the check: ENOSPC mid-write
            layout._write_one(layout.FileSpec(str(mnt / "big"), 0, 4 << 20, str(mnt)), os.urandom(1 << 20))
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_during_layout_leaves_no_temporary_file(tmp_path, sig):
    d = Path("/dev/shm") / f"iodl-test-{os.getpid()}"
    d.mkdir()
    try:
        job = tmp_path / "j.fio"
        job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=1g\n")
        # SIGINT at its default: a suite started in the background (`cmd &`) hands it down ignored
        p = subprocess.Popen([sys.executable, "-m", "iodl", "fio-compare", str(job), "--no-fio"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 20
        while not any(".iodl-tmp." in n for n in os.listdir(d)) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.001)
        assert p.poll() is None, "the lay-out ended before the signal: make the file bigger"
        p.send_signal(sig)
        _, err = p.communicate(timeout=20)
        assert p.returncode != 0 and "Traceback" not in err, err
        assert os.listdir(d) == []
    finally:
        for n in os.listdir(d):
            os.unlink(d / n)
        d.rmdir()


def test_null_engine_creates_nothing(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "n.fio"
    job.write_text(f"[n]\ndirectory={d}\nioengine=null\nrw=read\nbs=1m\nsize=100g\nruntime=200ms\nnumjobs=2\n")
    out = tmp_path / "o.json"
    r = fio_compare(job, "--no-fio", "--out", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["jobs"][0]["iodl"]["bytes"] > 0
    assert os.listdir(d) == []


# ---------------------------------------------------------------------------------------------
# Naming, against fio's own

NAMING = """[global]
ioengine=null
size=64k
bs=4k
directory={d1}:{d2}
[abs]
filename=/abs/x:rel\\:colon: y
numjobs=2
[fmt]
nrfiles=2
numjobs=3
filename_format=f.$JOBNUM.$jobname.$filenum.$jobnum
[shared]
filename_format=shared.$filenum
nrfiles=2
numjobs=3
[/dev/null]
[global]
filename=g1
[inherit]
directory={d2}
filename=own
"""


@pytest.mark.fio
def test_file_names_match_fio(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    job = tmp_path / "names.fio"
    job.write_text(NAMING.format(d1=d1, d2=d2))
    r = subprocess.run(["fio", "--debug=file", str(job)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    theirs = re.findall(r'file \S+ "(.*)" added at', r.stdout + r.stderr)
    taken: set = set()
    ours = []
    for j in jobfile.parse(str(job)):
        plan = plan_job(j, taken=taken)
        ours += [f.path for clone in plan.files for f in clone]
    assert f"{d1}//abs/x" in ours and f"{d1}/rel:colon" in ours and f"{d1}/ y" in ours
    assert f"{d1}//dev/null" in ours and f"{d1}/g1" in ours and f"{d2}/own" in ours
    assert set(ours) == set(theirs) and len(theirs) >= 14
    assert os.listdir(d1) == os.listdir(d2) == []    # neither tool created anything for null jobs


# ---------------------------------------------------------------------------------------------
# The job-file battery

def _header(path: Path) -> tuple[str, str, set]:
    expect, needs = "", set()
    for line in path.read_text().splitlines():
        if line.startswith("; expect:"):
            expect = line.split(":", 1)[1].strip()
        elif line.startswith("; needs:"):
            needs |= set(line.split(":", 1)[1].split())
    return expect, needs


REQUIRES = {"device": ("root", "loopdev"), "uring": ("uring",)}   # `; needs:` -> conftest markers


def _needs(needs: set) -> None:
    from tests.conftest import _capability, require_or_skip

    for need in needs:
        for name in REQUIRES.get(need, ()):
            cap = _capability(name)
            require_or_skip(name, cap.ok, f"{name}: {cap.detail}")


def _battery_env(dev: str) -> dict:
    return {"IODL_JOB_ALIGN": "4096", "IODL_JOB_SIZE": "64k", "IODL_TEST_DEV": dev}


@contextlib.contextmanager
def _device(needs, tmp_path):
    if "device" not in needs:
        yield "", None
        return
    yield from _loop_device(tmp_path)


BATTERY = sorted(p.name for p in JOBS.glob("*.fio"))


def test_every_job_file_says_what_it_expects():
    for name in BATTERY:
        expect, _ = _header(JOBS / name)
        assert expect == "run" or expect.startswith("refuse "), name


@pytest.mark.parametrize("name", BATTERY)
def test_job_file(name, tmp_path, monkeypatch, capsys):
    """Runs (exit 0, bytes read) or is refused in one line before touching anything; writes only in
    its directory; a device it names keeps its bytes."""
    path = JOBS / name
    expect, needs = _header(path)
    _needs(needs)
    jobdir, cwd = tmp_path / "jobdir", tmp_path / "cwd"
    jobdir.mkdir()
    cwd.mkdir()
    user_file(tmp_path / "outside.dat", 4096)
    jobs_before = tree(JOBS)
    with _device(needs, tmp_path) as (dev, image):
        dev_before = digest(dev) if dev else None
        before = tree(tmp_path, skip={str(jobdir)})
        args = ["fio-compare", str(path), "--no-fio"]
        if not needs & {"device", "nodir"}:
            args += ["--directory", str(jobdir)]
        env = _battery_env(dev)
        if expect == "run":
            out = tmp_path / "out.json"
            r = subprocess.run([sys.executable, "-m", "iodl", *args, "--out", str(out)], capture_output=True,
                               text=True, cwd=cwd, env=dict(os.environ, **env), timeout=60)
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
            doc = json.loads(out.read_text())
            assert all(j["iodl"]["bytes"] > 0 for j in doc["jobs"]), doc["jobs"]
            out.unlink()
            made = [os.path.join(dp, f) for dp, _, fs in os.walk(jobdir) for f in fs]
            assert all(layout.is_marked(p) for p in made), made          # only iodl's own files
            assert not any(".iodl-tmp." in p for p in made)
            # fio's logs the job asked for (write_*_log), iodl's copy: the only files iodl makes in the cwd
            logs = list(cwd.glob("iodl-*.log"))
            assert sorted(os.listdir(cwd)) == sorted(p.name for p in logs)
            for log in logs:
                log.unlink()
            before.pop("cwd", None)
        else:
            # refusals in-process (the CLI's own main): fast, and any traceback fails the test
            from iodl.cli import main

            monkeypatch.chdir(cwd)
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            rc = main(args)
            err = capsys.readouterr().err
            assert rc == 2 and err.startswith("iodl: error: ") and err.count("\n") == 1, err
            assert expect[len("refuse "):] in err, err
            assert os.listdir(jobdir) == []          # refused before any I/O
        after = tree(tmp_path, skip={str(jobdir)})
        if expect == "run":
            after.pop("cwd", None)   # its mtime moved if logs were made there (and removed above)
        assert after == before
        if dev:
            assert digest(dev) == dev_before
    assert tree(JOBS) == jobs_before
