"""The engines iodl runs, by name: one table for `iodl read`, `iodl checkpoint` and `iodl fio-compare`.

An entry says what the engine is: a C ops table that _native.Engine drives (native/engine_*.c), a
Python class with _native.Engine's interface (iodl/asyncio_engine.py), or one of fio's metadata
engines, a C call per file and no plan (native/fileops.c, run by iodl/fio/run.py). It also gives
fio's ioengine names for the same engine, so `--engine libaio` reads as fio users expect and a job
file's `ioengine=` maps through the same table, whether the engine writes, and how to ask this
machine whether it can run it. A new engine is one entry here and one module. Every engine's
O_DIRECT alignment is the C core's, `_native.ALIGN` (native/engine.h IODL_ALIGN), read from there.

`auto` is the choice for a user who names none (docs/engines.md). The probe runs once: when a
command chooses its engine, before any I/O. Opening an engine does not probe again; only when the
engine fails to start is the probe asked which system call refused.
"""
from __future__ import annotations

import errno
import functools
import importlib.util
from typing import Callable

from . import _native
from .errors import IodlError, UsageError
from .records import record

AUTO = "auto"

C_OPS = "C ops table"          # _native.Engine(name): runs plans
PYTHON = "Python"              # a class with _native.Engine's interface: runs plans
C_PER_FILE = "C per file"      # fio's metadata engines: one create, stat or unlink per file


@record(frozen=True)
class Entry:
    """One engine of the registry: its names and what it can do."""
    name: str                                  # iodl's name (results, --engine)
    kind: str                                  # C_OPS, PYTHON or C_PER_FILE
    about: str                                 # how it issues a request, in a few words
    fio: tuple[str, ...] = ()                  # fio's ioengine names for it (fio accepts each)
    writes: bool = True                        # runs write and sync rows (checkpoints, fio write jobs)
    serial: bool = False                       # one request at a time (fio's sync engines): depth 1
    make: Callable | None = None               # (**options) -> an engine; None: runs no plans
    unusable: Callable[[], str | None] = lambda: None   # the probe: None if usable here, else why not


def _c_probe(name: str, syscall: str) -> str | None:
    err = _native.probe(name)
    return f"{syscall} -> {errno.errorcode.get(err, str(err))}" if err else None


def _c_ops(name: str, about: str, fio: tuple[str, ...], syscall: str | None = None,
           serial: bool = False) -> Entry:
    """A compiled-in engine (native/engines.c); `syscall`: what its probe tries, as a refusal names it."""
    return Entry(name, C_OPS, about, fio, serial=serial, make=functools.partial(_native.Engine, name),
                 unusable=functools.partial(_c_probe, name, syscall or name))


# The asyncio engine's module is imported when that engine is asked for: it brings asyncio, ssl,
# aiofiles and uvloop, 2.5 MB of every rank's memory that a run of the C engines never uses.
def _asyncio(**options):
    from .asyncio_engine import AsyncioEngine
    return AsyncioEngine(**options)


def _asyncio_unusable() -> str | None:
    from .asyncio_engine import unavailable
    return unavailable()


# The s3 engine's module brings awscrt (the s3 extra): imported only for a run that reads a bucket.
def _s3(**options):
    from .s3engine import S3Engine
    return S3Engine(**options)


def _s3_unusable() -> str | None:
    return None if importlib.util.find_spec("awscrt") else "no awscrt (pip install 'iodl[s3]')"


ENGINES: dict[str, Entry] = {e.name: e for e in (
    _c_ops("null", "no I/O, a delay per request", ("null",)),
    # fio's sync (read(2) after lseek) and pvsync/pvsync2 (preadv) as psync: one positional read at a time
    _c_ops("psync", "pread(2), one at a time", ("psync", "sync", "pvsync", "pvsync2"), serial=True),
    _c_ops("aio", "Linux native AIO, io_submit", ("libaio",), "io_setup"),
    _c_ops("uring", "io_uring", ("io_uring",), "io_uring_setup"),
    Entry("asyncio", PYTHON, "aiofiles on uvloop", writes=False, make=_asyncio, unusable=_asyncio_unusable),
    Entry("s3", PYTHON, "ranged GETs to an S3 endpoint (awscrt)", writes=False, make=_s3, unusable=_s3_unusable),
    Entry("filecreate", C_PER_FILE, "open(O_CREAT|O_EXCL) per file", ("filecreate",)),
    Entry("filestat", C_PER_FILE, "stat per file", ("filestat",), writes=False),
    Entry("filedelete", C_PER_FILE, "unlink per file", ("filedelete",)),
)}
_FIO = {alias: e.name for e in ENGINES.values() for alias in e.fio}


def plan_engines() -> list[str]:
    """The engines `iodl read` and `iodl checkpoint` can name: those that run plans."""
    return [e.name for e in ENGINES.values() if e.make is not None]


def fio_names() -> list[str]:
    """fio's ioengine names iodl honours, in the table's order."""
    return list(_FIO)


def from_fio(ioengine: str) -> str | None:
    """iodl's engine for a fio ioengine name, or None when iodl has none."""
    return _FIO.get(ioengine)


def resolve(requested: str) -> str:
    """iodl's name for an engine given by iodl's name, fio's name or `auto` (kept as `auto`), or a
    UsageError naming the choices."""
    name = _FIO.get(requested, requested)
    if name == AUTO or name in plan_engines():
        return name
    raise _unknown(requested)


def choices(writes: bool = False) -> str:
    """The names `--engine` takes, as its help and its errors list them: `auto`, iodl's names, then
    fio's for the same engines; `writes`: only engines that write."""
    ours = [n for n in plan_engines() if ENGINES[n].writes or not writes]
    aliases = [a for a, n in _FIO.items() if a != n and n in ours]
    return f"{AUTO}, {', '.join(ours)}, or fio's {', '.join(aliases)}"


def _unknown(requested: str) -> UsageError:
    return UsageError(f"unknown engine '{requested}' (choose from {choices()})")


def check(name: str) -> None:
    """A UsageError saying why the engine cannot run here, in one line (the probe)."""
    why = ENGINES[name].unusable()
    if why:
        raise UsageError(f"engine '{name}' is not usable here: {why}")


def available() -> dict[str, str | None]:
    """Every engine that runs plans -> None if usable here, else why not ("io_uring_setup -> EPERM")."""
    return {name: ENGINES[name].unusable() for name in plan_engines()}


def choose(requested: str, direct: bool, writes: bool = False) -> str:
    """The engine a command runs, probed once, for a name as `resolve` takes it; `writes`: the run
    writes (checkpoints). `auto`: io_uring when usable (it is asynchronous for buffered reads too),
    else native AIO for O_DIRECT (Linux AIO is synchronous on buffered files), else psync."""
    name = resolve(requested)
    if name == AUTO:
        if ENGINES["uring"].unusable() is None:
            return "uring"
        return "aio" if direct and ENGINES["aio"].unusable() is None else "psync"
    if writes and not ENGINES[name].writes:
        raise UsageError(f"--engine {name} reads only (choose from {choices(writes=True)})")
    check(name)
    return name


def depth(name: str, requested: int) -> int:
    """The requests in flight the engine runs when asked for `requested`: 1 for a serial engine (the
    result says the depth that ran, not the one asked for)."""
    return 1 if ENGINES[name].serial else requested


def open_engine(name: str, **options):
    """The engine `name` (iodl's name, as `choose` returned it) made with `options` (_native.pyi), or
    a UsageError/IodlError that says why not in one line."""
    entry = ENGINES.get(name)
    if entry is None or entry.make is None:
        raise _unknown(name)
    try:
        return entry.make(**options)
    except ValueError as exc:
        raise UsageError(f"engine '{name}': {exc}") from None
    except OSError as exc:
        why = entry.unusable()   # asked only now: which system call refuses it here
        if why:
            raise UsageError(f"engine '{name}' is not usable here: {why}") from None
        raise IodlError(f"engine '{name}' could not start: {exc.strerror}") from None


def open_reader(spec, cache_check: bool):
    """The engine a DL pattern reads with (train-sync, infer-async, storage-only), from its RunSpec.
    A C engine takes the completions already there after each submit (reap_ready, native/core.h):
    a page-cache hit's slot, warm in the CPU's caches, goes to the next read; with 16-32 ranks of
    one-sample files in the page cache that took 10-17 % off iodl's CPU a sample. fio-compare keeps
    fio's way (reaped when the slots run out), whose depth figures fio's are held to."""
    warm = {"reap_ready": True} if ENGINES[spec.engine].kind == C_OPS else {}
    return open_engine(spec.engine, depth=spec.iodepth, block_size=spec.block_size, direct=spec.direct,
                       delay_ns=spec.delay_ns, cache_check=cache_check, **warm, **spec.engine_extra)
