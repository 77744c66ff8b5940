"""iodl.engine: plans and one-line errors for files, OSError naming the file and what the row did.
The engines by name (the registry, iodl/engines.py) are tests/native/test_engines.py's."""
import errno

import pytest

from iodl.engine import as_plan, raise_for_errors
from iodl.plan import PLAN_DTYPE


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
