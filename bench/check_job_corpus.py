"""fio job files people have, through fio's parser and iodl's: which run, which are refused and why.

    python bench/check_job_corpus.py DIR [--env-file FILE] [--cli=--size=1G ...] [--no-run] [--md OUT.md] [--json OUT.json]

For every job file in DIR (include-only files, which have no [section], are skipped):
  1. fio's own parse: `fio --parse-only FILE` (exit status, its last line when it rejects);
  2. iodl's parse and plan: the job file derived as `iodl fio-compare` derives it, every job
     planned (the grammar, the options iodl honours, the files it would lay out or read);
  3. where 2 passed, a tiny run: `iodl fio-compare FILE --no-fio` in a scratch directory, at a
     --scale that keeps every clone's files to a few MiB, --runtime 1 --ramp-time 0.
Each file is checked twice: as written, and as its runner runs it: with the variables of --env-file
set (templates such as `bs=${BLOCK_SIZE}` expect them) and fio's command-line options --cli (the
runners' `fio --size=10G job.fio`: defaults for every job, the file's own values win). A file's verdict is "runs", "refused: REASON"
(iodl exits 2 naming the option), "fio rejects" (fio's parser refuses it too) or "error" (any other
exit: a defect). The list of files and their origin (DIR/sources.txt: `NAME repo@commit:path`) is
printed with the tally; the files themselves are not copied anywhere.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

JOB_SUFFIXES = (".fio", ".ini", ".job")
SCRATCH_BYTES = 8 << 20   # a tiny run's files per clone, at most (its --scale is chosen for it)
BIG_BYTES = 1 << 30       # all files above this at the chosen --scale: planned only, not run
RUN_TIMEOUT_S = 120


def job_files(directory: str) -> list[str]:
    out = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not name.endswith(JOB_SUFFIXES) or not os.path.isfile(path):
            continue
        with open(path, errors="replace") as f:
            if not any(line.lstrip().startswith("[") for line in f):
                continue   # an include file: no section of its own
        out.append(path)
    return out


def read_env(path: str | None) -> dict:
    env = {}
    if path:
        for line in open(path):
            key, eq, value = line.strip().partition("=")
            if eq and not key.startswith("#"):
                env[key.strip()] = value.strip()
    return env


def fio_parse(path: str, env: dict, cli: list[str]) -> tuple[bool, str]:
    proc = subprocess.run(["fio", "--parse-only", *cli, path], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(path))
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return proc.returncode == 0, (lines[-1] if lines else "")


_REASON = [
    (re.compile(r"unsupported value '([a-z_]+=[^' ]+)'"), "value {0}"),
    (re.compile(r"unsupported value '([a-z_]+)="), "value {0}="),
    (re.compile(r"unsupported option '([^']+)'"), "option {0}"),
    (re.compile(r"belongs to ioengine"), "option of another ioengine"),
    (re.compile(r"unknown option '([^']+)'"), "unknown option {0}"),
    (re.compile(r"write job without size="), "write job without a size of its own (size= absent or N%)"),
    (re.compile(r"without size="), "no size= (the runner passes --size)"),
    (re.compile(r"nothing to (read|write)"), "nothing to {0} at this scale"),
    (re.compile(r"with direct=1: not a multiple"), "direct=1 reads not sector-aligned (fio fails too)"),
    (re.compile(r"bad value for '([^']+)'"), "bad value for {0}"),
    (re.compile(r"does not exist|No such file|not found"), "files that must already exist"),
    (re.compile(r"device"), "a device"),
]


def reason_of(message: str) -> str:
    """A short class for a refusal: the option or value it names."""
    for pattern, fmt in _REASON:
        m = pattern.search(message)
        if m:
            return fmt.format(*m.groups())
    return message[:80]


def iodl_plan(path: str, env: dict, scratch: str, cli: list[str]) -> tuple[str, str, float | None]:
    """("ok", "", scale) or ("refused", message, None) from iodl's parse and plan (no I/O)."""
    from iodl.errors import IodlError
    from iodl.fio import compare
    from iodl.fio import run as iodl_run

    old = os.getcwd()
    try:
        os.chdir(os.path.dirname(path))
        options = [(c[2:].partition("=")[0], c.partition("=")[2] or None) for c in cli]
        extra = {"cli_options": options} if options else {}   # (an iodl without them: the "before" tally)
        _, jobs = compare.derive_jobfile(path, directory=scratch, env=env, **extra)
        taken: set = set()
        scale, floor, everything = 1.0, 0.0, 0
        for job in jobs:
            plan = iodl_run.plan_job(job, taken=taken)
            for clone in plan.files:
                total = sum(f.needed for f in clone)
                everything += total
                if total:
                    # a few MiB per clone, yet every file of every job at least 16 blocks (and holes) long
                    scale = min(scale, SCRATCH_BYTES / total)
                    floor = max(floor, 16 * (plan.max_bs + plan.seq_len) / max(1, min(f.io_size for f in clone)))
        scale = min(1.0, max(scale, floor))
        if everything * scale > BIG_BYTES:
            # no one --scale makes every job both small and 16 blocks long: planned, not run
            return "plans", f"not run: {everything * scale / 2**30:.1f} GiB of files at --scale {scale:.3g}", None
        return "ok", "", scale
    except IodlError as exc:
        return "refused", str(exc), None
    except Exception as exc:   # a defect: iodl must refuse in one line, never crash
        return "error", f"{type(exc).__name__}: {exc}", None
    finally:
        os.chdir(old)


def iodl_run(path: str, env: dict, scratch: str, scale: float, cli: list[str]) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "iodl", "fio-compare", path, "--no-fio", "--directory", scratch,
           "--runtime", "1", "--ramp-time", "0", *cli]
    if scale < 1:
        cmd += ["--scale", f"{scale:.6g}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S,
                              cwd=os.path.dirname(path))
    except subprocess.TimeoutExpired:
        return "error", f"no end within {RUN_TIMEOUT_S} s"
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if proc.returncode == 0:
        return "runs", ""
    if proc.returncode == 2:
        return "refused", last
    return "error", f"exit {proc.returncode}: {last}"


def check(path: str, env_vars: dict, cli: list[str], run: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not re.fullmatch(r"[A-Z_0-9]+", k) or k in
           ("PATH", "HOME", "LANG", "VIRTUAL_ENV", "PYTHONPATH", "TMPDIR")}
    env.update(env_vars)
    fio_ok, fio_msg = fio_parse(path, env, cli)
    scratch = tempfile.mkdtemp(prefix="iodl-corpus-")
    try:
        verdict, message, scale = iodl_plan(path, env, scratch, cli)
        if verdict == "ok" and run:
            verdict, message = iodl_run(path, env, scratch, scale, cli)
        elif verdict == "ok":
            verdict = "plans"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if verdict == "refused" and not fio_ok:
        verdict = "fio rejects"
    # the messages name files by the corpus's and the scratch directory's paths: neither is the reader's
    message = message.replace(os.path.dirname(path) + "/", "").replace(scratch, "DIR")
    return {"file": os.path.basename(path), "fio_parses": fio_ok, "fio_message": "" if fio_ok else fio_msg,
            "verdict": verdict, "message": message,
            "reason": reason_of(message) if verdict in ("refused", "fio rejects") else ""}


def tally(rows: list[dict]) -> dict:
    counts = collections.Counter(r["verdict"] for r in rows)
    reasons = collections.Counter(r["reason"] for r in rows if r["verdict"] == "refused")
    return {"files": len(rows), "fio_parses": sum(r["fio_parses"] for r in rows), **counts,
            "refused_by_reason": dict(reasons.most_common())}


def sources(directory: str) -> dict:
    out = {}
    path = os.path.join(directory, "sources.txt")
    if os.path.exists(path):
        for line in open(path):
            name, _, origin = line.strip().partition(" ")
            out[name] = origin
    return out


def markdown(results: dict, origin: dict) -> str:
    lines = []
    for mode, rows in results.items():
        t = tally(rows)
        lines += [f"### {mode}", "",
                  f"{t['files']} files; fio parses {t['fio_parses']}. iodl: **runs {t.get('runs', 0) + t.get('plans', 0)}** "
                  f"({t.get('plans', 0)} planned only: too big for a tiny run), "
                  f"refused {t.get('refused', 0)}, fio rejects too {t.get('fio rejects', 0)}, error {t.get('error', 0)}.", ""]
        if t["refused_by_reason"]:
            lines += ["| refused because | files |", "|---|---|"]
            lines += [f"| {reason} | {n} |" for reason, n in t["refused_by_reason"].items()]
            lines.append("")
        lines += ["| file | fio parses | iodl | reason / message |", "|---|---|---|---|"]
        for r in rows:
            why = r["reason"] or r["message"] or (r["fio_message"] if not r["fio_parses"] else "")
            lines.append(f"| {r['file']} | {'yes' if r['fio_parses'] else 'no'} | {r['verdict']} | {why.replace('|', '/')} |")
        lines.append("")
    lines += ["### Sources (repository@commit:path)", ""]
    lines += [f"- {name}: {where}" for name, where in sorted(origin.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--env-file", help="KEY=VALUE lines: the templates' variables")
    ap.add_argument("--cli", action="append", default=[], metavar="--OPTION=VALUE",
                    help="fio command-line option the runners pass (with --env-file's variables)")
    ap.add_argument("--no-run", action="store_true", help="parse and plan only (no tiny run)")
    ap.add_argument("--md", help="write the tally as markdown")
    ap.add_argument("--json", help="write every file's verdict as JSON")
    args = ap.parse_args()
    directory = os.path.abspath(args.directory)
    files = job_files(directory)
    modes = {"as written": ({}, [])}
    if args.env_file or args.cli:
        modes[f"as run: variables set, {' '.join(args.cli) or 'no options'}"] = (read_env(args.env_file), args.cli)
    results = {}
    for mode, (env_vars, cli) in modes.items():
        results[mode] = [check(p, env_vars, cli, run=not args.no_run) for p in files]
        t = tally(results[mode])
        print(f"{mode}: {json.dumps(t)}", flush=True)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(results, sources(directory)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
