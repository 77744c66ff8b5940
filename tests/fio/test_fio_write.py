"""fio-compare on sequential-write jobs (checkpoint-style): real fio, real files.

- fsync=N / fdatasync=N syncs are placed where fio issues them (io_u.c get_rw_ddir, should_fsync),
  so both sides count the same syncs; end_fsync / fsync_on_close are timed into the run as in fio.
- On a loop-mounted ext4 with an 80 MiB/s blkio write throttle both sides' write bandwidth is the
  throttle's and each other's (5%), with equal bytes and sync counts.
- Write jobs touch only files iodl lays out and marks in the job's directory: devices, users' files,
  symlinks and trims are refused in one line, before anything is written.
"""
import json
import os
import subprocess
import sys

import pytest

from iodl.cmd.fio_compare import start_states
from iodl.fio import layout
from iodl.fio.jobfile import parse
from iodl.fio.run import JobPlan, _SyncState, _write_rows, plan_job
from iodl.plan import OP_FDATASYNC, OP_FSYNC, OP_WRITE, new_plan
from tests.fio.test_safety import _loop_device, digest, fio_compare, one_line_error, user_file
from tests.helpers import NotJudged

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The write throttle, bytes/s: 80 MiB/s, not 80 MB/s. The throttle passes a 100 ms slice's budget at
# a time (Linux 6.18: HZ/10 for every device), and a slice that starts afresh (its group idle when the
# last one ran out) lets through only the writes that fit whole: at 80 MB/s, 7 of 1 MiB of the 7.63 MiB
# it gives, and the 1 MiB jobs' runs fell in two modes, ~73 and ~81 MB/s, by chance, for fio and iodl
# alike. A budget of exactly 8 MiB a slice loses nothing either way: by hand, 9 rounds of each job (3
# of them with another fio writing and reading the disk under the loop image), both tools: the direct
# jobs 91.1-93.5 MB/s (the idle throttle's first slice, 8 MiB at once, is 12 % of a 64 MiB run),
# fsync_on_close 80.4-82.2, fsync=4 86.0-89.0.
LIMIT = 80 << 20


def job_file(tmp_path, text, name="w.fio"):
    path = tmp_path / name
    path.write_text(text)
    return path


def plan_of(tmp_path, text, files=False) -> JobPlan:
    (job,) = parse(str(job_file(tmp_path, text)))
    return plan_job(job, files=files)


def ops(plan, n_writes, **kw):
    rows = new_plan(n_writes)
    return _write_rows(plan, rows, kw.pop("state", _SyncState()), **kw)["op"].tolist()


# ---------------------------------------------------------------------------------------------
# Where syncs go (fio's rules, as strace and fio's JSON show them)

def test_fsync_every_n_writes_but_not_after_the_last(tmp_path):
    """fsync=4 over 16 writes: fio syncs before writes 5, 9 and 13 (its JSON: sync total_ios 3),
    never after the job's last write (the end syncs of end_fsync do that)."""
    plan = plan_of(tmp_path, "[w]\nrw=write\nbs=64k\nsize=1m\nfsync=4\n")
    got = ops(plan, 16)
    assert got.count(OP_FSYNC) == 3 and got.count(OP_WRITE) == 16
    assert [i for i, op in enumerate(got) if op == OP_FSYNC] == [4, 9, 14]
    assert got[-1] == OP_WRITE


def test_fsync_wins_over_fdatasync_when_both_are_due(tmp_path):
    plan = plan_of(tmp_path, "[w]\nrw=write\nbs=64k\nsize=1m\nfsync=4\nfdatasync=2\n")
    got = ops(plan, 16)
    # due after 2,4,6,...,14 writes: 4, 8, 12 are fsyncs, the others fdatasyncs
    assert got.count(OP_FSYNC) == 3 and got.count(OP_FDATASYNC) == 4


def test_loops_sync_at_both_ends_of_a_loop_boundary(tmp_path):
    """loops=3, 4 writes a loop, fsync=2: strace of fio 3.33 shows w w S w w S | S w w S w w S | S w w S w w."""
    plan = plan_of(tmp_path, "[w]\nrw=write\nbs=64k\nsize=256k\nfsync=2\nloops=3\n")
    state = _SyncState()
    seq = ops(plan, 4, state=state, trailing=True) + ops(plan, 4, state=state, leading=True, trailing=True) \
        + ops(plan, 4, state=state, leading=True)
    W, S = OP_WRITE, OP_FSYNC
    assert seq == [W, W, S, W, W, S, S, W, W, S, W, W, S, S, W, W, S, W, W]


def test_sync_targets_the_file_of_the_next_write(tmp_path):
    plan = plan_of(tmp_path, "[w]\nrw=write\nbs=64k\nsize=1m\nnrfiles=2\nfsync=1\n")
    rows = new_plan(4)
    rows["file"] = [0, 1, 0, 1]
    out = _write_rows(plan, rows, _SyncState())
    assert out["op"].tolist() == [OP_WRITE, OP_FSYNC, OP_WRITE, OP_FSYNC, OP_WRITE, OP_FSYNC, OP_WRITE]
    assert out["file"].tolist() == [0, 1, 1, 0, 0, 1, 1]


def test_write_plan_resolves_fio_options(tmp_path):
    p = plan_of(tmp_path, "[w]\nrw=write\nbs=4k,1m\nrate=0,40m\nsize=8m\nend_fsync=1\nioengine=libaio\niodepth=8\n")
    assert p.write and p.block_sizes == [(1 << 20, 1.0)] and p.rate_bps == 40 << 20 and p.end_sync
    assert p.reset == "native"    # fio's default fallocate=native: allocated, nothing written
    assert plan_of(tmp_path, "[w]\nrw=write\nsize=1m\noverwrite=1\n").reset == "fill"
    assert plan_of(tmp_path, "[w]\nrw=write\nsize=1m\ncreate_on_open=1\n").reset == "empty"
    assert plan_of(tmp_path, "[w]\nrw=write\nsize=1m\nfallocate=none\n").reset == "none"



def _file_state(path) -> tuple[int, bool, bool]:
    """(size, every byte's block allocated, its first block holds data rather than zeros)."""
    st = os.stat(path)
    with open(path, "rb") as f:
        return st.st_size, st.st_blocks * 512 >= st.st_size, any(f.read(4096))


@pytest.mark.fio
@pytest.mark.parametrize("jobs, mode", [
    ("[w]\nrw=randwrite\nfallocate=none\n[r]\nstonewall\nrw=randread\n", "fill"),
    ("[r]\nrw=randread\n[w]\nstonewall\nrw=randwrite\nfallocate=none\n", "fill"),
    ("[r]\nrw=randread\n[w]\nstonewall\nrw=randwrite\n", "fill"),
    ("[w]\nrw=randwrite\n[r]\nstonewall\nrw=randread\n", "native"),
    ("[w]\nrw=randwrite\nfallocate=none\n", "none"),
])
def test_a_write_jobs_file_starts_as_fios_lay_out_of_all_the_jobs_leaves_it(tmp_path, jobs, mode):
    """fio lays out every job's files before any runs, in the file's order, each only when missing or
    short: a read job after a write job of fallocate=none (which leaves 0 bytes) writes the file whole,
    one before any write job too; a fallocated file is long enough for the read job, which writes
    nothing. fio's own lay-out (create_only=1) is the truth; iodl's state before each side must equal it
    (size, blocks allocated, data or zeros). Alone, fallocate=none: fio leaves 0 bytes, iodl sets the
    size without allocating (docs/fio-compare.md: a shorter file fio would recreate on its own)."""
    common = "[global]\nfilename=f\nfilesize=1m\nbs=4k\nio_size=256k\n"
    fio_dir, iodl_dir = tmp_path / "fio", tmp_path / "iodl"
    fio_dir.mkdir()
    iodl_dir.mkdir()
    fio_job = job_file(tmp_path, f"{common}directory={fio_dir}\ncreate_only=1\n{jobs}", "fio.fio")
    subprocess.run(["fio", "--output=/dev/null", str(fio_job)], check=True, capture_output=True, timeout=60)
    taken: set = set()
    plans = dict(enumerate(plan_job(job, taken=taken) for job in
                           parse(str(job_file(tmp_path, f"{common}directory={iodl_dir}\n{jobs}", "iodl.fio")))))
    for plan in plans.values():
        layout.lay_out([f for clone in plan.files for f in clone])
    states = start_states(plans)
    assert [m for _spec, m in states.values()] == [mode]
    for spec, m in states.values():
        layout.reset_for_write(spec, m)
    fio, iodl = _file_state(fio_dir / "f"), _file_state(iodl_dir / "f")
    if mode == "none":
        assert fio == (0, True, False) and iodl[1:] == (False, False) and iodl[0] == 1 << 20
    else:
        assert iodl == fio == (1 << 20, True, mode == "fill")

@pytest.mark.parametrize("text,message", [
    ("[w]\nrw=trim\nsize=1m\n", "unsupported value 'rw=trim' (iodl runs reads, writes and their mixes: trim "
                                     "workloads are not emulated)"),
    ("[w]\nrw=randrw\nsize=1m\nrate=1m\n", "option 'rate' in a job that mixes reads and writes"),
    ("[w]\nrw=randrw\nsize=1m\nrandom_distribution=zoned:50/5:50/95\n", "zoned distributions are not emulated"),
    ("[w]\nrw=randrw\nsize=1m\nrandom_distribution=zipf:1\n", "'random_distribution=zipf:1' (fio refuses it)"),
    ("[w]\nrw=randtrim\nsize=1m\n", "unsupported value 'rw=randtrim'"),
    ("[w]\nrw=trimwrite\nsize=1m\n", "unsupported value 'rw=trimwrite'"),
    ("[w]\nrw=write\nsize=1m\nsync=1\n", "unsupported value 'sync=1' (O_SYNC/O_DSYNC writes are not emulated)"),
    ("[w]\nrw=write\n", "unsupported write job without size="),
    ("[w]\nrw=write\nsize=1m\nbs=512\ndirect=1\n", "direct=1 writes need block sizes and offsets in multiples of 4096"),
    # fsync=/end_fsync= in a read job are accepted: they do nothing there, in fio too
    # (tests/fio/test_jobs_people_have.py)
    ("[w]\nrw=write\nsize=1m\nwrite_barrier=2\n", "unsupported option 'write_barrier'"),
])
def test_refused_write_jobs_say_why_in_one_line(tmp_path, text, message):
    d = tmp_path / "d"
    d.mkdir()
    r = fio_compare(job_file(tmp_path, text), "--no-fio", "--directory", d)
    assert message in one_line_error(r)
    assert os.listdir(d) == []   # nothing laid out, nothing written


# ---------------------------------------------------------------------------------------------
# What a write job may write: only iodl's own files

WRITE_JOB = "[w]\nrw=write\nbs=4k\nsize=64k\n"


@pytest.mark.root
@pytest.mark.loopdev
def test_write_job_naming_a_device_is_refused_and_the_device_unchanged(tmp_path):
    for dev, image in _loop_device(tmp_path):
        before = digest(dev)
        for text in (f"{WRITE_JOB}filename={dev}\n", f"[{dev}]\nrw=write\nbs=4k\nsize=64k\n"):
            r = fio_compare(job_file(tmp_path, text), "--no-fio", cwd=tmp_path)
            err = one_line_error(r)
            assert dev in err and "block device" in err and "never writes to a device" in err
            r = fio_compare(job_file(tmp_path, text), cwd=tmp_path)   # fio is never started either
            one_line_error(r)
        assert digest(dev) == before


@pytest.mark.parametrize("size", [4096, 1 << 20])   # shorter than the job's 64k, and longer
def test_existing_user_file_is_refused_and_unchanged(tmp_path, size):
    d = tmp_path / "d"
    sha, mtime = user_file(d / "w.0.0", size)
    r = fio_compare(job_file(tmp_path, WRITE_JOB), "--directory", d)
    err = one_line_error(r)
    assert "iodl did not create" in err and str(d / "w.0.0") in err
    assert digest(d / "w.0.0") == sha and (d / "w.0.0").stat().st_mtime_ns == mtime
    assert sorted(os.listdir(d)) == ["w.0.0"]


@pytest.mark.parametrize("target_is_iodls", [False, True])
def test_symlink_is_refused_whatever_it_points_to(tmp_path, target_is_iodls):
    d, other = tmp_path / "d", tmp_path / "other"
    other.mkdir()
    if target_is_iodls:
        # an iodl file laid out elsewhere: still never written through a link
        r = fio_compare(job_file(tmp_path, WRITE_JOB, "lay.fio"), "--no-fio", "--directory", other)
        assert r.returncode == 0, r.stderr
        target = other / "w.0.0"
        assert layout.is_marked(target)
    else:
        user_file(other / "w.0.0", 1 << 20)
        target = other / "w.0.0"
    sha, mtime = digest(target), target.stat().st_mtime_ns
    d.mkdir()
    os.symlink(target, d / "w.0.0")
    r = fio_compare(job_file(tmp_path, WRITE_JOB), "--directory", d)
    err = one_line_error(r)
    assert "symlink" in err and "never writes through a symlink" in err
    assert digest(target) == sha and target.stat().st_mtime_ns == mtime


def test_symlinked_subdirectory_is_refused(tmp_path):
    d, other = tmp_path / "d", tmp_path / "other"
    d.mkdir()
    other.mkdir()
    os.symlink(other, d / "sub")
    r = fio_compare(job_file(tmp_path, WRITE_JOB + "filename_format=sub/$jobname\n"), "--directory", d)
    assert "symlink" in one_line_error(r)
    assert os.listdir(other) == []


def test_own_files_are_kept_marked_and_rewritten_in_place(tmp_path):
    """A second run writes the same marked files again (nothing else appears); a file whose mark was
    removed is then a user's file and refused."""
    d = tmp_path / "d"
    d.mkdir()
    job = job_file(tmp_path, WRITE_JOB + "nrfiles=2\nend_fsync=1\n")
    for _ in range(2):
        r = fio_compare(job, "--no-fio", "--directory", d)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(d)) == ["w.0.0", "w.0.1"]
        assert all(layout.is_marked(d / n) for n in os.listdir(d))
    os.removexattr(d / "w.0.1", layout.MARK)
    sha = digest(d / "w.0.1")
    assert "iodl did not create" in one_line_error(fio_compare(job, "--no-fio", "--directory", d))
    assert digest(d / "w.0.1") == sha


# ---------------------------------------------------------------------------------------------
# Against fio

def run_compare(job, directory, *args, preexec=None):
    out = job.parent / (job.stem + ".json")
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--directory", str(directory),
                        "--out", str(out), *args], capture_output=True, text=True, preexec_fn=preexec, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def only_iodls_files(directory, names):
    got = sorted(n for n in os.listdir(directory) if n != "lost+found")
    assert got == sorted(names), got
    assert all(layout.is_marked(os.path.join(directory, n)) for n in got)


@pytest.mark.fio
@pytest.mark.parametrize("opts,files", [
    ("fsync=4", ["w.0.0"]),
    ("fsync=3\nend_fsync=1", ["w.0.0"]),
    ("fdatasync=5\nnrfiles=2", ["w.0.0", "w.0.1"]),
    ("fsync=2\nloops=3\nsize=384k", ["w.0.0"]),
    ("fsync=4\ncreate_on_open=1", ["w.0.0"]),
    ("fsync=4\noverwrite=1\nnumjobs=2", ["w.0.0", "w.1.0"]),
    pytest.param("fsync=4\nioengine=libaio\niodepth=8\ndirect=1", ["w.0.0"], marks=[pytest.mark.aio, pytest.mark.odirect]),
])
def test_sync_counts_and_bytes_equal_fios(tmp_path, opts, files):
    d = tmp_path / "d"
    d.mkdir()
    job = job_file(tmp_path, f"[w]\nrw=write\nbs=64k\nsize=2m\n{opts}\n")
    (e,) = run_compare(job, d)["jobs"]
    f, i = e["fio"], e["iodl"]
    assert f["ddir"] == i["ddir"] == "write"
    assert f["bytes"] == i["bytes"] > 0 and f["ios"] == i["ios"]
    assert f["syncs"]["count"] == i["syncs"]["count"] > 0
    assert i["syncs"]["p50"] is not None and f["syncs"]["p50"] is not None
    only_iodls_files(d, files)


THROTTLED = {
    "libaio": ("[ck]\nrw=write\nbs=1M\nsize=64M\ndirect=1\nioengine=libaio\niodepth=8\nend_fsync=1\n",
               ["ck.0.0"], 0, 1),
    # buffered: the throttle bites in each fsync's writeback (end_fsync: the last 4 MiB too)
    "psync-fsync4": ("[ck]\nrw=write\nioengine=psync\nbs=1M\nsize=64M\nfsync=4\nend_fsync=1\n", ["ck.0.0"], 15, 1),
    "numjobs2": ("[ck]\nrw=write\nbs=1M\nsize=32M\ndirect=1\nioengine=libaio\niodepth=4\nnumjobs=2\nend_fsync=1\n",
                 ["ck.0.0", "ck.1.0"], 0, 2),
    # buffered writes, then the close's fsync of each file carries all of it (in fio's runtime)
    "fsync-on-close": ("[ck]\nrw=write\nbs=256k\nsize=64M\nnrfiles=2\nfsync_on_close=1\n", ["ck.0.0", "ck.0.1"], 0, 2),
}


@pytest.mark.fio
@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.aio
@pytest.mark.odirect
@pytest.mark.flaky(reruns=1)   # a shared disk under the loop image; a real gap fails both attempts
@pytest.mark.parametrize("name", sorted(THROTTLED))
def test_throttled_write_jobs_agree_with_fio(tmp_path, name):
    from iodl.groundtruth import BlkioGroup, LoopMount

    text, files, syncs, end_syncs = THROTTLED[name]
    with LoopMount(1 << 30) as m, BlkioGroup("fio-write") as group:
        group.throttle_write(m.majmin, LIMIT)
        device0, ours0 = m.bytes_written(), group.write_bytes(m.majmin)
        doc = run_compare(job_file(tmp_path, text), m.path, "--repeat", "3", preexec=group.enter)
        (e,) = doc["jobs"]
        unthrottled = (m.bytes_written() - device0) - (group.write_bytes(m.majmin) - ours0)
        only_iodls_files(m.path, files)
        assert not any(".iodl-tmp." in n for n in os.listdir(m.path))
    # bytes and sync counts: every round, both sides
    for rd in e["rounds"]:
        f, i = rd["fio"], rd["iodl"]
        assert f["bytes"] == i["bytes"] == 64 << 20
        assert f["syncs"]["count"] == i["syncs"]["count"] == syncs
        assert i["syncs"]["end_count"] == end_syncs
    f, i = e["fio"], e["iodl"]   # medians over the rounds
    print(f"{name} on {LIMIT / 1e6:.0f} MB/s: fio {f['bandwidth_MBps']:.2f}, iodl {i['bandwidth_MBps']:.2f} MB/s "
          f"(ratio {e['ratio']['bandwidth']:.3f}); rounds fio/iodl "
          + ", ".join(f"{r['fio']['bandwidth_MBps']:.2f}/{r['iodl']['bandwidth_MBps']:.2f}" for r in e["rounds"]))
    agree = e["ratio"]["bandwidth"] == pytest.approx(1, abs=0.05)
    if not agree and unthrottled > 0.05 * 6 * (64 << 20):
        # buffered pages written back by the flusher (another process's sync(), say) pass the cgroup v1
        # throttle by: then the throttle does not say what either side should measure
        raise NotJudged(f"{unthrottled / 1e6:.0f} MB reached the device outside the throttled group")
    # Why rounds can still differ: with the limit at 80 MB/s (7.63 MiB a slice) the 1 MiB jobs' runs
    # fell in two modes, 73.4 MB/s (slices started afresh, 7 writes each) or ~81 (the fraction carried
    # over), fio and iodl alike (numjobs2, 41 rounds by hand: 22 and 30 in the lower mode; a CI run's
    # rounds fio 81.3/81.5/77.9 against iodl 71.8/72.7/72.7, each steady in its own mode). LIMIT is a
    # whole number of writes a slice now; a disk under the loop image that another test keeps busy
    # can still slow one round: medians of rounds that far apart cannot be held to 5 %: not judged.
    own = [rd["fio"]["bandwidth_MBps"] for rd in e["rounds"]]
    ours = [rd["iodl"]["bandwidth_MBps"] for rd in e["rounds"]]
    fio_steady = max(own) - min(own) <= 0.05 * f["bandwidth_MBps"]
    iodl_steady = max(ours) - min(ours) <= 0.05 * i["bandwidth_MBps"]
    if not agree and not fio_steady:
        raise NotJudged(f"the throttle not steady: fio's own rounds wrote {min(own):.1f}-{max(own):.1f} MB/s")
    if not agree and not iodl_steady:
        raise NotJudged(f"iodl's own rounds wrote {min(ours):.1f}-{max(ours):.1f} MB/s, fio's {min(own):.1f}-{max(own):.1f}")
    assert agree, e["rounds"]
    # never above what the throttle lets through (a write counted before it reached the device would be):
    # the rate, after a first slice's budget (100 ms of it) that an idle throttle passes at once
    nbytes = 64 << 20
    assert i["bandwidth_MBps"] <= 1.02 * nbytes / ((nbytes - 0.1 * LIMIT) / LIMIT) / 1e6, e["rounds"]
    if f["bandwidth_MBps"] >= 0.95 * LIMIT / 1e6:
        if not (iodl_steady and fio_steady):
            # rounds that far apart cannot hold a median to 5 % of the set rate either (a CI run: iodl
            # 71.6/78.1/73.0, fio 70.9/81.6/81.2)
            raise NotJudged(f"rounds not steady: iodl {min(ours):.1f}-{max(ours):.1f}, fio {min(own):.1f}-{max(own):.1f} MB/s")
        # fio got the throttle's rate (the upper bound, its first slice allowed, is held above): so does iodl
        assert i["bandwidth_MBps"] >= 0.95 * LIMIT / 1e6, e["rounds"]
    else:
        # the throttle let less through than its limit (fio, the reference, 71-78 MB/s on 80 MB/s in CI
        # runs of this VM before the whole-write budget; a disk that writes ~450 MB/s direct unthrottled):
        # what the device took is fio's figure, which iodl is held to above, in the same rounds
        print(f"the throttle delivered {f['bandwidth_MBps']:.1f} MB/s (fio) of its {LIMIT / 1e6:.0f}: iodl held to fio's")


@pytest.mark.fio
def test_time_based_writes_wrap_around_the_file_as_fio(tmp_path):
    """time_based: both tools write the 1 MiB file over and over (fio wraps its sequential offset
    inline), never past its end, and sync after every 16th write on both sides."""
    d = tmp_path / "d"
    d.mkdir()
    job = job_file(tmp_path, "[w]\nrw=write\nbs=64k\nsize=1m\ntime_based\nruntime=1\nfsync=16\nend_fsync=1\n")
    (e,) = run_compare(job, d)["jobs"]
    for s in (e["fio"], e["iodl"]):
        assert s["bytes"] > 4 << 20 and s["bytes"] % (64 << 10) == 0    # several passes over the file
        writes = s["ios"]
        assert writes // 16 - 1 <= s["syncs"]["count"] <= writes // 16, (writes, s["syncs"])
    assert e["iodl"]["syncs"]["end_count"] == 1
    only_iodls_files(d, ["w.0.0"])
    assert os.path.getsize(d / "w.0.0") == 1 << 20
