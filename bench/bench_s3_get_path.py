"""Where a GET's time goes at one request in flight: the s3 engine beside a plain loop of its client.

    python bench/bench_s3_get_path.py [--seconds 1] [--rounds 20] [--split-cpus 1] [--iodl-read 1]

At one GET in flight a client's rate is one object per request's time, so whatever the engine
adds on a request's path shows in full. A local SeaweedFS (tests/s3/server.py), the dataset of
bench_s3_iodl (tiny's 16 shards, ~4.2 MB objects), whole-object GETs. Each round runs the plain
loop (bench_s3_iodl.socket_loop: one thread, one connection, the requests of iodl.s3http signed by
awscrt.auth) and the engine in this process (bench_s3_iodl.engine_in_process: S3Engine.run at
depth 1) for --seconds each, and with --iodl-read 1 `iodl read` too (the command, storage-only at
--iodepth 1, as bench_s3_iodl runs it, for a window of --seconds after a second's ramp), taking
turns at going first: short slices side by side, so that they meet the same load.

Every request is stamped (time.perf_counter_ns, and the thread's CPU by time.thread_time_ns) by
wrappers around s3http.Signer.get_request and s3http.Connection.get that both clients go through
(the same cost in each; `iodl read` in a child of this script that wraps them
alike, --stamped-read): signing; request sent -> the answer's first byte; first -> last byte
(the body); and between requests, the last byte of one -> the signing of the next, the client's own
work per request (the engine: the completion counted, the next row taken, under its lock; the
loop: its counter). Writes bench/results/s3-get-path.{json,md}: per round each client's MB/s, the
medians of the parts, and their medians over the rounds.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_s3_client import BUCKET, bench_args, bench_server, write_rows  # noqa: E402
from bench_s3_iodl import engine_in_process, generate_dataset, socket_loop, split_cpus  # noqa: E402
from iodl import s3http  # noqa: E402

PARTS = ("between", "sign", "to_first_byte", "body")
STAMPS: list[tuple] = []   # per request: sign start, sign end, sent, first byte, last byte, thread CPU at both ends


def _stamp() -> None:
    """Wrap the client's two calls (both clients make them) to stamp each request."""
    sign, get = s3http.Signer.get_request, s3http.Connection.get
    mine = threading.local()

    def stamped_sign(self, *args):
        mine.c0, mine.s0 = time.thread_time_ns(), time.perf_counter_ns()
        out = sign(self, *args)
        mine.s1 = time.perf_counter_ns()
        return out

    def stamped_get(self, request, clock, on_first, on_body):
        sent, first = time.perf_counter_ns(), [0]

        def first_byte(t):
            first[0] = time.perf_counter_ns()
            on_first(t)

        out = get(self, request, clock, first_byte, on_body)
        STAMPS.append((mine.s0, mine.s1, sent, first[0], time.perf_counter_ns(), mine.c0, time.thread_time_ns()))
        return out

    s3http.Signer.get_request, s3http.Connection.get = stamped_sign, stamped_get


def parts(stamps: list[tuple]) -> dict:
    """Medians (us) of a run's parts per request, and the client's CPU (us) between requests."""
    st = sorted(stamps)
    med = lambda xs: round(statistics.median(xs) / 1e3, 1)   # noqa: E731
    return {"between": med([b[0] - a[4] for a, b in zip(st, st[1:])]),
            "between_cpu": med([b[5] - a[6] for a, b in zip(st, st[1:])]),
            "sign": med([s[1] - s[0] for s in st]), "to_first_byte": med([s[3] - s[2] for s in st]),
            "body": med([s[4] - s[3] for s in st]), "requests": len(st)}


RAMP_S = 1   # of `iodl read`: its GETs of the first second are not the window's, nor counted here


def stamped_read(server, seconds: float) -> tuple[float, float]:
    """`iodl read` storage-only at --iodepth 1, as bench_s3_iodl.iodl_read runs it, in a child of
    this script that stamps its GETs (main with --stamped-read): (its window's MB/s, None); its
    GETs of the window into STAMPS."""
    with tempfile.TemporaryDirectory() as d:
        out, stamps = os.path.join(d, "r.json"), os.path.join(d, "stamps.json")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--stamped-read", stamps, "read", "--root",
                               f"s3://{BUCKET}/ds", "--endpoint", server.endpoint, "--pattern", "storage-only",
                               "--block-size", "8MiB", "--iodepth", "1", "--duration", str(seconds), "--ramp",
                               str(RAMP_S), "--out", out], env=server.env(), capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr)
        with open(out) as f, open(stamps) as g:
            mbps, got = json.load(f)["total"]["bandwidth_MBps"], json.load(g)
    start = min(s[0] for s in got) + RAMP_S * 10**9
    STAMPS.extend(tuple(s) for s in got if s[0] >= start)
    return mbps, None


def stamped_read_child(stamps: str, argv: list[str]) -> int:
    """--stamped-read FILE ARGS: `iodl ARGS` with its GETs stamped, the stamps written to FILE."""
    from iodl.cli import main as iodl_main
    _stamp()
    try:
        return iodl_main(argv)
    finally:
        with open(stamps, "w") as f:
            json.dump(STAMPS, f)


def main() -> None:
    if sys.argv[1:2] == ["--stamped-read"]:
        sys.exit(stamped_read_child(sys.argv[2], sys.argv[3:]))
    args = bench_args(__doc__, 1.0, "s3-get-path", extra=(("--split-cpus", 0), ("--iodl-read", 0)))
    server, client = bench_server()
    rows = []
    try:
        if args.split_cpus:   # (in the try: a machine of one CPU still removes the server)
            split_cpus(server.proc.pid)
        generate_dataset(server)
        keys = [(o["Key"], o["Size"]) for o in client.list_objects_v2(Bucket=BUCKET, Prefix="ds/copy-")["Contents"]]
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        _stamp()
        runs = {"loop": lambda: socket_loop(server, keys, 1, args.seconds),
                "engine": lambda: engine_in_process(server, keys, 1, args.seconds)}
        if args.iodl_read:
            runs["iodl read"] = lambda: stamped_read(server, args.seconds)
        for rnd in range(args.rounds):
            row = {"round": rnd}
            for name in (list(runs) if rnd % 2 == 0 else list(runs)[::-1]):
                STAMPS.clear()
                mbps, cpu = runs[name]()
                row[name] = {"MBps": round(mbps, 1), "cpu_s_per_GB": None if cpu is None else round(cpu, 3),
                             **parts(STAMPS)}
            row["load"] = round(os.getloadavg()[0], 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.remove()
    write(rows, args)


def write(rows: list[dict], args) -> None:
    command = write_rows(args, rows)
    med = lambda name, key: statistics.median(r[name][key] for r in rows)   # noqa: E731
    clients = [name for name in ("loop", "engine", "iodl read") if name in rows[0]]
    loads = [r["load"] for r in rows]
    lines = ["# A GET's time at one in flight: the s3 engine beside a plain loop of its client "
             "(bench/bench_s3_get_path.py)", "", f"    {command.strip()}", "",
             f"Local SeaweedFS, 16 objects of ~4.2 MB, whole-object GETs, one in flight; {args.rounds} rounds of "
             f"{args.seconds:g} s per client, taking turns at going first"
             + (" (the server on the last CPU, the clients on the others)" if args.split_cpus else "")
             + ". engine: S3Engine.run in the bench's process; iodl read: the command, storage-only, its window "
               "(its MB/s as it reports it). Medians over the rounds of each round's median per request, in us.", "",
             "| client | MB/s | between requests | its CPU | signing | sent -> first byte | body | CPU s/GB |",
             "|---|---|---|---|---|---|---|---|"]
    for name in clients:
        cpu = "-" if rows[0][name]["cpu_s_per_GB"] is None else f"{med(name, 'cpu_s_per_GB'):.3f}"
        lines.append(f"| {name} | {med(name, 'MBps'):.0f} | {med(name, 'between'):.1f} | {med(name, 'between_cpu'):.1f} "
                     f"| {med(name, 'sign'):.1f} | {med(name, 'to_first_byte'):.0f} | {med(name, 'body'):.0f} | {cpu} |")
    for name in clients[1:]:
        ratios = sorted(r[name]["MBps"] / r["loop"]["MBps"] for r in rows)
        lines += ["", f"{name} / loop MB/s per round: median {statistics.median(ratios):.2f}, "
                      f"{ratios[0]:.2f}-{ratios[-1]:.2f} ({', '.join(f'{x:.2f}' for x in ratios)} sorted)."]
    lines += ["", f"Load average (1 min) at each round's end: {min(loads):g}-{max(loads):g} on {os.cpu_count()} cores."]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
