"""`iodl read`: replay a read pattern against one or more dataset roots (the run: iodl/runner.py)."""
from __future__ import annotations

from .. import engines
from ..limits import check_range, cli_float, cli_int
from ..patterns import PATTERNS
from ..runner import run_once
from ..s3root import add_s3_arguments
from ..stop import HeldStops

MAX_RUNS = 100       # --runs: MLPerf's procedure is 6; a long series of consecutive runs may be cut later


def add_arguments(p, patterns: dict = PATTERNS) -> None:
    # numbers are bounded by runspec.resolve: a bad one is one line, no usage block
    p.add_argument("--pattern", choices=list(patterns), help="the schedule (default: the workload's, e.g. train-sync)")
    p.add_argument("--workload", metavar="NAME|FILE",
                   help="built-in workload name, TOML file, or DLIO/MLPerf YAML file (default: the one the dataset was generated for, else tiny)")
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="dataset root (repeatable: ranks map to roots round-robin), or s3://BUCKET/PREFIX (docs/s3.md); "
                        "default: the tiny dataset in the data directory (a workload of another shape needs --root)")
    add_s3_arguments(p)
    p.add_argument("--engine", default="auto", help=f"{engines.choices()} (default auto: see docs/engines.md)")
    p.add_argument("--direct", action="store_true", help="open with O_DIRECT (bypass the page cache)")
    p.add_argument("--iodepth", type=cli_int, help="requests in flight per rank (default: the workload's)")
    p.add_argument("--block-size", metavar="SIZE", help="request size, e.g. 1MiB (default: the workload's)")
    p.add_argument("--duration", type=cli_float, metavar="S",
                   help="measured seconds (default 10 for storage-only and infer-async; train-sync runs its epochs)")
    p.add_argument("--ramp", type=cli_float, default=2.0, metavar="S",
                   help="storage-only and infer-async: unmeasured seconds before the measured window (default 2)")
    p.add_argument("--steps", type=cli_int, metavar="N", help="train-sync/infer-async: stop after N steps")
    p.add_argument("--epochs", type=cli_int, metavar="N", help="train-sync/infer-async: epochs (default: the workload's)")
    p.add_argument("--sampling", choices=("epoch", "random"), default="epoch",
                   help="epoch: a seeded shard permutation per epoch split over ranks; random: each reader picks shards at random")
    p.add_argument("--shuffle", choices=("none", "file", "sample", "file+sample"),
                   help="what each epoch shuffles (default: the workload's): the shard order, the samples "
                        "(in a buffer of the workload's shuffle_size samples; indexed_binary: each rank's whole "
                        "part), both, or nothing")
    p.add_argument("--batch-size", type=cli_int, metavar="N", help="samples per step (default: the workload's)")
    p.add_argument("--compute-time", type=cli_float, metavar="S", help="emulated compute per step (default: the workload's)")
    p.add_argument("--prefetch", type=cli_int, metavar="N", help="batches read ahead of compute (default: the workload's; 0 = off)")
    p.add_argument("--read-threads", type=cli_int, metavar="N",
                   help="train-sync/infer-async: threads that open each rank's shards ahead of its reader (default: "
                        "the workload's read_threads; 0 = the reader opens each file itself)")
    p.add_argument("--seed", type=cli_int, help="seed of the shard order (default: the workload's)")
    p.add_argument("--delay-us", type=cli_float, default=0.0, metavar="US", help="null engine: latency of each request")
    p.add_argument("--delay-shared", action="store_true",
                   help="null engine: the ranks of a node take turns on one emulated device, each request holding it --delay-us")
    p.add_argument("--drop-caches", nargs="?", const="start", choices=("start", "epoch"),
                   help="empty each node's page cache before the run (start) or also before every epoch (epoch); needs root")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="rank 0's live per-mount MB/s (auto: on a terminal; on without one: a line per second)")
    p.add_argument("--checkpoint-root", action="append", default=[], metavar="DIR|s3://BUCKET/PREFIX",
                   help="train-sync: write the workload's in-training checkpoints ([checkpoint] every_steps, or "
                        "after_epoch and every_epochs) here, a directory or a bucket (--endpoint); the steps wait "
                        "for them (docs/checkpoint.md)")
    p.add_argument("--detail", action="store_true",
                   help="print every table: latency percentiles, opens, queue depth, page cache per node, per rank")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here (with --runs: every run's and the aggregate)")
    p.add_argument("--csv", metavar="FILE", help="write the per-second time series here (one row per second per mount)")
    p.add_argument("--runs", type=cli_int, default=1, metavar="N",
                   help="run N times back to back, as MLPerf Storage's submitters do (6: the first a warm-up, "
                        "the other 5 averaged; the seed + 1 each run; docs/mlperf.md); each run is reported, then "
                        "the aggregate")
    p.add_argument("--dlio-dir", metavar="DIR",
                   help="train-sync: also write what DLIO writes for each run (summary.json, <rank>_output.json, "
                        "dlio_config/) in mlpstorage's layout, DIR/training/<model>/run/<YYYYMMDD_HHmmss>/")


def run(comm, args, patterns: dict = PATTERNS) -> int:
    """One run of one of `patterns`, or --runs N back to back: each reported as it ends, then MLPerf's aggregate."""
    check_range("--runs", args.runs, 1, MAX_RUNS, integer=True)   # the same on every rank: no I/O yet
    # Rank 0 alone prints and writes; its side (rich, the tables, DLIO's files, the progress line) is
    # imported here, by no other rank: at 72 ranks on 2 cores every module a rank imports costs ~36x
    # its import time at start-up. Here, before the run: an import fails (EMFILE) once a run has
    # used its descriptors.
    if comm.rank == 0:
        with HeldStops():   # a stop that comes meanwhile is taken after, not lost in importlib
            from ..read_report import ReadReport
    out = ReadReport(args) if comm.rank == 0 else None
    if args.runs == 1:
        return run_once(comm, args, patterns, out)[0]
    results, dlio = [], []
    worst = 0
    for index in range(args.runs):
        code, result, summary = run_once(comm, args, patterns, out, index)
        worst = max(worst, code)
        if result is not None:
            results.append(result)
            dlio.append(summary)
        if (result["partial"] if result is not None else code == 130):
            break    # stopped (every rank agreed on it): the series ends here, on every rank
    if results:
        out.runs(results, dlio)
    return worst
