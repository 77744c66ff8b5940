"""tests/conftest.py's fast tier, on small suites run by pytester: the tier runs first whatever the
collection order, and a failure in it stops the session: at the tier's end in one process, at once under
xdist (whichever worker saw it)."""
from tests.helpers import REPO

FAST = "def test_fast_{n}():\n    assert {ok}\n"
SLOW = "def test_slow_{n}():\n    pass\n"


def suite(pytester, fast_ok: bool):
    # the slow file sorts first by name, so only the tier moves it after the fast ones
    pytester.makepyfile(**{"tests/a_slow/test_a": "".join(SLOW.format(n=n) for n in range(3))})
    pytester.makepyfile(**{"tests/unit/test_b": FAST.format(n=0, ok=True) + FAST.format(n=1, ok=fast_ok)})
    return pytester.runpytest("-v", "-p", "tests.conftest", "-p", "no:cacheprovider", "--rootdir", str(pytester.path))


def order(result) -> list[str]:
    return [line.split("::")[1].split()[0] for line in result.outlines if "::test_" in line and "PASSED" in line
            or "::test_" in line and "FAILED" in line and " - " not in line]


def test_the_fast_tier_runs_first(pytester):
    result = suite(pytester, fast_ok=True)
    result.assert_outcomes(passed=5)
    assert order(result) == ["test_fast_0", "test_fast_1", "test_slow_0", "test_slow_1", "test_slow_2"]


def test_a_failure_in_the_fast_tier_stops_the_run_at_its_end(pytester):
    result = suite(pytester, fast_ok=False)
    result.assert_outcomes(passed=1, failed=1)
    assert any("the fast tier failed (1 failed); the slower tiers were not run" in line for line in result.outlines)


def test_under_xdist_a_failure_on_either_worker_stops_the_run(pytester, monkeypatch):
    """-n 2 (xdist's load scheduling sends the first four tests alternately: the failing test_fast_0
    to one worker, the tier's last, test_fast_3, to the other, which sees no failure of its own).
    The slow tests are not sent before the failure is reported: every passing fast test takes 0.5 s."""
    pytester.makepyfile(**{"tests/a_slow/test_a": "".join(SLOW.format(n=n) for n in range(3))})
    pytester.makepyfile(**{"tests/unit/test_b": "import time\n\n" + FAST.format(n=0, ok=False) + "".join(
        FAST.format(n=n, ok="not time.sleep(0.5)") for n in range(1, 4))})
    monkeypatch.setenv("PYTHONPATH", REPO)   # the controller and its workers import tests.conftest
    result = pytester.runpytest_subprocess("-v", "-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider",
                                           "--rootdir", str(pytester.path))
    assert result.ret == 2   # interrupted: tests/run.py does not start phase 2
    assert not [line for line in result.outlines if "test_slow_" in line and "PASSED" in line], result.outlines
    assert any("the fast tier failed (tests/unit/test_b.py::test_fast_0); the slower tiers were not run" in line
               for line in result.outlines), result.outlines
