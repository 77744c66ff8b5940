"""Workload specs: TOML files, built in (iodl/workloads/*.toml) or given by path.

Every bad value is a UsageError that names the file, the line, the section and the key:
    resnet50.toml:7: [dataset] files: must be a positive integer, got -3
tomllib gives no line numbers for values, so the key's line is found by scanning the text.
"""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from . import limits
from .checkpoint import (DATATYPES, LAYOUTS, ZERO_STAGES, CheckpointModel, CheckpointSpec, ModelSpec, ParallelismSpec,
                         check_model)
from .errors import UsageError
from .formats import FORMATS as FORMAT_TABLE, PARQUET_DTYPES, format_for, parquet_record_bytes
from .records import record
from .units import parse_size

FORMATS = tuple(FORMAT_TABLE)   # the names, in the order formats.py lists them
ONE_SAMPLE_FORMATS = ("jpeg", "png")   # one sample per file (as DLIO documents them)
PATTERNS = ("train-sync", "infer-async", "storage-only", "validate")
SHUFFLES = ("none", "file", "sample", "file+sample")
ACCESS = ("blocks", "np.load", "whole")   # how a shard is read ([read] access)


@record(frozen=True)
class DatasetSpec:
    """A workload's [dataset]: the shards' format, number and samples."""
    format: str
    files: int
    samples_per_file: int
    sample_size: int          # bytes, mean
    sample_size_stdev: int    # bytes
    copies: int
    subfolders: int = 0       # folders per copy, file i in folder i % subfolders; 0: as few as keep <= 10,000 files each
    row_group_size: int = 1024  # parquet: rows per row group (DLIO's default)
    columns: tuple = ()       # parquet: ({name, dtype, size, read}, ...); none: one uint8 column (formats.Parquet)

    @property
    def samples(self) -> int:
        """Samples in one copy."""
        return self.files * self.samples_per_file

    @property
    def mean_bytes(self) -> int:
        """Expected payload bytes of all copies (framing and headers not counted)."""
        return self.samples * self.sample_size * self.copies


@record(frozen=True)
class TrainSpec:
    """A workload's [train]: the steps an accelerator takes."""
    batch_size: int
    compute_time_s: float     # emulated accelerator time per step
    epochs: int
    shuffle: str
    seed: int
    prefetch: int             # steps read ahead of compute (tf.data prefetch)
    shuffle_size: int = 1024  # samples in the sample-shuffle buffer (DLIO's reader.shuffle_size default)
    total_steps: int = 0      # most steps each epoch runs (DLIO train.total_training_steps, which DLIO counts per epoch); 0: no bound


@record(frozen=True)
class ReadSpec:
    """A workload's [read]: how its shards are read."""
    block_size: int           # bytes per request
    iodepth: int
    read_threads: int
    # what a DLIO file says of its reader (docs/dlio.md); iodl's own specs may give them too
    direct: bool = False                    # O_DIRECT reads (DLIO reader.odirect)
    transfer_size: int | None = None        # DLIO reader.transfer_size in bytes (0 is a value); None: not given
    computation_threads: int = 1            # DLIO reader.computation_threads
    skip_listing: bool = False              # derive the file names, list no directory (DLIO dataset.skip_listing)
    listing_validation_interval: int = 1000  # DLIO's: which derived names it checks (iodl stats every one)
    file_prefix: str = "img"                # with skip_listing: the files' prefix (DLIO dataset.file_prefix)
    # blocks: block_size requests; np.load: npz read as np.load reads it (DLIO's npz reader); whole: each
    # file in one request, as DLIO's odirect readers read (block_size: the largest file)
    access: str = "blocks"
    # where the data is: posix, a directory tree (--root DIR); object, a bucket (--root s3://..., DLIO's
    # storage_type s3) with the endpoint its file names (DLIO storage_options.endpoint_url), if any
    storage: str = "posix"
    endpoint: str | None = None


@record(frozen=True)
class MetricSpec:
    """A workload's [metric]: the AU a run must reach."""
    au_threshold: float


@record(frozen=True)
class Workload:
    """A workload as resolved: a built-in, a TOML file, or a DLIO/MLPerf YAML file."""
    name: str
    description: str
    pattern: str
    dataset: DatasetSpec | None   # None: a checkpoint-only workload ([model] and no [dataset])
    train: TrainSpec | None
    read: ReadSpec
    metric: MetricSpec
    source: str               # "builtin:NAME" or the file's path
    origin: str = ""          # where the numbers come from (e.g. an MLPerf Storage file, by repository and commit)
    model: ModelSpec | None = None              # [model]: what a checkpoint holds (iodl/checkpoint.py)
    parallelism: ParallelismSpec | None = None  # [parallelism]: how the model is split over ranks
    checkpoint: CheckpointSpec | None = None    # [checkpoint]: how many, how often
    no_dataset: str = ""      # checkpoint-only: why reading it is refused, with the file and line

    def to_dict(self) -> dict:
        """The resolved spec in plain JSON types, sizes in bytes (for result files and manifests)."""
        d = {
            "name": self.name,
            "description": self.description,
            "pattern": self.pattern,
            "source": self.source,
            "origin": self.origin,
            "dataset": ({**dataclasses.asdict(self.dataset), "columns": [dict(c) for c in self.dataset.columns]}
                        if self.dataset else None),
            "train": dataclasses.asdict(self.train) if self.train else None,
            "read": dataclasses.asdict(self.read),
            "metric": dataclasses.asdict(self.metric),
        }
        if self.model is not None:
            # keys left unset (0) are left out, so that the dict reads back as the same workload
            d.update(model={k: v for k, v in dataclasses.asdict(self.model).items()
                            if v != 0 and (k, v) != ("layout", "dlio")},
                     parallelism={k: v for k, v in dataclasses.asdict(self.parallelism).items()
                                  if v != 0 or k != "data"},
                     checkpoint=dataclasses.asdict(self.checkpoint))
        return d

    def checkpoint_model(self) -> CheckpointModel:
        """The model and its split, as iodl.checkpoint lays it out (UsageError if there is no [model])."""
        if self.model is None:
            raise UsageError(f"workload {self.name}: no [model]: nothing to checkpoint (the llama3-* built-ins "
                             "and unet3d have one)")
        return CheckpointModel(self.name, self.model, self.parallelism)

    def need_dataset(self) -> "Workload":
        """self, or a one-line UsageError for a checkpoint-only workload."""
        if self.dataset is None:
            raise UsageError(self.no_dataset or f"workload {self.name}: a checkpoint-only workload (no [dataset])")
        return self

    def with_overrides(self, files: int | None = None, copies: int | None = None, format: str | None = None,
                       seed: int | None = None, subfolders: int | None = None) -> "Workload":
        """The same workload with command-line overrides, checked like the file's values."""
        self.need_dataset()
        ds, tr = self.dataset, self.train
        if files is not None:
            ds = dataclasses.replace(ds, files=_check(_upto(_positive_int, limits.MAX_FILES), files, "--files"))
        if copies is not None:
            ds = dataclasses.replace(ds, copies=_check(_upto(_positive_int, limits.MAX_COPIES), copies, "--copies"))
        if format is not None:
            ds = dataclasses.replace(ds, format=_check(_enum(FORMATS), format, "--format"))
        if seed is not None:
            tr = dataclasses.replace(tr, seed=_check(_nonneg_int, seed, "--seed"))
        if subfolders is not None:
            ds = dataclasses.replace(ds, subfolders=_check(_upto(_nonneg_int, limits.MAX_FILES), subfolders,
                                                           "--subfolders"))
        _check_one_sample(ds, "--format" if format is not None else self.source)
        limits.check_dataset(ds, "with the command line's values")
        return dataclasses.replace(self, dataset=ds, train=tr)


def _check_one_sample(ds: DatasetSpec, where: str) -> None:
    if ds.format == "parquet":
        # every row of a parquet file has the columns' bytes: sizes do not spread
        if ds.sample_size_stdev:
            raise UsageError(f"{where}: parquet rows all have the columns' size: sample_size_stdev must be 0")
        if ds.columns and parquet_record_bytes(ds.columns) != ds.sample_size:
            raise UsageError(f"{where}: the columns make rows of {parquet_record_bytes(ds.columns):,} bytes, but "
                             f"sample_size is {ds.sample_size:,}: make them agree")
        try:   # a page is at most 2 GiB (vectorised, cached: the reader needs this layout anyway)
            format_for(ds).layout(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
    elif ds.columns:
        raise UsageError(f"{where}: columns describe a parquet dataset, not {ds.format}")
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


def _columns(v):
    """parquet columns: a list of tables {name, dtype, size (values per row, 1), read (True)}."""
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"must be a list of {{name, dtype, size, read}} tables, got {v!r}")
    out, names = [], set()
    for c in v:
        if not isinstance(c, dict) or set(c) - {"name", "dtype", "size", "read"} or "name" not in c or "dtype" not in c:
            raise ValueError(f"each column is a table with name, dtype and optionally size and read, got {c!r}")
        if c["dtype"] not in PARQUET_DTYPES:
            raise ValueError(f"column {c['name']!r}: dtype {c['dtype']!r}: one of {', '.join(PARQUET_DTYPES)}")
        if c["name"] in names:
            raise ValueError(f"column {c['name']!r} is given twice")
        names.add(c["name"])
        out.append({"name": _name(c["name"]), "dtype": c["dtype"],
                    "size": _positive_int(c.get("size", 1), limits.MAX_SAMPLE_SIZE), "read": _bool(c.get("read", True))})
    if out and not any(c["read"] for c in out):
        raise ValueError("no column has read = true: a step would read nothing")
    return tuple(out)


def _upto(checker, hi):
    """checker with an upper bound of its own (the schema's bounds live in iodl.limits)."""
    return lambda v: checker(v, hi)


def _fraction(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise ValueError(f"must be a number in (0, 1], got {v!r}")
    return float(v)


STORAGES = ("posix", "object")


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


def _optional(checker):
    """checker, or None: the value is not given (TOML has no null; a workload's to_dict() does)."""
    return lambda v: None if v is None else checker(v)


def _bool(v):
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def _int_choice(choices):
    def check(v):
        if isinstance(v, bool) or v not in choices:
            raise ValueError(f"must be one of {', '.join(map(str, choices))}; got {v!r}")
        return v
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
_UNSET = object()          # no default value: the dataclass's own default stands (0: not given)

MAX_MODEL_DIM = 1 << 24    # hidden, ffn, vocab sizes, heads
MAX_LAYERS = 1 << 20
MAX_MODEL_SIZE = 1 << 50   # bytes of a flat model (1 PiB)
MAX_CHECKPOINTS = 1_000_000

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
        "subfolders": (_upto(_nonneg_int, limits.MAX_FILES), 0),
        "row_group_size": (_upto(_positive_int, limits.MAX_SAMPLES_PER_FILE), 1024),
        "columns": (_columns, ()),
    },
    "train": {
        "batch_size": (_upto(_positive_int, limits.MAX_BATCH), _REQUIRED),
        "compute_time_s": (_nonneg_float, _REQUIRED),
        "epochs": (_upto(_positive_int, limits.MAX_EPOCHS), 1),
        "shuffle": (_enum(SHUFFLES), "file"),
        "seed": (_nonneg_int, 1),
        "prefetch": (_upto(_nonneg_int, limits.MAX_PREFETCH), 2),
        "shuffle_size": (_upto(_positive_int, limits.MAX_SHUFFLE_SIZE), 1024),
        "total_steps": (_upto(_nonneg_int, limits.MAX_STEPS), 0),
    },
    "read": {
        "block_size": (_size(True, limits.MAX_BLOCK_SIZE), "1MiB"),
        "iodepth": (_upto(_positive_int, limits.MAX_DEPTH), 8),
        "read_threads": (_upto(_positive_int, limits.MAX_THREADS), 4),
        "direct": (_bool, False),
        "transfer_size": (_optional(_size(False, limits.MAX_BLOCK_SIZE)), None),
        "computation_threads": (_upto(_positive_int, limits.MAX_THREADS), 1),
        "skip_listing": (_bool, False),
        "listing_validation_interval": (_upto(_nonneg_int, limits.MAX_FILES), 1000),
        "file_prefix": (_name, "img"),
        "access": (_enum(ACCESS), "blocks"),
        "storage": (_enum(STORAGES), "posix"),
        "endpoint": (_optional(_name), None),
    },
    "metric": {
        "au_threshold": (_fraction, 0.90),
    },
    # checkpoints (iodl/checkpoint.py, docs/checkpoint.md): DLIO's names
    "model": {
        "type": (_name, "transformer"),
        "num_layers": (_upto(_positive_int, MAX_LAYERS), _UNSET),
        "hidden_size": (_upto(_positive_int, MAX_MODEL_DIM), _UNSET),
        "ffn_hidden_size": (_upto(_positive_int, MAX_MODEL_DIM), _UNSET),
        "num_attention_heads": (_upto(_positive_int, MAX_MODEL_DIM), _UNSET),
        "num_kv_heads": (_upto(_positive_int, MAX_MODEL_DIM), _UNSET),
        "vocab_size": (_upto(_positive_int, MAX_MODEL_DIM), _UNSET),
        "model_datatype": (_enum(tuple(DATATYPES)), "fp16"),
        "optimizer_datatype": (_enum(tuple(DATATYPES)), "fp32"),
        "model_size": (_size(True, MAX_MODEL_SIZE), _UNSET),
        "layout": (_enum(LAYOUTS), "dlio"),
    },
    "parallelism": {
        "tensor": (_upto(_positive_int, limits.MAX_RANKS), 1),
        "pipeline": (_upto(_positive_int, limits.MAX_RANKS), 1),
        "data": (_upto(_positive_int, limits.MAX_RANKS), _UNSET),
        "zero_stage": (_int_choice(ZERO_STAGES), 0),
    },
    "checkpoint": {
        "writes": (_upto(_nonneg_int, MAX_CHECKPOINTS), 10),
        "reads": (_upto(_nonneg_int, MAX_CHECKPOINTS), 10),
        "fsync": (_bool, True),
        "time_between_s": (_nonneg_float, 0.0),
        "every_steps": (_upto(_nonneg_int, limits.MAX_STEPS), 0),
        "after_epoch": (_upto(_positive_int, limits.MAX_EPOCHS), 1),
        "every_epochs": (_upto(_positive_int, limits.MAX_EPOCHS), 1),
    },
}

_CLASSES = {"dataset": DatasetSpec, "train": TrainSpec, "read": ReadSpec, "metric": MetricSpec, "model": ModelSpec,
            "parallelism": ParallelismSpec, "checkpoint": CheckpointSpec}
# sections a checkpoint-only workload (one with [model]) may leave out; and those that need [model]
_DATASET_SECTIONS = ("dataset", "train")
_MODEL_SECTIONS = ("model", "parallelism", "checkpoint")


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
    # imported here: a read of an iodl dataset takes its workload from the manifest (JSON) and
    # parses no TOML, and tomllib's import was 3-4 ms of CPU a rank (x36 at 72 ranks on 2 cores)
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
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
    data.update({s: d[s] for s in _CLASSES if d.get(s) is not None})
    return _resolve(data, _Lines(""), label, d.get("source") if isinstance(d.get("source"), str) else None)


def _resolve(data: dict, lines: "_Lines", label: str, source: str | None) -> Workload:
    resolved: dict[str, dict] = {}
    has_model = "model" in data
    # a workload with [model] and neither [dataset] nor [train] only checkpoints
    checkpoint_only = has_model and not any(s in data for s in _DATASET_SECTIONS)
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
    if not has_model:
        for section in _MODEL_SECTIONS[1:]:
            if section in data:
                raise UsageError(f"{_where(label, lines.of(section))}: [{section}]: describes a checkpoint of the "
                                 "model: give [model] too")
    # Missing keys after wrong ones: a file's own mistakes are reported first.
    for section, keys in SCHEMA.items():
        out = resolved[section]
        if (checkpoint_only and section in _DATASET_SECTIONS) or (not has_model and section in _MODEL_SECTIONS):
            continue
        for key, (checker, default) in list(keys.items()):
            if key not in out:
                if default is _REQUIRED:
                    raise UsageError(f"{_where(label, lines.of(section))}: [{section}] {key}: required key is missing")
                if default is not _UNSET:
                    out[key] = checker(default)
    w = resolved.pop("workload")
    parts = {s: _CLASSES[s](**v) for s, v in resolved.items()
             if not ((checkpoint_only and s in _DATASET_SECTIONS) or (not has_model and s in _MODEL_SECTIONS))}
    no_dataset = ""
    if checkpoint_only:
        parts.update(dataset=None, train=None)
        given = w["name"] if (source or "").startswith("builtin:") else label
        no_dataset = (f"{_where(label, lines.of('model'))}: workload {w['name']} is checkpoint-only ([model] and no "
                      f"[dataset]): there is no dataset to read, generate or size; plan its checkpoint with "
                      f"`iodl checkpoint --workload {given} --plan`")
    else:
        _check_one_sample(parts["dataset"], f"{_where(label, lines.of('dataset', 'samples_per_file'))}: [dataset]")
        limits.check_dataset(parts["dataset"], label)
    if has_model:
        why = check_model(parts["model"], parts["parallelism"])
        if why:
            raise UsageError(f"{_where(label, lines.of('model'))}: [model]: {why}")
        par, ck = parts["parallelism"], parts["checkpoint"]
        if par.model_parallel * (par.data or 1) > limits.MAX_RANKS:
            raise UsageError(f"{_where(label, lines.of('parallelism'))}: [parallelism]: tensor x pipeline x data = "
                             f"{par.model_parallel * (par.data or 1):,} ranks: at most {limits.MAX_RANKS:,}")
        if ck.writes > 0 and ck.reads > ck.writes:
            raise UsageError(f"{_where(label, lines.of('checkpoint', 'reads'))}: [checkpoint] reads: {ck.reads} is "
                             f"more than the {ck.writes} checkpoints written (writes = 0 reads an earlier run's)")
    return Workload(name=w["name"], description=w["description"], pattern=w["pattern"], origin=w["origin"],
                    source=source or label, no_dataset=no_dataset, **parts)


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


def load_workload(name_or_path: str, need_dataset: bool = True, dlio_version: str | None = None) -> Workload:
    """A built-in workload by name ("resnet50"), a TOML file by path, or a DLIO / MLPerf Storage
    YAML file (iodl/dlio.py; dlio_version: the DLIO that read it, by default the one its keys
    say). A checkpoint-only workload (no dataset) is a one-line UsageError unless need_dataset is
    False (iodl checkpoint, iodl workloads)."""
    wl = _load_workload(name_or_path, dlio_version)
    return wl.need_dataset() if need_dataset else wl


def looks_like_yaml(path: str) -> bool:
    """A DLIO / MLPerf Storage workload file (iodl/dlio.py reads it), not one of iodl's TOML specs."""
    return path.lower().endswith((".yaml", ".yml"))


def _load_workload(name_or_path: str, dlio_version: str | None = None) -> Workload:
    if looks_like_yaml(name_or_path):
        # DLIO's reader (PyYAML and DLIO's key table) is imported only for a YAML file: a rank
        # that runs a TOML or built-in workload never pays for it (iodl/cmd/read.py: start-up)
        from . import dlio

        return dlio.load(name_or_path, dlio_version, workload_from_dict)
    if dlio_version is not None:
        raise UsageError(f"--dlio-version: {name_or_path} is not a DLIO YAML file")
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
