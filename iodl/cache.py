"""Page-cache accounting per node: what the cache can hold, what of the dataset it held at the
start, the predicted hit fraction beside the measured one, and dropping it.

Everything here is per host, so one rank per node does it (docs/design.md, "Scale"). The prediction
is the reference studies' rule for random whole-shard reads in steady state: a node whose page
cache can hold C bytes and that reads a dataset of D bytes hits min(1, C / D) of its reads. C is
MemAvailable at the start (free memory plus the cache the kernel would reclaim for us); the
first pass over a dataset instead hits what was resident when it began, which is measured too.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

from . import _native, reduce
from .data.layout import MANIFEST
from .errors import UsageError
from .units import format_size

DROP_CACHES = "/proc/sys/vm/drop_caches"
RAM_MULTIPLE = 5   # MLPerf Storage: the dataset must be at least 5x the host's RAM


def meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """The /proc/meminfo fields in bytes (values are in kB there)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def check_can_drop(path: str = DROP_CACHES) -> None:
    """UsageError unless this process may write drop_caches (root)."""
    if not os.access(path, os.W_OK) or os.geteuid() != 0:
        raise UsageError(f"--drop-caches needs root: it writes {path} (run as root, or leave it out)")


def drop_caches(path: str = DROP_CACHES) -> None:
    """Write back dirty pages, then empty the page cache, dentries and inodes of this host."""
    os.sync()
    with open(path, "w") as f:
        f.write("3\n")


# Why resident_at_start is None: the kernel tells page-cache state only to a file's owner, to
# someone who may write it, or to CAP_FOWNER (cachestat refuses; mincore would report every page
# resident), so a figure for other readers would be a guess.
NOT_MEASURABLE = ("not measurable: the kernel shows which pages are cached only to a file's owner, "
                  "to who may write it, or to root")


def _resident_and_size(path: str) -> tuple[int | None, int]:
    """(bytes of the file in the page cache or None as for resident, its size); (0, 0) if it vanished."""
    try:
        # a FIFO in place of a file must not block here; a link is not followed (it may lead
        # out of the dataset's root: its pages count nothing)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return 0, 0
    try:
        size = os.fstat(fd).st_size
        return _native.resident_bytes(fd, 0, size), size
    except OSError:
        return 0, 0
    finally:
        os.close(fd)


PROBE_THREADS = 8


def _probe(paths) -> tuple[int | None, int]:
    """(resident bytes or None, bytes) of these files, asked on a few threads: a cold inode cache
    makes each open wait on the disk (~0.5 ms), and the waits overlap. Plain threads, each every
    PROBE_THREADS-th file: concurrent.futures imports logging, ~2.4 ms of every rank's start-up."""
    got: list = [None] * len(paths)
    errors: list = []

    def probe_from(first: int) -> None:
        try:
            for i in range(first, len(paths), PROBE_THREADS):
                got[i] = _resident_and_size(paths[i])
        except Exception as exc:   # raised in the caller, as the thread pool did
            errors.append(exc)

    threads = [threading.Thread(target=probe_from, args=(k,), name="iodl-cache-probe")
               for k in range(min(PROBE_THREADS, len(paths)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if any(g is None for g, _s in got):
        return None, 0
    return sum(g for g, _s in got), sum(s for _g, s in got)


def resident(paths: list[str]) -> int | None:
    """Bytes of these files in the page cache now (files that vanished count nothing), or None
    when the kernel will not tell this user for one of them (NOT_MEASURABLE)."""
    return _probe(paths)[0]


RESIDENT_PROBE_FILES = 2048   # shards asked about at most; above, a seeded uniform sample stands for all


def resident_estimate(paths, sizes, total: int | None = None) -> int | None:
    """Bytes of a dataset in the page cache now: exact (resident) up to RESIDENT_PROBE_FILES shards,
    else from a seeded uniform sample of that many, scaled by bytes (an open, fstat and cachestat
    per shard is ~10 us: 200,000 shards would hold every rank's start-up for seconds). total: the
    sizes' sum when known; the sample is weighed by the sizes its files have now (their fstat), so
    that a mapped size table is not read for it."""
    n = len(paths)
    if n <= RESIDENT_PROBE_FILES:
        return resident(paths)
    pick = np.sort(np.random.default_rng(0x10D1).choice(n, RESIDENT_PROBE_FILES, replace=False))
    got, sample_bytes = _probe([paths[int(i)] for i in pick])
    if got is None or not sample_bytes:
        return got
    total = int(np.sum(sizes, dtype=np.int64)) if total is None else total
    return min(total, round(got * total / sample_bytes))


def predicted_hit_fraction(cache_bytes: int, dataset_bytes: int) -> float | None:
    return min(1.0, cache_bytes / dataset_bytes) if dataset_bytes > 0 else None


def copies_needed(dataset_bytes: int, copies: int, ram_bytes: int) -> int:
    """--copies that makes the dataset at least RAM_MULTIPLE x RAM (copies already made included)."""
    per_copy = dataset_bytes / max(copies, 1)
    return max(copies, math.ceil(RAM_MULTIPLE * ram_bytes / per_copy)) if per_copy > 0 else copies


def node_view(probes: list[dict], per_rank: list[dict]) -> list[dict]:
    """Per host: its memory, the datasets its ranks read, the prediction and the measurement.

    probes: one dict per rank (rank, host, mount, path, and for the rank that measured for its
    node and mount: dataset_bytes, resident_bytes (None: not measurable, see resident); for node
    leaders: mem_total, mem_available).
    per_rank: the result's per-rank counters (bytes, cached_bytes, t_start, t_end; and
    cache_unmeasured_bytes where known: bytes whose hits could not be measured, which makes
    that part's cache_hit_fraction None).
    """
    hosts: dict[str, dict] = {}
    for p in probes:
        h = hosts.setdefault(p["host"], {"host": p["host"], "ranks": [], "mounts": {}})
        h["ranks"].append(p["rank"])
        if "mem_total" in p:
            h["mem_total_bytes"], h["page_cache_bytes"] = p["mem_total"], p["mem_available"]
        if "dataset_bytes" in p:
            h["mounts"][p["mount"]] = {"mount": p["mount"], "path": p["path"], "dataset_bytes": p["dataset_bytes"],
                                       "resident_at_start_bytes": p["resident_bytes"], "copies": p.get("copies", 1)}
    counted = {r["rank"]: r for r in per_rank}
    out = []
    for h in hosts.values():
        mounts = sorted(h["mounts"].values(), key=lambda m: m["mount"])
        dataset = sum(m["dataset_bytes"] for m in mounts)
        cache = h.get("page_cache_bytes", 0)
        got = _counted(h["ranks"], counted)
        pred = predicted_hit_fraction(cache, dataset)
        for m in mounts:
            known = m["resident_at_start_bytes"] is not None
            m["resident_at_start_fraction"] = (m["resident_at_start_bytes"] / m["dataset_bytes"]
                                               if known and m["dataset_bytes"] else None)
            if not known:
                m["resident_at_start_note"] = NOT_MEASURABLE
            m["predicted_hit_fraction"] = pred  # the node's cache is shared by all the datasets it reads
            m.update(_counted([r for r in h["ranks"] if r in counted and counted[r]["mount"] == m["mount"]], counted))
        out.append({"host": h["host"], "ranks": sorted(h["ranks"]), "mem_total_bytes": h.get("mem_total_bytes", 0),
                    "page_cache_bytes": cache, "dataset_bytes": dataset,
                    "predicted_hit_fraction": pred, **got, "mounts": mounts})
    return sorted(out, key=lambda h: h["ranks"][0])


def _counted(ranks: list[int], counted: dict[int, dict]) -> dict:
    """bytes, cached_bytes and the measured cache_hit_fraction of these ranks (reduce's sum and
    hit fraction: a host is a group the run's collectives do not know)."""
    got = reduce.sum_counters([counted[r] for r in ranks if r in counted],
                              ("bytes", "cached_bytes", "cache_unmeasured_bytes"))
    return {"bytes": got["bytes"], "cached_bytes": got["cached_bytes"],
            "cache_hit_fraction": reduce.hit_fraction(got["bytes"], got["cached_bytes"],
                                                      not got["cache_unmeasured_bytes"])}


def cache_blocks(nodes: list[dict], n_mounts: int) -> tuple[dict, list[dict]]:
    """The `cache` block of the total and of each mount, weighting each node by the bytes it read."""
    def block(parts: list[tuple[dict, dict]]) -> dict:
        weight = sum(m["bytes"] for _h, m in parts)
        def avg(key):
            vals = [(m["bytes"] if weight else 1, m[key]) for _h, m in parts if m[key] is not None]
            den = sum(w for w, _v in vals)
            return sum(w * v for w, v in vals) / den if den else None
        out = {"predicted_hit_fraction": avg("predicted_hit_fraction"),
               "resident_at_start_fraction": avg("resident_at_start_fraction"),
               "dataset_bytes": max((m["dataset_bytes"] for _h, m in parts), default=0),  # one mount, one dataset
               "page_cache_bytes": sum({h["host"]: h["page_cache_bytes"] for h, _m in parts}.values())}
        if any("resident_at_start_note" in m for _h, m in parts):
            out["resident_at_start_note"] = NOT_MEASURABLE
        return out

    pairs = [(h, m) for h in nodes for m in h["mounts"]]
    per_mount = [block([(h, m) for h, m in pairs if m["mount"] == i]) for i in range(n_mounts)]
    total = block(pairs)
    total["dataset_bytes"] = sum(b["dataset_bytes"] for b in per_mount)
    return total, per_mount


def _plain_folder(path: str) -> bool:
    """A --root that is a folder of files with no iodl manifest: generate does not write there."""
    return os.path.isdir(path) and not os.path.exists(os.path.join(path, MANIFEST))


def small_dataset_warnings(nodes: list[dict]) -> list[str]:
    """One line per host whose datasets are under RAM_MULTIPLE x its RAM, saying how to fix it."""
    out = []
    for h in nodes:
        ram, data = h["mem_total_bytes"], h["dataset_bytes"]
        if not ram or not data or data >= RAM_MULTIPLE * ram:
            continue
        copies = max(m.get("copies", 1) for m in h["mounts"])
        need = copies_needed(data, copies, ram)
        line = (f"{h['host']} reads {format_size(data)} of datasets but has {format_size(ram)} of RAM. "
                f"Under {RAM_MULTIPLE}x RAM ({format_size(RAM_MULTIPLE * ram)}) the page cache serves repeat reads, "
                f"so the bandwidth measured is not the storage's. Read with --direct, or ")
        if any(_plain_folder(m.get("path", "")) for m in h["mounts"]):
            line += (f"read a dataset of at least {format_size(RAM_MULTIPLE * ram)} (iodl generate writes only "
                     f"into a new or iodl-made --root, e.g. iodl generate --root NEWDIR --copies N).")
        else:
            line += (f"regenerate with --copies {need}: {format_size(need * data / max(copies, 1))} "
                     f"in all on this host.")
        out.append(line)
    return out
