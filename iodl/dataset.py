"""Datasets on disk: generating a workload's shards under one or more roots, and opening a root.

Layout of a root written by `iodl generate`:
    ROOT/iodl-dataset.json            manifest (schema iodl.dataset/2): a small JSON header, no list of files;
                                      its presence marks the root as iodl's (schema 1, which listed every
                                      file, is still read)
    ROOT/iodl-file-sizes.npy          (files,) int64 bytes of each file, shared by all copies
    ROOT/iodl-sample-sizes.npy        (files, samples_per_file) sample sizes in bytes, shared by all copies
    ROOT/iodl-extents.npy             (files, samples_per_file, 2) extents, npz/hdf5 only
    ROOT/copy-0000/train-00000-of-01024.tfrecord ...   one directory per copy, same names in each
    ROOT/copy-0000/07/train-00007-of-20000.tfrecord    above 10,000 files a copy, file i sits in folder
                                                       i % subfolders (manifest "subfolders"; 1: none)
    ROOT/copy-0000/train-00000-of-00001.indexed_binary.off.idx, ....sz.idx   a format's index files
                                                       beside its shard (indexed_binary: formats.py)
A root without a manifest is a foreign dataset: every regular file under it (recursive, sorted) is
a shard with one extent, the whole file; iodl never writes there.
Every path a manifest names must resolve (after symlinks) inside its root, and a foreign root may
hold only regular files inside it: anything else is refused in one line. Generation creates every
file exclusively (O_EXCL|O_NOFOLLOW), never through a link: a large shard under a temporary name,
renamed when complete; small shards (raw, tfrecord up to SMALL_FILE) under their final names in
batches written by C (_native.write_files), since a rename per file doubles a small file's metadata
work. Either way the manifest says "incomplete" until every shard is written, and a re-run rewrites
any shard shorter than planned.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import __version__
from .comm import collective
from .errors import IodlError, UsageError
from .formats import BLOCK, FORMATS, _Stream, content_buffer, format_for

SCHEMA = "iodl.dataset/2"      # a JSON header; file sizes in FILE_SIZES_FILE; names derived from indices
SCHEMA_V1 = "iodl.dataset/1"   # every file listed in the JSON: still read (open_dataset)
MANIFEST = "iodl-dataset.json"
SIZES_FILE = "iodl-sample-sizes.npy"
FILE_SIZES_FILE = "iodl-file-sizes.npy"
EXTENTS_FILE = "iodl-extents.npy"
_TMP = ".iodl-tmp"          # suffix of a shard being written; renamed when complete
_MAX_MANIFEST = 1 << 30    # bytes: a manifest naming 10^7 shards is far smaller
_JSON_PEAK = 24            # memory per manifest byte json.loads may take (measured: a list of small dicts; ours ~4)
_SIZES_STREAM = 0x5A3E      # seed-sequence tag of the sample-size stream (content streams use copy, file)


@dataclass(frozen=True)
class Shard:
    path: str      # absolute
    size: int      # bytes
    samples: int


def sample_sizes(spec, seed: int) -> np.ndarray:
    """(files, samples_per_file) int64 sample sizes: normal(mean, stdev), rounded, at least 1 byte.

    Drawn row by row from one stream, so fewer files give a prefix of the same sizes.
    """
    shape = (spec.files, spec.samples_per_file)
    if spec.sample_size_stdev == 0:
        return np.full(shape, spec.sample_size, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _SIZES_STREAM])))
    drawn = rng.normal(spec.sample_size, spec.sample_size_stdev, size=spec.files * spec.samples_per_file)
    return np.clip(np.rint(drawn), 1, None).astype(np.int64).reshape(shape)


def shard_name(fmt: str, index: int, files: int) -> str:
    width = max(5, len(str(files)))
    return f"train-{index:0{width}d}-of-{files:0{width}d}.{FORMATS[fmt].suffix}"


def copy_dir(copy: int) -> str:
    return f"copy-{copy:04d}"


FOLDER_FILES = 10_000   # files per folder at most, by default (MLPerf Storage warns above num_subfolders_train's 10,000)


def folders_of(files: int, subfolders: int) -> int:
    """Folders a copy's files are spread over: `subfolders` when given (> 0), else as few as keep
    each at most FOLDER_FILES; 1 means the copy directory itself."""
    return int(subfolders) if subfolders > 0 else max(1, -(-int(files) // FOLDER_FILES))


def folder_name(index: int, folders: int) -> str:
    """The folder of file `index` inside its copy directory: index % folders, zero-padded ('' for one folder)."""
    return "" if folders <= 1 else f"{index % folders:0{len(str(folders - 1))}d}"


def shard_relpath(fmt: str, index: int, files: int, folders: int) -> str:
    """A shard's path inside its copy directory, derived from its index alone."""
    name = shard_name(fmt, index, files)
    return name if folders <= 1 else f"{folder_name(index, folders)}/{name}"


# ---------------------------------------------------------------- opening --------------------

class _Paths(Sequence):
    """Shard paths computed on demand: a rank never holds the list (200,000 names are ~20 MB)."""

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._path(i)


class GeneratedPaths(_Paths):
    """copy directory / folder / name of every shard of an iodl dataset, derived from its index."""

    def __init__(self, folder_dirs: list[list[str]], fmt: str, files: int, real_root: str):
        self._dirs, self._fmt, self._files = folder_dirs, fmt, files
        self._folders = len(folder_dirs[0])
        self._n = len(folder_dirs) * files
        self.inside = real_root   # a shard that is a link is opened only if it resolves inside (open_for_read)

    def _path(self, i: int) -> str:
        c, f = divmod(i, self._files)
        return os.path.join(self._dirs[c][f % self._folders], shard_name(self._fmt, f, self._files))


class ListedPaths(_Paths):
    """Paths of a listed (foreign) root: relative names packed in one byte array, NUL-free."""

    def __init__(self, root: str, blob: np.ndarray, offsets: np.ndarray):
        self._root, self._blob, self._off = root, blob, offsets
        self._n = len(offsets) - 1

    def _path(self, i: int) -> str:
        return os.path.join(self._root, os.fsdecode(self._blob[int(self._off[i]):int(self._off[i + 1])].tobytes()))


class DerivedPaths(_Paths):
    """A plain directory's files named as DLIO names them with dataset.skip_listing, never listed
    (dlio_benchmark main.py, the fork MLPerf Storage v3.0 runs, mlcommons/DLIO_local_changes@f6796ed):
    PREFIX_I_of_N.FORMAT with I zero-padded to N's digits, in folder I % S zero-padded to the
    digits of S - 1 when there are S > 0 subfolders."""

    def __init__(self, root: str, prefix: str, fmt: str, files: int, subfolders: int):
        self._root, self._prefix, self._fmt, self._n, self._sub = root, prefix, fmt, files, subfolders
        self._nd, self._nd_sub = len(str(files)), len(str(max(subfolders - 1, 0)))
        self.inside = os.path.realpath(root)   # a file that is a link is read only if it resolves inside

    def _path(self, i: int) -> str:
        name = f"{self._prefix}_{str(i).zfill(self._nd)}_of_{self._n}.{self._fmt}"
        if self._sub > 0:
            return os.path.join(self._root, str(i % self._sub).zfill(self._nd_sub), name)
        return os.path.join(self._root, name)


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
        self.shards = _Shards(self)
        self._form = None              # formats.Format of a generated dataset, made when first needed

    def __repr__(self) -> str:
        return f"Dataset({self.root!r}, {len(self.paths)} shards, {self.total_bytes} bytes, format={self.format})"

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
            self._form = _form_of(self.manifest)
        return self._form.extents(np.asarray(self._sizes[base]))

    def sample_ends(self, i: int) -> np.ndarray:
        e = self.sample_extents(i)
        return e[:, 0] + e[:, 1]

    def sample_sizes(self, i: int) -> np.ndarray:
        """Payload bytes of each sample in shard i (a foreign shard: the slices of sample_extents)."""
        if self.manifest is None:
            return self.sample_extents(i)[:, 1].astype(np.int64)
        return np.array(self._sizes[i % self._files], dtype=np.int64)


def _open_regular(path: str):
    """A regular file opened for reading; a FIFO there must not block the open (OSError otherwise)."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return os.fdopen(fd, "rb")


def _read_manifest(root: str) -> dict | None:
    from . import limits

    path = os.path.join(root, MANIFEST)
    try:
        with _open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > _MAX_MANIFEST:
                raise UsageError(f"{path}: {size} bytes, larger than a dataset manifest can be ({_MAX_MANIFEST})")
            limits.check_memory(f"{path}: parsing a manifest of {size:,} bytes", _JSON_PEAK * size)
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable dataset manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") not in (SCHEMA, SCHEMA_V1):
        got = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise UsageError(f"{path}: not an iodl dataset manifest (schema {got!r}, expected {SCHEMA!r})")
    return manifest


_SHAPE_KEYS = ("format", "samples_per_file", "sample_size", "sample_size_stdev", "row_group_size", "columns")


def workload_for_roots(roots: list[str], given: str | None):
    """The workload a read of these roots runs: the one given, which must describe every iodl
    dataset among them (a workload's demand sized against another's data is a wrong answer), or,
    when none is given, the one the datasets were generated for. Roots without a manifest (plain
    directories) put no constraint on it; with none at all the default is `tiny`."""
    from .workload import builtin_names, load_workload, workload_from_dict

    found = [(root, m) for root in roots if os.path.isdir(root) and (m := _read_manifest(root)) is not None]
    if given is None:
        names = {m.get("workload") for _r, m in found}
        if len(names) > 1:
            raise UsageError(f"the roots hold datasets of different workloads ({', '.join(sorted(map(str, names)))}): "
                             "give --workload")
        name = names.pop() if names else "tiny"
        if found and isinstance(found[0][1].get("workload_spec"), dict):
            # the workload as generate resolved it, so that a file given then need not be at hand now
            wl = workload_from_dict(found[0][1]["workload_spec"], os.path.join(found[0][0], MANIFEST))
        elif name in builtin_names():
            wl = load_workload(name)
        else:
            raise UsageError(f"{found[0][0]} was generated for workload {name!r}, which is not built in: "
                             "give its file with --workload FILE")
        if found:   # generate's --files/--copies/--format/--seed are the dataset's, not the file's
            m = found[0][1]
            spec = m.get("spec", {})
            wl = wl.with_overrides(files=spec.get("files"), copies=spec.get("copies"), format=m.get("format"),
                                   seed=m.get("seed"))
    else:
        wl = load_workload(given)
    mine = wl.to_dict()["dataset"]
    for root, m in found:
        spec = m.get("spec", {})
        differ = [k for k in _SHAPE_KEYS if k in spec and spec[k] != mine[k]]
        if differ:
            theirs = ", ".join(f"{k} {spec[k]}" for k in differ)
            ours = ", ".join(f"{k} {mine[k]}" for k in differ)
            raise UsageError(f"--workload {wl.name} does not describe the dataset under {root} (generated for "
                             f"{m.get('workload')!r}: {theirs}; {wl.name}: {ours}); leave --workload out to use "
                             "the dataset's")
    return wl


def open_dataset(root: str, group=None, derive: tuple | None = None, samples_per_file: int = 1) -> Dataset:
    """Open an iodl dataset root, or any directory of files as a foreign dataset (read-only).

    group: the ranks of this node that open this root (a communicator; None: this process alone).
    A foreign root is then listed by the group's first rank only and the listing shared with the
    others (comm.node_shared_arrays); a generated one needs no listing (its names follow from the
    indices, its tables are mapped from their files)."""
    from .comm import SerialComm

    group = group or SerialComm()
    root = os.path.abspath(root)
    if not os.path.exists(root):
        raise UsageError(f"dataset root {root}: no such directory")
    if not os.path.isdir(root):
        raise UsageError(f"dataset root {root}: not a directory")
    manifest = _read_manifest(root)
    if manifest is None:
        ds = _open_derived(root, group, *derive) if derive else _open_foreign(root, group)
        # a plain directory holds the workload's samples per file (a DLIO tfrecord file: many)
        ds.foreign_samples = ds.samples_per_shard = samples_per_file
        return ds
    try:
        if manifest["schema"] == SCHEMA_V1:
            return _open_v1(root, manifest)
        return _open_iodl(root, manifest)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise UsageError(f"{os.path.join(root, MANIFEST)}: unreadable dataset manifest ({type(exc).__name__}: {exc})") from None


def _inside(root: str, entry, manifest_path: str, what: str) -> str:
    """ROOT/entry after symlinks, or a UsageError when it is not a relative name inside the root."""
    if not isinstance(entry, str) or not entry or os.path.isabs(entry) or ".." in entry.split("/") or "\0" in entry:
        raise UsageError(f"{manifest_path}: {what} {entry!r} is not a relative path inside {root}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, entry))
    if os.path.commonpath([real_root, real]) != real_root:
        raise UsageError(f"{manifest_path}: {what} {entry!r} resolves to {real}, outside {root}")
    return real


def _load_npy(path: str, rows: bool = False):
    """A plain integer .npy written by generate (never pickles, never follows a link out: see
    _inside). The header is checked against the file's size first, so that a forged shape cannot
    make us allocate more than the file holds. rows: a TableRows over the descriptor that was
    checked instead of the array (its rows read when looked up)."""
    from numpy.lib import format as npy

    with _open_regular(path) as f:
        version = npy.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"{path}: .npy format version {version} (generate writes 1.0)")
        read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if dtype.hasobject or dtype.kind not in "iu":
            raise ValueError(f"{path}: not an integer array ({dtype})")
        data_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if data_bytes != os.fstat(f.fileno()).st_size - f.tell():
            raise ValueError(f"{path}: its header promises {data_bytes} bytes of data, the file holds "
                             f"{os.fstat(f.fileno()).st_size - f.tell()}")
        if rows and data_bytes and not fortran and len(shape) >= 1:
            return TableRows(os.dup(f.fileno()), path, dtype, shape, f.tell())
        f.seek(0)
        return np.load(f, allow_pickle=False)


def _form_of(manifest: dict):
    """A generated dataset's format, with its spec's layout keys (parquet's columns)."""
    return format_for({**manifest.get("spec", {}), "format": manifest["format"]})


_CHECK_ROWS = 1 << 15   # table rows checked at a time (256 KiB of an int64 column)


class TableShort(IodlError, ValueError):
    """A table holds fewer rows than its checked header said: cut while a run reads it. A ValueError
    where the dataset is opened (reported as an unreadable manifest), one line anywhere else."""


class TableRows(Sequence):
    """A generated dataset's .npy table (file sizes, sample sizes, extents), its rows read with pread
    when looked up, from the descriptor whose header was checked.

    Not a map: pages of a mapped file count in the RSS of every process that touched them, and a
    rank reading its shards in a shuffled order touches every page of the table (7.8 MB per table
    at 1,000,000 files, in each rank, plus the kernel's fault-around). Read this way the table stays
    in the node's page cache once, and a rank holds the rows of the shards it has in hand: one
    pread of a few bytes per shard opened, against the ~100 us a shard's open and reads take.
    `repeat`: the rows seen that many times over (a dataset's copies repeat its files' sizes)."""

    def __init__(self, fd: int, path: str, dtype: np.dtype, shape: tuple, offset: int, repeat: int = 1):
        import weakref

        self.path, self.dtype, self._fd, self._offset = path, np.dtype(dtype), fd, offset
        self._stored = int(shape[0])
        self._inner = tuple(int(x) for x in shape[1:])
        self._row = int(np.prod(self._inner, dtype=np.int64)) * self.dtype.itemsize
        self.shape = (self._stored * repeat,) + self._inner
        self._close = weakref.finalize(self, os.close, fd)   # the descriptor lives as long as the table

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def repeated(self, times: int) -> "TableRows":
        """The same rows, seen `times` times over (its own descriptor)."""
        return TableRows(os.dup(self._fd), self.path, self.dtype, (self._stored,) + self._inner, self._offset, times)

    def __len__(self) -> int:
        return self.shape[0]

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Stored rows start..stop-1 (start < stop <= the rows stored) as an array."""
        want = (stop - start) * self._row
        data = os.pread(self._fd, want, self._offset + start * self._row)
        if len(data) != want:
            raise TableShort(f"{self.path}: shorter than its header says (cut while iodl was reading it?)")
        return np.frombuffer(data, dtype=self.dtype).reshape((stop - start,) + self._inner)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return np.array([self[j] for j in range(*i.indices(len(self)))], dtype=self.dtype).reshape(
                (-1,) + self._inner)
        if not np.isscalar(i):   # a list or array of indices (a group of shards)
            idx = np.asarray(i, dtype=np.int64).reshape(-1)
            return np.array([self[int(j)] for j in idx], dtype=self.dtype).reshape(idx.shape + self._inner)
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of a table of {len(self)}")
        base = i % len(self) % self._stored
        row = self.rows(base, base + 1)[0]
        return row if self._inner else row[()]

    def chunks(self, rows: int = 1 << 15):
        """The whole table (repeats included) a bounded chunk at a time."""
        for _ in range(len(self) // self._stored):
            for start in range(0, self._stored, rows):
                yield self.rows(start, min(self._stored, start + rows))

    # whole-table reductions a chunk at a time (numpy's np.sum / np.max call these); over every
    # value only, so an axis is refused rather than ignored
    def sum(self, axis=None, dtype=None, out=None, **_):
        if axis is not None or out is not None:
            raise TypeError("TableRows.sum: whole-table only")
        return sum(int(c.sum(dtype=np.int64)) for c in self.chunks())

    def max(self, axis=None, out=None, **_):
        if axis is not None or out is not None:
            raise TypeError("TableRows.max: whole-table only")
        return max(int(c.max()) for c in self.chunks())

    def __array__(self, dtype=None, copy=None):
        """The whole table in memory: for a caller that needs all of it (validate, a test)."""
        whole = np.concatenate(list(self.chunks())) if len(self) else np.empty(self.shape, self.dtype)
        return whole if dtype is None else whole.astype(dtype, copy=False)


def int_rows(sizes):
    """A size table to look sizes up in: a TableRows as it is (rows read when looked up, no copy of
    the whole), anything else as an int64 array."""
    return sizes if isinstance(sizes, TableRows) else np.asarray(sizes, dtype=np.int64)


def _table_rows(table, start: int, stop: int) -> np.ndarray:
    """table[start:stop] of a table as loaded (a TableRows is read from its file, not held)."""
    return table.rows(start, stop) if isinstance(table, TableRows) else np.asarray(table[start:stop])


def _check_tables(mpath: str, files: int, sizes: np.ndarray, extents, stated: np.ndarray, name,
                  form=None) -> tuple[int, int]:
    """Sample sizes and extents fit the files' stated sizes (vectorised, a chunk of rows at a time:
    no work per file in Python, memory bounded whatever the files). Returns (largest, sum) of the
    stated sizes."""
    from . import limits

    if sizes.ndim != 2 or sizes.shape[0] != files or not sizes.size:
        raise ValueError(f"sample sizes have shape {sizes.shape} for {files} files")
    if extents is not None and extents.shape != sizes.shape + (2,):
        raise ValueError(f"extents have shape {extents.shape}, expected {sizes.shape + (2,)}")
    if stated.shape != (files,):
        raise ValueError(f"file sizes have shape {stated.shape}, expected ({files},)")
    form = form or FORMATS[name.fmt]
    first = _table_rows(sizes, 0, 1)[0]
    framing = form.size_of(first)   # the same per file (every file has as many samples), or None: npz, hdf5
    total = largest = 0
    for start in range(0, files, _CHECK_ROWS):
        stop = min(files, start + _CHECK_ROWS)
        sz, st = _table_rows(sizes, start, stop), _table_rows(stated, start, stop)
        if sz.min() < 1:
            raise ValueError("a sample size below 1 byte")
        bad = (st < 0) | (st > limits.MAX_SHARD_SIZE)
        if bad.any():
            i = start + int(np.argmax(bad))
            raise UsageError(f"{mpath}: shard {name(i)!r}: size {int(stated[i])} is not a shard's size")
        # every sample lies inside the size the manifest promises (the size each open then checks);
        # float64 sums are exact far beyond MAX_SHARD_SIZE, and a forged size cannot wrap them around
        if extents is not None:
            ex = _table_rows(extents, start, stop)
            ends = (ex[:, :, 0].astype(np.float64) + ex[:, :, 1]).max(axis=1)
        elif framing is not None:
            ends = sz.sum(axis=1, dtype=np.float64) + (framing - int(first.sum()))
        else:
            ends = np.zeros(len(st))
        past = ends > st.astype(np.float64)
        if past.any():
            j = int(np.argmax(past))
            raise UsageError(f"{mpath}: shard {name(start + j)!r}: its samples end at byte {int(ends[j])}, "
                             f"past the {int(st[j])} bytes it states")
        total += int(st.sum(dtype=np.int64))
        largest = max(largest, int(st.max()))
    return largest, total


def _copies_and_folders(root: str, manifest: dict, mpath: str, files: int):
    from . import limits

    copies = manifest["copies"]
    if not isinstance(copies, list) or not copies:
        raise UsageError(f"{mpath}: 'copies' must be a non-empty list")
    # bounded before anything is built from the lists (a 10^9-entry copies list must not hang us)
    if len(copies) > limits.MAX_COPIES or files * len(copies) > limits.MAX_SHARDS:
        raise UsageError(f"{mpath}: names {files:,} files x {len(copies):,} copies: at most "
                         f"{limits.MAX_COPIES:,} copies and {limits.MAX_SHARDS:,} shards")
    copy_dirs = [_inside(root, c, mpath, "copies entry") for c in copies]
    folders = manifest.get("subfolders", 1)
    if isinstance(folders, bool) or not isinstance(folders, int) or not 1 <= folders <= max(1, files):
        raise UsageError(f"{mpath}: subfolders {folders!r} is not a number of folders from 1 to {files}")
    # each folder of each copy resolves inside the root (a folder that is a link out is refused)
    folder_dirs = [[_inside(root, os.path.join(c, folder_name(k, folders)), mpath, "folder") if folders > 1 else d
                    for k in range(folders)] for c, d in zip(copies, copy_dirs)]
    return folder_dirs


class _Namer:
    """Shard names for error messages, derived from the index (schema 2) or listed (schema 1)."""

    def __init__(self, fmt: str, files: int, listed=None):
        self.fmt, self.files, self.listed = fmt, files, listed

    def __call__(self, i: int) -> str:
        return self.listed[i] if self.listed is not None else shard_name(self.fmt, i, self.files)


def _check_complete(root: str, manifest: dict, mpath: str) -> None:
    if manifest.get("status") != "complete":
        raise UsageError(f"dataset under {root} is incomplete (generation interrupted?): run iodl generate again "
                         "with the same options to finish it")
    manifest["files"], manifest["copies"], manifest["sample_sizes"]   # KeyError: unreadable
    if manifest.get("format") not in FORMATS:
        raise UsageError(f"{mpath}: format {manifest.get('format')!r} is not one iodl writes")


def _open_iodl(root: str, manifest: dict) -> Dataset:
    """Schema 2: a small JSON header; file sizes, sample sizes and extents in .npy files whose rows
    are read when looked up (TableRows); names derived from indices. Nothing here grows with the
    files."""
    mpath = os.path.join(root, MANIFEST)
    _check_complete(root, manifest, mpath)
    files = manifest["files"]
    if isinstance(files, bool) or not isinstance(files, int) or files < 1:
        raise UsageError(f"{mpath}: 'files' must be a number of files")
    folder_dirs = _copies_and_folders(root, manifest, mpath, files)
    sizes = _load_npy(_inside(root, manifest["sample_sizes"], mpath, "sample_sizes"), rows=True)
    stated = _load_npy(_inside(root, manifest["file_sizes"], mpath, "file_sizes"), rows=True)
    extents = None
    if manifest.get("extents"):
        extents = _load_npy(_inside(root, manifest["extents"], mpath, "extents"), rows=True)
    largest, total = _check_tables(mpath, files, sizes, extents, stated, _Namer(manifest["format"], files),
                                   _form_of(manifest))
    copies = len(folder_dirs)
    # copies repeat the files' sizes: the same rows looked up modulo the files, not a tiled copy
    shard_sizes = stated if copies == 1 or not isinstance(stated, TableRows) else stated.repeated(copies)
    if not isinstance(shard_sizes, TableRows):
        shard_sizes = np.tile(np.asarray(stated, dtype=np.int64), copies)
    paths = GeneratedPaths(folder_dirs, manifest["format"], files, os.path.realpath(root))
    return Dataset(root, manifest, paths, shard_sizes, copies, sizes, extents, stats=(largest, total * copies))


def _open_v1(root: str, manifest: dict) -> Dataset:
    """Schema 1 (iodl before 0.x wrote it): the files listed in the JSON. Still read, so that
    datasets made then keep working; every rank parses the list (iodl generate on the same root
    rewrites the manifest as schema 2 without rewriting a shard)."""
    from . import limits

    mpath = os.path.join(root, MANIFEST)
    _check_complete(root, manifest, mpath)
    files = manifest["files"]
    if not isinstance(files, list) or not files:
        raise UsageError(f"{mpath}: 'files' must be a non-empty list")
    limits.check_memory(f"{mpath}: a dataset of {len(files) * max(1, len(manifest.get('copies') or [])):,} shards",
                        _SHARD_BYTES * len(files) * max(1, len(manifest.get("copies") or [])))
    folder_dirs = _copies_and_folders(root, manifest, mpath, len(files))
    sizes = _load_npy(_inside(root, manifest["sample_sizes"], mpath, "sample_sizes"))
    extents = None
    if manifest.get("extents"):
        extents = _load_npy(_inside(root, manifest["extents"], mpath, "extents"))
    names = []
    for f in files:
        # a bare file name: it names a file in its copy directory, and nothing else
        name = f["path"]
        if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\0" in name:
            raise UsageError(f"{mpath}: files entry {name!r} is not a file name inside a copy directory")
        if int(f["samples"]) != (sizes.shape[1] if sizes.ndim == 2 else -1):
            raise UsageError(f"{mpath}: files entry {name!r}: samples {f['samples']!r} do not fit its sample sizes")
        names.append(name)
    stated = np.array([int(f["size"]) for f in files], dtype=np.int64)
    _check_tables(mpath, len(files), sizes, extents, stated, _Namer(manifest["format"], len(files), names))
    folders = len(folder_dirs[0])
    paths = [os.path.join(fd[i % folders], n) for fd in folder_dirs for i, n in enumerate(names)]
    _check_shard_links(root, paths, mpath)
    return Dataset(root, manifest, paths, np.tile(stated, len(folder_dirs)), len(folder_dirs), sizes, extents)


_SHARD_BYTES = 200   # memory per shard a rank holds with a schema-1 manifest (its path and entries)


def _check_shard_links(root: str, paths, mpath: str) -> None:
    """A shard that is a symlink must resolve inside the root (schema 1: checked at open; schema 2
    checks each shard as it is opened for reading, engine.open_for_read(inside=...)). The copy
    directories are real paths already (_inside) and names are bare, so only links need resolving."""
    import stat

    real_root = os.path.realpath(root)
    for path in paths:
        try:
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                continue
        except FileNotFoundError:
            continue   # missing: its open says so, naming it
        real = os.path.realpath(path)
        if os.path.commonpath([real_root, real]) != real_root:
            raise UsageError(f"{mpath}: shard {path} resolves to {real}, outside {root}")


_LIST_THREADS = 4   # stat threads per directory listed (_native.list_dir): a cold inode cache waits on the disk


def _list_foreign(root: str) -> dict[str, np.ndarray]:
    """Every regular file under root (recursive; in each directory its files by name, then its
    subdirectories by name, as os.walk with sorted names gives them): relative names packed in one
    byte array, their offsets, their sizes. Each directory is read and its files stat'ed in C
    (_native.list_dir: no Python work per file); directories are opened relative to their parent
    without following links. A symlink is followed only when it resolves inside the root (to a
    file, or to a directory that is not one of its own ancestors); a FIFO, socket or device is
    refused, a dangling link skipped."""
    import stat

    from . import _native

    real_root = os.path.realpath(root)
    parts: list[tuple[bytes, np.ndarray, np.ndarray]] = []   # (names, offsets, sizes) of each directory, in order

    def refuse(path: bytes, why: str):
        raise UsageError(f"dataset root {root}: {os.fsdecode(path)} {why}")

    def walk(fd: int, rel: bytes, chain: tuple[str, ...]) -> None:
        """The directory open on fd (ROOT/rel), then its subdirectories; closes fd. chain: the real
        paths of the directories walked down to it, itself last (a link back up one is a loop)."""
        try:
            try:
                blob, offsets, sizes, rest = _native.list_dir(fd, rel, _LIST_THREADS)
            except OSError as exc:
                where = os.path.join(root, os.fsdecode(rel), os.fsdecode(exc.filename or b""))
                raise UsageError(f"dataset root {root}: {where.rstrip('/')}: {exc.strerror}") from None
            offsets, sizes = np.frombuffer(offsets, dtype=np.int64), np.frombuffer(sizes, dtype=np.int64)
            subdirs: list[tuple[bytes, str | None]] = []   # (name, real path of a linked directory, else None)
            linked: list[tuple[bytes, int]] = []           # (rel name, size) of links to files inside the root
            for name, kind in rest:
                path = os.path.join(os.fsencode(root), rel + name)
                if kind == "d":
                    subdirs.append((name, None))
                elif kind == "o":
                    refuse(path, "is not a regular file (FIFO, socket or device); iodl reads regular files only")
                else:   # a link: judged by where it leads
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue   # dangling
                    target = os.path.realpath(path)
                    if os.path.commonpath([real_root, os.fsdecode(target)]) != real_root:
                        refuse(path, f"is a symlink to {os.fsdecode(target)}, outside the root")
                    if stat.S_ISDIR(st.st_mode):
                        target = os.fsdecode(target)
                        if any(os.path.commonpath([target, up]) == target for up in chain):
                            refuse(path, "is a symlink to a directory it is inside (a loop)")
                        subdirs.append((name, target))
                    elif stat.S_ISREG(st.st_mode):
                        linked.append((rel + name, st.st_size))
                    else:
                        refuse(path, "is not a regular file (FIFO, socket or device); iodl reads regular files only")
            if linked:   # rare: merged into the name order in Python
                names = [blob[offsets[i]:offsets[i + 1]] for i in range(len(sizes))] + [n for n, _s in linked]
                all_sizes = sizes.tolist() + [s for _n, s in linked]
                order = sorted(range(len(names)), key=names.__getitem__)
                blob = b"".join(names[i] for i in order)
                offsets = np.zeros(len(order) + 1, dtype=np.int64)
                np.cumsum([len(names[i]) for i in order], out=offsets[1:])
                sizes = np.array([all_sizes[i] for i in order], dtype=np.int64)
            if len(sizes):
                parts.append((blob, offsets, sizes))
            for name, target in sorted(subdirs):
                try:
                    sub = (os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if target else
                           os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd))
                except OSError as exc:
                    refuse(os.path.join(os.fsencode(root), rel + name), f"cannot be listed ({exc.strerror})")
                walk(sub, rel + name + b"/", (*chain, target or os.path.join(chain[-1], os.fsdecode(name))))
        finally:
            os.close(fd)

    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"dataset root: {root}: {exc.strerror}") from None
    walk(top, b"", (real_root,))
    if not parts:
        raise UsageError(f"dataset root {root} is empty: no files to read (run iodl generate --root {root})")
    offsets = np.zeros(sum(len(p[2]) for p in parts) + 1, dtype=np.int64)
    at, base = 1, 0
    for _blob, offs, sizes in parts:   # each directory's offsets start at 0: shifted onto the joined names
        offsets[at:at + len(sizes)] = offs[1:] + base
        at, base = at + len(sizes), base + int(offs[-1])
    sizes = np.concatenate([p[2] for p in parts])
    return {"blob": np.frombuffer(b"".join(p[0] for p in parts), dtype=np.uint8), "offsets": offsets,
            "sizes": sizes, "stats": np.array([sizes.max(), sizes.sum()], dtype=np.int64)}


def _open_derived(root: str, group, prefix: str, fmt: str, files: int, subfolders: int) -> Dataset:
    """A plain directory read as DLIO reads it with skip_listing: the files' names derived, not
    listed (DerivedPaths); each is looked at once (stat) for its size, by the group's first rank.
    A missing one is a one-line error naming it, as DLIO's check of the derived names is."""
    import stat

    from .comm import node_shared_arrays

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
    from .comm import node_shared_arrays

    arrays = node_shared_arrays(group, lambda: _list_foreign(root))
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


# ---------------------------------------------------------------- generating -----------------

def _spec_key(manifest_or_spec: dict) -> dict:
    """What must match for a re-run to continue an existing dataset (copies may change)."""
    return {k: manifest_or_spec[k] for k in ("format", "files", "samples_per_file", "sample_size", "sample_size_stdev")}


def _prepare_root(root: str, spec: dict, seed: int, folders: int = 1) -> str | None:
    """Rank 0: check or create one root. Returns an error message, or None if fine."""
    if not os.path.exists(root):
        parent = os.path.dirname(root.rstrip(os.sep)) or "."
        if not os.path.isdir(parent):
            return f"--root {root}: parent directory {parent} does not exist"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"--root {root}: parent directory {parent} is not writable"
        try:
            os.mkdir(root)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"--root {root}: cannot create it: {exc.strerror}"
        return None
    if not os.path.isdir(root):
        return f"--root {root}: not a directory"
    try:
        manifest = _read_manifest(root)
    except UsageError as exc:
        return f"--root {root}: {exc}"
    if manifest is None:
        # A fresh filesystem's lost+found is the only thing allowed: a mount point is a natural root.
        if [n for n in os.listdir(root) if n != "lost+found"]:
            return (f"--root {root} holds files that iodl did not create (no {MANIFEST}); "
                    "choose an empty or new directory")
    else:
        try:
            same = _spec_key(manifest["spec"]) == _spec_key(spec) and manifest["seed"] == seed
            layout = manifest.get("subfolders", 1)
        except (KeyError, TypeError):
            return f"--root {root}: unreadable dataset manifest {MANIFEST}"
        if not same:
            old = manifest["spec"]
            return (f"--root {root} holds another iodl dataset ({old.get('files')} {old.get('format')} files, "
                    f"seed {manifest.get('seed')}, workload {manifest.get('workload')}); use another root")
        if layout != folders:
            return (f"--root {root} holds this dataset in {layout} folder(s) per copy, not {folders}; give "
                    f"--subfolders {layout} to continue it, or use another root")
    if not os.access(root, os.W_OK | os.X_OK):
        return f"--root {root}: not writable"
    return None


def _create(path: str) -> int:
    """A new file at path for writing, never through a symlink: a stale temp of ours (regular file)
    or a planted link is unlinked first (unlink removes the link, never its target); anything else
    there is refused."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise UsageError(f"{path}: exists and is not a regular file; iodl will not write there")
        os.unlink(path)
    # read-write: a format's writer (hdf5) reads back what it wrote through this descriptor
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_via_temp(path: str, write) -> None:
    """write(file object) into path + _TMP, created exclusively, then renamed over path; no temp left on error."""
    tmp = path + _TMP
    fd = _create(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _write_json(path: str, obj) -> None:
    _write_via_temp(path, lambda f: f.write(json.dumps(obj, separators=(",", ":")).encode()))


def _save_npy(path: str, array: np.ndarray) -> None:
    _write_via_temp(path, lambda f: np.save(f, array, allow_pickle=False))


def _make_copy_dir(path: str) -> None:
    """mkdir, or accept an existing real directory; a symlink (or anything else) there is refused."""
    import stat

    try:
        os.mkdir(path)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise UsageError(f"{path}: exists and is not a directory iodl made (a symlink?); "
                             "iodl never writes through links") from None


def _check_space(needs: dict[str, int]) -> None:
    """Refuse before writing when the bytes still to write do not fit; roots on one filesystem add up."""
    per_fs: dict[int, list] = {}
    for root, need in needs.items():
        entry = per_fs.setdefault(os.stat(root).st_dev, [0, []])
        entry[0] += need
        entry[1].append(root)
    for need, roots in per_fs.values():
        st = os.statvfs(roots[0])
        free = st.f_bavail * st.f_frsize
        if need > free:
            raise UsageError(f"--root {', '.join(roots)}: the dataset needs {need} more bytes on that filesystem, "
                             f"it has {free} free")


@dataclass
class GenerateResult:
    roots: list[str]
    shards_written: int        # by all ranks, all roots
    shards_skipped: int        # already complete
    bytes_written: int
    total_bytes: int           # per root
    seconds: float             # the slowest rank's
    written_by_rank: list[int]

    @property
    def mbps(self) -> float:
        return self.bytes_written / self.seconds / 1e6 if self.seconds > 0 else 0.0


def generate(workload, roots, comm, files: int | None = None, copies: int | None = None, fmt: str | None = None,
             seed: int | None = None, progress=None, say=None, subfolders: int | None = None) -> GenerateResult:
    """Write the workload's dataset under every root; ranks share the shards round-robin.

    Re-running continues: shards already present with the right size are skipped. progress, if
    given, is called on every rank as progress(done_bytes, rank_total_bytes) after each shard; say,
    if given, on rank 0 with a one-line description once the roots are checked.
    """
    wl = workload.with_overrides(files=files, copies=copies, format=fmt, seed=seed, subfolders=subfolders)
    spec = wl.to_dict()["dataset"]
    seed_ = wl.train.seed
    ds = wl.dataset
    form = format_for(ds)
    if ds.format == "parquet":   # the sample table read checks for other formats (limits.check_dataset)
        from . import limits

        limits.check_sample_table(ds, wl.source)
    roots = [os.path.abspath(r) for r in roots]
    if not roots:
        raise UsageError("generate: give at least one --root")
    if len({os.path.realpath(r) for r in roots}) != len(roots):   # also twice through a link
        raise UsageError("generate: the same --root is given twice")

    def check_roots():
        # Rank 0 alone looks and creates; collective() then raises the same error on every rank.
        if comm.rank == 0:
            for root in roots:
                try:
                    problem = _prepare_root(root, spec, seed_, folders_of(ds.files, ds.subfolders))
                except OSError as exc:
                    problem = f"--root {root}: {exc.strerror or exc}"
                if problem:
                    raise UsageError(problem)

    collective(comm, check_roots)
    if say and comm.rank == 0:
        from .units import format_size

        say(f"iodl generate: {wl.name}: {ds.copies} x {ds.files} {ds.format} files x {ds.samples_per_file} samples "
            f"of ~{format_size(ds.sample_size)} (seed {seed_}) under {len(roots)} root(s), {comm.size} rank(s)")
    sizes = sample_sizes(ds, seed_)
    folders = folders_of(ds.files, ds.subfolders)
    names = _Names(ds.format, ds.files, folders)   # relative path of file i, made when asked for
    manifest = {
        "schema": SCHEMA, "status": "incomplete", "generator": f"iodl {__version__}",
        "workload": wl.name, "workload_spec": wl.to_dict(), "spec": spec, "seed": seed_, "format": ds.format,
        "copies": [copy_dir(c) for c in range(ds.copies)],
        "subfolders": folders, "files": ds.files, "file_sizes": FILE_SIZES_FILE,
        "sample_sizes": SIZES_FILE, "extents": None, "total_bytes": None,
    }

    want = _planned_file_sizes(form, sizes)
    index_bytes = sum(a.nbytes for a in form.index_files(sizes[0]).values())   # per shard (indexed_binary)

    def _bytes_to_write(root):
        # what is still missing under this root (shards already there with the right size are
        # skipped): one listing per folder, no call per file
        need = 0
        for c in range(ds.copies):
            for k in range(folders):
                have = _listing(os.path.join(root, copy_dir(c), folder_name(k, folders)))
                idx = np.arange(k, ds.files, folders)
                if have:
                    done = np.array([have.get(os.path.basename(names[i])) == want[i] for i in idx.tolist()], dtype=bool)
                    idx = idx[~done]
                need += int(want[idx].sum()) + len(idx) * index_bytes
        return need

    def start_roots():
        if comm.rank == 0:
            _check_space({root: _bytes_to_write(root) for root in roots})   # before the first byte
            for root in roots:
                _save_npy(os.path.join(root, SIZES_FILE), sizes)
                old = _read_manifest(root)
                if old is None or old.get("status") != "complete":
                    _write_json(os.path.join(root, MANIFEST), manifest)
                for c in range(ds.copies):
                    _make_copy_dir(os.path.join(root, copy_dir(c)))
                    for k in range(folders if folders > 1 else 0):
                        _make_copy_dir(os.path.join(root, copy_dir(c), folder_name(k, folders)))

    collective(comm, lambda: _oserror_to_iodl(start_roots))

    # Work items over all roots, copies and files; rank r takes items k with k % size == r.
    small = _small_files(form, want)
    if small:
        items = mine = []
        per_item = np.tile(want, len(roots) * ds.copies)
        rank_total = int(per_item[comm.rank::comm.size].sum())
    else:
        items = [(r, c, i) for r in range(len(roots)) for c in range(ds.copies) for i in range(ds.files)]
        mine = items[comm.rank::comm.size]
        rank_total = sum(int(want[i]) for _r, _c, i in mine)

    t0 = time.perf_counter()
    written = skipped = nbytes = 0
    file_sizes: dict[int, int] = {}
    extents: dict[int, np.ndarray] = {}
    pending = []

    def finish(item, fd, tmp, final, index):
        fds.discard(fd)
        try:
            os.close(fd)    # a network filesystem may report a failed write (ENOSPC, EIO) only here
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, tmp) from None
        _write_index_files(final, index)
        done = _rename(item, tmp, final)
        temps.discard(tmp)
        return done

    def append(fd, view, tmp):
        mv = memoryview(view).cast("B")
        pos = 0
        try:
            while pos < len(mv):
                pos += os.write(fd, mv[pos:])
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, tmp) from None

    def write_whole(content, tmp, final, item, index):
        fd = _create(tmp)
        try:
            form.write(content, fd)   # into our descriptor: the name is never opened again
        except OSError as exc:        # a library's error may not name the file (ENOSPC in h5py, zipfile)
            raise OSError(exc.errno, exc.strerror or str(exc), tmp) from None
        finally:
            os.close(fd)
        _write_index_files(final, index)
        done = _rename(item, tmp, final)
        temps.discard(tmp)
        return done

    temps: set[str] = set()      # temp files of shards being written: removed if the run fails
    fds: set[int] = set()        # their open descriptors

    def drain(limit):
        nonlocal nbytes
        while len(pending) > limit:
            done = pending.pop(0).result()
            if done is None:
                continue
            (r, c, i), size = done
            nbytes += size
            file_sizes[i] = size
            if progress:
                progress(nbytes, rank_total)

    # Two reused buffers: the writer thread writes from one while this thread fills the other.
    buffers = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]
    turn = [0]

    def buffer(nbytes_needed):
        slot = turn[0] = 1 - turn[0]
        if len(buffers[slot]) < nbytes_needed:
            buffers[slot] = content_buffer(int(nbytes_needed * 1.1))
        return buffers[slot]

    def work():
        from concurrent.futures import ThreadPoolExecutor  # generate only: readers never load it

        nonlocal written, skipped, nbytes
        if small:
            def counted(n):
                nonlocal nbytes
                nbytes += n
                if progress:
                    progress(nbytes, rank_total)

            written, skipped = _write_small_files(form, roots, ds, folders, names, sizes, want, seed_, comm, counted)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="iodl-writer") as writer:
            try:
                for r, c, i in mine:
                    final = os.path.join(roots[r], copy_dir(c), names[i])
                    if os.path.isfile(final) and not os.path.islink(final) and form.check_file(final, sizes[i]):
                        skipped += 1
                        file_sizes[i] = os.path.getsize(final)
                        continue
                    tmp = final + _TMP
                    key = (seed_, c, i)
                    temps.add(tmp)
                    if form.streams:
                        fd = _create(tmp)
                        fds.add(fd)
                        for piece in form.pieces(sizes[i], key, buffer):
                            pending.append(writer.submit(append, fd, piece, tmp))
                            drain(1)  # the piece before this one is written: its buffer is free
                        pending.append(writer.submit(finish, (r, c, i), fd, tmp, final, form.index_files(sizes[i])))
                    else:
                        content = form.prepare(sizes[i], key, buffer(int(sizes[i].sum()) + BLOCK))
                        pending.append(writer.submit(write_whole, content, tmp, final, (r, c, i),
                                                     form.index_files(sizes[i])))
                    written += 1
                    drain(1)
                drain(0)
            except BaseException:
                for fut in pending:
                    fut.cancel()
                writer.shutdown(wait=True)
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                for tmp in temps:   # cut-short shards never keep (or get) final names
                    _unlink_quietly(tmp)
                raise
        # Extents that must be read from the files (npz, hdf5): once per file index, from a copy this rank holds.
        if form.extents(sizes[0]) is None:
            for r, c, i in mine:
                if i not in extents:
                    try:
                        extents[i] = form.extents_from_file(os.path.join(roots[r], copy_dir(c), names[i]),
                                                            ds.samples_per_file)
                    except ValueError as exc:
                        raise IodlError(f"reading back a written shard: {exc}") from None

    collective(comm, lambda: _oserror_to_iodl(work))
    elapsed_local = time.perf_counter() - t0
    gathered = comm.gather((written, skipped, nbytes, elapsed_local, file_sizes, extents), root=0)

    def finish_roots():
        result = None
        if comm.rank == 0:
            all_sizes: dict[int, int] = {}
            all_ext: dict[int, np.ndarray] = {}
            for _w, _s, _b, _t, fs, ex in gathered:
                for i, size in fs.items():
                    if all_sizes.setdefault(i, size) != size:
                        raise IodlError(f"shard {names[i]} has different sizes in different copies or roots "
                                        f"({all_sizes[i]} and {size} bytes)")
                all_ext.update(ex)
            final_sizes = want.copy()   # small shards: as planned, by construction
            if not small:
                final_sizes = np.array([all_sizes[i] for i in range(ds.files)], dtype=np.int64)
            manifest["status"] = "complete"
            manifest["total_bytes"] = int(final_sizes.sum()) * ds.copies
            if all_ext:
                manifest["extents"] = EXTENTS_FILE
            for root in roots:
                _save_npy(os.path.join(root, FILE_SIZES_FILE), final_sizes)
                if all_ext:
                    _save_npy(os.path.join(root, EXTENTS_FILE), np.stack([all_ext[i] for i in range(ds.files)]))
                _write_json(os.path.join(root, MANIFEST), manifest)
            result = GenerateResult(
                roots=roots, shards_written=sum(g[0] for g in gathered), shards_skipped=sum(g[1] for g in gathered),
                bytes_written=sum(g[2] for g in gathered), total_bytes=manifest["total_bytes"],
                seconds=max(g[3] for g in gathered), written_by_rank=[g[0] for g in gathered])
        return result

    result = collective(comm, lambda: _oserror_to_iodl(finish_roots))
    return comm.bcast(result, root=0)


class _Names:
    """names[i]: file i's path inside its copy directory (shard_relpath), never held as a list."""

    def __init__(self, fmt: str, files: int, folders: int):
        self.fmt, self.files, self.folders = fmt, files, folders

    def __getitem__(self, i: int) -> str:
        return shard_relpath(self.fmt, int(i), self.files, self.folders)


def _planned_file_sizes(form, sizes: np.ndarray) -> np.ndarray:
    """(files,) int64 bytes each shard will hold: from the sample sizes where the format fixes it,
    else the payload (npz, hdf5: their real sizes are learnt from the written files)."""
    if isinstance(form, _Stream):
        return sizes.sum(axis=1) + form.overhead * sizes.shape[1]
    return np.array([form.size_of(row) or int(row.sum()) for row in sizes], dtype=np.int64)


SMALL_FILE = 1 << 20      # shards up to this size (raw, tfrecord) are written in batches by _write_small_files
_BATCH_BYTES = 8 << 20    # content built per batch ...
_BATCH_FILES = 1024       # ... or files per batch
_WRITERS = 2              # threads running _native.write_files (the GIL is released while they write)


def _small_files(form, want: np.ndarray) -> bool:
    """Whether this dataset's shards go through the batched small-file path."""
    return isinstance(form, _Stream) and not form.index_suffixes and len(want) > 0 and int(want.max()) <= SMALL_FILE


def _listing(folder: str) -> dict[str, int]:
    """name -> size of the regular files already in a folder (none when it does not exist yet)."""
    out = {}
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_file(follow_symlinks=False):
                    out[entry.name] = entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        pass
    return out


def _open_dir(path: str) -> int:
    """A directory iodl made, opened without following a link in its place (files are then made
    relative to it: its name cannot be swapped for a link under us)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))


def _write_small_files(form, roots, ds, folders, names, sizes, want, seed, comm, counted) -> tuple[int, int]:
    """This rank's share of small shards (work item g = (root * copies + copy) * files + file goes to
    rank g % size, as on the general path): per folder, batches of files built in one numpy pass
    (formats.content_batch, framed as a whole) and written by _native.write_files on _WRITERS
    threads while the next batch is built. Python does no work per file; a re-run lists each
    folder once and skips shards already there with their full size. Returns (written, skipped)."""
    from concurrent.futures import ThreadPoolExecutor

    from . import _native
    from .formats import content_batch

    width = max(5, len(str(ds.files)))   # shard_name's pattern, built by write_files from the index
    prefix, tail = "train-", f"-of-{ds.files:0{width}d}.{form.suffix}"
    if prefix + f"{ds.files - 1:0{width}d}" + tail != shard_name(ds.format, ds.files - 1, ds.files):
        raise AssertionError("write_files' names differ from shard_name's")
    overhead = getattr(form, "overhead", 0)
    written = skipped = 0
    slots = 2 * _WRITERS
    buffers: list = [None] * slots
    busy: list = [None] * slots
    turn = 0
    dirfds: list[int] = []
    def folders_to_write():
        """(path, copy, indices) of each folder of this rank's share, shards already there left out."""
        nonlocal skipped
        for r, root in enumerate(roots):
            for c in range(ds.copies):
                for k in range(folders):
                    path = os.path.join(root, copy_dir(c), folder_name(k, folders))
                    idx = np.arange(k, ds.files, folders, dtype=np.int64)
                    idx = idx[((r * ds.copies + c) * ds.files + idx) % comm.size == comm.rank]
                    have = _listing(path) if len(idx) else None
                    if have:
                        done = np.array([have.get(os.path.basename(names[i])) == want[i] for i in idx.tolist()],
                                        dtype=bool)
                        skipped += int(done.sum())
                        idx = idx[~done]
                    if len(idx):
                        yield path, c, idx

    def batches(idx):
        ends = np.cumsum(want[idx])
        start = 0
        while start < len(idx):
            stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _BATCH_BYTES, side="right"))
            stop = min(max(stop, start + 1), start + _BATCH_FILES, len(idx))
            yield idx[start:stop]
            start = stop

    def drain():
        for j, fut in enumerate(busy):
            if fut is not None:
                busy[j] = None
                fut.result()

    with ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="iodl-writer") as pool:
        try:
            todo = folders_to_write()
            while True:
                # a few folders at a time, their batches taken in turn: the writers work in different
                # directories (one directory's lock serialises creates), with few descriptors open
                window = [job for _n, job in zip(range(slots), todo)]
                if not window:
                    break
                for path, _c, _idx in window:
                    dirfds.append(_open_dir(path))
                queues = [(fd, c, batches(idx)) for fd, (_p, c, idx) in zip(dirfds[-len(window):], window)]
                while queues:
                    for q in list(queues):
                        dirfd, c, gen = q
                        batch = next(gen, None)
                        if batch is None:
                            queues.remove(q)
                            continue
                        if busy[turn] is not None:
                            busy[turn].result()     # its buffer is free again
                            busy[turn] = None
                        buf, offsets = content_batch(seed, c, batch, want[batch], buffers[turn])
                        buffers[turn] = buf
                        if overhead:   # TFRecord framing of every record of the batch at once
                            rec = sizes[batch]
                            within = np.cumsum(rec + overhead, axis=1) - (rec + overhead)
                            form.frame(buf, (offsets[:, None] + within).ravel(), rec.ravel())
                        busy[turn] = pool.submit(_native.write_files, dirfd, prefix, width, tail, None,
                                                 batch, buf, offsets, want[batch].astype(np.int64))
                        counted(int(want[batch].sum()))
                        written += len(batch)
                        turn = (turn + 1) % slots
                drain()
                while dirfds:
                    os.close(dirfds.pop())
        except BaseException:
            for fut in busy:
                if fut is not None:
                    fut.cancel()
            pool.shutdown(wait=True)
            raise
        finally:
            pool.shutdown(wait=True)
            while dirfds:
                os.close(dirfds.pop())
    return written, skipped


def _write_index_files(final: str, index: dict) -> None:
    """A format's index files beside its shard (indexed_binary's .off.idx and .sz.idx), each through
    an exclusive temporary renamed into place; written before the shard gets its final name, so that
    a shard under its final name has its index (a re-run's check_file looks at both)."""
    for suffix, array in index.items():
        _write_via_temp(final + suffix, lambda f, a=array: f.write(memoryview(a).cast("B")))


def _rename(item, tmp, final):
    os.replace(tmp, final)
    return item, os.path.getsize(final)


def _oserror_to_iodl(fn):
    try:
        return fn()
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise IodlError(f"writing the dataset:{where}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- the default dataset --------

def default_data_dir() -> str:
    """$IODL_DATA, else ~/.cache/iodl/data."""
    return os.environ.get("IODL_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "iodl", "data")


def ensure_default_dataset(comm, say=print) -> str:
    """The root of the `tiny` dataset in the data directory, generated on first use (all ranks share it)."""
    from .workload import load_workload

    root = os.path.join(default_data_dir(), "tiny")
    manifest = None
    try:
        manifest = _read_manifest(root) if os.path.isdir(root) else None
    except UsageError:
        pass
    ready = manifest is not None and manifest.get("status") == "complete"
    if not comm.allreduce(int(ready), op="min"):
        def announce():
            if comm.rank == 0:
                os.makedirs(default_data_dir(), exist_ok=True)
                say(f"iodl: generating the default dataset (workload tiny) in {root} ...")

        collective(comm, lambda: _oserror_to_iodl(announce))
        generate(load_workload("tiny"), [root], comm)
    return root
