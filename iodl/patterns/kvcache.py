"""kvcache: one rank of MLPerf Storage's LLM-inference KV-cache workload (docs/kvcache.md).

A rank serves its users as kv-cache.py's process does: each user sends requests open-loop (one
every think time, whether or not the last is done) into a priority queue; workers take them in
priority order. A request reads every earlier turn's entry of its conversation still stored,
writes its own entry (one file, fsync'd; at most max_concurrent_writes writes at once), then,
below 10,000 tokens of context, reads the entry back 1 + ceil(generation / 32) times, each read
after dropping the file's cached pages so that it reaches the storage. Reads of one entry are
serialized. Entries are unlinked least recently used first when the next would not fit.

Python decides per request; the bytes move through the C engine (one engine per worker, one
request in flight, as kv-cache.py's blocking np.save/np.load), which also counts them by
completion inside the window and keeps the latency histograms.
"""
from __future__ import annotations

import heapq
import os
import queue
import random
import stat
import threading
from collections import OrderedDict
from dataclasses import field

import numpy as np

from .. import _native, histogram, reduce
from ..data.files import make_dir, open_dir, refuse_kernel_fs, write_json
from ..engines import open_engine
from ..errors import IodlError, UsageError
from ..kvcache import (END_TURN_P, MAX_TURNS, PREFILL_ONLY_TOKENS, QOS, STORAGE_SHARE, USER_TYPES,
                       KVSpec, decode_reads, entry_bytes)
from ..limits import aligned
from ..plan import OP_FSYNC, OP_READ, OP_WRITE, new_plan
from .base import Pattern
from ..records import record

MARK = "iodl-kvcache.json"      # the root is iodl's: it made the root, or adopted it empty, and marked it
MARK_SCHEMA = "iodl.kvcache-root/1"
SUFFIX = ".kv"                  # an entry's file: rank_<N>/<key>.kv
POLL_S = 0.1                    # every wait is sliced so that a stop is seen within it


# ---- users and their requests

@record(frozen=True)
class User:
    kind: str
    context: int
    generation: int
    think_s: float
    priority: int


@record(frozen=True)
class Request:
    user: int
    conversation: int
    turn: int
    context: int
    generation: int
    priority: int
    at_s: float          # arrival, seconds since the start barrier

    @property
    def key(self) -> str:
        return entry_key(self.user, self.conversation, self.turn)

    @property
    def prefill_only(self) -> bool:
        return self.context >= PREFILL_ONLY_TOKENS


def entry_key(user: int, conversation: int, turn: int) -> str:
    return f"u{user}-c{conversation}-t{turn}"


def make_users(spec: KVSpec, rng: random.Random) -> list[User]:
    """The rank's users: a type each (chosen uniformly), its context, generation and think time
    drawn once from the type's ranges, a QoS class by MLPerf's mix."""
    users = []
    for _ in range(spec.users):
        t = rng.choice(USER_TYPES)
        lo, hi = spec.context or t.context
        u = rng.random()
        priority = next(p for _name, p, cum in _qos_cumulative() if u < cum)
        users.append(User(t.name, rng.randint(lo, hi), rng.randint(*t.generation), rng.uniform(*t.think_s), priority))
    return users


def _qos_cumulative():
    total = 0.0
    for name, priority, share in QOS:
        total += share
        yield name, priority, total if name != QOS[-1][0] else 1.0


class Arrivals:
    """Every user's requests in arrival order: open loop, each user's next one think time x
    U(0.8, 1.2) after its last; a conversation ends after a turn with probability 0.2, or at 50."""

    def __init__(self, users: list[User], rng: random.Random):
        self.users, self.rng = users, rng
        self.state = [[0, 0] for _ in users]     # each user's conversation and next turn
        self.heap = [(self._think(u), i) for i, u in enumerate(users)]
        heapq.heapify(self.heap)

    def _think(self, user: User) -> float:
        return user.think_s * self.rng.uniform(0.8, 1.2)

    def next(self) -> Request:
        at, i = heapq.heappop(self.heap)
        u, conv = self.users[i], self.state[i]
        r = Request(i, conv[0], conv[1], self.rng.randint(max(1, u.context // 4), u.context),
                    self.rng.randint(max(1, u.generation // 4), u.generation), u.priority, at)
        conv[1] += 1
        if conv[1] >= MAX_TURNS or self.rng.random() < END_TURN_P:
            conv[0], conv[1] = conv[0] + 1, 0
        heapq.heappush(self.heap, (at + self._think(u), i))
        return r


# ---- the root and the entries in it

def prepare_root(root: str) -> None:
    """Create the root (or adopt an empty directory) and mark it; a root iodl marked is taken as is.
    Anything else (a file, a link, a folder of someone else's files) is refused."""
    refuse_kernel_fs(root)
    try:
        make_dir(root)
    except FileNotFoundError:
        raise UsageError(f"--root {root}: its parent directory does not exist") from None
    mark = os.path.join(root, MARK)
    if os.path.lexists(mark):
        if not os.path.isfile(mark) or os.path.islink(mark):
            raise UsageError(f"--root {root}: {MARK} is not iodl's")
        return
    if [n for n in os.listdir(root) if n != "lost+found"]:
        raise UsageError(f"--root {root} holds files that iodl did not write (no {MARK}); choose an empty or "
                         "new directory")
    write_json(mark, {"schema": MARK_SCHEMA})


def rank_directory(root: str, rank: int) -> str:
    """This rank's folder in the root, emptied of the entries an earlier run left (kv-cache.py
    clears them too): only regular files named as iodl names entries."""
    path = os.path.join(root, f"rank_{rank}")
    make_dir(path)
    fd = open_dir(path)
    try:
        for name in os.listdir(fd):
            if name.endswith(SUFFIX) and stat.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
    return path


class Entries:
    """The rank's stored entries, least recently used first, within a capacity in bytes."""

    def __init__(self, directory: str, capacity: int):
        self.dir_fd = open_dir(directory)
        self.capacity = capacity
        self.lru: OrderedDict[str, int] = OrderedDict()   # key -> file size, written whole
        self.used = 0                                      # stored and being written
        self.lock = threading.Lock()
        self.read_locks: dict[str, threading.Lock] = {}

    def reserve(self, size: int) -> int:
        """Room for a new entry of `size` bytes, unlinking the least recently used; the entries unlinked."""
        unlinked = 0
        with self.lock:
            while self.used + size > self.capacity and self.lru:
                key, old = self.lru.popitem(last=False)
                self.read_locks.pop(key, None)
                os.unlink(key + SUFFIX, dir_fd=self.dir_fd)   # a reader holding it open reads on
                self.used -= old
                unlinked += 1
            self.used += size
        return unlinked

    def stored(self, key: str, size: int) -> None:
        with self.lock:
            self.lru[key] = size
            self.read_locks.setdefault(key, threading.Lock())

    def failed(self, key: str, size: int) -> None:
        with self.lock:
            self.used -= size
        try:
            os.unlink(key + SUFFIX, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass

    def lookup(self, key: str) -> tuple[int, threading.Lock] | None:
        """(size, the entry's read lock) of a stored entry, now the most recently used; None: not stored."""
        with self.lock:
            size = self.lru.get(key)
            if size is None:
                return None
            self.lru.move_to_end(key)
            return size, self.read_locks[key]

    def create(self, key: str, direct: bool) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
        return os.open(key + SUFFIX, flags, 0o644, dir_fd=self.dir_fd)

    def open(self, key: str, direct: bool) -> int:
        return os.open(key + SUFFIX, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECT if direct else 0),
                       dir_fd=self.dir_fd)

    def close(self) -> None:
        os.close(self.dir_fd)


class CpuTier:
    """The CPU-memory tier in front of the storage (option 2), as kv-cache.py keeps it: a new entry goes
    there unless it is larger than 95 % of the tier; the tier is kept at most 80 % full by demoting
    its least recently used entries to the storage (a read from memory, a write to storage); entries
    are never promoted back. Its entries' context tokens only: their bytes never reach the storage,
    and iodl measures the storage."""
    FILL, LARGEST = 0.80, 0.95

    def __init__(self, capacity: int, bytes_of):
        self.capacity, self.bytes_of = capacity, bytes_of
        self.lru: OrderedDict[str, int] = OrderedDict()   # key -> context tokens
        self.used = 0
        self.lock = threading.Lock()

    def make_room(self, tokens: int) -> list[tuple[str, int]] | None:
        """None: an entry of `tokens` is too large for this tier (it goes to the storage); else the
        entries demoted to make room for it, least recently used first, (key, tokens) each; the room
        is the new entry's from now on, and insert() puts the entry there. When every entry is demoted
        and room held for entries whose demotions are still being written leaves too little, the
        entry is taken all the same: kv-cache.py recounts its tier then without those (sending the
        entry to the storage instead made iodl's option 2 read 17 % more from the storage)."""
        size = self.bytes_of(tokens)
        if size > self.LARGEST * self.capacity:
            return None
        demoted = []
        with self.lock:
            while self.used + size > self.FILL * self.capacity and self.lru:
                old, old_tokens = self.lru.popitem(last=False)
                self.used -= self.bytes_of(old_tokens)
                demoted.append((old, old_tokens))
            self.used += size
        return demoted

    def insert(self, key: str, tokens: int) -> None:
        """The new entry, the most recently used, in the room make_room() made for it."""
        with self.lock:
            self.lru[key] = tokens

    def lookup(self, key: str) -> bool:
        with self.lock:
            if key not in self.lru:
                return False
            self.lru.move_to_end(key)
            return True


def capacity(root: str, sharing: int) -> int:
    """This rank's share of STORAGE_SHARE of the root's free space now (`sharing` ranks of this host
    write to the same filesystem)."""
    st = os.statvfs(root)
    return int(st.f_bavail * st.f_frsize * STORAGE_SHARE) // max(1, sharing)


def check_room(spec: KVSpec, room: int, largest_context: int) -> None:
    """Refuse a run whose largest entry would not fit in this rank's share of the free space."""
    need = entry_bytes(largest_context, spec.bytes_per_token)
    if need > room:
        raise UsageError(f"--root {spec.root}: an entry of {largest_context:,} tokens of {spec.model.name} is "
                         f"{need:,} bytes, more than this rank's share of the free space ({room:,} bytes, "
                         f"{STORAGE_SHARE:.0%} of it split over the ranks writing there)")


# ---- what one worker counts

_SUMS = ("read_bytes", "read_ios", "cached_bytes", "cache_unmeasured_bytes", "written_bytes", "write_ios", "fsyncs",
         "errors", "tokens", "generated_tokens", "prefill_tokens", "requests", "entries_written", "entry_reads", "hits", "misses",
         "evictions", "cpu_entries", "cpu_reads", "demotions", "storage_ns")
_HISTS = ("read_hist", "write_hist", "fsync_hist", "entry_read_hist", "entry_write_hist", "request_hist")


@record
class Tally:
    """One worker's counts (a rank's: its workers' summed). Only what completed inside the window."""
    read_bytes: int = 0
    read_ios: int = 0
    cached_bytes: int = 0
    cache_unmeasured_bytes: int = 0
    written_bytes: int = 0
    write_ios: int = 0
    fsyncs: int = 0
    errors: int = 0
    first_errno: int = 0
    tokens: int = 0            # context + generated tokens of the requests completed
    generated_tokens: int = 0  # kv-cache.py's total_tokens: every completed request's generation, prefill-only too
    prefill_tokens: int = 0    # context tokens of the entries written whole to the storage
    requests: int = 0
    entries_written: int = 0   # to the storage: a request's own, or demoted from the CPU tier
    entry_reads: int = 0       # whole-entry reads from the storage (decode and earlier turns)
    hits: int = 0              # MLPerf's cache hits: reads that found their entry, in either tier
    misses: int = 0            # reads that found no entry (unlinked for room, being demoted, not yet written)
    evictions: int = 0
    cpu_entries: int = 0       # entries that went to the CPU tier
    cpu_reads: int = 0         # reads served by it (no storage I/O)
    demotions: int = 0         # entries moved from it to the storage (also in entries_written)
    storage_ns: int = 0        # the completed requests' time in whole-entry reads and writes (kv-cache.py's
    pending_ns: int = 0        # storage_io_latency: the sum over a request's accesses); the request's so far
    max_ns: int = 0
    read_hist: np.ndarray = field(default_factory=histogram.empty)
    write_hist: np.ndarray = field(default_factory=histogram.empty)
    fsync_hist: np.ndarray = field(default_factory=histogram.empty)
    entry_read_hist: np.ndarray = field(default_factory=histogram.empty)
    entry_write_hist: np.ndarray = field(default_factory=histogram.empty)
    request_hist: np.ndarray = field(default_factory=histogram.empty)   # each request's storage time

    def add_run(self, stats: dict, direct: bool) -> None:
        """One engine run's counts. A buffered entry's bytes are on the storage once its fsync returns,
        so they count then (an entry whose fsync returns after the window counts nothing); a direct
        write's when it completes."""
        if direct or stats["fsyncs"]:
            self.written_bytes += stats["write_bytes"]
        self.write_ios += stats["write_ios"]
        self.read_bytes += stats["bytes"] - stats["write_bytes"]
        self.read_ios += stats["ios"] - stats["write_ios"]
        self.cached_bytes += stats["cached_bytes"]
        self.cache_unmeasured_bytes += stats["cache_unmeasured_bytes"]
        self.fsyncs += stats["fsyncs"]
        self.errors += stats["errors"]
        self.first_errno = self.first_errno or stats["first_errno"]
        self.max_ns = max(self.max_ns, stats["max_ns"])

    def merge(self, other: "Tally") -> None:
        for k in _SUMS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for k in _HISTS:
            getattr(self, k)[:] += getattr(other, k)
        self.first_errno = self.first_errno or other.first_errno
        self.max_ns = max(self.max_ns, other.max_ns)


# ---- one rank's run

class RankRun:
    """The rank's users, queue and workers over one window [t0, t0 + duration)."""

    def __init__(self, spec: KVSpec, rank: int, entries: Entries, t0_ns: int):
        self.spec, self.entries, self.t0 = spec, entries, t0_ns
        self.end_ns = t0_ns + int(spec.duration_s * 1e9)
        self.seed = spec.seed + rank
        rng = random.Random(self.seed)    # kv-cache.py: seed + rank
        self.arrivals = Arrivals(make_users(spec, rng), rng)
        self.cpu = (CpuTier(int(spec.cpu_memory_gb * (1 << 30)), lambda tokens: entry_bytes(tokens, spec.bytes_per_token))
                    if spec.cpu_memory_gb else None)
        self.queue: queue.PriorityQueue = queue.PriorityQueue()
        self.write_slots = threading.BoundedSemaphore(spec.max_concurrent_writes)
        self.stop = threading.Event()
        self.engines: list = []
        self.lock = threading.Lock()
        self.tallies: list[Tally] = []
        self.issued = 0
        self.done = 0
        self.last_done_ns = t0_ns
        self.failure: BaseException | None = None
        self.stopped_ns = 0

    # the window: completions at [t0, end) count
    def in_window(self, t_ns: int) -> bool:
        return self.t0 <= t_ns < min(self.end_ns, self.stopped_ns or self.end_ns)

    def run(self, stop_requested) -> tuple[Tally, float, bool]:
        """(the rank's counts, its end in seconds since t0, stopped early). stop_requested: True once the
        user asked to stop; a KeyboardInterrupt in this thread (Ctrl-C) stops it too."""
        threads = [threading.Thread(target=self._arrive, name="kv-arrivals", daemon=True)]
        threads += [threading.Thread(target=self._work, name=f"kv-worker-{i}", daemon=True)
                    for i in range(self.spec.workers)]
        partial = False
        try:
            for t in threads:
                t.start()
            while not self._finished():
                if stop_requested():
                    raise KeyboardInterrupt
                self.stop.wait(POLL_S)
        except KeyboardInterrupt:
            partial = True
            self._cancel()
        finally:
            self.stop.set()
            for t in threads:
                while t.is_alive():
                    try:
                        t.join(POLL_S)
                    except KeyboardInterrupt:   # a second Ctrl-C: the engines are cancelled already
                        partial = True
                        self._cancel()
            for engine in self.engines:
                engine.close()
        if self.failure is not None:
            raise self.failure
        total = Tally()
        for t in self.tallies:
            total.merge(t)
        now = _native.monotonic_ns()
        end = min(self.end_ns, self.stopped_ns or now, now)
        if self.spec.max_requests and self.done >= self.spec.max_requests:
            end = min(end, self.last_done_ns)
        return total, (end - self.t0) / 1e9, partial

    def _finished(self) -> bool:
        if self.failure is not None or _native.monotonic_ns() >= self.end_ns:
            return True
        return bool(self.spec.max_requests) and self.done >= self.spec.max_requests

    def _cancel(self) -> None:
        """Stop now: no new request, every engine's run returns within ~100 ms (what completed counts)."""
        if not self.stopped_ns:
            self.stopped_ns = _native.monotonic_ns()
        self.stop.set()
        with self.lock:
            for engine in self.engines:
                engine.cancel()

    def _arrive(self) -> None:
        limit = self.spec.max_requests
        while not self.stop.is_set() and not (limit and self.issued >= limit):
            r = self.arrivals.next()
            at_ns = self.t0 + int(r.at_s * 1e9)
            while not self.stop.is_set():
                wait = (at_ns - _native.monotonic_ns()) / 1e9
                if wait <= 0:
                    break
                self.stop.wait(min(wait, POLL_S))
            if self.stop.is_set() or at_ns >= self.end_ns:
                return
            self.queue.put((-r.priority, r.at_s, self.issued, r))   # interactive first, then by arrival
            self.issued += 1

    def _work(self) -> None:
        tally, engine = Tally(), None
        with self.lock:
            self.tallies.append(tally)
        try:
            while not self.stop.is_set():
                try:
                    *_order, r = self.queue.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if engine is None:
                    engine = open_engine(self.spec.engine, depth=1, block_size=self.spec.block_size,
                                         direct=self.spec.direct, cache_check=not self.spec.direct)
                    # fresh random bytes before every write: no 512-byte block repeats (the engine's own
                    # content is unique per 4 KiB block only; storage that dedups at 512 B exists)
                    engine.set_content(refill=True, seed=self.seed * 1024 + len(self.engines))   # < 1024 workers
                    with self.lock:
                        self.engines.append(engine)
                        if self.stop.is_set():
                            engine.cancel()
                self._serve(r, engine, tally)
        except BaseException as exc:   # a worker's failure ends the rank's run with it
            self.failure = self.failure or exc
            self.stop.set()

    def _serve(self, r: Request, engine, tally: Tally) -> None:
        """One request: earlier turns read, the entry written, then read back while decoding."""
        tally.pending_ns = 0
        if self.spec.multi_turn:
            for turn in range(r.turn):
                self._read(entry_key(r.user, r.conversation, turn), engine, tally)
        if not self._write(r, engine, tally):
            return
        if not (r.prefill_only or self.spec.prefill_only):
            for _ in range(decode_reads(r.generation)):
                if self.stop.is_set():
                    return
                self._read(r.key, engine, tally)   # a miss (unlinked, or being demoted) goes on, as in kv-cache.py
        now = _native.monotonic_ns()
        if self.in_window(now):
            tally.tokens += r.context + r.generation * (not (r.prefill_only or self.spec.prefill_only))
            tally.generated_tokens += r.generation
            tally.requests += 1
            tally.storage_ns += tally.pending_ns
            tally.request_hist[histogram.index_one(tally.pending_ns)] += 1
        with self.lock:
            self.done += 1
            self.last_done_ns = max(self.last_done_ns, now)

    def _run(self, engine, fd: int, plan: np.ndarray, tally: Tally) -> dict:
        stats = engine.run([fd], plan, tally.read_hist, write_hist=tally.write_hist, fsync_hist=tally.fsync_hist,
                           deadline_ns=self.end_ns, window_start_ns=self.t0, window_end_ns=self.end_ns)
        tally.add_run(stats, self.spec.direct)
        return stats

    def _write(self, r: Request, engine, tally: Tally) -> bool:
        """The request's entry stored: in the CPU tier (demoting what it must to the storage) or
        written to the storage; False when it was not (stopped, window over)."""
        with self.write_slots:
            if self.stop.is_set():
                return False
            demoted = self.cpu.make_room(r.context) if self.cpu is not None else None
            if demoted is None:
                return self._store(r.key, r.context, engine, tally)
            for key, tokens in demoted:
                if self._store(key, tokens, engine, tally) and self.in_window(_native.monotonic_ns()):
                    tally.demotions += 1
            # the entry joins the tier once its demotions are written, as kv-cache.py registers an entry
            # after making room for it: joined before, it would age while they are written
            self.cpu.insert(r.key, r.context)
            if self.in_window(_native.monotonic_ns()):
                tally.cpu_entries += 1
            return True

    def _store(self, key: str, tokens: int, engine, tally: Tally) -> bool:
        """An entry written whole to the storage and fsync'd; False when it was not (stopped, window over)."""
        size = entry_bytes(tokens, self.spec.bytes_per_token)
        on_disk = aligned(size) if self.spec.direct else size   # O_DIRECT writes whole 4 KiB blocks
        tally.evictions += self.entries.reserve(on_disk)
        start = _native.monotonic_ns()
        fd = self.entries.create(key, self.spec.direct)
        try:
            stats = self._run(engine, fd, write_plan(on_disk, self.spec.block_size), tally)
        finally:
            os.close(fd)
        end = _native.monotonic_ns()
        tally.pending_ns += end - start
        if stats["errors"] or stats["done"] < len_plan(on_disk, self.spec.block_size) + 1:
            self.entries.failed(key, on_disk)
            if stats["errors"]:
                raise IodlError(f"writing {key}{SUFFIX}: {os.strerror(stats['first_errno'])}")
            return False
        self.entries.stored(key, on_disk)
        if self.in_window(end):
            tally.entries_written += 1
            tally.prefill_tokens += tokens
            tally.entry_write_hist[histogram.index_one(end - start)] += 1
        return True

    def _read(self, key: str, engine, tally: Tally) -> bool:
        """One whole read of a stored entry after dropping its cached pages; False: not stored (a miss) or
        not read whole. An entry in the CPU tier is read from memory: a hit, no storage I/O."""
        if self.cpu is not None and self.cpu.lookup(key):
            if self.in_window(_native.monotonic_ns()):
                tally.hits += 1
                tally.cpu_reads += 1
            return True
        found = self.entries.lookup(key)
        if found is None:
            if self.in_window(_native.monotonic_ns()):
                tally.misses += 1
            return False
        size, one_reader = found
        with one_reader:
            start = _native.monotonic_ns()
            try:
                fd = self.entries.open(key, self.spec.direct)
            except FileNotFoundError:   # unlinked for room since the lookup
                return False
            try:
                if not self.spec.direct:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # the read must reach the storage
                stats = self._run(engine, fd, read_plan(size, self.spec.block_size), tally)
            finally:
                os.close(fd)
        end = _native.monotonic_ns()
        tally.pending_ns += end - start
        if stats["errors"]:
            raise IodlError(f"reading {key}{SUFFIX}: {os.strerror(stats['first_errno'])}")
        if stats["done"] < len_plan(size, self.spec.block_size):
            return False
        if self.in_window(end):
            tally.entry_reads += 1
            tally.hits += 1
            tally.entry_read_hist[histogram.index_one(end - start)] += 1
        return True


def len_plan(size: int, block_size: int) -> int:
    return -(-size // block_size)


def read_plan(size: int, block_size: int) -> np.ndarray:
    """The entry read whole, in block_size requests."""
    n = len_plan(size, block_size)
    plan = new_plan(n)
    plan["offset"] = np.arange(n, dtype=np.uint64) * block_size
    plan["length"] = block_size
    plan["length"][-1] = size - (n - 1) * block_size
    plan["op"] = OP_READ
    return plan


def write_plan(size: int, block_size: int) -> np.ndarray:
    """The entry written whole in block_size requests, then fsync'd (kv-cache.py: np.save, flush, fsync)."""
    plan = new_plan(len_plan(size, block_size) + 1)
    plan[:-1] = read_plan(size, block_size)
    plan["op"][:-1] = OP_WRITE
    plan["op"][-1] = OP_FSYNC
    return plan


class KVCache(Pattern):
    """kvcache as a pattern (its run is resolved by iodl.kvcache.resolve): one rank's part of a run."""
    name = "kvcache"

    def run_rank(self, spec: KVSpec, rank: int, entries: Entries, t0_ns: int, stop) -> tuple[Tally, float, bool]:
        return RankRun(spec, rank, entries, t0_ns).run(stop)


def rank_sums(t: Tally, end_s: float) -> dict:
    """What a rank adds to the reduction: its counts (SUM), its latencies' maximum and its end (MAX)."""
    return {"sum": {**{k: getattr(t, k) for k in _SUMS}, **{k: getattr(t, k) for k in _HISTS}},
            "max": {"max_ns": t.max_ns, "end_s": end_s}}


def kv_block(g: dict, window_s: float, bytes_per_token: int) -> dict:
    """The kvcache figures of a group of ranks (all, or one mount) from its reduced row, over one window."""
    read, written = int(g["read_bytes"]), int(g["written_bytes"])
    hit = reduce.hit_fraction(read, int(g["cached_bytes"]), not g["cache_unmeasured_bytes"])
    lookups = int(g["hits"]) + int(g["misses"])
    return {
        "tokens": int(g["tokens"]), "tokens_per_s": reduce.rate(int(g["tokens"]), window_s),
        "prefill_tokens": int(g["prefill_tokens"]), "bytes_per_token": bytes_per_token,
        "requests": int(g["requests"]), "entries_written": int(g["entries_written"]),
        "entry_reads": int(g["entry_reads"]), "evictions": int(g["evictions"]),
        "cpu_entries": int(g["cpu_entries"]), "cpu_reads": int(g["cpu_reads"]), "demotions": int(g["demotions"]),
        "written_bytes": written, "read_bytes": read, "window_s": window_s,
        "write_bandwidth_MBps": reduce.mbps(written, window_s), "read_bandwidth_MBps": reduce.mbps(read, window_s),
        "write_ios": int(g["write_ios"]), "read_ios": int(g["read_ios"]), "fsyncs": int(g["fsyncs"]),
        "errors": int(g["errors"]),
        # MLPerf's cache hit rate: reads that found their entry over all lookups (decode re-reads are hits)
        "cache_hit_rate": reduce.rate(int(g["hits"]), lookups),
        # of the bytes read, those the storage delivered (buffered: the page cache is dropped before each read)
        "device_read_fraction": None if hit is None or not read else 1.0 - hit,
        "read_latency_us": _latency(g["read_hist"]), "write_latency_us": _latency(g["write_hist"]),
        "fsync_latency_us": _latency(g["fsync_hist"]),
        "entry_read_latency_us": _latency(g["entry_read_hist"]),
        "entry_write_latency_us": _latency(g["entry_write_hist"]),
        "request_storage_latency_us": _latency(g["request_hist"]),
    }


def _latency(hist: np.ndarray) -> dict | None:
    return histogram.summary_us(hist) if hist.sum() else None


KVCACHE = KVCache()
