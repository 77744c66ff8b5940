"""checkpoint: every rank writes its share of a model's state, fsyncs it, and later reads it
back, through the same cursor and engines as every read pattern (`iodl checkpoint`, and
train-sync's in-training checkpoints: `iodl read --checkpoint-root`).

What each rank writes is the model's arithmetic (iodl/checkpoint.py); where it goes and what may
be removed, the root's store (iodl/patterns/checkpoint_store.py). The figures (docs/numbers.md,
"Checkpoints"): a rank's time runs from the barrier that starts a round to its last fsync (write)
or last read (restore) returning, opening and closing its files included; a round's duration is
the longest rank's, its bandwidth the round's bytes over that duration, and MLPerf Storage's
throughput the slowest rank's bytes over its own time (reduced in iodl/reduce.py).

Safety (docs/design.md): every checkpoint file is created exclusively, never through a link.
"""
from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np

from .. import _native, cache, engines, limits, reduce
from .. import checkpoint
from ..comm import collective, failed_alone, failures_line
from ..cursor import Cursor
from ..engine import open_for_read, open_for_write
from ..errors import IodlError, UsageError
from ..mlperf import checkpoint_view
from ..plan import OP_FSYNC, OP_WRITE, fd_budget, new_plan, shard_plan
from ..records import record
from ..result import CHECKPOINT as SCHEMA
from ..s3root import is_s3
from ..stop import STOP_GRACE_S
from .base import Pattern, Run
from .checkpoint_share import OpCounters, RankShare
from .checkpoint_store import complete, latest, new_checkpoint, prepare_root, read_gap_s

BLOCK_SIZE = 1 << 20   # request size of checkpoint writes and reads unless told (iodl checkpoint --block-size)
IODEPTH = 8            # requests in flight per rank unless told (--iodepth)


# ---- what one rank writes

def write_plan(sizes: list[int], block_size: int, fsync: bool, direct: bool) -> np.ndarray:
    """Each file written whole in block_size requests, then (fsync) an fsync of it: what a
    checkpointing framework's save does file by file. Direct: lengths are whole 4 KiB blocks."""
    sizes = on_disk_sizes(sizes, direct)
    data = shard_plan(sizes, block_size)
    data["op"] = OP_WRITE
    if not fsync:
        return data
    # one fsync row after each file's last data row
    ends = np.cumsum(np.bincount(data["file"].astype(np.int64), minlength=len(sizes)))
    plan = new_plan(len(data) + len(sizes))
    at = ends + np.arange(1, len(sizes) + 1) - 1           # where each file's fsync row lands
    mask = np.ones(len(plan), dtype=bool)
    mask[at] = False
    plan[mask] = data
    plan["file"][at] = np.arange(len(sizes))
    plan["op"][at] = OP_FSYNC
    return plan


# ---- one rank's rounds

def _groups(n: int) -> list[range]:
    """The files of a share in groups this process may hold open at once (plan.fd_budget)."""
    size = max(1, fd_budget())
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _round(cursor, counters: OpCounters, directory: str, share: RankShare, open_file, plan_for) -> None:
    """One round of this rank's share: its files opened a group at a time (open_file(path, i);
    the null engine does no I/O and opens nothing), run through the cursor (plan_for(group)),
    closed. The round's time, from now (the caller has just left the barrier) to the last
    request's (or fsync's) return, opening and closing included, and its bytes go to counters."""
    t0, before = _native.monotonic_ns(), counters.bytes
    null = cursor.engine.name == "null"
    try:
        for group in _groups(len(share.names)):
            paths = [os.path.join(directory, share.names[i]) for i in group]
            fds: list[int] = []
            try:
                for path, i in zip(paths, group):
                    fds.append(-1 if null else open_file(path, i))
                cursor.run(fds, plan_for(group), paths)
            finally:
                for fd in fds:
                    if fd >= 0:
                        os.close(fd)
    finally:
        counters.round_s.append((_native.monotonic_ns() - t0) / 1e9)
        counters.round_bytes.append(counters.bytes - before)


def write_round(cursor, counters: OpCounters, directory: str, share: RankShare, fsync: bool, direct: bool) -> None:
    """Write this rank's share into directory, every file created new, each fsync'd unless told not to."""
    _round(cursor, counters, directory, share, lambda path, _i: open_for_write(path, direct),
           lambda group: write_plan([share.sizes[i] for i in group], cursor.engine.block_size, fsync, direct))


def read_round(cursor, counters: OpCounters, directory: str, share: RankShare, direct: bool) -> None:
    """Read this rank's share back whole, each file refused unless a regular file of the size written."""
    sizes = on_disk_sizes(share.sizes, direct)
    _round(cursor, counters, directory, share, lambda path, i: open_for_read(path, direct, sizes[i]),
           lambda group: shard_plan([sizes[i] for i in group], cursor.engine.block_size))


def on_disk_sizes(sizes: list[int], direct: bool) -> list[int]:
    """What a share's files hold once written: O_DIRECT writes whole 4 KiB blocks."""
    return [-(-s // _native.ALIGN) * _native.ALIGN for s in sizes] if direct else list(sizes)


# ---- the run resolved once, and one rank's checkpoints

@record(frozen=True, kw_only=True)
class CheckpointRunSpec:
    """What every rank runs, decided before any I/O. writes and reads None: the workload's;
    model and layout are filled in by the pattern's configure (or in_training)."""
    workload: object             # the workload.Workload with a [model]
    ranks: int                   # MPI ranks: fewer than the model's TP x PP x DP is MLPerf's subset mode
    roots: tuple[str, ...]       # absolute; ranks map to them round-robin (rank m leads mount m)
    writes: int | None = None
    reads: int | None = None
    fsync: bool = True           # False: --no-fsync (the workload's fsync = false turns it off too)
    direct: bool = False
    engine: str = "auto"
    iodepth: int = IODEPTH
    block_size: int = BLOCK_SIZE
    drop_caches: bool = False
    endpoints: tuple[str, ...] = ()   # s3:// roots: the endpoints (ranks round-robin); () for directories
    part_size: int = 0           # s3:// roots: a multipart upload's part size (iodl/s3checkpoint.py)
    addressing: str = "path"     # s3:// roots: s3root.ADDRESSING as the run resolved it
    model: checkpoint.CheckpointModel | None = None
    layout: checkpoint.Layout | None = None

    @property
    def signature(self) -> dict:
        """What a checkpoint must match to be read back: the model, its layout, how it was written."""
        return {"model": self.model.name, "ranks": self.layout.ranks, "data": self.layout.data, "direct": self.direct}


def _check_roots(roots, ranks: int, what: str) -> None:
    if len(roots) > ranks:
        raise UsageError(f"{len(roots)} {what} for {ranks} rank(s): every root needs a rank")


def in_training(spec, ranks: int) -> CheckpointRunSpec | None:
    """train-sync's in-training checkpoints of a read run (a runspec.RunSpec), or None when it
    has no --checkpoint-root (docs/checkpoint.md)."""
    if not spec.checkpoint_roots:
        return None
    if spec.pattern != "train-sync":
        raise UsageError(f"--checkpoint-root: in-training checkpoints are train-sync's, not {spec.pattern}'s")
    _check_roots(spec.checkpoint_roots, ranks, "checkpoint roots")
    wl = spec.workload
    cm = wl.checkpoint_model()
    if spec.endpoints and is_s3(spec.checkpoint_roots[0]):
        # a bucket (the s3 extra, loaded for buckets only): multipart PUTs of DLIO's part size, as
        # `iodl checkpoint --root s3://` writes them; the dataset may be on files or in a bucket
        from ..s3checkpoint import configure
        ck = CheckpointRunSpec(workload=wl, ranks=ranks, roots=spec.checkpoint_roots, endpoints=spec.endpoints,
                               addressing=spec.addressing)
        return configure(ck, 0, 0, cm, checkpoint.layout(cm, ranks), "--checkpoint-root")
    # written for real even when the run reads with null (no dataset) or asyncio (reads only)
    engine = engines.choose("auto" if spec.engine in ("null", "asyncio") else spec.engine, spec.direct, writes=True)
    return CheckpointRunSpec(workload=wl, ranks=ranks, roots=tuple(os.path.abspath(r) for r in spec.checkpoint_roots),
                             writes=0, reads=0, fsync=wl.checkpoint.fsync, direct=spec.direct, engine=engine,
                             iodepth=engines.depth(engine, IODEPTH), model=cm, layout=checkpoint.layout(cm, ranks))


def _leader_of_mount(rank: int, n_roots: int) -> bool:
    return rank < n_roots    # ranks map to roots round-robin: rank m is the first of mount m


def _files(spec: CheckpointRunSpec, rank: int) -> tuple[RankShare, list[str], int]:
    """(this rank's share, and when it leads its mount every file name its mount's ranks write and
    the bytes they take on disk, else ([], 0))."""
    def share(r: int) -> RankShare:
        files = checkpoint.rank_files(spec.model, r, spec.layout.ranks)
        return RankShare([n for n, _b in files], [b for _n, b in files])

    names, need = [], 0
    if _leader_of_mount(rank, len(spec.roots)):
        for r in range(rank, spec.ranks, len(spec.roots)):
            theirs = share(r)
            names += theirs.names
            need += sum(on_disk_sizes(theirs.sizes, spec.direct))
    return share(rank), names, need


class Checkpoints:
    """One rank's checkpoints: its share of each, written into (and read back from) its mount's
    root, counted in `counters` (write and read). Every method is collective: all ranks call it.

    A mount's leader records every file name its mount's ranks write in the store before writing
    (so that what iodl wrote can be removed later) and checks their bytes on disk against the
    free space before every write."""

    def __init__(self, comm, spec: CheckpointRunSpec):
        self.comm, self.spec = comm, spec
        self.mount = comm.rank % len(spec.roots)
        self.root = spec.roots[self.mount]
        self.leader = _leader_of_mount(comm.rank, len(spec.roots))
        self.share, self.names, self.need = _files(spec, comm.rank)
        self.store = collective(comm, lambda: prepare_root(self.root) if self.leader else None)
        host = comm.hostname()
        self.counters = {op: OpCounters(rank=comm.rank, host=host, mount=self.mount) for op in ("write", "read")}
        self.engine = engines.open_engine(spec.engine, depth=spec.iodepth, block_size=spec.block_size,
                                          direct=spec.direct, cache_check=not spec.direct)
        self.t0 = _native.monotonic_ns()

    def _leaders_say(self, fn) -> str:
        """What fn() returns on this rank's mount leader (a checkpoint's name), or its one-line
        error on every rank."""
        mine = collective(self.comm, lambda: fn() if self.leader else None)
        return self.comm.allgather(mine if self.leader else None)[self.mount]

    def write(self, closing=None) -> None:
        """One checkpoint: every rank its files, fsync'd, between two barriers (the second `closing`
        when given: TrainingCheckpoints')."""
        spec = self.spec
        # the null engine writes nothing: no free space to ask for (a plan's dry run on any disk)
        need = 0 if self.engine.name == "null" else self.need
        name = self._leaders_say(lambda: new_checkpoint(self.root, self.store, spec.signature, self.names, need))
        self.comm.barrier()
        c = self.counters["write"]
        write_round(Cursor(self.engine, c, self.t0), c, os.path.join(self.root, name), self.share, spec.fsync,
                    spec.direct)
        (closing or self.comm.barrier)()
        if self.leader:
            complete(self.root, self.store)

    def read(self, rounds: int) -> None:
        """Read the latest complete checkpoint back `rounds` times (caches dropped first when asked)."""
        name = self._leaders_say(lambda: latest(self.store, self.spec.signature, self.root))
        if self.spec.drop_caches and self.comm.node_comm().rank == 0:
            cache.drop_caches()
        c = self.counters["read"]
        for _ in range(rounds):
            self.comm.barrier()
            read_round(Cursor(self.engine, c, self.t0), c, os.path.join(self.root, name), self.share, self.spec.direct)

    def close(self) -> None:
        self.engine.close()


def open_checkpoints(comm, spec: CheckpointRunSpec):
    """One rank's checkpoints under spec's roots: Checkpoints for directories, s3checkpoint's for buckets."""
    if spec.endpoints:   # a bucket (the s3 extra, loaded for buckets only)
        from ..s3checkpoint import S3Checkpoints
        return S3Checkpoints(comm, spec)
    return Checkpoints(comm, spec)


class TrainingCheckpoints:
    """train-sync's in-training checkpoints (training.run_steps' after_step): after step
    `every_steps` x k, or at the end of epoch after_epoch and every every_epochs epochs after it
    (DLIO's schedule); the seconds the checkpoint took, 0.0 when none was due."""

    def __init__(self, checkpoints: Checkpoints, spec):
        self.ck, self.spec = checkpoints, spec

    def due(self, step: int, steps_per_epoch: int) -> bool:
        if self.spec.every_steps:
            return step % self.spec.every_steps == 0
        if step % steps_per_epoch:
            return False
        epoch = step // steps_per_epoch          # the epoch that just ended, counted from 1
        return epoch >= self.spec.after_epoch and (epoch - self.spec.after_epoch) % self.spec.every_epochs == 0

    def __call__(self, step: int, steps_per_epoch: int) -> float:
        if not self.due(step, steps_per_epoch):
            return 0.0
        t0 = _native.monotonic_ns()
        # closed at the step barrier: the ranks that wrote least wait there for the last writer and wake with
        # it. comm.barrier's sleep-poll, built for waits at set-up, saw the end up to 5 % of the checkpoint
        # late; the writer then waited that long at the next step's barrier, steps the checkpoint never touched.
        self.ck.write(closing=self.ck.comm.step_sync)
        self.ck.comm.step_sync()   # and the leader's marking it complete in the store is in every rank's time
        return (_native.monotonic_ns() - t0) / 1e9


def reduce_ops(comm, counters: dict, spec: CheckpointRunSpec) -> dict | None:
    """Each operation's figures on rank 0 (reduce.reduce_checkpoint); None on the other ranks."""
    # a read's cache hits are measured unless O_DIRECT bypasses the cache or null reads nothing (or it is a bucket)
    reduced = reduce.reduce_checkpoint(comm, counters, spec.roots, spec.fsync,
                                       not spec.direct and spec.engine not in ("null", "s3"))
    if spec.endpoints:
        from ..s3checkpoint import add_figures
        add_figures(comm, counters, spec, reduced)
    return reduced


# ---- the pattern

class Checkpoint(Pattern):
    """`iodl checkpoint`'s pattern: the writes, then the reads of the latest checkpoint.

    Its spec is a CheckpointRunSpec rather than a read run's RunSpec, its counters a pair of
    OpCounters rather than run.result, and its driver is execute() below, not iodl/runner.py (which
    opens a dataset): a write pattern is registered in cmd/checkpoint.py's WRITE_PATTERNS, apart from
    the read patterns `iodl read --pattern` offers."""
    name = "checkpoint"

    def configure(self, spec: CheckpointRunSpec) -> CheckpointRunSpec:
        wl = spec.workload
        cm = wl.checkpoint_model()
        lay = checkpoint.layout(cm, spec.ranks)
        writes = spec.writes if spec.writes is not None else wl.checkpoint.writes
        reads = spec.reads if spec.reads is not None else wl.checkpoint.reads
        for flag, value in (("--writes", writes), ("--reads", reads)):
            limits.check_range(flag, value, 0, 10_000, integer=True)
        if not writes and not reads:
            raise UsageError("nothing to do: --writes and --reads are both 0")
        _check_roots(spec.roots, spec.ranks, "roots")
        # a checkpoint is written in large requests: a tiny one would turn a GB into a day of syscalls
        limits.check_range("--block-size", spec.block_size, 4096, limits.MAX_BLOCK_SIZE, integer=True)
        if spec.endpoints:   # a bucket: the s3 extra's own checks (an optional dependency, loaded for buckets only)
            from ..s3checkpoint import configure
            return configure(spec, writes, reads, cm, lay)
        limits.check_block_size("--block-size", spec.block_size, spec.direct)
        limits.check_range("--iodepth", spec.iodepth, 1, limits.MAX_DEPTH, integer=True)
        engine = engines.choose(spec.engine, spec.direct, writes=True)
        iodepth = engines.depth(engine, spec.iodepth)
        limits.check_memory(f"--iodepth {iodepth} x --block-size {spec.block_size}",
                            limits.buffers_bytes(iodepth, spec.block_size))
        if spec.drop_caches:
            cache.check_can_drop()
        return dataclasses.replace(spec, writes=writes, reads=reads, fsync=wl.checkpoint.fsync and spec.fsync,
                                   engine=engine, iodepth=iodepth, model=cm, layout=lay)

    def run(self, run: Run) -> bool:
        spec = run.spec
        ck = open_checkpoints(run.comm, spec)
        run.part = ck.counters   # what was counted before a stop is handed over all the same
        try:
            for _ in range(spec.writes):
                ck.write()
            if spec.reads:
                ck.read(spec.reads)
        except KeyboardInterrupt:
            return True
        finally:
            ck.close()
        return False

    def summarize(self, spec: CheckpointRunSpec, parts, reduced: dict, partial: bool) -> dict:
        """Rank 0: the whole result (docs/numbers.md, "Checkpoints") from reduce_ops' figures;
        parts are not needed (reduce_ops gathers each rank's line)."""
        lay = spec.layout
        result = {"schema": SCHEMA, "pattern": self.name, "engine": spec.engine, "direct": spec.direct,
                  "iodepth": spec.iodepth, "block_size": spec.block_size, "ranks": spec.ranks,
                  "hosts": reduced["hosts"], "workload": spec.workload.to_dict(), "model": spec.model.name,
                  "subset": lay.subset, "full_ranks": lay.full_ranks(spec.model.parallelism), "fsync": spec.fsync,
                  "drop_caches": spec.drop_caches, "roots": list(spec.roots), "partial": partial,
                  "checkpoint": reduced["checkpoint"]}
        if spec.endpoints:
            result.update(endpoints=list(spec.endpoints), part_size=spec.part_size)
        gap = read_gap_s(spec.roots[0]) if not spec.writes and not spec.endpoints else None
        result["mlperf"] = checkpoint_view(result, spec.writes, spec.reads, gap, cache.meminfo().get("MemTotal", 0))
        return result


CHECKPOINT = Checkpoint()


def execute(comm, spec: CheckpointRunSpec, stop) -> dict:
    """`iodl checkpoint --root` on every rank: the pattern run, its counters reduced; the result on
    rank 0, on the others whether the run was partial and whether this rank failed. stop: True once
    the user asked to stop. A rank whose request fails for good tells the others (they stop as on
    Ctrl-C); the result is then partial, its "error" the failure, named by rank."""
    run = Run(comm=comm, spec=spec, paths=None, sizes=np.empty(0, dtype=np.int64),
              mount=comm.rank % len(spec.roots), n_mounts=len(spec.roots), stop=stop)
    # a rank whose request fails for good tells the others, which stop as on Ctrl-C
    notices = comm.stop_notices(lambda: os.kill(os.getpid(), signal.SIGINT))
    failure = None
    try:
        stopped = CHECKPOINT.run(run)
    except (IodlError, OSError) as exc:
        # a request that failed for good (a file or an object): what ran before it is the result,
        # marked partial
        if run.part is None or not failed_alone(exc):
            if notices is not None:
                notices.close()
            raise
        stopped, failure = True, (f"rank {comm.rank}: {exc}" if comm.size > 1 else str(exc))
        if notices is not None:
            notices.tell()
    if failure is not None or stop():
        comm.give_up_after(STOP_GRACE_S)
    partial = bool(comm.allreduce(int(stopped or stop()), "max"))
    failures = [f for f in comm.allgather(failure) if f]   # every rank: how many notices it was sent
    comm.all_answered()
    reduced = reduce_ops(comm, run.part, spec)
    if notices is not None:
        notices.close(len(failures) - (failure is not None))
    if comm.rank != 0:
        return {"partial": partial, "failed": failure is not None}   # what this rank's exit status says
    result = CHECKPOINT.summarize(spec, [], reduced, partial)
    if failures:
        result["error"] = failures_line(failures)
    return result
