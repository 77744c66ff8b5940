"""IODL_S3_IO_TIMEOUT (docs/s3.md): how long an S3 request may go without progress before the server
counts as hung. Read when iodl.s3http is imported: each case imports it in a process of its own."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("awscrt")

SHOW = "from iodl.s3http import IO_TIMEOUT_S; print(IO_TIMEOUT_S)"


def _import_with(value):
    env = {k: v for k, v in os.environ.items() if k != "IODL_S3_IO_TIMEOUT"}
    if value is not None:
        env["IODL_S3_IO_TIMEOUT"] = value
    return subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("value, seconds", [(None, 10.0), ("3", 3.0), ("0.1", 0.1), ("3600", 3600.0), (" 2.5 ", 2.5)])
def test_the_timeout_is_the_variables_seconds_or_ten(value, seconds):
    proc = _import_with(value)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) == seconds


@pytest.mark.parametrize("value", ["", "x", "0", "0.05", "-1", "nan", "inf", "3601", "1e9"])
def test_anything_else_is_a_usage_error_naming_the_variable(value):
    proc = _import_with(value)
    assert proc.returncode != 0
    assert f"UsageError: IODL_S3_IO_TIMEOUT={value!r}: a number of seconds from 0.1 to 3600" in proc.stderr


def test_a_command_given_a_bad_value_says_so_in_one_line():
    """The command that reaches an s3:// root, not a traceback: one line, exit 2 (nothing is contacted:
    the endpoint is a closed port)."""
    env = {**os.environ, "IODL_S3_IO_TIMEOUT": "soon"}
    proc = subprocess.run([sys.executable, "-m", "iodl", "read", "--root", "s3://b/p", "--endpoint",
                           "http://127.0.0.1:9"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "iodl: error: IODL_S3_IO_TIMEOUT='soon': a number of seconds from 0.1 to 3600"
