"""`iodl sweep`: run a step pattern at several rank counts (one mpiexec per point, see
iodl/sweep.py for why) and find how many accelerators the storage supports."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time

from .. import sweep
from ..comm import launched_by_mpi
from ..data.manifest import read_manifests, workload_for_roots
from ..errors import IodlError, UsageError
from ..limits import check_read_options
from ..outputs import write_result
from ..patterns import PATTERNS
from ..progress import Clock, wrap
from ..sizing import workload_demand_MBps
from ..workload import load_workload
from . import read

# the sweep's own options (each takes one value); every other option is passed on to `iodl read`
OWN_OPTIONS = ("--ranks", "--threshold", "--out", "--keep", "--mpiexec", "--timeout")


def own_options_first(argv: list[str]) -> list[str]:
    """`iodl sweep --ranks 1,2 --engine null` as `iodl sweep --ranks 1,2 -- --engine null`.

    Read options may follow the sweep's own without `--`: the sweep's options (OWN_OPTIONS, -h)
    are kept before a `--` and everything else goes after it, in order. Without `--` an --out is
    the sweep's own; after `--` everything is a read option, as before.
    """
    try:
        at = argv.index("sweep") + 1
    except ValueError:
        return argv
    head, rest = argv[:at], argv[at:]
    own, read = [], []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            read += rest[i + 1:]
            break
        if a in ("-h", "--help") or a.split("=", 1)[0] in OWN_OPTIONS:
            own.append(a)
            if a in OWN_OPTIONS and i + 1 < len(rest):
                own.append(rest[i + 1])
                i += 1
        else:
            read.append(a)
        i += 1
    return head + own + (["--", *read] if read else [])


def add_arguments(p) -> None:
    p.usage = ("%(prog)s --ranks K,K,... [--threshold AU] [--out FILE] [--keep DIR]\n"
               "                  [--mpiexec PATH] [--timeout S] [--] [READ_OPTION ...]")
    p.epilog = ("example: iodl sweep --ranks 1,2,4,8 --out sweep.json -- --workload resnet50 --root /mnt/a "
                "--direct --steps 50   (docs/sweep.md)")
    # Numbers are taken as text and checked by iodl.sweep: a bad value is then one error line,
    # not argparse's usage block.
    p.add_argument("--ranks", metavar="K,K,...", help="rank counts to run, ascending, e.g. 1,2,4,8 (required)")
    p.add_argument("--threshold", metavar="AU",
                   help="AU a rank count must reach to count as supported, in (0, 1] "
                        "(default: the workload's au_threshold, 0.90 as MLPerf Storage unless the workload says otherwise)")
    p.add_argument("--out", metavar="FILE", help="write the sweep JSON (schema iodl.sweep/1) here")
    p.add_argument("--keep", metavar="DIR",
                   help="keep each point's result file as DIR/ranks-K.json (default: a temporary directory, removed)")
    p.add_argument("--mpiexec", metavar="PATH", help="launcher (default: mpiexec next to this Python, else on PATH)")
    p.add_argument("--timeout", metavar="S", help="seconds a point may run before it is stopped and the sweep fails (default: none)")
    p.add_argument("read_args", nargs=argparse.REMAINDER, metavar="-- READ_OPTION",
                   help="every option that is not the sweep's own (or everything after --) goes to every point's `iodl read` (pattern train-sync unless --pattern "
                        "infer-async; not --out, which the sweep sets)")


class _ReadParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"read options after --: {message}")


def _read_options(argv: list[str]):
    """Check the pass-through options with `iodl read`'s own parser now, before any launch."""
    argv = list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    parser = _ReadParser(prog="iodl read", add_help=False)
    read.add_arguments(parser)
    opts = parser.parse_args(argv)

    check_read_options(opts)   # a bad number is refused now, not by every point
    if opts.out:
        raise UsageError("--out after -- is set by the sweep for each point (--keep DIR keeps the point files; "
                         "the sweep's own --out goes before --)")
    if getattr(opts, "csv", None):
        raise UsageError("--csv after --: every point would write the same file (--keep DIR keeps each point's "
                         "result file instead)")
    if opts.pattern is None:
        argv += ["--pattern", "train-sync"]   # AU needs a step pattern; the workload's may be storage-only
        opts.pattern = "train-sync"

    steps = [name for name, p in PATTERNS.items() if p.accelerators]   # the patterns that measure AU
    if opts.pattern not in steps:
        raise UsageError(f"--pattern {opts.pattern}: a sweep measures accelerator utilisation, which only the step "
                         f"patterns have ({', '.join(steps)})")
    return argv, opts


def _check_out(path: str | None) -> None:
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise UsageError(f"--out {path}: {parent} is not a writable directory")


def _workload_as_run(spec: dict, opts) -> dict:
    """The workload spec with the read options that change demand applied: `iodl read` writes
    the file's spec, but --batch-size and --compute-time are what the points actually ran."""
    spec = {**spec, "train": dict(spec["train"])}
    if opts.batch_size is not None:
        spec["train"]["batch_size"] = opts.batch_size
    if opts.compute_time is not None:
        spec["train"]["compute_time_s"] = opts.compute_time
    return spec


def _load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run(comm, args) -> int:
    if launched_by_mpi():
        raise UsageError("iodl sweep starts mpiexec itself for every rank count: run it without mpirun/mpiexec")
    ranks = sweep.parse_ranks(args.ranks)
    timeout = sweep.parse_timeout(args.timeout)
    read_argv, opts = _read_options(args.read_args)
    # the one each point's `iodl read` will run
    wl = workload_for_roots(read_manifests(opts.root), load_workload(opts.workload) if opts.workload else None)
    threshold = sweep.parse_threshold(args.threshold, wl.metric.au_threshold)
    mpiexec = sweep.find_mpiexec(args.mpiexec)
    _check_out(args.out)
    keep = sweep.check_keep_dir(args.keep, ranks) if args.keep else None
    workdir = keep or tempfile.mkdtemp(prefix="iodl-sweep-")
    points, first, failure, interrupted = _run_points(ranks, mpiexec, read_argv, workdir, keep, timeout)
    spec = _workload_as_run(first["workload"] if first else wl.to_dict(), opts)
    engine = first["engine"] if first else opts.engine
    doc = sweep.document(opts.pattern, spec, engine, threshold, points, workload_demand_MBps(spec))
    if points:
        sweep.print_sweep(doc)
    if args.out:
        write_result(doc, args.out)   # atomic: tmp file + os.replace
    if interrupted is not None:
        err = IodlError(f"interrupted during the {interrupted}-rank point; {len(points)} point(s) done"
                        + (f", written to {args.out}" if args.out else ""))
        err.exit_code = 130
        raise err
    if failure:
        raise IodlError(failure + (f" ({len(points)} point(s) done, written to {args.out})" if args.out else ""))
    return 0


def _run_points(ranks: list[int], mpiexec: str, read_argv: list[str], workdir: str, keep, timeout):
    """Each rank count's `iodl read` in turn until one fails or the user stops the sweep:
    (points, the first point's result, why it failed or None, the rank count interrupted or None)."""
    # SIGTERM ends the sweep as Ctrl-C does: stop the running point, keep what was done
    def on_term(*_):
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_term)
    points, first, failure, interrupted, k = [], None, None, None, None
    last_s = 0.0
    try:
        for i, k in enumerate(ranks):
            out = os.path.join(workdir, sweep.result_name(k))
            print(f"sweep: point {i + 1}/{len(ranks)}: {k} rank(s) ...", flush=True)
            start = time.monotonic()
            # on a terminal a clock ticks while the point runs (its own output is in its result file)
            with Clock(f"sweep: point {i + 1}/{len(ranks)}, {k} rank(s)", last_s):
                done = sweep.run_point(sweep.point_command(mpiexec, k, read_argv, out), timeout)
            last_s = time.monotonic() - start
            result = _load(out)
            failure = _point_failure(k, done, result, timeout)
            if failure:
                break
            point = sweep.point_from_result(k, result, out if keep else None, done.exit_code)
            points.append(point)
            first = first or result
            print(wrap(f"sweep: {k} rank(s): AU {100 * point.au:.1f}%, {point.samples_per_s:,.1f} samples/s, "
                       f"{'-' if point.storage_bandwidth_MBps is None else f'{point.storage_bandwidth_MBps:,.1f}'} "
                       f"storage MB/s ({last_s:.1f} s)"), flush=True)
    except KeyboardInterrupt:
        interrupted = k  # the point that was running (run_point has stopped it)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return points, first, failure, interrupted


def _point_failure(k: int, done, result, timeout) -> str | None:
    """Why the k-rank point gives no point of the sweep, or None."""
    why = done.error_line or "no error output"
    if done.timed_out:
        return f"the {k}-rank point ran past --timeout {timeout:g} s and was stopped" + (
            f": {done.error_line}" if done.error_line else "")
    if done.exit_code not in (0, sweep.PARTIAL_EXIT):
        return f"the {k}-rank point failed (mpiexec exit {done.exit_code}): {why}"
    if result is None:
        return f"the {k}-rank point wrote no result file (mpiexec exit {done.exit_code}): {why}"
    return None
