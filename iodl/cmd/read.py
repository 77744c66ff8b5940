"""`iodl read`: replay a read pattern against one or more dataset roots."""
from __future__ import annotations

import os
import signal
import threading

HELP = "replay a read pattern against one or more dataset roots"


def add_arguments(p) -> None:
    from ..patterns import PATTERNS

    p.add_argument("--pattern", choices=PATTERNS, help="the schedule (default: the workload's, e.g. train-sync)")
    p.add_argument("--workload", default="tiny", metavar="NAME|FILE", help="built-in workload name or TOML file (default tiny)")
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="dataset root (repeatable: ranks map to roots round-robin); default: the tiny dataset in the data directory")
    p.add_argument("--engine", default="auto", help="auto, uring, aio, psync, asyncio or null (default auto: see docs/engines.md)")
    p.add_argument("--direct", action="store_true", help="open with O_DIRECT (bypass the page cache)")
    p.add_argument("--iodepth", type=int, help="requests in flight per rank (default: the workload's)")
    p.add_argument("--block-size", metavar="SIZE", help="request size, e.g. 1MiB (default: the workload's)")
    p.add_argument("--duration", type=float, metavar="S",
                   help="measured seconds (default 10 for storage-only and infer-async; train-sync runs its epochs)")
    p.add_argument("--ramp", type=float, default=2.0, metavar="S", help="unmeasured warm-up seconds, storage-only (default 2)")
    p.add_argument("--steps", type=int, metavar="N", help="train-sync/infer-async: stop after N steps")
    p.add_argument("--epochs", type=int, metavar="N", help="train-sync/infer-async: epochs (default: the workload's)")
    p.add_argument("--sampling", choices=("epoch", "random"), default="epoch",
                   help="epoch: a seeded shard permutation per epoch split over ranks; random: each reader picks shards at random")
    p.add_argument("--batch-size", type=int, metavar="N", help="samples per step (default: the workload's)")
    p.add_argument("--compute-time", type=float, metavar="S", help="emulated compute per step (default: the workload's)")
    p.add_argument("--prefetch", type=int, metavar="N", help="batches read ahead of compute (default: the workload's; 0 = off)")
    p.add_argument("--seed", type=int, help="seed of the shard order (default: the workload's)")
    p.add_argument("--delay-us", type=float, default=0.0, metavar="US", help="null engine: latency of each request")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here")


def _setup(comm, args):
    """Everything that can fail on bad input, done before any I/O, on every rank."""
    from .. import workload
    from ..errors import UsageError
    from ..patterns import ReadConfig, choose_engine
    from ..units import parse_size

    wl = workload.load_workload(args.workload)
    try:
        block_size = parse_size(args.block_size) if args.block_size else wl.read.block_size
    except ValueError as exc:
        raise UsageError(f"--block-size {args.block_size}: {exc}") from None
    # the asyncio engine's concurrency is its reader tasks: the workload's read_threads
    default_depth = wl.read.read_threads if args.engine == "asyncio" else wl.read.iodepth
    iodepth = args.iodepth if args.iodepth is not None else default_depth
    checks = [
        (block_size > 0, f"--block-size must be positive, got {args.block_size}"),
        (iodepth >= 1, f"--iodepth must be at least 1, got {iodepth}"),
        (args.duration is None or args.duration > 0, "--duration must be positive"),
        (args.ramp >= 0, "--ramp must not be negative"),
        (args.delay_us >= 0, "--delay-us must not be negative"),
        (args.steps is None or args.steps > 0, "--steps must be positive"),
        (args.epochs is None or args.epochs > 0, "--epochs must be positive"),
        (args.batch_size is None or args.batch_size > 0, "--batch-size must be positive"),
        (args.compute_time is None or args.compute_time >= 0, "--compute-time must not be negative"),
        (args.prefetch is None or args.prefetch >= 0, "--prefetch must not be negative"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    for root in args.root:
        if not os.path.isdir(root):
            raise UsageError(f"--root {root}: no such directory")
    pattern = args.pattern or wl.pattern
    duration = args.duration if args.duration is not None else (0.0 if pattern == "train-sync" or args.steps else 10.0)
    cfg = ReadConfig(pattern=pattern, engine=choose_engine(args.engine, args.direct), direct=args.direct,
                     iodepth=iodepth, block_size=block_size, duration_s=duration, ramp_s=args.ramp,
                     seed=args.seed if args.seed is not None else wl.train.seed, delay_ns=int(args.delay_us * 1000))
    return wl, cfg


class _Interrupt:
    """SIGINT/SIGTERM stop the run and still write its result, marked partial.

    Step patterns stop at the next step boundary (ranks agree on it at the barrier); the others
    raise KeyboardInterrupt, which the engine notices within 100 ms, and the pattern keeps what
    was counted so far.
    """

    def __init__(self, raise_now: bool):
        self.event = threading.Event()

        def handler(*_):
            self.event.set()
            if raise_now:
                raise KeyboardInterrupt

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    def __call__(self) -> bool:
        return self.event.is_set()


def _synthetic_layout(wl):
    """The null engine needs no dataset: shard and sample sizes come from the workload spec."""
    import numpy as np

    ds = wl.dataset
    n = ds.files * ds.copies
    ends = np.cumsum(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))
    return None, [int(ends[-1])] * n, (lambda i: ends)


def run(args) -> int:
    import numpy as np

    from .. import comm as comm_mod
    from .. import dataset
    from ..comm import collective
    from ..errors import UsageError
    from ..metrics import process_age_s, reduce_results
    from ..patterns import STEP_PATTERNS, run_reads
    from ..plan import mount_of, ranks_of_mount
    from ..report import SCHEMA, print_result, write_result

    comm = comm_mod.world()
    wl, cfg = collective(comm, lambda: _setup(comm, args))
    stop = _Interrupt(raise_now=cfg.pattern not in STEP_PATTERNS)
    roots = [os.path.abspath(r) for r in args.root]
    synthetic = cfg.engine == "null" and not roots and cfg.pattern in STEP_PATTERNS
    if synthetic:
        roots = ["(null: no dataset)"]
    elif not roots:
        roots = [dataset.ensure_default_dataset(comm, say=print if comm.rank == 0 else (lambda *a: None))]
    mount = mount_of(comm.rank, len(roots))
    host = comm.hostname()
    train = None
    if synthetic:
        paths, sizes, sample_ends = _synthetic_layout(wl)
    else:
        ds = collective(comm, lambda: dataset.open_dataset(roots[mount]))
        paths, sizes = [s.path for s in ds.shards], [s.size for s in ds.shards]
        sample_ends = lambda i: (lambda e: e[:, 0] + e[:, 1])(ds.sample_extents(i))  # noqa: E731
    partial = False
    startup_s = process_age_s()
    if cfg.pattern in STEP_PATTERNS:
        from ..training import StepConfig, common_window, run_steps, summarize_steps, window_io

        members = ranks_of_mount(mount, len(roots), comm.size)
        scfg = StepConfig(pattern=cfg.pattern, engine=cfg.engine, direct=cfg.direct, iodepth=cfg.iodepth,
                          block_size=cfg.block_size, seed=cfg.seed,
                          batch_size=args.batch_size or wl.train.batch_size,
                          compute_time_s=args.compute_time if args.compute_time is not None else wl.train.compute_time_s,
                          prefetch=args.prefetch if args.prefetch is not None else wl.train.prefetch,
                          sampling=args.sampling, epochs=args.epochs or wl.train.epochs, steps=args.steps or 0,
                          duration_s=cfg.duration_s, delay_ns=cfg.delay_ns)
        if not len(sizes) or not sum(sizes):
            raise UsageError("the dataset holds no bytes to read")
        mine, records, partial, _spe = run_steps(comm, scfg, paths, sizes, sample_ends, mount,
                                                 members.index(comm.rank), len(members), host, stop)
        all_records = comm.gather((mount, records))
        partial = bool(comm.allreduce(int(partial), "max"))
    else:
        mine = run_reads(comm, cfg, paths, np.asarray(sizes), mount, len(roots), host)
        partial = bool(comm.allreduce(int(stop()), "max"))
    mine.note_process(startup_s)
    reduced = reduce_results(comm, mine, roots)
    if comm.rank != 0:
        return 0
    if cfg.pattern in STEP_PATTERNS:
        train = summarize_steps([r for _m, r in all_records], cfg.pattern, wl.metric.au_threshold)
        if cfg.pattern == "infer-async":
            # unsynchronised ranks: the aggregate is taken over the common window, per mount and total
            for entry, group in [(reduced["total"], [r for _m, r in all_records])] + [
                    (reduced["mounts"][m], [r for mm, r in all_records if mm == m]) for m in range(len(roots))]:
                group = [r for r in group if len(r)]
                if not group:
                    continue
                lo, hi = common_window(group)
                io = window_io(group, lo, hi)
                span = max(hi - lo, 1e-9)
                entry.update(window_s=hi - lo, bandwidth_MBps=io["bytes"] / span / 1e6, iops=io["ios"] / span,
                             storage_bandwidth_MBps=(io["bytes"] - io["cached"]) / span / 1e6, window="common")
            reduced["window_s"] = reduced["total"]["window_s"]
    result = {"schema": SCHEMA, "pattern": cfg.pattern, "engine": cfg.engine, "direct": cfg.direct,
              "iodepth": cfg.iodepth, "block_size": cfg.block_size, "ranks": reduced["ranks"],
              "hosts": reduced["hosts"], "workload": wl.to_dict(), "seed": cfg.seed,
              "duration_s": cfg.duration_s or None, "ramp_s": cfg.ramp_s if cfg.pattern == "storage-only" else None,
              "partial": partial, "window_s": reduced["window_s"], "total": reduced["total"],
              "mounts": reduced["mounts"], "per_rank": reduced["per_rank"]}
    if train is not None:
        result["train"] = train
    print_result(result)
    if args.out:
        write_result(result, args.out)
    if result["total"]["errors"]:
        return 1
    return 130 if partial else 0  # the shell's code for "ended by SIGINT": the result is incomplete
