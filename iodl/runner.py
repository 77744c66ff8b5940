"""One run of `iodl read` on every rank: the resolved run's data opened, the caches looked at, its
pattern run, the ranks' counters put together and handed to rank 0's side (iodl/read_report.py),
which prints and writes them. Nothing here imports what printing needs: every rank imports this."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import cache, dlio_output, engines, limits
from . import comm as comm_mod
from .comm import NodeShared, RanksNotAnswering, SerialComm, collective, failed_alone, failures_line, on_rank0
from .data.manifest import check_default_fits, check_fits, read_manifests, workload_for_roots
from .data.open import open_dataset
from .data.tables import int_rows
from .errors import IodlError, UsageError
from .metrics import LIVE_SLOT, RankResult, new_series, process_age_s, reduce_results
from .outputs import check_output_path
from .patterns import Run
from .plan import mount_of
from .records import record
from .runspec import resolve
from .s3root import addressing, endpoint_of, endpoint_urls, given_endpoints, is_s3
from .stop import STOP_GRACE_S, Interrupt
from .workload import load_workload, looks_like_yaml

if TYPE_CHECKING:
    from .read_report import ReadReport


def _checkpointing():
    """iodl.patterns.checkpoint, for a run with in-training checkpoints (--checkpoint-root) only:
    with the modules it alone imports (its shares and stores) ~5 ms of CPU a rank, which every
    rank of every run paid at start-up (~0.2 s at 72 ranks on 2 cores)."""
    from .patterns import checkpoint
    return checkpoint


def _setup(comm, args, patterns: dict, run_index: int):
    """Everything that can fail on bad input, done before any I/O, on every rank."""
    # First, where every rank comes: rank 0 alone reads the workload and sends it. Its file's
    # reader and parse were ~35 ms of each rank's start-up for a YAML file, ~7 ms for TOML.
    wl, buckets = on_rank0(comm, lambda: _workload(args))
    # each rank reads its node's manifests (open_dataset takes them from the spec) and checks them too
    manifests = {**read_manifests([r for r in args.root if not is_s3(r)]), **buckets}
    check_fits(wl, manifests)
    spec = resolve(args, wl, patterns, run_index, manifests)
    for flag, path in (("--out", args.out), ("--csv", args.csv)):
        if path:
            check_output_path(flag, path)   # found before the run, not after it has been lost
    if args.runs > 1 and args.csv:
        raise UsageError("--csv holds one run's time series: leave it out with --runs (--out keeps every run)")
    if args.dlio_dir:
        _check_dlio_dir(args.dlio_dir, spec.pattern)
    return spec, _checkpointing().in_training(spec, comm.size) if spec.checkpoint_roots else None


def _workload(args):
    """Rank 0's part of _setup: the workload the run reads, and the manifest of each s3:// root
    (one bucket for every rank: fetched once)."""
    given = load_workload(args.workload) if args.workload else None
    buckets = {}
    if any(is_s3(r) for r in args.root):
        from .s3dataset import fetch_manifest   # awscrt: loaded only for a bucket
        # the endpoint a workload file names is the default --endpoint (the dataset's manifest is fetched there)
        urls = endpoint_urls(given_endpoints(args.endpoint, given))
        style = addressing(args.addressing)
        buckets = {r: fetch_manifest(r, urls[endpoint_of(0, urls)], style) for r in args.root if is_s3(r)}
    wl = workload_for_roots({**read_manifests([r for r in args.root if not is_s3(r)]), **buckets}, given)
    if not args.root and given is not None and engines.resolve(args.engine) != "null":
        check_default_fits(wl, args.workload)   # the default dataset is read: it must be the workload's
    return wl, buckets


def _check_dlio_dir(path: str, pattern: str) -> None:
    """--dlio-dir: DLIO's figures are a training run's; the directory must be one iodl may create files in."""
    if pattern != "train-sync":
        raise UsageError(f"--dlio-dir: DLIO's summary.json describes training steps; {pattern} has none "
                         "(use --pattern train-sync)")
    dlio_output.check_directory(path)


def _cache_probe(comm, shared, host, node_mounts, mount, root, paths, sizes, copies, total: int) -> dict:
    """What this rank measures for the node's cache accounting (docs/design.md: one rank per node):
    the node leader its memory, the node's first rank of each mount that dataset's size and how
    much of it is in the page cache now."""
    probe = {"rank": comm.rank, "host": host, "mount": mount, "path": root}
    if shared.node_rank == 0:
        info = cache.meminfo()
        probe.update(mem_total=info.get("MemTotal", 0), mem_available=info.get("MemAvailable", 0))
    if node_mounts.index(mount) == shared.node_rank:
        probe.update(dataset_bytes=total, resident_bytes=cache.resident_estimate(paths, sizes, total), copies=copies)
    return probe



@record
class Mount:
    """A rank's view of the dataset it reads: its mount's (or the null engine's synthetic one)."""
    roots: list[str]
    index: int                     # the mount this rank reads (plan.mount_of)
    paths: list[str] | None        # its shards (None: synthetic)
    sizes: object                  # their sizes (a dataset's mapped table, rows read when looked up)
    sample_ends: Callable          # shard -> its samples' end offsets
    total_samples: int
    stats: tuple[int, int]         # (largest shard, total bytes): not from sizes, read whole by no rank
    copies: int = 1
    synthetic: bool = False
    manifest: object = None
    batch_ends: Callable | None = None   # shards -> their samples' end offsets, at once (Dataset.batch_ends)
    listing: tuple[int, float] = (0, 0.0)   # an s3:// root: the LISTs of its prefix before the run, their seconds


@record
class Node:
    """What the ranks of a node share: the live counters' block, the host name, the cache probes."""
    shared: NodeShared
    mounts: list[int]              # the mount of each rank of the node
    host: str
    leader: bool                   # the node's first rank: it drops the caches
    probes: list | None            # rank 0: every rank's cache probe (None: the cache is not measured)


def run_once(comm, args, patterns: dict, out: ReadReport | None, run_index: int = 0) -> tuple[int, dict | None, dict | None]:
    """One run of one of `patterns`: (exit code, the result on rank 0 else None, DLIO's summary.json of
    it or None). out: rank 0's side (it prints and writes), None on every other rank; run_index: --runs' run."""
    stop = Interrupt()
    spec, ck_spec = collective(comm, lambda: _setup(comm, args, patterns, run_index))
    wall_start = time.time()
    # every rank's host, before any rank can stop answering
    facts = comm.gather(dlio_output.host_facts()) if args.dlio_dir else None
    pattern = patterns[spec.pattern]
    m = _open_mount(comm, spec, pattern.accelerators)
    spec = collective(comm, lambda: _request_size(spec, m))
    spec, node = _prepare_node(comm, spec, m)
    if spec.engine_extra.get("endpoints"):   # this rank's endpoint, for the s3 engine to connect before the run
        urls = spec.engine_extra["endpoints"]
        spec = replace(spec, engine_extra={**spec.engine_extra, "endpoint": urls[endpoint_of(comm.rank, urls)]})
    checkpoints = _checkpointing().open_checkpoints(comm, ck_spec) if ck_spec is not None else None
    run = _rank_run(comm, spec, m, node, stop, checkpoints)
    progress = out.before_run(comm, spec, pattern, m, node) if out is not None else None
    startup_s = process_age_s()
    wall_run = time.time()   # the steps' times count from the start barrier, which follows this at once
    # a rank whose request fails for good tells the others, which stop as on Ctrl-C
    notices = comm.stop_notices(lambda: os.kill(os.getpid(), signal.SIGINT))
    failed = None
    try:
        partial = _run_pattern(pattern, run, stop, progress, checkpoints)
    except (OSError, IodlError) as exc:
        if not failed_alone(exc):
            if notices is not None:
                notices.close()
            raise
        # a request failed for good: what was counted is written, partial
        failed, partial = exc, True
        if notices is not None:
            notices.tell()
    run.result.note_process(startup_s)
    if stop() or failed is not None:
        comm.give_up_after(STOP_GRACE_S)
    failure = f"rank {comm.rank}: {failed}" if failed is not None and comm.size > 1 else failed and str(failed)
    partial, parts, reduced, ck_reduced, failures, missing = _put_together(
        comm, lambda c: _reduce(c, run, partial or stop(), m.roots, checkpoints, failure))
    if notices is not None:
        notices.close(len(failures) - (failed is not None))
    if out is None:
        # a rank that failed exits 1 without a word (rank 0 names it, after writing the result) and
        # without ending the job, which would end rank 0 before the result is written
        return (1 if failed is not None else 130 if partial else 0), None, None   # partial: agreed (_reduce)
    error = failures_line(failures)
    result, summary = out.after_run(spec, pattern, parts, reduced, partial, m, node, facts, (wall_start, wall_run),
                                    ck_spec, ck_reduced, missing, error)
    if missing:
        raise RanksNotAnswering(STOP_GRACE_S, missing)   # one line, and the launcher ends the job
    if error is not None:
        # after the partial result: the one line that names the file or object (and the rank); every
        # rank knows and has ended, so the job need not be aborted
        raise IodlError(error, collective=True)
    if result["total"]["errors"]:
        return 1, result, summary
    return (130 if partial else 0), result, summary  # 130: the shell's code for "ended by SIGINT"


def _rank_run(comm, spec, m: Mount, node: Node, stop, checkpoints) -> Run:
    """This rank's part of the run, counting into a RankResult whose live counters rank 0 can see."""
    mine = RankResult(rank=comm.rank, host=node.host, mount=m.index, lists=m.listing[0], list_s=m.listing[1],
                      series=new_series(spec.ramp_s + spec.duration_s if spec.fixed_window else None),
                      live=np.frombuffer(node.shared.mm, dtype=np.int64, count=LIVE_SLOT // 8,
                                         offset=node.shared.node_rank * LIVE_SLOT))
    return Run(comm=comm, spec=spec, paths=m.paths, sizes=int_rows(m.sizes), sample_ends=m.sample_ends,
               batch_ends=m.batch_ends, mount=m.index, n_mounts=len(m.roots), host=node.host, result=mine, stop=stop,
               on_epoch=(lambda _epoch: cache.drop_caches()) if spec.drop_caches == "epoch" and node.leader else None,
               total_samples=m.total_samples,
               after_step=(_checkpointing().TrainingCheckpoints(checkpoints, spec.workload.checkpoint)
                           if checkpoints else None))


def _run_pattern(pattern, run: Run, stop: Interrupt, progress, checkpoints) -> bool:
    """pattern.run(run), which a signal may stop: True when it ended early (partial)."""
    try:
        stop.arm()
        return pattern.run(run)
    except KeyboardInterrupt:
        # the signal landed outside the pattern's own waits (opening the engine, closing files):
        # what was counted is in run.result all the same, and what it hands over is in run.part
        return True
    finally:
        stop.disarm()
        if progress is not None:
            progress.stop()
        if checkpoints is not None:
            checkpoints.close()


def _open_mount(comm, spec, accelerators: bool) -> Mount:
    """This rank's mount, opened by the ranks of a node that read it together: a plain directory is
    listed once per node, a generated dataset's tables are mapped (shared pages), names derived."""
    wl = spec.workload
    roots = [r if is_s3(r) else os.path.abspath(r) for r in spec.roots]
    if spec.engine == "null" and not roots and accelerators:
        ds = wl.dataset   # the null engine needs no dataset: shard and sample sizes come from the workload
        ends = np.cumsum(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))
        # one shard size for all (read-only, no memory a shard: retinanet's 1.17 M as a list cost each
        # rank ~0.15 s of CPU at start to build and reduce, seconds at 72 ranks on 2 cores)
        n = ds.files * ds.copies
        sizes = np.broadcast_to(ends[-1], (n,))
        return Mount(["(null: no dataset)"], 0, None, sizes, lambda i: ends, n * ds.samples_per_file,
                     (int(ends[-1]) if n else 0, int(ends[-1]) * n), synthetic=True,
                     batch_ends=lambda shards: np.broadcast_to(ends, (len(shards), len(ends))))
    if not roots:
        # no --root: the default dataset, generated on first use; a run given its roots never
        # imports generate's modules (start-up: every rank imports what this module does)
        from .data.generate import ensure_default_dataset

        roots = [ensure_default_dataset(comm, say=print if comm.rank == 0 else (lambda *a: None))]
    mount = mount_of(comm.rank, len(roots))
    group = comm.node_group(mount)
    rd, shape = wl.read, wl.dataset    # skip_listing: a plain directory's names derived as DLIO derives them
    derive = (rd.file_prefix, shape.format, shape.files, shape.subfolders) if rd.skip_listing else None
    # a DLIO workload file describes the plain directory DLIO generated: its samples per file hold
    # there (a tfrecord file: many); iodl's own workloads read a plain directory file by file
    per_file = shape.samples_per_file if looks_like_yaml(wl.source) else 1
    if is_s3(roots[mount]):
        from .s3dataset import open_s3_dataset
        urls = spec.engine_extra["endpoints"]
        ds = collective(comm, lambda: open_s3_dataset(roots[mount], spec.manifests[roots[mount]],
                                                      urls[endpoint_of(comm.rank, urls)],
                                                      spec.engine_extra["addressing"]))
        listing = (ds.lists, ds.list_s)
    else:
        ds = collective(comm, lambda: open_dataset(roots[mount], group=group, derive=derive,
                                                   samples_per_file=per_file, manifests=spec.manifests))
        listing = (0, 0.0)
    return Mount(roots, mount, ds.paths, ds.sizes, ds.sample_ends, ds.total_samples, (ds.largest, ds.total_bytes),
                 ds.copies, manifest=ds.manifest, batch_ends=ds.batch_ends, listing=listing)


def _request_size(spec, m: Mount):
    """The spec with its request size, checked against the shards' real sizes before any plan is built
    (iodl/limits.py)."""
    block_size, wl, extra = spec.block_size, spec.workload, spec.engine_extra
    if not len(m.sizes) or not m.stats[1]:
        raise UsageError(f"{m.roots[m.index]}: the dataset holds no bytes to read")
    if wl.read.access == "whole" and not spec.block_given and not m.synthetic:
        # DLIO's odirect readers read each file in one request (a readv of its size rounded up
        # to 4 KiB), one per loader worker: the request is the largest file, iodepth of them
        block_size = limits.aligned(m.stats[0])
        limits.check_range("a whole-file request (the largest file)", block_size, 1, limits.MAX_BLOCK_SIZE,
                           integer=True)
        limits.check_memory(f"{spec.iodepth} whole-file requests of {block_size:,} bytes",
                            limits.buffers_bytes(spec.iodepth, block_size))
        if spec.direct and spec.engine != "asyncio":
            # and each into a buffer of its own, allocated as DLIO's reader allocates one per
            # file: a direct read's request sizes follow its buffer's pages (_native.pyi)
            extra = {**extra, "fresh_buffers": True}
    if spec.reading.records and not m.synthetic and m.manifest is None:
        raise UsageError(f"{m.roots[m.index]}: transfer_size 0 reads tfrecord record by record, which needs the "
                         "records' places: an iodl-generated dataset has them, a plain directory does not "
                         "(give a transfer_size or --block-size)")
    limits.check_plans(spec.pattern, m.sizes, len(m.sample_ends(0)), block_size, spec.batch_size,
                       "--block-size" if spec.block_given else "[read] block_size", m.stats)
    return replace(spec, block_size=block_size, engine_extra=extra)


def _prepare_node(comm, spec, m: Mount):
    """(spec, Node): per node a block every rank's live counters go to (rank 0 shows them), one cache
    dropper, the cache looked at; the null engine's shared device in the spec."""
    shared = NodeShared(comm, LIVE_SLOT * 256, per_rank=LIVE_SLOT)
    # the mount of each rank of the node, from its world rank as _open_mount chose it (no message);
    # the first rank is the node's leader
    node_mounts = [mount_of(rank, len(m.roots)) for rank in shared.world_ranks]
    # the host name the result groups by, one per node even where nodes share a name (comm.py)
    host = comm_mod.node_host_name(comm, shared.world_ranks[0], shared.node_size)
    leader = shared.node_rank == 0
    if spec.drop_caches and leader:
        cache.drop_caches()
    if spec.engine == "null" and spec.delay_shared:
        def check_shared():
            if not shared.shared:
                raise UsageError("--delay-shared needs memory shared by the ranks of a node (/dev/shm), and there is none here")
        collective(comm, check_shared)
        # one emulated device per node: the first 8 bytes after the live slots are its "busy until"
        spec = replace(spec, engine_extra={**spec.engine_extra,
                                           "device": memoryview(shared.mm)[shared.device_offset:shared.device_offset + 8]})
    if spec.drop_caches:
        comm.barrier()  # every node's cache is dropped before any rank looks or reads
    # (at 72 ranks on 2 cores each collective at set-up costs ~0.1 s: only those needed are made)
    measure_cache = not m.synthetic and not spec.direct and not getattr(m.paths, "objects", False)
    # the same on every rank (unlike measure_cache where one mount is a bucket): no gather to make
    nothing_to_measure = m.synthetic or spec.direct
    probes = None if nothing_to_measure else comm.gather(
        _cache_probe(comm, shared, host, node_mounts, m.index, m.roots[m.index], m.paths, m.sizes, m.copies,
                     m.stats[1]) if measure_cache else None)
    if spec.drop_caches and measure_cache:
        # the probe opened the shards to look at their pages: that warmed the inodes and dentries the
        # run's first opens would otherwise read cold (docs/numbers.md, open latency); drop them again
        comm.barrier()
        if leader:
            cache.drop_caches()
        comm.barrier()
    return spec, Node(shared, node_mounts, host, leader, probes if measure_cache else None)



def _reduce(c, run: Run, partial: bool, roots, checkpoints, failure: str | None):
    """(partial, every rank's (mount, run.part), reduced counters, checkpoints, the ranks' failures)
    of the ranks of c."""
    flag = bool(c.allreduce(int(partial), "max"))
    parts = c.gather((run.mount, run.part))
    failures = [f for f in c.allgather(failure) if f]   # every rank: how many notices it was sent
    ck = (_checkpointing().reduce_ops(c, {"write": checkpoints.counters["write"]}, checkpoints.spec)
          if checkpoints else None)
    # a stopped run's window is what it ran: from its first counted completion to its last
    window = run.spec.duration_s if run.spec.fixed_window and not flag else None
    return flag, parts, reduce_results(c, run.result, roots, window, run.spec.engine_extra.get("endpoints")), ck, failures


def _put_together(comm, reduce):
    """reduce(comm) over every rank: (partial, parts, reduced, checkpoints, ranks missing). A stopped or
    hung rank holds the collectives: the ranks that answered put their results together without it,
    rank 0 writes them naming the others, then ends the job."""
    try:
        out = reduce(comm)
        comm.all_answered()
        return (*out, [])
    except RanksNotAnswering:
        answering = comm.answering()
        if comm.rank != 0:
            if answering is None:   # rank 0 did not answer: nobody is left to write the result
                raise RanksNotAnswering(STOP_GRACE_S, [0]) from None
            try:
                reduce(answering)
            except RanksNotAnswering:
                pass
            # give rank 0 the time to write the result and end the job, rather than end it now
            time.sleep(2 * STOP_GRACE_S)
            raise
        missing = comm.missing_ranks()
        try:
            _flag, parts, reduced, ck, failures = reduce(answering)
        except RanksNotAnswering:   # one that answered went silent too: rank 0's own counters, then
            _flag, parts, reduced, ck, failures = reduce(SerialComm())
        reduced["ranks"] = comm.size   # the run's size; per_rank holds the ranks that answered
        return True, parts, reduced, ck, failures, missing
