#!/usr/bin/env python3
"""Every MLPerf Storage configuration as submitted, read by iodl as the DLIO that ran it read it.

Walks a checkout of a results repository (mlcommons/storage_results_v0.5, _v1.0, _v3.0: git clone
it; nothing of it is kept here) for the resolved config every run saved (`.hydra/config.yaml`,
`configs/config.yaml`, `dlio_config/config.yaml`), with the `overrides.yaml` and DLIO's
`summary.json` beside it, and for each:

- training file: `iodl read --workload FILE --engine null --steps 3 --out R.json` (one rank), and
  the result's `workload` block must carry the file's numbers: files, samples per file, record
  bytes, batch, compute time, epochs, read threads, prefetch, O_DIRECT (reader.odirect, direct_fs),
  transfer_size, computation_threads, total_training_steps, skip_listing. Files that differ only in
  paths are run once (`--run-all` runs each);
- checkpoint file (`workflow.train: False, checkpoint: True` to the DLIO of v2.0 and later):
  `iodl checkpoint --plan --json` at the summary's `num_accelerators` ranks must give its
  `checkpoint_size_GB` (DLIO: the sum of the ranks' bytes / 1024^3, printed with its decimals);
- object storage (`storage_type: s3`): a training file runs as above and its result says
  `[read] storage: object`; a checkpoint file plans as above;
- a data-generation file (v0.5/v1.0 `train: False`, or `generate_data` without training) and
  `storage_type: aistore` must be refused in one line (exit 2).

Any other refusal or a number that differs is a mismatch. Prints a markdown report (counts, then
each refusal reason and mismatch) and exits 1 when there is a mismatch.

Usage: python bench/check_published_configs.py ROOT --round v1.0 [--dlio-version 1.0] [--run-all]
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIG_DIRS = (".hydra", "configs", "dlio_config")
GiB = 2 ** 30
# the round's DLIO when the file's keys cannot tell (v0.5's files read the keys v1.0's do)
ROUND_VERSION = {"v0.5": "0.5", "v1.0": "1.0"}


def configs(root: str):
    """(path of a resolved config.yaml) of every run under root: a config folder's config.yaml
    whose top level is `workload:` (submitters' copies of DLIO's own code and its hydra defaults
    files are left out)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if "code" not in d and d != ".git")
        if os.path.basename(dirpath) in CONFIG_DIRS and "config.yaml" in filenames:
            path = os.path.join(dirpath, "config.yaml")
            with open(path, encoding="utf-8", errors="replace") as f:
                if any(line.startswith("workload:") for line in f):
                    yield path


def _get(d: dict, dotted: str, default=None):
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return default
        d = d[part]
    return d


def _summary(path: str) -> dict | None:
    """DLIO's summary.json of the run (beside the config folder), if the submission kept it."""
    run = os.path.dirname(os.path.dirname(path))
    for candidate in (os.path.join(run, "summary.json"),):
        if os.path.isfile(candidate):
            try:
                with open(candidate) as f:
                    return json.load(f)
            except ValueError:
                return None
    return None


def expected(wl: dict, version: str | None = None) -> dict:
    """The numbers a training file gives, as iodl's resolved workload names them (None: not given,
    DLIO's default applies and is not checked here)."""
    ds, rd, tr = wl.get("dataset", {}) or {}, wl.get("reader", {}) or wl.get("data_reader", {}) or {}, \
        wl.get("train", {}) or {}
    st = wl.get("storage", {}) or {}
    record = ds.get("record_length_bytes", ds.get("record_length"))
    opts = st.get("storage_options") or {}
    direct = None
    if st.get("storage_type") == "direct_fs" or opts.get("uri_scheme") == "direct" \
            or "direct" in (opts.get("storage_library"), st.get("storage_library")):
        direct = True
    elif "odirect" in rd:
        direct = bool(rd["odirect"])
    # a file for DLIO 2.0.0 and before (v0.5, v1.0): its keys say so (docs/dlio.md)
    legacy = version in ("0.5", "1.0") or "record_length" in ds or "model_size" in (wl.get("checkpoint") or {})
    steps = tr.get("total_training_steps")
    return {
        ("dataset", "files"): ds.get("num_files_train"),
        ("dataset", "samples_per_file"): ds.get("num_samples_per_file"),
        ("dataset", "sample_size"): round(record) if isinstance(record, (int, float)) else None,
        ("train", "batch_size"): rd.get("batch_size"),
        ("train", "compute_time_s"): tr.get("computation_time") if isinstance(tr.get("computation_time"),
                                                                               (int, float)) else None,
        ("train", "epochs"): tr.get("epochs"),
        ("read", "read_threads"): rd.get("read_threads"),
        ("train", "prefetch"): _prefetch(rd),
        # DLIO 2.0.0 and before do not read odirect (they read buffered)
        ("read", "direct"): (False if legacy else direct),
        ("read", "transfer_size"): rd.get("transfer_size"),
        # DLIO 0.5 read its misspelling computatation_threads, not computation_threads
        ("read", "computation_threads"): rd.get("computatation_threads" if version == "0.5" else
                                                "computation_threads"),
        ("train", "total_steps"): (max(steps, 0) if isinstance(steps, int) else None),
        ("read", "skip_listing"): (None if legacy or "skip_listing" not in ds else
                                   str(ds["skip_listing"]).strip().lower() in ("true", "1", "yes", "on")),
        ("read", "storage"): "object" if st.get("storage_type") == "s3" else "posix",
    }


def _prefetch(rd: dict):
    """Batches DLIO reads ahead: tf.data's prefetch(prefetch_size); with the pytorch loader,
    read_threads workers of prefetch_factor = ceil(prefetch_size / read_threads) each (2 when
    that is 0), none without workers (data_loader/torch_data_loader.py)."""
    size = rd.get("prefetch_size")
    if rd.get("data_loader") != "pytorch":
        return size
    threads, size = rd.get("read_threads", 1), 2 if size is None else size
    return threads * (-(-size // threads) or 2) if threads else 0


def _iodl(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "iodl", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


def _shape_key(text: str) -> str:
    """A file's content without its paths and host names: files that differ only there run once."""
    doc = yaml.safe_load(text)

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items()
                    if k not in ("data_folder", "checkpoint_folder", "storage_root", "folder", "hydra")}
        return d
    return hashlib.sha1(json.dumps(strip(doc), sort_keys=True, default=str).encode()).hexdigest()


def check_one(path: str, version: str | None, cache: dict, run_all: bool) -> tuple[str, str]:
    """(outcome, detail): outcome one of run, planned, refused-datagen, refused-object, mismatch."""
    text = open(path, encoding="utf-8").read()
    doc = yaml.safe_load(text) or {}
    wl = doc.get("workload", doc)
    flow = wl.get("workflow", {}) or {}
    st = wl.get("storage", {}) or {}
    legacy = version in ("0.5", "1.0") or "record_length" in (wl.get("dataset") or {}) \
        or "model_size" in (wl.get("checkpoint") or {})
    train = flow.get("train", True)
    checkpoint = flow.get("checkpoint", False)
    datagen = not train and (legacy or not checkpoint)
    vargs = ["--dlio-version", version] if version else []
    if st.get("storage_type") == "aistore":
        proc = _iodl("checkpoint" if not train and checkpoint else "read", "--workload", path,
                     *(["--plan", "--json", *vargs] if not train and checkpoint else ["--engine", "null", "--steps", "3"]))
        return _refused(proc, "refused-object", "object storage")
    if datagen:
        proc = _iodl("read", "--workload", path, "--engine", "null", "--steps", "3")
        return _refused(proc, "refused-datagen", "data-generation")
    if not train:
        return _plan(path, vargs, _summary(path))
    key = _shape_key(text)
    if key in cache and not run_all:
        outcome, detail = cache[key]
        return outcome, detail + " (same shape as a file run before)"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        proc = _iodl("read", "--workload", path, "--engine", "null", "--steps", "3", "--out", out)
        if proc.returncode != 0:
            cache[key] = ("mismatch", f"iodl read exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            return cache[key]
        with open(out) as f:
            result = json.load(f)
    got = result["workload"]
    bad = []
    for (section, name), want in expected(wl, version).items():
        if want is None:
            continue
        have = (got.get(section) or {}).get(name)
        if isinstance(want, float) or isinstance(have, float):
            ok = have is not None and abs(have - want) <= 1e-9 * max(1, abs(want))
        else:
            ok = have == want
        if not ok:
            bad.append(f"[{section}] {name}: file {want!r}, result {have!r}")
    if result.get("train", {}).get("steps") != 3:
        bad.append(f"steps run: {result.get('train', {}).get('steps')!r}, not 3")
    detail = "numbers carried"
    if checkpoint and not bad:
        why = _training_checkpoint(path, wl, vargs, legacy and (version or "1.0"))
        bad += [why] if why.startswith("checkpoint:") else []
        detail += f"; {why}"
    cache[key] = ("mismatch", "; ".join(bad)) if bad else ("run", detail)
    return cache[key]


# DLIO 2.0.0 and before (MLPerf Storage v1.0): rank 0 writes one layer file beside the model, from
# DLIO's default num_layers 1 and layer_parameters [17371, 24740228] (int8 elements)
DLIO_1_0_LAYER_BYTES = 17371 + 24740228


def _training_checkpoint(path: str, wl: dict, vargs: list, legacy: str | bool) -> str:
    """The in-training checkpoint a training file with workflow.checkpoint plans, against what
    the DLIO of its round wrote: v0.5 checkpoint.model_size bytes; v1.0 that and the layer file;
    later DLIO model.model_size_bytes, or its default 10,240 B (model.model_size is read by none)."""
    proc = _iodl("checkpoint", "--workload", path, "--plan", "--json", "--ranks", "8", *vargs)
    if proc.returncode != 0:
        return f"checkpoint: iodl checkpoint --plan exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
    plan = json.loads(proc.stdout)
    size = _get(wl, "checkpoint.model_size", 10240) if legacy else \
        _get(wl, "model.model_size_bytes", 10240) if isinstance(wl.get("model"), dict) else 10240
    want = size + (DLIO_1_0_LAYER_BYTES if legacy == "1.0" else 0)
    if plan["total_bytes"] != want or any(plan["per_rank_bytes"][1:]):
        return f"checkpoint: DLIO {legacy or '3.0'} wrote {want:,} B from rank 0; iodl plans {plan['per_rank_bytes']}"
    return f"in-training checkpoint {want:,} B from rank 0 (DLIO {legacy or '3.0'})"


def _refused(proc, outcome: str, what: str) -> tuple[str, str]:
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr:
        return outcome, re.sub(r"^iodl: error: [^:]*:\d+: ", "", lines[0])
    return "mismatch", f"{what} file not refused in one line (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"


def _plan(path: str, vargs: list, summary: dict | None) -> tuple[str, str]:
    ranks = (summary or {}).get("num_accelerators")
    args = ["checkpoint", "--workload", path, "--plan", "--json", *vargs]
    if ranks:
        args += ["--ranks", str(ranks)]
    proc = _iodl(*args)
    if proc.returncode != 0:
        return "mismatch", f"iodl checkpoint --plan exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    plan = json.loads(proc.stdout)
    want = (summary or {}).get("metric", {}).get("checkpoint_size_GB")
    if want is None:
        return "planned", f"{plan['ranks']} ranks, {plan['total_bytes'] / GiB:,.4f} GiB (no summary.json figure)"
    decimals = len(str(want).split(".")[1]) if "." in str(want) else 0
    have = plan["total_bytes"] / GiB
    if abs(have - want) > 0.5 * 10 ** -decimals + 1e-9 or (ranks and plan["ranks"] != ranks):
        return "mismatch", f"checkpoint_size_GB {want} at {ranks} ranks; iodl plans {have:.6f} GiB at {plan['ranks']}"
    return "planned", f"checkpoint_size_GB {want} at {plan['ranks']} ranks: iodl {have:.6f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="a results repository checkout (or any tree of run folders)")
    ap.add_argument("--round", required=True, help="v0.5, v1.0, v3.0: names the report, and v0.5's DLIO")
    ap.add_argument("--dlio-version", help="the DLIO that read the files (default: the round's for v0.5 and "
                                           "v1.0, else what each file's keys say)")
    ap.add_argument("--run-all", action="store_true", help="run every training file, not one per shape")
    ap.add_argument("--origin", default="", help="repository@commit of the root, for the report")
    a = ap.parse_args(argv)
    version = a.dlio_version or ROUND_VERSION.get(a.round)
    counts, details = collections.Counter(), collections.defaultdict(collections.Counter)
    mismatches = []
    paths = list(configs(a.root))
    for path in paths:
        outcome, detail = check_one(path, version, {} if a.run_all else _CACHE, a.run_all)
        counts[outcome] += 1
        details[outcome][re.sub(r" \(same shape as a file run before\)$", "", detail)] += 1
        if outcome == "mismatch":
            mismatches.append((os.path.relpath(path, a.root), detail))
    print(f"## {a.round}" + (f" ({a.origin})" if a.origin else ""))
    print()
    print(f"{len(paths)} resolved configs; DLIO version: {version or 'as each file' + chr(39) + 's keys say'}")
    print()
    print("| outcome | configs |")
    print("|---|---|")
    for outcome in ("run", "planned", "refused-datagen", "refused-object", "mismatch"):
        print(f"| {outcome} | {counts[outcome]} |")
    for outcome in ("run", "planned", "refused-datagen", "refused-object"):
        if details[outcome]:
            print(f"\n{outcome}:")
            for detail, n in details[outcome].most_common():
                print(f"- {n} x {detail}")
    if mismatches:
        print("\nmismatches:")
        for path, detail in mismatches:
            print(f"- `{path}`: {detail}")
    return 1 if mismatches else 0


_CACHE: dict = {}

if __name__ == "__main__":
    sys.exit(main())
