"""What the MPI launcher told this process, from its environment alone: no MPI, no numpy.

iodl/cli.py imports it before anything heavy (it takes over SIGTERM first, and an error line needs
the rank); iodl/comm.py builds the communicator on it.
"""
from __future__ import annotations

import os

# Variables that mpiexec launchers (MPICH/Hydra, Open MPI, Slurm PMI) set in every rank.
_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def launched_by_mpi() -> bool:
    return any(v in os.environ for v in _LAUNCHER_VARS)


def launcher_rank() -> int:
    """This process's rank as the launcher told it, without initialising MPI (0 if unknown)."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return 0
