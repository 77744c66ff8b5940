"""What the MPI launcher told this process, from its environment alone, and MPI's start: no numpy.

iodl/cli.py imports it before anything heavy (it takes over SIGTERM first, an error line needs the
rank, and under mpirun it starts MPI before the command's imports); iodl/comm.py builds the
communicator on it.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .errors import UsageError

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


def _sysv_shm_works() -> bool:
    """Can this process create a SysV shared-memory segment (some containers forbid it)?"""
    import ctypes   # here, as _socket in node_gate: what cli.py imports before it takes over SIGINT stays small

    libc = ctypes.CDLL(None, use_errno=True)
    ipc_private, ipc_creat, ipc_rmid = 0, 0o1000, 0
    shmid = libc.shmget(ipc_private, 4096, ipc_creat | 0o600)
    if shmid < 0:
        return False
    libc.shmctl(shmid, ipc_rmid, None)
    return True


def mpi_env_defaults(env, sysv_works=_sysv_shm_works) -> dict[str, str]:
    """The MPI settings iodl adds to `env` before MPI starts; a user's own setting always wins.

    Both keep memory per rank small when many ranks share a node (bench/results/scale.md); MPIs
    other than MPICH, and MPICH builds without UCX, ignore them.
    """
    # MPICH gives every rank 64 cells of 8 KiB in its shared-memory queue; iodl's messages are
    # a few small collectives per step, and at 72 ranks a node the cells are ~4.5 MB of every
    # rank's memory. Eight are plenty.
    out = {"MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS": "8"}
    # MPICH's ranks wait for each other in MPI_Init (and in the few blocking collectives of iodl's
    # set-up) polling, with a sched_yield every so many polls: on a node with more ranks than cores
    # the waiting ones keep taking turns on the CPU that the ranks still on their way there need.
    # With heavy yield they sleep (nanosleep) instead of sched_yield: at 72 ranks on 2 cores,
    # MPI_Init's CPU a rank 70-82 -> 48-55 ms, the first step sooner in 7 of 8 pairs on either
    # interpreter (bench/results/startup-heavy-yield-1130-*.md). iodl's steps never block in MPI
    # (comm.py sleep-polls), so only waits at start and end change.
    out["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"
    # hydra (MPICH's launcher) says how many ranks share this node. When that is all of them,
    # MPICH carries every message in its own shared memory and uses UCX only to swap addresses
    # at start-up. UCX's default opens both its posix and its SysV shared-memory transports, and
    # at 72 ranks their per-peer state is ~5 MB of every rank: one transport is enough.
    # Neither transport registers memory, so UCX's memory events (for the registration cache of
    # RDMA transports) have nothing to serve; installing their hooks (patching mmap and munmap
    # in every loaded library, sched_yield between patches) was half of MPI_Init's CPU in a
    # process: 0.076 -> 0.040 s at one rank, x72 ranks on 2 cores (bench/results/scale-notes.md).
    local = env.get("MPI_LOCALNRANKS")
    if local is not None and local == env.get("PMI_SIZE") and "UCX_TLS" not in env and sysv_works():
        out.update(UCX_TLS="self,sysv", UCX_MEM_EVENTS="no")
    return {k: v for k, v in out.items() if k not in env}


# The start gate (node_gate): a rank lets the others through once none has come for this long.
GATE_IDLE_S = 2.0
# ... and one connected to it and waiting to be let through gives up after this long.
GATE_WAIT_S = 30.0


def hydra_proxy(pid: int | None = None) -> tuple[int, int] | None:
    """(pid, start time) of the hydra proxy that launched this process, its nearest ancestor of that
    name (a wrapper shell may stand between), or None: every rank of a node shares it, and no other job."""
    pid = os.getppid() if pid is None else pid
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return None
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if name == "hydra_pmi_proxy":
            return pid, int(fields[19])
        pid = int(fields[1])
        if pid <= 1:
            return None
    return None


def node_gate(key: str, ranks: int, me: int, idle_s: float = GATE_IDLE_S, wait_s: float = GATE_WAIT_S) -> None:
    """Hold this process until `ranks` processes of this node called node_gate with `key`, asleep.

    MPI_Init waits for every rank spinning (sched_yield), and hydra starts a node's ranks one after
    another, so at 72 ranks on 2 cores the first ones spin for a second or more while the last still
    start Python: CPU the late ones needed. Met here first, asleep, they enter MPI_Init together:
    at 72 ranks, MPI_Init's CPU a rank 64 ms against 86 (medians of 6 interleaved pairs), iodl's
    first step sooner in 9 of 9 pairs on one interpreter and 4 of 4 on another
    (bench/results/startup-trims-1129i.md). Rank `me` 0 holds
    an abstract Unix socket (no file, gone with the process) that the others connect to; it lets
    them all through at once. It never holds MPI back for long: a rank that is not coming (not
    iodl, dead) costs idle_s; a rank that finds no gate for idle_s (rank 0 that late, or gone, or
    done with a gate it came too late for) goes on alone; one whose rank 0 went silent, after
    wait_s. MPI_Init then waits as it would. The name can be guessed, and any user of the machine
    may bind or connect to an abstract socket: each end checks the other is a process of this user
    (SO_PEERCRED), and goes on alone (or counts it not) when it is not.
    """
    # _socket, the C module under socket: socket's own import (enums, selectors) was 4 ms a rank
    import _socket

    name = b"\0iodl-start-" + key.encode()
    if me == 0:
        server = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        waiting = []
        try:
            try:
                server.bind(name)
            except OSError:   # taken: not a gate of ours to keep
                return
            server.listen(ranks)
            server.settimeout(idle_s)
            while len(waiting) < ranks - 1:
                try:
                    peer = _socket.socket(fileno=server._accept()[0])
                except OSError:   # none came for idle_s (TimeoutError), or the socket failed
                    break
                if _peer_uid(peer) == os.geteuid():
                    waiting.append(peer)
                else:             # another user's process: not one of our ranks
                    peer.close()
            for peer in waiting:
                try:
                    peer.send(b"g")
                except OSError:
                    pass
        finally:
            for peer in waiting:
                peer.close()
            server.close()
        return
    came = time.monotonic()
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        while True:   # rank 0 may not have opened the gate yet, or has let the others through already
            try:
                conn.connect(name)
                break
            except OSError:
                if time.monotonic() > came + idle_s:
                    return
                time.sleep(0.005)
        if _peer_uid(conn) != os.geteuid():   # another user's gate: waiting there would cost wait_s
            return
        conn.settimeout(wait_s)
        try:
            conn.recv(1)   # b"g", or b"" if rank 0 is gone
        except OSError:
            pass
    finally:
        conn.close()


def _peer_uid(sock) -> int:
    """The user id of the process at the other end of a connected Unix socket (SO_PEERCRED:
    struct ucred, pid, uid, gid), or -1."""
    import _socket

    try:
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except OSError:
        return -1
    return int.from_bytes(cred[4:8], sys.byteorder)


# MPI_Init's waits, on a node with more ranks than cores: with heavy yield (mpi_env_defaults) MPICH
# sleeps between its polls with a nanosleep of 1 ns, which the kernel stretches by the thread's timer
# slack (50 us by default). 4 ranks on 2 cores, 3 of them waiting a second for the 4th: each slept
# ~10,000 times and used 0.22-0.37 s of CPU (0.68-0.77 s with sched_yield); with 1 ms of slack while
# in MPI_Init, ~970 times and 0.05-0.07 s (tests/unit/test_mpi_env.py). At 72 ranks on 2 cores the
# first step came 0.8-1.6 s sooner (bench/results/startup-slack-1130-*.md).
# MPI_Init returns up to 1 ms later for it. The thread's own slack comes back after; a thread that
# MPI_Init starts (UCX's "async", which waits on events and runs a few timers) keeps 1 ms.
MPI_INIT_SLACK_NS = 1_000_000
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30   # <linux/prctl.h>


def _oversubscribed(env) -> bool:
    """More ranks on this node than cores this process may run on, as the launcher tells it."""
    local = env.get("MPI_LOCALNRANKS") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or ""
    return local.isdigit() and int(local) > len(os.sched_getaffinity(0))


def _timer_slack(ns: int) -> int | None:
    """Set this thread's timer slack to ns and return the one it had (None: nothing changed)."""
    import ctypes   # here, as in _sysv_shm_works

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    before = prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    if before < 0 or prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) != 0:
        return None
    return before


def _gate_before_init(env) -> None:
    """node_gate for a rank that hydra launched with others on its node (none elsewhere)."""
    try:
        ranks, me = int(env.get("MPI_LOCALNRANKS", "")), int(env.get("MPI_LOCALRANKID", ""))
    except ValueError:
        return
    proxy = hydra_proxy() if ranks > 1 else None
    if proxy is not None:
        node_gate(f"{proxy[0]}-{proxy[1]}", ranks, me)


def start_mpi():
    """MPI_Init with iodl's settings (mpi_env_defaults), for a process that mpirun launched: mpi4py.MPI.
    Once: a second call returns the same module.

    MPI_Init returns when every rank has reached it, and MPICH's ranks wait for the others there
    polling: with a sched_yield between polls by default (~13 ms of CPU per second waited, per rank,
    72 ranks on 2 cores, one rank 3 s late: bench/results/scale.md), asleep between them with iodl's
    settings (heavy yield, and MPI_INIT_SLACK_NS on an oversubscribed node). iodl/cli.py calls this
    at process start, where the ranks are within a fraction of a second of each other, not after
    the command's imports, which the ranks finish seconds apart on an oversubscribed node.
    """
    os.environ.update(mpi_env_defaults(os.environ))
    # MPI_Init waits in C, and for a rank that died before reaching it (a host without iodl, say)
    # it waits forever: a Python handler would never run there, so Ctrl-C and SIGTERM would be
    # held for good (seen: a job spinning on, SIGINT ignored). While it waits they end the process.
    main = threading.current_thread() is threading.main_thread()
    held = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        slack = None
        if "mpi4py.MPI" not in sys.modules:   # MPI not started yet: the ranks meet first
            _gate_before_init(os.environ)
            slack = _timer_slack(MPI_INIT_SLACK_NS) if _oversubscribed(os.environ) else None
        try:
            # importing mpi4py.MPI runs MPI_Init: here, not at the top, so that no process that
            # mpirun did not launch (`iodl --help`, probe, the tests) ever starts MPI
            from mpi4py import MPI
        finally:
            if slack is not None:
                _timer_slack(slack)
    except ImportError:
        raise UsageError("launched by mpirun but mpi4py is not installed (pip install 'iodl[mpi]')") from None
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)
    return MPI
