"""`iodl checkpoint`: an MLPerf-Storage-style checkpoint of a model (docs/checkpoint.md).

`--plan` lists what every rank writes in one checkpoint, in DLIO's arithmetic (iodl/checkpoint.py),
without I/O and without MPI: a laptop plans llama3-1t's 1024 ranks in a blink. With `--root`,
every MPI rank writes its files (fsync'd), caches are dropped, and the latest checkpoint is read
back (the checkpoint pattern, iodl/patterns/checkpoint.py); the figures are docs/numbers.md's
"Checkpoints".
"""
from __future__ import annotations

import json
import os
import time

from .. import checkpoint, dlio_output, engines, limits
from ..checkpoint_report import print_plan, print_result
from ..comm import collective
from ..errors import IodlError, UsageError
from ..limits import cli_int
from ..patterns import Pattern
from ..patterns.checkpoint import BLOCK_SIZE, CHECKPOINT, IODEPTH, CheckpointRunSpec, execute
from ..outputs import check_output_path, write_result
from ..report import make_console
from ..s3root import add_s3_arguments, addressing, endpoint_urls, given_endpoints, is_s3
from ..stop import Interrupt
from ..units import parse_size
from ..workload import load_workload

# the patterns that write, apart from `iodl read`'s (iodl/patterns/__init__.py says why here)
WRITE_PATTERNS: dict[str, Pattern] = {CHECKPOINT.name: CHECKPOINT}


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, metavar="NAME|FILE",
                   help="a workload with [model]: llama3-8b, llama3-70b, llama3-405b, llama3-1t, unet3d, or a "
                        "TOML or DLIO/MLPerf YAML file")
    p.add_argument("--plan", action="store_true", help="list every rank's files and bytes and the totals; no I/O")
    p.add_argument("--ranks", type=cli_int, metavar="N",
                   help="MPI ranks (default the workload's TP x PP x DP); fewer: MLPerf's subset mode, the first N "
                        "ranks' shares of the full checkpoint")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (docs/checkpoint.md)")
    p.add_argument("--dlio-version", choices=("0.5", "1.0", "2.0", "3.0"), metavar="V",
                   help="a DLIO YAML file: plan the checkpoint the DLIO of MLPerf Storage round V wrote (0.5, 1.0, "
                        "2.0, 3.0; default: the round the file's keys say, docs/dlio.md)")
    p.add_argument("--root", action="append", default=[], metavar="DIR|s3://BUCKET/PREFIX",
                   help="where checkpoints go: a new or empty directory, or one iodl wrote checkpoints in; or a "
                        "bucket's new prefix, or one iodl wrote checkpoints under (docs/s3.md) (repeatable: ranks "
                        "map to roots round-robin)")
    add_s3_arguments(p)
    p.add_argument("--part-size", metavar="SIZE",
                   help="s3:// roots: multipart upload part size (default 8MiB, DLIO's S3 checkpointing's)")
    p.add_argument("--writes", type=cli_int, metavar="K", help="checkpoints to write (default: the workload's)")
    p.add_argument("--reads", type=cli_int, metavar="K",
                   help="times to read the latest checkpoint back (default: the workload's)")
    p.add_argument("--no-fsync", action="store_true", help="do not fsync each file after writing it")
    p.add_argument("--drop-caches", action="store_true",
                   help="empty each node's page cache between writing and reading (needs root; MLPerf's rules)")
    p.add_argument("--engine", default="auto", help=f"{engines.choices(writes=True)} (default auto: docs/engines.md)")
    p.add_argument("--direct", action="store_true", help="O_DIRECT (files are written in whole 4 KiB blocks)")
    p.add_argument("--iodepth", type=cli_int, default=IODEPTH, help=f"requests in flight per rank (default {IODEPTH})")
    p.add_argument("--block-size", metavar="SIZE", default=str(BLOCK_SIZE), help="request size (default 1MiB)")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here")
    p.add_argument("--dlio-dir", metavar="DIR",
                   help="also write what DLIO writes for the run (summary.json, dlio_config/) in mlpstorage's "
                        "layout, DIR/checkpointing/<model>/<YYYYMMDD_HHmmss>/ (docs/mlperf.md)")


def run(comm, args) -> int:
    if args.plan:
        if args.root:
            raise UsageError("--plan does no I/O: leave out --root (or --plan, to write checkpoints)")
        return plan(args)
    if not args.root:
        raise UsageError("iodl checkpoint: give --root DIR (or s3://BUCKET/PREFIX) to write and read checkpoints "
                         "there, or --plan to list what each rank writes")
    stop = Interrupt()
    spec = collective(comm, lambda: resolve(comm.size, args))
    wall_start = time.time()
    facts = comm.gather(dlio_output.host_facts()) if args.dlio_dir else None
    stop.arm()
    try:
        result = execute(comm, spec, stop)
    finally:
        stop.disarm()
    if comm.rank != 0:
        # a rank that failed says nothing (rank 0 names it after writing the result) and ends no job
        return 1 if result["failed"] else 130 if result["partial"] else 0
    print_result(result, make_console())
    if args.out:
        write_result(result, args.out)
    if args.dlio_dir:
        path = dlio_output.write_checkpoint_run(args.dlio_dir, result, spec.workload, spec.writes, spec.reads, facts,
                                                wall_start)
        print(f"DLIO's figures (docs/mlperf.md) written to {path}")
    if result.get("error"):
        # a request failed for good: one line after the partial result; every rank has ended
        raise IodlError(result["error"], collective=True)
    return 130 if result["partial"] else 0


def resolve(ranks: int, args) -> CheckpointRunSpec:
    """The run every rank does: everything that can fail on bad input fails here, before any I/O."""
    wl = load_workload(args.workload, need_dataset=False, dlio_version=args.dlio_version)
    if args.ranks is not None:
        raise UsageError("--ranks is for --plan: a run has as many ranks as mpirun starts")
    buckets = [is_s3(r) for r in args.root]
    if any(buckets) and not all(buckets):
        raise UsageError("--root: give directories or s3:// buckets, not both")
    if wl.read.storage == "object" and not all(buckets):
        # DLIO writes such a workload's checkpoints to the bucket: into a directory they would be other storage
        raise UsageError(f"workload {wl.name}: its checkpoints go to a bucket (DLIO storage_type s3): give --root "
                         "s3://BUCKET/PREFIX and --endpoint URL (docs/s3.md); in a directory they would be other "
                         "storage. --plan shows what each rank writes")
    for flag in ("endpoint", "addressing"):
        if getattr(args, flag) and not all(buckets):
            raise UsageError(f"--{flag} is for s3:// roots")
    if args.part_size and not all(buckets):
        raise UsageError("--part-size is for s3:// roots (a multipart upload's parts)")
    spec = WRITE_PATTERNS["checkpoint"].configure(CheckpointRunSpec(
        workload=wl, ranks=ranks, roots=tuple(r if is_s3(r) else os.path.abspath(r) for r in args.root),
        writes=args.writes, reads=args.reads, fsync=not args.no_fsync, direct=args.direct, engine=args.engine,
        iodepth=args.iodepth, block_size=parse_size(args.block_size, "--block-size"), drop_caches=args.drop_caches,
        endpoints=tuple(endpoint_urls(given_endpoints(args.endpoint, wl))) if all(buckets) else (),
        addressing=addressing(args.addressing) if all(buckets) else "path",
        part_size=parse_size(args.part_size, "--part-size") if args.part_size else 0))
    if args.out:
        check_output_path("--out", args.out)
    if args.dlio_dir:
        dlio_output.check_directory(args.dlio_dir)
    return spec


def plan(args) -> int:
    if args.ranks is not None:
        limits.check_range("--ranks", args.ranks, 1, limits.MAX_RANKS, integer=True)
    wl = load_workload(args.workload, need_dataset=False, dlio_version=args.dlio_version)
    p = checkpoint.plan(wl.checkpoint_model(), args.ranks)
    if args.json:
        print(json.dumps(p.to_dict(wl)))
    else:
        print_plan(wl, p, make_console())
    return 0
