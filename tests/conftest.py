"""Markers map to iodl's own probes; a skip states the probe's reason.

IODL_REQUIRE=aio,uring,asyncio,odirect,root,loopdev,blkio,fio,strace,mpiexec,hosts,fuse,loopback,s3 (CI sets it on machines that have these)
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
import shutil
import subprocess
import sys
import tempfile

import pytest
from pytest_rerunfailures import get_reruns_count   # the plugin that owns `flaky` counts the attempts
from xdist.scheduler import LoadFileScheduling

from iodl import probe
from iodl.groundtruth import CpuSteal
from tests.helpers import REPO, NotJudged, mpiexec
from tests.machine_lock import MachineLock, MachineLockPlugin

pytest_plugins = ["pytester"]   # tests/unit/test_timing_claims.py runs small suites under this conftest

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
    "asyncio": functools.partial(probe.engine, "asyncio"),
    "strace": lambda: probe.Capability("strace", bool(shutil.which("strace")), shutil.which("strace") or
                                       "strace not on PATH (apt-get install strace)"),
    "mpiexec": lambda: probe.Capability("mpiexec", bool(mpiexec()), mpiexec() or
                                        "no mpiexec next to the test interpreter (pip install -e '.[mpi]')"),
}


def _required() -> set[str]:
    return {x.strip() for x in os.environ.get("IODL_REQUIRE", "").split(",") if x.strip()}


@functools.lru_cache(maxsize=None)
def _capability(name: str):
    return PROBES[name]()


def pytest_configure(config):
    config.addinivalue_line("markers", "blkio: needs cgroup v1 blkio throttling (root)")
    config.addinivalue_line("markers", "nobody_unlisted: uses nobody_iodl but is not in NOBODY_TESTS (fails)")
    config.addinivalue_line("markers", "shares_sleep: a serial test that may run beside another such one "
                                       "(set from SHARES_SLEEP in tests/conftest.py)")
    config.pluginmanager.register(FastTier(), "iodl-fast-tier")
    if hasattr(config, "workerinput"):
        # an xdist worker: its basetemp is the run's basetemp/popen-gwN, so the parent is one directory
        # every worker of this run sees, and no other run does
        lock = MachineLock(os.path.dirname(os.path.abspath(config.option.basetemp)))
        config.pluginmanager.register(MachineLockPlugin(lock), "iodl-machine-lock")
        for name, value in config.workerinput.get("iodl_terminal_env", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# An xdist worker starts with COLUMNS=80 and LINES=24 in its environment where the controller has
# none, and tests.helpers.iodl passes COLUMNS on (250 when unset): progress lines of 110 characters
# were folded at 80 under xdist and not in one pytest process. The worker gets the controller's.
TERMINAL_ENV = ("COLUMNS", "LINES")


def pytest_configure_node(node):
    node.workerinput["iodl_terminal_env"] = {name: os.environ.get(name) for name in TERMINAL_ENV}


# Tests that must have the machine to themselves, marked `serial` here so that no file has to say it:
# timing claims (`flaky`), throttles and loop devices, the page cache and drop_caches (root), MPI jobs
# that use both cores, fio's runs held against iodl's, S3 servers in network namespaces, the system and
# MPI-size batteries, and the ordinary user's venv (built once, by whichever phase meets it first).
# tests/run.py runs the other tests three at a time (pytest-xdist), then these on two workers that
# take tests/machine_lock.py's lock: alone, or two at a time where both are in SHARES_SLEEP.
SERIAL_MARKERS = ("flaky", "blkio", "loopdev", "root", "mpiexec", "mpi", "slow")
SERIAL_PATHS = ("tests/system/", "tests/s3/", "tests/test_mpi_sizes.py")
SERIAL_FIXTURES = ("nobody_iodl",)
# fio's files and tests that only parse, lay out, fill buffers, count calls or draw offsets (no time
# or rate held to a tolerance): they run fio beside other tests; every other `fio` test is serial
# (their loop-device tests stay serial by their own markers)
FIO_SHARING = ("tests/fio/test_fio_crosscheck.py", "tests/fio/test_fio_content.py", "tests/fio/test_uring_ring.py",
               "tests/fio/test_reap.py", "tests/fio/test_loops.py", "tests/fio/test_fio_mixed.py",
               "tests/fio/test_jobs_people_have.py", "tests/fio/test_fio_write.py::test_sync_counts_and_bytes_equal_fios",
               "tests/fio/test_fio_write.py::test_time_based_writes_wrap_around_the_file_as_fio",
               "tests/fio/test_filecreate.py::test_metadata_engines_beside_fio",
               "tests/fio/test_fio_write.py::test_a_write_jobs_file_starts_as_fios_lay_out_of_all_the_jobs_leaves_it")
# tests/s3's files and tests that check objects, counts and one-line errors against SeaweedFS servers of
# their own (no link throttle, no network namespace, no time held, no server stopped or killed; each xdist
# worker starts its session's server on free ports): they share the machine; the rest of tests/s3 is serial
# (test_read's others: a stop bound, an io timeout, the order of two GETs, a fixed window's edges, MPI)
S3_SHARING = ("tests/s3/test_generate.py", "tests/s3/test_server.py", "tests/s3/test_dlio_s3.py", "tests/s3/test_tls.py",
              "tests/s3/test_checkpoint_lists.py", "tests/s3/test_read.py::test_validate_reads_every_object_whole",
              "tests/s3/test_read.py::test_storage_only_whole_and_ranged_gets",
              "tests/s3/test_read.py::test_each_rank_lists_the_prefix_in_pages_of_1000",
              "tests/s3/test_read.py::test_a_prefix_without_a_dataset_is_one_line",
              "tests/s3/test_read.py::test_an_object_gone_is_one_line_with_the_servers_answer")
# Tests of counts on a loop device of their own, serial by their root and loopdev markers otherwise: the
# device's own counters, statvfs, strace's calls; no time or rate held, no throttle, no drop_caches, the
# caches needed neither warm nor cold (a partner's reclaim costs a count nothing): they share the machine.
# A timing claim (`flaky`) stays serial whatever this says.
DEVICE_SHARING = (
    "tests/kvcache/test_truth.py::test_prefill_only_writes_tokens_times_bytes_per_token_plus_a_header_per_entry",
    "tests/kvcache/test_truth.py::test_direct_entries_are_whole_4k_blocks_and_reach_the_device_as_written",
    "tests/kvcache/test_truth.py::test_a_root_without_room_for_the_largest_entry_is_refused_before_writing",
    "tests/kvcache/test_truth.py::test_entries_are_unlinked_least_recently_used_first_to_stay_within_95_percent",
    "tests/dlio/test_honoured_read.py::test_odirect_reads_reach_the_device_every_time")

# Serial tests that may run two at a time, beside one another and nothing else: their claims are a
# rate that the kernel paces (a blkio throttle, tc's tbf on a veth) with one process keeping it busy,
# or a count, and they wait on it, so a partner like them does not move them. Each has resources of
# its own: loop devices from `losetup --find`, blkio groups named with the worker's pid, network
# namespaces, veths and /30s named per file. None drops the caches or needs them warm or cold.
# Left out after runs of the group at two workers (tests/README.md): where several ranks must get
# the CPU to keep a throttle or link busy (kvcache's bandwidth at 1-2 ranks, test_endpoints,
# test_checkpoint_links, 8 % short), the knee of test_sweep and the progress lines of
# test_read_groundtruth, and what spends CPU rather than waits (the ordinary user's venv build,
# tests/s3 at loopback speed). tests/README.md says how a test joins. nodeid prefix -> why.
SHARES_SLEEP = {
    # not its checkpoint: PUTs through Ceph cost the OSD and radosgw CPU (beside a partner, 23 % short);
    # not test_radosgw_gone: it ends the module's cluster, so it must stay the file's last test, and a
    # shared test is moved ahead of the file's others (below): the checkpoint test met a dead server
    "tests/s3/test_radosgw.py::test_every_byte": "bytes over a 200 Mbit/s tbf link; the cluster's start is a wait",
    "tests/s3/test_radosgw.py::test_validate": "bytes and rate of GETs over a 200 Mbit/s tbf link",
    "tests/s3/test_radosgw.py::test_storage_only": "the rate of ranged GETs over a 200 Mbit/s tbf link",
    "tests/s3/test_radosgw.py::test_wrong_secret": "one line of text",
    "tests/s3/test_radosgw.py::test_slowdown": "retries counted, one line",
    "tests/s3/test_radosgw.py::test_a_dataset_and_a_checkpoint_over_https": "objects and counts over https on the "
                                                                           "200 Mbit/s tbf link",
    "tests/s3/test_radosgw.py::test_another_cas_bundle_is_one_line": "one line of text",
    "tests/kvcache/test_truth.py::test_writes_are_capped": "the fd table under a 10 MB/s throttle: counts, no time",
    "tests/kvcache/test_truth.py::test_the_queue_serves": "the order of service under an 8 MiB/s write throttle",
    "tests/kvcache/test_truth.py::test_every_reported_read_reaches_the_device":
        "blkio's byte count; it drops one file's pages (fadvise), never the machine's",
    "tests/fio/test_e2e.py": "fio against iodl on one throttled or rate-limited mount, medians of interleaved rounds "
                             "(O_DIRECT jobs: fio-compare drops no cache)",
    # not test_fio_write's throttled write jobs: beside test_e2e (its loop images and theirs on one disk)
    # their rounds fell as low as 27 MB/s of ~92, mostly one tool's in a round (tests/README.md)
    # not its test_ttfb_is_where_the_body_starts: a latency held to 5 % of 87 ms, with a few ms for the first byte
    "tests/s3/test_link.py::test_bytes_": "bytes over a 200 Mbit/s tbf link (the link's own counters)",
    "tests/s3/test_link.py::test_storage_only_bandwidth_is_the_links": "the rate of a 200 Mbit/s tbf link, the "
                                                                       "payload rate measured beside iodl's",
}
# The tests of the ordinary user's venv (SERIAL_FIXTURES), one unit for xdist as a file is: the venv
# is built once in phase 2, not once per worker. A user of the fixture that is not here fails.
NOBODY_TESTS = ("tests/cmd/test_read.py::test_drop_caches_without_root_is_one_line_error",
                "tests/cmd/test_read.py::test_a_root_the_user_may_not_write_is_one_line_naming_it",
                "tests/system/test_cache_truth.py")


@pytest.hookimpl(tryfirst=True)   # before `-m` selects on the marker
def pytest_collection_modifyitems(items):
    for item in items:
        sharing = item.nodeid.startswith(DEVICE_SHARING) and item.get_closest_marker("flaky") is None
        if ((item.nodeid.startswith(SERIAL_PATHS) and not item.nodeid.startswith(S3_SHARING))
                or any(item.get_closest_marker(m) for m in SERIAL_MARKERS)
                or (item.get_closest_marker("fio") and not item.nodeid.startswith(FIO_SHARING))
                or any(f in item.fixturenames for f in SERIAL_FIXTURES)) and not sharing:
            item.add_marker("serial")
            if item.nodeid.startswith(tuple(SHARES_SLEEP)):
                item.add_marker("shares_sleep")
        if "nobody_iodl" in item.fixturenames and not item.nodeid.startswith(NOBODY_TESTS):
            # the test fails saying why (pytest_runtest_setup): an error raised here would end an xdist
            # worker's session with no word, and the run in an INTERNALERROR about a "crashed" test
            item.add_marker("nobody_unlisted")
    # the shared ones first, in SHARES_SLEEP's order (the longest first: the last pair ends closer
    # together), so that there are two to run side by side; the rest keep their order
    rank = {prefix: n for n, prefix in enumerate(SHARES_SLEEP)}
    items.sort(key=lambda i: min((n for p, n in rank.items() if i.nodeid.startswith(p)), default=len(rank)))


# Files whose SHARES_SLEEP tests are a unit of work of their own (they share no module fixture with the
# file's other tests). Kept in their file, a worker that finished them went on to the file's exclusive
# tests, which wait for the other worker and then hold the machine alone: the shared tests found a
# partner only by chance (phase 2's wall time was within 3 % of the sum of its tests' times). Apart,
# each worker goes from shared unit to shared unit while there are any, and the exclusive rest follows.
SPLIT_SHARED = ("tests/kvcache/test_truth.py",)


class FileScheduling(LoadFileScheduling):
    """xdist's --dist loadfile (a file's tests on one worker: a module's server, link of fixed names or
    mount is made once), with NOBODY_TESTS as one more file and SPLIT_SHARED's shared tests as one
    more unit each. xdist's loadgroup would say it with markers, but under pytest 9 its group never
    reaches the scheduler (it renames item._nodeid, which pytest 9 no longer reads)."""

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(NOBODY_TESTS):
            return "nobody_iodl"
        scope = super()._split_scope(nodeid)
        return scope + "::shared" if scope in SPLIT_SHARED and nodeid.startswith(tuple(SHARES_SLEEP)) else scope


def pytest_xdist_make_scheduler(config, log):
    return FileScheduling(config, log) if config.getoption("dist") == "loadfile" else None


# The fast tier: unit tests, the C engines' contract on tmpfs and the in-process commands. It runs
# first, and when any of it fails the session stops: at the tier's end in one pytest process; under
# xdist at its first failure, whichever worker saw it (the workers finish the tests already sent to
# them). A broken build is told within seconds of the tier's start, not after the ground-truth battery.
FAST_TIER = ("tests/unit/", "tests/native/", "tests/cmd/test_cli.py")


class FastTier:
    def __init__(self):
        self.session, self.last, self.failed = None, None, 0
        self.dsession = None   # xdist's controller, which alone sees every worker's reports

    def pytest_sessionstart(self, session):
        self.dsession = session.config.pluginmanager.getplugin("dsession")

    def pytest_collection_modifyitems(self, session, items):
        if not session.config.getoption("with_mpi", False):
            # tests/mpi is written for any size and run by tests/test_mpi_sizes.py under mpiexec -n 1
            # and -n 3; outside mpiexec those tests are not skips of a missing capability: leave them out
            mpi = [i for i in items if i.get_closest_marker("mpi")]
            if mpi:
                session.config.hook.pytest_deselected(items=mpi)
                items[:] = [i for i in items if not i.get_closest_marker("mpi")]
        fast = [i for i in items if i.nodeid.startswith(FAST_TIER)]
        if fast and len(fast) < len(items):   # a run of one tier alone has nothing to put after it
            items[:] = fast + [i for i in items if not i.nodeid.startswith(FAST_TIER)]
            self.session, self.last = session, fast[-1].nodeid

    def pytest_runtest_logreport(self, report):
        if report.failed and report.nodeid.startswith(FAST_TIER):
            self.failed += 1
            # a worker stops at the tier's last test only when it ran that test and saw a failure;
            # the controller stops them all, as it does for -x
            if self.dsession is not None and not self.dsession.shouldstop:
                self.dsession.shouldstop = (f"the fast tier failed ({report.nodeid}); "
                                            "the slower tiers were not run")
        if report.when == "teardown" and report.nodeid == self.last and self.failed:
            self.session.shouldstop = f"the fast tier failed ({self.failed} failed); the slower tiers were not run"


def pytest_runtest_setup(item):
    if item.get_closest_marker("nobody_unlisted"):
        pytest.fail(f"{item.nodeid} uses nobody_iodl: add it to NOBODY_TESTS in tests/conftest.py", pytrace=False)
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
    if call.when != "call" or not report.failed:
        return
    last = getattr(item, "execution_count", 1) > (get_reruns_count(item) or 0)
    if last and call.excinfo is not None and call.excinfo.errisinstance(NotJudged):
        # the test saw that this machine cannot judge its claim now (e.g. the device was contended)
        report.outcome = NOT_JUDGED
        report.iodl_reason = str(call.excinfo.value)
        return
    if item.get_closest_marker("flaky") is None:
        return
    stolen = getattr(item, "_iodl_steal", 0.0)
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
    lines = [f"{r.nodeid}: {r.iodl_reason}" if hasattr(r, "iodl_reason") else
             f"{r.nodeid}: the hypervisor stole {100 * r.iodl_stolen:.1f}% of the CPU; {_crash(r)}" for r in reports]
    if lines:
        terminalreporter.write_sep("=", f"timing claims not judged (the hypervisor stole > {100 * STOLEN:.0f}% "
                                        "of the CPU during the last attempt, or the test saw it could not judge)",
                                   yellow=True)
        for line in lines:
            terminalreporter.write_line(f"NOT JUDGED {line}")
    path = os.environ.get("IODL_NOT_JUDGED")
    if path:
        with open(path, "a") as f:   # appended: tests/run.py's two phases write to one file
            f.writelines(line + "\n" for line in lines)


def _crash(report) -> str:
    """The failed assertion's one line, as pytest's short summary would show it."""
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message.splitlines()[0] if crash and crash.message else "failed"


# An iodl an ordinary user can run (uid 65534 through setpriv): the test interpreter may live in
# root's home (mode 700), so the user gets a venv of Debian's system python3 in a world-readable
# temporary directory with a copy of this checkout installed, built once per session.
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="session")
def nobody_iodl():
    """The path of an `iodl` that uid 65534 can run: a venv of /usr/bin/python3 in a
    world-readable directory, with a copy of this checkout installed into it."""
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import venv, sysconfig; "
                            "print(sysconfig.get_paths()['include'])"], capture_output=True, text=True)
    if probe.returncode != 0:
        require_or_skip("root", False, f"{SYSTEM_PYTHON} cannot make a venv (apt-get install python3-venv): "
                        f"{probe.stderr.strip()[-200:]}")
    if not os.path.exists(os.path.join(probe.stdout.strip(), "Python.h")):
        require_or_skip("root", False, f"{SYSTEM_PYTHON} has no headers to build iodl's C engine (apt-get install python3-dev)")
    top = tempfile.mkdtemp(prefix="iodl-nobody-", dir="/var/tmp")
    os.chmod(top, 0o755)
    src, venv = os.path.join(top, "src"), os.path.join(top, "venv")
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "venv", "build", "*.egg-info",
                                                             "__pycache__", "*.so", ".pytest_cache", "bench"))
    try:
        # the venv without a pip of its own: the test interpreter's pip installs into it (--python runs
        # that pip under the venv's interpreter, so iodl's C engine is built against Debian's python3).
        # Seeding the venv's own pip and setuptools was 40 % of the build's CPU time (19 s -> 11 s).
        # --no-compile: pip byte-compiles every dependency (numpy, matplotlib, fonttools...), a third of
        # the build; the few runs as uid 65534 compile what they import, in memory (+0.3-0.6 s each)
        for cmd in ([SYSTEM_PYTHON, "-m", "venv", "--without-pip", venv],
                    [sys.executable, "-m", "pip", "--python", os.path.join(venv, "bin", "python"), "install",
                     "--quiet", "--disable-pip-version-check", "--no-compile", src]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                require_or_skip("root", False, f"could not build the venv for uid 65534 ({' '.join(cmd[:3])}): "
                                f"{(proc.stderr or proc.stdout).strip()[-300:]}")
        subprocess.run(["chmod", "-R", "a+rX", top], check=True)
        yield os.path.join(venv, "bin", "iodl")
    finally:
        shutil.rmtree(top, ignore_errors=True)
