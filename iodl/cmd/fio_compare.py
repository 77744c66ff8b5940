"""`iodl fio-compare job.fio`: run a fio job file with fio and with iodl on the same files, side by side."""
from __future__ import annotations

import json
import os
import tempfile
import time

HELP = "run a fio job file with fio and with iodl, side by side"
SETTLE_S = 0.5   # after a write job's files are prepared, before each side (see prepare_writes)


def add_arguments(parser) -> None:
    parser.add_argument("jobfile", help="fio job file (reads, sequential writes; see docs/fio-compare.md)")
    parser.add_argument("--directory", help="override every job's directory= (where the files are)")
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
    from ..comm import world
    from ..errors import UsageError
    from ..fio import compare, layout
    from ..fio import run as iodl_run

    if args.scale is not None and not args.scale > 0:
        raise UsageError("--scale must be > 0")
    for name in ("runtime", "ramp_time"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0")
    # Everything that can be wrong with the job file is found before any I/O, on every rank.
    text, jobs = compare.derive_jobfile(args.jobfile, args.directory, args.scale, args.runtime, args.ramp_time)
    taken: set = set()
    plans = {i: iodl_run.plan_job(job, taken=taken) for i, job in enumerate(jobs)}
    # what iodl may read, create or must refuse (devices, files it did not lay out), on every rank
    disk = {i: p for i, p in plans.items() if p.engine != "null"}   # fio's null engine touches no file
    for p in disk.values():
        layout.check_files([f for clone in p.files for f in clone], allow_create=bool(p.job.get("allow_file_create", 1)))
    comm = world()
    buffered = any(not p.direct for p in plans.values())
    drop = buffered and os.geteuid() == 0

    for flag, path in (("--out", args.out), ("--keep-jobfile", args.keep_jobfile)):
        if path and (os.path.isdir(path) or not os.path.isdir(os.path.dirname(os.path.abspath(path)))):
            raise UsageError(f"{flag} {path}: names a directory or its directory does not exist")
    if args.repeat < 1:
        raise UsageError("--repeat must be >= 1")
    if args.repeat > 1 and args.fio_json:
        raise UsageError("--repeat runs fio again each round; it does not combine with --fio-json")
    run_fio = comm.rank == 0 and not args.no_fio and not args.fio_json
    fio_file = None
    if comm.rank == 0:
        for p in disk.values():
            layout.lay_out([f for clone in p.files for f in clone], allow_create=bool(p.job.get("allow_file_create", 1)))
        os.sync()   # the lay-out's writeback is not left to fall into the first timed run
        if args.keep_jobfile:
            with open(args.keep_jobfile, "w") as f:
                f.write(text)
        if run_fio:
            fio_file = tempfile.NamedTemporaryFile("w", suffix=".fio", prefix="iodl-fio-")
            fio_file.write(text)
            fio_file.flush()

    # write jobs: their files (iodl's own, marked) are put back in the state fio's lay-out leaves
    # them in before each side runs, so both start from the same files (layout.reset_for_write)
    writes: dict = {}
    for p in disk.values():
        if p.write:
            for clone in p.files:
                for spec in clone:
                    if spec.path not in writes or spec.needed > writes[spec.path][0].needed:
                        writes[spec.path] = (spec, p.reset)

    def prepare_writes():
        if comm.rank != 0 or not writes:
            return
        for spec, mode in writes.values():
            layout.reset_for_write(spec, mode)
        os.sync()

    def settle():
        # the last thing before a timed side that writes: a blkio throttle that saw the I/O of the
        # preparation (or of the cache drop's sync) lends its slice's idle budget to what follows
        # at once (iodl's side then ran up to 13% over a 40 MB/s write throttle; fio's start, an
        # exec later, did not get it). With the pause both start alike.
        if writes:
            time.sleep(SETTLE_S)

    def fio_round():
        if comm.rank != 0:
            return None
        if args.fio_json:
            return compare.load_fio_json(args.fio_json)
        if not run_fio:
            return None
        prepare_writes()
        _drop(drop)
        settle()
        return compare.run_fio(fio_file.name, args.fio)

    def iodl_round():
        # one reporting group after another (stonewall), all clones of a group at once
        groups = compare.groups_of(jobs)
        results = []
        prepare_writes()
        for g in sorted(set(groups)):
            if comm.rank == 0:
                _drop(drop)
                settle()
            results += iodl_run.run_clones({i: p for i, p in plans.items() if groups[i] == g}, comm)
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
    if comm.rank != 0:
        return 0

    sides = []
    for fio_data, results in rounds:
        iodl_job, iodl_group = compare.iodl_sides(results, jobs)
        fio_job, fio_group = ({}, {})
        if fio_data is not None:
            fio_job, fio_group = compare.fio_sides(fio_data, jobs, [p.numjobs for p in plans.values()])
        sides.append((fio_job, iodl_job, fio_group, iodl_group))
    fio_data = rounds[0][0]
    meta = {"jobfile": os.path.abspath(args.jobfile), "fio_version": (fio_data or {}).get("fio version"),
            "ranks": comm.size, "caches_dropped": drop, "repeat": args.repeat,
            "overrides": {"directory": args.directory, "scale": args.scale, "runtime_s": args.runtime,
                          "ramp_time_s": args.ramp_time}}
    doc = compare.document_rounds(jobs, sides, meta)

    from rich.console import Console

    compare.render(doc, Console())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


def _drop(enabled: bool) -> None:
    if enabled:
        from ..groundtruth import drop_caches

        drop_caches()
