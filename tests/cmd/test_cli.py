"""The CLI as a user meets it: bad input ends in one line and a non-zero exit, on every rank."""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import iodl, mpiexec


def _one_line_error(proc, code=2, must_name=()):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("iodl: error")]
    assert len(errors) == 1, proc.stderr
    for word in must_name:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("args,names", [
    (["read", "--root", "/nonexistent/iodl"], ["/nonexistent/iodl"]),
    (["read", "--workload", "no-such-workload"], ["no-such-workload"]),
    (["read", "--block-size=-1MiB", "--root", "/tmp"], ["-1MiB"]),
    (["read", "--iodepth", "0", "--root", "/tmp"], ["--iodepth"]),
    (["read", "--engine", "warp", "--root", "/tmp"], ["warp"]),
    (["read", "--pattern", "nope"], ["nope"]),
])
def test_bad_read_input(args, names):
    _one_line_error(iodl(*args), 2, names)


def test_bad_workload_file_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[workload]\nname = "x"\n[dataset]\nfiles = = 3\n')
    line = _one_line_error(iodl("read", "--workload", str(bad), "--root", str(tmp_path)), 2, ["bad.toml"])
    assert ":4" in line


def test_bad_input_under_mpi_ends_every_rank_with_one_line():
    assert mpiexec(), "mpiexec not found next to the test interpreter (pip install mpich)"
    proc = iodl("read", "--root", "/nonexistent/iodl", ranks=3, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert len([x for x in proc.stderr.splitlines() if x.startswith("iodl: error")]) == 1, proc.stderr


def test_help_and_probe_do_not_start_mpi():
    code = ("import sys, contextlib, io\n"
            "from iodl import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: cli.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "    cli.main(['probe', '--json'])\n"
            "print('mpi4py.MPI' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_probe_json_reports_every_capability():
    proc = iodl("probe", "--json")
    assert proc.returncode == 0, proc.stderr
    names = {c["name"] for c in json.loads(proc.stdout)}
    assert {"root", "aio", "uring", "psync", "null", "fio", "mpi", "loopdev", "blkio"} <= names


def test_help_is_as_wide_as_shutil_would_make_it():
    """cli._columns stands in for shutil.get_terminal_size (not imported, for start-up): a positive
    COLUMNS, else the terminal, else 80 (stdout is a pipe here); a COLUMNS of 0, below 0 or not a
    number is ignored as shutil ignores it."""
    def help_text(columns):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        if columns is not None:
            env["COLUMNS"] = columns
        proc = subprocess.run([sys.executable, "-m", "iodl", "read", "--help"], capture_output=True, text=True,
                              env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    default = help_text(None)
    assert default == help_text("80")
    for ignored in ("0", "-5", "abc", ""):
        assert help_text(ignored) == default, ignored
    narrow = help_text("60")
    # argparse never breaks a list of choices ({train-sync,...}): every other line fits
    assert narrow != default and max(len(line) for line in narrow.splitlines() if "{" not in line) <= 60
