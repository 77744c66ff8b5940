"""`iodl checkpoint`: an MLPerf-Storage-style checkpoint of a model (docs/checkpoint.md).

`--plan` lists what every rank writes in one checkpoint, in DLIO's arithmetic (iodl/checkpoint.py),
without I/O and without MPI: a laptop plans llama3-1t's 1024 ranks in a blink. The run (writing
and reading the checkpoints under --root) takes each rank's files from iodl.checkpoint.rank_files.
"""
from __future__ import annotations

HELP = "what each rank of an MLPerf-Storage-style checkpoint writes (--plan: files and bytes, no I/O)"

GiB = 1 << 30


def add_arguments(p) -> None:
    from ..limits import cli_int

    p.add_argument("--workload", required=True, metavar="NAME|FILE",
                   help="a workload with [model]: llama3-8b, llama3-70b, llama3-405b, llama3-1t, unet3d, or a "
                        "TOML or DLIO/MLPerf YAML file")
    p.add_argument("--plan", action="store_true", help="list every rank's files and bytes and the totals; no I/O")
    p.add_argument("--ranks", type=cli_int, metavar="N",
                   help="MPI ranks (default the workload's TP x PP x DP); fewer: MLPerf's subset mode, the first N "
                        "ranks' shares of the full checkpoint")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (docs/checkpoint.md)")


def run(args) -> int:
    from ..errors import UsageError

    if not args.plan:
        raise UsageError("iodl checkpoint: writing and reading checkpoints needs --root DIR, which this version does "
                         "not run yet: give --plan to list what each rank writes")
    return plan(args)


def plan_dict(p) -> dict:
    """The JSON form of a plan: exactly model, ranks, total_bytes, per_rank_bytes, files."""
    return {
        "model": p.name,
        "ranks": p.layout.ranks,
        "total_bytes": p.total_bytes,
        "per_rank_bytes": p.per_rank_bytes,
        "files": [[{"name": n, "bytes": b} for n, b in fs] for fs in p.files],
    }


def plan(args) -> int:
    import json

    from .. import checkpoint, limits
    from ..workload import load_workload

    if args.ranks is not None:
        limits.check_range("--ranks", args.ranks, 1, limits.MAX_RANKS, integer=True)
    wl = load_workload(args.workload, need_dataset=False)
    cm = wl.checkpoint_model()
    p = checkpoint.plan(cm, args.ranks)
    if args.json:
        print(json.dumps(plan_dict(p)))
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
        shape = f"{m.type}, {m.model_size:,} B flat"
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
    console.print(f"{when}, fsync {'on' if ck.fsync else 'off'}; files go in CHECKPOINT/global_epochE_stepS/",
                  highlight=False, markup=False)
