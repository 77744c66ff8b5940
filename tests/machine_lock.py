"""Phase 2's hold on the machine: a reader-writer lock between pytest-xdist's workers.

A `serial` test takes it for its whole protocol (setup, call with its reruns, teardown: a module's
server started in a test's setup is under that test's hold). An exclusive test takes it alone;
a test that `shares_sleep` (tests/conftest.py's SHARES_SLEEP says which, and why) takes it
shared, so two of those run together while nothing else runs.

flock(2) on two files in a directory every worker sees. The turnstile keeps a waiting exclusive
test from being starved by shared ones that keep arriving: every test passes the turnstile
before its own lock, and an exclusive one keeps the turnstile while it waits for the others to
finish, so no shared test starts behind it.
"""
import fcntl
import os
from contextlib import contextmanager

import pytest


class MachineLock:
    def __init__(self, directory: str):
        # O_CREAT by every worker: whichever comes first makes the file, flock needs no contents
        self.turnstile = os.open(os.path.join(directory, "iodl-turnstile.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        self.rw = os.open(os.path.join(directory, "iodl-machine.lock"), os.O_RDWR | os.O_CREAT, 0o600)

    @contextmanager
    def held(self, shared: bool):
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.rw, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.rw, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.turnstile)
        os.close(self.rw)


class MachineLockPlugin:
    """Registered in an xdist worker only: one pytest process alone has nothing to share with."""

    def __init__(self, lock: MachineLock):
        self.lock = lock

    @pytest.hookimpl(wrapper=True, tryfirst=True)   # outermost: around rerunfailures' own protocol
    def pytest_runtest_protocol(self, item, nextitem):
        if item.get_closest_marker("serial") is None:
            return (yield)
        with self.lock.held(shared=item.get_closest_marker("shares_sleep") is not None):
            return (yield)

    def pytest_unconfigure(self, config):
        self.lock.close()
