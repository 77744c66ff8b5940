"""fio vs iodl on one job file: derive the job file both run, run them, put the numbers side by side.

fio's JSON units (stat.c): `bw` KiB/s whatever kb_base says, `bw_bytes` B/s, `runtime` ms (after the
ramp), latencies ns. Latencies are compared kind with kind, as fio splits a request's time at its
issue_time (when the submit call that took it returned): slat before it, clat after, lat = both.
fio is run with lat_percentiles and slat_percentiles on so that all three have histograms. Aggregates follow fio's group rule: sum(bytes) / max(runtime); percentiles come
from merged histograms (json+ `bins` for fio, the engine's buckets for iodl), first bucket whose
cumulative count reaches p% (stat.c calc_clat_percentiles).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
from rich.markup import escape
from rich.table import Table

from .. import histogram, reduce
from ..errors import IodlError, UsageError
from ..report import print_table
from .jobfile import Job, JobFileError, Percent, command_line_sections, read_sections, resolve
from .run import plan_job

SCHEMA = "iodl.fio-compare/1"
PERCENTILES = {"p50": 50.0, "p99": 99.0, "p999": 99.9}
# a side's latency keys -> fio's JSON keys; "latency_us" stays clat (its meaning in earlier documents)
LATENCIES = {"latency_us": "clat_ns", "slat_us": "slat_ns", "lat_us": "lat_ns"}
# fio reports lat and slat percentiles only when asked (clat's are on by default)
FIO_PERCENTILE_ARGS = ["--lat_percentiles=1", "--slat_percentiles=1"]
DEPTH_KEYS = ["1", "2", "4", "8", "16", "32", ">=64"]   # fio's iodepth_level = the engine's DEPTH_BUCKETS


# ---------------------------------------------------------------------------------------------
# The job file both tools run

def derive_jobfile(path: str, directory: str | None = None, scale: float | None = None,
                   runtime_s: float | None = None, ramp_s: float | None = None, env=None,
                   cli_options: list | None = None, only: list | None = None) -> tuple[str, list[Job]]:
    """The job file with includes inlined, variables expanded and overrides appended to each job.

    Every job is checked against what iodl honours first, so errors name the user's file and line.

    Overrides are written into every [job] section (below its [global]s, so they win) in units
    that need no kb_base: sizes in bytes, times in microseconds. Returns (text, jobs parsed from it).
    """
    # fio's command-line options (defaults ahead of the file) and --section (jobfile.py)
    sections = command_line_sections(cli_options or []) + read_sections(path, env=env, only=only)
    jobs = resolve(sections)
    if not jobs:
        raise JobFileError(f"no jobs in {path}")
    renewed = {id(job) for job in jobs if plan_job(job, files=False).unlink_each_loop}
    extra: dict[str, list[str]] = {}
    for job in jobs:
        lines = []
        if directory is not None:
            lines.append(f"directory={directory}")
        if scale is not None:
            for key in ("size", "io_size"):
                value = job.get(key)
                if isinstance(value, Percent) or not value:
                    continue
                lines.append(f"{key}={max(1, int(value * scale))}")
            if job.get("filesize"):
                lo, hi = job.values["filesize"][0]
                lines.append(f"filesize={max(1, int(lo * scale))}-{max(1, int(hi * scale))}")
        if runtime_s is not None:
            lines.append(f"runtime={int(runtime_s * 1e6)}us")
            if job.get("startdelay", 0) > runtime_s * 1e6:
                # a short run does not wait minutes to start: the delay is capped at the runtime
                lines.append(f"startdelay={int(runtime_s * 1e6)}us")
        if job.get("ioengine") == "filecreate" or id(job) in renewed:
            # fio removes the files it created after its round: iodl's round then creates its own
            # (fio-compare refuses a filecreate job whose files are already there); unlink_each_loop:
            # fio's last loop made its files (unmarked), which iodl could not use: fio removes them, and
            # iodl lays its own out again before the next side (fio_compare.py)
            lines.append("unlink=1")
        elif job.get("unlink"):
            # fio would remove the files after its round (even files iodl did not lay out);
            # iodl removes its own after the last round (fio_compare.py)
            lines.append("unlink=0")
        if ramp_s is not None:
            lines.append(f"ramp_time={int(ramp_s * 1e6)}us")
        extra[job.name + f"@{job.line}"] = lines
    out = [f"; derived by iodl fio-compare from {os.path.abspath(path)}"]
    if directory is not None:
        # first of all: a [global]'s filename= takes the directory set when fio parses it
        out += ["[global]", f"directory={directory}"]
    for section in sections:
        out.append(f"[{section.name}]")
        for o in section.options:
            if directory is not None and o.key == "directory":
                # replaced where written, not only overridden: fio checks a [global] directory exists
                out.append(f"directory={directory}")
                continue
            out.append(o.key if o.value is None else f"{o.key}={o.value}")
        if not section.is_global:
            out.extend(extra.get(section.name + f"@{section.line}", []))
    text = "\n".join(out) + "\n"
    derived = resolve(read_sections(path, text=text, env={}, keywords={}))
    for job, mine in zip(jobs, derived):
        mine.values["@source"] = job   # as written: unlink=, and the lines errors name
    return text, derived


# ---------------------------------------------------------------------------------------------
# Per-side results

def percentile_values(values: np.ndarray, counts: np.ndarray) -> dict:
    """fio's rule over (bucket value, count) pairs: the first value whose cumulative count >= p% of N."""
    order = np.argsort(values)
    values, counts = values[order], counts[order]
    total = counts.sum()
    if not total:
        return {k: None for k in PERCENTILES}
    cum = np.cumsum(counts)
    return {k: float(values[np.searchsorted(cum, p / 100 * total, side="left")]) / 1000 for k, p in PERCENTILES.items()}


def side(nbytes: int, ios: int, runtime_s: float, lat_us: dict, depth: list | None, cpu_pct: float | None,
         ddir: str = "read", syncs: dict | None = None) -> dict:
    """lat_us: {"latency_us": clat, "slat_us": slat, "lat_us": lat}, each {p50, p99, p999, mean} in us.
    ddir: "read" or "write" (what bytes and ios are; "mixed" for a group of both). syncs: fsync=N /
    fdatasync=N syncs, {"count", p50, p99, p999, mean} in us (fio's JSON "sync" section), and
    "end_count": end_fsync / fsync_on_close syncs (iodl's; fio's JSON does not report them: None)."""
    return {
        "ddir": ddir,
        "bytes": int(nbytes), "ios": int(ios), "runtime_s": runtime_s,
        "bandwidth_MBps": reduce.mbps(nbytes, runtime_s),
        "iops": reduce.rate(ios, runtime_s),
        **lat_us,
        "depth_pct": dict(zip(DEPTH_KEYS, depth)) if depth is not None else None,
        "cpu_pct": cpu_pct,
        "syncs": syncs,
    }


def _fio_latency(reads: list[dict], key: str) -> dict:
    """One latency kind (clat_ns, slat_ns, lat_ns) over clones: None where fio gave nothing
    (sync engines have no slat; lat/slat percentiles only with lat_percentiles/slat_percentiles)."""
    stats = [r.get(key) or {} for r in reads]
    n = sum(st.get("N", 0) for st in stats)
    if not n:
        return {**{k: None for k in PERCENTILES}, "mean": None}
    bins = [st.get("bins") for st in stats if st.get("N")]   # a clone that read nothing has none
    if all(bins):
        values = np.array([int(k) for b in bins for k in b], dtype=np.float64)
        counts = np.array([c for b in bins for c in b.values()], dtype=np.float64)
        lat = percentile_values(values, counts)
    elif len(stats) == 1 and "percentile" in stats[0]:
        pct = stats[0]["percentile"]
        lat = {k: pct.get(f"{p:f}", 0) / 1000 or None for k, p in PERCENTILES.items()}
    else:
        lat = {k: None for k in PERCENTILES}   # plain json of several clones: percentiles cannot be merged
    lat["mean"] = sum(st.get("mean", 0) * st.get("N", 0) for st in stats) / n / 1000
    return lat


DDIRS = ("read", "write")


def _fio_syncs(entries: list[dict]) -> dict | None:
    """fio's "sync" section over clones: its lat_ns N counts fsync=N and fdatasync=N syncs (total_ios
    counts only the fsyncs), never the end_fsync / fsync_on_close ones."""
    stats = [(e.get("sync") or {}).get("lat_ns") or {} for e in entries]
    n = sum(st.get("N", 0) for st in stats)
    if not n:
        return {"count": 0, **{k: None for k in PERCENTILES}, "mean": None, "end_count": None}
    lat = _fio_latency([{"lat_ns": st} for st in stats], "lat_ns")
    return {"count": int(n), **lat, "end_count": None}


def _fio_part(parts: list[dict], entries: list[dict], ddir: str, syncs) -> dict:
    """One side from fio's per-direction objects (read, write or both), by fio's group rule."""
    nbytes = sum(r.get("io_bytes", 0) for r in parts)
    ios = sum(r.get("total_ios", 0) for r in parts)
    runtime_s = max([r.get("runtime", 0) for r in parts] or [0]) / 1000
    lat = {name: _fio_latency(parts, key) for name, key in LATENCIES.items()}
    weights = np.array([sum((e.get(d) or {}).get("total_ios", 0) for d in DDIRS) for e in entries], dtype=np.float64)
    levels = np.array([[e.get("iodepth_level", {}).get(k, 0.0) for k in DEPTH_KEYS] for e in entries])
    depth = list(np.average(levels, axis=0, weights=weights if weights.sum() else None))
    cpu = float(np.mean([e.get("usr_cpu", 0) + e.get("sys_cpu", 0) for e in entries]))
    return side(nbytes, ios, runtime_s, lat, [round(d, 3) for d in depth], cpu, ddir, syncs)


def _fio_merge(entries: list[dict]) -> dict:
    """One [job] (its clones) or one group from fio's jobs[] entries, by fio's group rule. A job or group
    that did reads and writes gets a side per direction ("read", "write", as fio's JSON) and, at the top,
    both together (fio's unified_rw_reporting figures)."""
    did = [d for d in DDIRS if any((e.get(d) or {}).get("total_ios", 0) for e in entries)]
    syncs = _fio_syncs(entries) if "write" in did else None
    if len(did) < 2:
        ddir = did[0] if did else "read"
        return _fio_part([e.get(ddir) or {} for e in entries], entries, ddir, syncs)
    out = _fio_part([e.get(d) or {} for e in entries for d in DDIRS], entries, "mixed", syncs)
    for d in DDIRS:
        out[d] = _fio_part([e.get(d) or {} for e in entries], entries, d, None)
    return out


def _iodl_percentiles(hist: np.ndarray) -> dict:
    if not hist.sum():
        return {k: None for k in PERCENTILES}   # e.g. no slat for psync, as fio
    got = histogram.percentiles(hist, PERCENTILES.values())
    return {k: got[p] for k, p in PERCENTILES.items()}


def _iodl_parts(r, ddir: str) -> tuple:
    """(bytes, ios, lat hist, clat hist, slat hist) of one clone's direction; None if it has none."""
    if getattr(r, "mixed", False):
        if ddir == "write":
            return r.write_bytes, r.write_ios, r.write_hist, r.write_clat_hist, r.write_slat_hist
        return r.bytes, r.ios, r.hist, r.clat_hist, r.slat_hist
    if bool(getattr(r, "write", False)) != (ddir == "write"):
        return None
    return r.bytes, r.ios, r.hist, r.clat_hist, r.slat_hist


def _iodl_part(results, parts: list, ddir: str, syncs) -> dict:
    depth = sum(r.depth for r in results)
    runtime_s = max(r.window_ns for r in results) / 1e9
    # the engine's hist is submit call -> completion (fio's lat); clat/slat split it at the call's return
    lat = {name: {**_iodl_percentiles(sum(p[k] for p in parts) if parts else np.zeros(1)), "mean": None}
           for name, k in (("latency_us", 3), ("slat_us", 4), ("lat_us", 2))}
    pct = list(100 * depth / depth.sum()) if depth.sum() else [0.0] * len(DEPTH_KEYS)
    cpu = float(np.mean([100 * r.cpu_s / (r.window_ns / 1e9) if r.window_ns else 0 for r in results]))
    # fio's group rule, sum(bytes) / max(runtime); iodl's window ends at the clone's last completion
    return side(sum(p[0] for p in parts), sum(p[1] for p in parts), runtime_s, lat,
                [round(float(p), 3) for p in pct], cpu, ddir, syncs)


def _iodl_merge(results) -> dict:
    by_dir = {d: [p for p in (_iodl_parts(r, d) for r in results) if p is not None] for d in DDIRS}
    did = [d for d in DDIRS if any(p[1] for p in by_dir[d])] or [d for d in DDIRS if by_dir[d]] or ["read"]
    syncs = None
    mine = [r for r in results if getattr(r, "write", False)]
    if mine:
        hist = sum(r.sync_hist for r in mine)
        syncs = {"count": int(sum(r.syncs for r in mine)), **_iodl_percentiles(hist), "mean": None,
                 "end_count": int(sum(r.end_syncs for r in mine))}
    if len(did) < 2:
        return _iodl_part(results, by_dir[did[0]], did[0], syncs)
    out = _iodl_part(results, by_dir["read"] + by_dir["write"], "mixed", syncs)
    for d in DDIRS:
        out[d] = _iodl_part(results, by_dir[d], d, None)
    return out


# ---------------------------------------------------------------------------------------------
# Running fio

def groups_of(jobs: list[Job]) -> list[int]:
    """fio's reporting group per job: a job with stonewall or new_group starts a new one."""
    groups, current = [], 0
    for i, job in enumerate(jobs):
        if i and (job.get("stonewall") or job.get("new_group")):
            current += 1
        groups.append(current)
    return groups


def run_fio(jobfile: str, fio: str = "fio", say: bool = True) -> dict:
    """fio on this host (several hosts: each leader runs its own, the line is said once)."""
    binary = shutil.which(fio)
    if binary is None:
        raise UsageError(f"fio not found ({fio}); use --fio-json FILE or --no-fio")
    if say:
        print("fio-compare: running fio on the job file (then the same work in iodl) ...", flush=True)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # before the job file: defaults for every job (a job's own lat_percentiles=0 still wins)
        proc = subprocess.run([binary, "--output-format=json+", *FIO_PERCENTILE_ARGS, f"--output={out.name}", jobfile],
                              capture_output=True, text=True)
        if proc.returncode:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            raise IodlError(f"fio failed (exit {proc.returncode}): {lines[-1] if lines else 'no output'}")
        return load_fio_json(out.name)


def load_fio_json(path: str) -> dict:
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read fio result {path}: {exc.strerror}") from None
    # fio may print notes before the JSON document when --output is not used
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not fio JSON output: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs", data.get("client_stats")), list):
        raise UsageError(f"{path} is not fio JSON output (no jobs[])")
    return data


def _fio_entries(data: dict, jobs: list[Job], numjobs: list[int]) -> tuple[dict, dict]:
    """fio's jobs[] entries per job (by position: fio names every clone after its section) and per group."""
    entries = [e for e in data.get("jobs", data.get("client_stats", [])) if e.get("jobname") != "All clients"]
    groups = groups_of(jobs)
    per_job: dict[int, list] = {}
    if len(entries) == sum(numjobs):
        at = 0
        for i, n in enumerate(numjobs):
            per_job[i] = entries[at:at + n]
            at += n
    elif len(entries) != len(set(groups)):
        raise UsageError(f"fio result has {len(entries)} job entries, the job file makes {sum(numjobs)} clones")
    by_group: dict[int, list] = {}
    for e in entries:
        by_group.setdefault(e.get("groupid", 0), []).append(e)
    return per_job, by_group


def fio_sides(data: dict | list[dict], jobs: list[Job], numjobs: list[int]) -> tuple[dict, dict]:
    """fio's results per job and per group. A list of results (one per host, each fio running the
    whole job) gives their sum by fio's client-mode rule (client.c handle_ts -> stat.c
    sum_thread_stats: bytes and I/Os summed, runtime the longest, latency histograms merged):
    the group rule again, over every host's entries."""
    per_job: dict[int, list] = {}
    by_group: dict[int, list] = {}
    for one in (data if isinstance(data, list) else [data]):
        host_jobs, host_groups = _fio_entries(one, jobs, numjobs)
        for i, es in host_jobs.items():
            per_job.setdefault(i, []).extend(es)
        for g, es in host_groups.items():
            by_group.setdefault(g, []).extend(es)
    return ({i: _fio_merge(es) for i, es in per_job.items()}, {g: _fio_merge(es) for g, es in by_group.items()})


def iodl_sides(results, jobs: list[Job]) -> tuple[dict, dict]:
    groups = groups_of(jobs)
    per_job, per_group = {}, {}
    for i, job in enumerate(jobs):
        mine = [r for r in results if r.job_index == i]
        per_job[i] = _iodl_merge(mine)
    for g in sorted(set(groups)):
        per_group[g] = _iodl_merge([r for r in results if groups[r.job_index] == g])
    return per_job, per_group


def ratio(fio_side: dict | None, iodl_side: dict | None) -> dict | None:
    """iodl/fio of bandwidth and IOPS; for a side of reads and writes, per direction too ("read", "write")."""
    if not fio_side or not iodl_side:
        return None
    out = {k: (iodl_side[m] / fio_side[m] if fio_side[m] else None)
           for k, m in (("bandwidth", "bandwidth_MBps"), ("iops", "iops"))}
    for d in DDIRS:
        if fio_side.get(d) and iodl_side.get(d):
            out[d] = ratio(fio_side[d], iodl_side[d])
    return out


def _median_ratio(rs: list) -> dict:
    out = {k: _median([r.get(k) for r in rs]) for k in ("bandwidth", "iops")}
    for d in DDIRS:
        got = [r[d] for r in rs if r.get(d)]
        if got:
            out[d] = _median_ratio(got)
    return out


def document(jobs: list[Job], fio_job: dict, iodl_job: dict, fio_group: dict, iodl_group: dict, meta: dict) -> dict:
    def entry(name, f, i):
        return {"name": name, "fio": f, "iodl": i, "ratio": ratio(f, i)}

    return {
        "schema": SCHEMA, **meta,
        "jobs": [entry(job.name, fio_job.get(n), iodl_job.get(n)) for n, job in enumerate(jobs)],
        "groups": [entry(f"group {g}", fio_group.get(g), iodl_group.get(g))
                   for g in sorted(set(fio_group) | set(iodl_group))],
    }



def _median(values):
    got = [v for v in values if v is not None]
    return float(np.median(got)) if got else None


def median_side(runs: list) -> dict | None:
    """Several runs of one side: the median of every number (each metric on its own)."""
    runs = [r for r in runs if r]
    if len(runs) <= 1:
        return runs[0] if runs else None
    out = {}
    for key, value in runs[0].items():
        if isinstance(value, dict) and key in DDIRS:
            out[key] = median_side([r.get(key) for r in runs])   # a direction's own side
        elif isinstance(value, dict):
            out[key] = {k: _median([r[key].get(k) for r in runs if r.get(key)]) for k in value}
        elif value is None or isinstance(value, (int, float)):
            out[key] = _median([r.get(key) for r in runs])
        else:
            out[key] = value
    return out


def document_rounds(jobs: list[Job], rounds: list, meta: dict) -> dict:
    """The document over interleaved rounds [(fio_job, iodl_job, fio_group, iodl_group)].

    Each side is the per-metric median over rounds; the ratio is the median of the rounds' own
    ratios (fio and iodl of a round ran back to back, so slow drift of the device cancels);
    every round's numbers are kept under "rounds".
    """
    if len(rounds) == 1:
        return document(jobs, *rounds[0], meta)

    def entry(name, fs, is_):
        rs = [ratio(f, i) for f, i in zip(fs, is_)]
        rs = [r for r in rs if r]
        return {"name": name, "fio": median_side(fs), "iodl": median_side(is_),
                "ratio": _median_ratio(rs) if rs else None,
                "rounds": [{"fio": f, "iodl": i, "ratio": ratio(f, i)} for f, i in zip(fs, is_)]}

    groups = sorted({g for r in rounds for g in set(r[2]) | set(r[3])})
    return {
        "schema": SCHEMA, **meta,
        "jobs": [entry(job.name, [r[0].get(n) for r in rounds], [r[1].get(n) for r in rounds])
                 for n, job in enumerate(jobs)],
        "groups": [entry(f"group {g}", [r[2].get(g) for r in rounds], [r[3].get(g) for r in rounds]) for g in groups],
    }

def add_hosts(doc: dict, jobs: list[Job], hosts: list[str], host_rounds: list[list]) -> dict:
    """Several hosts, each running the whole job: `doc` holds their totals; `per_host` gets each
    host's own entries (host_rounds[h] is that host's rounds, as document_rounds takes them)."""
    doc["per_host"] = []
    for name, rounds in zip(hosts, host_rounds):
        one = document_rounds(jobs, rounds, {})
        doc["per_host"].append({"host": name, "jobs": one["jobs"], "groups": one["groups"]})
    return doc


# ---------------------------------------------------------------------------------------------
# Terminal report

def _fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def depth_row(d: dict | None) -> str:
    """Every depth bucket that has requests, in bucket order, in whole percent that add to 100
    (largest remainders; fio's own json rounds tiny shares up to 0.1%, so its row is normalised)."""
    if not d:
        return "-"
    items = [(k, float(v)) for k, v in d.items() if v and v > 0]
    total = sum(v for _, v in items)
    if not total:
        return "-"
    exact = [(k, 100 * v / total) for k, v in items]
    whole = {k: int(x) for k, x in exact}
    short = 100 - sum(whole.values())
    for k, _ in sorted(exact, key=lambda kv: -(kv[1] - int(kv[1])))[:short]:
        whole[k] += 1
    return " ".join(f"{k}:{whole[k]}%" for k, _ in exact if whole[k]) or "-"


def render(doc: dict, console) -> None:
    n = doc.get("repeat", 1)
    jobs = doc["jobs"]
    groups = doc["groups"] if len(jobs) > 1 else []
    if any(not e["fio"] for e in jobs) and any(g["fio"] for g in doc["groups"]):
        # group_reporting: fio reported each group as one entry, so its figures are the groups';
        # iodl's side is summed by the same rule (iodl_sides), and the groups are the tables
        jobs, groups = [], doc["groups"]
    for n_entry, entry in enumerate(jobs + groups):
        f, i = entry["fio"] or {}, entry["iodl"] or {}
        # titled with the job's [name] (escaped: [/dev/sdb] is not rich markup); a group's table says so
        head = f"job [{entry['name']}]" if n_entry < len(jobs) else f"reporting {entry['name']}"
        ddir = (i or f).get("ddir", "read")
        if ddir != "read":
            head += f" ({ddir}s)" if ddir == "write" else " (reads and writes)"
        if doc.get("per_host"):
            head += f", total over {len(doc['per_host'])} hosts"
        title = escape(head) + ("," if doc.get("per_host") and n > 1 else "") + \
            (f" median of {n} interleaved runs each; ratio = median of per-run ratios" if n > 1 else "")
        t = Table(title=title, title_justify="left")
        t.add_column("metric")
        t.add_column("fio", justify="right")
        t.add_column("iodl", justify="right")
        t.add_column("iodl/fio", justify="right")

        def row(label, get, digits=1, r=None):
            a, b = (get(f) if f else None), (get(i) if i else None)
            if r is None:
                r = b / a if a and b is not None else None
            t.add_row(label, _fmt(a, digits), _fmt(b, digits), "-" if r is None else f"{r:.3f}")

        q = entry.get("ratio") or {}
        # a job that read and wrote: each direction's rows apart, as fio prints them
        split = [d for d in DDIRS if f.get(d) or i.get(d)]
        off = set(f.get("not_measured") or []) | set(i.get("not_measured") or [])
        for d in split or [None]:
            def part(s, d=d):
                return (s.get(d) or {}) if d else s
            qd = (q.get(d) or {}) if d else q
            pre = f"{d} " if d else ""
            row(f"{pre}bandwidth MB/s", lambda s, part=part: part(s).get("bandwidth_MBps"), r=qd.get("bandwidth"))
            row(f"{pre}IOPS", lambda s, part=part: part(s).get("iops"), r=qd.get("iops"))
            # each kind against the same kind (fio's definitions, docs/fio-compare.md); a kind neither side
            # has (slat of a sync engine, lat of a fio result without lat_percentiles) is left out
            for kind, name in (("lat_us", "lat"), ("slat_us", "slat"), ("latency_us", "clat")):
                if kind in off:
                    # gtod_reduce / disable_*lat: fio measured none; iodl's is not shown against nothing
                    t.add_row(f"{pre}{name} µs", "not measured", "not measured", "")
                    continue
                for key, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
                    def get(s, kind=kind, key=key, part=part):
                        return (part(s).get(kind) or {}).get(key)
                    if (f and get(f) is not None) or (i and get(i) is not None):
                        row(f"{pre}{name} {label} µs", get, digits=2 if name == "slat" else 1)
        if (f.get("syncs") or i.get("syncs")):
            # fsync=N / fdatasync=N: fio's JSON "sync" section against iodl's sync rows
            row("fsyncs (fsync=/fdatasync=)", lambda s: (s.get("syncs") or {}).get("count"), digits=0)
            for key, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
                def sget(s, key=key):
                    return (s.get("syncs") or {}).get(key)
                if (f and sget(f) is not None) or (i and sget(i) is not None):
                    row(f"sync {label} µs", sget)
            if (i.get("syncs") or {}).get("end_count"):
                row("end fsyncs (not in fio's JSON)", lambda s: (s.get("syncs") or {}).get("end_count"), digits=0)
        row("CPU % per worker", lambda s: s["cpu_pct"])
        t.add_row("queue depth", depth_row(f.get("depth_pct")), depth_row(i.get("depth_pct")), "")
        console.print(t)
        if doc.get("per_host"):
            kind = "jobs" if n_entry < len(jobs) else "groups"
            at = n_entry if n_entry < len(jobs) else n_entry - len(jobs)
            _render_hosts(console, [(h["host"], h[kind][at]) for h in doc["per_host"]] + [("total", entry)])


def _render_hosts(console, entries: list) -> None:
    """Each host's bandwidth and IOPS beside the totals above (which sum them as fio --client does);
    split rather than cut when narrow (report.print_table)."""
    rows = []
    for name, entry in entries:
        f, i, q = entry["fio"] or {}, entry["iodl"] or {}, entry.get("ratio") or {}
        cells = [escape(name)]
        for metric, key in (("bandwidth_MBps", "bandwidth"), ("iops", "iops")):
            r = q.get(key)
            cells += [_fmt(f.get(metric)), _fmt(i.get(metric)), "-" if r is None else f"{r:.3f}"]
        rows.append(cells)
    columns = [("host", "left")] + [(h, "right") for h in ("fio MB/s", "iodl MB/s", "iodl/fio", "fio IOPS",
                                                           "iodl IOPS", "iodl/fio")]
    print_table(console, f"per host ({len(entries) - 1} hosts, each ran the whole job; total as fio's "
                         "\"All clients\")", columns, rows)
