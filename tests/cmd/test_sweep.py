"""`iodl sweep`: bad input is one error line before anything runs; a failing point stops the sweep
and keeps what was done; the verdict and the scaling columns follow their definitions."""
import os
import stat

import pytest

from iodl import sweep
from tests.helpers import iodl, load_json, mpiexec

NULL_READ = ("--", "--engine", "null", "--steps", "4", "--compute-time", "0.02")


def _one_error_line(proc, *needles):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("iodl: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("ranks, needle", [
    ("1,x", "not an integer"),
    ("0,2", "positive"),
    ("-2", "positive"),
    ("4,2", "ascending"),
    ("2,2,4", "ascending"),
    ("", "required"),
])
def test_bad_ranks(ranks, needle):
    _one_error_line(iodl("sweep", "--ranks", ranks, *NULL_READ), "--ranks", needle)


def test_ranks_missing():
    _one_error_line(iodl("sweep", *NULL_READ), "--ranks is required")


@pytest.mark.parametrize("threshold", ["0", "1.5", "-0.1", "abc", "nan"])
def test_bad_threshold(threshold):
    _one_error_line(iodl("sweep", "--ranks", "1,2", "--threshold", threshold, *NULL_READ), "--threshold")


@pytest.mark.parametrize("timeout", ["0", "-3", "soon"])
def test_bad_timeout(timeout):
    _one_error_line(iodl("sweep", "--ranks", "1", "--timeout", timeout, *NULL_READ), "--timeout")


@pytest.mark.parametrize("pattern", ["storage-only", "validate"])
def test_patterns_without_au_are_refused(pattern):
    _one_error_line(iodl("sweep", "--ranks", "1,2", "--", "--pattern", pattern), pattern, "step patterns")


def test_read_options_are_checked_before_any_launch():
    _one_error_line(iodl("sweep", "--ranks", "1,2", "--", "--bogus"), "read options after --", "--bogus")
    _one_error_line(iodl("sweep", "--ranks", "1", "--", "--workload", "no-such-workload"), "no-such-workload")
    _one_error_line(iodl("sweep", "--ranks", "1", "--", "--engine", "null", "--out", "x.json"), "--out after --")
    _one_error_line(iodl("sweep", "--ranks", "1", "--", "--engine", "null", "--csv", "x.csv"), "--csv after --")


def test_under_mpirun_it_says_to_run_without():
    _one_error_line(iodl("sweep", "--ranks", "1,2", *NULL_READ, env={"PMI_RANK": "0", "PMI_SIZE": "1"}),
                    "without mpirun")


def test_missing_mpiexec():
    _one_error_line(iodl("sweep", "--ranks", "1,2", "--mpiexec", "/nonexistent", *NULL_READ),
                    "--mpiexec /nonexistent", "not an executable")


def test_keep_refuses_result_files_it_did_not_write(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "ranks-2.json").write_text("mine\n")
    _one_error_line(iodl("sweep", "--ranks", "1,2", "--keep", str(keep), *NULL_READ), "ranks-2.json", "overwrite")
    assert (keep / "ranks-2.json").read_text() == "mine\n"
    assert sorted(os.listdir(keep)) == ["ranks-2.json"]   # refused before running anything


def _launcher_failing_at(tmp_path, bad_ranks: int) -> str:
    """An mpiexec that runs the real one, except at `bad_ranks` ranks, where it fails as a job
    whose rank died would: a line of its own on stderr and a non-zero exit."""
    real = mpiexec()
    assert real, "mpiexec not found next to the test interpreter (pip install mpich)"
    path = tmp_path / "mpiexec-wrapper"
    path.write_text("#!/bin/sh\n"
                    f'if [ "$2" = "{bad_ranks}" ]; then echo "iodl: error: disk on fire" >&2; '
                    'echo "launcher noise after it" >&2; exit 3; fi\n'
                    f'exec "{real}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_failing_point_stops_the_sweep_and_keeps_the_points_done(tmp_path):
    out, keep = tmp_path / "sweep.json", tmp_path / "keep"
    proc = iodl("sweep", "--ranks", "1,2,3", "--mpiexec", _launcher_failing_at(tmp_path, 2), "--out", str(out),
                "--keep", str(keep), *NULL_READ, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert errors == [f"iodl: error: the 2-rank point failed (mpiexec exit 3): iodl: error: disk on fire "
                      f"(1 point(s) done, written to {out})"], proc.stderr
    doc = load_json(out)
    assert [p["ranks"] for p in doc["points"]] == [1]          # the point before is kept, the 3-rank one never ran
    assert doc["points"][0]["exit_code"] == 0
    assert doc["points"][0]["result"] == str(keep / "ranks-1.json")
    assert load_json(keep / "ranks-1.json")["ranks"] == 1
    assert not (keep / "ranks-3.json").exists()


def test_a_point_that_cannot_start_names_the_point_and_why(tmp_path):
    proc = iodl("sweep", "--ranks", "1,2", "--", "--engine", "psync", "--root", str(tmp_path / "absent"),
                timeout=120)
    line = _one_error_line(proc, "the 1-rank point failed", "absent")
    assert "exit 2" in line   # `iodl read`'s usage-error status, passed on by mpiexec


def _points(*rows):
    return [sweep.Point(ranks=k, au=au, samples_per_s=sps, bandwidth_MBps=0.0, storage_bandwidth_MBps=0.0,
                        result=None, exit_code=0) for k, au, sps in rows]


def test_supported_is_the_largest_rank_count_at_or_above_the_threshold():
    pts = _points((1, 0.99, 100), (2, 0.97, 200), (4, 0.90, 390), (8, 0.62, 500))
    assert sweep.accelerators_supported(pts, 0.90) == 4        # 0.90 itself counts
    assert sweep.accelerators_supported(pts, 0.95) == 2
    assert sweep.verdict(pts, 0.90)[0] == "accelerators supported: 4 (largest rank count with AU >= 90%)"
    # linear reference scales the smallest point per rank; efficiency = measured / linear
    assert sweep.scaling(pts) == [(100, 1.0), (200, 1.0), (400, 390 / 400), (800, 500 / 800)]
    # a noisy dip below the largest passing point is reported, not hidden
    noisy = _points((1, 0.99, 100), (2, 0.85, 150), (4, 0.92, 390))
    assert sweep.accelerators_supported(noisy, 0.90) == 4
    assert any("below 90% at 2 rank(s)" in ln for ln in sweep.verdict(noisy, 0.90))


def test_supported_by_mlperf_au_counts_only_points_that_have_one():
    import dataclasses

    pts = _points((1, 0.99, 100), (2, 0.91, 200), (4, 0.85, 390))
    mlperf = [0.99, 0.89, 0.91]   # sums, not step means: a point can pass one definition and not the other
    pts = [dataclasses.replace(p, mlperf_au=a) for p, a in zip(pts, mlperf)]
    assert sweep.accelerators_supported(pts, 0.90) == 2
    assert sweep.accelerators_supported(pts, 0.90, mlperf=True) == 4
    pts[2] = dataclasses.replace(pts[2], mlperf_au=None)        # an epoch of one step: not defined
    assert sweep.accelerators_supported(pts, 0.90, mlperf=True) == 1


def test_supported_is_zero_when_even_the_first_point_is_below():
    pts = _points((2, 0.72, 100), (4, 0.40, 110))
    assert sweep.accelerators_supported(pts, 0.90) == 0
    assert sweep.verdict(pts, 0.90) == [
        "accelerators supported: 0 (largest rank count with AU >= 90%: even the first point, 2 rank(s), "
        "reached only AU 72%)"]


def test_a_point_past_timeout_is_stopped_and_fails_the_sweep(tmp_path):
    """--timeout is a safety net against a hung point: a 10 s point under --timeout 2 is stopped
    (SIGINT, as Ctrl-C) soon after 2 s and the sweep fails naming it."""
    import time

    start = time.monotonic()
    proc = iodl("sweep", "--ranks", "1,2", "--timeout", "2", "--out", str(tmp_path / "s.json"),
                "--", "--engine", "null", "--steps", "200", "--compute-time", "0.05", timeout=60)
    elapsed = time.monotonic() - start
    _one_error_line(proc, "the 1-rank point ran past --timeout 2 s")
    assert proc.returncode == 1
    assert elapsed < 8, elapsed
    assert load_json(tmp_path / "s.json")["points"] == []
