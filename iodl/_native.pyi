"""iodl._native: the per-I/O loop in C (see native/). Python runs per step, never per I/O.

A *plan* is a numpy array of PLAN_DTYPE rows (file index into `fds`, byte offset, byte length, op:
iodl.plan.OP_READ, OP_WRITE, OP_FSYNC or OP_FDATASYNC; any other op is a ValueError);
the engine keeps `depth` requests of it in flight and returns counters; the latency histogram is
accumulated in place into a caller-owned int64 array of HIST_BUCKETS (fio's log-linear bucket
function with HIST_BITS sub-bucket bits, in nanoseconds, extended to ~137 s).
"""
from typing import Sequence, TypedDict

import numpy as np

HIST_BITS: int        # 6: 64 linear sub-buckets per power of two (bucket midpoint error <= 0.78%)
HIST_BUCKETS: int     # 2048: covers 0 .. 2**37 ns; larger values land in the last bucket
DEPTH_BUCKETS: int    # 7: in-flight depth at submit, binned as fio's iodepth_level: 1,2,4,8,16,32,>=64
ALIGN: int            # 4096: buffer/offset/length alignment used for O_DIRECT
SERIES_SHIFT: int     # 3: a series row's coarse latency bucket c = fine buckets [c << 3, (c + 1) << 3) (~6% wide)
SERIES_WIDTH: int     # 259: int64 columns of a series row: bytes, ios, cached bytes, then HIST_BUCKETS >> SERIES_SHIFT
                      # (256) coarse latency counts (iodl.histogram: SERIES_* column names, series_p99_us)

def engines() -> list[str]: ...                # compiled-in engine names: null, psync, aio, uring
def probe(engine: str) -> int: ...             # 0 if usable on this kernel, else an errno (ENOSYS, EPERM...)
def hist_index(ns: int) -> int: ...            # bucket of a latency (for tests; mirrors the C inline)
def resident_bytes(fd: int, offset: int, length: int) -> int | None: ...
    # bytes of the range in the page cache now (partial end pages by their bytes in the range), or None when the
    # kernel will not tell this caller: cachestat (Linux 6.5+) refuses who neither owns nor may write the file
    # (nor has CAP_FOWNER); before 6.5 mincore is asked only when it tells the truth (it reports every page
    # resident to such callers). OSError names the call (fstat, cachestat, mmap, mincore) on other failures.
def cache_measurable(fd: int) -> bool: ...     # the kernel accounts this file's reads to the reader (block-backed
                                               # filesystem, btrfs, tmpfs/ramfs, block device; task I/O accounting on)
def thread_read_bytes() -> int: ...            # bytes the calling thread's reads made the storage deliver so far

class RunStats(TypedDict):
    done: int            # rows [0, done) are finished; a deadline stops new rows (started ones are drained);
                         # after an error, done == first_error_row; after abandoning requests (hung storage), done is
                         # the lowest row left unfinished
    ios: int             # completed data requests, reads and writes (a short read or write re-issued for its
                         # remainder counts as one more); sync rows are not requests: see fsyncs
    bytes: int           # bytes delivered or written (exact; an O_DIRECT tail past EOF counts only what read
                         # returned; null counts each row's full length)
    write_ios: int       # of ios, the writes' (ios - write_ios are the reads')
    write_bytes: int     # of bytes, the writes' (cached_bytes is always of the other bytes: reads')
    fsyncs: int          # sync rows (OP_FSYNC, OP_FDATASYNC) that succeeded and completed inside the window
    fsync_ns: int        # total time inside those fsync/fdatasync calls (not the drain before each)
    cached_bytes: int    # of the read bytes, those the storage did not have to deliver (cache_check, buffered; a write
                         # never counts here): a page that
                         # was cached when read, by whoever, is a hit; a page the read, or readahead started by an
                         # earlier read of this engine, fetched from storage is a miss. Measured by the kernel's
                         # count of the bytes this thread's reads fetched (task I/O accounting), so it holds for
                         # any user, owner of the files or not. Each completion is charged with the storage bytes
                         # not yet charged, up to its size; what readahead fetched past the last byte read is
                         # carried to the engine's next run. 0 for direct/null or without cache_check
    cache_unmeasured_bytes: int  # of `bytes`, those whose hits could not be measured (cache_check on, but the file's
                         # reads are not accounted to us: NFS, FUSE, overlay..., or no task I/O accounting). Any
                         # above 0 makes the cache-hit fraction "not measurable"; 0 without cache_check
    errors: int
    first_errno: int     # 0 if no error
    first_error_row: int # lowest plan row that failed (relative to the plan passed), -1 if none
    t_start_ns: int      # CLOCK_MONOTONIC at the first submit
    t_end_ns: int        # CLOCK_MONOTONIC at the last completion (both = call time when nothing was issued)
    max_ns: int          # exact largest latency of this run (the histogram holds it within 1/128)
    depth: list[int]     # DEPTH_BUCKETS counts of in-flight depth sampled at each submit
    series_clamped: int  # counted completions later than the series' last row (filed in that row); 0 without series
    interrupted: bool    # the run was stopped by cancel() or a signal (False otherwise); done/bytes are what ran
    short_rows: int      # rows that met EOF before their length (the file is shorter than the plan says). Not an
                         # error here (a plan may read past EOF on purpose); iodl.engine.raise_for_errors makes it one
    first_short_row: int # lowest such row, -1 if none
    short_file_size: int # that row's file size when it met EOF (fstat); 0 if none
    abandoned: int       # requests still in the kernel when a stopped run gave up draining them (hung storage): 0
                         # normally. Then the engine is cancelled for good and its buffers are never freed (the
                         # kernel may still write into them)

def format_rows(rows: np.ndarray) -> bytes: ...   # (n, k) C-contiguous int64 rows as "a, b, c\n" lines (fio's logs)

class Engine:
    def __init__(self, name: str, *, depth: int = 1, block_size: int = 1 << 20, direct: bool = False,
                 delay_ns: int = 0, rate_bps: int = 0, cache_check: bool = False, device: object = None,
                 submit_batch: int = 1, reap_batch: int = 0, fresh_buffers: bool = False,
                 userspace_reap: bool = True, fio_ring: bool = False, fixed_buffers: bool = True,
                 reap_ready: bool = False) -> None: ...
        # reap_ready: after each submit, the completions already there (no syscall: the uring CQ, the aio
        #   ring unless every reap is a syscall) are taken before the next row, so a read finished inside
        #   its submit (a cache hit) gives its slot to the next; False: fio's way, reaped when slots run out
        # block_size: largest request length a plan may hold (buffers: depth x block_size, ALIGN-aligned)
        # fresh_buffers: each read gets a block of its own, malloc'd (length rounded up to ALIGN, + ALIGN - 1)
        #   and zeroed when its row is taken, freed when the row is done; it reads into the block's first
        #   ALIGN boundary. DLIO's odirect readers do so per file (bytearray, one readv), and a direct read's
        #   request sizes follow its buffer's physical pages (the block layer joins adjacent ones). The pool is
        #   then neither faulted in nor registered (uring reads with plain READ); null: ignored
        # delay_ns: null engine only, each request completes delay_ns after submit (sleeping, not spinning)
        # device: null engine only (ValueError otherwise). A writable, 8-byte aligned buffer of >= 8 bytes
        #   (zeroed once by its creator): a uint64 "busy until" (CLOCK_MONOTONIC ns) of an emulated device
        #   that every engine given the same memory shares: threads, or processes through a shared mapping
        #   (an mmap of a /dev/shm file, or an anonymous MAP_SHARED mmap made before fork). Requests are then
        #   served one at a time across all of them: at submit each reserves [max(now, busy until), +delay_ns)
        #   with an atomic compare-and-swap and completes at the end of it, so latency = queueing + delay_ns.
        #   The engine holds the buffer (an mmap cannot be closed) until close(). None: independent delays.
        # rate_bps: 0 = unpaced; else fio's rate semantics: behind schedule -> issue at once,
        #           ahead -> drain everything in flight, then sleep until the schedule allows the next one
        # submit_batch: fio's iodepth_batch_submit. 1 (fio's default) hands each request to the kernel as
        #   soon as it has a slot, one submit call each; N waits for N staged requests (or no free slot);
        #   0 (or >= depth) submits every request that has a slot in one call. Depth is sampled per batch.
        # reap_batch: completions taken per reap at most (fio's iodepth_batch_complete; fio's default reaps one
        #   and refills, so every submit sees the full depth); 0: all that are ready (iodl read's default)
        # userspace_reap: aio only. True (iodl's default): completions already in the kernel's mmapped ring are
        #   taken from it, io_getevents only to wait. False: every reap is an io_getevents call (fio libaio's
        #   default, which fio-compare follows)
        # fio_ring: uring only. The ring as fio 3.33's io_uring engine makes it (CQSIZE = depth, COOP_TASKRUN |
        #   SINGLE_ISSUER | DEFER_TASKRUN, GETEVENTS on every submit; fio-compare). The ring then belongs to the
        #   thread of the first run: a run in another thread fails with EEXIST
        # fixed_buffers: uring only. True (iodl's default): the pool is registered once, READ_FIXED/WRITE_FIXED.
        #   False: plain READ/WRITE, pages pinned per request (fio's fixedbufs=0, its default)
        # cache_check: buffered reads measure cached_bytes (RunStats.cached_bytes)
        # ValueError when depth x block_size (psync: 1 x block_size), each rounded up to ALIGN, exceeds 4 GiB or
        #   half of this machine's RAM: the pool is allocated and touched at once, so it must never be an OOM kill
    def run(self, fds: Sequence[int], plan: np.ndarray, hist: np.ndarray, *, deadline_ns: int = 0,
            window_start_ns: int = 0, window_end_ns: int = 0, series: np.ndarray | None = None,
            series_origin_ns: int = 0, series_bucket_ns: int = 1_000_000_000, live: object = None,
            clat_hist: np.ndarray | None = None, slat_hist: np.ndarray | None = None,
            fsync_hist: np.ndarray | None = None, write_hist: np.ndarray | None = None,
            write_clat_hist: np.ndarray | None = None, write_slat_hist: np.ndarray | None = None,
            records: np.ndarray | None = None, opened: np.ndarray | None = None, opener: "Opener | None" = None,
            tickets: np.ndarray | None = None, open_hist: np.ndarray | None = None,
            close_hist: np.ndarray | None = None) -> RunStats: ...
        # GIL released while running; deadline_ns: CLOCK_MONOTONIC, stop submitting then, drain, return
        # a signal whose handler raises stops the run within 100 ms; the exception carries .stats
        # window: only completions in [window_start_ns, window_end_ns) are counted (0 = unbounded) and
        # t_start_ns/t_end_ns are clipped to it: a ramp runs on into the window without draining
        # latency = handed to the kernel (stamped just before io_submit/io_uring_enter/pread) -> completion
        # reaped: fio's "lat" (slat + clat). One sample per completed request: hist.sum() == ios.
        # clat_hist, slat_hist: None, or int64 arrays of HIST_BUCKETS like hist (TypeError otherwise), accumulated
        #   into for exactly the completions hist counts, split as fio splits a request's latency at its issue_time
        #   (when the submit call that took it returned; every request of one io_submit/io_uring_enter shares it):
        #   clat = issued -> reaped, slat = handed over (hist's start) -> issued, so per request lat = slat + clat.
        #   psync (fio's sync engines): clat is the whole pread, as in fio, and slat_hist gets no samples (fio's
        #   slat_ns N is 0 for them). null: issued when its submit returns, so clat ~ delay_ns. Asking for either
        #   costs async engines one more clock read per submit call; without them nothing changes.
        # records: None, or a writable C-contiguous uint64 array of shape (n, 7): one row per counted data completion,
        #   in completion order (t_ns reaped, lat_ns, clat_ns, slat_ns (0 for psync), bytes, the row's offset, op);
        #   the stats then say how many rows were filled ("records") and how many completions found no room
        #   ("records_lost"). fio-compare's logs (iodl/fio/logs.py) are made from them.
        # opened: None, or a C-contiguous int64 array of len(fds) x 2: what each fd's open found through it just before
        #   (Opener.take's size and dev): (st_size, st_dev) of a regular file, st_size -1 where not known. Such a file
        #   is not fstat'ed again at its first row (its EOF and its filesystem's read accounting come from these)
        # opener, tickets, open_hist, close_hist (together; fds and opened then None): the files are the tickets'
        #   opens (Opener.take, waited for with the GIL released), file i of the plan the i-th ticket's, each run with
        #   its open's `opened` facts; after the run (a stop, a cancel and an engine error too) every fd is closed
        #   (each timed, as Opener.close_fds) and the opens and closes are counted into open_hist and close_hist as
        #   _native.account counts them (in [window_start_ns, window_end_ns) when window_end_ns, else all). The stats
        #   add opens, open_max_ns, closes, close_max_ns (those counted) and open_wait_ns (the take's wait),
        #   open_waited_at_ns (when it returned). An open that failed or was refused runs nothing: the stats are then
        #   only {"taken": Opener.take's bytes, open_wait_ns, open_waited_at_ns}, the fds in it the caller's.
        #   A signal while waiting for the opens raises with no .stats: the tickets stay waiting (drop them).
        # write_hist, write_clat_hist, write_slat_hist: None, or int64 arrays of HIST_BUCKETS: the writes' samples of
        #   that kind go there instead of into hist/clat_hist/slat_hist (fio reports reads and writes apart); each
        #   None leaves the writes' samples of its kind with the reads'
        # plan: PLAN_DTYPE rows, or a C-contiguous (n, 4) or (n, 3: reads) uint64 array, or int64 without negative
        # values; an op other than OP_READ/OP_WRITE/OP_FSYNC/OP_FDATASYNC is a ValueError; anything
        # else (float64, another struct, a strided view) is a ValueError, as is a row's file >= len(fds) or
        # a data row's length > block_size, or, on a direct engine, a write whose offset or length is not a
        # multiple of ALIGN (a direct read's length is rounded up and its tail past EOF not counted; a write's
        # cannot be: it would write bytes the plan did not ask for). All before any I/O.
        # Writes (OP_WRITE): pwrite (psync), IOCB_CMD_PWRITE (aio), IORING_OP_WRITE/_FIXED (uring); null counts
        #   them without I/O. A short write is continued for the rest (as a short read); one that writes nothing
        #   is an error row (EIO). Content: the buffer pool is filled once at Engine() with pseudo-random bytes
        #   (splitmix64) and, before each write, the first 8 bytes of each 4 KiB block of the request get the
        #   engine's next unique 64-bit stamp: no two 4 KiB blocks an engine writes are equal, and the content
        #   does not compress. A slot a read overwrote, or whose last write started less than 1 MiB earlier in
        #   the engine's written bytes, is refilled first (outside the latency). cache_check never counts a write.
        # Syncs (OP_FSYNC, OP_FDATASYNC): the loop stops taking rows, waits until every request in flight has
        #   completed (what was written before the row), then calls fsync/fdatasync(fds[file]) itself,
        #   synchronously, for every engine (as fio's libaio engine quiesces, then syncs). Offset and length are
        #   not used (any value is accepted). Timed alone: fsyncs, fsync_ns and fsync_hist (None, or an int64
        #   array of HIST_BUCKETS like hist, one sample per counted sync); never in ios, bytes, hist, the depth
        #   bins, series or live. Counted iff it returns inside the window, and a counted one ends the measured
        #   time like a completion (t_end_ns). An error (EIO, ENOSPC...) is an error row like a read's. null:
        #   drains, makes no call. Like a pread, an fsync in progress is not interrupted by a stop. The plan is copied before the GIL is released: changing the array while run()
        # runs changes nothing. fds: each 0..INT_MAX (the null engine also takes -1: no file), else ValueError.
        # Rate pacing restarts at every run(). Ctrl-C stops, drains, then raises.
        # Every wait in the kernel lasts at most 100 ms (io_getevents' timeout, io_uring_enter with
        # IORING_ENTER_EXT_ARG on 5.11+, polling before), and a stop request (signal, cancel()) is looked for
        # at least every 100 ms, psync included (between preads: a pread in flight is not interrupted).
        # After a stop the requests in flight are drained for at most 1 s; past that the storage is taken to be
        # hung and the run returns with stats["abandoned"] > 0 (see RunStats.abandoned).
        # EAGAIN from io_submit/io_uring_enter is not an error: what was refused is submitted again after the
        # next completions (fio's "reap, then retry").
        # An OSError "(originated from io_getevents)" etc. means the engine broke; it is closed then.
        # series: None or a writable C-contiguous int64 array of shape (n, SERIES_WIDTH), n >= 1, accumulated
        #   into (never cleared). Every counted completion (exactly those in bytes/ios/hist) adds to row
        #   b = (completion - series_origin_ns) // series_bucket_ns (before the origin: row 0; past the end:
        #   row n-1, counted in series_clamped): its bytes, 1 io, its cached bytes, and 1 in the coarse
        #   latency column 3 + (hist_index(latency) >> SERIES_SHIFT). So over all rows the columns sum to
        #   bytes, ios, cached_bytes, and the latency columns to ios. ValueError on a wrong dtype, shape or
        #   a read-only array, or series_bucket_ns <= 0.
        # live: None or a writable, 8-byte aligned buffer of >= 3 int64 (a numpy view of a shared mmap):
        #   at EVERY completion, counted or not (a ramp moves it too), [0] += bytes, [1] += 1, [2] += cached
        #   bytes; relaxed atomic loads and stores, no lock: one writer per counter (give each engine its
        #   own three), any number of readers in other processes, each seeing a whole value.
    name: str
    depth: int           # requests kept in flight (psync: 1)
    block_size: int
    direct: bool
    fixed_buffers: bool  # uring: the pool is registered (READ_FIXED); False elsewhere or if refused
    closed: bool
    cancelled: bool      # cancel() was called, or a stop abandoned requests
    def set_content(self, *, compress_pct: int = 0, chunk: int = 512, dedupe_pct: int = 0, pattern: bytes = b"",
                    zero: bool = False, refill: bool = False, scramble: bool = True, min_write: int = 4096,
                    seed: int = 0) -> None: ...
        # later writes carry fio's buffer contents (native/content.c: fio 3.33's fill_io_buffer, its dedupe states
        # and small_content_scramble) instead of iodl's own incompressible content; every slot is refilled before its
        # next write. ValueError for a percentage over 100 or a pattern over 1 MiB
    def cancel(self) -> None: ...
        # From ANY thread, also while run() runs in another (its GIL released): sets an atomic flag that the
        # loop reads without the GIL. The run in progress stops submitting new rows within ~100 ms, drains what
        # is in flight (bounded as above) and returns its stats normally, with interrupted=True (no exception).
        # Every later run() returns at once: done=0, bytes=0, interrupted=True. Never blocks; idempotent.
        # The run ends at the first cancel() call as at a window's end: what completes after it only drains and is
        # not counted (nor is its time: t_end_ns is clipped to it), so a run cut short reports what it did until then.
    def close(self) -> None: ...
    def __enter__(self) -> "Engine": ...
    def __exit__(self, *exc: object) -> None: ...

def monotonic_ns() -> int: ...                 # the engine's clock (CLOCK_MONOTONIC), for deadlines

class Counted(TypedDict):  # the part of RunStats that account() decides (same meaning, same keys)
    ios: int
    bytes: int
    cached_bytes: int
    cache_unmeasured_bytes: int
    t_start_ns: int
    t_end_ns: int
    max_ns: int
    depth: list[int]
    series_clamped: int

def account(times_ns: np.ndarray, nbytes: np.ndarray, cached: np.ndarray | None, lat_ns: np.ndarray,
            hist: np.ndarray, *, window_start_ns: int = 0, window_end_ns: int = 0,
            series: np.ndarray | None = None, series_origin_ns: int = 0, series_bucket_ns: int = 1_000_000_000,
            live: object = None, clat_ns: np.ndarray | None = None, slat_ns: np.ndarray | None = None,
            clat_hist: np.ndarray | None = None, slat_hist: np.ndarray | None = None,
            unmeasured: np.ndarray | None = None, submit_ns: np.ndarray | None = None,
            inflight: np.ndarray | None = None, t_start_ns: int = 0, t_end_ns: int = 0) -> Counted: ...
    # Counts completions an engine outside C recorded (the asyncio engine) with the very function Engine.run's loop
    # calls per completion (native/account.c), so both obey one definition. Entry i of the equal-length 1-d
    # contiguous int64/uint64 arrays times_ns, nbytes, cached (None: 0), lat_ns is one completed request (errors
    # are not completions), in completion order: reaped at times_ns[i] (CLOCK_MONOTONIC), nbytes[i] delivered,
    # cached[i] of them not from the storage, latency lat_ns[i]. Exactly as in Engine.run: counted iff
    # window_start_ns <= times_ns[i] < window_end_ns (0 = unbounded); a counted one adds to ios, bytes,
    # cached_bytes, max_ns, hist[hist_index(lat)], its series row (see Engine.run's series=) and, when
    # unmeasured[i] != 0, to cache_unmeasured_bytes; live (as Engine.run's) moves at every entry, counted or not.
    # clat_hist: clat_ns[i], or lat_ns[i] without clat_ns (a sync read: clat is all of it); slat_hist: slat_ns[i],
    # and nothing without slat_ns (fio's sync engines record no slat). depth: submit_ns and inflight (given
    # together, their own length): one request handed over at submit_ns[j] with inflight[j] in flight then,
    # sampled iff submit_ns[j] is inside the window. t_start_ns/t_end_ns: pass the run's first submit and last
    # completion (0: nothing was issued, both become the call time); they come back clipped to the window as
    # Engine.run clips them (0, 0 if nothing was counted). hist, clat_hist, slat_hist, series and live are
    # accumulated into; the arrays are checked as Engine.run checks them (TypeError/ValueError).
def write_files(dirfd: int, prefix: str, width: int, tail: str, temp_suffix: str | None, indices, buffer, offsets,
                lengths) -> None: ...
    # files prefix + f"{index:0{width}d}" + tail in dirfd, each created O_EXCL|O_NOFOLLOW under name + temp_suffix
    # (a stale regular temp or a link there is unlinked first, anything else refused), written whole from
    # buffer[offset:offset + length], closed, renamed; the GIL is released throughout. indices, offsets and
    # lengths: int64 arrays. OSError(errno, what, temp name) on the first failure, its temp removed.
def list_dir(dirfd: int, prefix: bytes, threads: int) -> tuple[bytes, bytes, bytes, list[tuple[bytes, str]]]: ...
    # one directory of a plain dataset root: (names, offsets, sizes, rest). names: prefix + name of each regular file,
    # packed in bytewise name order; offsets: (files + 1) int64 into names; sizes: (files,) int64 (numpy.frombuffer
    # both). rest: (name, kind) of every other entry, kind 'd' directory, 'l' symlink (never followed), 'o' FIFO,
    # socket or device. Sizes by fstatat(AT_SYMLINK_NOFOLLOW) on `threads` threads (1 below 2,048 entries), the GIL
    # released; an entry removed meanwhile is left out. OSError naming the entry on another stat failure.
def file_ops(op: int, paths: bytes, hist: np.ndarray) -> tuple[int, int, int]: ...
    # fio's metadata engines, one call per NUL-terminated path in `paths`: 0 filecreate (O_CREAT|O_EXCL|O_NOFOLLOW,
    # then iodl's lay-out mark, close), 1/2/3 filestat (stat, lstat, statx), 4 filedelete (unlink, marked files
    # only). Each timed call's latency goes into `hist` (int64); -> (files done, t_start_ns, t_end_ns) on the
    # engine's clock; OSError naming the file on the first failure. The GIL is released.

class Opener:   # an open-ahead pool (native/opener.c); made by opener()
    def submit(self, paths: bytes, sizes: np.ndarray, out: np.ndarray | None = None) -> int: ...
        # queue the opens of the NUL-terminated paths (each ends with its NUL), paths[i] to be a regular file of at
        # least sizes[i] bytes (int64 array, one per path); returns the first one's ticket, the next ones follow it
        # (out: a writable int64 array of one per path, each one's ticket written there).
        # The threads start them in ticket order. ValueError when the counts differ or the pool is closed
    def take(self, tickets: np.ndarray) -> bytes: ...
        # waits (GIL released, a signal seen within 100 ms: KeyboardInterrupt, the tickets stay waiting) until each
        # ticket's open is done, then -> len(tickets) rows of 6 int64 (numpy.frombuffer): fd (-1 on failure), err
        # (0, the errno of open/fstat/fcntl/realpath, or -1: refused by a check: not a regular file, shorter than its
        # size, a link resolving outside `inside`), done_ns (when the open returned, monotonic_ns' clock), took_ns
        # (open + fstat + fcntl), size and dev (the fstat's st_size and st_dev; -1 when the open failed: Engine.run's
        # opened). The fds are then the caller's. ValueError for a ticket taken, dropped or never given
    def drop(self, tickets: np.ndarray) -> None: ...
        # these tickets will not be taken: an open not begun is never made, a done one's fd is closed now, one in
        # progress has its fd closed by its thread. Tickets not waiting are ignored
    def close_fds(self, fds: np.ndarray) -> bytes: ...
        # close each fd (int64, < 0 skipped), GIL released -> len(fds) rows of 2 int64: when close returned, its time
    def close(self) -> None: ...
        # never waits: queued opens are not made, every done fd not taken is closed, an open in progress (slow
        # storage) finishes on its thread, which closes its fd and exits; the pool's memory goes with the last thread.
        # Idempotent; later calls but close_fds raise ValueError

def opener(threads: int, direct: bool, inside: str | None) -> Opener: ...
    # `threads` (1..1024) detached C threads named iodl-open, signals blocked, that open files O_RDONLY|O_NONBLOCK|
    # O_CLOEXEC (|O_DIRECT), O_NOFOLLOW when `inside` (a dataset's real root) is given and a link is then followed
    # only if its realpath is inside it; fstat through the fd (a regular file at least the size asked); O_NONBLOCK
    # cleared: iodl/engine.py open_for_read's checks, whose messages the caller gets by running it on a failed path

def pread_rows(fd: int, base: int, row_bytes: int, rows: np.ndarray, seen: int, stored: int) -> bytes: ...
    # the rows (a contiguous int64 array of indices into a table `seen` rows long: its `stored` rows repeated, index
    # i is stored row (i mod seen) mod stored, negative ones from the end) of a table whose row 0 is at byte `base` of
    # fd, each row_bytes long, in the order asked (numpy.frombuffer): rows within 4 KiB of each other in the file are
    # read by one pread, sorted by place (GIL released). IndexError "rows LO..HI of a table of SEEN" for an index
    # outside -seen..seen-1; EOFError when the file ends before a row; OSError naming pread

def shard_plan(sizes: np.ndarray, block_size: int) -> bytearray: ...
    # plan.shard_plan's rows as PLAN_DTYPE bytes (numpy.frombuffer: writable): shard i (a contiguous int64 array of
    # sizes, none negative) read whole from offset 0 in block_size requests, the last one short, file column i,
    # op 0 (read); a shard of 0 bytes has no row. ValueError for a negative size or block_size < 1

def shuffled_range(out: np.ndarray, seed: int, epoch: int) -> None: ...
    # out (a writable contiguous int32 or int64 array of n items) filled with 0..n-1 in a Fisher-Yates order drawn
    # from (seed, epoch) (splitmix64, Lemire's bounded draws): the same order wherever it is asked, in C (numpy's
    # shuffle of 1.17 M took ~0.08 s of CPU, this ~0.02). Seeds are taken modulo 2**64. ValueError for another dtype

def generated_paths(prefixes: bytes, folders: int, files: int, width: int, tail: bytes, shards: np.ndarray) -> bytes: ...
    # the paths of an iodl dataset's shards (a contiguous int64 array), each ending with its NUL (Opener.submit's
    # paths): shard s is copy c, file f = divmod(s, files), named prefixes[c * folders + f % folders] + "train-" + f
    # zero-padded to width + tail; prefixes NUL-terminated, copy by copy. IndexError for a shard outside the
    # copies' files; ValueError for a malformed prefix list
