"""The terminal tables of `iodl checkpoint` (iodl/cmd/checkpoint.py): a checkpoint's plan, and a
run's result (docs/checkpoint.md)."""
from __future__ import annotations

from .report import print_table

GiB = 1 << 30


def print_result(result: dict, console) -> None:
    """A checkpoint run's result: the write and read figures, the cache, MLPerf's category."""
    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    ck = result["checkpoint"]
    say(f"{result['model']}: {result['ranks']} rank(s) on {len(result['hosts'])} host(s), engine {result['engine']}"
        f"{' direct' if result['direct'] else ''}, iodepth {result['iodepth']}, block {result['block_size']:,} B")
    if result["subset"]:
        say(f"subset mode (MLPerf): these {result['ranks']} ranks write their shares of the "
            f"{result['full_ranks']:,} ranks' checkpoint")
    ops = [(op, ck[op]) for op in ("write", "read") if ck.get(op)]
    rows = [[op + (" + fsync" if b.get("fsync") else ""), f"{b['bytes'] / 1e9:,.3f}", f"{b['duration_s']:.2f}",
             f"{b['bandwidth_MBps']:,.1f}", f"{b['min_rank_bandwidth_MBps']:,.1f}",
             f"{b['latency_us']['p99'] / 1e3:,.2f}",
             f"{b['fsync_latency_us']['p50'] / 1e3:,.1f}" if b.get("fsync_latency_us") else "-"] for op, b in ops]
    print_table(console, "checkpoints (" + ", ".join(f"{b['rounds']} {op}(s)" for op, b in ops) + ")",
                [("", "left"), ("GB", "right"), ("s", "right"), ("MB/s", "right"), ("min rank MB/s", "right"),
                 ("p99 ms", "right"), ("fsync p50 ms", "right")], rows)
    if result.get("endpoints"):
        print_table(console, "requests per endpoint (PUT: a part or a whole object; GET: one range)",
                    [("", "left"), ("endpoint", "left"), ("ranks", "left"), ("GB", "right"), ("MB/s", "right"),
                     ("ops/s", "right"), ("p99 ms", "right"), ("retries", "right"), ("errors", "right"),
                     ("LISTs", "right")],
                    [[("PUT" if op == "write" else "GET"), e["url"], _span(e["ranks"]) if e["ranks"] else "-",
                      f"{e['bytes'] / 1e9:,.3f}", f"{e['bandwidth_MBps']:,.1f}", f"{e['ops_per_s']:,.1f}",
                      f"{e['latency_us']['p99'] / 1e3:,.2f}", str(e["retries"]), str(e["errors"]), str(e["lists"])]
                     for op, b in ops for e in b["endpoints"]])
    read = ck.get("read")
    if read and read.get("cache_hit_fraction") is not None:
        say(f"read back: {read['cache_hit_fraction']:.1%} came from the page cache"
            + ("" if result["drop_caches"] else " (--drop-caches empties it first, as MLPerf's rules ask)"))
    if result["partial"]:
        say("stopped: the figures cover what ran before the stop")
    m = result.get("mlperf")
    if m and m["category"]:
        say(f"MLPerf Storage: {m['category']}" + (": " + "; ".join(m["reasons"]) if m["reasons"] else ""))


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


def print_plan(wl, p, console) -> None:
    """One checkpoint's plan (checkpoint.plan) of workload wl: its totals, then each kind of rank."""
    m, par, lay, ck = wl.model, wl.parallelism, p.layout, wl.checkpoint
    per_rank, nfiles = p.per_rank_bytes, [len(fs) for fs in p.files]
    if m.is_transformer:
        shape = (f"{m.num_layers} layers, hidden {m.hidden_size:,}, vocab {m.vocab_size:,}, "
                 f"{m.model_datatype}/{m.optimizer_datatype}")
    else:
        shape = f"{m.type}, {m.model_size:,} B flat" + (f", {m.layout}'s files" if m.layout != "dlio" else "")
    lo, hi = min(per_rank), max(per_rank)
    spread = (f"{_gib(lo)} each" if lo == hi else
              f"{_gib(lo)} (rank {per_rank.index(lo)}) to {_gib(hi)} (rank {per_rank.index(hi)})")
    files = f"{min(nfiles)} each" if min(nfiles) == max(nfiles) else f"{min(nfiles)} to {max(nfiles)}"
    print_table(console, None, [("one checkpoint", "left"), (p.name, "left")], [
        ["model", shape], ["TP x PP x DP", f"{par.tensor} x {par.pipeline} x {lay.data} = {lay.full_ranks(par):,}"],
        ["ZeRO stage", str(par.zero_stage)], ["ranks", f"{lay.ranks:,}" + (" (subset)" if lay.subset else "")],
        ["checkpoint", f"{p.total_bytes:,} B = {p.total_bytes / 1e9:,.2f} GB = {_gib(p.total_bytes)}"],
        ["per rank", spread], ["files per rank", f"{files}, {sum(nfiles):,} in all"]])
    kinds = p.kinds()
    print_table(console, None, [("ranks", "left"), ("files", "right"), ("each rank", "right"),
                                ("first file (of the first rank)", "left")],
                [[_span(rs), str(len(sizes)), _gib(sum(sizes)), p.files[rs[0]][0][0] if sizes else "-"]
                 for rs, sizes in kinds[:12]])
    if len(kinds) > 12:
        console.print(f"... {len(kinds) - 12} more kinds of rank: --json lists every rank's files", highlight=False)
    if lay.subset:
        console.print(f"subset mode (MLPerf): {lay.ranks:,} of the {lay.full_ranks(par):,} ranks of TP x PP x DP "
                      f"write their shares, {p.total_bytes / GiB:,.2f} GiB of the full checkpoint", highlight=False)
    if wl.dataset is None:
        when = f"a checkpoint run writes {ck.writes} and reads {ck.reads} of them"
    elif ck.every_steps:
        when = f"training checkpoints every {ck.every_steps:,} steps"
    else:
        when = f"training checkpoints after epoch {ck.after_epoch}, then every {ck.every_epochs} epoch(s)"
    console.print(f"{when}, fsync {'on' if ck.fsync else 'off'}; files go in ROOT/ckpt-NNNNNN/",
                  highlight=False, markup=False)
