"""Markers map to iodl's own probes; a skip states the probe's reason.

IODL_REQUIRE=aio,uring,odirect,root,loopdev,blkio,fio,mpi (CI sets it on machines that have these)
turns the skip of a listed capability into a failure, so a broken probe cannot hide a whole suite.

Timing claims (the tests marked `flaky`, which get bounded reruns) are judged only on a host that
let us have our CPU: when the last attempt fails while the hypervisor stole more than STOLEN of
this VM's CPU time, the claim is "not judged" — its own outcome, neither passed nor skipped nor
failed, counted in pytest's closing line ("12 passed, 1 not judged") and listed with the share
stolen. With IODL_NOT_JUDGED=FILE the list is also written to FILE, one test a line, for CI to
count. A claim that holds is a pass whatever was stolen; with the CPU ours, a failure is a failure;
an exception other than a failed assert is a failure on any host.
"""
import functools
import os
import tempfile

import pytest
from pytest_rerunfailures import get_reruns_count   # the plugin that owns `flaky` counts the attempts

from iodl import probe
from iodl.groundtruth import CpuSteal

pytest_plugins = ["pytester"]   # tests/test_timing_claims.py runs small suites under this conftest

STOLEN = 0.03
NOT_JUDGED = "not judged"   # the outcome, and its word in pytest's closing line

# marker -> probe; each returns a Capability(ok, detail)
PROBES = {
    "root": probe.root,
    "loopdev": probe.loopdev,
    "blkio": probe.blkio,
    "aio": functools.partial(probe.engine, "aio"),
    "uring": functools.partial(probe.engine, "uring"),
    "odirect": lambda: probe.odirect(tempfile.gettempdir()),
    "fio": probe.fio,
}


def _required() -> set[str]:
    return {x.strip() for x in os.environ.get("IODL_REQUIRE", "").split(",") if x.strip()}


@functools.lru_cache(maxsize=None)
def _capability(name: str):
    return PROBES[name]()


def pytest_configure(config):
    config.addinivalue_line("markers", "blkio: needs cgroup v1 blkio throttling (root)")


def pytest_runtest_setup(item):
    required = _required()
    for name in PROBES:
        if item.get_closest_marker(name) is None:
            continue
        cap = _capability(name)
        if cap.ok:
            continue
        reason = f"{name}: {cap.detail}"
        if name in required:
            pytest.fail(f"IODL_REQUIRE lists {name} but the probe says no: {reason}", pytrace=False)
        pytest.skip(reason)


def require_or_skip(name: str, ok: bool, reason: str) -> None:
    """For probes that are not markers: skip with the reason, or fail if IODL_REQUIRE lists `name`."""
    if ok:
        return
    if name in _required():
        pytest.fail(f"IODL_REQUIRE lists {name} but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("flaky") is None:
        yield
        return
    with CpuSteal() as steal:
        yield
    item._iodl_steal = steal.share


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if item.get_closest_marker("flaky") is None or call.when != "call" or not report.failed:
        return
    stolen = getattr(item, "_iodl_steal", 0.0)
    last = getattr(item, "execution_count", 1) > (get_reruns_count(item) or 0)
    # only a claim that did not hold (an assert) can be excused; a crash is a crash on any host
    claim = call.excinfo is not None and call.excinfo.errisinstance(AssertionError)
    if last and claim and stolen > STOLEN:
        # not "failed" (iodl may be right) and not "passed"/"skipped" (nobody checked it): exit status 0,
        # the failure's text kept on the report for the summary below
        report.outcome = NOT_JUDGED
        report.iodl_stolen = stolen


def pytest_report_teststatus(report):
    if report.outcome == NOT_JUDGED:
        return NOT_JUDGED, "J", ("NOT JUDGED", {"yellow": True})


def pytest_terminal_summary(terminalreporter):
    reports = terminalreporter.stats.get(NOT_JUDGED, [])
    lines = [f"{r.nodeid}: the hypervisor stole {100 * r.iodl_stolen:.1f}% of the CPU; {_crash(r)}" for r in reports]
    if lines:
        terminalreporter.write_sep("=", f"timing claims not judged (the hypervisor stole > {100 * STOLEN:.0f}% "
                                        "of the CPU during the last attempt)", yellow=True)
        for line in lines:
            terminalreporter.write_line(f"NOT JUDGED {line}")
    path = os.environ.get("IODL_NOT_JUDGED")
    if path:
        with open(path, "w") as f:
            f.writelines(line + "\n" for line in lines)


def _crash(report) -> str:
    """The failed assertion's one line, as pytest's short summary would show it."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message.splitlines()[0] if crash and crash.message else "failed"
