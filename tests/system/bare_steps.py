"""The least a synchronised training step can cost on this machine: every rank sleeps the compute
time and meets the others at the same barrier iodl uses (iodl.comm's step_sync), and nothing else:
no reader thread, no engine, no bookkeeping. Run under mpiexec; rank 0 prints the AU (compute /
step wall time, averaged over ranks and steps, the first step left out as iodl does) as JSON.

What this costs is the kernel's wake-up skew on an oversubscribed machine; what iodl costs on top
of it is iodl's own overhead (tests/system/test_dl_patterns.py)."""
import json
import sys
import time

import numpy as np

from iodl import _native
from iodl.comm import world


def main(steps: int, compute_s: float) -> None:
    comm = world()
    comm.barrier()
    au = []
    for _ in range(steps):
        start = _native.monotonic_ns()
        time.sleep(compute_s)
        computed = _native.monotonic_ns()
        comm.step_sync(0)
        au.append((computed - start) / (_native.monotonic_ns() - start))
    mean = comm.gather(float(np.mean(au[1:])))
    if comm.rank == 0:
        print(json.dumps({"au": float(np.mean(mean))}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
