"""stop.HeldStops: a stop that comes while modules load is taken after the block, by the handler then
in place, never inside it (where importlib's callbacks would print it as "ignored" and drop it)."""
import os
import signal
import time

import pytest

from iodl.stop import HeldStops


def _arrive(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.01)   # the handler runs at the next bytecode boundary: it has had its chance


def test_a_stop_inside_the_block_is_raised_after_it():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    got_to_the_end = False
    with pytest.raises(KeyboardInterrupt):
        with HeldStops():
            _arrive(signal.SIGINT)
            got_to_the_end = True
    assert got_to_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_goes_to_the_handler_in_place_once_the_block_is_over():
    seen = []
    before = signal.signal(signal.SIGTERM, lambda sig, _frame: seen.append(sig))
    try:
        with HeldStops():
            _arrive(signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_error_in_the_block_is_what_leaves_it_and_the_handlers_come_back():
    seen = []
    before = signal.signal(signal.SIGTERM, lambda sig, _frame: seen.append(sig))
    try:
        with pytest.raises(ValueError):
            with HeldStops():
                _arrive(signal.SIGTERM)
                raise ValueError("the command's own error")
        assert seen == []   # the error is reported (one line, its exit status), not an interruption
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_not_holding_leaves_the_handlers_alone():
    with pytest.raises(KeyboardInterrupt):
        with HeldStops(hold=False):
            _arrive(signal.SIGINT)
            pytest.fail("the stop should have been raised at once")
