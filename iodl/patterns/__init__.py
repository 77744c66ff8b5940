"""Patterns: when each rank reads (and, for DL patterns, computes and synchronises).

A pattern is one module behind the protocol of iodl/patterns/base.py. PATTERNS is the registry
`iodl read` uses, written out here; a caller may hand `iodl.cmd.read.run` a registry of its own
(tests/mpi/test_own_pattern.py adds a pattern that way, with no other change).
"""
from __future__ import annotations

from ..engine import available_engines, check_engine
from .base import Pattern, Run
from .shards import read_shards
from .steps import INFER_ASYNC, TRAIN_SYNC
from .storage_only import STORAGE_ONLY
from .validate import VALIDATE

__all__ = ["PATTERNS", "Pattern", "Run", "read_shards", "choose_engine", "engine_name"]

PATTERNS: dict[str, Pattern] = {p.name: p for p in (TRAIN_SYNC, INFER_ASYNC, STORAGE_ONLY, VALIDATE)}


# fio's ioengine names for the same engines: `--engine libaio` reads as fio users expect
ENGINE_ALIASES = {"libaio": "aio", "io_uring": "uring", "sync": "psync", "pvsync": "psync"}


def engine_name(requested: str) -> str:
    """iodl's name for an engine given by iodl's or fio's name."""
    return ENGINE_ALIASES.get(requested, requested)


def choose_engine(requested: str, direct: bool) -> str:
    """`auto`: io_uring when usable (it is asynchronous for buffered reads too), else native AIO for
    O_DIRECT (Linux AIO is synchronous on buffered files), else psync."""
    requested = engine_name(requested)
    if requested != "auto":
        check_engine(requested)
        return requested
    usable = available_engines()
    if usable.get("uring", "") is None:
        return "uring"
    if direct and usable.get("aio", "") is None:
        return "aio"
    return "psync"
