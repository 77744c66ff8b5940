"""A generated dataset's .npy tables (file sizes, sample sizes, extents): loaded without trusting
them, looked up a row or a batch's rows at a time, checked against each other a chunk at a time."""
from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

import numpy as np
from numpy.lib import format as npy

from .. import _native, limits
from ..errors import IodlError, UsageError
from .files import open_regular

_CHECK_ROWS = 1 << 15   # table rows checked at a time (256 KiB of an int64 column)


def load_npy(path: str, rows: bool = False):
    """A plain integer .npy written by generate (never pickles, never follows a link out: see
    files.inside). The header is checked against the file's size first, so that a forged shape
    cannot make us allocate more than the file holds. rows: a TableRows over the descriptor that
    was checked instead of the array (its rows read when looked up)."""
    with open_regular(path) as f:
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


class TableShort(IodlError, ValueError):
    """A table holds fewer rows than its checked header said: cut while a run reads it. A ValueError
    where the dataset is opened (reported as an unreadable manifest), one line anywhere else."""


class TableRows(Sequence):
    """A generated dataset's .npy table (file sizes, sample sizes, extents), its rows read with pread
    when looked up, from the descriptor whose header was checked.

    Not a map: pages of a mapped file count in the RSS of every process that touched them, and a
    rank reading its shards in a shuffled order touches every page of the table (7.8 MB per table
    at 1,000,000 files, in each rank, plus the kernel's fault-around). Read this way the table stays
    in the node's page cache once, and a rank holds the rows of the shards it has in hand: a
    batch's rows in one call (take: rows near each other in the file read by one pread, in C).
    `repeat`: the rows seen that many times over (a dataset's copies repeat its files' sizes)."""

    def __init__(self, fd: int, path: str, dtype: np.dtype, shape: tuple, offset: int, repeat: int = 1):
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
            return self.take(i)
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of a table of {len(self)}")
        base = i % len(self) % self._stored
        row = self.rows(base, base + 1)[0]
        return row if self._inner else row[()]

    def take(self, indices) -> np.ndarray:
        """The rows of these indices (a batch's shards), in their order, shaped indices' shape +
        a row's: one C call whatever their number (_native.pread_rows)."""
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        try:   # the bounds, negative indices and repeats in C too: a few array operations less a look-up
            data = _native.pread_rows(self._fd, self._offset, self._row, idx, len(self), self._stored)
        except EOFError:
            raise TableShort(f"{self.path}: shorter than its header says (cut while iodl was reading it?)") from None
        return np.frombuffer(data, dtype=self.dtype).reshape(idx.shape + self._inner)

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


def take_rows(table, indices) -> np.ndarray:
    """table[indices] of a table as loaded: a TableRows's rows in one call, an array's by numpy."""
    return table.take(indices) if isinstance(table, TableRows) else np.asarray(table)[np.asarray(indices, dtype=np.int64)]


def _table_rows(table, start: int, stop: int) -> np.ndarray:
    """table[start:stop] of a table as loaded (a TableRows is read from its file, not held)."""
    return table.rows(start, stop) if isinstance(table, TableRows) else np.asarray(table[start:stop])


def check_tables(mpath: str, files: int, sizes, extents, stated, name, form) -> tuple[int, int]:
    """Sample sizes and extents fit the files' stated sizes (vectorised, a chunk of rows at a time:
    no work per file in Python, memory bounded whatever the files). name(i): shard i's name, for
    errors; form: the dataset's formats.Format. Returns (largest, sum) of the stated sizes."""
    if sizes.ndim != 2 or sizes.shape[0] != files or not sizes.size:
        raise ValueError(f"sample sizes have shape {sizes.shape} for {files} files")
    if extents is not None and extents.shape != sizes.shape + (2,):
        raise ValueError(f"extents have shape {extents.shape}, expected {sizes.shape + (2,)}")
    if stated.shape != (files,):
        raise ValueError(f"file sizes have shape {stated.shape}, expected ({files},)")
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
