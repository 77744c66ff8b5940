"""fio's file set for a job: names, sizes and lay-out, so iodl reads the very files fio reads.

fio (init.c, filesetup.c): files are `$jobname.$jobnum.$filenum` in `directory` (a colon list dealt to
clones round-robin), each clone has its own `nrfiles` files and splits its `size` over them (the
first files take one extra min-bs when the division leaves that much); `filename` names shared
files instead. Files missing or too short are laid out with buffered writes before the timed run.
"""
from __future__ import annotations

import os

from dataclasses import dataclass

from .jobfile import Job, JobFileError, Percent


@dataclass(frozen=True)
class FileSpec:
    path: str
    offset: int    # first byte read (fio `offset`)
    io_size: int   # bytes of the file the job reads per pass

    @property
    def needed(self) -> int:
        return self.offset + self.io_size


def _split_colons(text: str) -> list[str]:
    """fio's colon lists, with '\\:' for a literal colon."""
    return [p.replace("\0", ":") for p in text.replace("\\:", "\0").split(":") if p]


def min_bs(job: Job) -> int:
    sizes = [job.get("bs", [4096])[0]]
    if "bsrange" in job.values:
        sizes = [job.values["bsrange"][0][0]]
    if "bssplit" in job.values:
        sizes = [s for s, _ in job.values["bssplit"][0]]
    return min(sizes)


def clone_files(job: Job, jobnum: int) -> list[FileSpec]:
    """The files clone `jobnum` of `job` reads, in fio's order."""
    directory = job.get("directory")
    dirs = _split_colons(directory) if directory else [""]
    base = dirs[jobnum % len(dirs)]
    if job.get("filename"):
        names = [os.path.join(base, n) for n in _split_colons(job.values["filename"])]
    else:
        fmt = job.get("filename_format") or "$jobname.$jobnum.$filenum"
        names = []
        for filenum in range(job.get("nrfiles", 1)):
            name = fmt.replace("$jobname", job.name).replace("$jobnum", str(jobnum)).replace("$filenum", str(filenum))
            names.append(os.path.join(base, name))
    if not names:
        file, line = job.loc("filename")
        raise JobFileError(f"no files for [{job.name}]", file, line)
    offset = job.get("offset", 0)
    if isinstance(offset, Percent):
        file, line = job.loc("offset")
        raise JobFileError(f"unsupported value 'offset={offset.value}%' in [{job.name}]", file, line)
    return [FileSpec(path, offset, size) for path, size in zip(names, _io_sizes(job, names, offset))]


def _io_sizes(job: Job, names: list[str], offset: int) -> list[int]:
    n = len(names)
    size = job.get("size")
    filesize = job.get("filesize")
    if filesize is not None:
        lo, hi = filesize[0]
        if lo != hi:
            file, line = job.loc("filesize")
            raise JobFileError(f"unsupported value: a filesize range in [{job.name}]", file, line)
        return [max(lo - offset, 0)] * n
    if isinstance(size, Percent):
        # relative to what is there: the files must exist (fio: "of the file or device")
        out = []
        for name in names:
            if not os.path.exists(name):
                file, line = job.loc("size")
                raise JobFileError(f"size={size.value}% needs existing files, {name} is missing", file, line)
            out.append((os.path.getsize(name) - offset) * min(size.value, 100) // 100)
        return out
    if not size:
        if all(os.path.exists(p) for p in names):
            return [max(os.path.getsize(p) - offset, 0) for p in names]
        file, line = job.loc("size")
        raise JobFileError(f"[{job.name}] needs size= or filesize= (its files do not exist)", file, line)
    each = size // n
    extra = (size - each * n) // min_bs(job)
    return [each + (min_bs(job) if i < extra else 0) for i in range(n)]


def lay_out(files: list[FileSpec], allow_create: bool = True, chunk: int = 1 << 20) -> int:
    """Create or extend files that are missing or too short, as fio does; returns bytes written."""
    written = 0
    buf = os.urandom(chunk)
    for spec in files:
        try:
            have = os.path.getsize(spec.path)
        except FileNotFoundError:
            have = -1
            if not allow_create:
                raise JobFileError(f"{spec.path} does not exist and allow_file_create=0") from None
        if have >= spec.needed:
            continue
        os.makedirs(os.path.dirname(spec.path) or ".", exist_ok=True)
        # fio unlinks a short file and writes it again from the start (filesetup.c extend_file)
        fd = os.open(spec.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = spec.needed
            while left:
                n = os.write(fd, buf[: min(left, chunk)])
                left -= n
                written += n
            os.fsync(fd)
        finally:
            os.close(fd)
    return written


