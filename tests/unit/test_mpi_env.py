"""The MPI settings iodl adds before MPI starts (only where they are safe, never over the user's), and how
its ranks wait in MPI_Init."""
import os
import statistics
import subprocess
import sys

import pytest

from iodl.launcher import _sysv_shm_works, mpi_env_defaults
from tests.helpers import NotJudged, mpiexec

CELLS = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS"
YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
MPICH = {CELLS: "8", YIELD: "1"}   # on any node
ONE_NODE = {"MPI_LOCALNRANKS": "72", "PMI_SIZE": "72", "PMI_RANK": "5"}


def works():
    return True


def test_one_node_gets_fewer_queue_cells_and_one_ucx_shared_memory_transport_without_memory_hooks():
    assert mpi_env_defaults(ONE_NODE, works) == {**MPICH, "UCX_TLS": "self,sysv", "UCX_MEM_EVENTS": "no"}


@pytest.mark.parametrize("env", [
    {"MPI_LOCALNRANKS": "36", "PMI_SIZE": "72"},   # two nodes: UCX carries the data between them
    {"OMPI_COMM_WORLD_SIZE": "4"},                 # not hydra: nothing says the job is on one node
    {},
])
def test_ucx_is_left_alone_unless_every_rank_is_on_this_node(env):
    assert mpi_env_defaults(env, works) == MPICH


def test_without_sysv_shared_memory_ucx_keeps_its_own_choice():
    assert mpi_env_defaults(ONE_NODE, lambda: False) == MPICH


def test_the_users_settings_win():
    env = {**ONE_NODE, "UCX_TLS": "tcp", CELLS: "64", YIELD: "0"}
    assert mpi_env_defaults(env, works) == {}
    env = {**ONE_NODE, "UCX_MEM_EVENTS": "yes"}
    assert mpi_env_defaults(env, works) == {**MPICH, "UCX_TLS": "self,sysv"}


def test_the_sysv_probe_leaves_no_segment_behind():
    def segments():
        with open("/proc/sysvipc/shm") as f:
            return len(f.readlines())

    before = segments()
    assert _sysv_shm_works() is True   # this machine (and CI's) has SysV shared memory
    assert segments() == before


# A rank of a real MPI job started as iodl starts one (launcher.start_mpi: the settings, the gate, the
# timer slack), rank 0 a second late into MPI_Init once the gate let every rank through. Each rank
# writes the CPU it used in start_mpi and its timer slack before and after.
LATE_RANK = """
import os, resource, time
import iodl.launcher as launcher
gate = launcher._gate_before_init
def late_after_the_gate(env):
    gate(env)
    if env["PMI_RANK"] == "0":
        time.sleep(1.0)
launcher._gate_before_init = late_after_the_gate
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def slack():
    with open("/proc/self/timerslack_ns") as f:
        return int(f.read())
before, slack_before = cpu(), slack()
launcher.start_mpi()
os.write(1, f"{os.environ['PMI_RANK']} {cpu() - before} {slack_before} {slack()}\\n".encode())   # one write: one pipe
"""


def _waiting_cpu(env: dict) -> float:
    """The median CPU seconds ranks 1-3 of 4 (on 2 cores here) used in start_mpi while rank 0 was a second
    late into MPI_Init; every rank's timer slack is what it was before."""
    exe = mpiexec()
    assert exe, "mpiexec not found next to the test interpreter (pip install mpich)"
    proc = subprocess.run([exe, "-n", "4", sys.executable, "-c", LATE_RANK], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    rows = {int(r): (float(c), int(a), int(b)) for r, c, a, b in (line.split() for line in proc.stdout.splitlines())}
    assert sorted(rows) == [0, 1, 2, 3], proc.stdout
    assert all(a == b for _c, a, b in rows.values()), rows
    return statistics.median(rows[r][0] for r in (1, 2, 3))


@pytest.mark.mpiexec
@pytest.mark.flaky(reruns=1)   # CPU shares on two cores
def test_ranks_waiting_in_mpi_init_for_a_late_rank_sleep_instead_of_spinning():
    if len(os.sched_getaffinity(0)) >= 4:
        pytest.skip("4 ranks do not oversubscribe this machine's cores: the start's timer slack is not set")
    # MPICH's own waits (the user's setting of heavy yield wins: 0) poll with sched_yield, and three
    # waiting ranks take the two cores for the second: ~0.6-0.75 s of CPU each here. iodl's: ~0.05 s.
    # A setting MPICH did not read, or a slack not set, would leave them at ~0.6 or ~0.25 s.
    spinning = _waiting_cpu({YIELD: "0"})
    if spinning < 0.3:
        raise NotJudged(f"ranks waiting with sched_yield used {spinning:.2f} s of CPU in a 1 s wait: "
                        "this MPI does not spin there, or the cores were busy")
    sleeping = _waiting_cpu({})
    assert sleeping < 0.2 * spinning, (sleeping, spinning)
