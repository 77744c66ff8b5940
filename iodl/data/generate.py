"""Generating a workload's dataset under one or more roots; ranks share the shards round-robin.

Every file is created exclusively (O_EXCL|O_NOFOLLOW), never through a link (data.files): a large
shard under a temporary name, renamed when complete; small shards in batches under their final
names (data.small_files). Either way the manifest says "incomplete" until every shard is written,
and a re-run skips the shards already there with their planned size and rewrites the others.
"""
from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import __version__, limits
from ..comm import collective
from ..errors import IodlError, UsageError
from ..formats import BLOCK, Format, Stream, content_buffer, format_for
from ..records import record
from ..units import format_size
from ..workload import Workload, load_workload
from .files import TMP, create, make_dir, refuse_kernel_fs, save_npy, unlink_quietly, write_json, write_via_temp
from .layout import (EXTENTS_FILE, FILE_SIZES_FILE, MANIFEST, SCHEMA, SIZES_FILE, ShardNames, copy_dir,
                     default_data_dir, folder_name, folders_of, sample_sizes)
from .listing import not_present
from .manifest import read_manifest, spec_key
from .small_files import batched, write_small_files


@record
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
    job = _Job.of(workload.with_overrides(files=files, copies=copies, format=fmt, seed=seed, subfolders=subfolders),
                  roots)
    # rank 0 alone looks, creates and writes the roots' metadata; collective() raises its error on every rank
    collective(comm, lambda: _check_roots(job) if comm.rank == 0 else None)
    if say and comm.rank == 0:
        ds = job.ds
        say(f"iodl generate: {job.wl.name}: {ds.copies} x {ds.files} {ds.format} files x {ds.samples_per_file} "
            f"samples of ~{format_size(ds.sample_size)} (seed {job.seed}) under {len(job.roots)} root(s), "
            f"{comm.size} rank(s)")
    manifest = _manifest(job)
    collective(comm, lambda: _oserror_to_iodl(lambda: _start_roots(job, manifest) if comm.rank == 0 else None))
    t0 = time.perf_counter()
    share = collective(comm, lambda: _oserror_to_iodl(lambda: _write_share(job, comm, progress)))
    gathered = comm.gather((*share, time.perf_counter() - t0), root=0)
    result = collective(comm, lambda: _oserror_to_iodl(
        lambda: _finish_roots(job, manifest, gathered) if comm.rank == 0 else None))
    return comm.bcast(result, root=0)


@record
class _Job:
    """What one generate writes, the same on every rank."""
    wl: Workload          # overrides applied
    roots: list[str]      # absolute
    spec: dict            # the resolved dataset spec, as the manifest keeps it
    form: Format
    folders: int          # per copy (1: the copy directory itself)
    names: ShardNames

    @classmethod
    def of(cls, wl, roots) -> "_Job":
        ds = wl.dataset
        form = format_for(ds)
        if ds.format == "parquet":   # the sample table read checks for other formats (limits.check_dataset)
            limits.check_sample_table(ds, wl.source)
        roots = [os.path.abspath(r) for r in roots]
        if not roots:
            raise UsageError("generate: give at least one --root")
        if len({os.path.realpath(r) for r in roots}) != len(roots):   # also twice through a link
            raise UsageError("generate: the same --root is given twice")
        folders = folders_of(ds.files, ds.subfolders)
        return cls(wl, roots, wl.to_dict()["dataset"], form, folders, ShardNames(ds.format, ds.files, folders))

    ds = property(lambda self: self.wl.dataset)
    seed = property(lambda self: self.wl.train.seed)

    # drawn once the roots are checked (a bad root is said before any work that grows with the files)
    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """(files, samples_per_file) sample sizes."""
        return sample_sizes(self.ds, self.seed)

    @functools.cached_property
    def want(self) -> np.ndarray:
        """(files,) int64 bytes each shard will hold: from the sample sizes where the format fixes
        it, else the payload (npz, hdf5: their real sizes are learnt from the written files)."""
        if isinstance(self.form, Stream):
            return self.sizes.sum(axis=1) + self.form.overhead * self.sizes.shape[1]
        return np.array([self.form.size_of(row) or int(row.sum()) for row in self.sizes], dtype=np.int64)

    @functools.cached_property
    def small(self) -> bool:
        """Whether the shards go through the batched small-file path."""
        return batched(self.form, self.want)


# ---------------------------------------------------------------- the roots (rank 0) ---------

def _check_roots(job: _Job) -> None:
    for root in job.roots:
        try:
            problem = _prepare_root(root, job.spec, job.seed, job.folders)
        except OSError as exc:
            problem = f"--root {root}: {exc.strerror or exc}"
        if problem:
            raise UsageError(problem)


def _prepare_root(root: str, spec: dict, seed: int, folders: int = 1) -> str | None:
    """Check or create one root. Returns an error message, or None if fine."""
    refuse_kernel_fs(root)
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
        manifest = read_manifest(root, older=True)   # an older iodl's manifest is rewritten, its shards kept
    except UsageError as exc:
        return f"--root {root}: {exc}"
    if manifest is None:
        # A fresh filesystem's lost+found is the only thing allowed: a mount point is a natural root.
        if [n for n in os.listdir(root) if n != "lost+found"]:
            return (f"--root {root} holds files that iodl did not create (no {MANIFEST}); "
                    "choose an empty or new directory")
    else:
        try:
            same = spec_key(manifest["spec"]) == spec_key(spec) and manifest["seed"] == seed
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


def _manifest(job: _Job) -> dict:
    """The manifest as written before the shards ("incomplete"); _finish_roots completes it."""
    return {
        "schema": SCHEMA, "status": "incomplete", "generator": f"iodl {__version__}",
        "workload": job.wl.name, "workload_spec": job.wl.to_dict(), "spec": job.spec, "seed": job.seed,
        "format": job.ds.format, "copies": [copy_dir(c) for c in range(job.ds.copies)],
        "subfolders": job.folders, "files": job.ds.files, "file_sizes": FILE_SIZES_FILE,
        "sample_sizes": SIZES_FILE, "extents": None, "total_bytes": None,
    }


def _start_roots(job: _Job, manifest: dict) -> None:
    """Before the first shard: room checked, sample sizes and the incomplete manifest written, the
    copy directories and their folders made."""
    _check_space({root: _bytes_to_write(job, root) for root in job.roots})
    for root in job.roots:
        save_npy(os.path.join(root, SIZES_FILE), job.sizes)
        old = read_manifest(root, older=True)
        if old is None or old.get("status") != "complete":
            write_json(os.path.join(root, MANIFEST), manifest)
        for c in range(job.ds.copies):
            make_dir(os.path.join(root, copy_dir(c)))
            for k in range(job.folders if job.folders > 1 else 0):
                make_dir(os.path.join(root, copy_dir(c), folder_name(k, job.folders)))


def _bytes_to_write(job: _Job, root: str) -> int:
    """What is still missing under this root (shards already there with the right size are skipped)."""
    index_bytes = sum(a.nbytes for a in job.form.index_files(job.sizes[0]).values())   # per shard (indexed_binary)
    need = 0
    for c in range(job.ds.copies):
        for k in range(job.folders):
            folder = os.path.join(root, copy_dir(c), folder_name(k, job.folders))
            idx = not_present(folder, np.arange(k, job.ds.files, job.folders), job.names, job.want)
            need += int(job.want[idx].sum()) + len(idx) * index_bytes
    return need


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


def _finish_roots(job: _Job, manifest: dict, gathered: list) -> GenerateResult:
    """After every rank's share: the files' sizes (the same in every copy and root) and extents
    written beside the manifest, which then says "complete"."""
    all_sizes: dict[int, int] = {}
    all_ext: dict[int, np.ndarray] = {}
    for _w, _s, _b, fs, ex, _t in gathered:
        for i, size in fs.items():
            if all_sizes.setdefault(i, size) != size:
                raise IodlError(f"shard {job.names[i]} has different sizes in different copies or roots "
                                f"({all_sizes[i]} and {size} bytes)")
        all_ext.update(ex)
    files = job.ds.files
    final_sizes = job.want.copy()   # small shards: as planned, by construction
    if not job.small:
        final_sizes = np.array([all_sizes[i] for i in range(files)], dtype=np.int64)
    manifest.update(status="complete", total_bytes=int(final_sizes.sum()) * job.ds.copies)
    if all_ext:
        manifest["extents"] = EXTENTS_FILE
    for root in job.roots:
        save_npy(os.path.join(root, FILE_SIZES_FILE), final_sizes)
        if all_ext:
            save_npy(os.path.join(root, EXTENTS_FILE), np.stack([all_ext[i] for i in range(files)]))
        write_json(os.path.join(root, MANIFEST), manifest)
    return GenerateResult(
        roots=job.roots, shards_written=sum(g[0] for g in gathered), shards_skipped=sum(g[1] for g in gathered),
        bytes_written=sum(g[2] for g in gathered), total_bytes=manifest["total_bytes"],
        seconds=max(g[5] for g in gathered), written_by_rank=[g[0] for g in gathered])


def _oserror_to_iodl(fn):
    try:
        return fn()
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise IodlError(f"writing the dataset:{where}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- a rank's share of the shards ---

def _write_share(job: _Job, comm, progress) -> tuple[int, int, int, dict, dict]:
    """This rank's shards under every root: work item k (over roots, copies, files) is rank k %
    size's. Returns (written, skipped, bytes written, {file: size}, {file: extents read back})."""
    ds, n_roots = job.ds, len(job.roots)
    if job.small:
        rank_total = int(np.tile(job.want, n_roots * ds.copies)[comm.rank::comm.size].sum())
        done = [0]

        def counted(n):
            done[0] += n
            if progress:
                progress(done[0], rank_total)

        written, skipped = write_small_files(job, comm, counted)
        return written, skipped, done[0], {}, {}
    items = [(r, c, i) for r in range(n_roots) for c in range(ds.copies) for i in range(ds.files)]
    mine = items[comm.rank::comm.size]
    writer = _ShardWriter(job, progress, rank_total=sum(int(job.want[i]) for _r, _c, i in mine))
    writer.run(mine)
    return writer.written, writer.skipped, writer.nbytes, writer.file_sizes, _read_back_extents(job, mine)


class _ShardWriter:
    """Shards one at a time, each built (or streamed in pieces) by this thread while a writer
    thread writes the one before from the other of two reused buffers; each under a temporary
    name until written whole with its index files, then renamed. A failure removes the temps."""

    def __init__(self, job: _Job, progress, rank_total: int):
        self.job, self._progress, self._rank_total = job, progress, rank_total
        self.written = self.skipped = self.nbytes = 0
        self.file_sizes: dict[int, int] = {}
        self._pending: list = []       # the writer thread's futures, oldest first
        self._temps: set[str] = set()  # temp files of shards being written: removed if the run fails
        self._fds: set[int] = set()    # their open descriptors
        self._buffers = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]
        self._turn = 0

    def run(self, mine) -> None:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="iodl-writer") as writer:
            try:
                for item in mine:
                    self._shard(writer, item)
                self._drain(0)
            except BaseException:
                self._abandon(writer)
                raise

    def _shard(self, writer, item) -> None:
        job = self.job
        r, c, i = item
        form, sizes = job.form, job.sizes[i]
        final = os.path.join(job.roots[r], copy_dir(c), job.names[i])
        if os.path.isfile(final) and not os.path.islink(final) and form.check_file(final, sizes):
            self.skipped += 1
            self.file_sizes[i] = os.path.getsize(final)
            return
        tmp = final + TMP
        key = (job.seed, c, i)
        self._temps.add(tmp)
        if form.streams:
            fd = create(tmp)
            self._fds.add(fd)
            for piece in form.pieces(sizes, key, self._buffer):
                self._pending.append(writer.submit(self._append, fd, piece, tmp))
                self._drain(1)  # the piece before this one is written: its buffer is free
            self._pending.append(writer.submit(self._close, item, fd, tmp, final, form.index_files(sizes)))
        else:
            content = form.prepare(sizes, key, self._buffer(int(sizes.sum()) + BLOCK))
            self._pending.append(writer.submit(self._write_whole, content, tmp, final, item, form.index_files(sizes)))
        self.written += 1
        self._drain(1)

    def _buffer(self, nbytes: int) -> np.ndarray:
        """The buffer the writer thread is not writing from, grown to nbytes."""
        slot = self._turn = 1 - self._turn
        if len(self._buffers[slot]) < nbytes:
            self._buffers[slot] = content_buffer(int(nbytes * 1.1))
        return self._buffers[slot]

    def _drain(self, limit: int) -> None:
        """Wait for the writer until at most `limit` of its tasks are pending; count the shards done."""
        while len(self._pending) > limit:
            done = self._pending.pop(0).result()
            if done is None:
                continue
            (_r, _c, i), size = done
            self.nbytes += size
            self.file_sizes[i] = size
            if self._progress:
                self._progress(self.nbytes, self._rank_total)

    # on the writer thread
    @staticmethod
    def _append(fd: int, view, tmp: str) -> None:
        mv = memoryview(view).cast("B")
        pos = 0
        try:
            while pos < len(mv):
                pos += os.write(fd, mv[pos:])
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, tmp) from None

    def _close(self, item, fd: int, tmp: str, final: str, index: dict):
        self._fds.discard(fd)
        try:
            os.close(fd)    # a network filesystem may report a failed write (ENOSPC, EIO) only here
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, tmp) from None
        return self._rename(item, tmp, final, index)

    def _write_whole(self, content, tmp: str, final: str, item, index: dict):
        fd = create(tmp)
        try:
            self.job.form.write(content, fd)   # into our descriptor: the name is never opened again
        except OSError as exc:                 # a library's error may not name the file (ENOSPC in h5py, zipfile)
            raise OSError(exc.errno, exc.strerror or str(exc), tmp) from None
        finally:
            os.close(fd)
        return self._rename(item, tmp, final, index)

    def _rename(self, item, tmp: str, final: str, index: dict):
        """The shard's index files, then the shard under its final name: (item, its size)."""
        _write_index_files(final, index)
        os.replace(tmp, final)
        self._temps.discard(tmp)
        return item, os.path.getsize(final)

    def _abandon(self, writer) -> None:
        for fut in self._pending:
            fut.cancel()
        writer.shutdown(wait=True)
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for tmp in self._temps:   # cut-short shards never keep (or get) final names
            unlink_quietly(tmp)


def _write_index_files(final: str, index: dict) -> None:
    """A format's index files beside its shard (indexed_binary's .off.idx and .sz.idx), each through
    an exclusive temporary renamed into place; written before the shard gets its final name, so that
    a shard under its final name has its index (a re-run's check_file looks at both)."""
    for suffix, array in index.items():
        write_via_temp(final + suffix, lambda f, a=array: f.write(memoryview(a).cast("B")))


def _read_back_extents(job: _Job, mine) -> dict[int, np.ndarray]:
    """Extents that must be read from the files (npz, hdf5): once per file index, from a copy this
    rank holds ({} for a format whose extents follow from the sample sizes)."""
    extents: dict[int, np.ndarray] = {}
    if job.form.extents(job.sizes[0]) is not None:
        return extents
    for r, c, i in mine:
        if i not in extents:
            try:
                extents[i] = job.form.extents_from_file(os.path.join(job.roots[r], copy_dir(c), job.names[i]),
                                                        job.ds.samples_per_file)
            except ValueError as exc:
                raise IodlError(f"reading back a written shard: {exc}") from None
    return extents


# ---------------------------------------------------------------- the default dataset --------

def ensure_default_dataset(comm, say=print) -> str:
    """The root of the `tiny` dataset in the data directory, generated on first use (all ranks share it)."""
    root = os.path.join(default_data_dir(), "tiny")
    manifest = None
    try:
        manifest = read_manifest(root) if os.path.isdir(root) else None
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
