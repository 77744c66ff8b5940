"""fio job files, parsed as fio's code (init.c, parse.c, options.c) does, not as its HOWTO says.

Two stages: `read_sections` turns text into sections of (key, value, file, line) with includes,
comments and substitutions done; `resolve` applies [global] sections in order and parses each job's
values (suffixes under kb_base, r/w/t splits, booleans, times) into a `Job`.
"""
from __future__ import annotations

import os
import re
from dataclasses import field
from fractions import Fraction

from ..errors import UsageError
from . import options as opts
from ..records import record

U64 = (1 << 64) - 1


class JobFileError(UsageError):
    """A job file iodl cannot take, named by file and line."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        where = f" ({file}:{line})" if file else ""
        super().__init__(message + where)


@record(frozen=True)
class Option:
    key: str          # as written (alias or name)
    value: str | None  # None for a bare key
    file: str
    line: int


@record
class Section:
    name: str
    file: str
    line: int
    options: list[Option] = field(default_factory=list)

    @property
    def is_global(self) -> bool:
        return self.name.startswith("global")  # fio: strncmp(name, "global", 6)


@record(frozen=True)
class Percent:
    """A size written as N% (relative to the file or device)."""

    value: int


@record(frozen=True)
class Zones:
    """A size written as Nz: N zones (fio's FIO_OPT_STR_VAL_ZONE, meaningful with zonemode)."""

    value: int


@record
class Job:
    """One [job] section after [global] inheritance: canonical name -> parsed value."""

    name: str
    file: str
    line: int
    values: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)   # canonical name -> Option it came from

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def loc(self, key: str) -> tuple[str, int]:
        o = self.where.get(key)
        return (o.file, o.line) if o else (self.file, self.line)


# ---------------------------------------------------------------------------------------------
# Stage 1: text -> sections

def _system_keywords() -> dict[str, str]:
    """fio's reserved keywords (fio 3.33 options.c fio_keywords_init), computed as fio does:
    $pagesize = page_size, $mb_memory = os_phys_mem() / MiB (physical pages x page size),
    $ncpus = cpus_configured() = sysconf(_SC_NPROCESSORS_CONF). fio 3.33 has no other keyword."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"$pagesize": str(os.sysconf("SC_PAGE_SIZE")), "$mb_memory": str(pages // (1024 * 1024)),
            "$ncpus": str(os.sysconf("SC_NPROCESSORS_CONF"))}


_ENV = re.compile(r"\$\{([^}]*)\}")


class BcError(ValueError):
    pass


_BC_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|([-+*/%^()]))")


def bc_eval(expr: str) -> str:
    """What `echo 'EXPR' | bc` prints for fio's keyword arithmetic (scale=0: a division truncates
    toward zero; + - * / % ^, unary minus, parentheses). Anything else is a bc error (BcError), as
    when bc prints nothing to fio."""

    pos, tokens = 0, []
    text = expr.rstrip()
    while pos < len(text):
        m = _BC_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise BcError(f"bc cannot evaluate '{expr.strip()}'")
        tokens.append(("n", Fraction(m.group(1))) if m.group(1) else ("o", m.group(2)))
        pos = m.end()
    tokens.append(("o", "$"))
    i = 0

    def peek():
        return tokens[i]

    def take():
        nonlocal i
        i += 1
        return tokens[i - 1]

    def trunc(q):
        return Fraction(int(q))   # toward zero, bc's scale=0

    def primary():
        kind, v = take()
        if kind == "n":
            return v
        if v == "(":
            x = additive()
            if take() != ("o", ")"):
                raise BcError(f"bc cannot evaluate '{expr.strip()}'")
            return x
        if v == "-":
            return -primary()   # bc: unary minus binds tighter than ^
        raise BcError(f"bc cannot evaluate '{expr.strip()}'")

    def power():
        x = primary()
        if peek() == ("o", "^"):
            take()
            e = power()   # right associative
            if e.denominator != 1 or abs(e) > 4096:
                raise BcError(f"bc cannot evaluate '{expr.strip()}'")
            x = trunc(x ** int(e)) if e < 0 else x ** int(e)
        return x

    def multiplicative():
        x = power()
        while peek()[1] in ("*", "/", "%"):
            op = take()[1]
            y = power()
            if op == "*":
                x = x * y
            elif not y:
                raise BcError("bc: divide by zero")
            elif op == "/":
                x = trunc(x / y)
            else:
                x = x - trunc(x / y) * y
        return x

    def additive():
        x = multiplicative()
        while peek()[1] in ("+", "-"):
            op = take()[1]
            y = multiplicative()
            x = x + y if op == "+" else x - y
        return x

    value = additive()
    if peek() != ("o", "$"):
        raise BcError(f"bc cannot evaluate '{expr.strip()}'")
    return str(int(value))   # fio reads the result with strtoll: the integer part


def _bc_calc(line: str) -> str:
    """fio 3.33 options.c bc_calc, run on an option after a keyword was replaced in it: only when
    the option (name included) has + - * or / and no quote; only the value after the first '='."""
    if not any(c in line for c in "+-*/") or "'" in line:
        return line
    key, eq, value = line.partition("=")
    if not eq or len(line) >= 128 or len(value) > 100:
        return line
    return key + "=" + bc_eval(value)


def _substitute(text: str, env, keywords: dict[str, str]) -> str:
    # ${VAR}: anywhere on the line, undefined -> empty (fio_option_dup_subs)
    text = _ENV.sub(lambda m: env.get(m.group(1), ""), text)
    replaced = False
    for word, value in keywords.items():
        if word in text:
            text = text.replace(word, value)
            replaced = True
    return _bc_calc(text) if replaced else text


def _strip(line: str) -> str:
    """fio's strip_blank_end: everything from the first ';' or '#' is a comment."""
    for mark in ";#":
        cut = line.find(mark)
        if cut >= 0:
            line = line[:cut]
    return line.strip()


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError as exc:
        raise JobFileError(f"cannot read job file {path}: {exc.strerror}") from None


def read_sections(path: str, text: str | None = None, env=None, keywords=None,
                  only: list[str] | None = None) -> list[Section]:
    """Sections of a job file, in order, with includes inlined and substitutions done.

    `only`: fio's --section: the [job] sections of these names only ([global]s are all kept;
    init.c skip_this_section)."""
    env = os.environ if env is None else env
    keywords = _system_keywords() if keywords is None else keywords
    sections: list[Section] = []
    _read_into(path, _read_text(path) if text is None else text, sections, env, keywords, depth=0)
    if only:
        sections = [s for s in sections if s.is_global or s.name in only]
    return sections


COMMAND_LINE = "command line"


def command_line_sections(options: list[tuple[str, str | None]]) -> list[Section]:
    """fio's job options given on its command line before the job file (`fio --size=10G job.fio`):
    init.c parse_cmd_line parses each into def_thread, the defaults every job of the (first) job
    file starts from, one after another before the file is read. So they are [global] sections
    ahead of the file's, one option each (each parsed alone, as fio_cmd_option_parse does: a
    command-line kb_base governs only the options after it). The file's own values win."""
    out = []
    for n, (key, value) in enumerate(options, 1):
        name = key
        if name == "name":
            raise JobFileError("--name starts a job on fio's command line; fio-compare runs the jobs of the job "
                               "file (write the job there)", COMMAND_LINE, n)
        if name not in opts.KNOWN:
            raise JobFileError(f"unknown fio option '--{key}'{opts.did_you_mean(name)}", COMMAND_LINE, n)
        section = Section("global", COMMAND_LINE, n)
        section.options.append(Option(name, value, COMMAND_LINE, n))
        out.append(section)
    return out


def _read_into(path, text, sections, env, keywords, depth):
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip(raw)
        if not line:
            continue
        if line.startswith("["):
            if depth:
                raise JobFileError("no new sections in included files", path, number)
            if not line.endswith("]") or len(line) < 3:
                raise JobFileError(f"bad section header '{line}'", path, number)
            sections.append(Section(line[1:-1], path, number))
            continue
        if not sections:
            raise JobFileError(f"option '{line}' outside of a [job] section", path, number)
        if line.startswith("include ") or line.startswith("include\t"):
            name = line[len("include"):].strip()
            target = name
            if not os.path.exists(target) and not os.path.isabs(name):
                target = os.path.join(os.path.dirname(path) or ".", name)
            if depth > 16:
                raise JobFileError(f"include nested too deeply: {name}", path, number)
            if not os.path.exists(target):
                raise JobFileError(f"include file not found: {name}", path, number)
            _read_into(target, _read_text(target), sections, env, keywords, depth + 1)
            continue
        try:
            line = _substitute(line, env, keywords)
        except BcError as exc:
            # fio: bc prints nothing, "failed parsing", the job is dropped
            raise JobFileError(f"cannot evaluate '{line}': {exc}", path, number) from None
        key, eq, value = line.partition("=")
        key = key.strip()
        if not key:
            raise JobFileError(f"option without a name: '{line}'", path, number)
        # fio keeps the blanks after "=": " 16k" is 16 to its suffix scan (strtoll skips them, the scan does not)
        sections[-1].options.append(Option(key, value if eq else None, path, number))


# ---------------------------------------------------------------------------------------------
# Values, as parse.c converts them

def _strtoll(s: str, base: int) -> int:
    """C strtoll on the leading part of s: junk after the number is ignored. No digits at all is an
    error, as in fio's str_to_decimal (nothing read: "failed parsing", the job is dropped)."""
    m = re.match(r"\s*([+-]?)(0[xX])?([0-9a-fA-F]*)" if base == 16 else r"\s*([+-]?)()([0-9]*)", s)
    digits = m.group(3)
    if base == 16:
        digits = re.match(r"[0-9a-fA-F]*", digits).group(0)
    if not digits:
        if m.group(2):      # "0x" alone: strtoll reads the "0"
            return 0
        raise ValueError("not a number")
    value = int(digits, base)
    if value > (1 << 63) - 1:
        raise ValueError("out of range")
    return -value if m.group(1) == "-" else value


def _suffix(s: str) -> str | None:
    """The unit suffix get_mult_bytes/get_mult_time look at: after the leading digits and signs."""
    i, seen = 0, False
    while i < len(s) and (s[i].isdigit() or (s[i] in "+-" and not seen)):
        seen |= s[i].isdigit()
        i += 1
    rest = s[i:]
    return rest if rest[:1].isalpha() or rest[:1] == "%" else None


def _mult_bytes(s: str, kb_base: int) -> int | None:
    """Multiplier of a size suffix; None means a percentage. Mirrors __get_mult_bytes exactly."""
    suffix = s if len(s) < 2 else _suffix(s)
    if suffix is None:
        return 1
    c = suffix.lower()
    for sep in ":-,/":
        c = c.split(sep, 1)[0]
    # The full IEC spellings take the *opposite* base of kb_base; everything else takes kb_base.
    for power, iec, si in ((5, "pib", "p"), (4, "tib", "t"), (3, "gib", "g"), (2, "mib", "m"), (1, "kib", "k")):
        if c.startswith(iec):
            return (1024 if kb_base == 1000 else 1000) ** power
    for power, si in ((5, "p"), (4, "t"), (3, "g"), (2, "m"), (1, "k")):
        if c.startswith(si):
            return kb_base ** power
    if c.startswith("%"):
        return None
    return 1


def _mult_time(s: str, seconds: bool) -> int:
    suffix = _suffix(s)
    if suffix is None or not suffix[:1].isalpha():
        return 1_000_000 if seconds else 1
    c = suffix.lower()
    if c.startswith("us"):
        return 1
    if c.startswith("ms"):
        return 1000
    # exact matches only: "10sec" is 10 microseconds in fio 3.33, as its code says
    return {"s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}.get(c, 1)


def parse_size(text: str, kb_base: int = 1024):
    """One integer value with an optional size suffix (str_to_decimal, kilo=1): int or Percent."""
    if not text:
        raise ValueError("empty value")
    if text.startswith("("):
        raise ValueError("arithmetic expressions are not supported (fio built without CONFIG_ARITHMETIC)")
    base = 16 if ("0x" in text or "0X" in text) else 10
    value = _strtoll(text.split(",", 1)[0], base)
    mult = _mult_bytes(text, kb_base)
    if mult is None:
        return Percent(value)
    return (value * mult) & U64


def parse_time(text: str, seconds: bool = True) -> int:
    """A time value in microseconds; bare numbers are seconds when `seconds` (runtime, ramp_time)."""
    if not text:
        raise ValueError("empty value")
    if text.startswith("("):
        raise ValueError("arithmetic expressions are not supported")
    base = 16 if ("0x" in text or "0X" in text) else 10
    return (_strtoll(text.split(",", 1)[0], base) * _mult_time(text, seconds)) & U64


def split_rwt(text: str, ranges: bool = False) -> list[str]:
    """handle_option's split into read,write,trim parts: ',' first, else ':' then '-' (not for ranges)."""
    parts, rest = [], text
    while True:
        cut = rest.find(",")
        if cut >= 0 and cut == len(rest) - 1:     # a trailing comma is dropped
            rest, cut = rest[:-1], -1
        if cut < 0 and not ranges:
            cut = rest.find(":")
            if cut < 0:
                cut = rest.find("-")
        if cut < 0:
            parts.append(rest)
            return parts
        parts.append(rest[:cut])
        rest = rest[cut + 1:]


def parse_bool(text: str | None, bare_ok: bool) -> int:
    if text is None:
        if bare_ok:
            return 1
        raise ValueError("requires an argument")
    m = re.match(r"\s*(0[xX][0-9a-fA-F]+|\+?[0-9]+)", text)   # check_int: sscanf %u / %x
    if not m:
        raise ValueError("expects 0 or 1")
    value = int(m.group(1), 0) if m.group(1).lower().startswith("0x") else int(m.group(1))
    if value > 1:
        raise ValueError(f"max value out of range: {value} (1 max)")
    return value


def parse_range(text: str, kb_base: int, single_ok: bool = False) -> list[tuple[int, int]]:
    """lo-hi or lo:hi per direction (r,w,t); reversed ends are swapped. `single_ok`: one value is
    both ends (fio's filesize is a value pair, `filesize=16k` is 16k-16k; `bsrange=8k` fails)."""
    out = []
    for part in split_rwt(text, ranges=True):
        sep = "-" if "-" in part else ":"
        if sep not in part and not single_ok:
            raise ValueError("expects a range lo-hi")
        lo_text, _, hi_text = part.partition(sep) if sep in part else (part, "", part)
        lo, hi = parse_size(lo_text, kb_base), parse_size(hi_text, kb_base)
        if isinstance(lo, Percent) or isinstance(hi, Percent):
            raise ValueError("a range cannot be a percentage")
        out.append((min(lo, hi), max(lo, hi)))
    return out


def parse_bssplit(text: str, kb_base: int) -> list[list[tuple[int, float]]]:
    """bssplit=bs/pct:bs/pct[,write...]: blank percentages share the remainder evenly."""
    out = []
    for spec in text.split(","):
        entries, blanks = [], 0
        for item in filter(None, spec.split(":")):
            size_text, _, pct_text = item.partition("/")
            size = parse_size(size_text, kb_base)
            if isinstance(size, Percent) or size <= 0:
                raise ValueError(f"bad block size '{size_text}'")
            pct = float(pct_text) if pct_text.strip() else None
            blanks += pct is None
            entries.append([size, pct])
        if not entries or len(entries) > 64:
            raise ValueError("expects 1 to 64 bs/percentage entries")
        given = sum(p for _, p in entries if p is not None)
        if given > 100:
            raise ValueError("percentages add up to more than 100")
        for e in entries:
            if e[1] is None:
                e[1] = (100 - given) / blanks
        out.append([(s, p) for s, p in entries])
    return out


def parse_value(name: str, text: str | None, kb_base: int):
    """Parse one option's text into its typed value (see options._TYPES)."""
    kind = opts.TYPE[name]
    if kind in ("bool", "set"):
        return parse_bool(None if text is None else split_rwt(text)[0], bare_ok=kind == "set")
    if text is None:
        if kind == "str" and name != "bssplit":
            return ""
        raise ValueError("requires an argument")
    if kind == "int":
        if text.endswith("z"):
            # parse.c: the whole value ending in 'z' is a zone count for the zone-valued options
            if name not in _ZONE_VALUED:
                raise ValueError("'z' suffix isn't applicable")
            m = re.fullmatch(r"\s*\+?(\d+)z", text)
            if not m:
                raise ValueError(f"unexpected zone value '{text}'")
            return Zones(int(m.group(1)))
        parts = [parse_size(p, kb_base) for p in split_rwt(text)]
        return parts if name in _RWT else parts[0]
    if kind in ("time", "utime"):
        return parse_time(split_rwt(text)[0], seconds=kind == "time")
    if kind == "range":
        return parse_range(text, kb_base, single_ok=name == "filesize")
    if kind == "float":
        return [float(x) for x in text.split(":") if x]
    if name == "bssplit":
        return parse_bssplit(text, kb_base)
    if name in ("directory", "filename", "filename_format") and not text:
        raise ValueError("empty value")   # fio: "failed parsing", the job is dropped
    if name in ("directory", "filename_format"):
        return text   # kept as written, blanks included (fio stores these strings untouched)
    text = text.strip()
    if name == "kb_base":
        if text not in ("1000", "1024"):
            raise ValueError("expects 1000 or 1024")
        return int(text)
    return text


_ZONE_VALUED = {"size", "io_size", "offset", "offset_increment", "zoneskip"}

# options with separate read, write and trim values: parse_value returns [r, w, t] (missing ones
# take the last given, as fio's !more branch does)
_RWT = {"bs", "ba", "rate", "rate_min", "rate_iops", "rate_iops_min", "percentage_random"}


# ---------------------------------------------------------------------------------------------
# Stage 2: sections -> jobs

def fio_list(text: str) -> list[str]:
    """A colon list as options.c get_next_str splits it: '\\:' is a literal colon, a colon at the
    start of what is left is skipped."""
    out, rest = [], text
    while rest:
        start = i = 0
        while True:
            p = rest.find(":", i)
            if p < 0:
                out.append(rest[start:])
                rest = ""
                break
            if p == start:
                start = i = p + 1
                continue
            if rest[p - 1] != "\\":
                out.append(rest[start:p])
                rest = rest[p + 1:]
                break
            rest = rest[:p - 1] + rest[p:]
            i = p
    return out


def _filename_paths(value: str, directory: str | None) -> tuple:
    """options.c str_filename_cb + filesetup.c add_file: the files one `filename=` adds, as
    (path, directory entry) — each in the *first* directory entry set so far, joined with '/'."""
    root = None
    if directory:
        dirs = fio_list(directory)
        root = dirs[0] if dirs else ""
    out = []
    for name in fio_list(value.strip()):
        if not name:
            break
        out.append(((root + "/" if root is not None else "") + name, root or ""))
    return tuple(out)


def _apply(section: Section, values: dict, where: dict) -> None:
    """fio_options_parse for one section: its own table first (sorted by priority), then what is
    left against the options of the section's ioengine (fio loads the engine only then)."""
    known, left = [], []
    for o in section.options:
        name = opts.canonical(o.key)
        if name is None:
            left.append(o)
        else:
            known.append((name, o))
    known.sort(key=lambda item: -opts.PRIO.get(item[0], 0))   # stable, like fio's option sort
    if left:
        engine = _engine_name(values, known)
        for o in left:
            if o.key in opts.ENGINE_OPTIONS.get(engine, ()):
                known.append((o.key, o))
                continue
            owners = opts.engine_owners(o.key)
            if owners:
                raise JobFileError(f"option '{o.key}' in [{section.name}] belongs to ioengine {', '.join(owners)}, "
                                   f"not to ioengine={engine} (fio: Bad option)", o.file, o.line)
            raise JobFileError(f"unknown option '{o.key}' in [{section.name}]{opts.did_you_mean(o.key)}", o.file, o.line)
    for name, o in known:
        kb_base = values.get("kb_base", 1024)
        try:
            value = parse_value(name, o.value, kb_base) if name in opts.TYPE else (o.value or "")
        except (ValueError, OverflowError) as exc:
            raise JobFileError(f"bad value for '{o.key}' in [{section.name}]: {o.value!r}: {exc}", o.file, o.line) from None
        if name in _RWT:
            value = (value + [value[-1]] * 3)[:3]
        if name == "filename":
            values["@filenames"] = values.get("@filenames", ()) + _filename_paths(value, values.get("directory"))
        if name == "buffered":
            # fio: buffered is direct negated (one field, .neg): whichever is parsed last wins
            name, value = "direct", 1 - value
        values[name] = value
        where[name] = o


def _engine_name(values: dict, known: list) -> str:
    """The ioengine in effect for a section's engine options (its own, else inherited; fio's
    default psync). `libaio` and `external:/x.so` style names keep only the engine's name."""
    engine = values.get("ioengine", "psync")
    for name, o in known:
        if name == "ioengine" and o.value:
            engine = o.value.strip()
    return engine


def resolve(sections: list[Section]) -> list[Job]:
    """Jobs in file order, each with the [global] sections above it applied first."""
    global_values: dict = {}
    global_where: dict = {}
    jobs = []
    for section in sections:
        if section.is_global:
            _apply(section, global_values, global_where)
            continue
        job = Job(section.name, section.file, section.line, dict(global_values), dict(global_where))
        _apply(section, job.values, job.where)
        jobs.append(job)
    return jobs


def parse(path: str, text: str | None = None, env=None, keywords=None) -> list[Job]:
    """Parse a job file (or `text` standing for it) into jobs."""
    jobs = resolve(read_sections(path, text, env, keywords))
    if not jobs:
        raise JobFileError(f"no jobs in {path}")
    return jobs
