"""Workload specs: TOML files, built in (iodl/workloads/*.toml) or given by path.

Every bad value is a UsageError that names the file, the line, the section and the key:
    resnet50.toml:7: [dataset] files: must be a positive integer, got -3
tomllib gives no line numbers for values, so the key's line is found by scanning the text.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from . import limits
from .errors import UsageError
from .units import parse_size

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

FORMATS = ("tfrecord", "hdf5", "npz", "raw", "npy", "jpeg", "png")
ONE_SAMPLE_FORMATS = ("jpeg", "png")   # one sample per file (as DLIO documents them)
PATTERNS = ("train-sync", "infer-async", "storage-only", "validate")
SHUFFLES = ("none", "file", "sample", "file+sample")


@dataclass(frozen=True)
class DatasetSpec:
    format: str
    files: int
    samples_per_file: int
    sample_size: int          # bytes, mean
    sample_size_stdev: int    # bytes
    copies: int

    @property
    def samples(self) -> int:
        """Samples in one copy."""
        return self.files * self.samples_per_file

    @property
    def mean_bytes(self) -> int:
        """Expected payload bytes of all copies (framing and headers not counted)."""
        return self.samples * self.sample_size * self.copies


@dataclass(frozen=True)
class TrainSpec:
    batch_size: int
    compute_time_s: float     # emulated accelerator time per step
    epochs: int
    shuffle: str
    seed: int
    prefetch: int             # steps read ahead of compute (tf.data prefetch)
    shuffle_size: int = 1024  # samples in the sample-shuffle buffer (DLIO's reader.shuffle_size default)


@dataclass(frozen=True)
class ReadSpec:
    block_size: int           # bytes per request
    iodepth: int
    read_threads: int


@dataclass(frozen=True)
class MetricSpec:
    au_threshold: float


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    pattern: str
    dataset: DatasetSpec
    train: TrainSpec
    read: ReadSpec
    metric: MetricSpec
    source: str               # "builtin:NAME" or the file's path
    origin: str = ""          # where the numbers come from (e.g. an MLPerf Storage file, by repository and commit)

    def to_dict(self) -> dict:
        """The resolved spec in plain JSON types, sizes in bytes (for result files and manifests)."""
        return {
            "name": self.name,
            "description": self.description,
            "pattern": self.pattern,
            "source": self.source,
            "origin": self.origin,
            "dataset": dataclasses.asdict(self.dataset),
            "train": dataclasses.asdict(self.train),
            "read": dataclasses.asdict(self.read),
            "metric": dataclasses.asdict(self.metric),
        }

    def with_overrides(self, files: int | None = None, copies: int | None = None, format: str | None = None,
                       seed: int | None = None) -> "Workload":
        """The same workload with command-line overrides, checked like the file's values."""
        ds, tr = self.dataset, self.train
        if files is not None:
            ds = dataclasses.replace(ds, files=_check(_upto(_positive_int, limits.MAX_FILES), files, "--files"))
        if copies is not None:
            ds = dataclasses.replace(ds, copies=_check(_upto(_positive_int, limits.MAX_COPIES), copies, "--copies"))
        if format is not None:
            ds = dataclasses.replace(ds, format=_check(_enum(FORMATS), format, "--format"))
        if seed is not None:
            tr = dataclasses.replace(tr, seed=_check(_nonneg_int, seed, "--seed"))
        _check_one_sample(ds, "--format" if format is not None else self.source)
        limits.check_dataset(ds, "with the command line's values")
        return dataclasses.replace(self, dataset=ds, train=tr)


def _check_one_sample(ds: DatasetSpec, where: str) -> None:
    if ds.format in ONE_SAMPLE_FORMATS and ds.samples_per_file != 1:
        raise UsageError(f"{where}: format {ds.format} holds one sample per file (as in DLIO), but samples_per_file "
                         f"is {ds.samples_per_file}: set samples_per_file = 1")


# ---- value checkers: each returns the resolved value or raises ValueError(reason) ----

def _positive_int(v, hi=limits.MAX_STEPS):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"must be a positive integer, got {v!r}")
    if v > hi:
        raise ValueError(f"{v!r}: at most {hi:,}")
    return v


def _nonneg_int(v, hi=limits.MAX_SEED):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"must be a non-negative integer, got {v!r}")
    if v > hi:
        raise ValueError(f"{v!r}: at most {hi:,}")
    return v


def _nonneg_float(v, hi=limits.MAX_SECONDS):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
        raise ValueError(f"must be a non-negative number, got {v!r}")
    if v > hi:
        raise ValueError(f"{v!r}: at most {hi:g}")
    return float(v)


def _upto(checker, hi):
    """checker with an upper bound of its own (the schema's bounds live in iodl.limits)."""
    return lambda v: checker(v, hi)


def _fraction(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise ValueError(f"must be a number in (0, 1], got {v!r}")
    return float(v)


def _text(v):
    if not isinstance(v, str):
        raise ValueError(f"must be a string, got {v!r}")
    return v


def _name(v):
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"must be a non-empty string, got {v!r}")
    return v


def _size(positive: bool, hi: int):
    def check(v):
        try:
            n = parse_size(v, "size")
        except UsageError as exc:
            raise ValueError(str(exc).removeprefix("size: ")) from None
        if positive and n == 0:
            raise ValueError(f"must be a positive size, got {v!r}")
        if n > hi:
            raise ValueError(f"{v!r}: at most {hi:,} bytes")
        return n
    return check


def _enum(choices):
    def check(v):
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}; got {v!r}")
        return v
    return check


def _check(checker, value, what):
    try:
        return checker(value)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


_REQUIRED = object()

# section -> key -> (checker, default). Documented key by key in workloads/README.md.
SCHEMA = {
    "workload": {
        "name": (_name, _REQUIRED),
        "description": (_text, ""),
        "pattern": (_enum(PATTERNS), "train-sync"),
        "origin": (_text, ""),
    },
    "dataset": {
        "format": (_enum(FORMATS), _REQUIRED),
        "files": (_upto(_positive_int, limits.MAX_FILES), _REQUIRED),
        "samples_per_file": (_upto(_positive_int, limits.MAX_SAMPLES_PER_FILE), _REQUIRED),
        "sample_size": (_size(True, limits.MAX_SAMPLE_SIZE), _REQUIRED),
        "sample_size_stdev": (_size(False, limits.MAX_SAMPLE_SIZE), 0),
        "copies": (_upto(_positive_int, limits.MAX_COPIES), 1),
    },
    "train": {
        "batch_size": (_upto(_positive_int, limits.MAX_BATCH), _REQUIRED),
        "compute_time_s": (_nonneg_float, _REQUIRED),
        "epochs": (_upto(_positive_int, limits.MAX_EPOCHS), 1),
        "shuffle": (_enum(SHUFFLES), "file"),
        "seed": (_nonneg_int, 1),
        "prefetch": (_upto(_nonneg_int, limits.MAX_PREFETCH), 2),
        "shuffle_size": (_upto(_positive_int, limits.MAX_SHUFFLE_SIZE), 1024),
    },
    "read": {
        "block_size": (_size(True, limits.MAX_BLOCK_SIZE), "1MiB"),
        "iodepth": (_upto(_positive_int, limits.MAX_DEPTH), 8),
        "read_threads": (_upto(_positive_int, limits.MAX_THREADS), 4),
    },
    "metric": {
        "au_threshold": (_fraction, 0.90),
    },
}

_CLASSES = {"dataset": DatasetSpec, "train": TrainSpec, "read": ReadSpec, "metric": MetricSpec}


# ---- finding lines: tomllib reports none for values ----

_HEADER_RE = re.compile(r"""^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$""")
_KEY_RE = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*=""")


def _unquote(part: str) -> str:
    part = part.strip()
    return part[1:-1] if len(part) >= 2 and part[0] == part[-1] and part[0] in "\"'" else part


class _Lines:
    """(section, key) -> line number, found by a section-aware scan of the TOML text."""

    def __init__(self, text: str):
        self.keys: dict[tuple[str, str], int] = {}
        self.sections: dict[str, int] = {}
        section = ""
        in_multiline = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_multiline:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            m = _HEADER_RE.match(line)
            if m:
                section = ".".join(_unquote(p) for p in m.group(1).split("."))
                self.sections.setdefault(section, number)
                continue
            m = _KEY_RE.match(line)
            if m:
                parts = [_unquote(p) for p in m.group(1).split(".")]
                full = ".".join([section, *parts[:-1]]) if section else ".".join(parts[:-1])
                self.keys.setdefault((full, parts[-1]), number)
                if not section and len(parts) > 1:
                    self.sections.setdefault(parts[0], number)
                rest = line[m.end():]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote

    def of(self, section: str, key: str | None = None) -> int | None:
        if key is not None and (section, key) in self.keys:
            return self.keys[(section, key)]
        return self.sections.get(section)


def _where(label: str, line: int | None) -> str:
    return f"{label}:{line}" if line else label


def parse_workload(text: str, label: str, source: str | None = None) -> Workload:
    """A Workload from TOML text; label names the file in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        where = _where(label, int(m.group(1)) if m else None)
        reason = re.sub(r" *\(at line.*?\)", "", msg)
        raise UsageError(f"{where}: invalid TOML: {reason}") from None
    return _resolve(data, _Lines(text), label, source)


def workload_from_dict(d: dict, label: str) -> Workload:
    """A Workload from its to_dict() form (a dataset manifest keeps it), checked like a file."""
    if not isinstance(d, dict):
        raise UsageError(f"{label}: not a workload")
    data = {"workload": {k: d[k] for k in ("name", "description", "pattern", "origin") if k in d}}
    data.update({s: d[s] for s in _CLASSES if s in d})
    return _resolve(data, _Lines(""), label, d.get("source") if isinstance(d.get("source"), str) else None)


def _resolve(data: dict, lines: "_Lines", label: str, source: str | None) -> Workload:
    resolved: dict[str, dict] = {}
    for section, value in data.items():
        if section not in SCHEMA:
            hint = _close(section, SCHEMA)
            extra = f" (did you mean [{hint[0]}]?)" if hint else f" (known: {', '.join(SCHEMA)})"
            raise UsageError(f"{_where(label, lines.of(section))}: [{section}]: unknown section{extra}")
        if not isinstance(value, dict):
            raise UsageError(f"{_where(label, lines.of('', section))}: {section}: must be a table [{section}]")
    for section, keys in SCHEMA.items():
        table = data.get(section, {})
        for key in table:
            if key not in keys:
                hint = _close(key, keys)
                extra = f" (did you mean '{hint[0]}'?)" if hint else f" (known: {', '.join(keys)})"
                raise UsageError(f"{_where(label, lines.of(section, key))}: [{section}] {key}: unknown key{extra}")
        out = resolved[section] = {}
        for key, (checker, default) in keys.items():
            if key in table:
                try:
                    out[key] = checker(table[key])
                except ValueError as exc:
                    raise UsageError(f"{_where(label, lines.of(section, key))}: [{section}] {key}: {exc}") from None
    # Missing keys after wrong ones: a file's own mistakes are reported first.
    for section, keys in SCHEMA.items():
        out = resolved[section]
        for key, (checker, default) in keys.items():
            if key not in out:
                if default is _REQUIRED:
                    raise UsageError(f"{_where(label, lines.of(section))}: [{section}] {key}: required key is missing")
                out[key] = checker(default)
    w = resolved.pop("workload")
    parts = {s: _CLASSES[s](**v) for s, v in resolved.items()}
    _check_one_sample(parts["dataset"], f"{_where(label, lines.of('dataset', 'samples_per_file'))}: [dataset]")
    limits.check_dataset(parts["dataset"], label)
    return Workload(name=w["name"], description=w["description"], pattern=w["pattern"], origin=w["origin"],
                    source=source or label, **parts)


# The built-in specs are plain files in the package directory. Reading them by path rather than
# through importlib.resources spares every rank importing zipfile (~1 MB each at 72 ranks).
BUILTIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads")


def _close(word, choices) -> list[str]:
    """The did-you-mean hint (difflib is imported here: only a bad file needs it)."""
    import difflib

    return difflib.get_close_matches(word, choices, n=1)


def builtin_names() -> list[str]:
    """Names of the workloads shipped inside the package."""
    return sorted(n[:-5] for n in os.listdir(BUILTIN_DIR) if n.endswith(".toml"))


def load_workload(name_or_path: str) -> Workload:
    """A built-in workload by name ("resnet50"), a TOML file by path, or a DLIO / MLPerf Storage
    YAML file (iodl/dlio.py)."""
    from . import dlio

    if dlio.looks_like_yaml(name_or_path):
        return dlio.load(name_or_path)
    looks_like_path = os.sep in name_or_path or name_or_path.endswith(".toml") or os.path.exists(name_or_path)
    if not looks_like_path:
        resource = os.path.join(BUILTIN_DIR, name_or_path + ".toml")
        if not os.path.isfile(resource):
            raise UsageError(f"unknown workload {name_or_path!r} (built-in: {', '.join(builtin_names())}; "
                             "or give the path of a .toml file)")
        with open(resource, encoding="utf-8") as f:
            return parse_workload(f.read(), name_or_path + ".toml", f"builtin:{name_or_path}")
    try:
        with open(name_or_path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise UsageError(f"workload {name_or_path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{name_or_path}: invalid TOML: not UTF-8 text") from None
    return parse_workload(text, name_or_path, os.path.abspath(name_or_path))
