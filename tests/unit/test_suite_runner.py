"""tests/run.py: the two phases' closing lines summed and their exit statuses combined; what a failed
run kept removed when the next starts."""
import os
import tempfile
import time

from tests.run import KEPT, counts, exit_status, remove_kept


def test_closing_lines_are_read_and_deselected_is_left_out():
    line = "= 1 failed, 1881 passed, 10 skipped, 16 deselected, 1 xfailed, 2 not judged, 3 rerun in 1747.37s (0:29:07) ="
    assert counts(line) == {"failed": 1, "passed": 1881, "skipped": 10, "xfailed": 1, "not judged": 2, "rerun": 3}
    assert counts("== 12 passed in 0.51s ==") == {"passed": 12}
    assert counts("collected 3 items") == {}


def test_the_worst_status_of_the_two_phases_wins():
    assert exit_status([0, 0]) == 0
    assert exit_status([0, 5]) == 0          # -k matched tests of one phase only
    assert exit_status([5, 5]) == 5
    assert exit_status([1, 0]) == 1 and exit_status([0, 1]) == 1
    assert exit_status([1, 2]) == 2          # a failure, then stopped: stopped


def test_a_quiet_runs_closing_line_is_read_too():
    assert counts("2 passed, 3 deselected in 10.52s") == {"passed": 2}
    assert counts("tests/x.py::test_y took 2 passes in 3.1s of setup") == {}


def test_a_failed_runs_directory_goes_when_the_next_run_starts_and_a_live_one_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept, live, other = tmp_path / "iodl-suite-kept", tmp_path / "iodl-suite-live", tmp_path / "someone-else"
    for d in (kept / "phase1" / "popen-gw0", live / "phase1", other):
        d.mkdir(parents=True)
        (d / "data").write_bytes(b"x" * 4096)
    (kept / KEPT).touch()
    (other / KEPT).touch()          # not a suite's directory: never touched
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / KEPT).touch()
    (tmp_path / "iodl-suite-link").symlink_to(elsewhere)   # a link: neither it nor where it points is removed
    if os.getuid() == 0:            # another user's failed run: theirs to remove
        theirs = tmp_path / "iodl-suite-theirs"
        theirs.mkdir()
        (theirs / KEPT).touch()
        os.chown(theirs, 65534, 65534)
    remove_kept()                   # in the background, as the run does
    deadline = time.monotonic() + 10
    while kept.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)                 # what else was wrongly started would be done by now
    assert not kept.exists()
    left = {"elsewhere", "iodl-suite-link", "iodl-suite-live", "someone-else"} | ({"iodl-suite-theirs"} if os.getuid() == 0 else set())
    assert set(os.listdir(tmp_path)) == left
    assert (elsewhere / KEPT).exists()
    assert (live / "phase1" / "data").exists() and (other / "data").exists()
