"""Small shards (raw, tfrecord up to SMALL_FILE) written in batches by C (_native.write_files) under
their final names: a rename per file would double a small file's metadata work, and Python does
no work per file. The manifest still says "incomplete" until every shard is written, and a re-run
rewrites any shard shorter than planned."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _native
from ..formats import Stream, content_batch
from .files import open_dir
from .layout import copy_dir, folder_name, shard_name
from .listing import not_present

SMALL_FILE = 1 << 20      # shards up to this size (raw, tfrecord) are written in batches by write_small_files
_BATCH_BYTES = 8 << 20    # content built per batch ...
_BATCH_FILES = 1024       # ... or files per batch
_WRITERS = 2              # threads running _native.write_files (the GIL is released while they write)


def batched(form, want: np.ndarray) -> bool:
    """Whether this dataset's shards (planned to hold `want` bytes each) go through the batched small-file path."""
    return isinstance(form, Stream) and not form.index_suffixes and len(want) > 0 and int(want.max()) <= SMALL_FILE


def write_small_files(job, comm, counted) -> tuple[int, int]:
    """This rank's share of small shards (work item g = (root * copies + copy) * files + file goes to
    rank g % size, as on the general path): per folder, batches of files built in one numpy pass
    (formats.content_batch, framed as a whole) and written by _native.write_files on _WRITERS
    threads while the next batch is built. Python does no work per file; a re-run lists each
    folder once and skips shards already there with their full size. job: generate's (roots,
    folders, names, sizes, want, seed); counted(bytes) after each batch. Returns (written, skipped)."""
    form, roots, ds, folders, names = job.form, job.roots, job.ds, job.folders, job.names
    sizes, want = job.sizes, job.want
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
                    left = not_present(path, idx, names, want)
                    skipped += len(idx) - len(left)
                    if len(left):
                        yield path, c, left

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
                window = [folder for _n, folder in zip(range(slots), todo)]
                if not window:
                    break
                for path, _c, _idx in window:
                    dirfds.append(open_dir(path))
                queues = [(fd, c, _batches(idx, want)) for fd, (_p, c, idx) in zip(dirfds[-len(window):], window)]
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
                        buf, offsets = content_batch(job.seed, c, batch, want[batch], buffers[turn])
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


def _batches(idx: np.ndarray, want: np.ndarray):
    """The files idx in runs of about _BATCH_BYTES (want[i]: file i's bytes), at most _BATCH_FILES
    each, at least one file."""
    ends = np.cumsum(want[idx])
    start = 0
    while start < len(idx):
        stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _BATCH_BYTES, side="right"))
        stop = min(max(stop, start + 1), start + _BATCH_FILES, len(idx))
        yield idx[start:stop]
        start = stop
