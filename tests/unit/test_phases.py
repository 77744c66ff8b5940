"""tests/conftest.py's `serial` mark, which sends a test to tests/run.py's second phase, on a small
suite run by pytester: a root test of counts listed in DEVICE_SHARING shares the machine, one not
listed stays serial, and a timing claim stays serial whatever a list says."""

TRUTH = """import pytest


@pytest.mark.root
@pytest.mark.loopdev
def test_prefill_only_writes_tokens_times_bytes_per_token_plus_a_header_per_entry_to_the_device():
    pass


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.flaky(reruns=1)
def test_direct_entries_are_whole_4k_blocks_and_reach_the_device_as_written():
    pass


@pytest.mark.root
def test_bandwidth_is_the_throttle():
    pass
"""


def test_listed_counts_share_the_machine_and_timing_claims_stay_serial(pytester):
    pytester.makepyfile(**{"tests/kvcache/test_truth": TRUTH})
    result = pytester.runpytest("--collect-only", "-q", "-m", "serial", "-p", "tests.conftest", "-p", "no:cacheprovider",
                                "--rootdir", str(pytester.path))
    serial = sorted(line.split("::")[1] for line in result.outlines if "::test_" in line)
    assert serial == ["test_bandwidth_is_the_throttle",
                      "test_direct_entries_are_whole_4k_blocks_and_reach_the_device_as_written"], result.outlines
