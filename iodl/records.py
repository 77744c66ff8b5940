"""`record`: a dataclass whose __repr__, __eq__ and __hash__ are shared functions, not generated ones.

dataclasses writes each method of a class as source text and compiles it when the class is
defined, every time a process imports the module. At 3.11 that is 0.1-0.4 ms a method and up to six
methods a class; a rank imports ~22 classes before its first step, and at 72 ranks on 2 cores each
ms of a rank's start-up was ~60 ms of the job's (bench/results/startup-burn-1130.md). The three here
behave as dataclasses' own (the same fields, in order; equal only to the same class; a frozen
record hashes its fields, a mutable one is unhashable); __init__ and frozen's guards are still
dataclasses'.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


def _values(obj) -> tuple:
    return tuple(getattr(obj, f.name) for f in fields(obj))


def _repr(self) -> str:
    return f"{type(self).__qualname__}({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in fields(self))})"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def record(cls=None, /, *, frozen: bool = False, kw_only: bool = False):
    """@record or @record(frozen=True, kw_only=True) where @dataclass(...) would be."""
    def wrap(cls):
        own = set(cls.__dict__)   # what the class body defines stays (dataclasses does the same)
        cls = dataclass(cls, frozen=frozen, kw_only=kw_only, repr=False, eq=False)
        for name, fn in (("__repr__", _repr), ("__eq__", _eq)):
            if name not in own:
                setattr(cls, name, fn)
        if "__hash__" not in own:
            cls.__hash__ = _hash if frozen else None   # dataclasses' rule for eq=True
        return cls
    return wrap if cls is None else wrap(cls)
