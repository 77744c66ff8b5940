"""tests/conftest.py's `serial` mark, which sends a test to tests/run.py's second phase, on a small
suite run by pytester: a root test of counts listed in DEVICE_SHARING shares the machine, one not
listed stays serial, and a timing claim stays serial whatever the list says."""
from tests import conftest

# a file name no real test module has: pytester imports it into this process beside them
SUITE = """import pytest


@pytest.mark.root
@pytest.mark.loopdev
def test_counts_on_a_device_of_its_own():
    pass


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.flaky(reruns=1)
def test_a_timing_claim_on_a_device_of_its_own():
    pass


@pytest.mark.root
def test_unlisted():
    pass
"""


def test_listed_counts_share_the_machine_and_timing_claims_stay_serial(pytester, monkeypatch):
    pytester.makepyfile(**{"tests/device/test_phase_marks_suite": SUITE})
    listed = ("tests/device/test_phase_marks_suite.py::test_counts_on_a_device_of_its_own",
              "tests/device/test_phase_marks_suite.py::test_a_timing_claim_on_a_device_of_its_own")
    monkeypatch.setattr(conftest, "DEVICE_SHARING", listed)
    result = pytester.runpytest("--collect-only", "-q", "-m", "serial", "-p", "tests.conftest", "-p", "no:cacheprovider",
                                "--rootdir", str(pytester.path))
    serial = sorted(line.split("::")[1] for line in result.outlines if "::test_" in line)
    assert serial == ["test_a_timing_claim_on_a_device_of_its_own", "test_unlisted"], result.outlines
