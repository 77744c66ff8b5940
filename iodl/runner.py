"""One run of `iodl read` on every rank: the resolved run's data opened, the caches looked at, its
pattern run, the ranks' counters put together, and on rank 0 the result printed and written."""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from . import cache, checkpoint, dlio_output, engines, limits
from . import comm as comm_mod
from .checkpoint_run import BLOCK_SIZE, IODEPTH, Checkpoints, Plan, TrainingCheckpoints, layout_for, reduce_ops, signature
from .comm import NodeShared, RanksNotAnswering, SerialComm, collective
from .data.generate import ensure_default_dataset
from .data.manifest import read_manifests, workload_for_roots
from .data.open import open_dataset
from .data.tables import int_rows
from .dlio import looks_like_yaml
from .errors import UsageError
from .metrics import LIVE_SLOT, RankResult, new_series, process_age_s, reduce_results
from .mlperf import data_size
from .patterns import Run
from .plan import mount_of, ranks_of_mount
from .progress import Progress
from .report import SCHEMA, check_output_path, make_console, print_result, write_result
from .runspec import resolve
from .s3root import is_s3
from .series import write_csv
from .sizing import sizing_block
from .stop import STOP_GRACE_S, Interrupt


def _setup(comm, args, patterns: dict, run_index: int):
    """Everything that can fail on bad input, done before any I/O, on every rank."""
    manifests = read_manifests([r for r in args.root if not is_s3(r)])   # read once: open_dataset takes them from the spec
    if any(is_s3(r) for r in args.root):
        from .s3dataset import fetch_manifest   # awscrt: loaded only for a bucket
        manifests.update((r, fetch_manifest(r, args.endpoint)) for r in args.root if is_s3(r))
    wl = workload_for_roots(manifests, args.workload)
    spec = resolve(args, wl, patterns, run_index, manifests)
    for flag, path in (("--out", args.out), ("--csv", args.csv)):
        if path:
            check_output_path(flag, path)   # found before the run, not after it has been lost
    if args.runs > 1 and args.csv:
        raise UsageError("--csv holds one run's time series: leave it out with --runs (--out keeps every run)")
    if args.dlio_dir:
        _check_dlio_dir(args.dlio_dir, spec.pattern)
    return spec, _checkpoint_setup(comm, spec)


def _checkpoint_setup(comm, spec):
    """train-sync's in-training checkpoints: (plan, share, names, bytes) or None (docs/checkpoint.md)."""
    if not spec.checkpoint_roots:
        return None
    if spec.pattern != "train-sync":
        raise UsageError(f"--checkpoint-root: in-training checkpoints are train-sync's, not {spec.pattern}'s")
    if len(spec.checkpoint_roots) > comm.size:
        raise UsageError(f"{len(spec.checkpoint_roots)} checkpoint roots for {comm.size} rank(s): every root needs a rank")
    wl = spec.workload
    cm = wl.checkpoint_model()
    lay = checkpoint.layout(cm, comm.size)
    roots = [os.path.abspath(r) for r in spec.checkpoint_roots]
    # written for real even when the run reads with null (no dataset) or asyncio (reads only)
    engine = engines.choose("auto" if spec.engine in ("null", "asyncio") else spec.engine, spec.direct, writes=True)
    plan = Plan(roots=roots, writes=0, reads=0, fsync=wl.checkpoint.fsync, direct=spec.direct, engine=engine,
                iodepth=engines.depth(engine, IODEPTH), block_size=BLOCK_SIZE, drop_caches=False,
                signature=signature(cm, lay, spec.direct))
    return (plan, *layout_for(comm, cm, roots, spec.direct)[:3])


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


def _datasize_warning(wl, reduced: dict, shards: int, root: str, console) -> None:
    """MLPerf Storage's dataset-size rule (iodl datasize) for this run's ranks and hosts: say so
    when the dataset is smaller. Memory: rank 0's host's, taken as every host's."""
    need = data_size(wl, reduced["ranks"], len(reduced["hosts"]), cache.meminfo().get("MemTotal", 0))
    if shards < need.files:
        console.print(f"[yellow]warning:[/] {root} holds {shards:,} files; MLPerf Storage's rules ask at least "
                      f"{need.files:,} for {reduced['ranks']} accelerator(s) on {len(reduced['hosts'])} host(s) "
                      f"(500 steps x batch, and 5x the client memory): `iodl datasize` says why")


@dataclass
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


@dataclass
class Node:
    """What the ranks of a node share: the live counters' block, the host name, the cache probes."""
    shared: NodeShared
    mounts: list[int]              # the mount of each rank of the node
    host: str
    leader: bool                   # the node's first rank: it drops the caches
    probes: list | None            # rank 0: every rank's cache probe (None: the cache is not measured)


def run_once(comm, args, patterns: dict, run_index: int = 0) -> tuple[int, dict | None, dict | None]:
    """One run of one of `patterns`: (exit code, the result on rank 0 else None, DLIO's summary.json of
    it or None). run_index: --runs' run."""
    stop = Interrupt()
    spec, ck_setup = collective(comm, lambda: _setup(comm, args, patterns, run_index))
    wall_start = time.time()
    # every rank's host, before any rank can stop answering
    facts = comm.gather(dlio_output.host_facts()) if args.dlio_dir else None
    pattern = patterns[spec.pattern]
    m = _open_mount(comm, spec, pattern.accelerators)
    spec = collective(comm, lambda: _request_size(spec, m))
    spec, node = _prepare_node(comm, spec, m)
    mine = RankResult(rank=comm.rank, host=node.host, mount=m.index,
                      series=new_series(spec.ramp_s + spec.duration_s if spec.fixed_window else None),
                      live=np.frombuffer(node.shared.mm, dtype=np.int64, count=LIVE_SLOT // 8,
                                         offset=node.shared.node_rank * LIVE_SLOT))
    console = make_console() if comm.rank == 0 else None
    if console and node.probes is not None:
        for line in cache.small_dataset_warnings(cache.node_view(node.probes, [])):
            console.print(f"[yellow]warning:[/] {line}")
    checkpoints = Checkpoints(comm, *ck_setup) if ck_setup is not None else None
    run = Run(comm=comm, spec=spec, paths=m.paths, sizes=int_rows(m.sizes), sample_ends=m.sample_ends,
              mount=m.index, n_mounts=len(m.roots), host=node.host, result=mine, stop=stop,
              on_epoch=(lambda _epoch: cache.drop_caches()) if spec.drop_caches == "epoch" and node.leader else None,
              total_samples=m.total_samples,
              after_step=TrainingCheckpoints(checkpoints, spec.workload.checkpoint) if checkpoints else None)
    progress = _progress(comm, args, spec, pattern, m, node, console)
    startup_s = process_age_s()
    wall_run = time.time()   # the steps' times count from the start barrier, which follows this at once
    try:
        stop.arm()
        partial = pattern.run(run)
    except KeyboardInterrupt:
        # the signal landed outside the pattern's own waits (opening the engine, closing files):
        # what was counted is in `mine` all the same, and what it hands over is in run.part
        partial = True
    finally:
        stop.disarm()
        if progress is not None:
            progress.stop()
        if checkpoints is not None:
            checkpoints.close()
    mine.note_process(startup_s)
    if stop():
        comm.give_up_after(STOP_GRACE_S)
    partial, parts, reduced, ck_reduced, missing = _put_together(
        comm, lambda c: _reduce(c, run, partial or stop(), m.roots, checkpoints, ck_setup))
    if comm.rank != 0:
        return (130 if partial else 0), None, None   # partial: agreed by every rank (_reduce)
    result = _result(spec, pattern, parts, reduced, partial, node.probes, len(m.roots))
    if ck_reduced is not None:
        result["checkpoint"] = {"write": ck_reduced["checkpoint"]["write"], "fsync": ck_setup[0].fsync,
                                "roots": ck_setup[0].roots}
    if missing:
        result["missing_ranks"] = missing
    summary = _report(args, spec, pattern, result, m, reduced, parts, facts, (wall_start, wall_run), ck_reduced,
                      missing, console)
    if missing:
        raise RanksNotAnswering(STOP_GRACE_S, missing)   # one line, and the launcher ends the job
    if result["total"]["errors"]:
        return 1, result, summary
    return (130 if partial else 0), result, summary  # 130: the shell's code for "ended by SIGINT"


def _open_mount(comm, spec, accelerators: bool) -> Mount:
    """This rank's mount, opened by the ranks of a node that read it together: a plain directory is
    listed once per node, a generated dataset's tables are mapped (shared pages), names derived."""
    wl = spec.workload
    roots = [r if is_s3(r) else os.path.abspath(r) for r in spec.roots]
    if spec.engine == "null" and not roots and accelerators:
        ds = wl.dataset   # the null engine needs no dataset: shard and sample sizes come from the workload
        ends = np.cumsum(np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64))
        sizes = [int(ends[-1])] * (ds.files * ds.copies)
        return Mount(["(null: no dataset)"], 0, None, sizes, lambda i: ends, len(sizes) * ds.samples_per_file,
                     (int(np.max(sizes, initial=0)), int(np.sum(sizes, dtype=np.int64))), synthetic=True)
    if not roots:
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
        ds = collective(comm, lambda: open_s3_dataset(roots[mount], spec.manifests[roots[mount]],
                                                      spec.engine_extra.get("endpoint")))
    else:
        ds = collective(comm, lambda: open_dataset(roots[mount], group=group, derive=derive,
                                                   samples_per_file=per_file, manifests=spec.manifests))
    return Mount(roots, mount, ds.paths, ds.sizes, ds.sample_ends, ds.total_samples, (ds.largest, ds.total_bytes),
                 ds.copies, manifest=ds.manifest)


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
    node_mounts = shared.node.allgather(m.index)
    # the host name the result groups by, one per node even where nodes share a name (comm.py)
    host = comm_mod.node_host_name(comm, shared)
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
    comm.barrier()  # every node's cache is dropped before any rank looks or reads
    measure_cache = not m.synthetic and not spec.direct and not getattr(m.paths, "objects", False)
    probes = comm.gather(_cache_probe(comm, shared, host, node_mounts, m.index, m.roots[m.index], m.paths, m.sizes,
                                      m.copies, m.stats[1]) if measure_cache else None)
    if spec.drop_caches and measure_cache:
        # the probe opened the shards to look at their pages: that warmed the inodes and dentries the
        # run's first opens would otherwise read cold (docs/numbers.md, open latency); drop them again
        comm.barrier()
        if leader:
            cache.drop_caches()
        comm.barrier()
    return spec, Node(shared, node_mounts, host, leader, probes if measure_cache else None)


def _progress(comm, args, spec, pattern, m: Mount, node: Node, console) -> Progress | None:
    """Rank 0's live per-mount MB/s (--progress), started."""
    if comm.rank != 0 or not (args.progress == "on" or (args.progress == "auto" and console.is_terminal)):
        return None
    # storage-only and infer-async are measured over [ramp, ramp + duration] after the start
    # barrier, fixed in advance (their ranks are not in step); train-sync over its steps' span
    total_s = spec.ramp_s + spec.duration_s if spec.fixed_window else (spec.duration_s or 0.0)
    total_steps = pattern.planned_steps(spec, m.total_samples, len(ranks_of_mount(m.index, len(m.roots), comm.size)))
    return Progress(node.shared.mm, node.mounts, m.roots, total_s=total_s,
                    total_steps=total_steps if not spec.duration_s else 0,
                    other_nodes=node.shared.node_size < comm.size or not node.shared.shared, console=console).start()


def _reduce(c, run: Run, partial: bool, roots, checkpoints, ck_setup):
    """(partial, every rank's (mount, run.part), reduced counters, checkpoints) of the ranks of c."""
    flag = bool(c.allreduce(int(partial), "max"))
    parts = c.gather((run.mount, run.part))
    ck = reduce_ops(c, {"write": checkpoints.counters["write"]}, ck_setup[0], flag) if checkpoints else None
    # a stopped run's window is what it ran: from its first counted completion to its last
    window = run.spec.duration_s if run.spec.fixed_window and not flag else None
    return flag, parts, reduce_results(c, run.result, roots, window), ck


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
            _flag, parts, reduced, ck = reduce(answering)
        except RanksNotAnswering:   # one that answered went silent too: rank 0's own counters, then
            _flag, parts, reduced, ck = reduce(SerialComm())
        reduced["ranks"] = comm.size   # the run's size; per_rank holds the ranks that answered
        return True, parts, reduced, ck, missing


def _result(spec, pattern, parts, reduced: dict, partial: bool, probes, n_mounts: int) -> dict:
    """Rank 0: the run's result (iodl/result.py), the pattern's own blocks in it."""
    blocks = pattern.summarize(spec, parts, reduced, partial)   # before the result: it may re-window reduced
    result = {"schema": SCHEMA, "pattern": spec.pattern, "engine": spec.engine, "direct": spec.direct,
              "iodepth": spec.iodepth, "block_size": spec.block_size, "ranks": reduced["ranks"],
              "hosts": reduced["hosts"], "workload": spec.workload.to_dict(), "seed": spec.seed,
              "duration_s": spec.duration_s or None, "ramp_s": spec.ramp_s if spec.fixed_window else None,
              "partial": partial, "window_s": reduced["window_s"], "total": reduced["total"],
              "mounts": reduced["mounts"], "per_rank": reduced["per_rank"], **blocks}
    if probes is not None:
        result["nodes"] = cache.node_view(probes, reduced["per_rank"])
        result["total"]["cache"], per_mount = cache.cache_blocks(result["nodes"], n_mounts)
        for entry, block in zip(result["mounts"], per_mount):
            entry["cache"] = block
        result["drop_caches"] = spec.drop_caches
    demand = pattern.demand(spec, parts, n_mounts)
    if demand is not None and math.isfinite(demand[0]):   # a workload without compute time asks for no particular rate
        result["sizing"] = sizing_block(result, *demand)
    if reduced["series"] is not None:
        result["series"] = reduced["series"]
    return result


def _report(args, spec, pattern, result: dict, m: Mount, reduced: dict, parts, facts, walls, ck_reduced, missing,
            console) -> dict | None:
    """Rank 0: the result printed and written, DLIO's files written; DLIO's summary.json or None."""
    print_result(result, console, detail=args.detail)
    if ck_reduced is not None:
        w = result["checkpoint"]["write"]
        console.print(f"in-training checkpoints: {w['rounds'] if w else 0} written"
                      + (f", {w['bytes'] / 1e9:,.3f} GB in {w['duration_s']:.2f} s ({w['bandwidth_MBps']:,.1f} MB/s); "
                         f"the steps waited {result['train']['checkpoint_s_per_step']:.3f} s per step for them"
                         if w else ""), highlight=False, markup=False)
    if pattern.accelerators and not m.synthetic:
        _datasize_warning(spec.workload, reduced, len(m.sizes), m.roots[m.index], console)
    summary = None
    if args.dlio_dir and pattern.accelerators and missing:
        console.print("DLIO's files are not written: some ranks did not answer, and DLIO's figures are of "
                      "every rank", highlight=False, markup=False)
    elif args.dlio_dir and pattern.accelerators:
        summary = _write_dlio(args, spec.workload, spec, result, [r for _m, r in parts], facts, len(m.sizes), walls,
                              ck_reduced, console)
    if args.out and args.runs == 1:
        write_result(result, args.out)
    if args.csv:
        write_csv(result, args.csv)
    return summary


def _write_dlio(args, wl, spec, result: dict, steps: list, facts: list[dict], files: int,
                walls: tuple[float, float], ck_reduced, console) -> dict:
    """DLIO's files of this run in mlpstorage's run directory (iodl/dlio_output.py); its summary.
    walls: wall clock at the run's start (after set-up's checks) and just before its start barrier."""
    hosts = [p["host"] for p in sorted(result["per_rank"], key=lambda p: p["rank"])]
    ck_bytes = 0
    if ck_reduced is not None and result["checkpoint"]["write"]:
        w = result["checkpoint"]["write"]
        ck_bytes = w["bytes"] // max(w["rounds"], 1)
    wall_start, wall0 = walls
    summary = dlio_output.summary(steps, facts, hosts, wl, files, wall_start, time.time(), ck_bytes)
    outputs = [dlio_output.rank_output(rows, fact, summary["data_size_per_host_GB"], wall0) for rows, fact in zip(steps, facts)]
    config = dlio_output.dlio_config(wl, files, spec.batch_size, spec.compute_time_s, spec.epochs, ck_bytes > 0, spec.steps)
    overrides = [f"workload={wl.name}", f"++workload.dataset.num_files_train={files}"]
    model = config["workload"]["model"]["name"]
    path = dlio_output.write_run(args.dlio_dir, dlio_output.run_directory(args.dlio_dir, model, wall_start), summary, outputs,
                         config, overrides, result)
    m = summary["metric"]
    if m:
        console.print(f"DLIO's figures (docs/mlperf.md): AU {m['train_au_mean_percentage']:.2f} % "
                      f"({m['train_au_meet_expectation']}), {m['train_throughput_mean_samples_per_second']:,.1f} "
                      f"samples/s, {m['train_io_mean_MB_per_second']:,.1f} MiB/s; written to {path}",
                      highlight=False, markup=False)
    return summary
