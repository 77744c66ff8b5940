"""`iodl read`: replay a read pattern against one or more dataset roots."""
from __future__ import annotations

import os

HELP = "replay a read pattern against one or more dataset roots"


def add_arguments(p) -> None:
    from ..patterns import PATTERNS

    p.add_argument("--pattern", choices=PATTERNS, default="storage-only", help="the schedule (default storage-only)")
    p.add_argument("--workload", default="tiny", metavar="NAME|FILE", help="built-in workload name or TOML file (default tiny)")
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="dataset root (repeatable: ranks map to roots round-robin); default: the tiny dataset in the data directory")
    p.add_argument("--engine", default="auto", help="auto, uring, aio, psync or null (default auto: see docs)")
    p.add_argument("--direct", action="store_true", help="open with O_DIRECT (bypass the page cache)")
    p.add_argument("--iodepth", type=int, help="requests in flight per rank (default: the workload's)")
    p.add_argument("--block-size", metavar="SIZE", help="request size, e.g. 1MiB (default: the workload's)")
    p.add_argument("--duration", type=float, default=10.0, metavar="S", help="measured seconds, storage-only (default 10)")
    p.add_argument("--ramp", type=float, default=2.0, metavar="S", help="unmeasured warm-up seconds, storage-only (default 2)")
    p.add_argument("--seed", type=int, help="seed of the shard order (default: the workload's)")
    p.add_argument("--delay-us", type=float, default=0.0, metavar="US", help="null engine: latency of each request")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here")


def _setup(comm, args):
    """Everything that can fail on bad input, done before any I/O, on every rank."""
    from .. import dataset, workload
    from ..errors import UsageError
    from ..patterns import ReadConfig, choose_engine
    from ..units import parse_size

    wl = workload.load_workload(args.workload)
    block_size = parse_size(args.block_size) if args.block_size else wl.read.block_size
    iodepth = args.iodepth if args.iodepth is not None else wl.read.iodepth
    if block_size <= 0:
        raise UsageError(f"--block-size must be positive, got {args.block_size}")
    if iodepth < 1:
        raise UsageError(f"--iodepth must be at least 1, got {iodepth}")
    if args.duration <= 0 or args.ramp < 0:
        raise UsageError("--duration must be positive and --ramp not negative")
    if args.delay_us < 0:
        raise UsageError("--delay-us must not be negative")
    for root in args.root:
        if not os.path.isdir(root):
            raise UsageError(f"--root {root}: no such directory")
    cfg = ReadConfig(pattern=args.pattern, engine=choose_engine(args.engine, args.direct), direct=args.direct,
                     iodepth=iodepth, block_size=block_size, duration_s=args.duration, ramp_s=args.ramp,
                     seed=args.seed if args.seed is not None else wl.train.seed, delay_ns=int(args.delay_us * 1000))
    return wl, cfg


def run(args) -> int:
    from .. import comm as comm_mod
    from .. import dataset
    from ..comm import collective
    from ..metrics import reduce_results
    from ..patterns import run_reads
    from ..plan import mount_of
    from ..report import SCHEMA, print_result, write_result

    comm = comm_mod.world()
    wl, cfg = collective(comm, lambda: _setup(comm, args))
    roots = [os.path.abspath(r) for r in args.root]
    if not roots:
        roots = [dataset.ensure_default_dataset(comm, say=print if comm.rank == 0 else (lambda *a: None))]
    mount = mount_of(comm.rank, len(roots))
    ds = collective(comm, lambda: dataset.open_dataset(roots[mount]))
    paths = [s.path for s in ds.shards]
    sizes = [s.size for s in ds.shards]
    mine = run_reads(comm, cfg, paths, sizes, mount, len(roots), comm.hostname())
    reduced = reduce_results(comm, mine, roots)
    if comm.rank != 0:
        return 0
    result = {"schema": SCHEMA, "pattern": cfg.pattern, "engine": cfg.engine, "direct": cfg.direct,
              "iodepth": cfg.iodepth, "block_size": cfg.block_size, "ranks": reduced["ranks"],
              "hosts": reduced["hosts"], "workload": wl.to_dict(), "seed": cfg.seed,
              "duration_s": cfg.duration_s if cfg.pattern == "storage-only" else None,
              "ramp_s": cfg.ramp_s if cfg.pattern == "storage-only" else None,
              "window_s": reduced["window_s"], "total": reduced["total"], "mounts": reduced["mounts"],
              "per_rank": reduced["per_rank"]}
    print_result(result)
    if args.out:
        write_result(result, args.out)
    return 1 if result["total"]["errors"] else 0
