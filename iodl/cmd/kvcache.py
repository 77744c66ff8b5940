"""`iodl kvcache`: MLPerf Storage v3.0's LLM-inference KV-cache offload workload (docs/kvcache.md).

Every MPI rank is one of MLPerf's clients: its users' requests write and re-read KV-cache entries,
one file each, under its own folder of a root iodl owns. The figures are docs/numbers.md's
"KV cache"; the run is resolved once by iodl.kvcache.resolve, one rank runs it in
iodl/patterns/kvcache.py.
"""
from __future__ import annotations

import os

from .. import _native, engines, reduce
from ..comm import collective
from ..errors import UsageError
from ..kvcache import MODELS, OPTIONS, USER_TYPES, KVSpec, resolve
from ..limits import cli_float, cli_int
from ..metrics import RankResult, process_age_s
from ..kvcache_mlperf import option_summary, rank_summary, write_run
from ..patterns.kvcache import (KVCACHE, Entries, Tally, capacity, check_room, kv_block, prepare_root,
                                rank_directory, rank_sums)
from ..outputs import check_output_path, write_result
from ..report import make_console, print_table
from ..result import KVCACHE as SCHEMA
from ..stop import STOP_GRACE_S, Interrupt


def add_arguments(p) -> None:
    p.add_argument("--root", required=True, metavar="DIR",
                   help="where the entries go: a new or empty directory, or one an earlier kvcache run marked")
    p.add_argument("--option", type=int, choices=sorted(OPTIONS),
                   help="MLPerf's option: 1 llama3.1-8b x 200 users, 2 8b x 100 users + 4 GiB CPU tier, "
                        "3 llama3.1-70b-instruct x 70 users; 300 s each")
    p.add_argument("--model", choices=list(MODELS), help="the model (default: the option's)")
    p.add_argument("--bytes-per-token", type=cli_int, metavar="N",
                   help="KV bytes per token of a model of one's own (default: the model's)")
    p.add_argument("--users", type=cli_int, help="users per rank (default: the option's, else 100)")
    p.add_argument("--duration", type=cli_float, metavar="S", help="measured seconds (default 300)")
    p.add_argument("--trials", type=cli_int, default=1,
                   help="runs of the same option, one after the other (MLPerf's CLOSED: 3)")
    p.add_argument("--seed", type=cli_int, default=42, help="rank r draws with seed + r (default 42, MLPerf's)")
    p.add_argument("--cpu-memory-gb", type=cli_float, metavar="GB", help="the CPU tier in front of the storage, GiB "
                                                                        "(default: the option's, else 0: none)")
    p.add_argument("--max-concurrent-writes", type=cli_int, metavar="N",
                   help="entries written at once per rank (default: the option's, 16; 4 for 70B)")
    p.add_argument("--workers", type=cli_int, metavar="N", help="requests served at once per rank "
                                                                "(default min(users, 500), as kv-cache.py)")
    p.add_argument("--context", metavar="MIN:MAX", help="every user's context range in tokens (default: by user "
                                                        "type, " + ", ".join(f"{t.name} {t.context[0]}:{t.context[1]}"
                                                                             for t in USER_TYPES) + ")")
    p.add_argument("--no-multi-turn", action="store_true", help="no reads of a conversation's earlier turns")
    p.add_argument("--prefill-only", action="store_true",
                   help="every request only writes its entry (as requests of 10,000 tokens or more always do)")
    p.add_argument("--max-requests", type=cli_int, default=0, metavar="N",
                   help="each rank ends after N requests (default 0: the duration alone)")
    p.add_argument("--engine", default="psync", help=f"{engines.choices(writes=True)} (default psync: one "
                                                     "blocking request per worker, as kv-cache.py)")
    p.add_argument("--direct", action="store_true", help="O_DIRECT (entries padded to whole 4 KiB blocks)")
    p.add_argument("--block-size", default="1MiB", metavar="SIZE", help="request size (default 1MiB)")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here")
    p.add_argument("--mlperf-dir", metavar="DIR",
                   help="also write MLPerf's files of the run there: option_<O>/trial_<T>/rank_<N>/"
                        "kvcache_results_<ts>.json and kvcache_run_summary_<ts>.json (needs --option)")


def _setup(comm, args) -> KVSpec:
    spec = resolve(args)
    if args.mlperf_dir and not spec.option:
        raise UsageError("--mlperf-dir: MLPerf's files are an option's (give --option 1|2|3)")
    if args.mlperf_dir:   # a directory iodl may make, or make files in
        d = args.mlperf_dir
        check_output_path("--mlperf-dir", os.path.join(d, "x") if os.path.isdir(d) else d.rstrip(os.sep))
    if args.out:
        check_output_path("--out", args.out)
    return spec


def _largest_context(spec: KVSpec) -> int:
    return spec.context[1] if spec.context else max(t.context[1] for t in USER_TYPES)


def _rank_root(comm, spec: KVSpec) -> Entries:
    """This rank's folder and its share of the free space, checked against the largest entry."""
    directory = rank_directory(spec.root, comm.rank)
    mine = (comm.hostname(), os.stat(spec.root).st_dev)
    sharing = comm.allgather(mine).count(mine)
    room = capacity(spec.root, sharing)
    check_room(spec, room, _largest_context(spec))
    return Entries(directory, room)


def run(comm, args) -> int:
    stop = Interrupt()
    spec = collective(comm, lambda: _setup(comm, args))
    collective(comm, lambda: prepare_root(spec.root) if comm.rank == 0 else None)
    process = RankResult(rank=comm.rank, host=comm.hostname(), mount=0)
    startup_s = process_age_s()
    trials, everything, windows, partial = [], Tally(), 0.0, False
    for _trial in range(spec.trials):   # MLPerf's trials: the same run again, from an emptied folder
        entries = collective(comm, lambda: _rank_root(comm, spec))
        comm.barrier()   # the common origin of every rank's window
        t0 = _native.monotonic_ns()
        if not trials:
            process.note_start()   # the first trial's
        stop.arm()
        try:
            tally, end_s, stopped = KVCACHE.run_rank(spec, comm.rank, entries, t0, stop)
        finally:
            stop.disarm()
            entries.close()
        if stop():
            comm.give_up_after(STOP_GRACE_S)
        partial = bool(comm.allreduce(int(stopped or stop()), "max"))
        comm.all_answered()   # the "still here" messages of a stop, done with: none left for MPI_Finalize
        trials.append(_gathered(comm, tally, end_s, process))
        everything.merge(tally)
        windows += end_s
        if partial:
            break
    process.note_process(startup_s)
    whole = trials[0] if len(trials) == 1 else _gathered(comm, everything, windows, process)
    if comm.rank != 0:
        return 130 if partial else (1 if everything.errors else 0)
    result = _result(spec, whole, trials, partial)
    print_result(result, make_console())
    if args.out:
        write_result(result, args.out)
    if args.mlperf_dir:
        hosts = [p["host"] for p in result["kvcache"]["per_rank"]]
        path = write_run(args.mlperf_dir, spec.option, [t[2] for t in trials], sorted(set(hosts)),
                         max(hosts.count(h) for h in hosts))
        print(f"MLPerf's files (mlpstorage's kvcache layout) written; the run's summary: {path}")
    if result["kvcache"]["errors"]:
        return 1
    return 130 if partial else 0


def _gathered(comm, tally: Tally, end_s: float, process: RankResult):
    """Every rank's counts put together on rank 0: ((per mount, all) reduced rows, the per-rank list,
    every rank's summary as kv-cache.py writes it)."""
    got = reduce.across_ranks(comm, 0, 1, **rank_sums(tally, end_s))
    summaries = comm.gather(rank_summary(tally, end_s))
    per_rank = comm.gather({"rank": comm.rank, "host": process.host, "mount": 0, "end_s": end_s,
                            "tokens": tally.tokens, "requests": tally.requests, "written_bytes": tally.written_bytes,
                            "read_bytes": tally.read_bytes, "entries_written": tally.entries_written,
                            "entry_reads": tally.entry_reads, "evictions": tally.evictions, "errors": tally.errors,
                            "cpu_s": process.cpu_s, "max_rss_mb": process.max_rss_mb})
    if comm.rank != 0:
        return None
    order = sorted(range(len(per_rank)), key=lambda i: per_rank[i]["rank"])
    return got, [per_rank[i] for i in order], [summaries[i] for i in order]


def _block(spec: KVSpec, gathered) -> dict:
    """iodl's kvcache block of one trial or of all. The window is the longest rank's: the duration,
    or to the stop, or to its last request (--max-requests); over trials, their windows added."""
    (mounts, total), per_rank, _summaries = gathered
    window_s = max(0.0, float(total["end_s"]))
    bpt = spec.bytes_per_token
    block = kv_block(total, window_s, bpt)
    block["mounts"] = [{"path": spec.root, "ranks": [p["rank"] for p in per_rank], **kv_block(m, window_s, bpt)}
                       for m in mounts]
    block["per_rank"] = per_rank
    return block


def _result(spec: KVSpec, whole, trials: list, partial: bool) -> dict:
    """Rank 0: the result (docs/numbers.md, "KV cache"): iodl's figures over every trial, MLPerf's
    aggregate of the option (iodl/kvcache_mlperf.py), and each trial's when there are several."""
    block = _block(spec, whole)
    per_rank = block["per_rank"]
    result = {"schema": SCHEMA, "pattern": "kvcache", "option": spec.option, "model": spec.model.name,
              "users": spec.users, "duration_s": spec.duration_s, "seed": spec.seed, "engine": spec.engine,
              "direct": spec.direct, "block_size": spec.block_size, "workers": spec.workers,
              "cpu_memory_gb": spec.cpu_memory_gb, "max_concurrent_writes": spec.max_concurrent_writes,
              "multi_turn": spec.multi_turn, "prefill_only": spec.prefill_only,
              "context": list(spec.context) if spec.context else None, "max_requests": spec.max_requests,
              "trial_count": len(trials), "ranks": len(per_rank), "hosts": sorted({p["host"] for p in per_rank}),
              "root": spec.root, "partial": partial, "kvcache": block,
              "mlperf": option_summary(spec.option or 0, [t[2] for t in trials])}
    if len(trials) > 1:
        result["trials"] = [{"kvcache": _block(spec, t), "mlperf": option_summary(spec.option or 0, [t[2]])}
                            for t in trials]
    return result


def print_result(result: dict, console) -> None:
    kv = result["kvcache"]
    opt = f"option {result['option']}: " if result["option"] else ""
    console.print(f"kvcache {opt}{result['model']} ({kv['bytes_per_token']:,} B/token), {result['users']} users x "
                  f"{result['ranks']} rank(s), engine {result['engine']}{' direct' if result['direct'] else ''}, "
                  f"window {kv['window_s']:.2f} s", highlight=False, markup=False)

    def ms(lat, q):
        return f"{lat[q] / 1e3:,.1f}" if lat else "-"

    rows = [["write + fsync", f"{kv['written_bytes'] / 1e9:,.3f}", f"{kv['write_bandwidth_MBps']:,.1f}",
             f"{kv['entries_written']:,}", ms(kv["entry_write_latency_us"], "p50"),
             ms(kv["entry_write_latency_us"], "p99"), ms(kv["write_latency_us"], "p99")],
            ["read", f"{kv['read_bytes'] / 1e9:,.3f}", f"{kv['read_bandwidth_MBps']:,.1f}", f"{kv['entry_reads']:,}",
             ms(kv["entry_read_latency_us"], "p50"), ms(kv["entry_read_latency_us"], "p99"),
             ms(kv["read_latency_us"], "p99")]]
    print_table(console, None, [("", "left"), ("GB", "right"), ("MB/s", "right"), ("entries", "right"),
                                ("entry p50 ms", "right"), ("entry p99 ms", "right"), ("I/O p99 ms", "right")],
                rows)
    device = kv["device_read_fraction"]
    console.print(f"{kv['tokens']:,} tokens in {kv['requests']:,} requests: {kv['tokens_per_s']:,.1f} tokens/s; "
                  f"cache hit rate (MLPerf's) {kv['cache_hit_rate']:.1%}; "
                  + (f"{device:.1%} of the bytes read came from the storage" if device is not None
                     else "no read reached the storage" if not kv["read_bytes"]
                     else "the storage's share of the reads was not measured")
                  + (f"; fsync p50 {ms(kv['fsync_latency_us'], 'p50')} ms" if kv["fsync_latency_us"] else ""),
                  highlight=False, markup=False)
    m = result["mlperf"]
    console.print(f"MLPerf's figures ({result['trial_count']} trial(s)): "
                  f"{m['aggregated_avg_throughput_tokens_per_sec']:,.1f} tokens/s, storage throughput "
                  f"{m['aggregated_storage_throughput_tokens_per_sec']:,.1f} tokens/s, "
                  f"read {m['aggregated_read_bandwidth_gbps']:.3f} GiB/s, "
                  f"write {m['aggregated_write_bandwidth_gbps']:.3f} GiB/s, "
                  f"P95 {m['aggregated_p95_latency_ms']:,.1f} ms "
                  f"(device read {m['aggregated_device_read_p95_ms']:,.1f}, "
                  f"write {m['aggregated_device_write_p95_ms']:,.1f})", highlight=False, markup=False)
    if kv["cpu_entries"] or kv["cpu_reads"]:
        console.print(f"CPU tier: {kv['cpu_entries']:,} entries went there, {kv['cpu_reads']:,} reads were served from "
                      f"it, {kv['demotions']:,} entries demoted to the storage", highlight=False, markup=False)
    if kv["evictions"]:
        console.print(f"{kv['evictions']:,} entries unlinked to make room", highlight=False, markup=False)
    if result["partial"]:
        console.print("stopped: the figures cover what ran before the stop", highlight=False, markup=False)
