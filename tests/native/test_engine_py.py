"""iodl.engine: one-line errors for engines and files, OSError naming the syscall or the file."""
import errno

import pytest

from iodl import _native
from iodl.engine import PLAN_DTYPE, as_plan, available_engines, open_engine, raise_for_errors
from iodl.errors import IodlError, UsageError


def test_available_engines_match_the_probes():
    av = available_engines()
    assert list(av) == _native.engines() + ["asyncio"]
    for name in _native.engines():
        assert (av[name] is None) == (_native.probe(name) == 0)


def test_unknown_or_misused_engine_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown engine 'nope' \\(choose from auto, null, psync"):
        open_engine("nope")
    with pytest.raises(UsageError, match="null engine only"):
        open_engine("psync", delay_ns=1)


@pytest.mark.uring
def test_setup_failure_names_the_syscall():
    # io_uring takes at most 32768 entries without IORING_SETUP_CLAMP: EINVAL from the kernel
    with pytest.raises(OSError, match=r"originated from io_uring_setup") as exc:
        _native.Engine("uring", depth=65536, block_size=1)
    assert exc.value.errno == errno.EINVAL
    with pytest.raises(IodlError, match="could not start: .*originated from io_uring_setup"):
        open_engine("uring", depth=65536, block_size=1)


def test_as_plan_and_raise_for_errors():
    plan = as_plan([(0, 0, 10), (1, 4096, 20)])
    assert plan.dtype == PLAN_DTYPE and plan["offset"].tolist() == [0, 4096]
    raise_for_errors({"errors": 0}, plan, ["a", "b"])
    with pytest.raises(OSError) as exc:
        raise_for_errors({"errors": 1, "first_errno": errno.EIO, "first_error_row": 1}, plan, ["a", "b"])
    assert exc.value.errno == errno.EIO and exc.value.filename == "b" and "offset 4096" in str(exc.value)
    assert "(read of 20 bytes at offset 4096)" in str(exc.value)
    # the row's op names what failed
    ops = as_plan([(0, 0, 10, 1), (0, 0, 0, 2), (0, 0, 0, 3)])
    for row, what in enumerate(("(write of 10 bytes at offset 0)", "(fsync)", "(fdatasync)")):
        with pytest.raises(OSError) as exc:
            raise_for_errors({"errors": 1, "first_errno": errno.ENOSPC, "first_error_row": row}, ops, ["a"])
        assert what in str(exc.value) and exc.value.errno == errno.ENOSPC
