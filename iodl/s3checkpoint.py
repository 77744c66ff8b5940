"""Checkpoints to a bucket: `iodl checkpoint --root s3://BUCKET/PREFIX --endpoint URL` (docs/s3.md).

Each rank's share of a checkpoint (iodl/checkpoint.py, the files a directory root gets) becomes
objects PREFIX/ckpt-NNNNNN/NAME. An object larger than the part size is written as a multipart
upload (CreateMultipartUpload, UploadPart x N with `--iodepth` parts in flight per rank,
CompleteMultipartUpload); a smaller one as one PUT. The part size defaults to what DLIO's S3
checkpointing writes with (PART_SIZE). Reading back is ranged GETs of `--block-size` through the
s3 engine, as `iodl read` reads objects. The figures are a file checkpoint's (a round from the
barrier to this rank's last CompleteMultipartUpload or GET returning), each request (a PUT, an
UploadPart, a GET) one I/O; besides: ops/s, retries and errors, per endpoint and per rank.

Safety, as for a directory root (iodl/patterns/checkpoint_store.py) and a bucket's dataset
(iodl/s3generate.py): iodl writes only under a prefix it created and marked. Rank 0 looks at every
(endpoint, root) the ranks use before any write: an empty prefix gets the store object
(iodl-checkpoints.json) first, the mark; a prefix holding iodl's store is carried on; anything else
is refused. A checkpoint's objects go under a name the store has never given (ckpt-NNNNNN, counted
on), checked empty first, so no object is ever overwritten; iodl never deletes an object (an upload
stopped half-way is aborted: its parts were iodl's and never became an object).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import time
from dataclasses import replace
from urllib.parse import quote
from xml.sax.saxutils import escape

import numpy as np

from awscrt import http, s3   # the s3 extra: s3store has refused an s3:// root without it already

from . import _native, checkpoint, histogram, limits
from .comm import collective
from .cursor import Cursor
from .data.layout import MANIFEST
from .errors import UsageError
from .metrics import RankResult
from .patterns.checkpoint_share import OpCounters, RankShare
from .patterns.checkpoint_store import STORE, STORE_SCHEMA
from .plan import shard_plan
from .records import record
from .reduce import checkpoint_block, rate, reduce_checkpoint_op
from .s3engine import S3Engine
from .s3http import IO_TIMEOUT_S
from .s3root import Target, endpoint_of, object_url
from .s3store import BACKOFF_S, RETRIES, S3Error, S3Store, _answer, _retryable

# DLIO's S3 checkpointing (PyTorchS3Checkpointing: s3torchconnector's S3Checkpoint writer) leaves the
# part size at the connector's default, 8 MiB (docs/s3.md).
PART_SIZE = 8 << 20
MIN_PART_SIZE = 5 << 20        # S3's smallest part but the last
MAX_PARTS = 10_000             # S3's most parts in one upload
STAMP_BLOCK = 4096             # every block of this size in a body is made unlike every other
ABORT_WAIT_S = 0.3             # an upload stopped half-way: how long its abort may hold up the stop


def check_part_size(part_size: int, sizes) -> None:
    """The part size S3 takes for every object of the run (5 MiB .. 5 GiB, at most 10,000 parts)."""
    if not MIN_PART_SIZE <= part_size <= 5 << 30:
        raise UsageError(f"--part-size {part_size:,}: S3 takes parts of 5 MiB to 5 GiB")
    big = max(sizes, default=0)
    if -(-big // part_size) > MAX_PARTS:
        raise UsageError(f"--part-size {part_size:,}: an object of {big:,} bytes would take more than "
                         f"{MAX_PARTS:,} parts (S3's limit); give a larger part size")


# ---- the store object: the mark, and what iodl wrote under the prefix

@record
class Site:
    """One root as one endpoint serves it, and its store object as last read or written."""
    store: S3Store
    target: Target
    doc: dict

    def save(self) -> None:
        self.store.put(self.target.bucket, self.target.key(STORE), json.dumps(self.doc).encode())


def prepare(store: S3Store, target: Target) -> Site:
    """The prefix's store object, marking the prefix when it holds nothing; refused (one line,
    nothing written) when it holds objects iodl did not mark, or iodl's dataset."""
    t = target
    if store.request("HEAD", t.bucket, ok_missing=True, op="HEAD bucket")[0] == 404:
        raise UsageError(f"{store.endpoint}: s3://{t.bucket}: no such bucket (iodl does not create buckets)")
    body = store.get(t.bucket, t.key(STORE))
    if body is not None:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("schema") != STORE_SCHEMA or not isinstance(doc.get("checkpoints"),
                                                                                              list):
            raise UsageError(f"{store.endpoint}: {t.url(STORE)}: not an iodl checkpoint store; give a new prefix")
        return Site(store, t, doc)
    if store.head(t.bucket, t.key(MANIFEST)) is not None:
        raise UsageError(f"{store.endpoint}: {t.url()} is an iodl dataset; checkpoints need a prefix of their own")
    if next(store.list(t.bucket, t.prefix + "/", limit=1), None) is not None:
        raise UsageError(f"{store.endpoint}: {t.url()}: holds objects and no {STORE}: iodl writes only under a "
                         "prefix it created; give a new prefix")
    site = Site(store, t, {"schema": STORE_SCHEMA, "next": 1, "checkpoints": []})
    site.save()
    return site


def new_checkpoint(sites: list[Site], signature: dict, part_size: int) -> str:
    """Rank 0: the next checkpoint's name, one no site's store has given (several endpoints may be
    gateways to one store: they agree), checked empty at every site and recorded "writing"."""
    number = max(int(s.doc.get("next", 1)) for s in sites)
    name = f"ckpt-{number:06d}"
    for s in sites:
        t = s.target
        if next(s.store.list(t.bucket, t.key(name) + "/", limit=1), None) is not None:
            raise UsageError(f"{s.store.endpoint}: {t.url(name)}/ holds objects the checkpoint store does not "
                             "say iodl wrote; iodl will not write there")
        s.doc.update(next=number + 1, checkpoints=[*s.doc["checkpoints"], {
            "name": name, "state": "writing", "part_size": part_size, **signature}])
        s.save()
    return name


def complete(sites: list[Site]) -> None:
    for s in sites:
        s.doc["checkpoints"][-1].update(state="complete", completed_at=time.time())
        s.save()


def latest(sites: list[Site], signature: dict) -> str:
    """The last complete checkpoint every site holds and that matches signature, or a one-line refusal."""
    names = []
    for s in sites:
        done = [e for e in s.doc["checkpoints"] if e.get("state") == "complete"]
        if not done:
            raise UsageError(f"{s.store.endpoint}: {s.target.url()}: no complete checkpoint to read (write one "
                             "first: --writes 1)")
        entry = done[-1]
        theirs = {k: entry.get(k) for k in signature}
        if theirs != signature:
            diff = ", ".join(f"{k} {theirs[k]!r} (this run: {signature[k]!r})" for k in signature
                             if theirs[k] != signature[k])
            raise UsageError(f"{s.store.endpoint}: {s.target.url()}: its checkpoint {entry['name']} was written "
                             f"with another {diff}")
        names.append(entry["name"])
    if len(set(names)) > 1:
        raise UsageError(f"the roots' latest checkpoints differ ({', '.join(sorted(set(names)))}): write one first")
    return names[0]


# ---- one rank's PUTs

@record
class _Upload:
    key: str
    size: int
    upload_id: str = ""            # "": one PUT (or an upload completed)
    etags: dict | None = None      # part number -> ETag


class PutRound:
    """One rank's objects of one checkpoint (a PutRound per round), `depth` PUTs (UploadParts or
    whole-object PUTs) in flight, each counted as one I/O in counters as the file engines count a
    write. The uploads are completed once every part is in."""

    def __init__(self, store: S3Store, bucket: str, part_size: int, depth: int, bodies: "Bodies"):
        self.store, self.bucket, self.part_size, self.depth = store, bucket, part_size, depth
        self.bodies = bodies       # depth buffers, one lent to each PUT in flight or waiting to be retried
        self.cv = threading.Condition()
        self.inflight = 0
        self.done: list[tuple[int, int, int]] = []       # (completed at, bytes, latency)
        self.submits: list[tuple[int, int]] = []
        self.retry: list[tuple[float, tuple]] = []
        self.failed: S3Error | None = None
        self.stopping = False
        self.retries = 0
        self.uploads: list[_Upload] = []
        self.t_start = self.t_end = 0
        # slot -> [the CRT's request, when something of it last moved (s3http.IO_TIMEOUT_S), what it is]
        self.flying: dict[int, list] = {}

    def _jobs(self, keys_sizes):
        """(upload, part number, offset, length) of every PUT, an upload created as its first part is due."""
        for key, size in keys_sizes:
            if size <= self.part_size:
                yield _Upload(key, size), 0, 0, size
                continue
            _status, _h, body = self.store.request("POST", self.bucket, key, query="uploads", op="CreateMultipartUpload")
            up = _Upload(key, size, _upload_id(body, self.store.endpoint, key), {})
            self.uploads.append(up)
            for n, off in enumerate(range(0, size, self.part_size), 1):
                yield up, n, off, min(self.part_size, size - off)

    def run(self, counters: OpCounters, t0_ns: int, keys_sizes: list[tuple[str, int]]) -> None:
        """PUT every object (keys under the bucket), counted into counters; an S3Error naming the
        endpoint and object when a request fails for good (what completed before is counted)."""
        jobs = self._jobs(keys_sizes)
        pending = next(jobs, None)
        try:
            with self.cv:
                while True:
                    now = time.monotonic()
                    while self.retry and self.retry[0][0] <= now and not self.failed:
                        self._send(*self.retry.pop(0)[1])
                    while pending is not None and not self.failed and self.inflight + len(self.retry) < self.depth:
                        self._send(*pending)
                        self.cv.release()
                        try:
                            pending = next(jobs, None)   # a CreateMultipartUpload happens here, unlocked
                        finally:
                            self.cv.acquire()
                    self._hung(time.monotonic())
                    if self.failed:
                        break          # the PUTs still in flight fail too, or are left to the CRT
                    if not self.inflight and pending is None and not self.retry:
                        break
                    self.cv.wait(0.05)
            if self.failed:
                raise self.failed
            for up in self.uploads:
                self._complete(up)
        except KeyboardInterrupt:
            self._abandon(0.5)     # a stop: what is in flight gets half a second to be counted (stop within ~1 s)
            raise
        except BaseException:
            self._abandon(0.0)     # a failure: the rest in flight fails too
            raise
        finally:
            self._count(counters, t0_ns)

    def _hung(self, now: float) -> None:
        """A PUT of which nothing moved for IO_TIMEOUT_S (the CRT has no read timeout): the server
        is hung; the round fails naming it, every PUT in flight cancelled (the lock held)."""
        stalled = [f for f in self.flying.values() if now - f[1] >= IO_TIMEOUT_S]
        if not stalled or self.failed:
            return
        _req, _moved, key, what = stalled[0]
        self.failed = S3Error(self.store.endpoint, "PUT", f"s3://{self.bucket}/{key}",
                              f"ETIMEDOUT: no answer in {IO_TIMEOUT_S:g} s ({what})")
        for req, *_ in self.flying.values():
            req.cancel()

    def _send(self, up: _Upload, n: int, offset: int, length: int, attempt: int = 0, slot: int = -1) -> None:
        """Hand one PUT to the CRT (the lock held); a retry keeps its body's slot."""
        if slot < 0:
            slot = self.bodies.lend(length, f"{up.key}#{n}")
        host, path = self.store.target(self.bucket, up.key,
                                       f"partNumber={n}&uploadId={quote(up.upload_id, safe='')}" if n else "")
        req = http.HttpRequest("PUT", path, http.HttpHeaders([("host", host), ("content-length", str(length))]),
                               _Body(self.bodies.view(slot, length)))
        etag = []
        t0 = _native.monotonic_ns()
        self.t_start = self.t_start or t0
        self.submits.append((t0, self.inflight))
        self.inflight += 1

        what = f"part {n} ({length:,} bytes at offset {offset:,})" if n else f"{length:,} bytes"
        flying = self.flying[slot] = [None, time.monotonic(), up.key, what]

        def moved(*_):
            flying[1] = time.monotonic()

        def on_headers(status_code, headers):
            moved()
            etag.extend(v for k, v in headers if k.lower() == "etag")

        def on_done(error=None, status_code=None, error_body=None, **_):
            now = _native.monotonic_ns()
            with self.cv:
                self.flying.pop(slot, None)
                self.inflight -= 1
                self.t_end = now
                if error is None:
                    self.done.append((now, length, now - t0))
                    if n:
                        up.etags[n] = etag[0] if etag else ""
                else:
                    name = getattr(error, "name", type(error).__name__)
                    code, s3code = _answer(status_code or getattr(error, "status_code", None), name, error_body)
                    if attempt < RETRIES and not (self.failed or self.stopping) and _retryable(code, name):
                        self.retries += 1
                        self.retry.append((time.monotonic() + BACKOFF_S * (1 << attempt),
                                           (up, n, offset, length, attempt + 1, slot)))
                        self.cv.notify()
                        return         # the retry keeps the slot
                    if self.failed is None:
                        why = (f"HTTP {code}" + (f" {s3code}" if s3code else "") if code else name) + (
                            f" after {attempt} retries" if attempt else "")
                        self.failed = S3Error(self.store.endpoint, "PUT", f"s3://{self.bucket}/{up.key}",
                                              f"{why} ({what})", code, s3code)
                self.bodies.free.append(slot)
                self.cv.notify()

        flying[0] = self.store.client.make_request(type=s3.S3RequestType.DEFAULT, request=req,
                                                   operation_name="UploadPart" if n else "PutObject",
                                                   on_headers=on_headers, on_done=on_done, on_progress=moved)

    def _complete(self, up: _Upload) -> None:
        parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(e)}</ETag></Part>"
                        for n, e in sorted(up.etags.items()))
        body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
        self.store.request("POST", self.bucket, up.key, query=f"uploadId={quote(up.upload_id, safe='')}", body=body,
                           op="CompleteMultipartUpload")
        self.t_end = _native.monotonic_ns()
        up.upload_id = ""

    def _abandon(self, wait_s: float) -> None:
        """Stopped or failed: the PUTs in flight get wait_s, then each upload not completed is
        aborted (its parts were iodl's; nothing else is touched), waiting for none long."""
        end = time.monotonic() + wait_s
        with self.cv:
            self.stopping = True
            self.retry.clear()
            while self.inflight and time.monotonic() < end:
                self.cv.wait(0.05)
        for up in self.uploads:
            if up.upload_id:
                host, path = self.store.target(self.bucket, up.key, f"uploadId={quote(up.upload_id, safe='')}")
                req = http.HttpRequest("DELETE", path, http.HttpHeaders([("host", host)]))
                try:
                    self.store.client.make_request(type=s3.S3RequestType.DEFAULT, request=req,
                                                   operation_name="AbortMultipartUpload").finished_future.result(
                        ABORT_WAIT_S)
                except Exception:   # the server is gone or slow: the upload stays for its lifecycle rules
                    pass

    def _count(self, counters: OpCounters, t0_ns: int) -> None:
        with self.cv:
            done = _cols(self.done, 3)
            subs = _cols(self.submits, 2)
            self.done, self.submits = [], []
        counted = _native.account(done[0], done[1], None, done[2], counters.hist, submit_ns=subs[0], inflight=subs[1],
                                  t_start_ns=self.t_start, t_end_ns=self.t_end or self.t_start)
        failed = int(self.failed is not None)
        counters.add({**counted, "errors": failed, "retries": self.retries}, t0_ns)
        if not counted["ios"]:
            counters.errors += failed     # RankResult.add takes a run's errors with its completions only
        self.retries = 0


class Bodies:
    """A rank's PUT bodies: `depth` buffers of the same random part_size bytes, each lent to one PUT
    at a time and stamped in place for it: every whole 4 KiB block's first 8 bytes made unlike any
    other block's of the run, so a server that compresses or deduplicates is measured on bytes it
    cannot shrink (as a file checkpoint's blocks are stamped). Nothing is copied in Python: the CRT
    reads a body straight from its buffer (_Body)."""

    def __init__(self, part_size: int, depth: int, seed: int):
        base = np.random.default_rng(seed).bytes(part_size)
        self.bufs = [np.frombuffer(bytearray(base), np.uint8) for _ in range(depth)]
        blocks = part_size // STAMP_BLOCK
        self.base_words = np.frombuffer(base, np.uint8)[:blocks * STAMP_BLOCK].view(np.uint64)[::STAMP_BLOCK // 8].copy()
        self.free = list(range(depth))

    def lend(self, length: int, name: str) -> int:
        """A free buffer's slot, its first length bytes stamped for `name` (an object's part)."""
        slot = self.free.pop()
        blocks = length // STAMP_BLOCK
        if blocks:
            seed = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")
            words = self.bufs[slot][:blocks * STAMP_BLOCK].view(np.uint64)[::STAMP_BLOCK // 8]
            words[:] = self.base_words[:blocks] ^ (np.uint64(seed) + np.arange(blocks, dtype=np.uint64))
        return slot

    def view(self, slot: int, length: int) -> memoryview:
        return memoryview(self.bufs[slot])[:length]


class _Body(io.RawIOBase):
    """A request body read from a memoryview (io.BytesIO would copy it first)."""

    def __init__(self, view: memoryview):
        super().__init__()
        self.buf, self.pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = max(0, min(len(b), len(self.buf) - self.pos))
        b[:n] = self.buf[self.pos:self.pos + n]
        self.pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: len(self.buf)}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos


def _upload_id(body: bytes, endpoint: str, key: str) -> str:
    m = re.search(rb"<UploadId>([^<]{1,1024})</UploadId>", body or b"")
    if not m:
        raise S3Error(endpoint, "CreateMultipartUpload", key, "no UploadId in the answer")
    return m.group(1).decode()


def _cols(rows: list, n: int) -> np.ndarray:
    if not rows:
        return np.empty((n, 0), np.int64)
    return np.array(rows, dtype=np.int64).T.copy()


# ---- one rank's checkpoints

class S3Checkpoints:
    """patterns.checkpoint.Checkpoints for s3:// roots: one rank's share of each checkpoint PUT to
    its root (rank % roots) through its endpoint (rank % endpoints), and read back with ranged
    GETs. Every method is collective. Rank 0 keeps the store objects of every (endpoint, root)
    the ranks use."""

    def __init__(self, comm, spec):
        self.comm, self.spec = comm, spec
        urls = spec.endpoints
        self.mount = comm.rank % len(spec.roots)
        self.endpoint = endpoint_of(comm.rank, urls)
        self.url = urls[self.endpoint]
        self.target = Target.parse(spec.roots[self.mount])
        files = checkpoint.rank_files(spec.model, comm.rank, spec.layout.ranks)
        self.share = RankShare([n for n, _b in files], [b for _n, b in files])
        # (collective: an endpoint refused at once, its certificate not trusted, is one line of rank 0's)
        self.store = collective(comm, lambda: S3Store(self.url, spec.iodepth, spec.addressing))
        self.sites: list[Site] = []
        self._stores: dict[int, S3Store] = {}   # rank 0's, per endpoint: the LISTs are theirs
        if comm.rank == 0:
            pairs = sorted({(endpoint_of(r, urls), r % len(spec.roots)) for r in range(spec.ranks)})

            def sites():
                self._stores = {e: (self.store if e == self.endpoint else S3Store(urls[e], 2, spec.addressing))
                                for e, _m in pairs}
                return [prepare(self._stores[e], Target.parse(spec.roots[m])) for e, m in pairs]
            self.sites = collective(comm, sites)
        else:
            collective(comm, lambda: None)
        host = comm.hostname()
        self.counters = {op: OpCounters(rank=comm.rank, host=host, mount=self.mount) for op in ("write", "read")}
        self._count_lists()
        self.bodies = Bodies(spec.part_size, spec.iodepth, seed=comm.rank)
        self.engine = S3Engine(depth=spec.iodepth, block_size=spec.block_size)
        self.t0 = _native.monotonic_ns()

    def _count_lists(self) -> None:
        """The LISTs rank 0 made checking prefixes before writing (prepare: a prefix without the store
        object; new_checkpoint: each checkpoint's, at every site), and their time: the write's `lists`,
        counted as a read counts its listing (RankResult.lists, list_s): the rank's, its mount's, its
        endpoint's. Each is one page: a page's first key says the prefix holds something."""
        stores = self._stores.values()   # (none but rank 0's)
        # an int and a float on every rank, rank 0's or not: reduce's collectives pair by kind
        self.counters["write"].lists = int(sum(st.lists for st in stores))
        self.counters["write"].list_s = float(sum(st.list_s for st in stores))

    def _rank0_says(self, fn) -> str:
        return self.comm.bcast(collective(self.comm, lambda: fn() if self.comm.rank == 0 else None), root=0)

    def write(self, closing=None) -> None:
        spec = self.spec
        name = self._rank0_says(lambda: new_checkpoint(self.sites, spec.signature, spec.part_size))
        self._count_lists()
        self.comm.barrier()
        c = self.counters["write"]
        keys = [(self.target.key(f"{name}/{n}"), size) for n, size in zip(self.share.names, self.share.sizes)]
        self._timed(c, lambda: PutRound(self.store, self.target.bucket, spec.part_size, spec.iodepth, self.bodies)
                    .run(c, self.t0, keys))
        (closing or self.comm.barrier)()
        if self.comm.rank == 0:
            complete(self.sites)

    def _url(self, name: str) -> str:
        """The URL of this rank's object `name` under its root, in the run's addressing style."""
        return object_url(self.url, self.target.bucket, quote(self.target.key(name), safe="/~"), self.spec.addressing)

    def read(self, rounds: int) -> None:
        name = self._rank0_says(lambda: latest(self.sites, self.spec.signature))
        c = self.counters["read"]
        handles = [self._url(f"{name}/{n}") for n in self.share.names]
        plan = shard_plan(self.share.sizes, self.spec.block_size) if handles else None   # a rank may write none
        # the s3 engine makes its client on its first request: a 1-byte GET of the store object makes it
        # here, before the timed rounds (DLIO's client exists before it reads, as a file's mount does)
        store = self._url(STORE)
        self.engine.run([store], shard_plan([1], self.spec.block_size), histogram.empty())
        for _ in range(rounds):
            self.comm.barrier()
            self._timed(c, lambda: Cursor(self.engine, _Gets(c), self.t0).run(handles, plan, handles) if handles
                        else None)

    @staticmethod
    def _timed(c: OpCounters, fn) -> None:
        """One round: its time from now (the caller has just left the barrier) to fn's return, and its bytes."""
        t0, before = _native.monotonic_ns(), c.bytes
        try:
            fn()
        finally:
            c.round_s.append((_native.monotonic_ns() - t0) / 1e9)
            c.round_bytes.append(c.bytes - before)

    def close(self) -> None:
        self.engine.close()
        self.store.close()


class _Gets:
    """A read's OpCounters as the s3 engine takes them: a GET has no fsync histogram to fill."""

    def __init__(self, c: OpCounters):
        self.c, self.hist = c, c.hist

    def engine_args(self, t0_ns: int) -> dict:
        return RankResult.engine_args(self.c, t0_ns)

    def add(self, stats: dict, t0_ns: int) -> None:
        self.c.add(stats, t0_ns)


# ---- the figures an object checkpoint adds: ops/s, retries, errors, per endpoint and per rank

def add_figures(comm, counters: dict, spec, reduced: dict | None) -> None:
    """Collective: into rank 0's reduced["checkpoint"] (reduce.reduce_checkpoint's), each
    operation's ops/s, retries and errors (total, per rank) and its blocks per endpoint."""
    urls = spec.endpoints
    ep = endpoint_of(comm.rank, urls)
    for op, c in counters.items():
        rounds = int(comm.allreduce(len(c.round_s), "max"))
        if not rounds:
            continue
        rows = reduce_checkpoint_op(comm, replace(c, mount=ep), len(urls), rounds)
        mine = comm.gather({"ios": c.ios, "retries": c.retries, "errors": c.errors, "endpoint": ep})
        if comm.rank != 0:
            continue
        per_ep, _everyone = rows
        block = reduced["checkpoint"][op]
        _rates(block, sum(m["ios"] for m in mine), sum(m["retries"] for m in mine), sum(m["errors"] for m in mine))
        for m in block["mounts"]:
            _rates(m, m["ios"], *(sum(x[k] for r, x in enumerate(mine) if r in m["ranks"]) for k in ("retries", "errors")))
        for line, m in zip(block["per_rank"], mine):
            _rates(line, m["ios"], m["retries"], m["errors"])
            line["endpoint"] = urls[m["endpoint"]]
        block["endpoints"] = []
        for e, url in enumerate(urls):
            ranks = [r for r, m in enumerate(mine) if m["endpoint"] == e]
            b = checkpoint_block(per_ep[e], None, False)
            _rates(b, b["ios"], *(sum(mine[r][k] for r in ranks) for k in ("retries", "errors")))
            block["endpoints"].append({"url": url, "ranks": ranks, **b})


def _rates(block: dict, ios: int, retries: int, errors: int) -> None:
    block.update(ios=int(ios), ops_per_s=rate(ios, block["duration_s"]),
                 retries=int(retries), errors=int(errors))


def configure(spec, writes: int, reads: int, cm, lay, flag: str = "--root"):
    """The pattern's configure for s3:// roots (patterns.checkpoint.Checkpoint.configure has checked
    what files and objects share): the s3 engine, no fsync, no page cache, parts S3 takes."""
    if spec.direct:
        raise UsageError("--direct: O_DIRECT is for files, not objects")
    if spec.drop_caches:
        raise UsageError("--drop-caches: objects are not cached on the client (leave it out)")
    if spec.engine not in ("auto", "s3"):
        raise UsageError(f"--engine {spec.engine}: s3:// roots are written and read by the s3 engine")
    limits.check_range("--iodepth", spec.iodepth, 1, limits.MAX_DEPTH, integer=True)
    part_size = spec.part_size or PART_SIZE
    check_part_size(part_size, (b for fs in checkpoint.plan(cm, spec.ranks).files for _n, b in fs))
    for root in spec.roots:
        Target.parse(root, flag)
    # each rank holds one part's bytes, every body is cut from it; the CRT buffers what is in flight
    limits.check_memory(f"--part-size {part_size} x --iodepth {spec.iodepth}",
                        limits.buffers_bytes(spec.iodepth + 1, part_size))
    return replace(spec, writes=writes, reads=reads, fsync=False, engine="s3", part_size=part_size,
                   model=cm, layout=lay)
