"""Checkpoint writes and restores: every rank writes its share of a model's state, fsyncs it,
and later reads it back, through the same cursor and engines as every read pattern.

The figures (docs/numbers.md, "Checkpoints"): a rank's time runs from the barrier that starts
a round to its last fsync (write) or last read (restore) returning, opening and closing its
files included; a round's duration is the longest rank's, its bandwidth the round's bytes over
that duration, and MLPerf Storage's throughput the slowest rank's bytes over its own time.

Safety (docs/design.md): a checkpoint root is a directory iodl created, or an empty one it
adopted, marked by its store file; every checkpoint file is created exclusively, never through
a link; an older checkpoint is removed only when the store says iodl wrote it, and only the
files iodl wrote in it.
"""
from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, field

import numpy as np

from . import histogram, reduce
from .errors import UsageError
from .metrics import RankResult
from .plan import OP_FSYNC, OP_WRITE, new_plan, shard_plan

STORE = "iodl-checkpoints.json"
STORE_SCHEMA = "iodl.checkpoints/1"
_MAX_STORE = 1 << 26


# ---- the root and what iodl wrote in it

def read_store(root: str) -> dict | None:
    path = os.path.join(root, STORE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_STORE:
            raise UsageError(f"{path}: not an iodl checkpoint store")
        try:
            doc = json.loads(f.read())
        except ValueError:
            raise UsageError(f"{path}: unreadable checkpoint store") from None
    if not isinstance(doc, dict) or doc.get("schema") != STORE_SCHEMA or not isinstance(doc.get("checkpoints"), list):
        raise UsageError(f"{path}: not an iodl checkpoint store")
    return doc


def prepare_root(root: str) -> dict:
    """The root's store, creating the root (or adopting an empty directory, e.g. a mount point)
    when new. A dataset root, a file, a link or a folder of someone else's files is refused."""
    from .data.files import write_json
    from .data.layout import MANIFEST

    try:
        st = os.lstat(root)
    except FileNotFoundError:
        parent = os.path.dirname(root.rstrip(os.sep)) or "."
        if not os.path.isdir(parent):
            raise UsageError(f"--root {root}: parent directory {parent} does not exist") from None
        try:
            os.mkdir(root)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"--root {root}: cannot create it: {exc.strerror}") from None
        st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--root {root}: not a directory" + (" (a symlink: iodl never writes through links)"
                                                             if stat.S_ISLNK(st.st_mode) else ""))
    if not os.access(root, os.W_OK | os.X_OK):
        raise UsageError(f"--root {root}: not writable")
    store = read_store(root)
    if store is not None:
        return store
    if os.path.lexists(os.path.join(root, MANIFEST)):
        raise UsageError(f"--root {root} is an iodl dataset; checkpoints need a root of their own")
    if [n for n in os.listdir(root) if n != "lost+found"]:
        raise UsageError(f"--root {root} holds files that iodl did not write (no {STORE}); "
                         "choose an empty or new directory")
    store = {"schema": STORE_SCHEMA, "next": 1, "checkpoints": []}
    write_json(os.path.join(root, STORE), store)
    return store


def save_store(root: str, store: dict) -> None:
    from .data.files import write_json

    write_json(os.path.join(root, STORE), store)


def _entry_path(root: str, entry: dict) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name.startswith("ckpt-") or os.sep in name:
        raise UsageError(f"{os.path.join(root, STORE)}: a checkpoint named {name!r} is not one iodl writes")
    return os.path.join(root, name)


def remove_checkpoint(root: str, entry: dict) -> int:
    """Unlink the files iodl wrote for entry (names from its store entry, regular files only,
    never following a link) and then its directory if empty; the bytes freed."""
    path = _entry_path(root, entry)
    freed = 0
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    try:
        for name in entry.get("files", []):
            if not isinstance(name, str) or "/" in name or name in (".", ".."):
                continue
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                freed += st.st_blocks * 512
    finally:
        os.close(dfd)
    try:
        os.rmdir(path)
    except OSError:
        pass   # something iodl did not write is in it: left alone
    return freed


# ---- what one rank writes

@dataclass
class RankShare:
    """The files of one rank's share of a checkpoint: names (in the checkpoint's directory) and sizes."""
    names: list[str]
    sizes: list[int]

    @property
    def bytes(self) -> int:
        return int(sum(self.sizes))


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


@dataclass
class OpCounters(RankResult):
    """A rank's counters of one operation (write or read) over all rounds: RankResult's, plus
    the fsyncs and each round's time and bytes."""
    fsync_hist: np.ndarray = field(default_factory=histogram.empty)
    fsyncs: int = 0
    fsync_ns: int = 0
    round_s: list = field(default_factory=list)
    round_bytes: list = field(default_factory=list)

    def engine_args(self, t0_ns: int) -> dict:
        return dict(super().engine_args(t0_ns), fsync_hist=self.fsync_hist)

    def add(self, stats: dict, t0_ns: int) -> None:
        super().add(stats, t0_ns)
        self.fsyncs += stats.get("fsyncs", 0)
        self.fsync_ns += stats.get("fsync_ns", 0)


# ---- one rank's rounds

def _groups(n: int) -> list[range]:
    """The files of a share in groups this process may hold open at once (plan.fd_budget)."""
    from .plan import fd_budget

    size = max(1, fd_budget())
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _round(cursor, counters: OpCounters, directory: str, share: RankShare, open_file, plan_for) -> None:
    """One round of this rank's share: its files opened a group at a time (open_file(path, i);
    the null engine does no I/O and opens nothing), run through the cursor (plan_for(group)),
    closed. The round's time, from now (the caller has just left the barrier) to the last
    request's (or fsync's) return, opening and closing included, and its bytes go to counters."""
    from . import _native

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
    from .engine import open_for_write

    _round(cursor, counters, directory, share, lambda path, _i: open_for_write(path, direct),
           lambda group: write_plan([share.sizes[i] for i in group], cursor.engine.block_size, fsync, direct))


def read_round(cursor, counters: OpCounters, directory: str, share: RankShare, direct: bool) -> None:
    """Read this rank's share back whole, each file refused unless a regular file of the size written."""
    from .engine import open_for_read

    sizes = on_disk_sizes(share.sizes, direct)
    _round(cursor, counters, directory, share, lambda path, i: open_for_read(path, direct, sizes[i]),
           lambda group: shard_plan([sizes[i] for i in group], cursor.engine.block_size))


def on_disk_sizes(sizes: list[int], direct: bool) -> list[int]:
    """What a share's files hold once written: O_DIRECT writes whole 4 KiB blocks."""
    from . import _native

    return [-(-s // _native.ALIGN) * _native.ALIGN for s in sizes] if direct else list(sizes)


# ---- the run: every rank, from set-up to the reduced figures

BLOCK_SIZE = 1 << 20   # request size of checkpoint writes and reads unless told (iodl checkpoint --block-size)
IODEPTH = 8            # requests in flight per rank unless told (--iodepth)


@dataclass
class Plan:
    """What a run does, decided before any I/O (the same on every rank)."""
    roots: list[str]
    writes: int
    reads: int
    fsync: bool
    direct: bool
    engine: str
    iodepth: int
    block_size: int
    drop_caches: bool
    signature: dict          # what a checkpoint must match to be read back: model, ranks, direct


def _leader_of_mount(rank: int, n_roots: int) -> bool:
    return rank < n_roots    # ranks map to roots round-robin: rank m is the first of mount m


def _new_checkpoint(root: str, store: dict, signature: dict, names: list[str], need: int) -> str:
    """Mount leader: forget and remove what iodl wrote before (only the latest checkpoint is
    kept: a restore reads it), check that the next one fits, then record and make its directory."""
    for entry in store["checkpoints"]:
        remove_checkpoint(root, entry)
    store["checkpoints"] = []
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        save_store(root, store)
        raise UsageError(f"--root {root}: a checkpoint of this mount's ranks needs {need:,} bytes, "
                         f"the filesystem has {free:,} free")
    number = int(store.get("next", 1))
    name = f"ckpt-{number:06d}"
    store.update(next=number + 1, checkpoints=[{"name": name, "state": "writing", "files": names, **signature}])
    save_store(root, store)
    path = os.path.join(root, name)
    try:
        os.mkdir(path)
    except FileExistsError:
        raise UsageError(f"{path}: exists, and the checkpoint store does not say iodl wrote it; "
                         "iodl will not write there") from None
    return name


def latest(store: dict, signature: dict, root: str) -> str:
    """The name of the last complete checkpoint that matches signature, or a one-line refusal."""
    done = [e for e in store["checkpoints"] if e.get("state") == "complete"]
    if not done:
        raise UsageError(f"--root {root}: no complete checkpoint to read (write one first: --writes 1)")
    entry = done[-1]
    theirs = {k: entry.get(k) for k in signature}
    if theirs != signature:
        diff = ", ".join(f"{k} {theirs[k]!r} (this run: {signature[k]!r})" for k in signature if theirs[k] != signature[k])
        raise UsageError(f"--root {root}: its checkpoint {entry['name']} was written with another {diff}")
    return entry["name"]


def signature(cm, lay, direct: bool) -> dict:
    """What a checkpoint must match to be read back: the model, its layout, how it was written."""
    return {"model": cm.name, "ranks": lay.ranks, "data": lay.data, "direct": direct}


def layout_for(comm, cm, roots: list[str], direct: bool):
    """(this rank's share, its mount's file names and on-disk bytes when it leads the mount,
    else ([], 0), the layout) of a model's checkpoint over this run's ranks (checkpoint.layout:
    fewer ranks than TP*PP*DP is MLPerf's subset mode)."""
    from . import checkpoint

    lay = checkpoint.layout(cm, comm.size)

    def share(rank: int) -> RankShare:
        files = checkpoint.rank_files(cm, rank, lay.ranks)
        return RankShare([n for n, _b in files], [b for _n, b in files])

    names, need = [], 0
    if _leader_of_mount(comm.rank, len(roots)):
        for r in range(comm.rank, comm.size, len(roots)):
            theirs = share(r)
            names += theirs.names
            need += sum(on_disk_sizes(theirs.sizes, direct))
    return share(comm.rank), names, need, lay


class Checkpoints:
    """One rank's checkpoints: its share of each, written into (and read back from) its mount's
    root, counted in `counters` (write and read). Every method is collective: all ranks call it.

    names, need: on a mount's leader, every file name its mount's ranks write (recorded in the
    store before writing, so that what iodl wrote can be removed later) and the bytes they take
    on disk (checked against the free space before every write)."""

    def __init__(self, comm, plan: Plan, share: RankShare, names: list[str], need: int):
        from . import _native
        from .comm import collective
        from .engines import open_engine

        self.comm, self.plan, self.share, self.names, self.need = comm, plan, share, names, need
        self.mount = comm.rank % len(plan.roots)
        self.root = plan.roots[self.mount]
        self.leader = _leader_of_mount(comm.rank, len(plan.roots))
        self.store = collective(comm, lambda: prepare_root(self.root) if self.leader else None)
        host = comm.hostname()
        self.counters = {op: OpCounters(rank=comm.rank, host=host, mount=self.mount) for op in ("write", "read")}
        self.engine = open_engine(plan.engine, depth=plan.iodepth, block_size=plan.block_size, direct=plan.direct,
                                  cache_check=not plan.direct)
        self.t0 = _native.monotonic_ns()

    def _leaders_say(self, fn) -> str:
        """What fn() returns on this rank's mount leader (a checkpoint's name), or its one-line
        error on every rank."""
        from .comm import collective

        mine = collective(self.comm, lambda: fn() if self.leader else None)
        return self.comm.allgather(mine if self.leader else None)[self.mount]

    def write(self) -> None:
        """One checkpoint: every rank its files, fsync'd, between two barriers."""
        from .cursor import Cursor

        name = self._leaders_say(lambda: _new_checkpoint(self.root, self.store, self.plan.signature, self.names,
                                                         self.need))
        self.comm.barrier()
        c = self.counters["write"]
        write_round(Cursor(self.engine, c, self.t0), c, os.path.join(self.root, name), self.share, self.plan.fsync,
                    self.plan.direct)
        self.comm.barrier()
        if self.leader:
            # when it was complete: a later read-only run says how long after it it began (MLPerf's 30 s)
            self.store["checkpoints"][-1].update(state="complete", completed_at=time.time())
            save_store(self.root, self.store)

    def read(self, rounds: int) -> None:
        """Read the latest complete checkpoint back `rounds` times (caches dropped first when asked)."""
        from . import cache
        from .cursor import Cursor

        name = self._leaders_say(lambda: latest(self.store, self.plan.signature, self.root))
        if self.plan.drop_caches and self.comm.node_comm().rank == 0:
            cache.drop_caches()
        c = self.counters["read"]
        for _ in range(rounds):
            self.comm.barrier()
            read_round(Cursor(self.engine, c, self.t0), c, os.path.join(self.root, name), self.share,
                       self.plan.direct)

    def close(self) -> None:
        self.engine.close()


def execute(comm, plan: Plan, share: RankShare, names: list[str], need: int, stop) -> dict | None:
    """`iodl checkpoint --root`: the writes, then the reads; rank 0 gets the reduced figures."""
    ck = Checkpoints(comm, plan, share, names, need)
    partial = False
    try:
        for _ in range(plan.writes):
            ck.write()
        if plan.reads:
            ck.read(plan.reads)
    except KeyboardInterrupt:
        partial = True
    finally:
        ck.close()
    partial = bool(comm.allreduce(int(partial or stop()), "max"))
    return reduce_ops(comm, ck.counters, plan, partial)


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
        from . import _native

        if not self.due(step, steps_per_epoch):
            return 0.0
        t0 = _native.monotonic_ns()
        self.ck.write()
        return (_native.monotonic_ns() - t0) / 1e9


def reduce_ops(comm, counters: dict, plan: Plan, partial: bool) -> dict | None:
    """Each operation's figures on rank 0: the total, per mount, per rank (reduce.checkpoint_block)."""
    out = {}
    for op, c in counters.items():
        rounds = int(comm.allreduce(len(c.round_s), "max"))
        if not rounds:
            out[op] = None
            continue
        rows = reduce.reduce_checkpoint_op(comm, c, len(plan.roots), rounds)
        fsync = plan.fsync if op == "write" else None
        parts = comm.gather({"rank": c.rank, "host": c.host, "mount": c.mount, "round_s": c.round_s,
                             "round_bytes": c.round_bytes, **({"fsync_ns": c.fsync_ns} if fsync is not None else {})})
        if comm.rank != 0:
            continue
        per_mount, everyone = rows
        cache = op == "read" and not plan.direct and plan.engine != "null"   # null reads nothing
        total = reduce.checkpoint_block(everyone, fsync, cache)
        total["mounts"] = [{"path": path, "ranks": [p["rank"] for p in parts if p["mount"] == m],
                            **reduce.checkpoint_block(per_mount[m], fsync, cache)} for m, path in enumerate(plan.roots)]
        total["per_rank"] = [reduce.checkpoint_rank(p) for p in parts]
        out[op] = total
    if comm.rank != 0:
        return None
    hosts = sorted({p["host"] for p in (out.get("write") or out.get("read") or {}).get("per_rank", [])})
    return {"checkpoint": out, "hosts": hosts, "partial": partial}
