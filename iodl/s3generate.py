"""`iodl generate --root s3://BUCKET/PREFIX`: a dataset as objects, one per file iodl generate writes.

The dataset is generated as for a directory (iodl.data.generate, the same bytes for the same seed)
into a staging directory on this node, then PUT object by object (multipart above
s3store.MULTIPART_THRESHOLD), the ranks sharing the objects round-robin, and the staging
directory removed. The staging directory needs the dataset's size free (TMPDIR; generate checks).

Safety, as for a directory root: iodl writes only under a prefix it created and marked. Before any
shard, rank 0 looks at the prefix: empty, it writes the manifest object (iodl-dataset.json,
"incomplete") there first, the mark; holding iodl's manifest for the same dataset spec, it carries
on (objects already there with their size are skipped); anything else (objects without iodl's
manifest, a manifest of another dataset) is refused before any write. The complete manifest is
the last object written. iodl never deletes an object.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import __version__
from .comm import collective
from .data.generate import GenerateResult, generate
from .data.layout import MANIFEST, SCHEMA
from .errors import UsageError
from .s3dataset import parse_manifest
from .s3root import Target, endpoint_of, endpoint_urls
from .s3store import S3Store

UPLOADS_IN_FLIGHT = 8   # per rank


def generate_s3(wl, roots: list[str], endpoints: list[str], comm, say=None, progress=None,
                addressing: str = "auto") -> GenerateResult:
    """Write wl's dataset (overrides applied) under every s3:// root; each rank PUTs through its
    endpoint (s3root.endpoint_of: several are gateways to one store) in the addressing style
    (s3root.addressing); rank 0's result on every rank."""
    targets = [Target.parse(r) for r in roots]
    if len({(t.bucket, t.prefix) for t in targets}) != len(targets):
        raise UsageError("generate: the same --root is given twice")
    urls = endpoint_urls(endpoints)
    url = urls[endpoint_of(comm.rank, urls)]
    spec = wl.to_dict()["dataset"]
    store = collective(comm, lambda: S3Store(url, UPLOADS_IN_FLIGHT, addressing))   # (one line of rank 0's: check_tls)
    # the prefixes marked now: nothing of the dataset can be there yet (no HEAD before each PUT)
    fresh = comm.bcast(collective(comm, lambda: _mark(store, targets, spec) if comm.rank == 0 else None), root=0)
    staging = comm.bcast(tempfile.mkdtemp(prefix="iodl-s3-staging-") if comm.rank == 0 else None, root=0)
    try:
        local = generate(wl, [staging], comm, say=say, progress=progress)
        comm.barrier()
        t0 = time.perf_counter()
        files = sorted(_files(staging))
        mine = [(t, rel) for t in targets for rel in files][comm.rank::comm.size]
        written, skipped, nbytes = collective(comm, lambda: _upload(store, staging, mine, fresh))
        totals = comm.gather((written, skipped, nbytes, time.perf_counter() - t0), root=0)
        comm.barrier()   # every shard is there before the manifest says so
        collective(comm, lambda: _complete(store, targets, staging) if comm.rank == 0 else None)
    finally:
        comm.barrier()
        if comm.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
    result = None
    if comm.rank == 0:
        result = GenerateResult(roots=[t.url() for t in targets], shards_written=sum(t[0] for t in totals),
                                shards_skipped=sum(t[1] for t in totals), bytes_written=sum(t[2] for t in totals),
                                total_bytes=local.total_bytes, seconds=max(t[3] for t in totals),
                                written_by_rank=[t[0] for t in totals])
    return comm.bcast(result, root=0)


def _files(top: str):
    """Every file of the staged dataset, relative to it, but the manifest (written apart, last)."""
    for d, _dirs, names in os.walk(top):
        for name in names:
            rel = os.path.relpath(os.path.join(d, name), top)
            if rel != MANIFEST:
                yield rel


def _mark(store: S3Store, targets: list[Target], spec: dict) -> list[Target]:
    """Check every prefix, then mark the new ones with an incomplete manifest (rank 0, before any
    shard); returns the new ones."""
    new = []
    for t in targets:
        if store.request("HEAD", t.bucket, ok_missing=True, op="HEAD bucket")[0] == 404:
            raise UsageError(f"{store.endpoint}: s3://{t.bucket}: no such bucket (iodl does not create buckets)")
        body = store.get(t.bucket, t.key(MANIFEST))
        if body is None:
            if next(store.list(t.bucket, t.prefix + "/", limit=1), None) is not None:
                raise UsageError(f"{t.url()}: holds objects and no {MANIFEST}: iodl writes only under a prefix it "
                                 "created; give a new prefix")
            new.append(t)
            continue
        theirs = parse_manifest(body, store.endpoint, t)
        if theirs.get("spec") != spec:
            raise UsageError(f"{t.url()}: holds another dataset (workload {theirs.get('workload')!r}, generated "
                             "with other options); give a new prefix")
    for t in new:
        store.put(t.bucket, t.key(MANIFEST), json.dumps(
            {"schema": SCHEMA, "status": "incomplete", "generator": f"iodl {__version__}", "spec": spec}).encode())
    return new


def _upload(store: S3Store, staging: str, mine, fresh: list[Target]) -> tuple[int, int, int]:
    """PUT this rank's objects, UPLOADS_IN_FLIGHT at a time; (written, skipped, bytes written).
    Under a prefix iodl carries on (not in fresh, marked by this run), an object already there
    with its size is skipped (a re-run under iodl's own mark): a HEAD before its PUT."""
    failed = threading.Event()   # a PUT failed for good: the rest are not sent (a hung server would
                                 # hold each for s3http.IO_TIMEOUT_S); the run ends on that PUT's error

    def one(item):
        if failed.is_set():
            return 0, 0, 0
        t, rel = item
        path = os.path.join(staging, rel)
        size = os.path.getsize(path)
        try:
            if t not in fresh and store.head(t.bucket, t.key(rel)) == size:
                return 0, 1, 0
            store.put_file(t.bucket, t.key(rel), path)
        except BaseException:
            failed.set()
            raise
        return 1, 0, size

    with ThreadPoolExecutor(UPLOADS_IN_FLIGHT, thread_name_prefix="iodl-put") as pool:
        done = list(pool.map(one, mine))
    return sum(d[0] for d in done), sum(d[1] for d in done), sum(d[2] for d in done)


def _complete(store: S3Store, targets: list[Target], staging: str) -> None:
    with open(os.path.join(staging, MANIFEST), "rb") as f:
        manifest = f.read()
    for t in targets:
        store.put(t.bucket, t.key(MANIFEST), manifest)
