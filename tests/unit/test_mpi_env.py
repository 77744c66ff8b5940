"""The MPI settings iodl adds before MPI starts: only where they are safe, never over the user's."""
import pytest

from iodl.launcher import _sysv_shm_works, mpi_env_defaults

CELLS = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS"
ONE_NODE = {"MPI_LOCALNRANKS": "72", "PMI_SIZE": "72", "PMI_RANK": "5"}


def works():
    return True


def test_one_node_gets_fewer_queue_cells_and_one_ucx_shared_memory_transport_without_memory_hooks():
    assert mpi_env_defaults(ONE_NODE, works) == {CELLS: "8", "UCX_TLS": "self,sysv", "UCX_MEM_EVENTS": "no"}


@pytest.mark.parametrize("env", [
    {"MPI_LOCALNRANKS": "36", "PMI_SIZE": "72"},   # two nodes: UCX carries the data between them
    {"OMPI_COMM_WORLD_SIZE": "4"},                 # not hydra: nothing says the job is on one node
    {},
])
def test_ucx_is_left_alone_unless_every_rank_is_on_this_node(env):
    assert mpi_env_defaults(env, works) == {CELLS: "8"}


def test_without_sysv_shared_memory_ucx_keeps_its_own_choice():
    assert mpi_env_defaults(ONE_NODE, lambda: False) == {CELLS: "8"}


def test_the_users_settings_win():
    env = {**ONE_NODE, "UCX_TLS": "tcp", CELLS: "64"}
    assert mpi_env_defaults(env, works) == {}
    env = {**ONE_NODE, "UCX_MEM_EVENTS": "yes"}
    assert mpi_env_defaults(env, works) == {CELLS: "8", "UCX_TLS": "self,sysv"}


def test_the_sysv_probe_leaves_no_segment_behind():
    def segments():
        with open("/proc/sysvipc/shm") as f:
            return len(f.readlines())

    before = segments()
    assert _sysv_shm_works() is True   # this machine (and CI's) has SysV shared memory
    assert segments() == before
