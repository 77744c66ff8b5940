"""Stopping a run: SIGINT/SIGTERM end it with its result written, marked partial (iodl read, iodl checkpoint)."""
from __future__ import annotations

import signal
import threading

STOP_GRACE_S = 3.0   # after a stop request, how long collectives wait for a rank before giving up on it
SETUP_GRACE_S = 1.0  # a stop during set-up lets set-up finish within this, then the run starts stopped


class HeldStops:
    """SIGINT and SIGTERM held while a block loads modules, then delivered to whatever handles them
    after it (with no exception leaving the block).

    Raised inside an import, KeyboardInterrupt can land in one of importlib's own callbacks (a module
    lock's weakref callback), which prints it as "Exception ignored", with a traceback, and goes on:
    the stop is lost (a CI run read on for a minute after its SIGINT; a Ctrl-C one second into an
    8-rank run left rank 0 loading the report's modules, and the others gave up on it 3 s later).
    Only the main thread can hold them; elsewhere the block runs as it is.
    """

    def __init__(self, hold: bool = True):
        self.hold = hold and threading.current_thread() is threading.main_thread()
        self.came: list[int] = []
        self.before = {}

    def __enter__(self) -> "HeldStops":
        if self.hold:
            self.before = {s: signal.signal(s, lambda sig, _frame: self.came.append(sig))
                           for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for sig, handler in self.before.items():
            signal.signal(sig, handler)
        if self.came and exc_type is None:
            signal.raise_signal(self.came[0])   # the handler now in place takes it, here
        return False


class Interrupt:
    """SIGINT/SIGTERM stop the run and still write its result, marked partial.

    During set-up a signal is noted and set-up goes on (it takes well under a second): the run
    then starts stopped and the result, with nothing counted, is still written. Set-up that has not
    finished SETUP_GRACE_S after the signal (a hung mount) is ended then ("interrupted", 130).
    While the run is armed (reading), the handler raises KeyboardInterrupt in the main thread:
    the engine notices it within 100 ms, waits in step patterns (data, compute, barrier) are
    100 ms slices that notice it too, and the pattern keeps what was counted so far. Every rank
    gets the signal from the launcher, so each stops on its own and none waits for another.
    Once the run is over (reducing, writing the result) a signal only marks the result partial.
    """

    def __init__(self):
        self.event = threading.Event()
        self.phase = "setup"   # -> "run" (armed) -> "done"; "stopping" once the run was told

        def handler(*_):
            first = not self.event.is_set()
            self.event.set()
            if self.phase == "setup" and first:
                signal.setitimer(signal.ITIMER_REAL, SETUP_GRACE_S)
            elif self.phase == "run":
                self.phase = "stopping"   # once: the pattern's clean-up must not be interrupted again
                raise KeyboardInterrupt

        def setup_too_long(*_):
            if self.phase == "setup":
                raise KeyboardInterrupt

        signal.signal(signal.SIGALRM, setup_too_long)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    def arm(self) -> None:
        """Set-up is over: a signal now stops the run (which starts stopped if one came already)."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.phase = "stopping" if self.event.is_set() else "run"

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.phase = "done"

    def __call__(self) -> bool:
        return self.event.is_set()
