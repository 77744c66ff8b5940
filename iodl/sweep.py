"""Sweep: run one step pattern at several rank counts and find how many accelerators the storage
supports (docs/numbers.md: the largest rank count whose AU stays >= the threshold).

Launch decision: one `mpiexec -n K python -m iodl read ... --out DIR/ranks-K.json` per point,
not one big MPI job split into sub-communicators. Each point is then exactly the job a user
would run by hand: its own start-up, an MPI_COMM_WORLD of size K, its own node barrier and
result file. In one big job the ranks not taking part in a point would still sit on the node
(polling, holding memory), which on a 2-core box distorts the very numbers being measured. The
price is one MPI start-up per point (a second or two), paid outside the measured window.

This module holds the logic (validation, launching a point, the verdict, the JSON document and
the table); iodl/cmd/sweep.py is the command line around it.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict

from . import limits
from .records import record
from .sizing import meets, storage_MBps
from .errors import IodlError, UsageError

from .report import make_console, print_table
from .result import SWEEP as SCHEMA
LAUNCH = "mpiexec per point"
PARTIAL_EXIT = 130                               # `iodl read` stopped by a signal: result written, partial
STOP_GRACE_S = 15.0                              # after SIGINT, time a point gets to write its partial result


def parse_ranks(text: str | None) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: positive integers, ascending, no repeats."""
    if not text or not text.strip():
        raise UsageError("--ranks is required: rank counts to run, ascending, e.g. --ranks 1,2,4,8")
    ranks = []
    for part in text.split(","):
        try:
            k = int(part.strip())
        except ValueError:
            raise UsageError(f"--ranks {text}: {part.strip()!r} is not an integer") from None
        if not 1 <= k <= limits.MAX_RANKS:
            raise UsageError(f"--ranks: {k}: a rank count must be positive, at most {limits.MAX_RANKS:,}")
        ranks.append(k)
    if any(b <= a for a, b in zip(ranks, ranks[1:])):
        raise UsageError(f"--ranks {text}: rank counts must be ascending with no repeats")
    return ranks


def parse_threshold(text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        t = float(text)
    except ValueError:
        raise UsageError(f"--threshold {text}: not a number") from None
    if not 0 < t <= 1:  # also rejects nan
        raise UsageError(f"--threshold {text}: must be in (0, 1], e.g. 0.90 for 90% AU")
    return t


def parse_timeout(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        s = float(text)
    except ValueError:
        raise UsageError(f"--timeout {text}: not a number of seconds") from None
    if not 0 < s <= limits.MAX_SECONDS:   # also refuses nan and inf
        raise UsageError(f"--timeout {text}: must be a positive number of seconds, at most {limits.MAX_SECONDS:g}")
    return s


def find_mpiexec(explicit: str | None) -> str:
    """--mpiexec, else the one next to this Python (the mpich wheel puts it in the venv's bin),
    else mpiexec on PATH."""
    if explicit:
        path = shutil.which(explicit) if os.sep not in explicit else explicit
        if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise UsageError(f"--mpiexec {explicit}: not an executable file")
        return os.path.abspath(path)
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if not found:
        raise UsageError("no mpiexec next to this Python or on PATH: pip install 'iodl[mpi]', or give --mpiexec PATH")
    return found


def result_name(ranks: int) -> str:
    return f"ranks-{ranks}.json"


def check_keep_dir(directory: str, ranks: list[int]) -> str:
    """Create --keep DIR; refuse to run if a point's result file is already there (not ours)."""
    directory = os.path.abspath(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--keep {directory}: {exc.strerror}") from None
    taken = [result_name(k) for k in ranks if os.path.lexists(os.path.join(directory, result_name(k)))]
    if taken:
        raise UsageError(f"--keep {directory}: {', '.join(taken)} already there; iodl sweep does not "
                         f"overwrite files it did not write (remove them or choose another directory)")
    return directory


# Python 3.10 has no -P: drop the working directory (sys.path[0] is '' under -c) before importing iodl
_BOOT_310 = "import sys; del sys.path[0]; from iodl.cli import main; sys.exit(main())"


def python_iodl() -> list[str]:
    """The argv that runs iodl in a child Python without the working directory first on sys.path.

    `python -m iodl` puts the working directory first: run from the folder holding a clone named
    iodl (an editable install), that folder shadows the package ("cannot import name
    '__version__' from 'iodl' (unknown location)"). -P (3.11+) leaves it out; on 3.10 a -c
    stub removes it before the import.
    """
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "iodl"]
    return [sys.executable, "-c", _BOOT_310]


def point_command(mpiexec: str, ranks: int, read_args: list[str], out: str) -> list[str]:
    return [mpiexec, "-n", str(ranks), *python_iodl(), "read", *read_args, "--out", out]


@record
class PointRun:
    exit_code: int
    error_line: str      # the line of its stderr that says what went wrong ("" when nothing)
    timed_out: bool = False


def _error_line(text: str) -> str:
    """iodl's own `iodl: error` line when there is one (the launcher often adds lines after it,
    e.g. MPICH's 'application called MPI_Abort'), else the last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("iodl: error")]
    return (ours or lines or [""])[-1]


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop a running point the way a user would: SIGINT (mpiexec forwards it; ranks finish the
    step, write a partial result and exit), then SIGTERM, then SIGKILL of its process group."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0)):
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            break  # a second Ctrl-C: the user does not want to wait
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group we made for it (start_new_session)
        except ProcessLookupError:
            pass
        proc.wait()


def run_point(cmd: list[str], timeout: float | None = None, grace_s: float = STOP_GRACE_S) -> PointRun:
    """Run one point's mpiexec to the end. KeyboardInterrupt stops it and is re-raised.

    mpiexec gets its own session so that a Ctrl-C in the terminal reaches the sweep alone, which
    then stops the point once, in order; its output is the point's own business (its table is
    in the result file), only stderr is kept to say why it failed.
    """
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc, grace_s)
        except KeyboardInterrupt:
            _stop(proc, grace_s)
            raise
        err.seek(0)
        line = _error_line(err.read().decode(errors="replace"))
    return PointRun(proc.returncode, line, timed_out)


@record
class Point:
    """One rank count's outcome (the keys of `points` in the sweep JSON)."""
    ranks: int
    au: float
    samples_per_s: float
    bandwidth_MBps: float
    storage_bandwidth_MBps: float | None   # None: the cache's share was not measurable
    result: str | None     # the point's iodl.result/1 file; None when it lived in a removed temp dir
    exit_code: int
    mlperf_au: float | None = None   # MLPerf Storage's AU of the point (train.mlperf); None: not defined


def point_from_result(ranks: int, result: dict, path: str | None, exit_code: int) -> Point:
    train = result.get("train")
    if not train:
        raise IodlError(f"the {ranks}-rank point's result has no accelerator view (train block)")
    total = result["total"]
    mlperf = train.get("mlperf")
    return Point(ranks=ranks, au=float(train["au"]), samples_per_s=float(train["samples_per_s"]),
                 bandwidth_MBps=float(total["bandwidth_MBps"]),
                 storage_bandwidth_MBps=storage_MBps(total),
                 result=path, exit_code=exit_code, mlperf_au=float(mlperf["au"]) if mlperf else None)


def accelerators_supported(points: list[Point], threshold: float, mlperf: bool = False) -> int:
    """Largest rank count whose AU >= threshold (docs/numbers.md), 0 when none reached it; by
    MLPerf Storage's AU (train.mlperf.au) when asked, points without one not counting."""
    if mlperf:
        return max((p.ranks for p in points if p.mlperf_au is not None and meets(p.mlperf_au, threshold)), default=0)
    return max((p.ranks for p in points if meets(p.au, threshold)), default=0)


def scaling(points: list[Point]) -> list[tuple[float, float]]:
    """(linear reference samples/s, efficiency) per point. The reference scales the smallest
    point's rate per rank: what perfectly parallel storage would give at this rank count."""
    if not points:
        return []
    base = points[0].samples_per_s / points[0].ranks
    return [(base * p.ranks, p.samples_per_s / (base * p.ranks) if base > 0 else 0.0) for p in points]


def percent(t: float) -> str:
    return f"{100 * t:.4g}%"


def verdict(points: list[Point], threshold: float) -> list[str]:
    """The answer in one line, then any caveat on its own line."""
    n = accelerators_supported(points, threshold)
    rule = f"largest rank count with AU >= {percent(threshold)}"
    if not points:
        return [f"accelerators supported: unknown (no point finished; {rule})"]
    if n == 0:
        first = points[0]
        return [f"accelerators supported: 0 ({rule}: even the first point, {first.ranks} rank(s), "
                f"reached only AU {percent(first.au)})"]
    lines = [f"accelerators supported: {n} ({rule})"]
    below = [p.ranks for p in points if p.ranks < n and not meets(p.au, threshold)]
    if below:
        lines.append(f"note: AU was below {percent(threshold)} at {', '.join(map(str, below))} rank(s) yet above at "
                     f"{n}: a noisy run or uneven storage; rerun to confirm")
    if n == points[-1].ranks:
        lines.append(f"note: every point up to {n} rank(s) met the threshold: the storage may feed more; "
                     f"sweep higher rank counts to find its limit")
    return lines


def document(pattern: str, workload: dict, engine: str, threshold: float, points: list[Point],
             demand_MBps: float) -> dict:
    """The sweep JSON (schema iodl.sweep/1)."""
    return {
        "schema": SCHEMA,
        "pattern": pattern,
        "workload": workload,
        "engine": engine,
        "au_threshold": threshold,
        "launch": LAUNCH,
        "points": [asdict(p) for p in points],
        "accelerators_supported": accelerators_supported(points, threshold),
        "accelerators_supported_mlperf": accelerators_supported(points, threshold, mlperf=True),
        # JSON has no infinity: a workload with no compute time demands "unbounded", written null
        "demand_MBps_per_accelerator": demand_MBps if math.isfinite(demand_MBps) else None,
    }


def print_sweep(doc: dict, console=None) -> None:
    console = console or make_console()
    points = [Point(**p) for p in doc["points"]]
    threshold = doc["au_threshold"]
    title = (f"iodl sweep: {doc['pattern']}, workload {doc['workload'].get('name', '?')}, "
             f"engine {doc['engine']}, {doc['launch']}")
    columns = [(c, "right") for c in ("ranks", "AU", "samples/s", "linear samples/s", "efficiency", "MB/s",
                                      "storage MB/s")]
    rows = []
    for p, (linear, eff) in zip(points, scaling(points)):
        au = f"{100 * p.au:.1f}%"
        au = f"[green]{au}[/]" if meets(p.au, threshold) else f"[red]{au}[/]"
        ranks = str(p.ranks) + (" (partial)" if p.exit_code == PARTIAL_EXIT else "")
        rows.append([ranks, au, f"{p.samples_per_s:,.1f}", f"{linear:,.1f}", f"{100 * eff:.1f}%",
                     f"{p.bandwidth_MBps:,.1f}",
                     "-" if p.storage_bandwidth_MBps is None else f"{p.storage_bandwidth_MBps:,.1f}"])
    print_table(console, title, columns, rows)
    demand = doc["demand_MBps_per_accelerator"]
    if demand is not None:
        console.print(f"demand per accelerator at 100% AU: {demand:,.2f} MB/s (batch x mean sample size / compute time)")
    for line in verdict(points, threshold):
        console.print(line, highlight=False)
    if any(p.mlperf_au is not None for p in points):
        aus = ", ".join(f"{p.ranks}: {percent(p.mlperf_au)}" for p in points if p.mlperf_au is not None)
        console.print(f"by MLPerf Storage's AU (total compute / total time, first step left out; {aus}): "
                      f"{accelerators_supported(points, threshold, mlperf=True)}", highlight=False)
