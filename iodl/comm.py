"""The communicator iodl passes around: MPI when launched by mpirun, a serial stand-in otherwise.

No module-level MPI import: importing mpi4py.MPI runs MPI_Init, which `iodl --help`, `iodl probe`
and `iodl fio-compare` must never do. Waiting is done by sleep-polling non-blocking collectives so
that 72 ranks on 2 cores leave the CPU to the ranks doing I/O.
"""
from __future__ import annotations

import mmap
import os
import pickle
import threading
import time

import numpy as np

from . import _native
from .errors import IodlError, UsageError
from .launcher import launched_by_mpi, start_mpi
from .outputs import create_new
from .records import record


# MpiComm._wait's sleep between two polls of a collective: it doubles up to 1 ms, and in a wait
# that has lasted longer than 20 ms up to 1/20 of it, at most 20 ms
MIN_POLL_S, MAX_POLL_S, POLL_SHARE = 1e-3, 20e-3, 20
SHARED_NAME_BYTES = 64   # NodeShared's file name: /dev/shm/iodl-shm- and 12 hex digits, 30 bytes


class SerialComm:
    """One process, same methods as MpiComm."""

    rank = 0
    size = 1
    is_mpi = False

    def barrier(self) -> None:
        pass

    def bcast(self, obj, root: int = 0):
        return obj

    def bcast_object(self, obj, root: int = 0):
        return obj

    def gather(self, obj, root: int = 0):
        return [obj]

    def allgather(self, obj):
        return [obj]

    def allreduce(self, value, op: str = "sum"):
        return value

    def reduce_array(self, array: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray:
        return array.copy()

    def node_comm(self) -> "SerialComm":
        return self

    def node_group(self, color: int) -> "SerialComm":
        return self

    def step_sync(self, flag: int = 0, until_ns: int = 0) -> int:
        sleep_until(until_ns)
        return flag

    def step_resumed(self, wait_ns: int = 0) -> None:
        pass

    def step_quiet(self, timeout_s: float) -> bool | None:
        return None   # no other rank wakes with this one

    def hostname(self) -> str:
        return os.uname().nodename   # socket.gethostname()'s, without importing socket

    def give_up_after(self, seconds: float) -> None:
        pass

    def all_answered(self) -> None:
        pass

    def stop_notices(self, on_notice) -> "StopNotices | None":
        return None   # one rank: nobody to tell

    def abort(self, code: int) -> None:
        os._exit(code)


class MpiComm:
    """mpi4py's COMM_WORLD (or a sub-communicator) behind iodl's small interface."""

    is_mpi = True

    def __init__(self, comm=None):
        from mpi4py import MPI  # initialises MPI on first use

        self._MPI = MPI
        self._comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self._ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "bor": MPI.BOR}
        self._node_barrier = None
        self._give_up_s = None      # set once a stop was requested: collectives then wait this long at most
        self._heard = {}            # rank 0, after a stop: rank -> request of its "still here" message

    def _wait(self, request) -> None:
        # Sleep-poll instead of MPI's busy-wait: an oversubscribed node must not burn its cores here.
        # Each poll is a wake-up and an MPI progress call: at 1 ms, 71 ranks waiting for one cost
        # more than one of 2 cores (start-up, where ranks wait seconds for the slowest). A long wait
        # therefore polls less often: the pause grows to 1/POLL_SHARE of the time waited so far
        # (at most MAX_POLL_S), so a rank sees a collective done at most ~5% of its wait late, once
        # per round of the collective (MPI progresses it only while a rank polls). Waits of a few
        # ms, such as a step's, keep polling every ms at most.
        pause = 20e-6
        start = time.monotonic()
        while not request.Test():
            waited = time.monotonic() - start
            if self._give_up_s is not None and waited > self._give_up_s:
                raise RanksNotAnswering(self._give_up_s, self.missing_ranks())
            time.sleep(pause)
            pause = min(pause * 2, max(MIN_POLL_S, min(waited / POLL_SHARE, MAX_POLL_S)))

    def give_up_after(self, seconds: float) -> None:
        """After a stop request: a rank that is stopped or hung must not hold the others in a
        collective forever. Every collective from now on waits `seconds` at most, then raises
        RanksNotAnswering; each rank tells rank 0 it is still here, so rank 0 can name the others."""
        if self._give_up_s is not None:
            return
        self._give_up_s = seconds
        tag = 0x10D1
        self._token = np.zeros(1, dtype=np.int8)
        if self.rank:
            self._sent = self._comm.Isend(self._token, dest=0, tag=tag)
        else:
            self._heard = {r: self._comm.Irecv(np.zeros(1, dtype=np.int8), source=r, tag=tag)
                           for r in range(1, self.size)}

    def all_answered(self) -> None:
        """After give_up_after, once a collective of all ranks went through: every "still here"
        message has arrived or never will (a rank that was not signalled); finish or cancel them,
        or MPI_Finalize complains of requests left pending."""
        if self._give_up_s is None:
            return
        for request in [*self._heard.values(), *([self._sent] if self.rank else [])]:
            if not request.Test():
                request.Cancel()
                try:
                    self._wait(request)   # bounded: a send may not be cancellable
                except RanksNotAnswering:
                    pass

    def missing_ranks(self) -> list[int]:
        """Rank 0 after give_up_after: the ranks not heard from (yet)."""
        return [r for r, req in self._heard.items() if not req.Test()]

    def answering(self) -> "MpiComm | SerialComm | None":
        """After RanksNotAnswering: a communicator of rank 0 and the ranks it heard from, so that
        they can still put their results together without the missing ones. Rank 0 tells each of
        them who is in (point-to-point, bounded by the give-up time like every wait now); a rank
        rank 0 did not hear from, or that does not hear back in time, gets None."""
        tag = 0x10D2
        members = np.full(self.size, -1, dtype=np.int32)
        if self.rank == 0:
            heard = [0] + [r for r in self._heard if r not in self.missing_ranks()]
            if len(heard) == 1:
                return SerialComm()
            members[:len(heard)] = heard
            self._told = [self._comm.Isend(members, dest=r, tag=tag) for r in heard[1:]]
        else:
            request = self._comm.Irecv(members, source=0, tag=tag)
            try:
                self._wait(request)
            except RanksNotAnswering:
                request.Cancel()
                return None
            heard = [int(r) for r in members if r >= 0]
        # a collective of the members only (MPI-3): the missing ranks take no part in it
        sub = MpiComm(self._comm.Create_group(self._comm.Get_group().Incl(heard), tag=tag))
        sub._give_up_s = self._give_up_s
        return sub

    def barrier(self) -> None:
        self._wait(self._comm.Ibarrier())

    def bcast(self, obj, root: int = 0):
        self.barrier()  # ranks arrive at different times; wait politely before the blocking call
        return self._comm.bcast(obj, root=root)

    def gather(self, obj, root: int = 0):
        self.barrier()
        return self._comm.gather(obj, root=root)

    def allgather(self, obj):
        self.barrier()
        return self._comm.allgather(obj)

    def bcast_text(self, text: str, size: int, root: int = 0) -> str:
        """root's text (at most `size` bytes of UTF-8) on every rank: one sleep-polled collective,
        where bcast is a barrier and a blocking call (a collective at set-up is ~0.1 s at 72 ranks
        on 2 cores)."""
        buf = bytearray(size + 1)   # the last byte stays 0: the text's end
        if self.rank == root:
            data = text.encode()
            if len(data) > size:
                raise ValueError(f"bcast_text: {len(data)} bytes, at most {size}")
            buf[:len(data)] = data
        self._wait(self._comm.Ibcast(buf, root=root))
        return bytes(buf[:buf.index(0)]).decode()

    def bcast_object(self, obj, root: int = 0):
        """root's obj on every rank, pickled: two sleep-polled collectives (its size, then it), where
        bcast is a barrier and a blocking call."""
        data = pickle.dumps(obj) if self.rank == root else b""
        size = np.array([len(data)], dtype=np.int64)
        self._wait(self._comm.Ibcast(size, root=root))
        buf = bytearray(data) if self.rank == root else bytearray(int(size[0]))
        self._wait(self._comm.Ibcast(buf, root=root))
        return obj if self.rank == root else pickle.loads(buf)

    def allreduce(self, value, op: str = "sum"):
        """One non-blocking collective, sleep-polled: train-sync pays this once per step."""
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            send = np.array([value], dtype=np.float64 if isinstance(value, (float, np.floating)) else np.int64)
            recv = np.empty_like(send)
            self._wait(self._comm.Iallreduce(send, recv, op=self._ops[op]))
            return recv[0].item()
        self.barrier()
        return self._comm.allreduce(value, op=self._ops[op])

    def reduce_array(self, array: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray:
        send = np.ascontiguousarray(array)
        recv = np.empty_like(send)
        self._wait(self._comm.Ireduce(send, recv, op=self._ops[op], root=root))
        return recv if self.rank == root else send.copy()

    def node_comm(self) -> "MpiComm":
        return MpiComm(self._comm.Split_type(self._MPI.COMM_TYPE_SHARED))

    def node_group(self, color: int) -> "MpiComm":
        """The ranks of this node that pass the same color (e.g. read the same mount)."""
        node = self._comm.Split_type(self._MPI.COMM_TYPE_SHARED)
        group = node.Split(color, self.rank)
        node.Free()
        return MpiComm(group)

    def step_sync(self, flag: int = 0, until_ns: int = 0) -> int:
        """A barrier that also ORs a small flag over all ranks, once per training step; it returns
        once every rank arrived and the latest of their until_ns (the compute's end,
        _native.monotonic_ns' clock; 0: none) passed.

        Ranks of a node wait in the kernel on a shared page (see NodeBarrier); only one leader per
        node takes part in the MPI collective, sleep-polled.
        """
        if self._node_barrier is None:
            self._node_barrier = NodeBarrier(self)
        return self._node_barrier.sync(flag, until_ns)

    def step_resumed(self, wait_ns: int = 0) -> None:
        """This rank's step loop is back at work after step_sync (its compute began): once a step.
        wait_ns: then wait, at most that long (no signal is looked for: keep it short), until the
        node's other step loops are back at work too, for work of the step loop's own that can wait:
        done while they wake, it would delay the last of them (see step_quiet)."""
        if self._node_barrier is not None:
            self._node_barrier.resumed(wait_ns)

    def step_quiet(self, timeout_s: float) -> bool | None:
        """Wait (at most timeout_s, the GIL released) until every rank of this node is back at work
        after a step_sync's release: the one under way, else the next. For work that can wait (a
        reader ahead of its step loop): the node's step loops wake together, and what else runs
        then delays the last of them, whom the next barrier waits for. True: they are; False: the
        time ran out; None: there is nothing to wait for (no node barrier: before the first
        step_sync, or no shared page)."""
        barrier = self._node_barrier
        return None if barrier is None else barrier.quiet(timeout_s)

    def hostname(self) -> str:
        return self._MPI.Get_processor_name()

    def stop_notices(self, on_notice) -> "StopNotices":
        return StopNotices(self._comm, self._MPI.ANY_SOURCE, on_notice)

    def abort(self, code: int) -> None:
        self._comm.Abort(code)


class StopNotices:
    """A run's failure on one rank, told to every other: they stop as on Ctrl-C, and the ranks put
    what they counted together into a partial result (rather than the job ending without one).

    Each rank keeps one receive posted for the notice; a thread looks at it every POLL_S
    (sleeping in between: 72 ranks on 2 cores must not spin) and calls on_notice (the rank's own stop
    request) once when it arrives. A rank whose request failed for good calls tell(). close(told)
    ends the watch and takes in the notices of the `told` other ranks that failed (MPI_Finalize
    wants none left pending); every rank learns that count in a collective after the run, which
    every notice was sent before."""

    TAG = 0x10D3
    # a stop within about a second asks no more, and each look is a wake-up of every rank: at 0.1 s
    # that was half a wake-up a retinanet step (49 ms) on top of the step's two, at 30-60 us of CPU each
    POLL_S = 0.25

    def __init__(self, comm, any_source: int, on_notice):
        self._comm, self._any, self._on_notice = comm, any_source, on_notice
        self._buf, self._one = np.zeros(1, dtype=np.int8), np.ones(1, dtype=np.int8)   # live while in flight
        self._recv = comm.Irecv(self._buf, source=any_source, tag=self.TAG)
        self._sent: list = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="iodl-stop-notices", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(self.POLL_S):
            if self._recv.Test():
                self._on_notice()
                return

    def tell(self) -> None:
        """This rank's run failed for good: every other rank stops (within about POLL_S)."""
        me = self._comm.Get_rank()
        self._sent = [self._comm.Isend(self._one, dest=r, tag=self.TAG)
                      for r in range(self._comm.Get_size()) if r != me]

    def close(self, told: int = 0) -> None:
        self._done.set()
        self._thread.join()
        if self._recv.Test():
            told -= 1
        else:
            self._recv.Cancel()
            self._recv.Wait()
        for _ in range(told):   # sent before the collective that counted them: here or on their way
            self._comm.Recv(self._buf, source=self._any, tag=self.TAG)
        for request in self._sent:
            request.Wait()   # 1 byte: sent eagerly, done once it left


def failed_alone(exc: BaseException) -> bool:
    """Whether exc is this rank's own request failing for good (an I/O error, a file gone or short,
    a server gone), which the other ranks do not know of: not bad input, not an error every rank
    raised together (comm.collective), not a rank gone silent."""
    return (isinstance(exc, (OSError, IodlError)) and not isinstance(exc, (UsageError, RanksNotAnswering))
            and not getattr(exc, "collective", False))


def failures_line(failures: list[str]) -> str | None:
    """The one line of the ranks' own failures (each "rank N: ..."): the first, and how many more."""
    if not failures:
        return None
    return failures[0] + (f" (and {len(failures) - 1} more rank(s))" if len(failures) > 1 else "")


class RanksNotAnswering(IodlError):
    """After a stop request, some rank did not take part in a collective in time."""

    exit_code = 130

    def __init__(self, seconds: float, missing: list[int]):
        named = f"rank(s) {', '.join(map(str, missing))}" if missing else "some rank(s)"
        held = "rank 0 writes the result: there is none" if 0 in missing else "the result holds the ranks that answered"
        super().__init__(f"{named} did not answer within {seconds:g} s of the stop request (stopped or hung); {held}")
        self.missing = missing


class NodeShared:
    """A zeroed block of memory mapped by every rank of one node (a /dev/shm file, unlinked as soon
    as all ranks mapped it, so nothing is left behind). Where some rank could not map it, `shared`
    is False on every rank of every node and `mm` is a private block of the same size instead, so
    callers keep one code path. node_rank/node_size place this rank; world_ranks: the rank in comm
    of each rank of the node, in node order (MPI knows them: no message)."""

    TAIL = 64   # bytes after the per-rank slots, for one node-wide word (the null engine's device)

    def __init__(self, comm, size: int = 4096, per_rank: int = 0):
        self.mm, self.shared = None, True
        if comm.is_mpi:
            node = comm._comm.Split_type(comm._MPI.COMM_TYPE_SHARED)
            self.node_rank, self.node_size, self._node = node.Get_rank(), node.Get_size(), MpiComm(node)
            mine, theirs = node.Get_group(), comm._comm.Get_group()
            self.world_ranks = mine.Translate_ranks(None, theirs)
            mine.Free()
            theirs.Free()
        else:
            self.node_rank, self.node_size, self._node, self.world_ranks = 0, 1, None, [comm.rank]
        self.device_offset = per_rank * self.node_size
        size = -(-max(size, self.device_offset + self.TAIL) // mmap.PAGESIZE) * mmap.PAGESIZE
        if not comm.is_mpi:
            self.mm = mmap.mmap(-1, size)
            return
        path = None
        if self.node_rank == 0:
            try:
                fd, path = _shared_file(size)
                os.close(fd)
            except OSError:
                path = None  # no /dev/shm here
        path = self._node.bcast_text(path or "", SHARED_NAME_BYTES, root=0)
        ok = False
        if path:
            try:
                with open(path, "r+b") as f:
                    self.mm = mmap.mmap(f.fileno(), size)
                ok = True
            except OSError:
                ok = False
        ok = bool(comm.allreduce(int(ok), "min"))  # all ranks, all nodes: same choice everywhere
        if self.node_rank == 0 and path:
            os.unlink(path)
        if not ok:
            if self.mm is not None:
                self.mm.close()
            self.mm, self.shared = mmap.mmap(-1, size), False

    @property
    def node(self):
        """The node's communicator (the serial stand-in's own when alone)."""
        return self._node if self._node is not None else SerialComm()


class NodeBarrier:
    """Ranks of one node meet on a futex in a shared page (iodl._native.node_barrier); node
    leaders then combine the flag over nodes with MPI and a second local round hands it out.
    Where no shared page can be made, every rank sleep-polls an MPI Iallreduce instead."""

    PAGE = 4096
    GLOBAL = 32  # byte offset of the word the leader writes the all-nodes flag to (after barrier.c's struct)

    def __init__(self, comm: "MpiComm"):
        self._comm = comm
        shared = NodeShared(comm, self.PAGE)
        self._mm, self._node_size = (shared.mm if shared.shared else None), shared.node_size
        self._leader = shared.node_rank == 0
        color = 0 if self._leader else comm._MPI.UNDEFINED
        leaders = comm._comm.Split(color, comm.rank)
        self._leaders = MpiComm(leaders) if self._leader else None
        self._nodes = comm.allreduce(1 if self._leader else 0, "sum")

    def sync(self, flag: int, until_ns: int = 0) -> int:
        if self._mm is None:
            sleep_until(until_ns)
            return int(self._comm.allreduce(int(flag), "bor"))

        # the node's last rank to arrive sleeps to the latest compute end; the others sleep once, to the release
        local = _native.node_barrier(self._mm, self._node_size, int(flag), until_ns)
        if self._nodes == 1:
            return local
        if self._leader:
            everywhere = int(self._leaders.allreduce(local, "bor"))
            self._mm[self.GLOBAL:self.GLOBAL + 4] = everywhere.to_bytes(4, "little")
        _native.node_barrier(self._mm, self._node_size, 0)  # released once the leader wrote it
        return int.from_bytes(self._mm[self.GLOBAL:self.GLOBAL + 4], "little")

    def resumed(self, wait_ns: int = 0) -> None:
        if self._mm is not None:
            _native.node_resumed(self._mm, wait_ns)

    def quiet(self, timeout_s: float) -> bool | None:
        return None if self._mm is None else _native.node_quiet(self._mm, int(timeout_s * 1e9))


def sleep_until(until_ns: int) -> None:
    """Sleep to until_ns (_native.monotonic_ns' clock; 0 or past: not at all)."""
    left = until_ns - _native.monotonic_ns() if until_ns else 0
    if left > 0:
        time.sleep(left / 1e9)


def node_host_name(comm, leader: int, node_size: int) -> str:
    """This rank's host name for the result: MPI's processor name, made unique per node.

    The result groups ranks by this name (`hosts`, the per-node cache view, the datasize rule's
    host count), while MPI and NodeShared group them by node (COMM_TYPE_SHARED). Two nodes with
    one name (cloned VMs all called "ubuntu", containers given one --hostname) were merged into
    one host, their memory and cache probes overwriting each other (found by
    tests/system/test_multihost.py). Such nodes are now NAME#1, NAME#2, ... in the order of their
    first rank; a name that one node holds is left as it is. leader: the world rank of this node's
    first rank, which the caller learnt in a collective of its own; node_size: the ranks of this
    node. One small allgather at set-up, where there are several nodes: a node that holds every
    rank is the only one (the allgather cost ~0.1 s at 72 ranks on 2 cores)."""
    name = comm.hostname()
    if not comm.is_mpi or node_size == comm.size:
        return name
    pairs = comm.allgather((leader, name))
    nodes = sorted({first for first, n in pairs if n == name})
    return name if len(nodes) == 1 else f"{name}#{nodes.index(leader) + 1}"


@record
class HostSplit:
    """The world by host, for work done once per host (fio-compare runs the whole job on each):
    this rank's node communicator (MPI's COMM_TYPE_SHARED) and its place in it (node rank 0 is
    the host's leader, its lowest world rank), the host's index (hosts in the order of their first
    rank), the number of hosts and the host's name (node_host_name's: unique per node)."""

    node: object
    node_rank: int
    index: int
    count: int
    name: str = ""

    @property
    def leader(self) -> bool:
        return self.node_rank == 0


def split_hosts(comm) -> HostSplit:
    """This rank's HostSplit. Collective: every rank calls it, at set-up (two small allgathers)."""
    if not comm.is_mpi:
        return HostSplit(comm, 0, 0, 1, comm.hostname())
    node = comm.node_comm()
    first = node.bcast(comm.rank if node.rank == 0 else None, root=0)
    firsts = sorted(set(comm.allgather(first)))
    split = HostSplit(node, node.rank, firsts.index(first), len(firsts))
    split.name = node_host_name(comm, first, node.size)
    return split


def _shared_file(size: int):
    """A zeroed file in /dev/shm (tmpfs: memory shared by the node's processes)."""

    fd, path = create_new("/dev/shm", "iodl-shm-")
    try:
        # reserve the pages now: a sparse file on a full /dev/shm maps fine and then kills the
        # rank with SIGBUS at its first write; ENOSPC here sends the caller to private memory
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    return fd, path


def world():
    """COMM_WORLD when launched by mpirun and mpi4py is importable, else the serial stand-in."""
    if launched_by_mpi():
        start_mpi()   # done already when the command line started it (iodl/cli.py)
        return MpiComm()
    return SerialComm()


def collective(comm, fn):
    """Run `fn` on every rank; if it raised an IodlError on any, every rank raises one.

    Bad input is usually seen by all ranks alike: rank 0 prints it once and all exit cleanly with
    no MPI abort. A rank that alone fails (a root missing on one node) is named in the message.
    """
    if comm.size == 1:
        return fn()  # alone: the error keeps its own type for callers of the API
    try:
        value, failure = fn(), None
    except IodlError as exc:
        value, failure = None, (type(exc).__name__, str(exc), exc.exit_code)
    # whether any rank failed: one sleep-polled allreduce, where an allgather is a barrier and a
    # blocking call (each collective at set-up costs ~0.1 s at 72 ranks on 2 cores); what failed,
    # only then
    if not comm.allreduce(int(failure is not None), "max"):
        return value
    bad = [(r, f) for r, f in enumerate(comm.allgather(failure)) if f is not None]
    rank, (_kind, message, code) = bad[0]
    if len({f[1] for _r, f in bad}) > 1 or len(bad) < comm.size:
        message = f"rank {rank}: {message}" + (f" (and {len(bad) - 1} more rank(s))" if len(bad) > 1 else "")
    err = IodlError(message, collective=True)
    err.exit_code = code
    raise err


def on_rank0(comm, fn):
    """fn() run by rank 0 alone, its value sent to every rank; an IodlError of it raised on every
    rank alike (inside `collective`, rank 0 then says it once). For what every rank would work out
    the same from the same input and pay for at start-up, ~36 times over at 72 ranks on 2 cores.
    Every rank must come to it: call it before anything that can fail on one rank alone. Any other
    error of fn's ends rank 0, which ends the job (cli)."""
    if comm.size == 1:
        return fn()
    sent = None
    if comm.rank == 0:
        try:
            sent = (fn(), None)
        except IodlError as exc:
            sent = (None, (str(exc), exc.exit_code))
    value, failure = comm.bcast_object(sent)
    if failure is not None:
        err = IodlError(failure[0])
        err.exit_code = failure[1]
        raise err
    return value


def node_shared_arrays(group, build) -> dict[str, np.ndarray]:
    """build()'s arrays, built by the group's first rank alone and mapped read-only by every rank
    of the group from one /dev/shm file (unlinked once all mapped it): a node holds them once,
    whatever its number of ranks. build() may raise an IodlError: every rank of the group then
    raises it. Without /dev/shm the arrays are sent to each rank instead (each holds a copy)."""

    if group.size == 1:
        return build()
    note = None
    arrays = None
    if group.rank == 0:
        try:
            arrays = build()
        except IodlError as exc:
            note = {"error": str(exc)}
        if note is None:
            layout, offset = [], 0
            for name, a in arrays.items():
                a = np.ascontiguousarray(a)
                layout.append((name, a.dtype.str, a.shape, offset))
                offset += -(-a.nbytes // 64) * 64
            try:
                fd, path = _shared_file(max(offset, 1))
                try:
                    for (name, _d, _s, at) in layout:
                        os.pwrite(fd, memoryview(np.ascontiguousarray(arrays[name])).cast("B"), at)
                finally:
                    os.close(fd)
                note = {"path": path, "layout": layout, "size": max(offset, 1)}
            except OSError:
                note = {"arrays": arrays}   # no /dev/shm here: every rank gets its own copy
    note = group.bcast(note, root=0)
    if "error" in note:
        raise UsageError(note["error"])
    if "arrays" in note:
        return note["arrays"]
    try:
        with open(note["path"], "rb") as f:
            mm = mmap.mmap(f.fileno(), note["size"], access=mmap.ACCESS_READ)
        ok = True
    except OSError:
        ok = False
    ok = bool(group.allreduce(int(ok), "min"))
    if group.rank == 0:
        os.unlink(note["path"])
    if not ok:   # some rank could not map it: send the arrays after all
        return group.bcast(arrays, root=0)
    return {name: np.frombuffer(mm, dtype=np.dtype(dtype), count=int(np.prod(shape, dtype=np.int64)),
                                offset=at).reshape(shape)
            for name, dtype, shape, at in note["layout"]}
