"""`iodl generate`: write a workload's dataset under one or more roots (ranks share the shards)."""
from __future__ import annotations

from ..comm import collective
from ..data.generate import generate
from ..errors import UsageError
from ..limits import cli_int
from ..progress import Ticker, wrap
from ..s3root import add_s3_arguments, addressing, bucket_needed, given_endpoints, is_s3
from ..stop import HeldStops
from ..units import format_size
from ..workload import FORMATS, load_workload


def add_arguments(p) -> None:
    p.add_argument("--workload", default="tiny", metavar="NAME|FILE", help="built-in workload name, TOML file, or DLIO/MLPerf YAML file (default tiny)")
    p.add_argument("--root", action="append", default=[], metavar="DIR", required=True,
                   help="dataset root (repeatable: every root gets the whole dataset; one per mount), or "
                        "s3://BUCKET/PREFIX (docs/s3.md)")
    add_s3_arguments(p)
    p.add_argument("--files", type=cli_int, metavar="N", help="shards per copy (default: the workload's)")
    p.add_argument("--copies", type=cli_int, metavar="N", help="copies of the dataset, in copy-NNNN/ directories (default: the workload's)")
    p.add_argument("--format", choices=FORMATS, metavar="F",
                   help=f"shard format: {', '.join(FORMATS)} (default: the workload's)")
    p.add_argument("--subfolders", type=cli_int, metavar="N",
                   help="folders per copy, file i in folder i %% N (default: the workload's; 0: as few as keep "
                        "each at most 10,000 files)")
    p.add_argument("--seed", type=cli_int, metavar="S", help="seed of sample sizes and content (default: the workload's)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def run(comm, args) -> int:
    wl = collective(comm, lambda: load_workload(args.workload).with_overrides(
        files=args.files, copies=args.copies, format=args.format, seed=args.seed,
        subfolders=args.subfolders))

    objects = [r for r in args.root if is_s3(r)]
    if objects and len(objects) != len(args.root):
        raise UsageError("generate: give either directories or s3:// roots, not both")
    for flag in ("endpoint", "addressing"):
        if getattr(args, flag) and not objects:
            raise UsageError(f"--{flag} is for s3:// roots")
    if wl.read.storage == "object" and not objects:
        raise bucket_needed(wl, "")
    talk = comm.rank == 0 and not args.quiet
    # rank 0 sees its own share of the shards; the ranks' shares are near equal, so its fraction
    # done and its time left stand for the whole job
    label = "iodl generate" + (" (rank 0's share)" if comm.size > 1 else "")
    ticker = Ticker(label) if talk else None

    def progress(done: int, total: int) -> None:
        ticker.total = total
        ticker.update(done)

    say = (lambda line: print(wrap(line), flush=True)) if talk else None
    try:
        if objects:
            with HeldStops():   # awscrt: loaded only for a bucket; a stop meanwhile is taken after
                from ..s3generate import generate_s3
            result = generate_s3(wl, args.root, given_endpoints(args.endpoint, wl), comm, say=say, progress=progress if talk else None,
                                 addressing=addressing(args.addressing))
        else:
            result = generate(wl, args.root, comm, say=say, progress=progress if talk else None)
    finally:
        if ticker:
            ticker.close()
    if talk:
        files = (result.shards_written + result.shards_skipped)
        print(wrap(f"iodl generate: {files} files ({result.shards_written} written, {result.shards_skipped} already "
                   f"there), {format_size(result.total_bytes)} per root, wrote {format_size(result.bytes_written)} "
                   f"in {result.seconds:.2f} s = {result.mbps:.0f} MB/s"), flush=True)
    return 0
