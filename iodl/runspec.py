"""A run resolved once: `iodl read`'s options over the workload's defaults, each default written here.

resolve() runs on every rank before any I/O and is where a bad option is found (bounds:
iodl/limits.py); what it returns is what every rank runs and what the result reports.
"""
from __future__ import annotations

from dataclasses import field

from . import cache, limits
from .cursor import ShardFiles
from .data.files import not_a_dir
from .errors import UsageError
from .formats import Reading, format_for
from . import engines
from .mlperf import run_category
from .records import record
from .s3root import addressing, bucket_needed, endpoint_urls, given_endpoints, is_s3
from .training import buffer_size, request_shape

@record(frozen=True, kw_only=True)
class RunSpec:
    """What a rank runs. Built by resolve() for `iodl read`; tests build one for a pattern directly."""
    pattern: str
    engine: str
    direct: bool
    iodepth: int
    block_size: int
    seed: int
    duration_s: float = 0.0      # the measured seconds (0: no limit: the pattern's own end)
    ramp_s: float = 0.0          # fixed-window patterns: unmeasured seconds before the window
    delay_ns: int = 0            # null engine: latency of each request
    engine_extra: dict = field(default_factory=dict)   # e.g. the null engine's shared device
    # step patterns (train-sync, infer-async): each rank is an accelerator taking batches
    batch_size: int = 1
    compute_time_s: float = 0.0
    prefetch: int = 0
    sampling: str = "epoch"      # epoch: each epoch's shards split over ranks | random
    shuffle: str = "file"        # none | file | sample | file+sample (workload.SHUFFLES)
    shuffle_size: int = 1024     # samples in the sample-shuffle buffer (tf.data's and DLIO's shuffle_size)
    epochs: int = 1
    steps: int = 0               # total steps; 0: as many as the epochs need
    read_threads: int = 0        # threads opening shards ahead of the reader (0: the reader opens them)
    total_steps: int = 0         # most steps each epoch runs (0: as many as its data makes; DLIO's total_training_steps)
    reading: Reading = Reading()   # how the format's shards are read (formats.Format.reading)
    # the run around the pattern
    workload: object = None      # the workload.Workload the defaults came from
    roots: tuple[str, ...] = ()  # dataset roots as given (none: the default dataset, or null's synthetic one)
    manifests: dict = field(default_factory=dict)   # each root's manifest, read once (data.manifest.read_manifests)
    block_given: bool = False    # --block-size was given: it stands over a whole-file request
    delay_shared: bool = False   # null engine: the ranks of a node share one emulated device
    drop_caches: str | None = None   # "start" | "epoch"
    checkpoint_roots: tuple[str, ...] = ()   # train-sync's in-training checkpoints (directories or s3:// roots)
    # every s3:// root's (the dataset's, the checkpoints'): the endpoints, ranks round-robin, and the addressing
    endpoints: tuple[str, ...] = ()
    addressing: str = "path"
    mlperf_category: str | None = None       # the training run's MLPerf category (mlperf.run_category)
    # measured over [ramp, ramp + duration] after the start barrier, fixed in advance (the pattern's
    # configure says: storage-only, and infer-async whose ranks are not in step); else over its own span
    fixed_window: bool = False


def _given(value, default):
    return value if value is not None else default


def resolve(args, wl, patterns: dict, run_index: int = 0, manifests: dict | None = None) -> RunSpec:
    """The run `iodl read` asks for: every option bounded, checked against the others and the workload,
    every default taken from the workload, then configured by its pattern (one of `patterns`);
    run_index: --runs' run (the seed changes from run to run)."""
    engine_asked = engines.resolve(args.engine)   # fio's names (libaio, io_uring, sync, ...) as iodl's
    given_block = limits.check_read_options(args)
    direct = args.direct or wl.read.direct   # the workload's O_DIRECT (DLIO's reader.odirect) as --direct
    pattern = args.pattern or wl.pattern
    ds, train = wl.dataset, wl.train
    wl_block, _records = request_shape(wl)     # [read] transfer_size as DLIO's readers use it
    reading = format_for(ds).reading(ds, wl.read, direct, given_block is not None)
    if direct and reading.records:
        raise UsageError("--direct: transfer_size 0 reads a tfrecord's 12-byte record headers, which O_DIRECT "
                         "cannot (its requests are 4096-byte aligned): give --block-size")
    block_size = given_block or limits.check_block_size(
        "[read] " + ("transfer_size" if wl_block != wl.read.block_size else "block_size"), wl_block, direct)
    # the asyncio engine's concurrency is its reader tasks: the workload's read_threads
    iodepth = _given(args.iodepth, wl.read.read_threads if engine_asked == "asyncio" else wl.read.iodepth)
    if args.delay_shared and engine_asked != "null":
        raise UsageError("--delay-shared is for --engine null")
    limits.check_memory(f"--iodepth {iodepth} x --block-size {block_size}", limits.buffers_bytes(iodepth, block_size))
    batch = _given(args.batch_size, train.batch_size)
    shuffle = args.shuffle or train.shuffle
    threads = _given(args.read_threads, wl.read.read_threads)
    # every rank holds its mount's shard sizes and an epoch's order (~24 bytes a shard: names are
    # derived, tables mapped); the plans are
    # checked against the shards' real sizes once they are known (limits.check_plans)
    limits.check_memory(f"a dataset of {ds.files * ds.copies:,} shards", 24 * ds.files * ds.copies)
    if patterns[pattern].accelerators and engine_asked != "null":
        # the first step also fills the shuffle buffer; the open threads hold the next files open
        ahead = buffer_size(shuffle, train.shuffle_size, ds.samples_per_file)
        opened_ahead = ShardFiles.AHEAD_PER_THREAD * threads
        limits.check_open_files(f"a step of {batch} samples ({ds.samples_per_file} per shard)"
                                + (f" and a shuffle buffer of {ahead}" if ahead else "")
                                + (f" and {opened_ahead} files opened ahead" if opened_ahead else ""),
                                limits.shards_per_step(batch + ahead, ds.samples_per_file) + opened_ahead)
    objects = [r for r in args.root if is_s3(r)]
    if objects and len(objects) != len(args.root):
        raise UsageError("--root: give either directories or s3:// roots, not both")
    ck_roots = args.checkpoint_root
    ck_buckets = [r for r in ck_roots if is_s3(r)]
    if ck_buckets and len(ck_buckets) != len(ck_roots):
        raise UsageError("--checkpoint-root: give either directories or s3:// roots, not both")
    for flag in ("endpoint", "addressing"):
        if getattr(args, flag, None) and not objects and not ck_buckets:
            raise UsageError(f"--{flag} is for s3:// roots")
    if wl.read.storage == "object" and not objects and engine_asked != "null":
        raise bucket_needed(wl)
    if objects and engine_asked not in (engines.AUTO, "s3"):
        raise UsageError(f"s3:// roots are read by --engine s3 (or auto), not {engine_asked}")
    for root in () if objects else args.root:
        if why := not_a_dir(root):
            raise UsageError(f"--root {root}: {why}" + (" (give the folder that holds the dataset's files)"
                                                         if why == "not a directory" else ""))
    if args.drop_caches:
        cache.check_can_drop()
    engine = engines.choose("s3" if objects else engine_asked, direct)
    endpoints, style = ((tuple(endpoint_urls(given_endpoints(args.endpoint, wl))),
                         addressing(getattr(args, "addressing", None))) if objects or ck_buckets else ((), "path"))
    engine_extra = {"endpoints": endpoints, "addressing": style} if objects else {}
    iodepth = engines.depth(engine, iodepth)   # the result says the depth that ran, not the one asked for
    return patterns[pattern].configure(RunSpec(
        pattern=pattern, engine=engine, direct=direct, iodepth=iodepth, block_size=block_size,
        # --runs: the seed changes from run to run (MLPerf's rules: "the random seed must change for
        # each run"), the first run's being the one asked for
        seed=_given(args.seed, train.seed) + run_index,
        duration_s=args.duration or 0.0, ramp_s=args.ramp, delay_ns=int(args.delay_us * 1000),
        batch_size=batch, compute_time_s=_given(args.compute_time, train.compute_time_s),
        prefetch=_given(args.prefetch, train.prefetch), sampling=args.sampling, shuffle=shuffle,
        shuffle_size=train.shuffle_size, epochs=args.epochs or train.epochs, steps=args.steps or 0,
        read_threads=threads, total_steps=train.total_steps, reading=reading, workload=wl, roots=tuple(args.root),
        manifests=manifests or {}, block_given=given_block is not None, delay_shared=args.delay_shared,
        drop_caches=args.drop_caches, checkpoint_roots=tuple(args.checkpoint_root), engine_extra=engine_extra,
        endpoints=endpoints, addressing=style,
        mlperf_category=run_category(wl, args)))

