"""tests/conftest.py's fast tier, on small suites run by pytester: the tier runs first whatever the
collection order, and a failure in it stops the session at the tier's end."""

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
