"""fio's log files (write_bw_log, write_lat_log, write_iops_log, log_avg_msec) written from iodl's own I/Os.

fio 3.33's format (HOWTO "Log File Formats", iolog.c flush_samples, stat.c add_bw_sample/__add_samples): one
line per entry, `time (ms), value, ddir (0 read, 1 write), block size (bytes)[, offset (bytes)], priority`
(the offset column only with log_offset=1; the priority 0: iodl sets none):
- without log_avg_msec, an entry per I/O: lat/clat/slat logs the I/O's latency in ns (slat at its issue);
  the iops log 1; the bw log bytes * 10^6 / clat ns (fio's "KiB/s" of that one I/O);
- with log_avg_msec=M, per window of M ms and per direction that did I/O in it: the window's bytes as KiB/s,
  its I/Os per second, the mean latency in ns; block size and offset 0.
Times count from the start of the measured window (after the ramp). The engine hands over one record per
counted completion (Engine.run(records=...)); the lines are made in C (_native.format_rows), per run.

Files: fio names them `PREFIX_TYPE.N.log` (N = the job's thread number, 1-based over the whole job file;
no `.N` with per_job_logs=0), PREFIX the option's value or the job's name. iodl writes the same names with
`iodl-` before the file name, beside fio's, so that the two tools' logs never overwrite each other; each
file is written under a temporary name and renamed into place when the clone ends.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from .. import _native
from ..errors import IodlError, UsageError
from .jobfile import Job, JobFileError
from .layout import MARK, MARK_VALUE, is_marked
from ..records import record

RECORD_FIELDS = ("t_ns", "lat_ns", "clat_ns", "slat_ns", "bytes", "offset", "op")   # native/core.h iodl_io_record
IODL_PREFIX = "iodl-"
# options that change a log's format or content in ways iodl does not write: refused when on
REFUSED_ON = ("log_max_value", "log_prio", "log_compression", "log_store_compressed", "log_unix_epoch",
              "log_alternate_epoch", "log_hist_msec", "write_hist_log")


@record
class LogSpec:
    bw: str | None       # the prefix of each log asked for, None when not asked
    lat: str | None
    iops: str | None
    avg_ms: int          # log_avg_msec: 0 = an entry per I/O
    offset: bool         # log_offset
    per_job: bool        # per_job_logs

    @property
    def wanted(self) -> bool:
        return bool(self.bw or self.lat or self.iops)


def log_spec(job: Job) -> LogSpec | None:
    """The logs a job asks for (None: none), or a JobFileError naming an option iodl does not write."""
    for key in REFUSED_ON:
        value = job.values.get(key)
        if key in job.values and value not in (0, "0", None, ""):
            file, line = job.loc(key)
            raise JobFileError(f"unsupported option '{key}' in [{job.name}]: iodl writes fio's plain text logs "
                               f"only (time, value, ddir, bs, offset)", file, line)

    def prefix(key):
        if key not in job.values:
            return None
        value = job.values[key]
        return str(value).strip() if value not in (None, "", 1, "1") else job.name

    spec = LogSpec(prefix("write_bw_log"), prefix("write_lat_log"), prefix("write_iops_log"),
                   int(job.get("log_avg_msec", 0) or 0), bool(job.get("log_offset", 0)),
                   bool(job.get("per_job_logs", 1)))
    return spec if spec.wanted else None


def log_path(prefix: str, kind: str, thread_number: int, per_job: bool) -> str:
    """iodl's file for fio's PREFIX_KIND[.N].log: the same directory, `iodl-` before the name."""
    name = f"{prefix}_{kind}" + (f".{thread_number}" if per_job else "") + ".log"
    head, tail = os.path.split(name)
    return os.path.join(head, IODL_PREFIX + tail)


def log_paths(spec: LogSpec, thread_number: int) -> dict[str, str]:
    """kind -> iodl's file, for each log a clone writes."""
    kinds = ([("bw", spec.bw)] if spec.bw else []) + ([("iops", spec.iops)] if spec.iops else []) + \
        ([(k, spec.lat) for k in ("lat", "clat", "slat")] if spec.lat else [])
    return {kind: log_path(prefix, kind, thread_number, spec.per_job) for kind, prefix in kinds}


def check_paths(spec: LogSpec, thread_numbers) -> None:
    """Before any I/O: a log's name taken by a file iodl did not write is refused (never written over)."""
    for n in thread_numbers:
        for path in log_paths(spec, n).values():
            if os.path.lexists(path) and not is_marked(path):
                raise UsageError(f"{path} exists and is not a log iodl wrote; iodl never writes over it "
                                 f"(move it, or change the log's prefix)")


def empty_records(n: int) -> np.ndarray:
    return np.zeros((max(1, n), len(RECORD_FIELDS)), dtype=np.uint64)


class LogWriter:
    """One clone's logs: fed each run's records, written out when the clone ends (close)."""

    def __init__(self, spec: LogSpec, thread_number: int, sync_engine: bool):
        self._fmt = _native.format_rows
        self.spec, self.sync_engine = spec, sync_engine
        self.origin_ns = 0
        self.files: dict[str, tuple[str, str, object]] = {}   # kind -> (path, temporary path, file)
        for kind, path in log_paths(spec, thread_number).items():
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                       dir=os.path.dirname(os.path.abspath(path)))
            try:   # iodl's mark: a later round may replace this log, never a file of the user's
                os.setxattr(fd, MARK, MARK_VALUE)
            except OSError:
                pass   # no user xattrs here: the log is put in place only where nothing is
            self.files[kind] = (path, tmp, os.fdopen(fd, "wb"))
        # log_avg_msec: per (window, ddir) sums, grown as windows come
        self._win = np.zeros((0, 2, 5), dtype=np.float64)   # bytes, ios, lat, clat, slat sums
        self.last_ns = 0
        self.lost = 0

    def add(self, records: np.ndarray, n: int, lost: int = 0) -> None:
        """A run's first n records (completions inside the measured window, in completion order)."""
        self.lost += lost
        if not n:
            return
        r = records[:n].astype(np.int64)
        t, lat, clat, slat, nbytes, off, op = (r[:, i] for i in range(len(RECORD_FIELDS)))
        rel = np.maximum(t - self.origin_ns, 0)
        self.last_ns = max(self.last_ns, int(rel.max()))
        if self.spec.avg_ms:
            self._accumulate(rel, nbytes, op, lat, clat, slat)
            return
        offs = off
        ms = rel // 1_000_000
        for kind, value, when in (("bw", nbytes * 1_000_000 // np.maximum(clat, 1), ms),
                                  ("iops", np.ones_like(nbytes), ms), ("lat", lat, ms), ("clat", clat, ms),
                                  ("slat", slat, np.maximum(rel - clat, 0) // 1_000_000)):
            if kind not in self.files or (kind == "slat" and self.sync_engine):
                continue   # fio's sync engines record no slat
            cols = [when, value, op, nbytes] + ([offs] if self.spec.offset else []) + [np.zeros_like(op)]
            rows = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.int64)
            self.files[kind][2].write(self._fmt(rows))

    def _accumulate(self, rel, nbytes, op, lat, clat, slat) -> None:
        w = rel // (self.spec.avg_ms * 1_000_000)
        need = int(w.max()) + 1
        if need > len(self._win):
            grown = np.zeros((need, 2, 5))
            grown[: len(self._win)] = self._win
            self._win = grown
        d = np.minimum(op, 1)
        for col, values in enumerate((nbytes, np.ones_like(nbytes), lat, clat, slat)):
            np.add.at(self._win[:, :, col], (w, d), values)

    def _windowed(self) -> None:
        """fio's windowed entries: at each window's end, per direction that did I/O in it."""
        avg = self.spec.avg_ms
        n = len(self._win)
        ends_ms = (np.arange(n) + 1) * avg
        spent_ms = np.full(n, float(avg))
        if n:   # the last window ends with the last completion
            spent_ms[-1] = max(1.0, self.last_ns / 1e6 - (n - 1) * avg)
            ends_ms[-1] = int((n - 1) * avg + spent_ms[-1])
        for kind, col in (("bw", 0), ("iops", 1), ("lat", 2), ("clat", 3), ("slat", 4)):
            if kind not in self.files or (kind == "slat" and self.sync_engine):
                continue
            rows = []
            for d in (0, 1):
                ios = self._win[:, d, 1]
                did = ios > 0
                if kind == "bw":
                    value = self._win[:, d, 0] * 1000 / spent_ms / 1024
                elif kind == "iops":
                    value = ios * 1000 / spent_ms
                else:
                    value = self._win[:, d, col] / np.maximum(ios, 1)
                # fio 3.33 writes 0 as the block size and offset of windowed entries
                zero = np.zeros(n, np.int64)
                cols = [ends_ms, value.astype(np.int64), np.full(n, d), zero] + ([zero] if self.spec.offset else [])
                rows.append(np.stack(cols + [zero, np.arange(n)], axis=1)[did])
            both = np.concatenate(rows)
            both = both[np.lexsort((both[:, 2], both[:, -1]))][:, :-1]   # window order, reads first (fio)
            self.files[kind][2].write(self._fmt(np.ascontiguousarray(both, dtype=np.int64)))

    def close(self, keep: bool = True) -> list[str]:
        """Write what is left and put each file in place (keep=False: remove them); returns the paths."""
        paths = []
        try:
            if keep and self.spec.avg_ms:
                self._windowed()
        finally:
            refused = None
            for kind, (path, tmp, f) in self.files.items():
                f.close()
                if keep:
                    os.chmod(tmp, 0o644)
                    try:
                        _put_in_place(tmp, path)
                        paths.append(path)
                    except IodlError as exc:   # the other logs still go in place
                        refused = refused or exc
                else:
                    os.unlink(tmp)
            if refused:
                raise refused
        return paths


def _put_in_place(tmp: str, path: str) -> None:
    """tmp under path's name: where nothing is (link never replaces), or over iodl's own earlier log
    (marked); a file of anyone else's is left alone and the log stays at tmp, named in the error."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        if not is_marked(path):
            raise IodlError(f"{path} exists and is not a log iodl wrote; iodl never writes over it "
                            f"(this log is left at {tmp})") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)
