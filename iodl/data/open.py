"""Opening a dataset root for reading: a generated one from its manifest and tables (names derived,
nothing per file held), a plain directory from a listing shared by a node's ranks.

Every path a manifest names must resolve (after symlinks) inside its root, and a plain root may
hold only regular files inside it: anything else is refused in one line.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Sequence

import numpy as np

from ..comm import SerialComm, node_shared_arrays
from ..errors import UsageError
from .files import inside, not_a_dir
from .layout import MANIFEST, DerivedPaths, GeneratedPaths, ListedPaths, Shard, ShardNames
from .listing import list_plain
from .manifest import check_complete, folder_dirs, form_of, read_manifest
from .tables import TableRows, check_tables, load_npy, take_rows

class _Shards(Sequence):
    """ds.shards: Shard objects made on demand from the dataset's paths and sizes."""

    def __init__(self, ds: "Dataset"):
        self._ds = ds

    def __len__(self) -> int:
        return len(self._ds.paths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ds = self._ds
        return Shard(ds.paths[i], int(ds.sizes[i]), ds.samples_per_shard)


class Dataset:
    """A root opened for reading: its shards (in a fixed order) and where samples sit in them.

    paths: a sequence of the shards' paths (computed on demand); sizes: (shards,) integers, for a
    generated dataset a TableRows of iodl-file-sizes.npy (a row read when looked up; the file's
    pages are the node's page cache, in no rank's memory); the sample tables are TableRows too."""

    def __init__(self, root: str, manifest: dict | None, paths, sizes: np.ndarray, copies: int = 1,
                 sample_sizes: np.ndarray | None = None, extents: np.ndarray | None = None, real_root: str = "",
                 stats: tuple[int, int] | None = None):
        self.root = root
        self.real_root = real_root or os.path.realpath(root)
        self.manifest = manifest
        self.paths = paths
        self.sizes = sizes
        self.copies = copies
        self.format = manifest["format"] if manifest else None
        self._sizes = sample_sizes     # (files, samples_per_file) or None
        self._extents = extents        # (files, samples_per_file, 2) or None
        self._files = len(sizes) // copies if manifest else 0
        self.samples_per_shard = int(sample_sizes.shape[1]) if sample_sizes is not None else 1
        self.foreign_samples = 1       # a plain directory's samples per file (open_dataset's samples_per_file)
        # (largest, total) of the sizes, given when known: a size table is then not read whole by
        # every rank for them
        self.largest, self.total_bytes = stats or (int(np.max(sizes, initial=0)), int(np.sum(sizes, dtype=np.int64)))
        self._form = None              # formats.Format of a generated dataset, made when first needed

    def __repr__(self) -> str:
        return f"Dataset({self.root!r}, {len(self.paths)} shards, {self.total_bytes} bytes, format={self.format})"

    @property
    def shards(self) -> _Shards:
        """The shards as Shard objects, made when looked up. A view made per use: it holds the
        dataset, never the other way round (a dataset that held its view was a cycle, and its size
        tables' descriptors stayed open after the last reference went, until a garbage collection)."""
        return _Shards(self)

    @property
    def total_samples(self) -> int:
        return len(self.paths) * self.samples_per_shard

    def sample_extents(self, i: int) -> np.ndarray:
        """(n, 2) uint64 [offset, length] of each sample's record in shard i (see iodl.formats)."""
        size = int(self.sizes[i])  # IndexError for a bad i
        if self.manifest is None:
            # the workload's samples per file, taken as equal slices of the file (DLIO's generators
            # write a file's records all of one size); one sample: the whole file
            n = max(1, min(self.foreign_samples, size))
            starts = np.arange(n, dtype=np.uint64) * np.uint64(size) // np.uint64(n)
            return np.stack([starts, np.diff(np.append(starts, np.uint64(size)))], axis=1).astype(np.uint64)
        base = i % self._files   # copies repeat the files in the same order and layout
        if self._extents is not None:
            return np.array(self._extents[base], dtype=np.uint64)
        if self._form is None:
            self._form = form_of(self.manifest)
        return self._form.extents(np.asarray(self._sizes[base]))

    def sample_ends(self, i: int) -> np.ndarray:
        e = self.sample_extents(i)
        return e[:, 0] + e[:, 1]

    def batch_ends(self, shards: np.ndarray):
        """sample_ends of a batch's shards, looked up together (a table's rows in one call): an
        (n, k) array where every shard holds k samples, a list of n arrays where they may differ
        (a plain directory of several samples per file, a format whose extents follow from the
        sample sizes)."""
        shards = np.asarray(shards, dtype=np.int64)
        if self.manifest is None:
            if self.foreign_samples == 1:   # the whole file (sample_extents)
                return take_rows(self.sizes, shards).astype(np.uint64).reshape(-1, 1)
            return [self.sample_ends(int(s)) for s in shards]
        base = shards % self._files if self.copies > 1 else shards   # one copy: the shards are the files
        if self._extents is not None:
            ex = take_rows(self._extents, base)   # ends below MAX_SHARD_SIZE: summed in the table's own dtype
            return (ex[:, :, 0] + ex[:, :, 1]).astype(np.uint64, copy=False)
        if self._form is None:
            self._form = form_of(self.manifest)
        ext = [self._form.extents(np.asarray(row)) for row in take_rows(self._sizes, base)]
        return [e[:, 0] + e[:, 1] for e in ext]

    def sample_sizes(self, i: int) -> np.ndarray:
        """Payload bytes of each sample in shard i (a foreign shard: the slices of sample_extents)."""
        if self.manifest is None:
            return self.sample_extents(i)[:, 1].astype(np.int64)
        return np.array(self._sizes[i % self._files], dtype=np.int64)


def open_dataset(root: str, group=None, derive: tuple | None = None, samples_per_file: int = 1,
                 manifests: dict | None = None) -> Dataset:
    """Open an iodl dataset root, or any directory of files as a foreign dataset (read-only).

    group: the ranks of this node that open this root (a communicator; None: this process alone).
    A foreign root is then listed by the group's first rank only and the listing shared with the
    others (comm.node_shared_arrays); a generated one needs no listing (its names follow from the
    indices, its tables are read a row at a time). manifests: read_manifests' answer, this root's
    manifest taken from it when there rather than read again."""
    group = group or SerialComm()
    root = os.path.abspath(root)
    if why := not_a_dir(root):
        raise UsageError(f"dataset root {root}: {why}")
    manifest = manifests[root] if manifests and root in manifests else read_manifest(root)
    if manifest is None:
        ds = _open_derived(root, group, *derive) if derive else _open_foreign(root, group)
        # a plain directory holds the workload's samples per file (a DLIO tfrecord file: many)
        ds.foreign_samples = ds.samples_per_shard = samples_per_file
        return ds
    try:
        return _open_iodl(root, manifest)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise UsageError(f"{os.path.join(root, MANIFEST)}: unreadable dataset manifest ({type(exc).__name__}: {exc})") from None


def _open_iodl(root: str, manifest: dict) -> Dataset:
    """Schema 2: a small JSON header; file sizes, sample sizes and extents in .npy files whose rows
    are read when looked up (TableRows); names derived from indices. Nothing here grows with the
    files."""
    mpath = os.path.join(root, MANIFEST)
    check_complete(root, manifest)
    files = manifest["files"]
    dirs = folder_dirs(root, manifest)
    sizes = load_npy(inside(root, manifest["sample_sizes"], mpath, "sample_sizes"), rows=True)
    stated = load_npy(inside(root, manifest["file_sizes"], mpath, "file_sizes"), rows=True)
    extents = None
    if manifest.get("extents"):
        extents = load_npy(inside(root, manifest["extents"], mpath, "extents"), rows=True)
    largest, total = check_tables(mpath, files, sizes, extents, stated, ShardNames(manifest["format"], files),
                                  form_of(manifest))
    copies = len(dirs)
    # copies repeat the files' sizes: the same rows looked up modulo the files, not a tiled copy
    shard_sizes = stated if copies == 1 or not isinstance(stated, TableRows) else stated.repeated(copies)
    if not isinstance(shard_sizes, TableRows):
        shard_sizes = np.tile(np.asarray(stated, dtype=np.int64), copies)
    paths = GeneratedPaths(dirs, manifest["format"], files, os.path.realpath(root))
    return Dataset(root, manifest, paths, shard_sizes, copies, sizes, extents, stats=(largest, total * copies))


def _open_derived(root: str, group, prefix: str, fmt: str, files: int, subfolders: int) -> Dataset:
    """A plain directory read as DLIO reads it with skip_listing: the files' names derived, not
    listed (DerivedPaths); each is looked at once (stat) for its size, by the group's first rank.
    A missing one is a one-line error naming it, as DLIO's check of the derived names is."""
    paths = DerivedPaths(root, prefix, fmt, files, subfolders)

    def sizes():
        out = np.empty(files, dtype=np.int64)
        for i in range(files):
            path = paths[i]
            try:
                st = os.stat(path)
            except OSError as exc:
                raise UsageError(f"{root}: skip_listing: {path} ({prefix} file {i} of {files}, named as DLIO names it): "
                                 f"{exc.strerror}; was the data generated by DLIO with these file_prefix, "
                                 "num_files_train and num_subfolders_train?") from None
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(f"{root}: skip_listing: {path} is not a regular file; iodl reads regular files only")
            out[i] = st.st_size
        return {"sizes": out, "stats": np.array([out.max(initial=0), out.sum()], dtype=np.int64)}

    arrays = node_shared_arrays(group, sizes)
    return Dataset(root, None, paths, arrays["sizes"], stats=(int(arrays["stats"][0]), int(arrays["stats"][1])))


def _open_foreign(root: str, group) -> Dataset:
    arrays = node_shared_arrays(group, lambda: list_plain(root))
    # (largest, total) from the listing rank: the others need not read the shared sizes whole for them
    stats = (int(arrays["stats"][0]), int(arrays["stats"][1]))
    return Dataset(root, None, ListedPaths(root, arrays["blob"], arrays["offsets"]), arrays["sizes"], stats=stats)


def validate_block(per_rank: list[tuple[int, int, int]], bytes_read: int) -> dict:
    """What `validate` checked, from every rank's (mount, shards, bytes) of its mount's dataset:
    each shard opened as a regular file at least as long as its manifest says, and read whole (a
    read ending early is an error). Framing/CRC is not verified."""
    mounts = {m: (n, b) for m, n, b in per_rank}
    return {"shards": sum(n for n, _b in mounts.values()), "bytes": int(bytes_read),
            "expected_bytes": sum(b for _n, b in mounts.values()), "checked": "sizes"}
