"""`iodl checkpoint`: an MLPerf-Storage-style checkpoint of a model (docs/checkpoint.md).

`--plan` lists what every rank writes in one checkpoint, in DLIO's arithmetic (iodl/checkpoint.py),
without I/O and without MPI: a laptop plans llama3-1t's 1024 ranks in a blink. With `--root`,
every MPI rank writes its files (fsync'd), caches are dropped, and the latest checkpoint is read
back (iodl/checkpoint_run.py); the figures are docs/numbers.md's "Checkpoints".
"""
from __future__ import annotations

import json
import os
import time

GiB = 1 << 30


def add_arguments(p) -> None:
    from .. import engines
    from ..checkpoint_run import BLOCK_SIZE, IODEPTH
    from ..limits import cli_int

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
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="where checkpoints go: a new or empty directory, or one iodl wrote checkpoints in "
                        "(repeatable: ranks map to roots round-robin)")
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
    from ..errors import UsageError

    if args.plan:
        if args.root:
            raise UsageError("--plan does no I/O: leave out --root (or --plan, to write checkpoints)")
        return plan(args)
    if not args.root:
        raise UsageError("iodl checkpoint: give --root DIR to write and read checkpoints there, or --plan to "
                         "list what each rank writes")
    return checkpoint_run(comm, args)


def _setup(comm, args):
    """Everything that can fail on bad input, on every rank, before any I/O."""

    from .. import cache, checkpoint, engines, limits
    from ..checkpoint_run import Plan, layout_for, signature
    from ..errors import UsageError
    from ..outputs import check_output_path
    from ..units import parse_size
    from ..workload import load_workload

    wl = load_workload(args.workload, need_dataset=False, dlio_version=args.dlio_version)
    cm = wl.checkpoint_model()
    if args.ranks is not None:
        raise UsageError("--ranks is for --plan: a run has as many ranks as mpirun starts")
    lay = checkpoint.layout(cm, comm.size)
    writes = args.writes if args.writes is not None else wl.checkpoint.writes
    reads = args.reads if args.reads is not None else wl.checkpoint.reads
    for flag, value in (("--writes", writes), ("--reads", reads)):
        limits.check_range(flag, value, 0, 10_000, integer=True)
    if not writes and not reads:
        raise UsageError("nothing to do: --writes and --reads are both 0")
    if len(args.root) > comm.size:
        raise UsageError(f"{len(args.root)} roots for {comm.size} rank(s): every root needs a rank")
    block = parse_size(args.block_size, "--block-size")
    # a checkpoint is written in large requests: a tiny one would turn a GB into a day of syscalls
    limits.check_range("--block-size", block, 4096, limits.MAX_BLOCK_SIZE, integer=True)
    limits.check_block_size("--block-size", block, args.direct)
    limits.check_range("--iodepth", args.iodepth, 1, limits.MAX_DEPTH, integer=True)
    engine = engines.choose(args.engine, args.direct, writes=True)
    iodepth = engines.depth(engine, args.iodepth)
    limits.check_memory(f"--iodepth {iodepth} x --block-size {block}", limits.buffers_bytes(iodepth, block))
    if args.drop_caches:
        cache.check_can_drop()
    if args.out:
        check_output_path("--out", args.out)
    if args.dlio_dir:
        from ..dlio_output import check_directory

        check_directory(args.dlio_dir)
    roots = [os.path.abspath(r) for r in args.root]
    fsync = wl.checkpoint.fsync and not args.no_fsync
    run_plan = Plan(roots=roots, writes=writes, reads=reads, fsync=fsync, direct=args.direct, engine=engine,
                    iodepth=iodepth, block_size=block, drop_caches=args.drop_caches,
                    signature=signature(cm, lay, args.direct))
    # every rank's files: a mount's leader records its ranks' names before writing and checks the space
    share, names, need, _lay = layout_for(comm, cm, roots, args.direct)
    return wl, cm, lay, run_plan, share, names, need


def checkpoint_run(comm, args) -> int:
    from ..checkpoint_run import execute
    from ..comm import collective
    from ..outputs import write_result
    from ..report import make_console
    from ..stop import Interrupt

    stop = Interrupt()
    wl, cm, lay, run_plan, share, names, need = collective(comm, lambda: _setup(comm, args))
    gap = _read_gap(run_plan) if comm.rank == 0 and not run_plan.writes else None
    wall_start = time.time()
    if args.dlio_dir:
        from ..dlio_output import host_facts

        facts = comm.gather(host_facts())
    stop.arm()
    try:
        reduced = execute(comm, run_plan, share, names, need, stop)
    finally:
        stop.disarm()
    if comm.rank != 0:
        return 0
    result = {"schema": "iodl.checkpoint/1", "pattern": "checkpoint", "engine": run_plan.engine,
              "direct": run_plan.direct, "iodepth": run_plan.iodepth, "block_size": run_plan.block_size,
              "ranks": comm.size, "hosts": reduced["hosts"], "workload": wl.to_dict(), "model": cm.name,
              "subset": lay.subset, "full_ranks": lay.full_ranks(cm.parallelism), "fsync": run_plan.fsync,
              "drop_caches": run_plan.drop_caches, "roots": run_plan.roots, "partial": reduced["partial"],
              "checkpoint": reduced["checkpoint"]}
    from ..cache import meminfo
    from ..mlperf import checkpoint_view

    result["mlperf"] = checkpoint_view(result, run_plan.writes, run_plan.reads, gap, meminfo().get("MemTotal", 0))
    _print_result(result, make_console())
    if args.out:
        write_result(result, args.out)
    if args.dlio_dir:
        _write_dlio(args.dlio_dir, result, wl, run_plan, facts, wall_start)
    return 130 if result["partial"] else 0


def _write_dlio(base: str, result: dict, wl, plan, facts: list[dict], wall_start: float) -> None:
    """DLIO's files of this checkpoint run in mlpstorage's layout (iodl/dlio_output.py)."""
    from .. import dlio_output as out

    summary = out.checkpoint_summary(result, facts, wall_start, time.time())
    config = out.checkpoint_config(result, wl, plan.writes, plan.reads, plan.roots[0])
    overrides = [f"workload={result['model'].replace('-', '_')}",     # MLPerf's file: llama3_8b.yaml
                 f"++workload.checkpoint.checkpoint_folder={plan.roots[0]}",
                 f"++workload.checkpoint.num_checkpoints_write={plan.writes}",
                 f"++workload.checkpoint.num_checkpoints_read={plan.reads}"]
    path = out.write_run(base, out.run_directory(base, result["model"], wall_start, kind="checkpointing"), summary,
                         [], config, overrides, result)
    print(f"DLIO's figures (docs/mlperf.md) written to {path}")


def _read_gap(plan) -> float | None:
    """A read-only run: seconds from the end of the last checkpoint written in its first root to
    this process's start (None when the store does not say when that was)."""

    from ..checkpoint_run import read_store
    from ..metrics import process_age_s

    done = [e for e in ((read_store(plan.roots[0]) or {}).get("checkpoints") or []) if e.get("state") == "complete"]
    if not done or not isinstance(done[-1].get("completed_at"), (int, float)):
        return None
    return time.time() - process_age_s() - done[-1]["completed_at"]


def _print_result(result: dict, console) -> None:
    from ..report import print_table

    ck = result["checkpoint"]
    head = (f"{result['model']}: {result['ranks']} rank(s) on {len(result['hosts'])} host(s), "
            f"engine {result['engine']}{' direct' if result['direct'] else ''}, iodepth {result['iodepth']}, "
            f"block {result['block_size']:,} B")
    console.print(head, highlight=False, markup=False)
    if result["subset"]:
        console.print(f"subset mode (MLPerf): these {result['ranks']} ranks write their shares of the "
                      f"{result['full_ranks']:,} ranks' checkpoint", highlight=False, markup=False)
    rows = []
    for op in ("write", "read"):
        b = ck.get(op)
        if not b:
            continue
        fs = b.get("fsync_latency_us")
        rows.append([op + (" + fsync" if b.get("fsync") else ""), f"{b['bytes'] / 1e9:,.3f}", f"{b['duration_s']:.2f}",
                     f"{b['bandwidth_MBps']:,.1f}", f"{b['min_rank_bandwidth_MBps']:,.1f}",
                     f"{b['latency_us']['p99'] / 1e3:,.2f}", f"{fs['p50'] / 1e3:,.1f}" if fs else "-"])
    rounds = {op: ck[op]["rounds"] for op in ("write", "read") if ck.get(op)}
    print_table(console, "checkpoints (" + ", ".join(f"{n} {op}(s)" for op, n in rounds.items()) + ")",
                [("", "left"), ("GB", "right"), ("s", "right"), ("MB/s", "right"), ("min rank MB/s", "right"),
                 ("p99 ms", "right"), ("fsync p50 ms", "right")], rows)
    read = ck.get("read")
    if read and read.get("cache_hit_fraction") is not None:
        console.print(f"read back: {read['cache_hit_fraction']:.1%} came from the page cache"
                      + ("" if result["drop_caches"] else " (--drop-caches empties it first, as MLPerf's rules ask)"),
                      highlight=False, markup=False)
    if result["partial"]:
        console.print("stopped: the figures cover what ran before the stop", highlight=False, markup=False)
    m = result.get("mlperf")
    if m and m["category"]:
        console.print(f"MLPerf Storage: {m['category']}" + (": " + "; ".join(m["reasons"]) if m["reasons"] else ""),
                      highlight=False, markup=False)


def plan_dict(p, wl=None) -> dict:
    """The JSON form of a plan: model, ranks, total_bytes, per_rank_bytes, files and, given the
    workload, what a run of it does with them: writes, reads, fsync (docs/checkpoint.md)."""
    d = {
        "model": p.name,
        "ranks": p.layout.ranks,
        "total_bytes": p.total_bytes,
        "per_rank_bytes": p.per_rank_bytes,
        "files": [[{"name": n, "bytes": b} for n, b in fs] for fs in p.files],
    }
    if wl is not None:
        d.update(_schedule(wl))
    return d


def _schedule(wl) -> dict:
    """writes, reads and fsync of a run. A checkpoint-only workload: its writes and reads. A
    training workload checkpoints by epochs (the epochs after_epoch, after_epoch + every_epochs,
    ... up to epochs) and reads none back; by steps, the writes depend on the steps per epoch,
    which depend on the ranks: null."""
    ck = wl.checkpoint
    if wl.dataset is None:
        writes, reads = ck.writes, ck.reads
    elif ck.every_steps:
        writes, reads = None, 0
    else:
        epochs = wl.train.epochs
        writes = len(range(ck.after_epoch, epochs + 1, ck.every_epochs)) if ck.after_epoch <= epochs else 0
        reads = 0
    return {"writes": writes, "reads": reads, "fsync": ck.fsync}


def plan(args) -> int:
    from .. import checkpoint, limits
    from ..workload import load_workload

    if args.ranks is not None:
        limits.check_range("--ranks", args.ranks, 1, limits.MAX_RANKS, integer=True)
    wl = load_workload(args.workload, need_dataset=False, dlio_version=args.dlio_version)
    cm = wl.checkpoint_model()
    p = checkpoint.plan(cm, args.ranks)
    if args.json:
        print(json.dumps(plan_dict(p, wl)))
        return 0
    _print_plan(wl, p)
    return 0


def _gib(n: int) -> str:
    return f"{n / GiB:,.2f} GiB"


def _span(ranks: list[int]) -> str:
    """0-7,256-263 for a sorted list of ranks; long lists end with '... (N ranks)'."""
    runs, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    text = ",".join(runs[:3])
    return text + (f",... ({len(ranks):,} ranks)" if len(runs) > 3 else "")


def _print_plan(wl, p) -> None:
    from ..report import make_console, print_table

    m, par, lay = wl.model, wl.parallelism, p.layout
    per_rank = p.per_rank_bytes
    nfiles = [len(fs) for fs in p.files]
    if m.is_transformer:
        shape = (f"{m.num_layers} layers, hidden {m.hidden_size:,}, vocab {m.vocab_size:,}, "
                 f"{m.model_datatype}/{m.optimizer_datatype}")
    else:
        shape = f"{m.type}, {m.model_size:,} B flat" + (f", {m.layout}'s files" if m.layout != "dlio" else "")
    lo, hi = min(per_rank), max(per_rank)
    spread = (f"{_gib(lo)} each" if lo == hi else
              f"{_gib(lo)} (rank {per_rank.index(lo)}) to {_gib(hi)} (rank {per_rank.index(hi)})")
    files = f"{min(nfiles)} each" if min(nfiles) == max(nfiles) else f"{min(nfiles)} to {max(nfiles)}"
    rows = [
        ["model", shape],
        ["TP x PP x DP", f"{par.tensor} x {par.pipeline} x {lay.data} = {lay.full_ranks(par):,}"],
        ["ZeRO stage", str(par.zero_stage)],
        ["ranks", f"{lay.ranks:,}" + (" (subset)" if lay.subset else "")],
        ["checkpoint", f"{p.total_bytes:,} B = {p.total_bytes / 1e9:,.2f} GB = {_gib(p.total_bytes)}"],
        ["per rank", spread],
        ["files per rank", f"{files}, {sum(nfiles):,} in all"],
    ]
    console = make_console()
    print_table(console, None, [("one checkpoint", "left"), (p.name, "left")], rows)
    # ranks that write the same sizes, by the first rank of each kind
    kinds: dict[tuple, list[int]] = {}
    for r, fs in enumerate(p.files):
        kinds.setdefault(tuple(b for _n, b in fs), []).append(r)
    shown = sorted(kinds.items(), key=lambda kv: kv[1][0])
    krows = [[_span(rs), str(len(sizes)), _gib(sum(sizes)), p.files[rs[0]][0][0] if sizes else "-"]
             for sizes, rs in shown[:12]]
    print_table(console, None, [("ranks", "left"), ("files", "right"), ("each rank", "right"),
                                ("first file (of the first rank)", "left")], krows)
    if len(shown) > 12:
        console.print(f"... {len(shown) - 12} more kinds of rank: --json lists every rank's files", highlight=False)
    if lay.subset:
        console.print(f"subset mode (MLPerf): {lay.ranks:,} of the {lay.full_ranks(par):,} ranks of TP x PP x DP "
                      f"write their shares, {p.total_bytes / GiB:,.2f} GiB of the full checkpoint", highlight=False)
    ck = wl.checkpoint
    if wl.dataset is None:
        when = f"a checkpoint run writes {ck.writes} and reads {ck.reads} of them"
    elif ck.every_steps:
        when = f"training checkpoints every {ck.every_steps:,} steps"
    else:
        when = f"training checkpoints after epoch {ck.after_epoch}, then every {ck.every_epochs} epoch(s)"
    console.print(f"{when}, fsync {'on' if ck.fsync else 'off'}; files go in ROOT/ckpt-NNNNNN/",
                  highlight=False, markup=False)
