"""fio-compare on random and mixed writes: randwrite, rw/readwrite, randrw, rwmixread, percentage_random,
random_distribution, norandommap, holes; fio 3.33 is the ground truth, plus the loop device's own counters.

- The plan draws what fio draws: the direction of each I/O (rwmixread%), every block once per pass under
  the random map, the hot set of zipf/pareto/normal (held against fio's own write_iolog), holes that wrap.
- Both sides report reads and writes apart, as fio's JSON does, and their split is the job's.
- Writes reach the device: /sys/block/loopN/stat sectors written cover the bytes iodl says it wrote.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from iodl.fio.jobfile import JobFileError, parse
from iodl.fio.run import pass_plan, plan_job
from iodl.plan import OP_READ, OP_WRITE
from tests.fio.test_fio_write import job_file, only_iodls_files, run_compare

HOT_SHARE_TOL = 0.02   # hot-set share, iodl's plan against fio's log (16384 I/Os each: sampling noise ~0.005)


def plan_rows(tmp_path, text, jobnum=0, seed=None):
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    (job,) = parse(str(job_file(tmp_path, f"[global]\ndirectory={d}\n[j]\n{text}")))
    plan = plan_job(job)
    return plan, pass_plan(plan, plan.files[jobnum], np.random.default_rng(seed or [plan.seed, jobnum]))


def fio_iolog(tmp_path, text) -> list[tuple[str, int, int]]:
    """(ddir, offset, length) of every I/O fio 3.33 issues for the job (write_iolog), with the null engine."""
    log = tmp_path / "fio.iolog"
    if log.exists():
        log.unlink()   # fio appends to an existing log
    job = job_file(tmp_path, f"[j]\nioengine=null\nfilename=nofile\nwrite_iolog={log}\n{text}", "fio.fio")
    subprocess.run(["fio", "--output=/dev/null", str(job)], check=True, capture_output=True, timeout=60)
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[2] in ("read", "write"):
            out.append((parts[2], int(parts[3]), int(parts[4])))
    return out


def hot_share(offsets, bs=4096, top=0.10) -> float:
    """Of all I/Os, the share that went to the most-used `top` fraction of the blocks used."""
    counts = np.sort(np.bincount(np.asarray(offsets, dtype=np.int64) // bs))[::-1]
    counts = counts[counts > 0]
    return counts[: max(1, len(counts) // int(1 / top))].sum() / counts.sum()


# ---------------------------------------------------------------------------------------------
# What the plan does, against fio's own log

@pytest.mark.fio
def test_randrw_mix_and_random_map_match_fios(tmp_path):
    """rwmixread=70 over 16 MiB of 4 KiB blocks: 0.70 +- 0.02 of the I/Os are reads on both, each block is
    used once (fio's random map, shared by both directions), and fio's log says the same."""
    text = "rw=randrw\nrwmixread=70\nbs=4k\nsize=16m\n"
    plan, rows = plan_rows(tmp_path, text)
    fio = fio_iolog(tmp_path, text)
    for name, ops, offsets in (("iodl", rows["op"] == OP_READ, rows["offset"]),
                               ("fio", np.array([d == "read" for d, _, _ in fio]), [o for _, o, _ in fio])):
        assert len(ops) == 4096, name
        assert ops.mean() == pytest.approx(0.70, abs=0.02), name
        assert len(np.unique(offsets)) == 4096, name   # each block once


@pytest.mark.fio
def test_norandommap_draws_with_replacement_as_fio(tmp_path):
    """norandommap: blocks are drawn uniformly with replacement, so about 1 - 1/e of them are used once
    the pass has moved the file's size; fio's log gives the same count (within 2% of the blocks)."""
    text = "rw=randwrite\nnorandommap\nbs=4k\nsize=16m\n"
    _, rows = plan_rows(tmp_path, text)
    fio = fio_iolog(tmp_path, text)
    ours, theirs = len(np.unique(rows["offset"])), len({o for _, o, _ in fio})
    assert (rows["op"] == OP_WRITE).all() and len(rows) == len(fio) == 4096
    assert ours == pytest.approx(4096 * (1 - np.exp(-1)), rel=0.02)
    assert ours == pytest.approx(theirs, abs=0.02 * 4096)



@pytest.mark.fio
@pytest.mark.parametrize("extra", ["", "norandommap\n", "rw=randrw\n"])
def test_lfsr_uses_each_block_once_as_fio(tmp_path, extra):
    """random_generator=lfsr: fio's shift register runs once through the file's blocks and keeps no map,
    so each block is used once per pass with norandommap written too (where tausworthe, drawing with
    replacement, uses ~63 % of them): iodl's plan and fio's log both use all 4096 blocks of 16 MiB once."""
    text = f"rw=randwrite\nrandom_generator=lfsr\nbs=4k\nsize=16m\n{extra}"
    plan, rows = plan_rows(tmp_path, text)
    fio = fio_iolog(tmp_path, text)
    assert plan.randommap
    for name, offsets in (("iodl", rows["offset"]), ("fio", [o for _, o, _ in fio])):
        assert len(offsets) == 4096 and len(np.unique(offsets)) == 4096, name


@pytest.mark.parametrize("text, refused", [
    ("rw=randread\nrandom_generator=lfsr\nbsrange=4k-16k\nsize=1m\n", "block sizes that vary"),
    ("rw=randread\nrandom_generator=lfsr\nbs=8k\nba=4k\nsize=1m\n", "blockalign unlike bs"),
    ("rw=randread\nrandom_generator=lsfr\nsize=1m\n", "random_generator=lsfr' (fio refuses it)"),
])
def test_lfsr_iodl_cannot_order_is_refused_naming_it(tmp_path, text, refused):
    with pytest.raises(JobFileError, match="random_generator") as err:
        plan_rows(tmp_path, text)
    assert refused in str(err.value)


@pytest.mark.parametrize("gen", ["tausworthe64", "lfsr"])
def test_generators_iodl_takes_leave_other_plans_as_they_were(tmp_path, gen):
    """tausworthe64 plans as the default does; lfsr in a sequential job or beside a distribution is unused
    (fio asks the generator only for uniform random offsets)."""
    assert plan_rows(tmp_path, f"rw=randread\nrandom_generator={gen}\nnorandommap\nsize=1m\n")[0].randommap == (gen == "lfsr")
    for text in ("rw=read\nsize=1m\n", "rw=randread\nrandom_distribution=zipf\nsize=1m\n"):
        want = plan_rows(tmp_path, text)[1]
        got = plan_rows(tmp_path, f"{text}random_generator={gen}\n")[1]
        assert (got == want).all()

@pytest.mark.fio
@pytest.mark.parametrize("dist", ["zipf:1.2", "pareto:0.9", "normal:10", "zipf", "pareto"])
def test_distribution_hot_set_matches_fios(tmp_path, dist):
    """random_distribution: the share of I/Os that hit the hottest 10% of the blocks used, and how many
    blocks are used, equal fio's (write_iolog over the same 64 MiB file) within HOT_SHARE_TOL and 5%."""
    text = f"rw=randread\nrandom_distribution={dist}\nbs=4k\nsize=64m\n"
    _, rows = plan_rows(tmp_path, text)
    fio = [o for _, o, _ in fio_iolog(tmp_path, text)]
    assert len(rows) == len(fio) == 16384
    assert hot_share(rows["offset"]) == pytest.approx(hot_share(fio), abs=HOT_SHARE_TOL)
    assert len(np.unique(rows["offset"])) == pytest.approx(len(set(fio)), rel=0.05)
    assert (rows["offset"] + rows["length"] <= 64 << 20).all()


@pytest.mark.fio
@pytest.mark.parametrize("text", [
    "rw=write:4k\nbs=4k\nsize=64k\n",          # a hole after each write, wrapping to the start
    "rw=read:12k\nbs=4k\nsize=64k\n",
    "rw=rw\nrwmixread=100\nbs=4k\nsize=64k\n",
    "rw=rw\nrwmixwrite=100\nbs=8k\nsize=64k\n",
])
def test_sequential_offsets_equal_fios(tmp_path, text):
    """Sequential I/O (holes included) is deterministic: the offsets equal fio's, I/O for I/O."""
    _, rows = plan_rows(tmp_path, text)
    fio = fio_iolog(tmp_path, text)
    assert [(("read", "write")[int(op)], int(o), int(n)) for op, o, n in
            zip(rows["op"], rows["offset"], rows["length"])] == fio


def test_rw_mixed_sequential_keeps_a_position_per_direction(tmp_path):
    """rw=rw: reads and writes each go through the file from its start (fio's last_pos[ddir])."""
    _, rows = plan_rows(tmp_path, "rw=rw\nrwmixread=60\nbs=4k\nsize=4m\n")
    for op in (OP_READ, OP_WRITE):
        mine = rows["offset"][rows["op"] == op]
        assert (mine == np.arange(len(mine)) * 4096).all()
    assert rows["length"].sum() == 4 << 20


def test_percentage_random_and_seq_len(tmp_path):
    """percentage_random=30: ~30% of the I/Os jump, the rest follow the previous I/O of their direction;
    randread:4 jumps every 4th I/O (fio: the first one jumps, ddir_seq_nr starts at 1)."""
    _, rows = plan_rows(tmp_path, "rw=randread\npercentage_random=30\nbs=4k\nsize=16m\n")
    off = rows["offset"].astype(np.int64)
    follows = np.diff(off) == 4096
    assert 1 - follows.mean() == pytest.approx(0.30, abs=0.03)
    _, rows = plan_rows(tmp_path, "rw=randread:4\nbs=4k\nsize=1m\n")
    off = rows["offset"].astype(np.int64)
    assert (np.diff(off)[np.arange(len(off) - 1) % 4 != 3] == 4096).all()


def test_randrepeat_0_draws_a_new_sequence(tmp_path):
    a = plan_rows(tmp_path, "rw=randwrite\nbs=4k\nsize=1m\nrandrepeat=0\n")[0].seed
    b = plan_rows(tmp_path, "rw=randwrite\nbs=4k\nsize=1m\nrandrepeat=0\n")[0].seed
    c = plan_rows(tmp_path, "rw=randwrite\nbs=4k\nsize=1m\n")[0].seed
    assert a != b and c == plan_rows(tmp_path, "rw=randwrite\nbs=4k\nsize=1m\n")[0].seed


# ---------------------------------------------------------------------------------------------
# Both tools, side by side, per direction

@pytest.mark.fio
@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.aio
@pytest.mark.odirect
def test_randrw_reports_each_direction_and_writes_reach_the_device(tmp_path):
    """randrw 70/30, O_DIRECT, on a loop-mounted ext4: each side's document has a read and a write side
    (fio's from its JSON's read/write objects), both with 0.70 +- 0.02 of the I/Os reads and 16 MiB moved
    in all; what the device was asked to write during iodl's side alone (/sys/block/loopN/stat) is at
    least the bytes iodl says it wrote, and not much more (ext4's journal)."""
    from iodl.comm import SerialComm
    from iodl.fio import layout
    from iodl.fio.run import run_clones
    from iodl.groundtruth import LoopMount

    text = "[m]\nrw=randrw\nrwmixread=70\nbs=4k\nsize=16m\ndirect=1\nioengine=libaio\niodepth=8\n"
    with LoopMount(256 << 20) as m:
        doc = run_compare(job_file(tmp_path, text), m.path)
        (e,) = doc["jobs"]
        for name in ("fio", "iodl"):
            s = e[name]
            assert s["ddir"] == "mixed", name
            r, w = s["read"], s["write"]
            assert r["ios"] + w["ios"] == s["ios"] == 4096 and r["bytes"] + w["bytes"] == 16 << 20, name
            assert r["ios"] / s["ios"] == pytest.approx(0.70, abs=0.02), name
            assert r["iops"] > 0 and w["iops"] > 0 and r["latency_us"]["p50"] and w["latency_us"]["p50"], name
        assert e["ratio"]["read"]["iops"] and e["ratio"]["write"]["iops"]
        only_iodls_files(m.path, ["m.0.0"])
        # iodl's side alone, in this process: the device's own count of what it was asked to write
        (job,) = parse(str(job_file(tmp_path, text.replace("[m]", f"[m]\ndirectory={m.path}"))))
        plan = plan_job(job)
        layout.reset_for_write(plan.files[0][0], plan.reset)
        before = m.bytes_written()
        (res,) = run_clones({0: plan}, SerialComm())
        written = m.bytes_written() - before
    assert res.write_bytes + res.bytes == 16 << 20 and res.write_ios == res.write_bytes // 4096
    assert res.write_bytes <= written <= res.write_bytes * 1.05 + (1 << 20), (written, res.write_bytes)


def test_a_random_write_section_no_longer_hides_the_read_sections(tmp_path):
    """One randwrite section used to refuse the whole file: now every section runs (null engine)."""
    text = ("[global]\nioengine=null\nsize=1m\nbs=4k\n[r]\nrw=randread\n[w]\nrw=randwrite\n"
            "[m]\nrw=randrw\nrwmixwrite=25\n")
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job_file(tmp_path, text)), "--no-fio",
                        "--directory", str(tmp_path), "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    jobs = json.loads(out.read_text())["jobs"]
    assert [j["iodl"]["ddir"] for j in jobs] == ["read", "write", "mixed"]
    m = jobs[2]["iodl"]
    assert m["read"]["ios"] / m["ios"] == pytest.approx(0.75, abs=0.05) and m["ios"] == 256
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".0.0")]   # null: nothing laid out


@pytest.mark.fio
def test_io_size_and_number_ios_count_both_directions_as_fio(tmp_path):
    """A mixed job's io_size and number_ios bound its reads and writes together, as fio's (null engine):
    io_size below size ends the pass part way (fio's io_bytes_exceeded), for reads alone too."""
    text = ("[global]\nioengine=null\nsize=1m\nbs=4k\n[m]\nrw=randrw\nnumber_ios=100\n[n]\nrw=rw\nio_size=512k\n"
            "[r]\nrw=read\nio_size=256k\n")
    job = job_file(tmp_path, text)
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--directory", str(tmp_path),
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for e in json.loads(out.read_text())["jobs"]:
        assert e["iodl"]["ios"] == e["fio"]["ios"] and e["iodl"]["bytes"] == e["fio"]["bytes"], e["name"]
    assert [e["iodl"]["ios"] for e in json.loads(out.read_text())["jobs"]] == [100, 128, 64]


@pytest.mark.fio
def test_mixed_fsync_placement_follows_fios_rule(tmp_path):
    """fsync=8 in randrw: fio 3.33 syncs before any I/O while its write count is a multiple of 8 and the last
    thing done was not a sync (W S R S R S W ...). Given fio's own read/write sequence (write_iolog, psync),
    iodl's plan puts the syncs exactly where fio's log has them."""
    from iodl.fio.run import _SyncState, _write_rows
    from iodl.plan import OP_FSYNC, new_plan

    d = tmp_path / "f"
    d.mkdir()
    log = tmp_path / "sync.iolog"
    job = job_file(tmp_path, f"[m]\nrw=randrw\nrwmixread=60\nbs=4k\nsize=1m\nfsync=8\nwrite_iolog={log}\n", "s.fio")
    subprocess.run(["fio", "--output=/dev/null", f"--directory={d}", str(job)], check=True, capture_output=True,
                   timeout=60)
    ops = [ln.split()[2] for ln in log.read_text().splitlines() if len(ln.split()) >= 3
           and ln.split()[2] in ("read", "write", "sync")]
    plan, _ = plan_rows(tmp_path, "rw=randrw\nbs=4k\nsize=1m\nfsync=8\n")
    io = [o for o in ops if o != "sync"]
    rows = new_plan(len(io))
    rows["op"] = [OP_WRITE if o == "write" else OP_READ for o in io]
    got = _write_rows(plan, rows, _SyncState())["op"]
    letter = {OP_READ: "R", OP_WRITE: "W", OP_FSYNC: "S"}
    assert "".join(letter[int(o)] for o in got) == "".join(o[0].upper() for o in ops)
    assert ops.count("sync") > ops.count("write") // 8   # the reads after each 8th write get syncs too
