"""The step loop's take of a batch from its reader thread (training._Reader.get) when the reader ends
just after the take's wait ran out: its last batch, or its error, is what the step loop gets."""
import queue
import threading

import pytest

from iodl.training import _Reader


class _PutLate(queue.SimpleQueue):
    """A queue whose first timed wait runs out just as the item arrives (the reader's put of its last
    batch, then its end, between the step loop's wait and its look at the thread)."""

    def __init__(self, item):
        super().__init__()
        self.item, self.first = item, True

    def get(self, block=True, timeout=None):
        if self.first and self.item is not None:
            self.first = False
            self.put(self.item)
            raise queue.Empty
        return super().get(block, timeout)


def _ended_reader(out, error=None) -> _Reader:
    # a reader thread that is not alive (never started: is_alive() is False, as once it ended)
    r = _Reader.__new__(_Reader)
    threading.Thread.__init__(r, daemon=True)
    r.out, r.room, r.error = out, queue.SimpleQueue(), error
    return r


def test_the_last_batch_put_after_the_wait_ran_out_is_taken():
    assert _ended_reader(_PutLate(1234)).get(lambda: False) == 1234


def test_an_ended_reader_error_is_raised_not_a_missing_batch():
    with pytest.raises(OSError, match="gone"):
        _ended_reader(_PutLate(None), OSError("gone")).get(lambda: False)


def test_an_ended_reader_with_nothing_left_is_an_error():
    with pytest.raises(RuntimeError, match="without a batch"):
        _ended_reader(_PutLate(None)).get(lambda: False)
