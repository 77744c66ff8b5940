"""fio's log files written by iodl (write_bw_log, write_lat_log, write_iops_log, log_avg_msec): fio 3.33's
format, read back with the same parser for both tools' logs; each side's logs add up to its own report."""
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.fio.test_fio_write import job_file

JOB = ("[j]\nrw=randrw\nrwmixread=70\nbs=4k\nsize=8m\nioengine=libaio\niodepth=4\ntime_based\nruntime=1\n"
       "write_bw_log=j\nwrite_lat_log=j\nwrite_iops_log=j\n")


def read_log(path, offset=False) -> np.ndarray:
    """fio's format: `time, value, ddir, bs[, offset], prio` per line (what fio_generate_plots and fiologparser
    read); every line must have the columns fio writes."""
    rows = [[int(v) for v in line.split(",")] for line in open(path) if line.strip()]
    return np.array(rows, dtype=np.int64).reshape(-1, 6 if offset else 5)


def compare(tmp_path, extra=""):
    d = tmp_path / "d"
    d.mkdir()
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job_file(tmp_path, JOB + extra)),
                        "--directory", str(d), "--out", str(out)], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    (e,) = json.loads(out.read_text())["jobs"]
    return e


def _windows(rows):
    """(window end, value, window length in ms) of one log's rows of one direction. fio keeps a window per log
    and per direction and stamps each when it closes, so reads may close at 140 ms and writes at 141 ms in the
    same log: a length taken across directions would make that write window 1 ms long."""
    ends = rows[:, 0]
    return zip(ends, rows[:, 1], np.diff(ends, prepend=0))


@pytest.mark.fio
@pytest.mark.aio
def test_windowed_logs_add_up_to_each_sides_report(tmp_path):
    """log_avg_msec=100: per window and direction, KiB/s and IOPS; over the windows they give each side's own
    bandwidth and IOPS of that direction, and their mean clat is of the side's own clat range."""
    e = compare(tmp_path, "log_avg_msec=100\n")
    for side, prefix in (("fio", ""), ("iodl", "iodl-")):
        bw, iops = read_log(tmp_path / f"{prefix}j_bw.1.log"), read_log(tmp_path / f"{prefix}j_iops.1.log")
        lat = read_log(tmp_path / f"{prefix}j_clat.1.log")
        assert (bw[:, 3] == 0).all() and (bw[:, 4] == 0).all()     # windowed: bs 0 (and priority 0)
        for d, ddir in ((0, "read"), (1, "write")):
            s = e[side][ddir]
            b, i = bw[bw[:, 2] == d], iops[iops[:, 2] == d]
            got_bytes = sum(v * 1024 * w / 1000 for t, v, w in _windows(b))
            got_ios = sum(v * w / 1000 for t, v, w in _windows(i))
            # over the time the windows cover, the side's own bandwidth and IOPS (within 10%); iodl's windows
            # cover the whole run, so they also hold its bytes and I/Os (5%); fio 3.33 logs no last partial window
            covered = bw[:, 0].max() / 1000
            assert got_bytes / covered == pytest.approx(s["bandwidth_MBps"] * 1e6, rel=0.10), (side, ddir)
            assert got_ios / covered == pytest.approx(s["iops"], rel=0.10), (side, ddir)
            if side == "iodl":
                assert got_bytes == pytest.approx(s["bytes"], rel=0.05) and got_ios == pytest.approx(s["ios"], rel=0.05)
            # the windows' mean clat (ns) lies between the side's own clat p50 / 2 and its p99.9
            ld = lat[lat[:, 2] == d]
            assert s["latency_us"]["p50"] * 1000 / 2 < np.median(ld[:, 1]) < s["latency_us"]["p999"] * 1000, \
                (side, ddir)


@pytest.mark.fio
@pytest.mark.aio
def test_per_io_logs_hold_every_io(tmp_path):
    """No log_avg_msec: an entry per I/O. iodl's iops log has exactly its I/Os of each direction, its clat
    log's median is its own clat p50 (within the histogram's bucket, 1/64), its bw entries are bytes x 10^6
    / clat ns, log_offset=1 puts each I/O's offset; fio's logs hold its own I/Os (within 1%: fio's last
    I/Os in flight at the end)."""
    e = compare(tmp_path, "log_offset=1\n")
    iops, clat, bw = (read_log(tmp_path / f"iodl-j_{k}.1.log", offset=True) for k in ("iops", "clat", "bw"))
    for d, ddir in ((0, "read"), (1, "write")):
        s = e["iodl"][ddir]
        assert (iops[:, 2] == d).sum() == s["ios"]
        assert np.median(clat[clat[:, 2] == d, 1]) == pytest.approx(s["latency_us"]["p50"] * 1000, rel=1 / 32)
        fio_iops = read_log(tmp_path / "j_iops.1.log", offset=True)
        assert (fio_iops[:, 2] == d).sum() == pytest.approx(e["fio"][ddir]["ios"], rel=0.01)
    assert (bw[:, 1] == 4096 * 10**6 // clat[:, 1]).all() and (bw[:, 3] == 4096).all()
    assert (iops[:, 4] % 4096 == 0).all() and len(np.unique(iops[:, 4])) > 1


def test_a_users_file_under_a_logs_name_is_refused_before_any_io_and_iodls_own_log_is_replaced(tmp_path):
    """iodl's log name taken by someone else's file: exit 2 before any I/O, the file untouched, no
    temporary left; iodl's own (marked) log from an earlier round is replaced."""
    d = tmp_path / "d"
    d.mkdir()
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\ndirectory={d}\nrw=read\nsize=1m\nwrite_bw_log=j\n")
    theirs = tmp_path / "iodl-j_bw.1.log"
    theirs.write_text("someone's notes\n")

    def run():
        return subprocess.run([sys.executable, "-m", "iodl", "fio-compare", str(job), "--no-fio"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    r = run()
    assert r.returncode == 2 and "not a log iodl wrote" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert theirs.read_text() == "someone's notes\n"
    assert list(d.iterdir()) == [] and not [n for n in tmp_path.iterdir() if n.name.endswith(".tmp")]
    theirs.unlink()
    assert run().returncode == 0
    first = theirs.stat().st_ino
    r = run()
    assert r.returncode == 0, r.stderr
    assert theirs.stat().st_ino != first and theirs.read_text().splitlines()   # a new file, put in place
