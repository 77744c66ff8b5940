"""`iodl fio-compare job.fio`: run a fio job file with fio and with iodl on the same files, side by side."""
from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import time

HELP = "run a fio job file with fio and with iodl, side by side"
SETTLE_S = 0.5   # after a write job's files are prepared, before each side (see prepare_writes)


def add_arguments(parser) -> None:
    parser.add_argument("jobfile", help="fio job file (reads, sequential writes; see docs/fio-compare.md)")
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


def run(args) -> int:
    from ..comm import collective, split_hosts, world
    from ..errors import UsageError
    from ..fio import compare, layout
    from ..fio import run as iodl_run

    if args.scale is not None and not args.scale > 0:
        raise UsageError("--scale must be > 0")
    for name in ("runtime", "ramp_time"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0")
    # {host}: this host's own directory (several hosts on one shared filesystem, see docs/fio-compare.md)
    directory = None if args.directory is None else args.directory.replace("{host}", socket.gethostname())
    # Everything that can be wrong with the job file is found before any I/O, on every rank.
    text, jobs = compare.derive_jobfile(args.jobfile, directory, args.scale, args.runtime, args.ramp_time)
    taken: set = set()
    plans = {i: iodl_run.plan_job(job, taken=taken) for i, job in enumerate(jobs)}
    iodl_run.number_threads(plans)   # fio's thread numbers: each clone's logs' ".N"
    # what iodl may read, create or must refuse (devices, files it did not lay out), on every rank
    disk = {i: p for i, p in plans.items() if p.engine != "null"}   # fio's null engine touches no file
    for p in disk.values():
        layout.check_files([f for clone in p.files for f in clone], allow_create=bool(p.job.get("allow_file_create", 1)))
    comm = world()
    # Several hosts run the whole job each, as `fio --client=hosts` does: each host's leader (its
    # lowest rank) lays out, drops caches and runs fio there; iodl's side deals the host's clones
    # over the host's ranks (as on one host). The other ranks wait in sleep-polled collectives.
    hosts = split_hosts(comm)
    buffered = any(not p.direct for p in plans.values())
    drop = buffered and os.geteuid() == 0

    def check_flags():
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

    collective(comm, check_flags)
    run_fio = hosts.leader and not args.no_fio and not args.fio_json
    fio_file = None

    def lay_out():
        for p in disk.values():
            layout.lay_out([f for clone in p.files for f in clone], allow_create=bool(p.job.get("allow_file_create", 1)))
        os.sync()   # the lay-out's writeback is not left to fall into the first timed run

    # host after host: hosts that share a directory find the files the first laid out (no race)
    for h in range(hosts.count):
        collective(comm, lambda: lay_out() if hosts.leader and hosts.index == h else None)

    # write jobs: their files (iodl's own, marked) are put back in the state fio's lay-out leaves
    # them in before each side runs, so both start from the same files (layout.reset_for_write)
    writes: dict = {}
    for p in disk.values():
        if p.write:
            for clone in p.files:
                for spec in clone:
                    if spec.path not in writes or spec.needed > writes[spec.path][0].needed:
                        writes[spec.path] = (spec, p.reset)
    if writes and hosts.count > 1:
        _refuse_shared(comm, hosts, sorted({os.path.dirname(spec.path) for spec, _ in writes.values()}))

    if comm.rank == 0 and args.keep_jobfile:
        with open(args.keep_jobfile, "w") as f:
            f.write(text)   # rank 0's host's (with {host}, each host's names its own directory)
    if run_fio:
        fio_file = tempfile.NamedTemporaryFile("w", suffix=".fio", prefix="iodl-fio-")
        fio_file.write(text)
        fio_file.flush()

    def prepare(reset: bool = True):
        """On each host's leader, before a side: the write files reset, the caches dropped. The
        collective around it is the barrier across hosts: the sides start together everywhere."""
        def on_leader():
            if not hosts.leader:
                return
            if reset and writes:
                for spec, mode in writes.values():
                    layout.reset_for_write(spec, mode)
                os.sync()
            _drop(drop)
        collective(comm, on_leader)
        settle()

    def settle():
        # the last thing before a timed side that writes: a blkio throttle that saw the I/O of the
        # preparation (or of the cache drop's sync) lends its slice's idle budget to what follows
        # at once (iodl's side then ran up to 13% over a 40 MB/s write throttle; fio's start, an
        # exec later, did not get it). With the pause both start alike.
        if writes:
            time.sleep(SETTLE_S)

    def fio_round():
        if args.fio_json:
            return compare.load_fio_json(args.fio_json) if hosts.leader else None
        if args.no_fio:
            return None
        prepare()
        return collective(comm, lambda: compare.run_fio(fio_file.name, args.fio, say=comm.rank == 0)
                          if run_fio else None)

    def iodl_round():
        # one reporting group after another (stonewall), all clones of a group at once
        groups = compare.groups_of(jobs)
        results = []
        for g in sorted(set(groups)):
            prepare(reset=g == min(groups))   # the files as fio's lay-out leaves them, once a round
            results += collective(comm, lambda: iodl_run.run_clones(
                {i: p for i, p in plans.items() if groups[i] == g}, hosts.node))
        return results

    rounds = []   # [(fio_data, iodl results)]; ABBA order so that a drifting device favours neither
    try:
        for r in range(args.repeat):
            if r % 2 == 0:
                f = fio_round()
                rounds.append((f, iodl_round()))
            else:
                i = iodl_round()
                rounds.append((fio_round(), i))
    finally:
        if fio_file is not None:
            fio_file.close()
    # each host's rounds, from its leader (run_clones gathered the host's clones there)
    got = comm.gather((hosts.index, hosts.name, rounds) if hosts.leader else None)
    if comm.rank != 0:
        return 0
    per_host = sorted((g for g in got if g is not None), key=lambda g: g[0])
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
    if len(per_host) > 1:
        compare.add_hosts(doc, jobs, meta["hosts"], [[sides([f], i) for f, i in h[2]] for h in per_host])

    from rich.console import Console

    compare.render(doc, Console())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


def _refuse_shared(comm, hosts, dirs: list[str]) -> None:
    """Write jobs over several hosts: hosts that see one directory (shared storage, no {host} in
    --directory) would write each other's files while the other measures. Each host's leader
    creates a marker of its own in every write directory (exclusively, a random name, removed
    again at once); a host that finds another host's marker refuses, on every rank."""
    from ..comm import collective
    from ..errors import UsageError

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
        from ..groundtruth import drop_caches

        drop_caches()
