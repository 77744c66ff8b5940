"""fio's file set for a job — names, sizes — and iodl's safe lay-out of the files it may create.

Names follow fio 3.33's code (init.c add_job/make_filename, filesetup.c add_file, options.c
get_next_str/set_name_idx), checked against `fio --debug=file` in tests/fio/test_safety.py:
- a file's name is `DIR + "/" + NAME` whenever `directory` is set, whatever NAME is: an absolute
  `filename=/dev/x` with `directory=/d` is `/d//dev/x`;
- `filename=` (a colon list, `\\:` a literal colon, blanks at both ends dropped) adds files when the
  option is parsed, with the first `directory` entry set *at that point* (fio parses `directory`
  before `filename` within a section); a [global]'s files are inherited and a job's own are added
  to them; all clones of the job share them;
- otherwise each clone `jobnum` gets `nrfiles` files named by `filename_format` (default
  `$jobname.$jobnum.$filenum`, keywords matched case-insensitively) in directory entry
  `jobnum % entries`; a clone skips a name the first clone of a `numjobs > 1` job already took
  (it then may have no files and reads nothing, as in fio); with `nrfiles=1`, a job whose name is
  an existing non-regular file (`[/dev/sdb]`, looked up from the working directory) reads that.

Safety (docs/fio-compare.md "Files"): iodl creates only missing files, writes them under a temporary
name created exclusively in the same directory and links them into place when complete, and marks
them with the xattr `user.iodl.layout`. It rewrites only files carrying that mark. Devices and files
it did not create are read as they are, and refused in one line when they are too short or are not
something fio would read (a character device, a FIFO, a socket, a directory).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import re
import secrets
import signal
import stat
import struct
import threading

from ..engine import blocking_once, open_for_read
from ..errors import IodlError, UsageError
from ..data.files import KERNEL_FS, mount_of
from .jobfile import Job, JobFileError, Percent, fio_list
from ..records import record

MARK = "user.iodl.layout"
MARK_VALUE = b"iodl fio-compare layout"
BLKGETSIZE64 = 0x80081272   # _IOR(0x12, 114, size_t)
DIR_MODE = 0o700            # fio's create_work_dirs mode


@record(frozen=True)
class FileSpec:
    path: str      # as fio names it (may hold '//')
    offset: int    # first byte read (fio `offset`)
    io_size: int   # bytes of the file the job reads per pass
    root: str = ""  # the `directory` entry the name was made in ("" when none): never created outside it
    write: bool = False  # a write job's file: only iodl's own marked file, or a missing one, is accepted

    @property
    def needed(self) -> int:
        return self.offset + self.io_size


def min_bs(job: Job) -> int:
    sizes = [job.get("bs", [4096])[0]]
    if "bsrange" in job.values:
        sizes = [job.values["bsrange"][0][0]]
    if "bssplit" in job.values:
        sizes = [s for s, _ in job.values["bssplit"][0]]
    return min(sizes)


def dir_entry(directory: str | None, index: int) -> str:
    """set_name_idx: the directory list's entry for `index` (modulo its length), or ''."""
    if not directory:
        return ""
    dirs = fio_list(directory)
    return dirs[index % len(dirs)] if dirs else ""


_KEYWORDS = ("$jobname", "$jobnum", "$filenum", "$clientuid")


def make_filename(fmt: str | None, jobname: str, jobnum: int, filenum: int) -> str:
    """init.c make_filename: each keyword in turn, every occurrence, case-insensitively."""
    if not fmt:
        return f"{jobname}.{jobnum}.{filenum}"
    values = {"$jobname": jobname, "$jobnum": str(jobnum), "$filenum": str(filenum), "$clientuid": ""}
    for word in _KEYWORDS:
        fmt = re.sub(re.escape(word), lambda _m, v=values[word]: v, fmt, flags=re.IGNORECASE)
    return fmt


def _exists_not_regular(name: str) -> bool:
    try:
        return not stat.S_ISREG(os.lstat(name).st_mode)
    except OSError:
        return False


def clone_names(job: Job, jobnum: int, taken: set | None = None) -> list[tuple[str, str]]:
    """(path, root) of the files clone `jobnum` of `job` uses, in fio's order.

    `taken`: names the first clones of earlier `numjobs > 1` jobs (and this one's) hold — fio's
    filename hash list, shared by the whole job file; pass the same set for every job in order.
    """
    if job.get("@filenames"):
        return list(job.values["@filenames"])
    directory = job.get("directory")
    root = dir_entry(directory, jobnum) if directory else None
    nrfiles = job.get("nrfiles", 1)
    if nrfiles == 1 and _exists_not_regular(job.name):
        raw = [job.name]
    else:
        raw = [make_filename(job.get("filename_format"), job.name, jobnum, i) for i in range(nrfiles)]
    prefix, root = (root + "/" if root is not None else ""), root or ""
    if taken is None or (not jobnum and job.get("numjobs", 1) == 1):
        return [(prefix + name, root) for name in raw]   # nothing to share (300k files: one pass, no lookups)
    out = []
    for name in raw:
        path = prefix + name
        # filesetup.c add_file: "clean cloned siblings using existing files"
        if jobnum and path in taken and not _exists_not_regular(name):
            continue
        if not jobnum:
            taken.add(path)
        out.append((path, root))
    return out


def clone_files(job: Job, jobnum: int, taken: set | None = None, null: bool = False,
                write: bool = False) -> list[FileSpec]:
    """The files clone `jobnum` of `job` reads, in fio's order, with the bytes it needs of each.

    `null`: the job's engine does no I/O (fio's diskless engines): its files are never looked at.
    """
    names = clone_names(job, jobnum, taken)
    for key in ("offset", "offset_increment"):
        if isinstance(job.get(key, 0), Percent):
            file, line = job.loc(key)
            raise JobFileError(f"unsupported value '{key}={job.get(key).value}%' in [{job.name}]", file, line)
    # fio filesetup.c get_start_offset: clone n of the job starts offset_increment x n further on
    # (disjoint, evenly spaced parts of one file or device for numjobs clones)
    offset = job.get("offset", 0) + jobnum * job.get("offset_increment", 0)
    if not names:
        return []
    sizes = _io_sizes(job, [p for p, _ in names], offset, null)
    return [FileSpec(path, offset, size, root, write) for (path, root), size in zip(names, sizes)]


def _io_sizes(job: Job, names: list[str], offset: int, null: bool) -> list[int]:
    n = len(names)
    size = job.get("size")
    filesize = job.get("filesize")
    if filesize is not None:
        lo, hi = filesize[0]
        if lo != hi:
            file, line = job.loc("filesize")
            raise JobFileError(f"unsupported value: a filesize range in [{job.name}]", file, line)
        return [max(lo - offset, 0)] * n
    if isinstance(size, Percent) or not size:
        file, line = job.loc("size")
        if null:
            raise JobFileError(f"[{job.name}] uses ioengine=null and needs size= or filesize=", file, line)
        # relative to what is there: the files must exist (fio: "of the file or device")
        out = []
        for name in names:
            have = existing_size(name)
            if have is None:
                what = f"size={size.value}%" if isinstance(size, Percent) else f"[{job.name}] without size= or filesize="
                raise JobFileError(f"{what} needs existing files, {name} is missing", file, line)
            part = max(have - offset, 0)
            out.append(part * min(size.value, 100) // 100 if isinstance(size, Percent) else part)
        return out
    each = size // n
    extra = (size - each * n) // min_bs(job)
    return [each + (min_bs(job) if i < extra else 0) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# What is there

def device_size(path: str) -> int:
    """Bytes of a block device (ioctl BLKGETSIZE64 on a read-only descriptor)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return struct.unpack("Q", fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8))[0]
    finally:
        os.close(fd)


def existing_size(path: str) -> int | None:
    """Bytes readable at `path` (following a symlink, as fio's open does), None if nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISBLK(st.st_mode):
        return device_size(path)
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def is_marked(path: str) -> bool:
    """Laid out by iodl: a regular file (not a symlink) carrying iodl's xattr."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        return os.getxattr(path, MARK, follow_symlinks=False) == MARK_VALUE
    except OSError:
        return False


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


def existing(paths):
    """The paths that exist (os.path.lexists: a link counts, not followed), from one listing per
    directory instead of an lstat per file (a filecreate job of 300k files)."""
    listed: dict[str, set] = {}
    for path in paths:
        where, name = os.path.split(path)
        if where not in listed:
            try:
                listed[where] = set(os.listdir(where or "."))
            except OSError:
                listed[where] = set()   # no directory there (yet): nothing in it exists
        if name in listed[where]:
            yield path


def _not_readable(mode: int) -> str | None:
    for test, what in _KINDS:
        if test(mode):
            return what
    return None if stat.S_ISREG(mode) or stat.S_ISBLK(mode) else "not a regular file or block device"


def check_files(files: list[FileSpec], allow_create: bool = True) -> list[FileSpec]:
    """Refuse (UsageError, one line) what iodl must not touch; returns the files it will write.

    Reads what is there as fio does — a block device or any existing file big enough; creates
    what is missing; rewrites only its own short files; refuses everything else with the reason.
    """
    need: dict[str, FileSpec] = {}
    for spec in files:
        old = need.get(spec.path)
        if old is None or spec.needed > old.needed:
            need[spec.path] = spec
        if old is not None and (old.write or spec.write) and not need[spec.path].write:
            need[spec.path] = FileSpec(spec.path, need[spec.path].offset, need[spec.path].io_size,
                                       need[spec.path].root, True)
    to_write = []
    mounts: dict = {}   # start directory -> mount_of: one read of the mount table per directory, not per file
    for path, spec in need.items():
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            if not allow_create:
                raise UsageError(f"{path} does not exist and allow_file_create=0") from None
            _check_creatable(spec, mounts)
            to_write.append(spec)
            continue
        except OSError as exc:
            raise UsageError(f"cannot look at {path}: {exc.strerror}") from None
        if spec.write:
            _check_writable(path, lst, spec, mounts)
            to_write.append(spec)
            continue
        try:
            st = os.stat(path)
        except OSError:
            raise UsageError(f"{path} is a dangling symlink; iodl never writes through a symlink") from None
        what = _not_readable(st.st_mode)
        if what:
            raise UsageError(f"{path} is {what}: fio-compare reads regular files and block devices only")
        have = device_size(path) if stat.S_ISBLK(st.st_mode) else st.st_size
        if have >= spec.needed:
            continue
        if stat.S_ISBLK(st.st_mode):
            raise UsageError(f"the job needs {spec.needed} bytes of {path} (offset+size) but the device has "
                             f"{have}; iodl never writes to a device: lower size= or offset=")
        if stat.S_ISLNK(lst.st_mode):
            raise UsageError(f"the job needs {spec.needed} bytes of {path} but it has {have} and is a symlink; "
                             f"iodl never writes through a symlink: remove it or point directory= elsewhere")
        if not is_marked(path):
            raise UsageError(f"the job needs {spec.needed} bytes of {path} but it has {have} and iodl did not "
                             f"create it; iodl never writes over a file it did not lay out: remove it or point "
                             f"directory= elsewhere")
        to_write.append(spec)
    return to_write


def _check_writable(path: str, lst: os.stat_result, spec: FileSpec, mounts: dict) -> None:
    """A write job's existing file: only a regular file (not through a symlink) that iodl laid out
    and marked, inside the job's directory; everything else is refused in one line, untouched."""
    if stat.S_ISLNK(lst.st_mode):
        raise UsageError(f"the write job would write {path}, a symlink; iodl never writes through a symlink: "
                         f"remove it or point directory= elsewhere")
    if stat.S_ISBLK(lst.st_mode):
        raise UsageError(f"the write job would write {path}, a block device; fio-compare never writes to a "
                         f"device (write jobs run on files iodl lays out in the job's directory)")
    if not stat.S_ISREG(lst.st_mode):
        raise UsageError(f"the write job would write {path}, {_not_readable(lst.st_mode)}; fio-compare writes "
                         f"only files it lays out itself")
    if not is_marked(path):
        raise UsageError(f"the write job would write {path}, an existing file iodl did not create; iodl never "
                         f"writes over a file it did not lay out: remove it or point directory= elsewhere")
    _check_creatable(spec, mounts)
    _, parts = _below_root(spec)
    if spec.root and len(parts) > 1:
        # a directory below the job's that is a symlink: refused now, before any I/O
        dfd, _name = _open_parent(spec, create=False)
        os.close(dfd)


def _below_root(spec: FileSpec) -> tuple[str, list[str]]:
    """(existing directory to start from, components below it to walk without following links).

    With `directory=` the start is its entry; without, the longest existing directory of the path
    the user wrote (symlinks in that part are the user's own choice, as in fio).
    """
    if spec.root:
        return spec.root, [p for p in spec.path[len(spec.root) + 1:].split("/") if p not in ("", ".")]
    parts = spec.path.split("/")
    for k in range(len(parts) - 1, -1, -1):
        start = "/".join(parts[:k]) or ("/" if spec.path.startswith("/") else ".")
        if os.path.isdir(start):
            return start, [p for p in parts[k:] if p not in ("", ".")]
    return ".", [p for p in parts if p not in ("", ".")]


def _check_creatable(spec: FileSpec, mounts: dict) -> None:
    """`mounts`: mount_of's answers by start directory, kept by the caller for one check (300k files in
    one directory read the mount table once)."""
    start, parts = _below_root(spec)
    if start not in mounts:
        mounts[start] = mount_of(start)
    point, fstype = mounts[start]
    if fstype in KERNEL_FS:
        raise UsageError(f"{spec.path} does not exist and is under {point} (the kernel's {fstype}); iodl never "
                         f"creates anything there (name a device that exists, or a file elsewhere)")
    if ".." in parts:
        raise UsageError(f"{spec.path} climbs out of its directory ('..'); iodl creates files only below it")
    if not parts:
        raise UsageError(f"{spec.path} names no file")


# ---------------------------------------------------------------------------------------------
# Lay-out

def _open_parent(spec: FileSpec, create: bool = True) -> tuple[int, str]:
    """A descriptor of the directory the file goes in, made (0700, as fio) without following links."""
    start, parts = _below_root(spec)
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                if create:
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UsageError(f"{spec.path}: '{part}' is a symlink or not a directory; iodl never "
                                     f"creates files through a symlink") from None
                raise
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _create_temp(dfd: int, name: str) -> tuple[int, str]:
    """An exclusive new temporary file beside `name`; a name already taken (even by a planted
    symlink) is left alone and another drawn."""
    for _ in range(16):
        tmp = f".{name}.iodl-tmp.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                           dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise IodlError(f"cannot create a temporary file beside {name}: every name drawn exists")


def _write_one(spec: FileSpec, buf: bytes, sync: bool = True) -> int:
    dfd, name = _open_parent(spec)
    fd, tmp = -1, None
    try:
        with _signals_held():   # a Ctrl-C/SIGTERM between the create and `tmp =` would leave it behind
            fd, tmp = _create_temp(dfd, name)
        # a write job's file is made empty here and made ready (as fio would lay it out) before each side
        left = 0 if spec.write else spec.needed
        while left:
            left -= os.write(fd, buf[: min(left, len(buf))])
        try:
            os.setxattr(fd, MARK, MARK_VALUE)
        except OSError as exc:
            if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            if spec.write:
                raise UsageError(f"{spec.path}: this filesystem has no user xattrs, so iodl cannot mark the file as "
                                 f"its own, and it writes only files it marked: run write jobs elsewhere") from None
            # no user xattrs here (tmpfs before Linux 6.6, some NFS): the file stays unmarked, so a
            # later run reads it but will not extend it
        if sync:
            os.fsync(fd)
        try:
            # a new name: link() never replaces what appeared there meanwhile
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            if not is_marked(spec.path):
                raise UsageError(f"{spec.path} appeared while iodl laid it out; it is left as it is") from None
            # our own short file: replace it whole (rename replaces the name, never what a link points to)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp = None
        return spec.needed
    except OSError as exc:
        raise IodlError(f"laying out {spec.path} ({spec.needed} bytes): {exc.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:   # ours (created exclusively above): never left behind, also on Ctrl-C
            os.unlink(tmp, dir_fd=dfd)
        os.close(dfd)


def lay_out(files: list[FileSpec], allow_create: bool = True, chunk: int = 1 << 20) -> int:
    """Create iodl's files that are missing or (its own, marked) too short; returns bytes written.

    Checks first (check_files), then the free space of each directory, then writes.
    """
    todo = check_files(files, allow_create)
    # a write job's own file that is there already is made ready before each side (reset_for_write)
    todo = [s for s in todo if not (s.write and os.path.lexists(s.path))]
    need_by_dir: dict[int, tuple[str, int]] = {}
    for spec in todo:
        start, _ = _below_root(spec)
        dev = os.stat(start).st_dev
        where, n = need_by_dir.get(dev, (start, 0))
        need_by_dir[dev] = (where, n + spec.needed)
    for where, n in need_by_dir.values():
        vfs = os.statvfs(where)
        if n > vfs.f_bavail * vfs.f_frsize:
            raise UsageError(f"laying out needs {n} bytes in {where} but only {vfs.f_bavail * vfs.f_frsize} "
                             f"are free: lower size= or use --scale")
    buf = os.urandom(chunk) if todo else b""
    with _term_interrupts():
        return sum(_write_one(spec, buf) for spec in todo)


def renew_own(spec: FileSpec) -> None:
    """fio's unlink_each_loop on a write job's file (backend.c unlink_all_files, then the next loop's
    open with O_CREAT): the file at the name removed, and a new empty one there instead. Only iodl's own
    marked file is removed (the rule of unlink=1): an empty marked file is linked in beside it, or renamed
    over it, never through a symlink; a descriptor still open on the old file keeps it until closed.
    No fsync: fio does none there either."""
    if os.path.lexists(spec.path) and not is_marked(spec.path):
        raise IodlError(f"{spec.path} is not iodl's own file (no mark) any more; iodl never removes a file it "
                        "did not lay out")
    if not spec.write:
        raise ValueError(f"{spec.path}: only a write job's file is renewed")
    _write_one(spec, b"", sync=False)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back (delivered when the block ends, after its assignments)."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _term_interrupts():
    """SIGTERM raises KeyboardInterrupt while laying out, as Ctrl-C does, so the temporary file is
    removed (the default action would end the process with it left behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------------------------------------
# Write jobs: iodl's own files only

def _open_own(spec: FileSpec, direct: bool = False, read: bool = False) -> int:
    """Open iodl's own marked file of a write job for writing, without creating, truncating or
    following a symlink anywhere below the job's directory; the opened inode itself is checked
    (regular, carries the mark), so nothing swapped in after the checks is ever written."""
    dfd, name = _open_parent(spec, create=False)
    try:
        flags = (os.O_RDWR if read else os.O_WRONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise IodlError(f"{spec.path} is a symlink; iodl never writes through a symlink") from None
            if direct and exc.errno == errno.EINVAL:
                raise IodlError(f"{spec.path}: the filesystem refuses O_DIRECT (open -> EINVAL)") from None
            raise IodlError(f"cannot open {spec.path} to write: {exc.strerror}") from None
    finally:
        os.close(dfd)
    def check(fd):
        ok = stat.S_ISREG(os.fstat(fd).st_mode)
        try:
            ok = ok and os.getxattr(fd, MARK) == MARK_VALUE
        except OSError:
            ok = False
        if not ok:
            raise IodlError(f"{spec.path} is not iodl's own file (no mark) any more; iodl never writes over a "
                            f"file it did not lay out")
    return blocking_once(fd, check)


def open_own_for_write(spec: FileSpec, direct: bool, read: bool = False) -> int:
    """A write job's file, opened for iodl's side: its own marked file, O_DIRECT when asked; read and
    write (`read`) for a job that mixes both."""
    return _open_own(spec, direct, read)


_FALLOC_FL_KEEP_SIZE = 1


def _fallocate_keep(fd: int, size: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    if libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, size) != 0:
        err = ctypes.get_errno()
        if err not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err))


def reset_for_write(spec: FileSpec, mode: str, chunk: int = 1 << 20) -> None:
    """Put a write job's own file in the state fio's lay-out leaves a missing file in, before each
    side runs (filesetup.c extend_file), so fio and iodl each start from the same file:

    - "fill" (overwrite=1): written whole (fio: O_TRUNC, then written), then fsynced (create_fsync);
    - "empty" (create_on_open=1): fio lays nothing out and creates the file when it opens it: 0 bytes;
    - "native"/"posix" (overwrite=0, the default): fio unlinks, creates and fallocates the file to its
      size, writing nothing: the blocks are allocated (unwritten extents) and the size set;
    - "keep"/"none": fio allocates with KEEP_SIZE or not at all and leaves the size 0; iodl sets the
      size with ftruncate (sparse), because fio would unlink and recreate a shorter file (unmarked).

    The file is truncated and rebuilt in place through a descriptor of the very inode checked (its
    mark kept); nothing else is ever opened for writing.
    """
    fd = _open_own(spec)
    try:
        os.ftruncate(fd, 0)
        if mode == "fill":
            buf = os.urandom(min(chunk, max(1, spec.needed)))
            left = spec.needed
            while left:
                left -= os.write(fd, buf[: min(left, len(buf))])
        elif mode in ("native", "posix"):
            try:
                os.posix_fallocate(fd, 0, spec.needed)
            except OSError as exc:
                if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, spec.needed)   # fio's native mode falls back to none quietly
        elif mode == "keep":
            _fallocate_keep(fd, spec.needed)
            os.ftruncate(fd, spec.needed)
        elif mode == "none":
            os.ftruncate(fd, spec.needed)
        elif mode != "empty":
            raise ValueError(f"unknown reset mode {mode}")
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        raise IodlError(f"preparing {spec.path} for the write job: {exc.strerror}") from None
    finally:
        os.close(fd)


def open_input(path: str, direct: bool) -> int:
    """Open a file to read, refusing anything but a regular file or block device without blocking
    (a FIFO planted after the checks would block a plain open forever)."""
    probe = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        what = _not_readable(os.fstat(probe).st_mode)
        if what:
            raise IodlError(f"{path} is {what}: fio-compare reads regular files and block devices only")
        # reopen the very inode checked (not the name again), blocking, with O_DIRECT when asked
        try:
            return open_for_read(f"/proc/self/fd/{probe}", direct)
        except IodlError as exc:
            raise IodlError(str(exc).replace(f"/proc/self/fd/{probe}", path)) from None
    finally:
        os.close(probe)
