"""A generated root's manifest (iodl-dataset.json): read once, bounded, checked before anything is
built from it; the workload a read of some roots runs, resolved from their manifests."""
from __future__ import annotations

import json
import os

from .. import limits
from ..errors import UsageError
from ..formats import FORMATS, format_for
from ..workload import builtin_names, load_workload, workload_from_dict
from .files import inside, open_regular
from .layout import MANIFEST, SCHEMA, SCHEMA_V1, folder_name

_MAX_MANIFEST = 1 << 30    # bytes: a manifest naming 10^7 shards is far smaller
_JSON_PEAK = 24            # memory per manifest byte json.loads may take (measured: a list of small dicts; ours ~4)
_SHAPE_KEYS = ("format", "samples_per_file", "sample_size", "sample_size_stdev", "row_group_size", "columns")


def read_manifest(root: str, older: bool = False) -> dict | None:
    """ROOT's manifest, or None for a root without one (a plain directory). A schema-1 manifest
    (an older iodl's) is refused in one line saying how to bring it up to date, unless `older`:
    generate reads its header to rewrite it (the shards kept)."""
    path = os.path.join(root, MANIFEST)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > _MAX_MANIFEST:
                raise UsageError(f"{path}: {size} bytes, larger than a dataset manifest can be ({_MAX_MANIFEST})")
            limits.check_memory(f"{path}: parsing a manifest of {size:,} bytes", _JSON_PEAK * size)
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable dataset manifest ({exc})") from None
    schema = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
    if schema == SCHEMA_V1 and not older:
        raise UsageError(f"{path}: written by an older iodl (schema {SCHEMA_V1!r}), which this one does not read: "
                         f"run `iodl generate` on {root} again with the options it was made with (its shards are "
                         "kept, the manifest rewritten)")
    if schema not in (SCHEMA, SCHEMA_V1):
        raise UsageError(f"{path}: not an iodl dataset manifest (schema {schema!r}, expected {SCHEMA!r})")
    return manifest


def read_manifests(roots: list[str]) -> dict[str, dict | None]:
    """The manifest of each root that is a directory (None: a plain one), keyed by its absolute
    path: read once, for workload_for_roots and then open_dataset."""
    return {os.path.abspath(root): read_manifest(root) for root in roots if os.path.isdir(root)}


def workload_for_roots(manifests: dict[str, dict | None], given=None):
    """The workload a read of these roots (read_manifests) runs: the one given (load_workload's),
    which must describe every iodl dataset among them (check_fits), or, when none is given, the one
    the datasets were generated for. With no manifest at all the default is `tiny`."""
    wl = given if given is not None else _generated_for([(r, m) for r, m in manifests.items() if m is not None])
    check_fits(wl, manifests)
    return wl


def check_fits(wl, manifests: dict[str, dict | None]) -> None:
    """Refused unless the workload describes every iodl dataset among these roots: a workload's
    demand sized against another's data is a wrong answer. Roots without a manifest (plain
    directories) put no constraint on it."""
    found = [(root, m) for root, m in manifests.items() if m is not None]
    mine = wl.to_dict()["dataset"]
    for root, m in found:
        spec = m.get("spec", {})
        differ = [k for k in _SHAPE_KEYS if k in spec and spec[k] != mine[k]]
        if differ:
            theirs = ", ".join(f"{k} {spec[k]}" for k in differ)
            ours = ", ".join(f"{k} {mine[k]}" for k in differ)
            raise UsageError(f"--workload {wl.name} does not describe the dataset under {root} (generated for "
                             f"{m.get('workload')!r}: {theirs}; {wl.name}: {ours}); leave --workload out to use "
                             "the dataset's")


def check_default_fits(wl, given: str) -> None:
    """A read given no root reads the default dataset (workload tiny's): refused, as a root's dataset
    would be (workload_for_roots), when the workload given describes another shape: its demand
    sized against tiny's files is a wrong answer."""
    mine, default = wl.to_dict()["dataset"], load_workload("tiny").to_dict()["dataset"]
    if any(mine[k] != default[k] for k in _SHAPE_KEYS):
        raise UsageError(f"--workload {given} reads a dataset of its own shape, not iodl's default one (workload "
                         f"tiny's): give its directory with --root DIR (`iodl generate --workload {given} --root DIR` "
                         "writes one), or --engine null to run the shape with no dataset")


def _generated_for(found: list[tuple[str, dict]]):
    """The workload the roots' datasets were generated for (`tiny` with none)."""
    names = {m.get("workload") for _r, m in found}
    if len(names) > 1:
        raise UsageError(f"the roots hold datasets of different workloads ({', '.join(sorted(map(str, names)))}): "
                         "give --workload")
    name = names.pop() if names else "tiny"
    if found and isinstance(found[0][1].get("workload_spec"), dict):
        # the workload as generate resolved it, so that a file given then need not be at hand now
        wl = workload_from_dict(found[0][1]["workload_spec"], os.path.join(found[0][0], MANIFEST))
    elif name in builtin_names():
        wl = load_workload(name)
    else:
        raise UsageError(f"{found[0][0]} was generated for workload {name!r}, which is not built in: "
                         "give its file with --workload FILE")
    if found:   # generate's --files/--copies/--format/--seed are the dataset's, not the file's
        m = found[0][1]
        spec = m.get("spec", {})
        wl = wl.with_overrides(files=spec.get("files"), copies=spec.get("copies"), format=m.get("format"),
                               seed=m.get("seed"))
    return wl


def spec_key(manifest_or_spec: dict) -> dict:
    """What must match for a re-run to continue an existing dataset (copies may change)."""
    return {k: manifest_or_spec[k] for k in ("format", "files", "samples_per_file", "sample_size", "sample_size_stdev")}


def form_of(manifest: dict):
    """A generated dataset's format, with its spec's layout keys (parquet's columns)."""
    return format_for({**manifest.get("spec", {}), "format": manifest["format"]})


def check_complete(root: str, manifest: dict) -> None:
    """A manifest a read may use: generation finished, its keys there, a format iodl writes."""
    mpath = os.path.join(root, MANIFEST)
    if manifest.get("status") != "complete":
        raise UsageError(f"dataset under {root} is incomplete (generation interrupted?): run iodl generate again "
                         "with the same options to finish it")
    manifest["files"], manifest["copies"], manifest["sample_sizes"]   # KeyError: unreadable
    if manifest.get("format") not in FORMATS:
        raise UsageError(f"{mpath}: format {manifest.get('format')!r} is not one iodl writes")
    files = manifest["files"]
    if isinstance(files, bool) or not isinstance(files, int) or files < 1:
        raise UsageError(f"{mpath}: 'files' must be a number of files")


def folder_dirs(root: str, manifest: dict) -> list[list[str]]:
    """The real path of every folder of every copy (copy, folder), each checked to resolve inside
    the root (a copy or folder that is a link out is refused); the counts bounded first."""
    mpath, files = os.path.join(root, MANIFEST), manifest["files"]
    copies = manifest["copies"]
    if not isinstance(copies, list) or not copies:
        raise UsageError(f"{mpath}: 'copies' must be a non-empty list")
    # bounded before anything is built from the lists (a 10^9-entry copies list must not hang us)
    if len(copies) > limits.MAX_COPIES or files * len(copies) > limits.MAX_SHARDS:
        raise UsageError(f"{mpath}: names {files:,} files x {len(copies):,} copies: at most "
                         f"{limits.MAX_COPIES:,} copies and {limits.MAX_SHARDS:,} shards")
    copy_dirs = [inside(root, c, mpath, "copies entry") for c in copies]
    folders = manifest.get("subfolders", 1)
    # more folders than files is DLIO's layout scaled down (file i in folder i % N: the rest stay empty, e.g.
    # retinanet's 3,404 num_subfolders_train over a few files); bounded as the shards are
    most = max(1, limits.MAX_SHARDS // len(copies))
    if isinstance(folders, bool) or not isinstance(folders, int) or not 1 <= folders <= most:
        raise UsageError(f"{mpath}: subfolders {folders!r} is not a number of folders from 1 to {most:,}")
    return [[inside(root, os.path.join(c, folder_name(k, folders)), mpath, "folder") if folders > 1 else d
             for k in range(folders)] for c, d in zip(copies, copy_dirs)]
