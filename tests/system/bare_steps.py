"""The least a synchronised training step can cost on this machine: every rank computes (the compute
time, handed to the barrier as its end, as iodl's step loop does) and meets the others at the same
barrier iodl uses (iodl.comm's step_sync), and nothing else:
no reader thread, no engine, no bookkeeping. Run under mpiexec; rank 0 prints the AU (compute /
step wall time, averaged over ranks and steps, the first step left out as iodl does) as JSON.

What this costs is the kernel's wake-up skew on an oversubscribed machine; what iodl costs on top
of it is iodl's own overhead (tests/system/test_dl_patterns.py)."""
import json
import sys

import numpy as np

from iodl import _native
from iodl.comm import world


def main(steps: int, compute_s: float) -> None:
    comm = world()
    comm.barrier()
    au = []
    for _ in range(steps):
        start = _native.monotonic_ns()
        comm.step_sync(0, start + int(compute_s * 1e9))
        au.append(compute_s * 1e9 / (_native.monotonic_ns() - start))
    mean = comm.gather(float(np.mean(au[1:])))
    if comm.rank == 0:
        print(json.dumps({"au": float(np.mean(mean))}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
