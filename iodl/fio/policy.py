"""Which written fio options iodl takes: honoured, accepted without effect, at fio's default, or
changing nothing in the job at hand — and why it refuses the rest.

Apart from options.py because deciding "at fio's default" parses the default as a written value
would be parsed (jobfile.parse_value), and the parser itself needs the option table.
"""
from __future__ import annotations

from .jobfile import parse_value
from .options import DEFAULTS, HONOURED, IGNORED, ONLY_OFF, TYPE, why


# Options that change nothing unless another option is on (fio 3.33): the verify family only
# verifies with verify= set; the think-time family only acts with thinktime= set; the mix only
# mixes in a mixed rw=; the random-offset options only steer random rw= modes (io_u.c
# get_next_block asks them only when td_random); what is written (syncs, buffer contents) matters
# only in a job that writes (should_fsync, fill_io_buffer on writes). Option -> (what must be on, test).
_VERIFY_FAMILY = ("do_verify", "verify_", "experimental_verify", "verifysort")
_THINK_FAMILY = ("thinktime_", "rate_ignore_thinktime")
MIXED_RW = ("rw", "readwrite", "randrw")
RANDOM_RW = ("randread", "randwrite", "randrw", "randtrim", "randtrimwrite")
_RANDOM_ONLY = {"percentage_random", "percentage_sequential", "random_distribution", "norandommap",
                "random_generator", "softrandommap"}
_WRITE_ONLY_CONTENT = ("fsync", "fdatasync", "end_fsync", "fsync_on_close", "write_barrier", "sync_file_range",
                       "refill_buffers", "scramble_buffers", "zero_buffers", "buffer_pattern", "buffer_compress_",
                       "dedupe_", "create_fsync")


def _default_value(name: str, kb_base: int):
    """fio's default of `name`, parsed as a written value would be (None: no default to compare)."""
    text = DEFAULTS.get(name)
    kind = TYPE.get(name)
    if text is None or kind is None:
        return None
    if text == "":
        # "no default": a zeroed field; a string option has nothing to be equal to
        return None if kind in ("str", "float", "range") else 0
    try:
        return parse_value(name, text, kb_base)
    except (ValueError, OverflowError):
        return None


def at_default(name: str, value, kb_base: int = 1024) -> bool:
    """Whether a written value is fio's default for the option (so writing it changes nothing)."""
    want = _default_value(name, kb_base)
    if want is None:
        return False
    if isinstance(value, str) and isinstance(want, str):
        return value.strip().lower() == want.strip().lower()
    if isinstance(value, list) and not isinstance(want, list):
        return all(v == want for v in value)
    if isinstance(want, list) and not isinstance(value, list):
        return all(w == value for w in want)
    return value == want


def _is_off(values: dict, name: str) -> bool:
    return name not in values or at_default(name, values[name], values.get("kb_base", 1024))


def without_effect(name: str, values: dict) -> str | None:
    """Why option `name` changes nothing in a job with these values (None when it may)."""
    rw = str(values.get("rw", "read")).partition(":")[0].strip()
    writes = rw not in ("read", "randread")
    if name.startswith(_VERIFY_FAMILY) and _is_off(values, "verify"):
        return "verify= is off"
    if name.startswith(_THINK_FAMILY) and _is_off(values, "thinktime"):
        return "thinktime= is off"
    if name.startswith("rwmix") and rw not in MIXED_RW:
        return f"rw={rw} does not mix reads and writes"
    if name in _RANDOM_ONLY and rw not in RANDOM_RW:
        return f"rw={rw} is sequential"
    if name.startswith(_WRITE_ONLY_CONTENT) and not writes:
        return f"rw={rw} writes nothing (fio syncs and fills buffers only for writes)"
    return None


def refusal(name: str, value, values: dict) -> str | None:
    """Why iodl refuses option `name` written as `value` in a job with `values` (one phrase), or None
    when it takes it: it honours it, it is accepted without effect (IGNORED), it is fio's default,
    or it changes nothing in this job (without_effect)."""
    if name in ONLY_OFF:
        return None if value in (0, "0") else ONLY_OFF[name]
    if name in HONOURED or name in IGNORED:
        return None
    if at_default(name, value, values.get("kb_base", 1024)) or without_effect(name, values):
        return None
    return why(name)
