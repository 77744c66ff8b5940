"""A fio job run by iodl: each clone a worker with its own native Engine, reading (or, rw=write, writing) fio's files.

Mapping (docs/fio-compare.md): ioengine -> engine, iodepth -> depth, direct -> O_DIRECT,
rate/rate_iops -> rate_bps (fio's rate_iops x min bs, drain-when-ahead in the engine), time_based/
runtime/ramp_time -> deadlines; per clone, one plan per pass over its files, interleaved per
file_service_type. Workers are threads (the engine releases the GIL); under mpirun the clones are
dealt over ranks and each rank runs its share as threads.
"""
from __future__ import annotations

import os
import resource
import stat
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import IodlError
from ..plan import new_plan  # the engine's row type (numpy only: importable without the engine)
from .jobfile import Job, JobFileError, Percent, Zones
from .layout import FileSpec, clone_files, min_bs, open_input


def _engine_module():
    """The C engine, imported when a run starts (parsing and job checks work without it)."""
    try:
        from .. import engine
    except ImportError as exc:
        raise IodlError(f"iodl's C engine is not built ({exc}); pip install -e . builds it") from None
    return engine


ENGINES = {"libaio": "aio", "io_uring": "uring", "psync": "psync", "sync": "psync", "pvsync": "psync",
           "pvsync2": "psync", "null": "null"}
SYNC_ENGINES = {"psync"}
SERVICE_TYPES = ("roundrobin", "sequential", "random")
MAX_PLAN_ROWS = 1 << 20   # rows per engine call at most (memory: 32 B a row)
PLAN_TARGET_ROWS = 1 << 16   # time_based, unpaced: passes joined into one call up to this many rows
DISTINCT_PASSES = 32         # of which at most this many are drawn anew (Python time before the run)


@dataclass
class JobPlan:
    """What iodl will do for one [job]: everything resolved, nothing left to fio's defaults."""

    job: Job
    engine: str
    depth: int
    submit_batch: int     # iodepth_batch(_submit): requests per submit call, 0 = all that have a slot
    reap_batch: int       # completions taken per reap at most (fio's iodepth_batch_complete_max, after its fix-ups)
    direct: bool
    random: bool
    seq_len: int          # rw=randread:N -> N sequential blocks per random pick; rw=read:N -> hole bytes
    block_sizes: list     # [(size, weight)], weights sum to 1
    align: int
    rate_bps: int
    time_based: bool
    runtime_ns: int
    ramp_ns: int
    startdelay_ns: int
    loops: int
    io_limit: int         # bytes per clone (io_size; 0 = size)
    number_ios: int
    service: str
    service_n: int
    invalidate: bool
    numjobs: int
    seed: int
    files: list = field(default_factory=list)   # per clone: [FileSpec]
    write: bool = False   # rw=write: sequential writes over iodl's own files
    fsync_n: int = 0      # fsync=N: an fsync after every N writes issued (fio io_u.c get_rw_ddir)
    fdatasync_n: int = 0  # fdatasync=N
    end_sync: bool = False  # end_fsync=1 or fsync_on_close=1: each file fsynced when the job's pass ends
    reset: str = ""       # how each side's file starts (layout.reset_for_write), write jobs only

    @property
    def max_bs(self) -> int:
        return max(s for s, _ in self.block_sizes)


def _reject(job: Job, key: str, what: str) -> JobFileError:
    file, line = job.loc(key)
    return JobFileError(f"unsupported {what} in [{job.name}]", file, line)


MAX_CLONES = 4096      # fio's REAL_MAX_JOBS
MAX_FILES = 1 << 20    # files over all clones of one job


def plan_job(job: Job, overrides: dict | None = None, taken: set | None = None, files: bool = True) -> JobPlan:
    """Check a job against what iodl honours and resolve it; raises JobFileError naming file:line.

    `taken`: the job file's shared set of clone file names (layout.clone_names); pass one set to
    every job in file order. `files=False`: the grammar only, nothing looked up on disk (the job
    file as written, before overrides such as --directory).
    """
    from . import options as opts

    # the engine first: an option of an engine iodl lacks is named with that engine
    ioengine = job.get("ioengine", "psync")
    if ioengine not in ENGINES:
        raise _reject(job, "ioengine", f"value 'ioengine={ioengine}' (iodl has {', '.join(ENGINES)})")
    engine = ENGINES[ioengine]
    for key, option in job.where.items():
        value = job.values.get(key)
        why = opts.refusal(key, value, job.values)   # honoured, ignored, at fio's default, or without effect here
        if why:
            raise JobFileError(f"unsupported option '{option.key}' in [{job.name}]: {why}", option.file, option.line)
        if isinstance(value, Zones):
            raise _reject(job, key, f"value '{option.key}={option.value}' (a number of zones; zoned devices are not emulated)")
    rw, _, suffix = job.get("rw", "read").partition(":")
    if rw not in ("read", "randread", "write"):
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}' (iodl runs reads and sequential "
                                 "writes only: random, mixed and trim workloads are not emulated)")
    write = rw == "write"
    if write and suffix:
        # fio keeps writing past the holes until io_size bytes are written (it wraps); iodl's plan stops at the end
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}' (writes with holes are not emulated: fio wraps "
                                 "around the file until size= bytes are written)")
    ddir = 1 if write else 0   # fio's r,w,t values (bs=, rate=...): the write one for a write job
    if write:   # a read job's fsync=/end_fsync=... do nothing, in fio too (should_fsync: writes only)
        sync = str(job.get("sync", "none")).strip()
        if sync not in ("", "0", "none"):
            raise _reject(job, "sync", f"value 'sync={sync}' (O_SYNC/O_DSYNC writes are not emulated)")
        if str(job.get("unified_rw_reporting", "none")).strip() not in ("", "0", "none"):
            raise _reject(job, "unified_rw_reporting", "value (fio then reports writes as 'mixed')")
        if isinstance(job.get("size"), Percent) or not (job.get("size") or job.get("filesize")):
            raise _reject(job, "size", "write job without size= or filesize= (iodl writes only files it lays out, "
                                       "so their size cannot come from what is there)")
    service, _, service_n = job.get("file_service_type", "roundrobin").partition(":")
    if service not in SERVICE_TYPES:
        raise _reject(job, "file_service_type", f"value 'file_service_type={service}'")
    if job.get("rate_process", "linear") != "linear":
        raise _reject(job, "rate_process", f"value 'rate_process={job.values['rate_process']}'")
    if "bssplit" in job.values:
        parts = job.values["bssplit"]
        block_sizes = [(s, p / 100) for s, p in parts[min(ddir, len(parts) - 1)]]
    elif "bsrange" in job.values:
        parts = job.values["bsrange"]
        lo, hi = parts[min(ddir, len(parts) - 1)]
        step = lo
        sizes = list(range(lo, hi + 1, step)) if lo else [hi]
        block_sizes = [(s, 1 / len(sizes)) for s in sizes]
    else:
        block_sizes = [(job.get("bs", [4096] * 3)[ddir], 1.0)]
    if any(s <= 0 for s, _ in block_sizes):
        raise _reject(job, "bs", "value: a block size of 0")
    total = sum(w for _, w in block_sizes) or 1
    block_sizes = [(s, w / total) for s, w in block_sizes]
    try:
        seq_len = int(suffix or 0) if rw == "randread" else (_size(suffix, job) if suffix else 0)
        service_n = int(service_n or 1)
    except (ValueError, TypeError):
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}'") from None
    if not isinstance(seq_len, int) or seq_len < 0 or seq_len >= 1 << 48:
        # fio's ddir_seq_add < 0 reads backwards from the end; iodl's plans only step forwards
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}' (a negative or huge offset increment: "
                                 "iodl reads forwards only)")
    direct_ = bool(job.get("direct", 0))
    if write and direct_ and engine != "null":
        ALIGN = 4096   # the engine's (iodl._native.ALIGN); checked here without importing it
        off = job.get("offset", 0)
        if any(s % ALIGN for s, _ in block_sizes) or (isinstance(off, int) and off % ALIGN) or seq_len % ALIGN:
            raise _reject(job, "bs", f"value: direct=1 writes need block sizes and offsets in multiples of {ALIGN} "
                                     "bytes in iodl's engine")
    rate = job.get("rate", [0, 0, 0])[ddir]
    rate_iops = job.get("rate_iops", [0, 0, 0])[ddir]
    # fio init.c: rate_iops becomes bytes/s of the direction's min bs
    rate_bps = rate or rate_iops * min(s for s, _ in block_sizes)
    direct = bool(job.get("direct", 0))   # buffered=N is stored as direct=1-N where fio parses it (last wins)
    overrides = overrides or {}
    runtime_us = overrides.get("runtime_us", job.get("runtime", 0))
    ramp_us = overrides.get("ramp_us", job.get("ramp_time", 0))
    time_based = bool(job.get("time_based", 0))
    if time_based and not runtime_us:
        time_based = False   # fio: "time_based requires a runtime/timeout setting" and ignores it
    seed = job.get("randseed")
    plan = JobPlan(
        job=job, engine=engine, depth=1 if engine in SYNC_ENGINES else max(1, job.get("iodepth", 1)),
        submit_batch=job.get("iodepth_batch", 1), reap_batch=_reap_batch(job),
        direct=direct, random=rw == "randread", seq_len=seq_len, block_sizes=block_sizes,
        align=job.get("ba", [0])[0] or min_bs(job), rate_bps=rate_bps, time_based=time_based,
        runtime_ns=runtime_us * 1000, ramp_ns=ramp_us * 1000, startdelay_ns=job.get("startdelay", 0) * 1000,
        loops=max(1, job.get("loops", 1)), io_limit=job.get("io_size", 0), number_ios=job.get("number_ios", 0),
        service=service, service_n=max(1, service_n), invalidate=bool(job.get("invalidate", 1)),
        numjobs=max(1, job.get("numjobs", 1)), seed=int(seed) if seed and str(seed).isdigit() else 0x1234,
        write=write, fsync_n=job.get("fsync", 0) if write else 0, fdatasync_n=job.get("fdatasync", 0) if write else 0,
        end_sync=write and bool(job.get("end_fsync", 0) or job.get("fsync_on_close", 0)),
        reset=_reset_mode(job) if write else "",
    )
    if plan.numjobs > MAX_CLONES:
        raise _reject(job, "numjobs", f"value 'numjobs={plan.numjobs}' (fio allows {MAX_CLONES} jobs)")
    if plan.numjobs * max(1, job.get("nrfiles", 1)) > MAX_FILES:
        raise _reject(job, "nrfiles", f"value: numjobs x nrfiles over {MAX_FILES} files")
    if not files:
        return plan
    _check_directory(job)
    plan.files = [clone_files(job, n, taken, null=engine == "null", write=write) for n in range(plan.numjobs)]
    return plan


def _reset_mode(job: Job) -> str:
    """How fio's lay-out leaves a write job's file (filesetup.c extend_file): layout.reset_for_write."""
    if job.get("create_on_open", 0):
        return "empty"
    if job.get("overwrite", 0):
        return "fill"
    mode = str(job.get("fallocate", "native")).strip().lower()
    return {"0": "none", "1": "posix", "truncate": "none"}.get(mode, mode)


def _reap_batch(job: Job) -> int:
    """fio 3.33: iodepth_batch_complete_max (default 0) is raised to iodepth_batch_complete_min
    (default 1) by init.c fixup_options, and td_io_getevents raises a max below the min it waits for
    (at least 1) to that min: so fio reaps one completion per io_getevents by default and refills
    the queue after each, which keeps its depth at iodepth (its `16=100%`)."""
    lo = job.get("iodepth_batch_complete_min", 1)
    hi = max(job.get("iodepth_batch_complete_max", 0), lo)
    return max(1, hi)


def _check_directory(job: Job) -> None:
    """fio (options.c str_directory_cb) refuses a directory= entry that is not a directory (lstat)."""
    from .jobfile import fio_list

    if "directory" not in job.values:
        return
    for entry in fio_list(job.values["directory"]):
        try:
            ok = stat.S_ISDIR(os.lstat(entry).st_mode)
        except OSError:
            ok = False
        if not ok:
            file, line = job.loc("directory")
            raise JobFileError(f"directory '{entry}' of [{job.name}] is not a directory", file, line)


def _size(text: str, job: Job) -> int:
    from .jobfile import parse_size

    return int(parse_size(text, job.get("kb_base", 1024)))


# ---------------------------------------------------------------------------------------------
# Plans: one pass of one clone over its files

def _file_stream(plan: JobPlan, spec: FileSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and lengths of one pass over one file (fio reads whole blocks only)."""
    sizes = np.array([s for s, _ in plan.block_sizes], dtype=np.int64)
    weights = np.array([w for _, w in plan.block_sizes])
    if not plan.random:
        # sequential: lengths drawn per request; stop when the next block does not fit
        n_max = spec.io_size // int(sizes.min()) + 1
        lengths = sizes[rng.choice(len(sizes), n_max, p=weights)] if len(sizes) > 1 else np.full(n_max, sizes[0])
        starts = np.concatenate(([0], np.cumsum(lengths + plan.seq_len)[:-1]))
        keep = starts + lengths <= spec.io_size
        return spec.offset + starts[keep], lengths[keep]
    # random: every align-sized slot once per pass (fio's random map), in a seeded order
    unit = max(plan.align, int(sizes.max()))
    n = spec.io_size // unit
    picks = rng.permutation(n) if n else np.zeros(0, dtype=np.int64)
    if plan.seq_len > 1:
        # randread:N: a new random offset every N requests, the ones between follow sequentially
        picks = picks[: max(1, n // plan.seq_len)]
        picks = (picks[:, None] + np.arange(plan.seq_len)[None, :]).ravel()
        picks = picks[picks < n]
    lengths = sizes[rng.choice(len(sizes), len(picks), p=weights)] if len(sizes) > 1 else np.full(len(picks), sizes[0])
    return spec.offset + picks.astype(np.int64) * unit, lengths


def pass_plan(plan: JobPlan, files: list[FileSpec], rng: np.random.Generator) -> np.ndarray:
    """One pass over a clone's files, interleaved as file_service_type says."""
    streams = [_file_stream(plan, spec, rng) for spec in files]
    counts = np.array([len(o) for o, _ in streams], dtype=np.int64)
    file_ids = np.repeat(np.arange(len(files)), counts)
    index_in_file = np.concatenate([np.arange(c) for c in counts]) if len(counts) else np.zeros(0, np.int64)
    chunk = index_in_file // plan.service_n
    if plan.service == "sequential":
        order = np.arange(len(file_ids))
    elif plan.service == "roundrobin":
        # N requests from each file in turn; files that are finished drop out of the rotation
        order = np.lexsort((file_ids, chunk))
    else:
        # random file for each next chunk: a uniform shuffle of the chunk slots, chunks of a file in order
        n_chunks = (counts + plan.service_n - 1) // plan.service_n
        starts = np.concatenate(([0], np.cumsum(n_chunks)[:-1]))
        slots = np.repeat(np.arange(len(files)), n_chunks)
        rng.shuffle(slots)
        by_file = np.argsort(slots, kind="stable")
        nth = np.empty(len(slots), dtype=np.int64)       # slot p serves chunk nth[p] of file slots[p]
        nth[by_file] = np.arange(len(slots)) - np.repeat(starts, n_chunks)
        turn = np.empty(len(slots), dtype=np.int64)      # turn of each (file, chunk), chunks numbered by file
        turn[starts[slots] + nth] = np.arange(len(slots))
        order = np.lexsort((index_in_file, turn[np.repeat(starts, counts) + chunk]))
    out = new_plan(len(order))
    out["file"] = file_ids[order]
    out["offset"] = np.concatenate([o for o, _ in streams])[order] if len(order) else 0
    out["length"] = np.concatenate([ln for _, ln in streams])[order] if len(order) else 0
    return out


# ---------------------------------------------------------------------------------------------
# Workers

@dataclass
class CloneResult:
    job_index: int   # position of the [job] in the file
    jobnum: int
    bytes: int = 0
    ios: int = 0
    window_ns: int = 0
    cpu_s: float = 0.0
    hist: np.ndarray | None = None        # lat: submit call -> completion (fio's lat_ns)
    clat_hist: np.ndarray | None = None   # submit call returned -> completion (fio's clat_ns)
    slat_hist: np.ndarray | None = None   # submit call entered -> returned (fio's slat_ns; empty for psync)
    depth: np.ndarray | None = None
    error: str = ""
    measure_ns: tuple[int, int] = (0, 0)   # the measured window on the engine's clock: (ramp end, end or 0)
    first_ns: int = 0                      # first and last counted completion
    last_ns: int = 0
    write: bool = False                    # a write job's clone (bytes, ios are writes)
    sync_hist: np.ndarray | None = None    # fsync=N / fdatasync=N syncs (fio's JSON "sync" section)
    syncs: int = 0
    end_sync_hist: np.ndarray | None = None   # end_fsync / fsync_on_close: one per file (fio does them, unreported)
    end_syncs: int = 0
    ending: bool = False                   # the run in progress is the job's end syncs

    # iodl.cursor.Counters: the cursor counts a clone's runs as a rank's
    def engine_args(self, t0_ns: int) -> dict:
        args = {"window_start_ns": self.measure_ns[0], "window_end_ns": self.measure_ns[1],
                "clat_hist": self.clat_hist, "slat_hist": self.slat_hist}
        if self.write:
            args["fsync_hist"] = self.end_sync_hist if self.ending else self.sync_hist
        return args

    def add(self, st: dict, t0_ns: int) -> None:
        syncs = st.get("fsyncs", 0)
        if not st["ios"] and not syncs:
            return
        self.first_ns = self.first_ns or st["t_start_ns"]
        self.last_ns = max(self.last_ns, st["t_end_ns"])   # a counted sync ends the measured time too
        self.bytes += st["bytes"]
        self.ios += st["ios"]
        self.depth += np.asarray(st["depth"], dtype=np.int64)
        if self.ending:
            self.end_syncs += syncs
        else:
            self.syncs += syncs


def run_clone(plan: JobPlan, index: int, jobnum: int, start: threading.Barrier | None = None) -> CloneResult:
    """Run one clone as fio would: ramp, then the measured window; returns its counters."""
    engine_mod = _engine_module()
    from .. import histogram

    res = CloneResult(index, jobnum, hist=histogram.empty(), clat_hist=histogram.empty(), slat_hist=histogram.empty(),
                      depth=np.zeros(histogram.DEPTH_BUCKETS, np.int64), write=plan.write,
                      sync_hist=histogram.empty(), end_sync_hist=histogram.empty())
    files = plan.files[jobnum]
    rng = np.random.default_rng([plan.seed, jobnum])
    fds = []
    try:
        if plan.engine == "null":
            # fio's null engine is diskless: it never opens its files; the engine needs a valid fd
            fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in files]
        elif plan.write:
            from .layout import open_own_for_write

            for f in files:   # iodl's own marked files only (layout.check_files refused anything else)
                fds.append(open_own_for_write(f, plan.direct))
        else:
            fds = [open_input(f.path, plan.direct) for f in files]
        with engine_mod.open_engine(plan.engine, depth=plan.depth, block_size=plan.max_bs, direct=plan.direct,
                                    rate_bps=plan.rate_bps, submit_batch=min(plan.submit_batch, plan.depth),
                                    reap_batch=min(plan.reap_batch, plan.depth)) as engine:
            if start is not None:
                start.wait()
            _drive(plan, engine, fds, rng, res)
    except threading.BrokenBarrierError:
        pass   # another worker failed before the start; its error is reported
    except (OSError, IodlError) as exc:
        res.error = str(exc)
        if start is not None:
            start.abort()
    finally:
        for fd in fds:
            os.close(fd)
    return res


def _passes_per_run(plan: JobPlan, pass_rows: int, left_ns: int) -> int:
    """How many passes one engine call gets (time_based: fio wraps its files without draining).

    fio, time_based, resets a file's position or random map when it reaches the end and goes on
    (io_u.c get_next_seq_offset / get_next_rand_block): its queue stays full and its rate schedule
    runs on. Each Engine.run drains at its end and restarts its rate schedule, so a time_based
    clone gets enough passes in one call to last to the deadline (a rate limit says how many), or
    at least PLAN_TARGET_ROWS when unpaced. Buffered reads with invalidate keep one pass per call:
    the fadvise between passes is fio's loop_cache_invalidate.
    """
    if not plan.time_based or (plan.invalidate and not plan.direct) or not pass_rows:
        return 1
    if plan.rate_bps:
        mean_bs = sum(s * w for s, w in plan.block_sizes)
        want = int(plan.rate_bps / mean_bs * left_ns / 1e9 * 1.05) + plan.depth + 1
    else:
        want = PLAN_TARGET_ROWS
    want = min(want, MAX_PLAN_ROWS)
    return max(1, -(-want // pass_rows))


def _drive(plan: JobPlan, engine, fds, rng, res: CloneResult) -> None:
    """Ramp, then the measured window [ramp_end, end): one Engine.run spans the ramp's end, so the
    queue stays full across it as in fio, and only completions inside the window count.

    fio's own counters differ at the edges (docs/fio-compare.md): it ends a clone's ramp at that
    clone's first completion after ramp_time (io_u.c should_account -> ramp_time_over), counts in
    io_bytes what the ramp left in flight but not in total_ios (counted at issue). These matter
    only when a request's queue time is comparable to the ramp (a throttled mount, deep queues).
    """
    from .._native import monotonic_ns as now
    from ..cursor import Cursor

    t0 = now() + plan.startdelay_ns
    while now() < t0:
        time.sleep((t0 - now()) / 1e9)
    ramp_end = t0 + plan.ramp_ns
    end = ramp_end + plan.runtime_ns if plan.runtime_ns else 0
    # one run spans the ramp's end: the queue stays full across the boundary, as in fio
    res.measure_ns = (ramp_end, end)
    cursor = Cursor(engine, res, t0)
    names = [f.path for f in plan.files[res.jobnum]]
    cpu0 = _cpu()
    budget_bytes = plan.io_limit or 0
    budget_ios = plan.number_ios or 0
    passes = 0
    sync = _SyncState()

    def finish():
        if plan.write:
            _end_syncs(plan, cursor, fds, names, res, sync, ramp_end)
        return _finish(res, cpu0)

    while True:
        if not plan.time_based and passes >= plan.loops and not budget_bytes:
            break
        if plan.invalidate and not plan.direct:
            # fio's invalidate=1 drops each file's cached pages every time it opens it (each pass)
            for fd in fds:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if not plan.files[res.jobnum]:
            break   # a clone whose names its first clone took reads nothing (fio's add_file)
        rows = pass_plan(plan, plan.files[res.jobnum], rng)
        if not len(rows):
            raise IodlError(f"[{plan.job.name}] has nothing to read (files smaller than one block?)")
        passes += 1
        k = _passes_per_run(plan, len(rows), (end - now()) if end else 0)
        if k > 1:
            # up to DISTINCT_PASSES freshly drawn passes, repeated to k (small files: many passes)
            block = [rows] + [pass_plan(plan, plan.files[res.jobnum], rng) for _ in range(min(k, DISTINCT_PASSES) - 1)]
            n = len(rows)
            rows = np.concatenate(block)
            if k > len(block):
                rows = np.tile(rows, -(-k // len(block)))[: k * n]
            passes += k - 1
        if plan.write:
            # fio between loops (observed with strace, fio 3.33): a loop that is not the last issues the
            # sync due after its last write, and the next loop, after reopening its files, issues the
            # due sync again before its first write (should_fsync's last_was_sync starts afresh)
            last = plan.time_based or budget_bytes or passes >= plan.loops
            rows = _write_rows(plan, rows, sync, leading=passes > 1 and not plan.time_based, trailing=not last)
        while len(rows):
            if end and now() >= end:
                return finish()
            part = rows[:MAX_PLAN_ROWS]
            if budget_ios and now() >= ramp_end:
                part = part[: max(0, budget_ios - res.ios)]
            st = cursor.run(fds, part, names, deadline_ns=end)
            if st["ios"]:
                if budget_bytes and res.bytes >= budget_bytes and not plan.time_based:
                    return finish()
                if budget_ios and res.ios >= budget_ios:
                    return finish()
            rows = rows[st["done"]:]
        if plan.write and not plan.time_based:
            # fio runs do_io once per loop: its end_fsync / fsync_on_close syncs close every pass
            _end_syncs(plan, cursor, fds, names, res, sync, ramp_end)
    return _finish(res, cpu0)


@dataclass
class _SyncState:
    """fio's io_issues[DDIR_WRITE] and last_was_sync for one clone (io_u.c get_rw_ddir, should_fsync)."""

    writes: int = 0
    last_was_sync: bool = False


def _write_rows(plan: JobPlan, rows: np.ndarray, sync: _SyncState, leading: bool = False,
                trailing: bool = False) -> np.ndarray:
    """Reads turned into writes, with fio's syncs put in: before a write, when the writes issued so
    far are a non-zero multiple of fsync=N (else of fdatasync=N) and the last thing done was not a
    sync, fio issues the sync first (io_u.c get_rw_ddir), on the file of that next write. So no sync
    follows the job's last write (its end syncs do), and the count runs on across passes.
    `leading`: a loop after the first (its due sync is issued whatever came before); `trailing`: a
    loop that is not the last (the sync due after its last write is issued at its end)."""
    from ..plan import OP_FDATASYNC, OP_FSYNC, OP_WRITE

    rows = rows.copy()
    rows["op"] = OP_WRITE
    n = len(rows)
    if not n or not (plan.fsync_n or plan.fdatasync_n):
        sync.writes += n
        sync.last_was_sync = sync.last_was_sync and not n
        return rows
    before = sync.writes + np.arange(n + 1, dtype=np.int64)   # writes issued before write i (i = n: after all)
    fs = (before % plan.fsync_n == 0) if plan.fsync_n else np.zeros(n + 1, bool)
    fd = ((before % plan.fdatasync_n == 0) & ~fs) if plan.fdatasync_n else np.zeros(n + 1, bool)
    need = (before > 0) & (fs | fd)
    if sync.last_was_sync and not leading:
        need[0] = False
    need[n] = need[n] and trailing
    at = np.nonzero(need)[0]
    out = new_plan(n + len(at))
    shift = np.searchsorted(at, np.arange(n), side="right")   # syncs placed before or at write i
    out[np.arange(n) + shift] = rows
    where = at + np.arange(len(at))
    out["op"][where] = np.where(fs[at], OP_FSYNC, OP_FDATASYNC)
    out["file"][where] = rows["file"][np.minimum(at, n - 1)]
    sync.writes += n
    sync.last_was_sync = bool(need[n])
    return out


def _end_syncs(plan: JobPlan, cursor, fds, names, res: CloneResult, sync: _SyncState, ramp_end: int) -> None:
    """end_fsync=1 / fsync_on_close=1: fio fsyncs each of the clone's files when do_io ends (backend.c,
    unless the last thing it did was a sync), and counts that time in the job's runtime (so in its
    bandwidth) but not in its "sync" statistics. iodl does the same: one fsync row per file, timed
    into the measured window (which then runs on past a time_based deadline, as fio's runtime does)."""
    from ..plan import OP_FSYNC

    if not plan.end_sync or sync.last_was_sync or not fds:
        return
    rows = new_plan(len(fds))
    rows["file"] = np.arange(len(fds))
    rows["op"] = OP_FSYNC
    window = res.measure_ns
    res.measure_ns = (ramp_end, 0)
    res.ending = True
    try:
        cursor.run(fds, rows, names)
    finally:
        res.ending = False
        res.measure_ns = window
    sync.last_was_sync = True


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_THREAD)   # this worker thread only: the engine runs in it
    return ru.ru_utime + ru.ru_stime


def _finish(res: CloneResult, cpu0) -> None:
    res.window_ns = max(0, res.last_ns - res.first_ns)
    res.cpu_s = _cpu() - cpu0 if cpu0 is not None else 0.0


def run_clones(plans: dict[int, JobPlan], comm) -> list[CloneResult]:
    """Run every clone of the given jobs at once (fio starts a group's jobs together); gathered on rank 0.

    Clones are dealt over ranks round-robin; each rank runs its share as threads.
    """
    every = [(i, n) for i, p in plans.items() for n in range(p.numjobs)]
    mine = every[comm.rank::comm.size]
    barrier = threading.Barrier(len(mine)) if mine else None
    results: list[CloneResult | None] = [None] * len(mine)

    _engine_module()   # fail here, once, if the engine is missing

    def work(slot, index, jobnum):
        try:
            results[slot] = run_clone(plans[index], index, jobnum, barrier)
        except BaseException as exc:   # reported below as one line, never a thread traceback
            results[slot] = CloneResult(index, jobnum, error=f"{type(exc).__name__}: {exc}")
            barrier.abort()

    comm.barrier()
    threads = [threading.Thread(target=work, args=(s, i, n), name=f"{plans[i].job.name}.{n}")
               for s, (i, n) in enumerate(mine)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gathered = comm.gather(results)
    if comm.rank != 0:
        return []
    flat = [r for part in gathered for r in part]
    errors = [r.error for r in flat if r.error]
    if errors:
        raise IodlError(errors[0])
    return flat
