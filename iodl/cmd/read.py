"""`iodl read`: replay a read pattern against one or more dataset roots."""
from __future__ import annotations

import os
import signal
import threading
import time

HELP = "replay a read pattern against one or more dataset roots"


def add_arguments(p) -> None:
    from ..limits import cli_float, cli_int   # numbers are bounded in _setup: a bad one is one line, no usage block
    from ..workload import PATTERNS

    p.add_argument("--pattern", choices=PATTERNS, help="the schedule (default: the workload's, e.g. train-sync)")
    p.add_argument("--workload", metavar="NAME|FILE",
                   help="built-in workload name, TOML file, or DLIO/MLPerf YAML file (default: the one the dataset was generated for, else tiny)")
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="dataset root (repeatable: ranks map to roots round-robin); default: the tiny dataset in the data directory")
    p.add_argument("--engine", default="auto", help="auto, uring, aio, psync, asyncio or null (default auto: see docs/engines.md)")
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
    p.add_argument("--checkpoint-root", action="append", default=[], metavar="DIR",
                   help="train-sync: write the workload's in-training checkpoints ([checkpoint] every_steps, or "
                        "after_epoch and every_epochs) here; the steps wait for them (docs/checkpoint.md)")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here (with --runs: every run's and the aggregate)")
    p.add_argument("--csv", metavar="FILE", help="write the per-second time series here (one row per second per mount)")
    p.add_argument("--runs", type=cli_int, default=1, metavar="N",
                   help="run N times back to back, as MLPerf Storage's submitters do (6: the first a warm-up, "
                        "the other 5 averaged; the seed + 1 each run; docs/mlperf.md); each run is reported, then "
                        "the aggregate")
    p.add_argument("--dlio-dir", metavar="DIR",
                   help="train-sync: also write what DLIO writes for each run (summary.json, <rank>_output.json, "
                        "dlio_config/) in mlpstorage's layout, DIR/training/<model>/run/<YYYYMMDD_HHmmss>/")


def _setup(comm, args):
    """Everything that can fail on bad input, done before any I/O, on every rank."""
    from .. import cache, limits
    from ..dataset import workload_for_roots
    from ..errors import UsageError
    from ..config import ReadConfig
    from ..patterns import choose_engine, engine_name

    args.engine = engine_name(args.engine)   # fio's names (libaio, io_uring, sync, psync) as iodl's
    # every number bounded here, on every rank, before any I/O (bounds: iodl/limits.py)
    given_block = limits.check_read_options(args)
    wl = workload_for_roots(args.root, args.workload)
    args.direct = args.direct or wl.read.direct   # the workload's O_DIRECT (DLIO's reader.odirect) as --direct
    from ..training import request_shape

    wl_block, args.records = request_shape(wl)    # [read] transfer_size as DLIO's readers use it
    args.records = args.records and not given_block
    if args.direct and args.records:
        raise UsageError("--direct: transfer_size 0 reads a tfrecord's 12-byte record headers, which O_DIRECT "
                         "cannot (its requests are 4096-byte aligned): give --block-size")
    block_size = given_block or limits.check_block_size(
        "[read] " + ("transfer_size" if wl_block != wl.read.block_size else "block_size"), wl_block, args.direct)
    # the asyncio engine's concurrency is its reader tasks: the workload's read_threads
    default_depth = wl.read.read_threads if args.engine == "asyncio" else wl.read.iodepth
    iodepth = args.iodepth if args.iodepth is not None else default_depth
    if args.delay_shared and args.engine != "null":
        raise UsageError("--delay-shared is for --engine null")
    limits.check_memory(f"--iodepth {iodepth} x --block-size {block_size}", limits.buffers_bytes(iodepth, block_size))
    batch = args.batch_size or wl.train.batch_size
    ds = wl.dataset
    # every rank holds its mount's shard sizes and an epoch's order (~24 bytes a shard: names are
    # derived, tables mapped; a schema-1 manifest costs ~200, checked when opened); the plans are
    # checked against the shards' real sizes once they are known (limits.check_plans in run)
    limits.check_memory(f"a dataset of {ds.files * ds.copies:,} shards", 24 * ds.files * ds.copies)
    if (args.pattern or wl.pattern) in ("train-sync", "infer-async") and args.engine != "null":
        from ..training import buffer_size

        from ..cursor import ShardFiles

        # the first step also fills the shuffle buffer; the open threads hold the next files open
        ahead = buffer_size(args.shuffle or wl.train.shuffle, wl.train.shuffle_size, ds.samples_per_file)
        opened_ahead = ShardFiles.AHEAD_PER_THREAD * read_threads(args, wl)
        limits.check_open_files(f"a step of {batch} samples ({ds.samples_per_file} per shard)"
                                + (f" and a shuffle buffer of {ahead}" if ahead else "")
                                + (f" and {opened_ahead} files opened ahead" if opened_ahead else ""),
                                limits.shards_per_step(batch + ahead, ds.samples_per_file) + opened_ahead)
    for root in args.root:
        if not os.path.isdir(root):
            raise UsageError(f"--root {root}: " + ("not a directory (give the folder that holds the dataset's "
                                                    "files)" if os.path.exists(root) else "no such directory"))
    if args.drop_caches:
        cache.check_can_drop()
    from ..report import check_output_path

    for flag, path in (("--out", args.out), ("--csv", args.csv)):
        if path:
            check_output_path(flag, path)   # found before the run, not after it has been lost
    pattern = args.pattern or wl.pattern
    if args.runs > 1 and args.csv:
        raise UsageError("--csv holds one run's time series: leave it out with --runs (--out keeps every run)")
    if args.dlio_dir:
        _check_dlio_dir(args.dlio_dir, pattern)
    if pattern == "infer-async" and args.steps:
        raise UsageError("--steps: infer-async runs for --duration (its ranks are not in step: the window "
                         "they are measured over together is fixed in advance)")
    duration = args.duration if args.duration is not None else (0.0 if pattern == "train-sync" or args.steps else 10.0)
    engine = choose_engine(args.engine, args.direct)
    if engine == "psync":
        iodepth = 1   # one pread at a time: the result says the depth that ran, not the one asked for
    cfg = ReadConfig(pattern=pattern, engine=engine, direct=args.direct,
                     iodepth=iodepth, block_size=block_size, duration_s=duration, ramp_s=args.ramp,
                     # --runs: the seed changes from run to run (MLPerf's rules: "the random seed must change
                     # for each run"), the first run's being the one asked for
                     seed=(args.seed if args.seed is not None else wl.train.seed) + getattr(args, "run_index", 0),
                     delay_ns=int(args.delay_us * 1000))
    return wl, cfg, _checkpoint_setup(comm, args, wl, cfg)


def read_threads(args, wl) -> int:
    """Threads opening shards ahead of a step pattern's reader: --read-threads, else the workload's."""
    return args.read_threads if args.read_threads is not None else wl.read.read_threads


def _checkpoint_setup(comm, args, wl, cfg):
    """train-sync's in-training checkpoints: (plan, share, names, bytes) or None (docs/checkpoint.md)."""
    from .. import checkpoint
    from ..checkpoint_run import BLOCK_SIZE, IODEPTH, Plan, layout_for, signature
    from ..errors import UsageError
    from ..patterns import choose_engine

    if not args.checkpoint_root:
        return None
    if cfg.pattern != "train-sync":
        raise UsageError(f"--checkpoint-root: in-training checkpoints are train-sync's, not {cfg.pattern}'s")
    if len(args.checkpoint_root) > comm.size:
        raise UsageError(f"{len(args.checkpoint_root)} checkpoint roots for {comm.size} rank(s): every root needs a rank")
    cm = wl.checkpoint_model()
    lay = checkpoint.layout(cm, comm.size)
    roots = [os.path.abspath(r) for r in args.checkpoint_root]
    # written for real even when the run reads with null (no dataset) or asyncio (reads only)
    engine = choose_engine("auto" if cfg.engine in ("null", "asyncio") else cfg.engine, cfg.direct)
    plan = Plan(roots=roots, writes=0, reads=0, fsync=wl.checkpoint.fsync, direct=cfg.direct, engine=engine,
                iodepth=1 if engine == "psync" else IODEPTH, block_size=BLOCK_SIZE, drop_caches=False,
                signature=signature(cm, lay, cfg.direct))
    return (plan, *layout_for(comm, cm, roots, cfg.direct)[:3])


MAX_RUNS = 100       # --runs: MLPerf's procedure is 6; a long series of consecutive runs may be cut later


def _check_dlio_dir(path: str, pattern: str) -> None:
    """--dlio-dir: DLIO's figures are a training run's; the directory must be one iodl may create files in."""
    from ..errors import UsageError

    from ..dlio_output import check_directory

    if pattern != "train-sync":
        raise UsageError(f"--dlio-dir: DLIO's summary.json describes training steps; {pattern} has none "
                         "(use --pattern train-sync)")
    check_directory(path)


STOP_GRACE_S = 3.0   # after a stop request, how long collectives wait for a rank before giving up on it
SETUP_GRACE_S = 1.0  # a stop during set-up lets set-up finish within this, then the run starts stopped


class _Interrupt:
    """SIGINT/SIGTERM stop the run and still write its result, marked partial.

    During set-up a signal is noted and set-up goes on (it takes well under a second): the run
    then starts stopped and the result, with nothing counted, is still written. Set-up that has not
    finished SETUP_GRACE_S after the signal (a hung mount) is ended then ("interrupted", 130).
    While the run is armed (reading), the handler raises KeyboardInterrupt in the main thread:
    the engine notices it within 100 ms, waits in step patterns (data, compute, barrier) are
    100 ms slices that notice it too, and the pattern keeps what was counted so far. Every rank
    gets the signal from the launcher, so each stops on its own and none waits for another.
    Once the run is over (reducing, writing the result) a signal only marks the result partial.
    """

    def __init__(self):
        self.event = threading.Event()
        self.phase = "setup"   # -> "run" (armed) -> "done"; "stopping" once the run was told

        def handler(*_):
            first = not self.event.is_set()
            self.event.set()
            if self.phase == "setup" and first:
                signal.setitimer(signal.ITIMER_REAL, SETUP_GRACE_S)
            elif self.phase == "run":
                self.phase = "stopping"   # once: the pattern's clean-up must not be interrupted again
                raise KeyboardInterrupt

        def setup_too_long(*_):
            if self.phase == "setup":
                raise KeyboardInterrupt

        signal.signal(signal.SIGALRM, setup_too_long)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    def arm(self) -> None:
        """Set-up is over: a signal now stops the run (which starts stopped if one came already)."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.phase = "stopping" if self.event.is_set() else "run"

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.phase = "done"

    def __call__(self) -> bool:
        return self.event.is_set()


def _row_groups(ds):
    """parquet: the row group reads every shard shares (config.StepConfig.row_groups); else None."""
    if ds.format != "parquet":
        return None
    import numpy as np

    from ..formats import format_for

    return format_for(ds).row_group_reads(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))


def _synthetic_layout(wl):
    """The null engine needs no dataset: shard and sample sizes come from the workload spec."""
    import numpy as np

    ds = wl.dataset
    n = ds.files * ds.copies
    ends = np.cumsum(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))
    return None, [int(ends[-1])] * n, (lambda i: ends)


def _cache_probe(comm, shared, host, node_mounts, mount, root, paths, sizes, copies, total: int) -> dict:
    """What this rank measures for the node's cache accounting (docs/design.md: one rank per node):
    the node leader its memory, the node's first rank of each mount that dataset's size and how
    much of it is in the page cache now."""
    from .. import cache

    probe = {"rank": comm.rank, "host": host, "mount": mount, "path": root}
    if shared.node_rank == 0:
        info = cache.meminfo()
        probe.update(mem_total=info.get("MemTotal", 0), mem_available=info.get("MemAvailable", 0))
    if node_mounts.index(mount) == shared.node_rank:
        probe.update(dataset_bytes=total, resident_bytes=cache.resident_estimate(paths, sizes, total), copies=copies)
    return probe


def _datasize_warning(wl, reduced: dict, shards: int, root: str, console) -> None:
    """MLPerf Storage's dataset-size rule (iodl datasize) for this run's ranks and hosts: say so
    when the dataset is smaller. Memory: rank 0's host's, taken as every host's."""
    from .. import cache
    from ..mlperf import data_size

    need = data_size(wl, reduced["ranks"], len(reduced["hosts"]), cache.meminfo().get("MemTotal", 0))
    if shards < need.files:
        console.print(f"[yellow]warning:[/] {root} holds {shards:,} files; MLPerf Storage's rules ask at least "
                      f"{need.files:,} for {reduced['ranks']} accelerator(s) on {len(reduced['hosts'])} host(s) "
                      f"(500 steps x batch, and 5x the client memory): `iodl datasize` says why")


def run(args) -> int:
    """One run, or --runs N back to back: each reported as it ends, then MLPerf's aggregate."""
    from ..limits import check_range

    check_range("--runs", args.runs, 1, MAX_RUNS, integer=True)   # the same on every rank: no I/O yet
    if args.runs == 1:
        return _run_once(args)[0]
    from ..mlperf import RUNS

    results, dlio = [], []
    worst = 0
    for index in range(args.runs):
        args.run_index = index
        code, result, summary = _run_once(args)
        worst = max(worst, code)
        if result is not None:
            results.append(result)
            dlio.append(summary)
        if (result["partial"] if result is not None else code == 130):
            break    # stopped (every rank agreed on it): the series ends here, on every rank
    if results:
        from ..mlperf import aggregate_runs
        from ..report import make_console, write_result

        agg = aggregate_runs(results, dlio)
        _print_runs(agg, make_console())
        if args.out:
            write_result({"schema": "iodl.runs/1", "runs": results, "mlperf": agg, "planned_runs": args.runs,
                          "procedure_runs": RUNS}, args.out)
    return worst


def _print_runs(agg: dict, console) -> None:
    from ..report import print_table

    rows = [[str(r["run"]) + (" (warm-up)" if r["warmup"] else ""), f"{r['bandwidth_MBps']:,.1f}",
             f"{r['au']:.1%}" if r["au"] is not None else "-",
             f"{r['dlio_au_percentage']:.2f}" if r["dlio_au_percentage"] is not None else "-",
             f"{r['dlio_samples_per_s']:,.1f}" if r["dlio_samples_per_s"] is not None else "-",
             f"{r['dlio_io_MiBps']:,.1f}" if r["dlio_io_MiBps"] is not None else "-",
             r["dlio_au_meet_expectation"] or "-"] for r in agg["runs"]]
    print_table(console, f"{len(agg['runs'])} run(s) back to back", [
        ("run", "left"), ("MB/s", "right"), ("AU", "right"), ("DLIO AU %", "right"), ("DLIO samples/s", "right"),
        ("DLIO MiB/s", "right"), ("AU met", "left")], rows)
    console.print(agg["summary"], highlight=False, markup=False)


def _run_once(args) -> tuple[int, dict | None, dict | None]:
    """One run: (exit code, the result on rank 0 else None, DLIO's summary.json of it or None)."""
    import math

    import numpy as np

    from .. import cache, limits
    from .. import comm as comm_mod
    from .. import dataset
    from ..comm import NodeShared, RanksNotAnswering, SerialComm, collective
    from ..errors import UsageError
    from ..metrics import LIVE_SLOT, RankResult, new_series, process_age_s, reduce_results
    from ..patterns import Run, registry
    from ..plan import mount_of, ranks_of_mount
    from ..report import SCHEMA, make_console, print_result, write_result
    from ..sizing import demand_MBps, sizing_block, workload_demand_MBps

    stop = _Interrupt()
    comm = comm_mod.world()
    wl, cfg, ck_setup = collective(comm, lambda: _setup(comm, args))
    wall_start = time.time()
    if args.dlio_dir:
        from ..dlio_output import host_facts

        facts = comm.gather(host_facts())    # every rank's host, before any rank can stop answering
    roots = [os.path.abspath(r) for r in args.root]
    pattern = registry()[cfg.pattern]
    synthetic = cfg.engine == "null" and not roots and pattern.steps
    if synthetic:
        roots = ["(null: no dataset)"]
    elif not roots:
        roots = [dataset.ensure_default_dataset(comm, say=print if comm.rank == 0 else (lambda *a: None))]
    mount = mount_of(comm.rank, len(roots))
    train = None
    copies = 1
    if synthetic:
        paths, sizes, sample_ends = _synthetic_layout(wl)
        total_samples = len(sizes) * wl.dataset.samples_per_file
        stats = (int(np.max(sizes, initial=0)), int(np.sum(sizes, dtype=np.int64)))
    else:
        # the ranks of this node reading this mount open it together: a plain directory is listed
        # once per node, a generated dataset's tables are mapped (shared pages), names derived
        group = comm.node_group(mount)
        rd, spec = wl.read, wl.dataset    # skip_listing: a plain directory's names derived as DLIO derives them
        derive = (rd.file_prefix, spec.format, spec.files, spec.subfolders) if rd.skip_listing else None
        # a DLIO workload file describes the plain directory DLIO generated: its samples per file hold
        # there (a tfrecord file: many); iodl's own workloads read a plain directory file by file
        from ..dlio import looks_like_yaml

        per_file = spec.samples_per_file if looks_like_yaml(wl.source) else 1
        ds = collective(comm, lambda: dataset.open_dataset(roots[mount], group=group, derive=derive,
                                                           samples_per_file=per_file))
        paths, sizes, copies = ds.paths, ds.sizes, ds.copies
        sample_ends = ds.sample_ends
        total_samples = ds.total_samples
        stats = (ds.largest, ds.total_bytes)   # not from ds.sizes: a mapped table, read whole by no rank

    def check_not_empty():
        if not len(sizes) or not stats[1]:
            raise UsageError(f"{roots[mount]}: the dataset holds no bytes to read")
        if wl.read.access == "whole" and not args.block_size and not synthetic:
            # DLIO's odirect readers read each file in one request (a readv of its size rounded up
            # to 4 KiB), one per loader worker: the request is the largest file, iodepth of them
            cfg.block_size = -(-stats[0] // limits.DIRECT_ALIGN) * limits.DIRECT_ALIGN
            limits.check_range("a whole-file request (the largest file)", cfg.block_size, 1, limits.MAX_BLOCK_SIZE,
                               integer=True)
            limits.check_memory(f"{cfg.iodepth} whole-file requests of {cfg.block_size:,} bytes",
                                limits.buffers_bytes(cfg.iodepth, cfg.block_size))
            if cfg.direct and cfg.engine != "asyncio":
                # and each into a buffer of its own, allocated as DLIO's reader allocates one per
                # file: a direct read's request sizes follow its buffer's pages (_native.pyi)
                cfg.engine_extra = {**cfg.engine_extra, "fresh_buffers": True}
        if args.records and not synthetic and ds.manifest is None:
            raise UsageError(f"{roots[mount]}: transfer_size 0 reads tfrecord record by record, which needs the "
                             "records' places: an iodl-generated dataset has them, a plain directory does not "
                             "(give a transfer_size or --block-size)")
        # what the plans will need, from the real shard sizes, before any is built (iodl/limits.py)
        limits.check_plans(cfg.pattern, sizes, len(sample_ends(0)), cfg.block_size, args.batch_size or wl.train.batch_size,
                           "--block-size" if args.block_size else "[read] block_size", stats)
    collective(comm, check_not_empty)

    # Per node: a block every rank's live counters go to (rank 0 shows them), one cache dropper.
    shared = NodeShared(comm, LIVE_SLOT * 256, per_rank=LIVE_SLOT)
    node_mounts = shared.node.allgather(mount)
    # the host name the result groups by, one per node even where nodes share a name (comm.py)
    host = comm_mod.node_host_name(comm, shared)
    leader = shared.node_rank == 0
    if args.drop_caches and leader:
        cache.drop()
    if cfg.engine == "null" and args.delay_shared:
        def check_shared():
            if not shared.shared:
                raise UsageError("--delay-shared needs memory shared by the ranks of a node (/dev/shm), and there is none here")
        collective(comm, check_shared)
        # one emulated device per node: the first 8 bytes after the live slots are its "busy until"
        cfg.engine_extra = {"device": memoryview(shared.mm)[shared.device_offset:shared.device_offset + 8]}
    comm.barrier()  # every node's cache is dropped before any rank looks or reads
    measure_cache = not synthetic and not cfg.direct
    probes = comm.gather(_cache_probe(comm, shared, host, node_mounts, mount, roots[mount], paths, sizes, copies, stats[1])
                         if measure_cache else None)
    if args.drop_caches and measure_cache:
        # the probe opened the shards to look at their pages: that warmed the inodes and dentries the
        # run's first opens would otherwise read cold (docs/numbers.md, open latency); drop them again
        comm.barrier()
        if leader:
            cache.drop()
        comm.barrier()
    mine = RankResult(rank=comm.rank, host=host, mount=mount,
                      series=new_series(cfg.ramp_s + cfg.duration_s if cfg.pattern in ("storage-only", "infer-async") else None),
                      live=np.frombuffer(shared.mm, dtype=np.int64, count=LIVE_SLOT // 8,
                                         offset=shared.node_rank * LIVE_SLOT))
    console = make_console() if comm.rank == 0 else None
    if comm.rank == 0 and measure_cache:
        for line in cache.small_dataset_warnings(cache.node_view(probes, [])):
            console.print(f"[yellow]warning:[/] {line}")
    on_epoch = (lambda _epoch: cache.drop()) if args.drop_caches == "epoch" and leader else None
    scfg = None
    if pattern.steps:
        from dataclasses import fields

        from ..config import StepConfig
        from ..formats import FORMATS
        from ..training import planned_steps

        members = ranks_of_mount(mount, len(roots), comm.size)
        scfg = StepConfig(**{f.name: getattr(cfg, f.name) for f in fields(cfg)},
                          batch_size=args.batch_size or wl.train.batch_size,
                          compute_time_s=args.compute_time if args.compute_time is not None else wl.train.compute_time_s,
                          prefetch=args.prefetch if args.prefetch is not None else wl.train.prefetch,
                          sampling=args.sampling, shuffle=args.shuffle or wl.train.shuffle,
                          shuffle_size=wl.train.shuffle_size, epochs=args.epochs or wl.train.epochs,
                          steps=args.steps or 0, sample_access=FORMATS[wl.dataset.format].sample_access,
                          read_threads=read_threads(args, wl),
                          row_groups=_row_groups(wl.dataset), total_steps=wl.train.total_steps,
                          records=args.records, npz_load=wl.read.access == "np.load" and wl.dataset.format == "npz"
                          and not cfg.direct and not args.block_size)
        total_steps, _spe = planned_steps(scfg, total_samples, len(members))
    # storage-only and infer-async are measured over [ramp, ramp + duration] after the start
    # barrier, fixed in advance (their ranks are not in step); train-sync over its steps' span
    fixed_window = pattern.fixed_window(scfg or cfg)
    progress = None
    if comm.rank == 0 and (args.progress == "on" or (args.progress == "auto" and console.is_terminal)):
        from ..progress import Progress

        total_s = cfg.ramp_s + cfg.duration_s if fixed_window else (cfg.duration_s or 0.0)
        progress = Progress(shared.mm, node_mounts, roots, total_s=total_s,
                            total_steps=total_steps if scfg and not cfg.duration_s else 0,
                            other_nodes=shared.node_size < comm.size or not shared.shared,
                            console=console).start()
    checkpoints = after_step = None
    if ck_setup is not None:
        from ..checkpoint_run import Checkpoints, TrainingCheckpoints

        checkpoints = Checkpoints(comm, *ck_setup)
        after_step = TrainingCheckpoints(checkpoints, wl.checkpoint)
    startup_s = process_age_s()
    records = None
    wall_run = time.time()   # the steps' times count from the start barrier, which follows this at once
    try:
        stop.arm()
        records, partial = pattern.run(Run(comm=comm, cfg=scfg or cfg, paths=paths, sizes=dataset.int_rows(sizes),
                                           sample_ends=sample_ends, mount=mount, n_mounts=len(roots), host=host,
                                           result=mine, stop=stop, on_epoch=on_epoch, total_samples=total_samples,
                                           after_step=after_step))
    except KeyboardInterrupt:
        # the signal landed outside the pattern's own waits (opening the engine, closing files):
        # what was counted is in `mine` all the same
        partial = True
        if scfg is not None and records is None:
            from ..training import STEP_FIELDS

            records = np.empty((0, len(STEP_FIELDS)))
    finally:
        stop.disarm()
        if progress is not None:
            progress.stop()
        if checkpoints is not None:
            checkpoints.close()
    mine.note_process(startup_s)
    if stop():
        comm.give_up_after(STOP_GRACE_S)

    def put_together(c):
        """(partial, step records, validate's shard counts, reduced counters, checkpoints) of the ranks of c."""
        from ..checkpoint_run import reduce_ops

        flag = bool(c.allreduce(int(partial or stop()), "max"))
        recs = c.gather((mount, records)) if scfg is not None else None
        chk = c.gather((mount, len(sizes), int(np.sum(sizes)))) if cfg.pattern == "validate" else None  # dataset.validate_block
        ck = reduce_ops(c, {"write": checkpoints.counters["write"]}, ck_setup[0], flag) if checkpoints else None
        # a stopped run's window is what it ran: from its first counted completion to its last
        return flag, recs, chk, reduce_results(c, mine, roots, cfg.duration_s if fixed_window and not flag else None), ck

    missing = []
    try:
        partial, all_records, checked, reduced, ck_reduced = put_together(comm)
        comm.all_answered()
    except RanksNotAnswering:
        # a stopped or hung rank holds the collectives: the ranks that answered put their results
        # together without it, rank 0 writes them naming the others, then ends the job
        answering = comm.answering()
        if comm.rank != 0:
            if answering is None:   # rank 0 did not answer: nobody is left to write the result
                raise RanksNotAnswering(STOP_GRACE_S, [0]) from None
            try:
                put_together(answering)
            except RanksNotAnswering:
                pass
            # give rank 0 the time to write the result and end the job, rather than end it now
            time.sleep(2 * STOP_GRACE_S)
            raise
        missing = comm.missing_ranks()
        try:
            _flag, all_records, checked, reduced, ck_reduced = put_together(answering)
        except RanksNotAnswering:   # one that answered went silent too: rank 0's own counters, then
            _flag, all_records, checked, reduced, ck_reduced = put_together(SerialComm())
        partial = True
        reduced["ranks"] = comm.size   # the run's size; per_rank holds the ranks that answered
    if comm.rank != 0:
        return (130 if partial else 0), None, None   # partial: agreed by every rank (put_together)
    if scfg is not None:
        from ..metrics import set_window, steps_run_window
        from ..training import steps_window, summarize_steps

        steps = [r for _m, r in all_records]
        window = steps_run_window(fixed_window, partial, cfg.ramp_s, cfg.duration_s, reduced["per_rank"],
                                  steps_window(steps))
        set_window(reduced, window[1] - window[0])
        train = summarize_steps(steps, cfg.pattern, wl.metric.au_threshold, window)
        train["epochs_checked"] = sum(p["epochs_checked"] for p in reduced["per_rank"])
        train["epochs_wrong"] = sum(p["epochs_wrong"] for p in reduced["per_rank"])
        train["shuffle"] = scfg.shuffle if scfg.sampling == "epoch" else "random shards"
        from ..mlperf import run_category, summary

        train["mlperf"] = summary(steps, wl.metric.au_threshold)
        if train["mlperf"] is not None:
            train["mlperf"]["category"] = run_category(wl, args)
    result = {"schema": SCHEMA, "pattern": cfg.pattern, "engine": cfg.engine, "direct": cfg.direct,
              "iodepth": cfg.iodepth, "block_size": cfg.block_size, "ranks": reduced["ranks"],
              "hosts": reduced["hosts"], "workload": wl.to_dict(), "seed": cfg.seed,
              "duration_s": cfg.duration_s or None, "ramp_s": cfg.ramp_s if fixed_window else None,
              "partial": partial, "window_s": reduced["window_s"], "total": reduced["total"],
              "mounts": reduced["mounts"], "per_rank": reduced["per_rank"]}
    if train is not None:
        result["train"] = train
    if measure_cache:
        result["nodes"] = cache.node_view(probes, reduced["per_rank"])
        result["total"]["cache"], per_mount = cache.cache_blocks(result["nodes"], len(roots))
        for entry, block in zip(result["mounts"], per_mount):
            entry["cache"] = block
        result["drop_caches"] = args.drop_caches
    if cfg.pattern != "validate":
        # the workload as run: --batch-size/--compute-time change what an accelerator asks for
        demand = (demand_MBps(scfg.batch_size, wl.dataset.sample_size, scfg.compute_time_s) if scfg
                  else workload_demand_MBps(wl))
        if math.isfinite(demand):  # a workload without compute time asks for no particular rate
            if scfg is not None:
                from ..training import data_wait_share

                shares = [data_wait_share([r for mm, r in all_records if mm == m]) for m in range(len(roots))]
            else:
                shares = [None] * len(roots)
            result["sizing"] = sizing_block(result, demand, shares)
    if cfg.pattern == "validate":
        result["validate"] = dataset.validate_block(checked, result["total"]["bytes"])
    if reduced["series"] is not None:
        result["series"] = reduced["series"]
    if ck_reduced is not None:
        result["checkpoint"] = {"write": ck_reduced["checkpoint"]["write"], "fsync": ck_setup[0].fsync,
                                "roots": ck_setup[0].roots}
    if missing:
        result["missing_ranks"] = missing
    print_result(result, console)
    if ck_reduced is not None:
        w = result["checkpoint"]["write"]
        console.print(f"in-training checkpoints: {w['rounds'] if w else 0} written"
                      + (f", {w['bytes'] / 1e9:,.3f} GB in {w['duration_s']:.2f} s ({w['bandwidth_MBps']:,.1f} MB/s); "
                         f"the steps waited {result['train']['checkpoint_s_per_step']:.3f} s per step for them"
                         if w else ""), highlight=False, markup=False)
    if pattern.steps and not synthetic:
        _datasize_warning(wl, reduced, len(sizes), roots[mount], console)
    summary = None
    if args.dlio_dir and scfg is not None and missing:
        console.print("DLIO's files are not written: some ranks did not answer, and DLIO's figures are of "
                      "every rank", highlight=False, markup=False)
    elif args.dlio_dir and scfg is not None:
        summary = _write_dlio(args, wl, scfg, result, [r for _m, r in all_records], facts, len(sizes),
                              (wall_start, wall_run), ck_reduced, console)
    if args.out and args.runs == 1:
        write_result(result, args.out)
    if args.csv:
        from ..series import write_csv

        write_csv(result, args.csv)
    if missing:
        raise RanksNotAnswering(STOP_GRACE_S, missing)   # one line, and the launcher ends the job
    if result["total"]["errors"]:
        return 1, result, summary
    return (130 if partial else 0), result, summary  # 130: the shell's code for "ended by SIGINT"


def _write_dlio(args, wl, scfg, result: dict, steps: list, facts: list[dict], files: int,
                walls: tuple[float, float], ck_reduced, console) -> dict:
    """DLIO's files of this run in mlpstorage's run directory (iodl/dlio_output.py); its summary.
    walls: wall clock at the run's start (after set-up's checks) and just before its start barrier."""
    from .. import dlio_output as out

    hosts = [p["host"] for p in sorted(result["per_rank"], key=lambda p: p["rank"])]
    ck_bytes = 0
    if ck_reduced is not None and result["checkpoint"]["write"]:
        w = result["checkpoint"]["write"]
        ck_bytes = w["bytes"] // max(w["rounds"], 1)
    wall_start, wall0 = walls
    summary = out.summary(steps, facts, hosts, wl, files, wall_start, time.time(), ck_bytes)
    outputs = [out.rank_output(rows, fact, summary["data_size_per_host_GB"], wall0) for rows, fact in zip(steps, facts)]
    config = out.dlio_config(wl, files, scfg.batch_size, scfg.compute_time_s, scfg.epochs, ck_bytes > 0, scfg.steps)
    overrides = [f"workload={wl.name}", f"++workload.dataset.num_files_train={files}"]
    model = config["workload"]["model"]["name"]
    path = out.write_run(args.dlio_dir, out.run_directory(args.dlio_dir, model, wall_start), summary, outputs,
                         config, overrides, result)
    m = summary["metric"]
    if m:
        console.print(f"DLIO's figures (docs/mlperf.md): AU {m['train_au_mean_percentage']:.2f} % "
                      f"({m['train_au_meet_expectation']}), {m['train_throughput_mean_samples_per_second']:,.1f} "
                      f"samples/s, {m['train_io_mean_MB_per_second']:,.1f} MiB/s; written to {path}",
                      highlight=False, markup=False)
    return summary
