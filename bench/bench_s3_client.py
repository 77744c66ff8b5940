"""S3 client libraries side by side, to choose iodl's by measurement: awscrt's S3Client and boto3.

    python bench/bench_s3_client.py [--seconds 6] [--rounds 2]

Against a local SeaweedFS (`weed mini`, tests/s3/server.py; client and server share this VM's
cores, so the figure that matters is the client's CPU per byte and per request, not the MB/s).
Per client, operation (GET, PUT), object size (16 MiB, 1 MiB, 4 KiB) and requests in flight (1, 8):
as many whole-object requests as fit in --seconds, each on objects written beforehand. CPU seconds
are this process's (user + system, every thread: awscrt's event loops too), the server's not.
Both clients make plain requests: one GET or PUT per object, no multipart, no CRT part splitting
(S3RequestType.DEFAULT), path-style, unsigned payload for awscrt's PUT as for boto3's.
Writes bench/results/s3-client.{json,md}.
"""
import argparse
import io
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.s3.server import Seaweed  # noqa: E402

SIZES = {"16MiB": 16 << 20, "1MiB": 1 << 20, "4KiB": 4 << 10}
OBJECTS = 8   # per size: requests cycle over them
BUCKET = "iodl-bench"


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Crt:
    """awscrt's S3Client, its body handed to Python (on_body: one callback per chunk it received)."""
    to_file = None

    def __init__(self, server: Seaweed, inflight: int):
        from awscrt import auth, http, io as crt_io, s3
        self.s3, self.http = s3, http
        elg = crt_io.EventLoopGroup(2)
        boot = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
        creds = auth.AwsCredentialsProvider.new_static(server.access_key, server.secret_key)
        signing = s3.create_default_s3_signing_config(region="us-east-1", credential_provider=creds)
        self.client = s3.S3Client(bootstrap=boot, region="us-east-1", tls_mode=s3.S3RequestTlsMode.DISABLED,
                                  signing_config=signing, max_active_connections_override=inflight,
                                  retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
        self.host = server.endpoint.split("//", 1)[1]

    def start(self, op: str, key: str, body: bytes | None, done, length: int = 0) -> None:
        """length: a GET with `Range: bytes=0-(length-1)`, as iodl's s3 engine sends a whole object's."""
        headers = self.http.HttpHeaders([("host", self.host)])
        if length:
            headers.add("range", f"bytes=0-{length - 1}")
        stream = None
        if op == "PUT":
            headers.add("content-length", str(len(body)))
            stream = io.BytesIO(body)   # shares the bytes object's buffer (no copy until written)
        req = self.http.HttpRequest(op, f"/{BUCKET}/{key}", headers, stream)
        got = [0]

        def on_body(chunk, offset):
            got[0] += len(chunk)

        def on_done(error=None, **_):
            done(error, got[0] if op == "GET" else len(body))

        if self.to_file and op == "GET":
            # the body goes to a file by the CRT's own threads, never through Python; its length from
            # the response's headers
            def on_headers(status_code, headers):
                got[0] = int(dict((k.lower(), v) for k, v in headers).get("content-length", 0))

            self.client.make_request(type=self.s3.S3RequestType.GET_OBJECT, request=req, recv_filepath=self.to_file,
                                     part_size=len(body) if body else None, on_headers=on_headers, on_done=on_done)
            return
        self.client.make_request(type=self.s3.S3RequestType.DEFAULT, request=req, operation_name=
                                 "GetObject" if op == "GET" else "PutObject", on_body=on_body, on_done=on_done)


class CrtToFile(Crt):
    """awscrt's S3Client writing a GET's body to /dev/null itself (recv_filepath): no Python per chunk."""
    to_file = "/dev/null"


class Boto:
    name = "boto3"

    def __init__(self, server: Seaweed, inflight: int):
        import boto3
        from botocore.config import Config
        self.client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                                   aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                                   config=Config(s3={"addressing_style": "path"}, max_pool_connections=inflight,
                                                 retries={"max_attempts": 1}))

    def call(self, op: str, key: str, body: bytes | None) -> int:
        if op == "PUT":
            self.client.put_object(Bucket=BUCKET, Key=key, Body=body)
            return len(body)
        n = 0
        for chunk in self.client.get_object(Bucket=BUCKET, Key=key)["Body"].iter_chunks(1 << 20):
            n += len(chunk)
        return n


def run_crt(cl: Crt, op: str, size: int, inflight: int, seconds: float, body: bytes) -> tuple[int, int]:
    """Keep `inflight` requests going until the time is up; (bytes, requests) done."""
    cv = threading.Condition()
    state = {"bytes": 0, "ops": 0, "out": 0, "err": None, "i": 0}
    end = time.monotonic() + seconds

    def done(error, n):
        with cv:
            state["out"] -= 1
            if error is not None:
                state["err"] = error
            else:
                state["bytes"] += n
                state["ops"] += 1
            cv.notify()

    with cv:
        while time.monotonic() < end and state["err"] is None:
            while state["out"] < inflight:
                state["out"] += 1
                state["i"] += 1
                cl.start(op, _key(op, size, state["i"]), body, done)
            cv.wait(0.5)
        while state["out"]:
            cv.wait(0.5)
    if state["err"] is not None:
        raise state["err"]
    return state["bytes"], state["ops"]


def run_boto(cl: Boto, op: str, size: int, inflight: int, seconds: float, body: bytes) -> tuple[int, int]:
    totals = [[0, 0] for _ in range(inflight)]
    end = time.monotonic() + seconds

    def worker(t: int) -> None:
        i = t
        while time.monotonic() < end:
            totals[t][0] += cl.call(op, _key(op, size, i), body)
            totals[t][1] += 1
            i += inflight

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(inflight)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(t[0] for t in totals), sum(t[1] for t in totals)


def _key(op: str, size: int, i: int) -> str:
    return f"{'get' if op == 'GET' else 'put'}/{size}/{i % OBJECTS}"


def bench_args(doc: str, seconds: float, name: str, extra: tuple = ()):
    """The S3 benches' options: --seconds per cell, --rounds, --out (bench/results/NAME without
    suffix); extra: (flag, default) of a bench's own options, of the default's type (int, str)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results", name))
    for flag, default in extra:
        ap.add_argument(flag, type=type(default), default=default)
    return ap.parse_args()


def write_rows(args, rows: list[dict], **more) -> str:
    """args.out + ".json": the command line that ran the bench, --seconds, --rounds, more, the rows;
    returns the command line (the .md's first line)."""
    command = f"python bench/{os.path.basename(sys.argv[0])} " + " ".join(sys.argv[1:])
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"command": command, "seconds": args.seconds, "rounds": args.rounds, **more, "rows": rows}, f,
                  indent=1)
    return command


def bench_server() -> tuple[Seaweed, object]:
    """A local SeaweedFS for a bench and its boto3 client (the bench's own setup), BUCKET made."""
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-bench-")).start()
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
    except BaseException:
        server.remove()
        raise
    return server, client


def main() -> None:
    args = bench_args(__doc__, 6.0, "s3-client")
    server, setup = bench_server()
    rows = []
    try:
        bodies = {size: os.urandom(size) for size in SIZES.values()}
        for size, body in bodies.items():
            for i in range(OBJECTS):
                setup.put_object(Bucket=BUCKET, Key=f"get/{size}/{i}", Body=body)
        runners = {"awscrt": (Crt, run_crt), "awscrt-file": (CrtToFile, run_crt), "boto3": (Boto, run_boto)}
        for rnd in range(args.rounds):
            for op in ("GET", "PUT"):
                for label, size in SIZES.items():
                    for inflight in (1, 8):
                        # the clients alternate within a round, so drift in the server hits both
                        for name, (make, runner) in runners.items():
                            cl = make(server, inflight)
                            c0, t0 = cpu_s(), time.monotonic()
                            nbytes, ops = runner(cl, op, size, inflight, args.seconds, bodies[size])
                            wall, cpu = time.monotonic() - t0, cpu_s() - c0
                            del cl
                            row = dict(round=rnd, client=name, op=op, size=label, inflight=inflight, bytes=nbytes,
                                       ops=ops, wall_s=round(wall, 3), cpu_s=round(cpu, 3))
                            rows.append(row)
                            print(json.dumps(row), flush=True)
    finally:
        server.remove()
    write(rows, args.out, args)


def write(rows: list[dict], out: str, args) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump({"seconds": args.seconds, "rounds": args.rounds, "rows": rows}, f, indent=1)
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], r["size"], r["inflight"], r["client"]), []).append(r)
    lines = ["# S3 client libraries: awscrt S3Client vs boto3 (bench/bench_s3_client.py)", "",
             f"Local SeaweedFS 4.48 on this 2-core VM, {args.seconds:g} s per cell, median of {args.rounds} rounds. "
             "CPU s/GB and requests per CPU-second are the client process's own (every thread). "
             "awscrt-file is awscrt with a GET's body written to /dev/null by the CRT's threads (recv_filepath); "
             "its PUTs are awscrt's. The server shares the two cores: MB/s is noisy, CPU per GB and per request "
             "are the comparison.", "",
             "| op | size | in flight | client | MB/s | requests/s | client CPU s/GB | requests per client CPU-s |",
             "|---|---|---|---|---|---|---|---|"]
    for (op, size, inflight, client), rs in groups.items():
        mbps = statistics.median(r["bytes"] / r["wall_s"] / 1e6 for r in rs)
        ops = statistics.median(r["ops"] / r["wall_s"] for r in rs)
        cpu_gb = statistics.median(r["cpu_s"] / (r["bytes"] / 1e9) for r in rs)
        per_cpu = statistics.median(r["ops"] / r["cpu_s"] for r in rs)
        lines.append(f"| {op} | {size} | {inflight} | {client} | {mbps:.0f} | {ops:.0f} | {cpu_gb:.2f} | {per_cpu:.0f} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
