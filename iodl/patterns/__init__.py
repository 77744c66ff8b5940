"""Patterns: when each rank reads (and, for DL patterns, computes and synchronises) or writes.

A pattern is one module behind the protocol of iodl/patterns/base.py. PATTERNS is the registry
`iodl read` uses, written out here; a caller may hand `iodl.cmd.read.run` a registry of its own
(tests/mpi/test_own_pattern.py adds a pattern that way, with no other change). The patterns that
write (`iodl checkpoint`) run under their own command, not `iodl read`: their registry,
WRITE_PATTERNS, is that command's (iodl/cmd/checkpoint.py), so that no rank of a read run imports
them (every module a rank imports costs ~36x its import time at 72 ranks on 2 cores).
"""
from __future__ import annotations

from .base import Pattern, Run
from .shards import read_shards
from .steps import INFER_ASYNC, TRAIN_SYNC
from .storage_only import STORAGE_ONLY
from .validate import VALIDATE

__all__ = ["PATTERNS", "Pattern", "Run", "read_shards"]

PATTERNS: dict[str, Pattern] = {p.name: p for p in (TRAIN_SYNC, INFER_ASYNC, STORAGE_ONLY, VALIDATE)}
