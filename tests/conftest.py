"""Markers map to iodl's own probes; a skip states the probe's reason.

IODL_REQUIRE=aio,uring,odirect,root,loopdev,blkio,fio,mpi (CI sets it on machines that have these)
turns the skip of a listed capability into a failure, so a broken probe cannot hide a whole suite.

Timing claims (the tests marked `flaky`, which get bounded reruns) are judged only on a host that
let us have our CPU: when the last attempt fails while the hypervisor stole more than STOLEN of
this VM's CPU time, it is reported as skipped with the share stolen, not as iodl's failure. With
the CPU ours, they pass or fail on their own.
"""
import functools
import os
import tempfile

import pytest

from iodl import probe
from iodl.groundtruth import CpuSteal

STOLEN = 0.03

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
    marker = item.get_closest_marker("flaky")
    if marker is None or call.when != "call" or not report.failed:
        return
    stolen = getattr(item, "_iodl_steal", 0.0)
    last = getattr(item, "execution_count", 1) > marker.kwargs.get("reruns", 0)
    if last and stolen > STOLEN:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: timing claim not judged: the hypervisor took {100 * stolen:.0f}% of the CPU "
                           f"during the last attempt (> {100 * STOLEN:.0f}%)")
