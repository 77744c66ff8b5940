"""Cross-rank reduction and rates: the one place a result's figures are put together from the
ranks' counters and divided by a window (docs/numbers.md; iodl/figures.py names, for every key
documented there, the one function that makes it).

Reduction follows IOR: a group's window runs from the MIN of its ranks' first completions to the
MAX of their last, counters and fixed-bucket histograms are SUMmed, the slowest request is a MAX.
Each is a buffer collective on a (mount, value) array: every rank fills its mount's row, the other
rows hold the operation's identity, and rank 0 gets every mount at once; the total is the mounts'
rows combined by the same operation. Only the per-rank lists a result prints are gathered as objects.
"""
from __future__ import annotations

import zlib

import numpy as np

from . import histogram
from .result import STEP_FIELDS

MB = 1e6

# the identity of each operation: what a mount with no ranks (and the rows of other mounts) holds.
# Integer values are counts and latencies (never negative), so 0 is MAX's identity for them.
_IDENTITY = {("sum", "i"): 0, ("max", "i"): 0, ("min", "i"): np.iinfo(np.int64).max,
             ("sum", "f"): 0.0, ("max", "f"): -np.inf, ("min", "f"): np.inf}
_COMBINE = {"sum": np.sum, "min": np.min, "max": np.max}


def across_ranks(comm, mount: int, n_mounts: int, **ops: dict) -> tuple[list[dict], dict] | None:
    """This rank's values combined with every rank's, per mount and over all, on rank 0.

    ops: sum=, min=, max= each a dict name -> this rank's value (a number or a numpy array of the
    same shape on every rank). One buffer collective per operation and kind (integer, float).
    Rank 0 gets (per mount: name -> combined value, all ranks: name -> combined value); the other
    ranks None."""
    got, op_of, plan = {}, {}, []
    for op, values in ops.items():
        kinds: dict[str, dict[str, np.ndarray]] = {"i": {}, "f": {}}
        for name, value in values.items():
            a = np.asarray(value)
            kinds["f" if a.dtype.kind == "f" else "i"][name] = a
            op_of[name] = op
        plan += [(op, kind, group) for kind, group in kinds.items() if group]
    _same_layout(comm, plan)
    for op, kind, group in plan:   # the same order on every rank: the collectives pair up
        got.update(_reduce(comm, mount, n_mounts, op, kind, group) or {})
    if comm.rank != 0:
        return None
    mounts = [{name: a[m] for name, a in got.items()} for m in range(n_mounts)]
    return mounts, {name: _COMBINE[op_of[name]](a, axis=0) for name, a in got.items()}


def _same_layout(comm, plan) -> None:
    """Every rank must send the same names, kinds and shapes in the same order, or the buffers pair
    wrongly and figures come back silently wrong: a value that was an int 0 on some ranks and a float
    on others once made an endpoint's time 6.9e-310 s and its MB/s inf. Two small collectives say so
    on every rank at once."""
    layout = ";".join(f"{op}:{kind}:" + ",".join(f"{n}{a.shape}" for n, a in group.items()) for op, kind, group in plan)
    sig = zlib.crc32(layout.encode())
    if comm.allreduce(sig, "min") != comm.allreduce(sig, "max"):
        raise RuntimeError(f"ranks reduce different figures (this rank: {layout})")


def _reduce(comm, mount, n_mounts, op, kind, values: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """One buffer collective: name -> (n_mounts, *shape) on rank 0, None elsewhere."""
    dtype = np.float64 if kind == "f" else np.int64
    width = sum(a.size for a in values.values())
    buf = np.full((n_mounts, width), _IDENTITY[op, kind], dtype=dtype)
    buf[mount] = np.concatenate([a.astype(dtype).ravel() for a in values.values()])
    buf = comm.reduce_array(buf, op)
    if comm.rank != 0:
        return None
    out, at = {}, 0
    for name, a in values.items():
        out[name] = buf[:, at:at + a.size].reshape((n_mounts, *a.shape))
        at += a.size
    return out


def sum_counters(parts: list[dict], keys: tuple[str, ...]) -> dict[str, int]:
    """The SUM of these counters over per-rank dicts already on rank 0 (a group the collectives do
    not know, as the ranks of one host)."""
    return {k: sum(p.get(k, 0) for p in parts) for k in keys}


# ---- the window and the rates

def span(t_start: float, t_end: float) -> float:
    """A window's length from the MIN of its ranks' starts to the MAX of their ends; 0 when no
    rank completed a request (start +inf, end -inf)."""
    return float(t_end - t_start) if t_end >= t_start else 0.0


def rate(count: float, window_s: float) -> float:
    """count / window_s: every per-second figure of every result; 0 over an empty window."""
    return count / window_s if window_s > 0 else 0.0


def mbps(nbytes: float, window_s: float) -> float:
    """Bytes over a window in MB/s (MB = 10^6 bytes): every bandwidth of every result."""
    return rate(nbytes, window_s) / MB


def hit_fraction(nbytes: int, cached_bytes: int, measured: bool = True) -> float | None:
    """The measured cache-hit fraction: bytes the storage did not deliver / bytes read; None when
    some bytes' hits could not be measured (a fraction over part of them would be a guess)."""
    if not measured:
        return None
    return cached_bytes / nbytes if nbytes else 0.0


def rates(block: dict, window_s: float) -> dict:
    """Every rate of a read block from its counts and one window, so that bytes / window_s ==
    bandwidth in every block: window_s, bandwidth_MBps, iops, opens_per_s, cache_hit_fraction,
    storage_bandwidth_MBps (None, with the hit fraction, when the cache was not measured)."""
    nbytes, cached, measured = block["bytes"], block["cached_bytes"], block["cache_measured"]
    block.update(window_s=window_s, bandwidth_MBps=mbps(nbytes, window_s), iops=rate(block["ios"], window_s),
                 opens_per_s=rate(block.get("opens", 0), window_s),
                 cache_hit_fraction=hit_fraction(nbytes, cached, measured),
                 storage_bandwidth_MBps=mbps(nbytes - cached, window_s) if measured else None)
    return block


def set_window(reduced: dict, window_s: float) -> None:
    """Take every block of a reduced read result over one window (train-sync's: its steps' span)."""
    for block in [reduced["total"], *reduced["mounts"], *reduced.get("endpoints", ())]:
        rates(block, window_s)
    reduced["window_s"] = window_s


def steps_run_window(fixed: bool, partial: bool, ramp_s: float, duration_s: float, ranks_span: tuple[float, float],
                     steps_span: tuple[float, float]) -> tuple[float, float]:
    """A step pattern's window, seconds since the start barrier (docs/numbers.md, "The window"):
    [ramp, ramp + duration] when fixed in advance (infer-async); a stopped run's first to last
    counted completion (ranks_span: the MIN of starts, MAX of ends over every rank); train-sync's
    steps' span, stretched to a read that completed after the last step (read-ahead drained at
    the end) so that every counted byte is inside."""
    lo, hi = ranks_span
    if fixed and not partial:
        return ramp_s, ramp_s + duration_s
    if fixed:
        return (lo, hi) if hi >= lo else (0.0, 0.0)
    return min(steps_span[0], lo), max(steps_span[1], hi)


# ---- the emulator's own cost (step patterns): CPU per step and per sample, per rank and per host

CPU, LOOP_CPU, SAMPLES, COMPUTE = (STEP_FIELDS.index(k) for k in ("cpu", "loop_cpu", "samples", "compute"))


def emulator_cpu(rows: list[np.ndarray], counted: list[np.ndarray], ranks: list[int], hosts: list[str],
                 cores: list[int], au: float, au_threshold: float, no_storage: bool) -> dict:
    """What the emulator itself cost over the counted steps (those AU counts), from the step
    records of every rank (training.run_steps: process CPU and the step loop's thread CPU per
    step). rows, counted (masks), ranks, hosts, cores: per rank, in the same order. by_rank: cpu_s_per_step
    (the whole process's CPU / its counted steps), cpu_s_per_sample (/ their samples),
    loader_cpu_s_per_step (of it, outside the step loop's thread: the reader, the open threads).
    Over all ranks the same three (summed CPU / summed steps or samples), and client_cpu_share:
    on the busiest host, its ranks' CPU per step / (its cores x the compute time of a step), the
    part of the host's CPU the emulator needs while the accelerators compute. At 1 or more the
    emulator's own work does not fit in a step: the client, not the storage, holds AU down;
    client_bound says so when AU is under its threshold (or when there was no storage at all,
    the null engine, and AU still fell short)."""
    by_rank, need, cpu_all, loader_all, steps_all, samples_all = [], {}, 0.0, 0.0, 0, 0.0
    for a, m, rank, host, n_cores in zip(rows, counted, ranks, hosts, cores, strict=True):
        a = a[m]
        cpu, loader = float(a[:, CPU].sum()), float((a[:, CPU] - a[:, LOOP_CPU]).sum())
        samples = float(a[:, SAMPLES].sum())
        by_rank.append({"rank": rank, "cpu_s_per_step": cpu / len(a) if len(a) else 0.0,
                        "cpu_s_per_sample": cpu / samples if samples else 0.0,
                        "loader_cpu_s_per_step": loader / len(a) if len(a) else 0.0})
        cpu_all, loader_all, steps_all, samples_all = (cpu_all + cpu, loader_all + loader, steps_all + len(a),
                                                       samples_all + samples)
        if len(a):   # per host: its ranks' CPU per step, summed; their compute per step summed, how many
            used, compute, n, _ = need.get(host, (0.0, 0.0, 0, 0))
            need[host] = (used + cpu / len(a), compute + float(a[:, COMPUTE].mean()), n + 1, max(n_cores, 1))
    share = max((used / (n_cores * compute / n) if compute > 0 else 0.0 for used, compute, n, n_cores in need.values()),
                default=0.0)
    return {"cpu_s_per_step": cpu_all / steps_all if steps_all else 0.0,
            "cpu_s_per_sample": cpu_all / samples_all if samples_all else 0.0,
            "loader_cpu_s_per_step": loader_all / steps_all if steps_all else 0.0,
            "client_cpu_share": share,
            "client_bound": bool(au < au_threshold and (share >= 1.0 or no_storage)), "by_rank": by_rank}


# ---- read patterns: what each rank adds, and a group's block

READ_SUMS = ("bytes", "ios", "cached_bytes", "cache_unmeasured_bytes", "errors", "opens", "closes", "epochs_checked",
             "epochs_wrong", "retries", "lists")
READ_MAXES = ("max_ns", "open_max_ns", "close_max_ns", "ttfb_max_ns", "list_s")


def reduce_read(comm, mine, n_mounts: int, group: int | None = None) -> tuple[list[dict], dict] | None:
    """A read run's counters (metrics.RankResult) over every rank, on rank 0: (each mount's
    reduced row, the total row); None on the other ranks. group: this rank's row when the groups
    are not the mounts (an s3 run's endpoints)."""
    return across_ranks(comm, mine.mount if group is None else group, n_mounts,
                        sum={**{k: getattr(mine, k) for k in READ_SUMS}, "open_wait_s": mine.open_wait_s,
                             "hist": mine.hist, "depth": mine.depth, "open_hist": mine.open_hist,
                             "close_hist": mine.close_hist, "ttfb_hist": mine.ttfb_hist},
                        max={**{k: getattr(mine, k) for k in READ_MAXES}, "t_end": mine.t_end},
                        min={"t_start": mine.t_start})


def read_block(g: dict, window_s: float | None = None) -> dict:
    """The docs/numbers.md figures of one group of ranks (a mount, or all) from its reduced row.

    window_s: the run's measured window when the pattern fixes it; else the group's own, from
    the MIN of its ranks' first counted completions to the MAX of their last."""
    if window_s is None:
        window_s = span(g["t_start"], g["t_end"])
    block = {
        "bytes": int(g["bytes"]),
        "ios": int(g["ios"]),
        "cached_bytes": int(g["cached_bytes"]),
        "latency_us": histogram.summary_us(g["hist"], int(g["max_ns"])),
        # a hit fraction over bytes of which some could not be measured would be a guess: none at all
        "cache_measured": not g["cache_unmeasured_bytes"],
        "errors": int(g["errors"]),
        "opens": int(g["opens"]),
        "open_latency_us": histogram.summary_us(g["open_hist"], int(g["open_max_ns"])),
        "open_wait_s": float(g["open_wait_s"]),   # rank-seconds: summed over the ranks
        "closes": int(g["closes"]),
        "close_latency_us": histogram.summary_us(g["close_hist"], int(g["close_max_ns"])),
        "retries": int(g["retries"]),
        "ttfb_us": histogram.summary_us(g["ttfb_hist"], int(g["ttfb_max_ns"])),
        # s3: the LISTs before the run, over the time its slowest rank (the ranks list at once) took
        "lists": int(g["lists"]),
        "list_ops_per_s": rate(g["lists"], g["list_s"]),
    }
    rates(block, window_s)
    block["depth"] = g["depth"].tolist()
    block["latency_hist"] = latency_hist(g["hist"])
    return block


def latency_hist(hist: np.ndarray) -> dict:
    """The non-empty buckets of a histogram: {"ns": [bucket value], "count": [requests]}."""
    idx = np.flatnonzero(hist)
    return {"ns": histogram.MID[idx].tolist(), "count": hist[idx].tolist()}


# ---- checkpoints: each round's slowest rank, its bytes, its slowest rank's own bandwidth

def reduce_checkpoint(comm, counters: dict, roots, fsync: bool, read_cache: bool) -> dict | None:
    """Each checkpoint operation's figures on rank 0 (None on the others): counters is this rank's
    op -> patterns.checkpoint.OpCounters, roots the mounts' paths, fsync whether writes were
    fsync'd, read_cache whether a read's cache hits were measured. An operation no rank ran: None."""
    out = {}
    for op, c in counters.items():
        rounds = int(comm.allreduce(len(c.round_s), "max"))
        if not rounds:
            out[op] = None
            continue
        rows = reduce_checkpoint_op(comm, c, len(roots), rounds)
        op_fsync = fsync if op == "write" else None   # None: a read
        parts = comm.gather({"rank": c.rank, "host": c.host, "mount": c.mount, "round_s": c.round_s,
                             "round_bytes": c.round_bytes, "lists": c.lists, "list_s": c.list_s,
                             **({"fsync_ns": c.fsync_ns} if op_fsync is not None else {})})
        if comm.rank != 0:
            continue
        per_mount, everyone = rows
        cache = op == "read" and read_cache
        total = checkpoint_block(everyone, op_fsync, cache)
        total["mounts"] = [{"path": path, "ranks": [p["rank"] for p in parts if p["mount"] == m],
                            **checkpoint_block(per_mount[m], op_fsync, cache)} for m, path in enumerate(roots)]
        total["per_rank"] = [checkpoint_rank(p) for p in parts]
        out[op] = total
    if comm.rank != 0:
        return None
    hosts = sorted({p["host"] for p in (out.get("write") or out.get("read") or {}).get("per_rank", [])})
    return {"checkpoint": out, "hosts": hosts}


def reduce_checkpoint_op(comm, c, n_mounts: int, rounds: int) -> tuple[list[dict], dict] | None:
    """One checkpoint operation's counters (patterns.checkpoint.OpCounters) over every rank, on rank 0:
    (each mount's reduced row, the total row). rounds: the most rounds any rank ran (a stopped
    rank ran fewer: its missing rounds count as not run)."""
    t, b = np.zeros(rounds), np.zeros(rounds, dtype=np.int64)
    t[:len(c.round_s)], b[:len(c.round_bytes)] = c.round_s, c.round_bytes
    own = np.array([mbps(nb, s) if s > 0 else np.inf for s, nb in zip(t, b)])   # MIN: a rank that ran
    return across_ranks(comm, c.mount, n_mounts,
                        sum={"round_bytes": b, "ios": c.ios, "cached_bytes": c.cached_bytes,
                             "cache_unmeasured_bytes": c.cache_unmeasured_bytes, "hist": c.hist,
                             "fsync_hist": c.fsync_hist, "lists": c.lists},
                        max={"round_s": t, "max_ns": c.max_ns, "list_s": c.list_s},
                        min={"rank_MBps": own})


def checkpoint_block(g: dict, fsync: bool | None, cache: bool) -> dict:
    """The figures of one checkpoint operation for a group of ranks (all, or one mount) from its
    reduced row. A round's duration is its slowest rank's time, its bandwidth the round's bytes /
    that duration, its min-rank bandwidth the least of the ranks' bytes / own time (MLPerf
    Storage's throughput). Over the rounds: bytes and duration add up, bandwidth = bytes /
    duration, min-rank bandwidth is the mean of the rounds' (MLPerf averages its runs).
    fsync: whether writes were fsync'd (None: a read); cache: the read's hit fraction applies."""
    per_round = [{"bytes": int(nb), "duration_s": s, "bandwidth_MBps": mbps(int(nb), s),
                  "min_rank_bandwidth_MBps": float(least) if np.isfinite(least) else 0.0}
                 for nb, s, least in zip(g["round_bytes"], (max(float(s), 0.0) for s in g["round_s"]),
                                         g["rank_MBps"])]   # a mount without ranks: -inf, no time
    nbytes = sum(r["bytes"] for r in per_round)
    duration = sum(r["duration_s"] for r in per_round)
    block = {"rounds": len(per_round), "bytes": nbytes, "ios": int(g["ios"]), "duration_s": duration,
             "bandwidth_MBps": mbps(nbytes, duration),
             "min_rank_bandwidth_MBps": (float(np.mean([r["min_rank_bandwidth_MBps"] for r in per_round]))
                                         if per_round else 0.0),
             "latency_us": histogram.summary_us(g["hist"], int(g["max_ns"])), "per_round": per_round,
             # s3: the LISTs checking a prefix before writing (s3checkpoint), over the time they took; 0 on files
             "lists": int(g["lists"]), "list_ops_per_s": rate(g["lists"], g["list_s"])}
    if fsync is not None:
        n = int(g["fsync_hist"].sum())
        block.update(fsync=fsync, fsyncs=n, fsync_latency_us=histogram.summary_us(g["fsync_hist"]) if n else None)
    if cache:
        block["cache_hit_fraction"] = hit_fraction(nbytes, int(g["cached_bytes"]), not g["cache_unmeasured_bytes"])
    return block


def checkpoint_rank(rank: dict) -> dict:
    """One rank's line of a checkpoint operation (its own rounds: bytes, time, bandwidth)."""
    nbytes, seconds = int(sum(rank["round_bytes"])), float(sum(rank["round_s"]))
    return {"rank": rank["rank"], "host": rank["host"], "mount": rank["mount"], "bytes": nbytes, "duration_s": seconds,
            "round_s": [float(x) for x in rank["round_s"]],   # DLIO times rank 0's rounds
            "bandwidth_MBps": mbps(nbytes, seconds), "lists": int(rank["lists"]), "list_s": float(rank["list_s"]),
            **({"fsync_s": rank["fsync_ns"] / 1e9} if "fsync_ns" in rank else {})}
