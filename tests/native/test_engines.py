"""The engine registry (iodl/engines.py): every name, iodl's or fio's, resolves alike in `iodl read`,
`iodl checkpoint` and `iodl fio-compare`; each entry says what it is; one probe; and the O_DIRECT
alignment Python checks against is the C core's.

The truth the registry is held to is written here, not read from it: fio's ioengine names and the
engine each is run as, fio's own list of engines (`fio --enghelp`), and the kernel's probes.
"""
import argparse
import errno
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from iodl import _native, engines, limits, runner
from iodl.asyncio_engine import AsyncioEngine, unavailable
from iodl.cmd import checkpoint, read
from iodl.comm import SerialComm
from iodl.errors import IodlError, UsageError
from iodl.fio.jobfile import JobFileError, parse
from iodl.fio.run import META_ENGINES, plan_job
from iodl.patterns import PATTERNS
from tests.helpers import transformer_toml, write_random_files

REPO = Path(__file__).resolve().parents[2]

# fio's ioengine names iodl honours -> the engine that runs them (fio's sync reads with read(2) after
# an lseek, pvsync/pvsync2 with preadv(2): iodl runs each as psync, one positional read at a time)
FIO_ALIASES = {"null": "null", "psync": "psync", "sync": "psync", "pvsync": "psync", "pvsync2": "psync",
               "libaio": "aio", "io_uring": "uring"}
FIO_METADATA = ("filecreate", "filestat", "filedelete")   # fio's per-file engines: fio-compare only
IODL_ONLY = ("aio", "uring", "asyncio", "auto")           # iodl's names, unknown to fio
NOT_HONOURED = ("vsync", "mmap", "posixaio", "nope")      # fio engines iodl does not emulate, and a typo
NAMES = (*FIO_ALIASES, *FIO_METADATA, *IODL_ONLY, *NOT_HONOURED)


def usable(engine: str) -> bool:
    """The kernel's word (or the Python modules'), asked without the registry."""
    if engine == "s3":
        return importlib.util.find_spec("awscrt") is not None
    return unavailable() is None if engine == "asyncio" else _native.probe(engine) == 0


DEPTH = 8   # asked of every command; psync runs one request at a time whatever is asked


def expected(command: str, name: str) -> tuple[str, int] | None:
    """(engine, depth) `command` runs for `--engine name --iodepth 8` (fio-compare: `ioengine=name
    iodepth=8`); None: refused."""
    engine = _expected_engine(command, name)
    return engine and (engine, 1 if engine == "psync" else DEPTH)


def _expected_engine(command: str, name: str) -> str | None:
    if command == "fio-compare":   # fio's names only; whether it can run is found when it opens
        return FIO_ALIASES.get(name) or (name if name in FIO_METADATA else None)
    if name == "auto":             # buffered: io_uring, else psync (docs/engines.md)
        return "uring" if usable("uring") else "psync"
    engine = FIO_ALIASES.get(name) or (name if name in IODL_ONLY else None)
    if engine is None or not usable(engine) or (command == "checkpoint" and engine == "asyncio"):
        return None                # unknown, not usable here, or reads only where a checkpoint writes
    return engine


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    top = tmp_path_factory.mktemp("engines")
    (top / "data").mkdir()
    write_random_files(str(top / "data"), 1, 8192)
    (top / "model.toml").write_text(transformer_toml("small", layers=1, hidden=256, ffn=512, heads=4, vocab=1000,
                                                     data=2))
    return {"data": str(top / "data"), "model": str(top / "model.toml"), "ckpt": str(top / "ckpt"), "dir": str(top)}


def _args(add_arguments, argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def _read(name, places):
    """`iodl read`'s set-up, before any I/O: the engine of its RunSpec."""
    args = _args(read.add_arguments, ["--root", places["data"], "--engine", name, "--pattern", "validate",
                                      "--iodepth", str(DEPTH)])
    spec = runner._setup(SerialComm(), args, PATTERNS, 0)[0]
    return spec.engine, spec.iodepth


def _checkpoint(name, places):
    """`iodl checkpoint`'s set-up, before any I/O: the engine of its CheckpointRunSpec."""
    args = _args(checkpoint.add_arguments, ["--workload", places["model"], "--root", places["ckpt"], "--engine", name,
                                            "--iodepth", str(DEPTH)])
    spec = checkpoint.resolve(1, args)
    return spec.engine, spec.iodepth


def _fio_compare(name, places):
    """`iodl fio-compare`'s plan of a job with ioengine=name."""
    (job,) = parse("job.fio", f"[j]\nrw=read\nbs=4k\nsize=64k\nioengine={name}\niodepth={DEPTH}\n"
                              f"directory={places['dir']}\n")
    plan = plan_job(job, files=False)
    return plan.engine, plan.depth


ENTRY_POINTS = {"read": _read, "checkpoint": _checkpoint, "fio-compare": _fio_compare}


@pytest.mark.parametrize("command", ENTRY_POINTS)
def test_every_name_resolves_alike_in_read_checkpoint_and_fio_compare(command, places):
    got = {}
    for name in NAMES:
        try:
            got[name] = ENTRY_POINTS[command](name, places)
        except (UsageError, JobFileError) as exc:
            assert name in str(exc) or FIO_ALIASES.get(name, name) in str(exc), str(exc)
            got[name] = None
    assert got == {name: expected(command, name) for name in NAMES}
    # what the three have in common, fio's names, runs the same engine in each
    assert {n: got[n] and got[n][0] for n in FIO_ALIASES} == \
        {n: e if command == "fio-compare" or usable(e) else None for n, e in FIO_ALIASES.items()}


def test_the_registry_lists_every_fio_name_iodl_honours():
    assert sorted(engines.fio_names()) == sorted([*FIO_ALIASES, *FIO_METADATA])
    assert {n: engines.from_fio(n) for n in NAMES} == {n: _expected_engine("fio-compare", n) for n in NAMES}
    # where a user reads the names: --engine's help and error, and the fio-compare guide
    for add_arguments in (read.add_arguments, checkpoint.add_arguments):
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        text = " ".join(parser.format_help().split())
        assert all(re.search(rf"\b{alias}\b", text) for alias in FIO_ALIASES), text
    with pytest.raises(UsageError) as exc:
        engines.resolve("nope")
    assert all(re.search(rf"\b{name}\b", str(exc.value)) for name in [*FIO_ALIASES, *IODL_ONLY]), str(exc.value)
    guide = " ".join((REPO / "docs" / "fio-compare.md").read_text().split())
    line = guide[guide.index("ioengine (") - 1:guide.index("iodepth (1 for sync engines)")]
    assert all(re.search(rf"\b{name}\b", line) for name in [*FIO_ALIASES, *FIO_METADATA]), line


@pytest.mark.fio
def test_fio_accepts_each_of_its_names_and_none_of_iodls_own():
    listed = set(subprocess.run(["fio", "--enghelp"], capture_output=True, text=True, check=True).stdout.split())
    assert set(engines.fio_names()) <= listed
    assert not listed & {"aio", "uring", "asyncio"}   # why fio-compare refuses them: fio would too
    assert set(NOT_HONOURED[:-1]) <= listed           # fio engines iodl refuses, named in the test above


def test_each_entry_says_what_it_is():
    kinds = {kind: [e.name for e in engines.ENGINES.values() if e.kind == kind]
             for kind in (engines.C_OPS, engines.PYTHON, engines.C_PER_FILE)}
    assert kinds[engines.C_OPS] == _native.engines()             # the compiled-in ops tables, in order
    assert kinds[engines.PYTHON] == ["asyncio", "s3"]
    made = engines.ENGINES["asyncio"].make(depth=2, block_size=4096)
    try:
        assert isinstance(made, AsyncioEngine)
    finally:
        made.close()
    assert kinds[engines.C_PER_FILE] == list(META_ENGINES)       # fio-compare's per-file C calls
    assert sum(len(v) for v in kinds.values()) == len(engines.ENGINES)
    assert engines.plan_engines() == kinds[engines.C_OPS] + kinds[engines.PYTHON]
    assert [n for n in engines.plan_engines() if not engines.ENGINES[n].writes] == ["asyncio", "s3"]
    assert [n for n in engines.ENGINES if engines.ENGINES[n].serial] == ["psync"]


def test_available_matches_the_probes():
    assert {n: why is None for n, why in engines.available().items()} == \
        {n: usable(n) for n in engines.plan_engines()}


def test_auto_is_uring_else_aio_for_direct_else_psync():
    for direct in (False, True):
        want = "uring" if usable("uring") else "aio" if direct and usable("aio") else "psync"
        assert engines.choose("auto", direct) == want


def test_unknown_or_misused_engine_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown engine 'nope' \\(choose from auto, null, psync"):
        engines.open_engine("nope")
    with pytest.raises(UsageError, match="unknown engine 'libaio'"):   # opened by iodl's name, once resolved
        engines.open_engine("libaio")
    with pytest.raises(UsageError, match="null engine only"):
        engines.open_engine("psync", delay_ns=1)


@pytest.mark.uring
def test_setup_failure_names_the_syscall():
    # io_uring takes at most 32768 entries without IORING_SETUP_CLAMP: EINVAL from the kernel
    with pytest.raises(OSError, match=r"originated from io_uring_setup") as exc:
        _native.Engine("uring", depth=65536, block_size=1)
    assert exc.value.errno == errno.EINVAL
    with pytest.raises(IodlError, match="could not start: .*originated from io_uring_setup"):
        engines.open_engine("uring", depth=65536, block_size=1)


def test_python_checks_use_the_c_alignment(tmp_path):
    header = (REPO / "native" / "engine.h").read_text()
    align = int(re.search(r"#define IODL_ALIGN (\d+)", header).group(1))
    assert _native.ALIGN == align
    assert [limits.aligned(n) for n in (1, align, align + 1)] == [align, align, 2 * align]
    assert limits.buffers_bytes(3, align + 1) == 3 * 2 * align
    assert limits.check_block_size("--block-size", align, direct=True) == align
    with pytest.raises(UsageError, match=f"multiple of {align} bytes"):
        limits.check_block_size("--block-size", align // 2, direct=True)
    # fio-compare refuses direct writes the engine could not align
    job_text = "[w]\nrw=write\nsize=1m\nbs={}\ndirect=1\ndirectory=" + str(tmp_path) + "\n"
    (job,) = parse("w.fio", job_text.format(align))
    assert plan_job(job, files=False).direct
    (job,) = parse("w.fio", job_text.format(align // 2))
    with pytest.raises(JobFileError, match=f"multiples of {align} bytes"):
        plan_job(job, files=False)
