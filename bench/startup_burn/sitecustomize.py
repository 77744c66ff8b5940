"""Spins IODL_BURN_MS milliseconds of CPU when the interpreter starts, before anything else runs.

On PYTHONPATH, with `bench_scale.py --pair IODL_BURN_MS=0,40`, it measures what each millisecond of
a rank's start-up costs the job's (bench/results/startup-burn-1130.md)."""
import os
import time

_ms = float(os.environ.get("IODL_BURN_MS", "0"))
if _ms:
    _end = time.process_time() + _ms / 1e3
    while time.process_time() < _end:
        pass
