"""tests/machine_lock.py: phase 2's reader-writer lock. Each holder opens the files itself, as each
xdist worker does (flock(2) locks belong to an open file description), here in threads of one process."""
import threading

from tests.machine_lock import MachineLock

WAIT_S = 0.3   # long enough for a holder that could enter to have entered


class Holder(threading.Thread):
    """Takes the lock (shared or not), says when it holds it, keeps it until released."""

    def __init__(self, directory, shared: bool):
        super().__init__(daemon=True)
        self.lock, self.shared = MachineLock(str(directory)), shared
        self.holds, self.release = threading.Event(), threading.Event()

    def run(self):
        with self.lock.held(self.shared):
            self.holds.set()
            self.release.wait(10)
        self.lock.close()

    def done(self):
        self.release.set()
        self.join(10)


def test_shared_holders_run_together_an_exclusive_one_alone_and_waits_no_longer_than_them(tmp_path):
    first = Holder(tmp_path, shared=True)
    first.start()
    assert first.holds.wait(5)
    second = Holder(tmp_path, shared=True)
    second.start()
    assert second.holds.wait(5)   # two shared at once
    writer = Holder(tmp_path, shared=False)
    writer.start()
    assert not writer.holds.wait(WAIT_S)   # not beside them
    late = Holder(tmp_path, shared=True)
    late.start()
    # the writer waits at the turnstile's far side: a shared holder arriving after it waits too, though
    # the lock is only held shared (else a stream of shared tests would starve the exclusive one)
    assert not late.holds.wait(WAIT_S)
    first.done()
    assert not writer.holds.wait(WAIT_S)
    second.done()
    assert writer.holds.wait(5)
    assert not late.holds.wait(WAIT_S)   # nothing beside the exclusive holder
    writer.done()
    assert late.holds.wait(5)
    late.done()


def test_exclusive_holders_take_turns(tmp_path):
    first, second = Holder(tmp_path, shared=False), Holder(tmp_path, shared=False)
    first.start()
    assert first.holds.wait(5)
    second.start()
    assert not second.holds.wait(WAIT_S)
    first.done()
    assert second.holds.wait(5)
    second.done()
