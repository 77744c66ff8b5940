"""`iodl fio-compare job.fio`: run a fio job file with fio and with iodl on the same files, side by side."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import socket
import tempfile
import time

import numpy as np
from rich.console import Console

from .. import histogram
from ..cache import drop_caches
from ..comm import collective, split_hosts
from ..errors import IodlError, UsageError
from ..fio import compare, layout, logs, options as opts, run as iodl_run
from ..fio.compare import groups_of
from ..fio.jobfile import JobFileError
from ..fio.run import CloneResult, remove_created

SETTLE_S = 0.5   # after a write job's files are prepared, before each side (see prepare_writes)


class _FioOption(argparse.Action):
    """fio's job options from the command line, kept in order as (name, value) in args.fio_options."""

    def __call__(self, parser, namespace, values, option_string=None):
        got = list(getattr(namespace, "fio_options", None) or [])
        if option_string == "--fio-option":
            name, eq, value = values.partition("=")
            got.append((name, value if eq else None))
        else:
            got.append((option_string[2:], values))
        namespace.fio_options = got


def fio_options_as_flags(argv: list[str]) -> list[str]:
    """`--OPTION=VALUE` / `--OPTION VALUE` / a bare `--switch` naming a fio option (and not one of
    fio-compare's own flags) becomes `--fio-option OPTION=VALUE`, as fio takes job options on its
    command line (fio parses them with getopt_long_only: a value is `=VALUE` or the next word)."""
    own = {"--directory", "--scale", "--runtime", "--ramp-time", "--fio-json", "--no-fio", "--fio", "--out",
           "--repeat", "--keep-jobfile", "--size", "--filename", "--section", "--fio-option", "--help", "-h"}
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        name = flag[2:]
        if flag.startswith("--") and flag not in own and name in opts.KNOWN:
            if not eq and opts.TYPE.get(opts.canonical(name) or name) != "set" and i + 1 < len(argv):
                value, eq, i = argv[i + 1], "=", i + 1
            out += ["--fio-option", f"{name}={value}" if eq else name]
        else:
            out.append(arg)
        i += 1
    return out


def add_arguments(parser) -> None:
    parser.add_argument("jobfile", help="fio job file (what runs and what is refused: docs/fio-compare.md)")
    fio_args = parser.add_argument_group(
        "fio's command-line options", "as on fio's command line: defaults for every job, before the job file "
        "(a value the job file sets wins); any fio job option may be given as --OPTION=VALUE")
    fio_args.add_argument("--size", action=_FioOption, metavar="SIZE", help="fio's size= for every job")
    fio_args.add_argument("--filename", action=_FioOption, metavar="F", help="fio's filename= for every job")
    fio_args.add_argument("--fio-option", action=_FioOption, metavar="NAME=VALUE", help="any fio job option")
    fio_args.add_argument("--section", action="append", metavar="NAME",
                          help="run only this [section] of the job file (repeatable; fio's --section)")
    parser.add_argument("--directory", help="override every job's directory= (where the files are); {host} in it "
                                            "is each host's name (several hosts: a directory each)")
    parser.add_argument("--scale", type=float, help="multiply size=/io_size=/filesize= (e.g. 0.001 for a small machine)")
    parser.add_argument("--runtime", type=float, metavar="S", help="override runtime= (seconds)")
    parser.add_argument("--ramp-time", type=float, metavar="S", help="override ramp_time= (seconds)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--fio-json", metavar="FILE", help="use this fio --output-format=json(+) result instead of running fio")
    src.add_argument("--no-fio", action="store_true", help="run iodl alone")
    parser.add_argument("--fio", default="fio", help="fio binary (default: fio on PATH)")
    parser.add_argument("--out", metavar="FILE", help="write the comparison as JSON (schema iodl.fio-compare/1)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run fio and iodl N times each, interleaved (fio,iodl,iodl,fio,...); report medians "
                             "and the median of the per-round ratios (a noisy device)")
    parser.add_argument("--keep-jobfile", metavar="FILE", help="also write the derived job file both tools ran")


def run(comm, args) -> int:
    _check_arguments(args)
    # everything that can be wrong with the job file is found before any I/O, on every rank
    text, jobs, plans = _resolve(args)
    hosts = split_hosts(comm)
    collective(comm, lambda: _check_flags(args, hosts))
    sides = _Sides(comm, args, hosts, jobs, plans)
    sides.lay_out()
    if comm.rank == 0 and args.keep_jobfile:
        with open(args.keep_jobfile, "w") as f:
            f.write(text)   # rank 0's host's (with {host}, each host's names its own directory)
    rounds = sides.rounds(text)
    # unlink=1: after the last round, the files iodl laid out and marked itself (fio ran with unlink=0)
    collective(comm, lambda: _unlink_own(plans) if hosts.leader else None)
    # each host's rounds, from its leader (run_clones gathered the host's clones there)
    got = comm.gather((hosts.index, hosts.name, rounds) if hosts.leader else None)
    if comm.rank != 0:
        return 0
    per_host = sorted((g for g in got if g is not None), key=lambda g: g[0])
    doc = _document(comm, args, jobs, plans, per_host, sides.drop)
    compare.render(doc, Console())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    _check_did_io(doc, jobs, sides.create_only)
    return 0


def _check_arguments(args) -> None:
    if args.scale is not None and not args.scale > 0:
        raise UsageError("--scale must be > 0")
    for name in ("runtime", "ramp_time"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0")


def _resolve(args) -> tuple[str, list, dict]:
    """The job file as both sides run it (its text, its jobs) and iodl's plan of each job, checked:
    what iodl may read, create or must refuse (devices, files it did not lay out)."""
    # {host}: this host's own directory (several hosts on one shared filesystem, see docs/fio-compare.md)
    directory = None if args.directory is None else args.directory.replace("{host}", socket.gethostname())
    text, jobs = compare.derive_jobfile(args.jobfile, directory, args.scale, args.runtime, args.ramp_time,
                                        cli_options=getattr(args, "fio_options", None), only=args.section)
    taken: set = set()
    plans = {i: iodl_run.plan_job(job, taken=taken) for i, job in enumerate(jobs)}
    for p in plans.values():
        _check_something_to_do(p, args.scale)
        _check_direct_alignment(p)
    iodl_run.number_threads(plans)   # fio's thread numbers: each clone's logs' ".N"
    for p in plans.values():
        if p.logs is not None:
            logs.check_paths(p.logs, range(p.first_thread, p.first_thread + p.numjobs))
    for p in _on_disk(plans).values():
        if p.engine in ("filecreate", "filedelete"):
            _check_new(p)
        layout.check_files(_all_files(p), allow_create=bool(p.job.get("allow_file_create", 1)))
    return text, jobs, plans


def _on_disk(plans: dict) -> dict:
    return {i: p for i, p in plans.items() if p.engine != "null"}   # fio's null engine touches no file


def start_states(plans: dict) -> dict:
    """{path: (spec, reset mode)} of every file a write job writes: the state fio's lay-out leaves it in
    when it is missing. fio sets up every job's files before any job runs, one job after the other in
    the file's order (backend.c run_threads, create_serialize=1 by default), and a job lays a file out
    only when it is missing or shorter than the job needs (filesetup.c extend_file): a job that reads
    writes it whole, a write job as its own mode says (layout.reset_for_write), fallocate=keep/none
    leaving 0 bytes that a later job then finds short. So a write job's file that a job after it reads
    starts written whole, as does one a job before it read; one fallocated first stays fallocated."""
    written = {spec.path for p in plans.values() if p.write for spec in _all_files(p)}
    states: dict = {}
    for i in sorted(plans):
        p = plans[i]
        for spec in _all_files(p):
            if spec.path not in written:
                continue
            was = states.get(spec.path)
            if was is not None:
                have, mode = was
                if (have.needed if mode in ("fill", "native", "posix") else 0) >= spec.needed:
                    continue   # long enough: this job lays nothing out
                spec = max(spec, have, key=lambda f: f.needed)
            # iodl's own marked file, made ready through the checks of a write job's file
            states[spec.path] = (dataclasses.replace(spec, write=True), p.reset if p.write else "fill")
    return states


def _all_files(plan) -> list:
    """Every clone's files of a job."""
    return [f for clone in plan.files for f in clone]


def _check_flags(args, hosts) -> None:
    for flag, path in (("--out", args.out), ("--keep-jobfile", args.keep_jobfile)):
        if path and (os.path.isdir(path) or not os.path.isdir(os.path.dirname(os.path.abspath(path)))):
            raise UsageError(f"{flag} {path}: names a directory or its directory does not exist")
    if args.repeat < 1:
        raise UsageError("--repeat must be >= 1")
    if args.repeat > 1 and args.fio_json:
        raise UsageError("--repeat runs fio again each round; it does not combine with --fio-json")
    if args.fio_json and hosts.count > 1:
        raise UsageError(f"--fio-json holds one host's run; over {hosts.count} hosts each host runs fio "
                         "(or use --no-fio)")


class _Sides:
    """fio's side and iodl's, run in rounds on the same files.

    Several hosts run the whole job each, as `fio --client=hosts` does: each host's leader (its
    lowest rank) lays out, drops caches and runs fio there; iodl's side deals the host's clones
    over the host's ranks (as on one host). The other ranks wait in sleep-polled collectives.
    """

    def __init__(self, comm, args, hosts, jobs: list, plans: dict):
        self.comm, self.args, self.hosts, self.jobs, self.plans = comm, args, hosts, jobs, plans
        self.disk = _on_disk(plans)
        # create_only=1: fio lays the files out and runs nothing (its figures are zeros); iodl too
        self.create_only = {i for i, p in plans.items() if p.job.get("create_only")}
        self.drop = any(not p.direct for p in plans.values()) and os.geteuid() == 0
        self.run_fio = hosts.leader and not args.no_fio and not args.fio_json
        self.fio_file = None
        # write jobs: their files (iodl's own, marked) are put back in the state fio's lay-out leaves
        # them in before each side runs, so both start from the same files (layout.reset_for_write)
        self.writes = start_states(self.disk)

    def lay_out(self) -> None:
        """The files, host after host: hosts that share a directory find the files the first laid out
        (no race); write jobs over hosts that share a directory are refused."""
        hosts = self.hosts
        for h in range(hosts.count):
            collective(self.comm, lambda: self._lay_out_here() if hosts.leader and hosts.index == h else None)
        if self.writes and hosts.count > 1:
            _refuse_shared(self.comm, hosts, sorted({os.path.dirname(spec.path) for spec, _ in self.writes.values()}))

    def _lay_out_here(self) -> None:
        for p in self.disk.values():
            if p.engine == "filecreate":
                continue   # both sides create these files in their round (fio removes its own: unlink=1)
            layout.lay_out(_all_files(p), allow_create=bool(p.job.get("allow_file_create", 1)))
        os.sync()   # the lay-out's writeback is not left to fall into the first timed run

    def rounds(self, text: str) -> list:
        """[(fio_data, iodl results)] for each round; ABBA order so that a drifting device favours neither."""
        if self.run_fio:
            self.fio_file = tempfile.NamedTemporaryFile("w", suffix=".fio", prefix="iodl-fio-")
            self.fio_file.write(text)
            self.fio_file.flush()
        out = []
        try:
            for r in range(self.args.repeat):
                if r % 2 == 0:
                    f = self._fio_round()
                    out.append((f, self._iodl_round()))
                else:
                    i = self._iodl_round()
                    out.append((self._fio_round(), i))
        finally:
            if self.fio_file is not None:
                self.fio_file.close()
        return out

    def _prepare(self, reset: bool = True) -> None:
        """On each host's leader, before a side: the write files reset, the caches dropped. The
        collective around it is the barrier across hosts: the sides start together everywhere."""
        collective(self.comm, lambda: self._prepare_here(reset) if self.hosts.leader else None)
        # the last thing before a timed side that writes: a blkio throttle that saw the I/O of the
        # preparation (or of the cache drop's sync) lends its slice's idle budget to what follows
        # at once (iodl's side then ran up to 13% over a 40 MB/s write throttle; fio's start, an
        # exec later, did not get it). With the pause both start alike.
        if self.writes:
            time.sleep(SETTLE_S)

    def _prepare_here(self, reset: bool) -> None:
        for p in self.disk.values():
            if p.unlink_each_loop:   # fio removed its last loop's files (unlink=1): laid out again (marked)
                layout.lay_out(_all_files(p))
        if reset and self.writes:
            for spec, mode in self.writes.values():
                layout.reset_for_write(spec, mode)
            os.sync()
        for p in self.disk.values():
            if p.engine == "filedelete":   # the other side deleted them: laid out again (marked)
                layout.lay_out(_all_files(p))
        _drop(self.drop)

    def _fio_round(self):
        args = self.args
        if args.fio_json:
            return compare.load_fio_json(args.fio_json) if self.hosts.leader else None
        if args.no_fio:
            return None
        self._prepare()
        return collective(self.comm, lambda: compare.run_fio(self.fio_file.name, args.fio, say=self.comm.rank == 0)
                          if self.run_fio else None)

    def _iodl_round(self) -> list:
        # one reporting group after another (stonewall), all clones of a group at once
        groups = compare.groups_of(self.jobs)
        plans, results = self.plans, []
        for g in sorted(set(groups)):
            self._prepare(reset=g == min(groups))   # the files as fio's lay-out leaves them, once a round
            results += collective(self.comm, lambda: iodl_run.run_clones(
                {i: p for i, p in plans.items() if groups[i] == g and i not in self.create_only}, self.hosts.node))
            if self.comm.rank == 0:
                results += [_idle_clone(i, n) for i in sorted(self.create_only) if groups[i] == g
                            for n in range(plans[i].numjobs)]
        # filecreate: iodl's files (marked) removed, so that the next side creates them too
        collective(self.comm, lambda: _remove_created(plans) if self.hosts.leader else None)
        return results


def _document(comm, args, jobs: list, plans: dict, per_host: list, drop: bool) -> dict:
    """The comparison (schema iodl.fio-compare/1) from each host's rounds [(index, name, rounds)]."""
    numjobs = [p.numjobs for p in plans.values()]

    def sides(fio_datas, results):
        iodl_job, iodl_group = compare.iodl_sides(results, jobs)
        fio_job, fio_group = ({}, {})
        if fio_datas and all(d is not None for d in fio_datas):
            fio_job, fio_group = compare.fio_sides(fio_datas, jobs, numjobs)
        return fio_job, iodl_job, fio_group, iodl_group

    # the totals: every host's entries by fio's client-mode rule (compare.fio_sides), iodl's alike
    total = [sides([h[2][r][0] for h in per_host], [x for h in per_host for x in h[2][r][1]])
             for r in range(args.repeat)]
    fio_data = per_host[0][2][0][0]
    meta = {"jobfile": os.path.abspath(args.jobfile), "fio_version": (fio_data or {}).get("fio version"),
            "ranks": comm.size, "hosts": [h[1] for h in per_host], "caches_dropped": drop, "repeat": args.repeat,
            "overrides": {"directory": args.directory, "scale": args.scale, "runtime_s": args.runtime,
                          "ramp_time_s": args.ramp_time}}
    doc = compare.document_rounds(jobs, total, meta)
    _mark_not_measured(doc, jobs)
    if len(per_host) > 1:
        compare.add_hosts(doc, jobs, meta["hosts"], [[sides([f], i) for f, i in h[2]] for h in per_host])
        for host in doc["per_host"]:
            _mark_not_measured(host, jobs)   # each host's entries have the document's shape
    return doc


# fio's switches that turn latency measurement off -> the latency kinds (side keys) they turn off
# (gtod_reduce sets disable_lat, disable_clat and disable_slat: fio 3.33 options.c str_gtod_reduce_cb)
_LATENCY_OFF = {"gtod_reduce": ("lat_us", "latency_us", "slat_us"), "disable_lat": ("lat_us",),
                "disable_clat": ("latency_us",), "disable_slat": ("slat_us",)}


def _mark_not_measured(doc: dict, jobs) -> None:
    """Latency kinds a job switched off are "not measured" on both sides (fio has none to compare
    with); bandwidth and IOPS are compared as usual. A group's kind is off when every job's is."""
    off = [{k for opt, kinds in _LATENCY_OFF.items() if job.get(opt) for k in kinds} for job in jobs]
    groups = groups_of(jobs)
    group_off = {g: set.intersection(*[off[i] for i in range(len(jobs)) if groups[i] == g]) for g in set(groups)}

    def mark(entry, kinds):
        for side in [entry.get("fio"), entry.get("iodl")] + [x for r in entry.get("rounds", []) for x in (r["fio"], r["iodl"])]:
            if side and kinds:
                side["not_measured"] = sorted(kinds)
                # the side, and each direction of a job that read and wrote
                for part in [side] + [side[d] for d in ("read", "write") if isinstance(side.get(d), dict)]:
                    for kind in kinds:
                        part[kind] = {k: None for k in part.get(kind) or {}}

    for entry, kinds in zip(doc["jobs"], off):
        mark(entry, kinds)
    for entry in doc["groups"]:
        mark(entry, group_off.get(int(entry["name"].split()[-1]), set()))


def _check_something_to_do(plan, scale: float | None) -> None:
    """A job whose every file is smaller than one block would do no I/O (fio reads and writes
    whole blocks only): refused before anything runs, naming the direction and the sizes."""
    if plan.engine == "null" or plan.job.get("create_only"):
        return
    sizes = [f.io_size for clone in plan.files for f in clone]
    # a random pass picks whole slots of max(ba, largest bs); a sequential one needs the smallest bs
    block = max(plan.align, plan.max_bs) if plan.random else min(s for s, _ in plan.block_sizes)
    if sizes and max(sizes) < block:
        verb = "write" if plan.write else "read"
        at = f" at --scale {scale:g}" if scale is not None else ""
        file, line = plan.job.get("@source", plan.job).loc("size")
        raise JobFileError(f"[{plan.job.name}] has nothing to {verb}{at}: its files hold {max(sizes)} bytes to "
                           f"{verb}, less than one block ({block} bytes); raise --scale or size=", file, line)


SECTOR = 512   # the smallest logical block size of a Linux block device


def _check_direct_alignment(plan) -> None:
    """direct=1 reads of a size or at an offset that is not a multiple of the device's logical
    block size fail in the kernel (EINVAL), and fio's job fails with them; iodl's engine would
    round such a read up to its alignment and succeed. Refused before any I/O instead (checked
    against 512 bytes, the smallest logical block)."""
    if not plan.direct or plan.write or plan.engine == "null":
        return
    off = plan.job.get("offset", 0)
    bad = [s for s, _ in plan.block_sizes if s % SECTOR] or ([off] if isinstance(off, int) and off % SECTOR else [])
    if bad:
        source = plan.job.get("@source", plan.job)
        key = "offset" if isinstance(off, int) and off % SECTOR and not any(s % SECTOR for s, _ in plan.block_sizes) else "bs"
        file, line = source.loc(key)
        raise JobFileError(f"[{plan.job.name}] reads {bad[0]} bytes{' at offset' if key == 'offset' else ''} with direct=1: "
                           f"not a multiple of the {SECTOR}-byte sector, so the kernel refuses it (EINVAL) and fio's "
                           f"job fails; iodl refuses it before any I/O", file, line)


def _idle_clone(index: int, jobnum: int):
    """The result of a clone that does no I/O (create_only=1): zero bytes, empty histograms."""
    return CloneResult(index, jobnum, hist=histogram.empty(), clat_hist=histogram.empty(),
                       slat_hist=histogram.empty(), depth=np.zeros(histogram.DEPTH_BUCKETS, np.int64),
                       sync_hist=histogram.empty(), end_sync_hist=histogram.empty())


def _check_new(plan) -> None:
    """filecreate creates only new files: one already there (fio's or anyone's) is refused.
    filedelete: fio would unlink whatever is at the job's names, so only iodl's own marked files
    (laid out by an earlier run) may be there; anything else is refused."""
    for path in layout.existing(spec.path for clone in plan.files for spec in clone):
        if plan.engine == "filecreate" or not layout.is_marked(path):
            file, line = plan.job.loc("ioengine")
            what = "creates only new files" if plan.engine == "filecreate" else "deletes only files it laid out"
            raise JobFileError(f"[{plan.job.name}] ioengine={plan.engine}: {path} exists (iodl {what}; "
                               "remove it or name another directory=)", file, line)


def _remove_created(plans: dict) -> None:
    """After iodl's filecreate round: the files it created, removed (iodl.fio.run.remove_created)."""
    for p in plans.values():
        remove_created(p, range(p.numjobs))


def _unlink_own(plans: dict) -> None:
    """fio's unlink=1, kept safe: only files carrying iodl's lay-out mark are removed, never through
    a symlink; anything else the job used is left where it is."""
    for p in plans.values():
        if not p.job.get("@source", p.job).get("unlink") or p.engine == "null":
            continue
        for clone in p.files:
            for spec in clone:
                if layout.is_marked(spec.path):
                    try:
                        os.unlink(spec.path)
                    except FileNotFoundError:
                        pass   # another clone's entry for a shared file


def _check_did_io(doc: dict, jobs, create_only: set) -> None:
    """A job that did no I/O on iodl's side never ends in exit 0 (fio fails such a job too)."""
    for n, entry in enumerate(doc["jobs"]):
        mine = entry.get("iodl") or {}
        if n in create_only or not mine:
            continue
        if not mine.get("ios") and not (mine.get("syncs") or {}).get("count"):
            raise IodlError(f"[{jobs[n].name}] did no I/O in iodl (0 requests completed); the comparison above "
                            "is not valid")


def _refuse_shared(comm, hosts, dirs: list[str]) -> None:
    """Write jobs over several hosts: hosts that see one directory (shared storage, no {host} in
    --directory) would write each other's files while the other measures. Each host's leader
    creates a marker of its own in every write directory (exclusively, a random name, removed
    again at once); a host that finds another host's marker refuses, on every rank."""
    token = f".iodl-host-probe.{secrets.token_hex(8)}"
    made: list[str] = []

    def mark():
        if hosts.leader:
            for d in dirs:
                path = os.path.join(d, token)
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
                except OSError as exc:
                    raise UsageError(f"cannot check whether other hosts share {d}: {exc.strerror}") from None
                made.append(path)
        return token if hosts.leader else None

    try:
        tokens = [t for t in comm.allgather(collective(comm, mark)) if t and t != token]

        def look():
            for d in dirs if hosts.leader else []:
                if any(os.path.lexists(os.path.join(d, t)) for t in tokens):
                    raise UsageError(f"{d}: more than one host writes this directory (shared storage?); give each "
                                     "host its own, e.g. --directory /path/{host}")

        collective(comm, look)   # every host looked before any marker goes
    finally:
        for path in made:
            os.unlink(path)


def _drop(enabled: bool) -> None:
    if enabled:
        drop_caches()
