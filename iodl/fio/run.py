"""A fio job run by iodl: each clone a worker with its own native Engine, reading (or, rw=write, writing) fio's files.

Mapping (docs/fio-compare.md): ioengine -> engine, iodepth -> depth, direct -> O_DIRECT,
rate/rate_iops -> rate_bps (fio's rate_iops x min bs, drain-when-ahead in the engine), time_based/
runtime/ramp_time -> deadlines; per clone, one plan per pass over its files, interleaved per
file_service_type. Workers are threads (the engine releases the GIL); under mpirun the clones are
dealt over ranks and each rank runs its share as threads.
"""
from __future__ import annotations

import functools
import os
import resource
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field, replace

import numpy as np

from .. import _native, engines, histogram
from ..errors import IodlError
from ..cursor import Cursor
from ..plan import OP_FDATASYNC, OP_FSYNC, OP_READ, OP_WRITE, new_plan  # the engine's row type and ops
from .jobfile import Job, JobFileError, Percent, Zones, fio_list, parse_size
from .layout import FileSpec, clone_files, existing, open_input, open_own_for_write, renew_own
from .logs import LogWriter, empty_records, log_spec
from . import policy
from ..records import record


# fio's metadata engines (engines/fileoperations.c): one create, stat or unlink per file, timed alone
# (fio's clat), in C (native/fileops.c); name -> file_ops op (filestat's by stat_type)
META_ENGINES = {"filecreate": 0, "filestat": 1, "filedelete": 4}
STAT_TYPES = {"stat": 1, "lstat": 2, "statx": 3}
SYNC_ENGINES = {name for name, e in engines.ENGINES.items() if e.serial}
SERVICE_TYPES = ("roundrobin", "sequential", "random")
MAX_PLAN_ROWS = 1 << 20   # rows per engine call at most (memory: 32 B a row)
PLAN_TARGET_ROWS = 1 << 16   # time_based, unpaced: passes joined into one call up to this many rows
DISTINCT_PASSES = 32         # of which at most this many are drawn anew (Python time before the run)
FILE_OPS_CHUNK = 4096        # metadata engines: files per C call (a stop is seen between calls)


@record
class JobPlan:
    """What iodl will do for one [job]: everything resolved, nothing left to fio's defaults."""

    job: Job
    engine: str
    depth: int
    submit_batch: int     # iodepth_batch(_submit): requests per submit call, 0 = all that have a slot
    reap_batch: int       # completions taken per reap at most (fio's iodepth_batch_complete_max, after its fix-ups)
    userspace_reap: bool  # libaio reaps from the mmapped ring, not with io_getevents (see _userspace_reap)
    fixed_buffers: bool   # io_uring registers its buffers (fio's fixedbufs; off by default, as fio)
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
    unlink_each_loop: bool = False  # each clone's files removed and made again, empty, between loops (_unlink_each_loop)
    reset: str = ""       # how each side's file starts (layout.reset_for_write), write jobs only
    read_pct: int = 100   # of the I/Os, the reads' percentage: 100 reads only, 0 writes only, else rwmixread
    write_block_sizes: list = field(default_factory=list)   # the writes' [(size, weight)] (bs=r,w): block_sizes else
    rand_pct: tuple = (100, 100)   # percentage_random (read, write): of a random job's I/Os, those at a random offset
    dist: tuple = ("random", 0.0, -1.0)   # random_distribution: (kind, theta/h/sigma, center or -1)
    randommap: bool = True   # every block once per pass (fio's random map; off: norandommap, ba != bs, a distribution)
    content: dict | None = None   # a write job's buffer contents as fio's (Engine.set_content)
    logs: object = None   # logs.LogSpec: fio's write_bw_log/write_lat_log/write_iops_log, None when none asked
    first_thread: int = 1   # fio's thread number of clone 0 (1-based over the job file): its logs' ".N"

    @property
    def reads(self) -> bool:
        return self.read_pct > 0

    @property
    def mixed(self) -> bool:
        return 0 < self.read_pct < 100

    def sizes_of(self, ddir: int) -> list:
        return self.write_block_sizes if ddir and self.write_block_sizes else self.block_sizes

    @property
    def max_bs(self) -> int:
        return max(s for s, _ in self.block_sizes + self.write_block_sizes)


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
    # the engine first: an option of an engine iodl lacks is named with that engine
    ioengine = job.get("ioengine", "psync")
    engine = engines.from_fio(ioengine)
    if engine is None:
        raise _reject(job, "ioengine", f"value 'ioengine={ioengine}' (iodl has {', '.join(engines.fio_names())})")
    for key, option in job.where.items():
        value = job.values.get(key)
        why = policy.refusal(key, value, job.values)   # honoured, ignored, at fio's default, or without effect here
        if why:
            raise JobFileError(f"unsupported option '{option.key}' in [{job.name}]: {why}", option.file, option.line)
        if isinstance(value, Zones):
            raise _reject(job, key, f"value '{option.key}={option.value}' (a number of zones; zoned devices are not emulated)")
    rw, _, suffix = job.get("rw", "read").partition(":")
    rw = "rw" if rw == "readwrite" else rw
    if rw not in RW_MODES:
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}' (iodl runs reads, writes and their mixes: "
                                 "trim workloads are not emulated)")
    read_pct = _read_pct(job, rw)
    if engine in META_ENGINES:
        _check_meta(job, rw)
    # the job writes (its files must be iodl's own); a metadata engine's rw= only names the direction
    # its files per second are reported in
    write = read_pct < 100 and engine not in META_ENGINES
    random = rw.startswith("rand")
    ddir = 0 if read_pct else 1   # fio's r,w,t values (bs=, rate=...): the write one for a write job
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
    block_sizes = _block_sizes(job, ddir)
    write_block_sizes = _block_sizes(job, 1) if 0 < read_pct < 100 else []
    try:
        seq_len = int(suffix or 0) if random else (_size(suffix, job) if suffix else 0)
        service_n = int(service_n or 1)
    except (ValueError, TypeError):
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}'") from None
    dist = _distribution(job) if random else ("random", 0.0, -1.0)
    if not isinstance(seq_len, int) or seq_len < 0 or seq_len >= 1 << 48:
        # fio's ddir_seq_add < 0 reads backwards from the end; iodl's plans only step forwards
        raise _reject(job, "rw", f"value 'rw={job.values['rw']}' (a negative or huge offset increment: "
                                 "iodl reads forwards only)")
    direct_ = bool(job.get("direct", 0))
    if write and direct_ and engine != "null":
        ALIGN = _native.ALIGN
        off = [job.get(k, 0) for k in ("offset", "offset_increment")]
        if any(s % ALIGN for s, _ in block_sizes + write_block_sizes) or any(isinstance(o, int) and o % ALIGN for o in off) \
                or (not random and seq_len % ALIGN):
            raise _reject(job, "bs", f"value: direct=1 writes need block sizes and offsets in multiples of {ALIGN} "
                                     "bytes in iodl's engine")
    if 0 < read_pct < 100:
        for key in ("rate", "rate_iops"):
            if any(job.get(key, [0, 0, 0])[:2]):
                # fio paces each direction on its own schedule (io_u.c rate_ddir); the engine has one
                raise _reject(job, key, f"option '{key}' in a job that mixes reads and writes (per-direction "
                                        "rates are not emulated)")
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
    if not job.get("randrepeat", 1) and not seed:
        seed = str(int.from_bytes(os.urandom(4), "little"))   # fio: a new sequence every run
    align = job.get("ba", [0, 0, 0])
    align = align[ddir] if isinstance(align, list) else align
    plan = JobPlan(
        job=job, engine=engine, depth=1 if engine in SYNC_ENGINES else max(1, job.get("iodepth", 1)),
        submit_batch=job.get("iodepth_batch", 1), reap_batch=_reap_batch(job), userspace_reap=_userspace_reap(job),
        fixed_buffers=bool(job.get("fixedbufs", 0)),
        direct=direct, random=random, seq_len=seq_len, block_sizes=block_sizes,
        align=align or min(s for s, _ in block_sizes), rate_bps=rate_bps, time_based=time_based,
        runtime_ns=runtime_us * 1000, ramp_ns=ramp_us * 1000, startdelay_ns=job.get("startdelay", 0) * 1000,
        loops=max(1, job.get("loops", 1)), io_limit=job.get("io_size", 0), number_ios=job.get("number_ios", 0),
        service=service, service_n=max(1, service_n), invalidate=bool(job.get("invalidate", 1)),
        numjobs=max(1, job.get("numjobs", 1)), seed=int(seed) if seed and str(seed).isdigit() else 0x1234,
        write=write, fsync_n=job.get("fsync", 0) if write else 0, fdatasync_n=job.get("fdatasync", 0) if write else 0,
        end_sync=write and bool(job.get("end_fsync", 0) or job.get("fsync_on_close", 0)),
        reset=_reset_mode(job, read_pct) if write else "",
        read_pct=read_pct, write_block_sizes=write_block_sizes, rand_pct=_rand_pct(job) if random else (0, 0),
        dist=dist, randommap=not job.get("norandommap", 0) and dist[0] == "random",
    )
    plan.content = _content(job, min(s for s, _ in plan.sizes_of(1)), bool(read_pct)) if write else None
    plan.logs = log_spec(job)
    if align and align != min(s for s, _ in block_sizes):
        plan.randommap = False   # fio init.c: "Any use of blockalign= turns off randommap"
    if random and _lfsr(job, plan):
        plan.randommap = True

    plan.unlink_each_loop = _unlink_each_loop(job, plan)
    if plan.numjobs > MAX_CLONES:
        raise _reject(job, "numjobs", f"value 'numjobs={plan.numjobs}' (fio allows {MAX_CLONES} jobs)")
    if plan.numjobs * max(1, job.get("nrfiles", 1)) > MAX_FILES:
        raise _reject(job, "nrfiles", f"value: numjobs x nrfiles over {MAX_FILES} files")
    if not files:
        return plan
    _check_directory(job)
    plan.files = [clone_files(job, n, taken, null=engine == "null", write=write) for n in range(plan.numjobs)]
    return plan


def _unlink_each_loop(job: Job, plan: JobPlan) -> bool:
    """fio 3.33 unlink_each_loop (backend.c thread_main): before each loop after the first, each of the
    clone's files is unlinked, and the loop's open (O_CREAT) makes it again, empty, with no lay-out; the
    last loop's files stay (unlink=1 removes them). A time_based job runs one loop (fio wraps its files
    inside it), as does a job with loops=1 and io_size at most its size: no effect. A job that reads fails in fio at its
    second loop (open: ENOENT; a mixed job's reads of the new empty file: EIO): refused."""
    size = job.get("size")
    one_loop = plan.loops <= 1 and (not plan.io_limit or (isinstance(size, int) and plan.io_limit <= size))
    if not job.get("unlink_each_loop", 0) or plan.time_based or one_loop \
            or plan.engine == "null":   # fio's null engine makes no files (iodl's opens /dev/null)
        return False
    if plan.reads:
        raise _reject(job, "unlink_each_loop", "option 'unlink_each_loop' in a job that reads (fio's next loop "
                                               "reads the file it removed and fails: ENOENT, or EIO when mixed)")
    return True


def _check_meta(job: Job, rw: str) -> None:
    """What iodl runs of a metadata engine: each file once (filestat: `loops` times), reported as
    fio does (engines/fileoperations.c init: reads if the job reads at all, else writes)."""
    engine = job.get("ioengine")
    for key in ("time_based", "unlink_each_loop"):
        if job.get(key, 0):
            raise _reject(job, key, f"option '{key}' with ioengine={engine} (iodl does each file once)")
    if job.get("loops", 1) > 1 and engine != "filestat":
        # fio's second loop reopens the files it created (no O_EXCL) or fails to unlink them again
        raise _reject(job, "loops", f"value 'loops={job.get('loops')}' with ioengine={engine} "
                                    "(iodl creates or deletes each file once)")
    stat_type = job.get("stat_type", "stat")
    if stat_type not in STAT_TYPES:
        raise _reject(job, "stat_type", f"value 'stat_type={stat_type}'")


RW_MODES = ("read", "randread", "write", "randwrite", "rw", "randrw")
DISTRIBUTIONS = {"random": None, "zipf": 1.1, "pareto": 0.2, "normal": 0.0, "gauss": 0.0}   # fio's defaults


def _read_pct(job: Job, rw: str) -> int:
    """Of the I/Os, the reads' percentage: rwmixread, or 100 - rwmixwrite, whichever fio parsed last
    (options.c str_rwmix_read_cb/str_rwmix_write_cb each set both); fio's default is 50."""
    if rw in ("read", "randread"):
        return 100
    if rw in ("write", "randwrite"):
        return 0
    given = [(job.loc(k), k) for k in ("rwmixread", "rwmixwrite") if k in job.values]
    if not given:
        return 50
    (_, key) = max(given, key=lambda g: g[0][1])
    value = int(job.values[key])
    if not 0 <= value <= 100:
        raise _reject(job, key, f"value '{key}={value}' (0 to 100)")
    return value if key == "rwmixread" else 100 - value


def _rand_pct(job: Job) -> tuple:
    """percentage_random for reads and writes (fio's r,w,t split; one value for all)."""
    v = job.get("percentage_random", 100)
    r, w = (v[0], v[1 if len(v) > 1 else 0]) if isinstance(v, list) else (v, v)
    if not (0 <= r <= 100 and 0 <= w <= 100):
        raise _reject(job, "percentage_random", f"value 'percentage_random={job.where['percentage_random'].value}'")
    return int(r), int(w)


def _lfsr(job: Job, plan: JobPlan) -> bool:
    """random_generator=lfsr: whether it orders this job's random offsets. fio's shift register runs
    once through the file's blocks (size / the smallest bs), each once, and it keeps no random map
    beside it (filesetup.c init_random_map, io_u.c __get_next_rand_offset): with one block size and
    blockalign at it, that is the random map's order, each block once per pass, norandommap written or
    not. tausworthe (the default) and tausworthe64 only change which uniform draws fio makes: iodl's
    own are as good. The distributions draw their blocks their own way: there lfsr is unused."""
    gen = str(job.get("random_generator", "tausworthe")).strip().lower()
    if gen in ("tausworthe", "tausworthe64"):
        return False
    if gen != "lfsr":
        raise _reject(job, "random_generator", f"value 'random_generator={gen}' (fio refuses it)")
    if plan.dist[0] != "random":
        return False
    sizes = {s for s, _ in plan.block_sizes + plan.write_block_sizes}
    if len(sizes) > 1 or plan.align != min(sizes):
        # fio then issues I/Os of other lengths, or at blockalign steps, from the register's block
        # numbers: overlapping ones that the random map's order does not make
        raise _reject(job, "random_generator", "value 'random_generator=lfsr' with block sizes that vary or a "
                                               "blockalign unlike bs (iodl's order is the random map's)")
    return True


def _distribution(job: Job) -> tuple:
    """random_distribution as fio 3.33 parses it (options.c str_random_distribution_cb):
    KIND[:VALUE[:CENTER]], VALUE zipf's theta (default 1.1, not 1), pareto's h (0 < h < 1, default
    0.2), normal's deviation in percent of the file (0 <= sigma < 100, default 0)."""
    text = str(job.get("random_distribution", "random")).strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in DISTRIBUTIONS:
        raise _reject(job, "random_distribution", f"value 'random_distribution={text}' (iodl has random, zipf, "
                                                  "pareto, normal: zoned distributions are not emulated)")
    if kind == "random":
        return ("random", 0.0, -1.0)
    value, center = DISTRIBUTIONS[kind], -1.0
    try:
        parts = [float(x) for x in rest.split(":")] if rest else []
    except ValueError:
        raise _reject(job, "random_distribution", f"value 'random_distribution={text}'") from None
    if parts:
        value = parts[0]
    if len(parts) > 1:
        center = parts[1]
    ok = {"zipf": value != 1.0, "pareto": 0 < value < 1}.get(kind, 0 <= value < 100)
    if not ok or (center != -1 and not 0 <= center <= 1):
        raise _reject(job, "random_distribution", f"value 'random_distribution={text}' (fio refuses it)")
    return ("normal" if kind == "gauss" else kind, value, center)


CONTENT_OPTIONS = ("buffer_compress_percentage", "buffer_compress_chunk", "dedupe_percentage", "buffer_pattern",
                   "zero_buffers", "refill_buffers", "scramble_buffers")


def _content(job: Job, min_write: int, reads: bool) -> dict | None:
    """What a write job's buffers hold, as fio fills them (init.c fixup_options, io_u.c fill_io_buffer).
    With no option: fio's default, random bytes once per buffer, then the offset and time scrambled into
    every 512 bytes of each write; no refill, also after a read into the buffer (a mixed job writes back
    what it read, scrambled, as fio does)."""
    if str(job.get("dedupe_mode", "repeat")).strip() not in ("repeat", ""):
        raise _reject(job, "dedupe_mode", "value (dedupe_mode=working_set is not emulated)")
    compress = int(job.get("buffer_compress_percentage", 0))
    dedupe = int(job.get("dedupe_percentage", 0))
    if not (0 <= compress <= 100 and 0 <= dedupe <= 100):
        raise _reject(job, "buffer_compress_percentage" if compress > 100 else "dedupe_percentage", "value (0 to 100)")
    zero = bool(job.get("zero_buffers", 0))
    refill = bool(job.get("refill_buffers", 0))
    scramble = bool(job.get("scramble_buffers", 1))
    pattern = _pattern(job)
    # fio's option callbacks (options.c): buffer_pattern turns scrambling and zeroing off and refills only
    # when the job reads or compresses; dedupe_percentage turns refill on; either compression option
    # marks the job compressing (TD_F_COMPRESS), which never scrambles
    compressing = "buffer_compress_percentage" in job.values or "dedupe_percentage" in job.values
    if pattern:
        scramble = zero = False
        refill = bool(compress) or reads
    if dedupe:
        refill = True
    if compress == 100:   # fio init.c: all zeros (or the pattern), as zero_buffers
        zero, compress = True, 0
    elif compress and "refill_buffers" not in job.values:
        refill = True   # fio turns refill_buffers on for compression unless the job says otherwise
    # fio scrambles (offset and time in every 512 bytes) unless zero_buffers is written in the job
    # (scramble_buffers=1 written too: it scrambles anyway), or the job compresses
    explicit = "scramble_buffers" in job.values and bool(job.get("scramble_buffers"))
    scramble = scramble and (explicit or not (zero and "zero_buffers" in job.values)) and not compressing
    return {"compress_pct": compress, "chunk": int(job.get("buffer_compress_chunk", 512)), "dedupe_pct": dedupe,
            "pattern": pattern, "zero": zero, "refill": refill, "scramble": scramble, "min_write": min_write}


def _pattern(job: Job) -> bytes:
    """buffer_pattern as fio's parse_and_fill_pattern reads its common forms: 0xHEX (bytes as written),
    "a string" (quoted), and their concatenation with '|'; other forms are refused by name."""
    text = str(job.get("buffer_pattern", "") or "").strip()
    out = b""
    for part in [p.strip() for p in text.split("|") if p.strip()]:
        if part.lower().startswith("0x") and len(part) > 2:
            digits = part[2:]
            try:
                out += bytes.fromhex(("0" if len(digits) % 2 else "") + digits)
            except ValueError:
                raise _reject(job, "buffer_pattern", f"value 'buffer_pattern={text}'") from None
        elif len(part) >= 2 and part[0] == part[-1] and part[0] in "'\"":
            out += part[1:-1].encode()
        else:
            raise _reject(job, "buffer_pattern", f"value 'buffer_pattern={text}' (iodl reads 0xHEX and \"strings\")")
    return out


def _block_sizes(job: Job, ddir: int) -> list:
    """[(size, weight)] of one direction (fio's r,w values of bs, bsrange, bssplit), weights summing to 1."""
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
    return [(s, w / total) for s, w in block_sizes]


def number_threads(plans: dict) -> None:
    """fio numbers every clone of the job file from 1, in file order (its logs' ".N"): each plan's first."""
    n = 1
    for i in sorted(plans):
        plans[i].first_thread = n
        n += plans[i].numjobs


def _reset_mode(job: Job, read_pct: int = 0) -> str:
    """How fio's lay-out leaves a write job's file (filesetup.c extend_file): layout.reset_for_write.
    A job that also reads gets its file written whole, as fio lays out every file a job reads."""
    if read_pct:
        return "fill"
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


def _userspace_reap(job: Job) -> bool:
    """fio 3.33 engines/libaio.c: a reap reads the mmapped completion ring only when the job sets
    userspace_reap and iodepth_batch_complete_min=0 (then it polls the ring); otherwise every reap is
    an io_getevents call, also with userspace_reap set. iodl's aio engine does the same work (its own
    `iodl read` keeps reading the ring when completions are there: a syscall saved per reap)."""
    return bool(job.get("userspace_reap", 0)) and job.get("iodepth_batch_complete_min", 1) == 0


def _check_directory(job: Job) -> None:
    """fio (options.c str_directory_cb) refuses a directory= entry that is not a directory (lstat)."""
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
    return int(parse_size(text, job.get("kb_base", 1024)))


# ---------------------------------------------------------------------------------------------
# Plans: one pass of one clone over its files

GOLDEN_RATIO_64 = np.uint64(0x61C8864680B583EB)   # fio hash.h __hash_u64: a rank's block is rank x this
ZIPF_MAX_GEN = 10_000_000                          # fio lib/zipf.c: zeta(n) summed over 10M terms at most


@functools.lru_cache(maxsize=64)
def _zeta(n: int, theta: float) -> float:
    """fio zipf_update: sum of (1/i)^theta for i = 1..min(n, 10M), in chunks (bounded memory)."""
    total, step = 0.0, 1 << 20
    for lo in range(1, min(n, ZIPF_MAX_GEN) + 1, step):
        i = np.arange(lo, min(lo + step, min(n, ZIPF_MAX_GEN) + 1), dtype=np.float64)
        total += float(np.sum((1.0 / i) ** theta))
    return total


def _rand32(rng: np.random.Generator, k: int) -> np.ndarray:
    """k of fio's __rand (tausworthe, 32 bits), as uint64."""
    return rng.integers(0, 1 << 32, k, dtype=np.uint64)


def distribution_blocks(kind: str, value: float, center: float, nranges: int, k: int, rng: np.random.Generator,
                        rand_off: int) -> np.ndarray:
    """k block numbers in [0, nranges) drawn as fio 3.33 draws them (lib/zipf.c zipf_next, pareto_next;
    lib/gauss.c gauss_next), vectorised: the rank (0 = hottest) is hashed (x GOLDEN_RATIO_64, mod 2^64),
    so the hot blocks are spread over the file, then offset by rand_off (random, or the center) mod nranges."""
    n = max(1, int(nranges))
    frand_max = float((1 << 32) - 1)
    if kind == "zipf":
        theta = value
        zetan, zeta2 = _zeta(n, theta), 1.0 + 0.5 ** theta
        alpha = 1.0 / (1.0 - theta)
        eta = (1.0 - (2.0 / n) ** (1.0 - theta)) / (1.0 - zeta2 / zetan) if n > 1 else 0.0
        u = _rand32(rng, k).astype(np.float64) / frand_max
        rz = u * zetan
        with np.errstate(invalid="ignore", over="ignore"):
            far = 1 + np.floor(n * np.power(np.maximum(eta * u - eta + 1.0, 0.0), alpha))
        val = np.where(rz < 1.0, 1.0, np.where(rz < 1.0 + 0.5 ** theta, 2.0, far))
        rank = (np.minimum(val, 2.0 ** 63) - 1).astype(np.uint64)
    elif kind == "pareto":
        u = _rand32(rng, k).astype(np.float64) / frand_max
        rank = np.floor((n - 1) * np.power(u, np.log(value) / np.log(1.0 - value))).astype(np.uint64)
    else:   # normal (fio 3.33's gauss: the mean of 12 uniform draws, plus a uniform deviation of width sigma% of n)
        draws = _rand32(rng, 12 * k).reshape(k, 12) % np.uint64(n + 1)
        total = (draws.sum(axis=1) + np.uint64(11)) // np.uint64(12)
        stddev = min(int(np.ceil(n * value / 100.0)), n // 2) if value else 0
        if stddev:
            dev = (stddev * (_rand32(rng, k).astype(np.float64) / float(1 << 32))).astype(np.int64) - stddev // 2
            base = total.astype(np.int64)
            while True:   # fio halves the deviation until the sum stays below n (at most ~64 rounds, vectorised)
                over = dev + base >= n
                if not over.any():
                    break
                dev[over] = np.trunc(dev[over] / 2).astype(np.int64)
            total = (base + dev).astype(np.uint64)
        rank = total
    with np.errstate(over="ignore"):
        hashed = rank * GOLDEN_RATIO_64 + np.uint64(rand_off)
    return (hashed % np.uint64(n)).astype(np.int64)


def _dist_offset(plan: JobPlan, nranges: int, rng: np.random.Generator) -> int:
    """fio shared_rand_init / gauss_init: where rank 0 lands: random (zipf, pareto) or 0 (normal), unless
    a center is given."""
    kind, _, center = plan.dist
    if center != -1:
        return int(nranges * (center - 0.5)) % max(1, nranges) if kind == "normal" else int(nranges * center)
    return 0 if kind == "normal" else int(_rand32(rng, 1)[0])


def _file_stream(plan: JobPlan, spec: FileSpec, rng: np.random.Generator,
                 file_rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets, lengths and ops (OP_READ/OP_WRITE) of one pass over one file, as fio's io_u.c makes them:

    - direction per I/O: a read with probability rwmixread% (get_rand_ddir's draw; fio's switch limits
      in set_rwmix_bytes never bind once both directions have run, so each I/O draws afresh);
    - I/Os until the pass has moved io_size bytes (fio's io_bytes_exceeded), whole blocks only;
    - random jobs: every seq_len-th I/O (rw=randrw:N; 1 by default) is random, with percentage_random% per
      direction; the others follow the direction's previous I/O (f->last_pos[ddir]), as sequential I/O does;
    - random offsets: each block once per pass (the random map, shared by both directions: the pass ends
      when it is used up), uniform with replacement (norandommap), or drawn from random_distribution;
    - sequential offsets per direction from the file's start, plus the hole (rw=write:N) after each I/O,
      wrapping to the start at the end of the file (get_next_seq_offset).
    """
    size = int(spec.io_size)
    reads_bs, writes_bs = plan.sizes_of(0), plan.sizes_of(1)
    smallest = min(s for s, _ in (reads_bs if plan.read_pct else []) + (writes_bs if plan.read_pct < 100 else []))
    n_max = size // smallest + 1
    if plan.read_pct in (0, 100):
        is_write = np.full(n_max, plan.read_pct == 0)
    else:
        is_write = rng.integers(1, 101, n_max) > plan.read_pct
    lengths = np.empty(n_max, dtype=np.int64)
    for ddir, sizes in ((0, reads_bs), (1, writes_bs)):
        mine = is_write if ddir else ~is_write
        k = int(mine.sum())
        if not k:
            continue
        values = np.array([s for s, _ in sizes], dtype=np.int64)
        lengths[mine] = values[rng.choice(len(values), k, p=[w for _, w in sizes])] if len(values) > 1 else values[0]
    m = int(np.searchsorted(np.cumsum(lengths), size, side="right"))
    is_write, lengths = is_write[:m], lengths[:m]
    if plan.random:
        step = max(1, plan.seq_len)
        is_rand = np.arange(m) % step == 0
        r_pct, w_pct = plan.rand_pct
        if r_pct < 100 or w_pct < 100:
            is_rand &= rng.integers(1, 101, m) <= np.where(is_write, w_pct, r_pct)
    else:
        is_rand = np.zeros(m, dtype=bool)
    k = int(is_rand.sum())
    unit = max(plan.align, plan.max_bs) if plan.randommap else plan.align
    if k and plan.dist[0] != "random":
        # fio __init_rand_distribution: ranges of the smaller of the two min block sizes over the file
        nranges = -(-size // smallest)
        file_rng = file_rng or rng
        blocks = distribution_blocks(*plan.dist, nranges, k, rng, _dist_offset(plan, nranges, file_rng))
        rand_offsets = blocks * plan.align
    elif k and plan.randommap:
        n_blocks = size // unit
        if k > n_blocks:   # the random map is used up: fio ends the pass there
            cut = int(np.nonzero(is_rand)[0][n_blocks]) if n_blocks < k else m
            is_write, lengths, is_rand, m, k = is_write[:cut], lengths[:cut], is_rand[:cut], cut, n_blocks
        rand_offsets = rng.permutation(n_blocks)[:k].astype(np.int64) * unit
    elif k:
        last = max(1, (size - max(0, smallest - plan.align)) // plan.align)
        rand_offsets = (_rand32(rng, k).astype(np.float64) / float(1 << 32) * last).astype(np.int64) * plan.align
    else:
        rand_offsets = np.zeros(0, dtype=np.int64)
    offsets = np.empty(m, dtype=np.int64)
    hole = 0 if plan.random else plan.seq_len
    rand_at = np.full(m, -1, dtype=np.int64)
    rand_at[is_rand] = rand_offsets
    # a block near the end whose I/O would pass it (a larger block size than the ranges'): the last that fits
    over = is_rand & (rand_at + lengths > size)
    rand_at[over] = np.maximum(0, (size - lengths[over]) // plan.align * plan.align)
    for ddir in (0, 1):
        idx = np.nonzero(is_write if ddir else ~is_write)[0]
        if not len(idx):
            continue
        ln = lengths[idx]
        moved = np.concatenate(([0], np.cumsum(ln + hole)[:-1]))          # bytes moved before each I/O
        r = rand_at[idx]
        last = np.maximum.accumulate(np.where(r >= 0, np.arange(len(idx)), -1))   # the latest random I/O
        base = np.where(last >= 0, r[np.maximum(last, 0)] - moved[np.maximum(last, 0)], 0)
        off = base + moved
        # past the end: fio wraps a sequential stream to the file's start (holes; time_based)
        off = np.where(off + ln > size, off % max(1, size), off)
        off = np.where(off + ln > size, 0, off)
        offsets[idx] = off
    ops = np.where(is_write, OP_WRITE, OP_READ).astype(np.uint64)
    return spec.offset + offsets, lengths, ops


def pass_plan(plan: JobPlan, files: list[FileSpec], rng: np.random.Generator,
              file_rngs: list | None = None) -> np.ndarray:
    """One pass over a clone's files, interleaved as file_service_type says. file_rngs: one generator per
    file for what fio keeps per file across passes (a distribution's offset), fresh copies each pass."""
    streams = [_file_stream(plan, spec, rng, file_rngs[i] if file_rngs else None) for i, spec in enumerate(files)]
    counts = np.array([len(o) for o, _, _ in streams], dtype=np.int64)
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
    out["offset"] = np.concatenate([o for o, _, _ in streams])[order] if len(order) else 0
    out["length"] = np.concatenate([ln for _, ln, _ in streams])[order] if len(order) else 0
    out["op"] = np.concatenate([op for _, _, op in streams])[order] if len(order) else 0
    return out


# ---------------------------------------------------------------------------------------------
# Workers

@record
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
    # a job that mixes reads and writes: the writes' own figures (bytes, ios, hist... above are then the
    # reads'), as fio reports each direction apart
    mixed: bool = False
    write_bytes: int = 0
    write_ios: int = 0
    write_hist: np.ndarray | None = None
    write_clat_hist: np.ndarray | None = None
    write_slat_hist: np.ndarray | None = None
    logs: object = None                    # logs.LogWriter of this clone, fed each run's records
    records: np.ndarray | None = None      # the engine's per-I/O records of the run in progress (logs only)

    # iodl.cursor.Counters: the cursor counts a clone's runs as a rank's
    def engine_args(self, t0_ns: int) -> dict:
        args = {"window_start_ns": self.measure_ns[0], "window_end_ns": self.measure_ns[1],
                "clat_hist": self.clat_hist, "slat_hist": self.slat_hist}
        if self.write:
            args["fsync_hist"] = self.end_sync_hist if self.ending else self.sync_hist
        if self.mixed:
            args.update(write_hist=self.write_hist, write_clat_hist=self.write_clat_hist,
                        write_slat_hist=self.write_slat_hist)
        if self.records is not None and not self.ending:
            args["records"] = self.records
        return args

    def add(self, st: dict, t0_ns: int) -> None:
        if self.logs is not None and "records" in st:
            self.logs.add(self.records, st["records"], st["records_lost"])
        syncs = st.get("fsyncs", 0)
        if not st["ios"] and not syncs:
            return
        self.first_ns = self.first_ns or st["t_start_ns"]
        self.last_ns = max(self.last_ns, st["t_end_ns"])   # a counted sync ends the measured time too
        if self.mixed:
            self.write_bytes += st["write_bytes"]
            self.write_ios += st["write_ios"]
            self.bytes += st["bytes"] - st["write_bytes"]
            self.ios += st["ios"] - st["write_ios"]
        else:
            self.bytes += st["bytes"]
            self.ios += st["ios"]
        self.depth += np.asarray(st["depth"], dtype=np.int64)
        if self.ending:
            self.end_syncs += syncs
        else:
            self.syncs += syncs


class StartLine:
    """Where a group's clones start together: a barrier whose last arrival reads the clock once.

    Every clone counts its ramp and deadline from that one instant, as fio's threads of a group start
    together. When each clone read the clock itself after waking (one GIL; the others drawing their
    plans), the clones of an 8-clone job started up to 0.85 s apart and ended 0.37 s apart, and
    sum(bytes) / max(window) then read ~6% above a throttled mount's limit.
    """

    def __init__(self, parties: int):
        self.t0_ns = 0
        self._barrier = threading.Barrier(parties, action=self._mark)

    def _mark(self) -> None:
        self.t0_ns = _native.monotonic_ns()

    def wait(self) -> int:
        """Wait for every clone; the common start on the engine's clock."""
        self._barrier.wait()
        return self.t0_ns

    def abort(self) -> None:
        self._barrier.abort()


def run_clone(plan: JobPlan, index: int, jobnum: int, start: StartLine | None = None,
              stop: threading.Event | None = None) -> CloneResult:
    """Run one clone as fio would: ramp, then the measured window; returns its counters. `stop`: set,
    a metadata engine's clone stops after its current call (the others run on to their end)."""
    if plan.engine in META_ENGINES:
        return _run_file_ops(plan, index, jobnum, start, stop or threading.Event())
    res = CloneResult(index, jobnum, hist=histogram.empty(), clat_hist=histogram.empty(), slat_hist=histogram.empty(),
                      depth=np.zeros(histogram.DEPTH_BUCKETS, np.int64), write=plan.write,
                      sync_hist=histogram.empty(), end_sync_hist=histogram.empty())
    if plan.logs is not None:
        res.logs = LogWriter(plan.logs, plan.first_thread + jobnum, plan.engine in SYNC_ENGINES)
    if plan.mixed:
        res.mixed = True
        res.write_hist, res.write_clat_hist, res.write_slat_hist = (histogram.empty() for _ in range(3))
    files = plan.files[jobnum]
    rng = np.random.default_rng([plan.seed, jobnum])
    fds = []
    try:
        if plan.engine == "null":
            # fio's null engine is diskless: it never opens its files; the engine needs a valid fd
            fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in files]
        elif plan.write:
            for f in files:   # iodl's own marked files only (layout.check_files refused anything else)
                fds.append(open_own_for_write(f, plan.direct, read=plan.reads))
        else:
            fds = [open_input(f.path, plan.direct) for f in files]
        # io_uring: the ring as fio's engine makes it, in this thread, which runs it (fio 3.33 engines/io_uring.c: see _native.pyi fio_ring)
        ring = {"fio_ring": True, "fixed_buffers": plan.fixed_buffers} if plan.engine == "uring" else {}
        with engines.open_engine(plan.engine, depth=plan.depth, block_size=plan.max_bs, direct=plan.direct,
                                 rate_bps=plan.rate_bps, submit_batch=min(plan.submit_batch, plan.depth),
                                 reap_batch=min(plan.reap_batch, plan.depth),
                                 userspace_reap=plan.userspace_reap, **ring) as engine:
            if plan.content is not None and plan.engine != "null":
                engine.set_content(**plan.content, seed=(plan.seed << 16) + jobnum)
            _drive(plan, engine, fds, rng, res, start)
    except threading.BrokenBarrierError:
        pass   # another worker failed before the start; its error is reported
    except (OSError, IodlError) as exc:
        res.error = str(exc)
        if start is not None:
            start.abort()
    finally:
        for fd in fds:
            os.close(fd)
        if res.logs is not None:
            res.logs.close(keep=not res.error)
    return res


def _run_file_ops(plan: JobPlan, index: int, jobnum: int, start: StartLine | None,
                  stop: threading.Event) -> CloneResult:
    """A metadata engine's clone: its files' creates, stats or unlinks in C (native/fileops.c), in calls of
    FILE_OPS_CHUNK files, so that a stop (Ctrl-C: run_clones) is seen between two calls.

    As fio counts them: one I/O of the job's min bs per file, depth 1, the call's latency as clat
    (fio's lat and slat stay empty); the window runs from the first call's start to the last's end."""
    res = CloneResult(index, jobnum, hist=histogram.empty(), clat_hist=histogram.empty(), slat_hist=histogram.empty(),
                      depth=np.zeros(histogram.DEPTH_BUCKETS, np.int64), write=plan.read_pct == 0,
                      sync_hist=histogram.empty(), end_sync_hist=histogram.empty())   # rw=write: no syncs, as fio
    op = META_ENGINES[plan.engine]
    if plan.engine == "filestat":
        op = STAT_TYPES[plan.job.get("stat_type", "stat")]
    # once per clone, not per I/O; filestat's loops: the list again (fio stats every file each loop)
    names = [os.fsencode(f.path) + b"\0" for f in plan.files[jobnum]] * plan.loops
    chunks = [b"".join(names[k:k + FILE_OPS_CHUNK]) for k in range(0, len(names), FILE_OPS_CHUNK)]
    cpu0 = _cpu()
    try:
        if start is not None:
            start.wait()
        for chunk in chunks:
            if stop.is_set():
                break
            done, first_ns, res.last_ns = _native.file_ops(op, chunk, res.clat_hist)
            res.first_ns = res.first_ns or first_ns
            res.ios += done
        res.bytes = res.ios * min(s for s, _ in plan.block_sizes)
        res.depth[0] = res.ios
        _finish(res, cpu0)
    except threading.BrokenBarrierError:
        pass   # another worker failed before the start; its error is reported
    except OSError as exc:
        res.error = str(exc)
        if start is not None:
            start.abort()
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


def _drive(plan: JobPlan, engine, fds, rng, res: CloneResult, start: StartLine | None = None) -> None:
    """Ramp, then the measured window [ramp_end, end): one Engine.run spans the ramp's end, so the
    queue stays full across it as in fio, and only completions inside the window count.

    The first pass is drawn before the start line, so every clone's first request goes out at the
    common start rather than after its own (and, under one GIL, the others') drawing. time_based and
    unpaced, each next call is drawn while the engine runs the current one (_PlanAhead).

    fio's own counters differ at the edges (docs/fio-compare.md): it ends a clone's ramp at that
    clone's first completion after ramp_time (io_u.c should_account -> ramp_time_over), counts in
    io_bytes what the ramp left in flight but not in total_ios (counted at issue). These matter
    only when a request's queue time is comparable to the ramp (a throttled mount, deep queues).
    """
    now = _native.monotonic_ns
    names = [f.path for f in plan.files[res.jobnum]]
    sync = _SyncState()
    # the first pass, before the start: it gets the whole ramp and runtime to fill
    rows, passes = _draw(plan, fds, rng, res, sync, 0, plan.ramp_ns + plan.runtime_ns if plan.runtime_ns else 0)
    t0 = (start.wait() if start is not None else now()) + plan.startdelay_ns
    while now() < t0:
        time.sleep((t0 - now()) / 1e9)
    ramp_end = t0 + plan.ramp_ns
    end = ramp_end + plan.runtime_ns if plan.runtime_ns else 0
    # one run spans the ramp's end: the queue stays full across the boundary, as in fio
    res.measure_ns = (ramp_end, end)
    if res.logs is not None:
        res.logs.origin_ns = ramp_end   # fio's log times count from the end of its ramp
    cursor = Cursor(engine, res, t0)
    cpu0 = _cpu()
    ahead = _PlanAhead(plan, rng, res.jobnum) if plan.time_based and not plan.rate_bps else None
    try:
        while rows is not None:
            if ahead is not None:
                ahead.start(sync, passes)   # the next call's rows, drawn while the engine runs these
            if _run_rows(plan, cursor, fds, names, res, rows, ramp_end, end):
                if plan.write:
                    _end_syncs(plan, cursor, fds, names, res, sync, ramp_end)
                return _finish(res, cpu0)
            if plan.write and not plan.time_based:
                # fio runs do_io once per loop: its end_fsync / fsync_on_close syncs close every pass
                _end_syncs(plan, cursor, fds, names, res, sync, ramp_end)
            if ahead is None:
                rows, passes = _draw(plan, fds, rng, res, sync, passes, (end - now()) if end else 0)
            elif _between_passes(plan, fds, res, passes):
                rows, passes, sync = ahead.take()
            else:
                rows = None
        return _finish(res, cpu0)
    finally:
        if ahead is not None:
            res.cpu_s += ahead.close()   # a draw still on at the deadline ends here, unused


def _run_rows(plan: JobPlan, cursor, fds, names, res: CloneResult, rows, ramp_end: int, end: int) -> bool:
    """One call's rows through the engine, MAX_PLAN_ROWS at a time; True when the clone is done: its
    deadline, or its io_size or number_ios.

    fio's io_size and number_ios cap all loops together at loops times their value (backend.c
    io_bytes_exceeded, exceeds_number_ios: `limit *= td->loops`); after `loops` loops, keep_running
    starts more while fewer than io_size bytes are done (a block at least short)."""
    now = _native.monotonic_ns
    budget_bytes = (plan.io_limit or 0) * plan.loops
    budget_ios = (plan.number_ios or 0) * plan.loops
    while len(rows):
        if end and now() >= end:
            return True
        part = rows[:MAX_PLAN_ROWS]
        if budget_ios and now() >= ramp_end:
            part = part[: max(0, budget_ios - res.ios - res.write_ios)]
        if budget_bytes and not plan.time_based and now() >= ramp_end:
            # io_size below a pass: fio stops once io_size bytes are done (io_bytes_exceeded)
            left = budget_bytes - res.bytes - res.write_bytes
            part = part[: int(np.searchsorted(np.cumsum(part["length"]), max(0, left), side="right"))]
            if not len(part):
                return True
        if res.logs is not None and (res.records is None or len(res.records) < len(part) + plan.depth):
            res.records = empty_records(len(part) + plan.depth)   # a record per completion, a run at most
        st = cursor.run(fds, part, names, deadline_ns=end)
        if st["ios"]:
            if budget_bytes and res.bytes + res.write_bytes >= budget_bytes and not plan.time_based:
                return True
            if budget_ios and res.ios + res.write_ios >= budget_ios:
                return True
        rows = rows[st["done"]:]
    return False


class _PlanAhead:
    """time_based, unpaced: a clone's next engine call drawn in a thread of its own while the engine
    runs the current one (Engine.run lets go of the GIL).

    fio draws each offset as it issues it, so its queue stays full across passes. Drawn after the
    call returned (numpy: 10-25 ms for a 4 KiB pass over 256 MiB, up to 95 ms on a busy machine), the
    queue sat empty that long every 65,536 requests (docs/fio-compare.md). The rows are those the serial draw gives, in
    the same order: one draw at a time from the clone's rng, each on its own copy of the sync count,
    which the clone takes with the rows (a draw still on at the deadline is dropped and changes
    nothing). With a rate the serial draw stays: a call's passes follow the time left when drawn.
    """

    def __init__(self, plan: JobPlan, rng, jobnum: int):
        self._draw = functools.partial(_draw_rows, plan, rng, jobnum)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"iodl-plan-{jobnum}")
        self._next = None
        self._cpu_s = 0.0

    def start(self, sync: "_SyncState", passes: int) -> None:
        self._next = self._pool.submit(self._timed, replace(sync), passes)

    def _timed(self, sync: "_SyncState", passes: int) -> tuple:
        cpu0 = _cpu()
        try:
            return self._draw(sync, passes, 0) + (sync,)
        finally:
            self._cpu_s += _cpu() - cpu0   # the clone's work, done in this thread (_cpu counts a thread's own)

    def take(self) -> tuple:
        """(rows, passes, sync) of the draw started last."""
        return self._next.result()

    def close(self) -> float:
        """Ends the thread once its draw is done; the CPU time of all its draws."""
        self._pool.shutdown(wait=True)
        return self._cpu_s


def _draw(plan: JobPlan, fds, rng, res: CloneResult, sync: "_SyncState", passes: int, left_ns: int) -> tuple:
    """The next engine call's rows and the passes drawn so far; rows None when the clone is done."""
    if not _between_passes(plan, fds, res, passes):
        return None, passes
    return _draw_rows(plan, rng, res.jobnum, sync, passes, left_ns)


def _between_passes(plan: JobPlan, fds, res: CloneResult, passes: int) -> bool:
    """Before a clone's next pass, in its own thread: False when it is done (its loops and io_size, or
    no files), else its files made ready for the pass."""
    if not plan.time_based and passes >= plan.loops and \
            plan.io_limit - res.bytes - res.write_bytes < max(plan.max_bs, 1):
        return False
    if plan.invalidate and not plan.direct:
        # fio's invalidate=1 drops each file's cached pages every time it opens it (each pass)
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if not plan.files[res.jobnum]:
        return False   # a clone whose names its first clone took reads nothing (fio's add_file)
    if passes and plan.unlink_each_loop:
        _renew_files(plan, fds, plan.files[res.jobnum])
    return True


def _draw_rows(plan: JobPlan, rng, jobnum: int, sync: "_SyncState", passes: int, left_ns: int) -> tuple:
    """One pass drawn from rng, or time_based several (_passes_per_run); the passes drawn so far. A
    write job's syncs put in, moving `sync` on past them. Only the arguments are read or changed."""
    files = plan.files[jobnum]
    rows = pass_plan(plan, files, rng, _file_rngs(plan, jobnum))
    if not len(rows):
        raise IodlError(f"[{plan.job.name}] has nothing to read (files smaller than one block?)")
    passes += 1
    k = _passes_per_run(plan, len(rows), left_ns)
    if k > 1:
        # up to DISTINCT_PASSES freshly drawn passes, repeated to k (small files: many passes)
        block = [rows] + [pass_plan(plan, files, rng, _file_rngs(plan, jobnum))
                          for _ in range(min(k, DISTINCT_PASSES) - 1)]
        n = len(rows)
        rows = np.concatenate(block)
        if k > len(block):
            rows = np.tile(rows, -(-k // len(block)))[: k * n]
        passes += k - 1
    if plan.write:
        # fio between loops (observed with strace, fio 3.33): a loop that is not the last issues the
        # sync due after its last write, and the next loop, after reopening its files, issues the
        # due sync again before its first write (should_fsync's last_was_sync starts afresh)
        last = plan.time_based or (plan.io_limit or 0) * plan.loops or passes >= plan.loops
        rows = _write_rows(plan, rows, sync, leading=passes > 1 and not plan.time_based, trailing=not last)
    return rows, passes


def _renew_files(plan: JobPlan, fds: list, files: list) -> None:
    """unlink_each_loop between two loops: each file removed and created again, empty (iodl's own
    marked files only: layout.renew_own), and opened anew in place of the old descriptor."""
    for i, spec in enumerate(files):
        renew_own(spec)
        fd = open_own_for_write(spec, plan.direct, read=plan.reads)
        fds[i], old = fd, fds[i]
        os.close(old)


def _file_rngs(plan: JobPlan, jobnum: int) -> list | None:
    """Per file, what fio draws once per file (a distribution's offset, filesetup.c): the same every pass."""
    if plan.dist[0] == "random":
        return None
    return [np.random.default_rng([plan.seed, jobnum, i, 0xD15]) for i in range(len(plan.files[jobnum]))]


@record
class _SyncState:
    """fio's io_issues[DDIR_WRITE] and last_was_sync for one clone (io_u.c get_rw_ddir, should_fsync)."""

    writes: int = 0
    last_was_sync: bool = False


def _write_rows(plan: JobPlan, rows: np.ndarray, sync: _SyncState, leading: bool = False,
                trailing: bool = False) -> np.ndarray:
    """A pass's rows (a write job's: all writes; a mixed job's: reads and writes) with fio's syncs put
    in: before an I/O, when the writes issued so far are a non-zero multiple of fsync=N (else of
    fdatasync=N) and the last thing done was not a sync, fio 3.33 issues the sync first (io_u.c
    get_rw_ddir, should_fsync), on the file of that next I/O. So no sync follows the job's last write (its
    end syncs do), and the count runs on across passes. `leading`: a loop after the first (its due sync is
    issued whatever came before); `trailing`: a loop that is not the last (the sync due after its last
    write is issued at its end)."""
    rows = rows.copy()
    if plan.read_pct == 0:
        rows["op"] = OP_WRITE
    n = len(rows)
    is_write = rows["op"] == OP_WRITE
    n_writes = int(is_write.sum())
    if not n or not (plan.fsync_n or plan.fdatasync_n):
        sync.writes += n_writes
        sync.last_was_sync = sync.last_was_sync and not n
        return rows
    # writes issued before row i (i = n: after all). fio 3.33 syncs before any I/O while the count is a
    # multiple of N and the last thing done was not a sync: in a mixed job, before each read that follows
    # the Nth write too, until the next write (fio later added a last-issued-was-a-write condition)
    before = sync.writes + np.concatenate(([0], np.cumsum(is_write)))
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
    sync.writes += n_writes
    sync.last_was_sync = bool(need[n])
    return out


def _end_syncs(plan: JobPlan, cursor, fds, names, res: CloneResult, sync: _SyncState, ramp_end: int) -> None:
    """end_fsync=1 / fsync_on_close=1: fio fsyncs each of the clone's files when do_io ends (backend.c,
    unless the last thing it did was a sync), and counts that time in the job's runtime (so in its
    bandwidth) but not in its "sync" statistics. iodl does the same: one fsync row per file, timed
    into the measured window (which then runs on past a time_based deadline, as fio's runtime does)."""
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


def remove_created(plan: JobPlan, clones) -> None:
    """filecreate: the files these clones of the job created, removed (each carries iodl's mark, checked by
    the C loop, which never follows a link; fio-compare refuses a job whose files were there before)."""
    if plan.engine != "filecreate":
        return
    paths = list(existing(f.path for n in clones for f in plan.files[n]))
    for k in range(0, len(paths), FILE_OPS_CHUNK):
        _native.file_ops(4, b"".join(os.fsencode(p) + b"\0" for p in paths[k:k + FILE_OPS_CHUNK]), histogram.empty())


def run_clones(plans: dict[int, JobPlan], comm) -> list[CloneResult]:
    """Run every clone of the given jobs at once (fio starts a group's jobs together); gathered on rank 0.

    Clones are dealt over ranks round-robin; each rank runs its share as threads.
    """
    every = [(i, n) for i, p in plans.items() for n in range(p.numjobs)]
    mine = every[comm.rank::comm.size]
    barrier = StartLine(len(mine)) if mine else None
    results: list[CloneResult | None] = [None] * len(mine)

    stop = threading.Event()
    # set when a worker returns: after a KeyboardInterrupt in join(), Python 3.11's join() of a thread still
    # running returns at once (its bpo-45274 clean-up releases the running thread's lock), so wait on these
    ended = [threading.Event() for _ in mine]

    def work(slot, index, jobnum):
        try:
            results[slot] = run_clone(plans[index], index, jobnum, barrier, stop)
        except BaseException as exc:   # reported below as one line, never a thread traceback
            results[slot] = CloneResult(index, jobnum, error=f"{type(exc).__name__}: {exc}")
            barrier.abort()
        finally:
            ended[slot].set()

    comm.barrier()
    threads = [threading.Thread(target=work, args=(s, i, n), name=f"{plans[i].job.name}.{n}")
               for s, (i, n) in enumerate(mine)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        # fio, run by fio-compare with unlink=1, stops its filecreate jobs on Ctrl-C and removes the files they
        # made (backend.c: terminate, then close_and_free_files unlinks them); iodl's do the same
        stop.set()
        for slot, (i, _) in enumerate(mine):
            if plans[i].engine in META_ENGINES:
                ended[slot].wait()   # within one call of FILE_OPS_CHUNK files
        for i, n in mine:
            remove_created(plans[i], [n])
        raise
    if any(r is not None and r.error for r in results):
        for i, n in mine:   # an error ends the round: what this rank created goes, as after the round
            remove_created(plans[i], [n])
    gathered = comm.gather(results)
    if comm.rank != 0:
        return []
    flat = [r for part in gathered for r in part]
    errors = [r.error for r in flat if r.error]
    if errors:
        raise IodlError(errors[0])
    return flat
