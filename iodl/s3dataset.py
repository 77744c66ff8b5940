"""Reading a dataset iodl generated into a bucket (iodl.s3generate): its manifest object, and its
shards as object handles for the s3 engine (iodl.s3engine).

The manifest and its tables (a few small .npy objects) are fetched into a private directory of
this process, laid out as the dataset's root with its copy folders, and opened as a directory root
is (iodl.data.open): the same checks, the same derived names. The shards' paths are then mapped to
handles `ENDPOINT/BUCKET/PREFIX/REL` (or `BUCKET.ENDPOINT/PREFIX/REL`, virtual-host style), which
the s3 engine GETs and every error names. Only datasets with a complete iodl manifest are read: a
bucket's other objects are not listed.

Before the run, each rank lists the dataset's prefix (ListObjectsV2, s3store.LIST_PAGE keys a
page), as DLIO lists its data folder at start to find its files; the manifest, not the listing,
says what the shards are (an object gone since shows as its GET's 404). The LISTs and their time
are the rank's (RankResult.lists, list_s): LIST ops/s per rank and endpoint.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence

from .data.layout import MANIFEST, SCHEMA, folder_name
from .data.open import Dataset, _open_iodl
from .errors import UsageError
from .s3root import Target, object_url
from .s3store import S3Store


def fetch_manifest(root: str, url: str, addressing: str) -> dict:
    """The manifest object of an s3:// root on the endpoint url (s3root.endpoint_urls; addressing:
    s3root.addressing), refused in one line unless it is a complete iodl one."""
    t = Target.parse(root)
    store = S3Store(url, 1, addressing)
    body = store.get(t.bucket, t.key(MANIFEST))
    if body is None:
        raise UsageError(f"{store.endpoint}: {t.url()}: no {MANIFEST}: iodl reads buckets it generated "
                         "(iodl generate --root s3://...)")
    return parse_manifest(body, store.endpoint, t)


def parse_manifest(body: bytes, endpoint: str, t: Target) -> dict:
    """A manifest object's content, or a UsageError: not one iodl writes."""
    try:
        manifest = json.loads(body)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise UsageError(f"{endpoint}: {t.url(MANIFEST)}: not an iodl dataset manifest")
    return manifest


class ObjectPaths(Sequence):
    """The shards' object handles: a directory root's derived paths, moved from the local mirror
    onto ENDPOINT/BUCKET/PREFIX."""
    objects = True   # cursor.ShardFiles: nothing to open; the handle is the "fd"

    def __init__(self, inner, mirror: str, base: str):
        self._inner, self._mirror, self._base = inner, os.path.realpath(mirror), base

    def __len__(self) -> int:
        return len(self._inner)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return f"{self._base}/{os.path.relpath(self._inner[i], self._mirror)}"


def open_s3_dataset(root: str, manifest: dict, url: str, addressing: str) -> Dataset:
    """root's dataset on the endpoint url, its shards as handles there (their URLs in the addressing
    style: s3root.object_url)."""
    t = Target.parse(root)
    store = S3Store(url, 4, addressing)
    mirror = tempfile.mkdtemp(prefix="iodl-s3-tables-")
    atexit.register(shutil.rmtree, mirror, True)   # the tables are mapped while the run reads
    with open(os.path.join(mirror, MANIFEST), "w") as f:
        json.dump(manifest, f)
    for key in ("sample_sizes", "file_sizes", "extents"):
        rel = manifest.get(key)
        if not rel:
            continue
        if not isinstance(rel, str) or "/" in rel or rel.startswith("."):
            raise UsageError(f"{t.url(MANIFEST)}: '{key}' must name an object beside the manifest")
        body = store.get(t.bucket, t.key(rel))
        if body is None:
            raise UsageError(f"{url}: {t.url(rel)}: missing (the manifest names it)")
        with open(os.path.join(mirror, rel), "wb") as f:
            f.write(body)
    # the copy folders, for the directory checks (names that would leave the mirror are refused there)
    folders = manifest.get("subfolders", 1)
    for c in manifest.get("copies") or []:
        if isinstance(c, str) and not os.path.isabs(c) and ".." not in c.split("/"):
            os.makedirs(os.path.join(mirror, c), exist_ok=True)
            for k in range(folders if isinstance(folders, int) and 1 < folders <= manifest.get("files", 0) else 0):
                os.makedirs(os.path.join(mirror, c, folder_name(k, folders)), exist_ok=True)
    try:
        ds = _open_iodl(mirror, manifest)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise UsageError(f"{t.url(MANIFEST)}: unreadable dataset manifest ({type(exc).__name__}: {exc})") from None
    ds.root = root
    ds.paths = ObjectPaths(ds.paths, mirror, object_url(url, t.bucket, t.prefix, addressing))
    ds.lists, ds.list_s = _list_prefix(store, t)
    return ds


def _list_prefix(store: S3Store, t: Target) -> tuple[int, float]:
    """Every object under the prefix, listed: (LISTs, seconds)."""
    before, t0 = store.lists, time.perf_counter()
    for _ in store.list(t.bucket, t.prefix + "/"):
        pass
    return store.lists - before, time.perf_counter() - t0
