"""Where a dataset's files sit: the names of a root's files, derived from indices, never listed.

A root written by `iodl generate`:
    ROOT/iodl-dataset.json            manifest (schema iodl.dataset/2): a small JSON header, no list
                                      of files; its presence marks the root as iodl's
    ROOT/iodl-file-sizes.npy          (files,) int64 bytes of each file, shared by all copies
    ROOT/iodl-sample-sizes.npy        (files, samples_per_file) sample sizes in bytes, shared by all copies
    ROOT/iodl-extents.npy             (files, samples_per_file, 2) extents, npz/hdf5 only
    ROOT/copy-0000/train-00000-of-01024.tfrecord ...   one directory per copy, same names in each
    ROOT/copy-0000/07/train-00007-of-20000.tfrecord    above 10,000 files a copy, file i sits in folder
                                                       i % subfolders (manifest "subfolders"; 1: none)
    ROOT/copy-0000/train-00000-of-00001.indexed_binary.off.idx, ....sz.idx   a format's index files
                                                       beside its shard (indexed_binary: formats.py)
A root without a manifest is a plain directory (a foreign dataset): its files are listed
(data.listing) or, as DLIO's skip_listing does, named (DerivedPaths).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .. import _native
from ..formats import FORMATS
from ..records import record

SCHEMA = "iodl.dataset/2"      # a JSON header; file sizes in FILE_SIZES_FILE; names derived from indices
SCHEMA_V1 = "iodl.dataset/1"   # every file listed in the JSON (iodl before 2c7a70b): no longer read
MANIFEST = "iodl-dataset.json"
SIZES_FILE = "iodl-sample-sizes.npy"
FILE_SIZES_FILE = "iodl-file-sizes.npy"
EXTENTS_FILE = "iodl-extents.npy"
FOLDER_FILES = 10_000   # files per folder at most, by default (MLPerf Storage warns above num_subfolders_train's 10,000)
_SIZES_STREAM = 0x5A3E  # seed-sequence tag of the sample-size stream (content streams use copy, file)


@record(frozen=True)
class Shard:
    """One file of a dataset."""
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


def name_parts(fmt: str, files: int) -> tuple[int, str]:
    """(digits of the index, what follows it) in the names of a dataset's shards."""
    width = max(5, len(str(files)))
    return width, f"-of-{files:0{width}d}.{FORMATS[fmt].suffix}"


def shard_name(fmt: str, index: int, files: int) -> str:
    width, tail = name_parts(fmt, files)
    return f"train-{index:0{width}d}{tail}"


def copy_dir(copy: int) -> str:
    return f"copy-{copy:04d}"


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


class ShardNames:
    """names[i]: file i's path inside its copy directory (shard_relpath), never held as a list;
    names(i): its bare name, for error messages."""

    def __init__(self, fmt: str, files: int, folders: int = 1):
        self.fmt, self.files, self.folders = fmt, files, folders

    def __getitem__(self, i: int) -> str:
        return shard_relpath(self.fmt, int(i), self.files, self.folders)

    def __call__(self, i: int) -> str:
        return shard_name(self.fmt, int(i), self.files)


def default_data_dir() -> str:
    """$IODL_DATA, else ~/.cache/iodl/data."""
    return os.environ.get("IODL_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "iodl", "data")


# ---------------------------------------------------------------- paths of a root's shards -------

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
        # shard_name's parts, made once: a name is then one format
        self._prefixes = [[os.path.join(d, "") for d in row] for row in folder_dirs]
        self._width, self._tail = name_parts(fmt, files)
        # the same, encoded once (as os.fsencode does), for joined()
        self._joined_prefixes = b"".join(os.fsencode(p) + b"\0" for row in self._prefixes for p in row)
        self._tail_bytes = os.fsencode(self._tail)
        self._n = len(folder_dirs) * files
        self.inside = real_root   # a shard that is a link is opened only if it resolves inside (open_for_read)

    def _path(self, i: int) -> str:
        c, f = divmod(i, self._files)
        return f"{self._prefixes[c][f % self._folders]}train-{f:0{self._width}d}{self._tail}"

    def joined(self, shards: list[int]) -> bytes:
        """The shards' paths as the open threads take them (cursor.joined_paths), made in one C call."""
        return _native.generated_paths(self._joined_prefixes, self._folders, self._files, self._width,
                                       self._tail_bytes, np.asarray(shards, dtype=np.int64))


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
