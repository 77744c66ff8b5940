"""Sizes in iodl's own files and options: "114660B", "4KiB", "1.3MB", 1048576.

MB = 10^6 and MiB = 2^20 (docs/numbers.md). fio's unit rules (kb_base, "k" meaning
KiB) are fio's business and are handled with fio's job files, not here.
"""
from __future__ import annotations

import re

from .errors import UsageError, shown

# Lower-cased suffix -> bytes. A bare "k"/"m"/"g" is decimal, like "kB"/"MB"/"GB".
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtpe", start=1):
    _UNITS[_p] = _UNITS[_p + "b"] = 1000 ** _i
    _UNITS[_p + "i"] = _UNITS[_p + "ib"] = 1024 ** _i

_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]{1,3}))?\s*([a-zA-Z]{0,3})\s*\Z")

# Units for format_size, largest first.
_DECIMAL = [("EB", 1000 ** 6), ("PB", 1000 ** 5), ("TB", 1000 ** 4), ("GB", 1000 ** 3), ("MB", 1000 ** 2), ("kB", 1000)]
_BINARY = [("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]


def parse_size(value, what: str = "size") -> int:
    """Bytes from an int or a string with an optional unit; UsageError for anything else."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a size such as 4096 or \"1MiB\", got {shown(value)}")
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"{what}: must not be negative, got {value}")
        if value >= 1 << 63:
            raise UsageError(f"{what}: {value} is too large")
        return value
    if not isinstance(value, str):
        raise UsageError(f"{what}: expected a size such as 4096 or \"1MiB\", got {shown(value)}")
    text = value.strip()
    if text.startswith("-"):
        raise UsageError(f"{what}: must not be negative, got {shown(value)}")
    m = _SIZE_RE.match(text)
    unit = m.group(3).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UsageError(f"{what}: not a size: {shown(value)} (use e.g. 4096, \"114660B\", \"4KiB\", \"1.3MB\")")
    # Exact in integers (decimal's import was ~3 ms of every rank's start-up): the number is
    # digits x 10^exp10, so the bytes are digits x unit x 10^exp10, whole or not.
    whole, _, fraction = m.group(1).partition(".")
    if len(whole) + len(fraction) > 4000:   # int() refuses longer strings (sys.int_info)
        raise UsageError(f"{what}: not a size: {shown(value)} (more than 4000 digits)")
    digits = int(whole + fraction or "0")
    exp10 = int(m.group(2) or 0) - len(fraction)
    numerator = digits * _UNITS[unit] * 10 ** max(exp10, 0)
    denominator = 10 ** max(-exp10, 0)
    if numerator >= (1 << 63) * denominator:
        raise UsageError(f"{what}: {shown(value)} is too large")
    if numerator % denominator:
        raise UsageError(f"{what}: {shown(value)} is not a whole number of bytes")
    return numerator // denominator


def format_size(n: int, binary: bool = False, digits: int = 3) -> str:
    """Human form for reports: 143452660 -> "143 MB" (binary=True: "137 MiB")."""
    n = int(n)
    for name, scale in (_BINARY if binary else _DECIMAL):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.{max(digits - len(str(int(abs(value)))), 0)}f} {name}"
    return f"{n} B"


def format_size_exact(n: int) -> str:
    """The shortest exact form that parse_size reads back: 1048576 -> "1MiB", 1300000 -> "1300kB"."""
    n = int(n)
    if n < 0:
        raise ValueError("negative size")
    if n:
        for name, scale in sorted(_BINARY + _DECIMAL, key=lambda u: -u[1]):
            if n % scale == 0:
                return f"{n // scale}{name}"
    return f"{n}B"
