"""Command line: a registry of subcommands, imported lazily so `iodl --help` starts no MPI."""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import threading
import time

from . import __version__
from .errors import IodlError
from .launcher import launched_by_mpi, launcher_rank, start_mpi
from .stop import HeldStops

# Nothing heavy at the top: main() takes over SIGTERM before the command's module (numpy, MPI) is
# imported, so a stop that comes while the process starts is one line too, never a traceback.

# iodl does no linear algebra, but numpy's OpenBLAS starts a thread per core when numpy is imported,
# and each spins (sched_yield) for a while before it sleeps: ~0.05 s of CPU per process, which
# 72 ranks on 2 cores pay ~36 times over at start-up (bench/results/scale.md). One thread, unless
# the user set it.
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}

# name -> (module, one-line help); modules are imported only when their command runs
COMMANDS = {
    "read": ("iodl.cmd.read", "replay a read pattern against one or more dataset roots"),
    "generate": ("iodl.cmd.generate", "write a workload's dataset under one or more roots"),
    "probe": ("iodl.cmd.probe", "show what this machine supports (O_DIRECT, aio, io_uring, fio, MPI)"),
    "fio-compare": ("iodl.cmd.fio_compare", "run a fio job file with fio and with iodl, side by side"),
    "sweep": ("iodl.cmd.sweep", "run a pattern at several rank counts and find how many accelerators the storage supports"),
    "sizing": ("iodl.cmd.sizing", "per-accelerator storage demand of workloads, and how many a measured run can feed"),
    "workloads": ("iodl.cmd.workloads", "list the built-in workloads, their shape and their source"),
    "datasize": ("iodl.cmd.datasize", "the smallest dataset MLPerf Storage's rules accept for a workload"),
    "checkpoint": ("iodl.cmd.checkpoint", "what each rank of an MLPerf-Storage-style checkpoint writes (--plan)"),
    "report": ("iodl.cmd.report", "print result files again, write their time series as CSV, or plot them"),
    "compare": ("iodl.cmd.compare", "put two result files side by side"),
    "kvcache": ("iodl.cmd.kvcache", "MLPerf Storage's LLM KV-cache offload workload: entries written and re-read"),
}


# commands whose argv is rewritten before it is parsed: the function of the command's module that does it
REWRITE_ARGV = {"sweep": "own_options_first",          # read options may follow without `--`
                "fio-compare": "fio_options_as_flags"}  # fio's own --OPTION=VALUE, as on fio's command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # Under mpirun every rank parses the same argv: let rank 0 alone print the usage error.
        if launcher_rank() == 0:
            self.print_usage(sys.stderr)
            sys.stderr.write(f"iodl: error: {message}\n")
        sys.exit(2)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size gives it (a positive COLUMNS, then the
    terminal, then 80), without importing shutil: argparse's formatter does, and shutil brings bz2
    and lzma, ~5 ms of every rank's start-up."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def command_of(argv: list[str]) -> str | None:
    """The command argv names: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = _Parser(prog="iodl", description="Storage I/O workload generator for deep-learning data access.",
                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"iodl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    chosen = command_of(argv)
    for name, (module, help_text) in COMMANDS.items():
        # A command's parser alone when argv names one: the other eleven were ~5 ms of every rank's
        # start-up (each parser asks gettext for its words). None named: all, for the usage and for
        # the error that lists them.
        if chosen in COMMANDS and name != chosen:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=_Formatter)
        p.set_defaults(_module=module)
        if name == chosen:
            # Only the chosen command's module is imported to add its options (`iodl --help` lists
            # the commands from COMMANDS alone: it imports none of them)
            importlib.import_module(module).add_arguments(p)
    return parser


def _os_error_line(exc: OSError) -> str:
    """A file's error as a person reads it ("/mnt/x: Permission denied"), not Python's repr of it
    ("[Errno 13] Permission denied: '/mnt/x'"); an error that names no file keeps its own words."""
    if exc.filename is None or not exc.strerror:
        return str(exc)
    names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n is not None)
    return f"{names}: {exc.strerror}"


def _fail(message: str, code: int) -> int:
    rank = launcher_rank()
    prefix = f"iodl: error (rank {rank}): " if launched_by_mpi() and rank else "iodl: error: "
    sys.stderr.write(prefix + message.replace("\n", " ") + "\n")
    sys.stderr.flush()
    return code


def _abort_if_mpi(code: int) -> None:
    """Under MPI, one failing rank ends the whole job now instead of leaving the others in a collective."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        # MPI_Abort makes the launcher kill every rank, sometimes before it has forwarded this
        # rank's stderr: give it a moment to pass the error line on, or the user sees nothing.
        time.sleep(0.3)
        mpi.COMM_WORLD.Abort(code)


def _on_term(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    starting = "numpy" not in sys.modules   # a new process, not a caller that runs commands in-process
    if starting:
        for name, value in BLAS_THREADS.items():   # read when numpy loads OpenBLAS, and only then
            os.environ.setdefault(name, value)
    # SIGTERM ends a command as Ctrl-C does (one line, its own clean-up), from the very start;
    # a command that can do better (read: a partial result) installs its own handlers
    in_main = threading.current_thread() is threading.main_thread()
    old_term = None
    try:
        if in_main:
            old_term = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_term)
        return _main(argv, starting)
    except KeyboardInterrupt:
        # a stop in the instant before _main's own handling: signal.signal has installed the
        # handler in C and is still in Python (a CI run's SIGINT, sent once SIGTERM was caught,
        # landed in its enum conversion and printed a traceback)
        return _fail("interrupted", 130)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _main(argv: list[str], starting: bool) -> int:
    try:
        if starting:
            # A command's imports make ~100k objects that live as long as the process, and no
            # garbage: the collector's passes over them while they are made were ~10% of a rank's
            # start-up CPU (perf, 72 ranks on 2 cores). Off while importing; then they are frozen
            # out of every later pass (the run's own collections walk only what the run makes).
            gc.disable()
        # a stop that comes while the command's modules load is taken once they are in (HeldStops)
        with HeldStops(starting):
            try:
                name = command_of(argv)
                if name in COMMANDS and launched_by_mpi():
                    start_mpi()   # first, while the ranks are still together (launcher.start_mpi says why)
                if name in REWRITE_ARGV:
                    argv = getattr(importlib.import_module(COMMANDS[name][0]), REWRITE_ARGV[name])(argv)
                args = build_parser(argv).parse_args(argv)
                module = importlib.import_module(args._module)
                # iodl.comm (numpy) only now, after the command's module: the one import here that is
                # not the registry's, kept out of the top for the SIGTERM reason above
                from .comm import world

                # the communicator is built once, here (as mpi4py's bench does): a command takes it, so
                # that a test can run one in-process; it starts MPI only when mpirun launched this process
                comm = world()
            finally:
                if starting:
                    gc.freeze()
                    gc.enable()
        return int(module.run(comm, args) or 0)
    except IodlError as exc:
        if getattr(exc, "collective", False):
            # Every rank knows; rank 0 says it once and nobody needs to abort the job.
            return _fail(str(exc), exc.exit_code) if launcher_rank() == 0 else exc.exit_code
        code = _fail(str(exc), exc.exit_code)
    except OSError as exc:
        code = _fail(_os_error_line(exc), 1)
    except KeyboardInterrupt:
        code = _fail("interrupted", 130)
    except MemoryError:   # the machine's limit, not a bug: one line (the limits are checked up front)
        code = _fail("out of memory", 1)
    except Exception as exc:
        # the interpreter's own printer (in C): the traceback module is ~4 ms of every rank's start-up
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = _fail("internal error (traceback above); please report it", 70)
    _abort_if_mpi(code)
    return code
