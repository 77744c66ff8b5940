"""Time to first byte and CPU per GB of three GET clients: the s3 engine's (iodl.s3http: Python's
sockets, requests signed by awscrt.auth), awscrt's HTTP client (awscrt.http, signed the same way)
and awscrt's S3Client; the same ranged GETs one at a time on the same server.

    python bench/bench_s3_ttfb.py [--seconds 6] [--rounds 2]

awscrt's S3Client hands a GET's response headers over only once the body is in (docs/s3.md): it
cannot tell a time to first byte. This measures, per client: the headers' time, the first body
byte's, the whole GET's (p50 over the GETs), and the client's CPU seconds per GB (this process,
every thread), for 8 MiB ranged GETs of a 64 MiB object on a local SeaweedFS, 1 in flight, for
--seconds per cell, the clients alternating. Writes bench/results/s3-ttfb.{json,md}.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from awscrt import auth, http, io as crt_io, s3  # noqa: E402
from bench_s3_client import BUCKET, bench_args, bench_server, cpu_s, write_rows  # noqa: E402

from iodl.s3http import Connection, Signer  # noqa: E402

KEY = "ttfb/64MiB"
SIZE, PART = 64 << 20, 8 << 20


class HttpGets:
    """One kept-alive connection of awscrt.http; each GET signed (SigV4, headers) before it is sent."""
    name = "awscrt.http"

    def __init__(self, server, boot, creds):
        host, port = server.endpoint.split("//", 1)[1].rsplit(":", 1)
        self.netloc = f"{host}:{port}"
        self.conn = http.HttpClientConnection.new(host_name=host, port=int(port), bootstrap=boot).result()
        self.signing = auth.AwsSigningConfig(
            algorithm=auth.AwsSigningAlgorithm.V4, signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=creds, region="us-east-1", service="s3",
            signed_body_value=auth.AwsSignedBodyValue.EMPTY_SHA256,
            signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256)

    def get(self, req, t: list) -> None:
        auth.aws_sign_request(req, self.signing).result()

        def on_response(http_stream, status_code, headers, **_):
            t[1] = time.monotonic()

        def on_body(http_stream, chunk, **_):
            t[2] = t[2] or time.monotonic()
            t[3] += len(chunk)

        stream = self.conn.request(req, on_response=on_response, on_body=on_body)
        stream.activate()
        stream.completion_future.result()


class SocketGets:
    """The s3 engine's client: one kept-alive connection of iodl.s3http, the body received into one
    buffer and dropped; its answer's first byte is the headers' and the body's time."""
    name = "iodl.s3http (sockets)"

    def __init__(self, server, boot, creds):
        os.environ.update(AWS_ACCESS_KEY_ID=server.access_key, AWS_SECRET_ACCESS_KEY=server.secret_key)
        self.signer = Signer()
        self.netloc = server.endpoint.split("//", 1)[1]
        self.conn = Connection("http", self.netloc, bytearray(1 << 20))

    def get(self, req, t: list) -> None:
        first, last = (int(x) for x in dict(req.headers)["range"][len("bytes="):].split("-"))

        def on_first(now):
            t[1] = t[2] = now

        def on_body(n):
            t[3] += n

        status, _ = self.conn.get(self.signer.get_request(self.netloc, req.path, first, last), time.monotonic,
                                  on_first, on_body)
        assert status == 206, status


class S3ClientGets:
    """awscrt's S3Client, as iodl's s3 engine makes its GETs (one HTTP request each)."""
    name = "awscrt S3Client"

    def __init__(self, server, boot, creds):
        self.client = s3.S3Client(bootstrap=boot, region="us-east-1", tls_mode=s3.S3RequestTlsMode.DISABLED,
                                  signing_config=s3.create_default_s3_signing_config(region="us-east-1",
                                                                                     credential_provider=creds),
                                  max_active_connections_override=1, retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))

    def get(self, req, t: list) -> None:
        def on_headers(status_code, headers):
            t[1] = time.monotonic()

        def on_body(chunk, offset):
            t[2] = t[2] or time.monotonic()
            t[3] += len(chunk)

        self.client.make_request(type=s3.S3RequestType.DEFAULT, request=req, operation_name="GetObject",
                                 on_headers=on_headers, on_body=on_body).finished_future.result()


def cell(client, netloc: str, seconds: float) -> dict:
    times, nbytes, i = [], 0, 0
    cpu0, end = cpu_s(), time.monotonic() + seconds
    while time.monotonic() < end:
        offset = (i * PART) % SIZE
        i += 1
        req = http.HttpRequest("GET", f"/{BUCKET}/{KEY}", http.HttpHeaders(
            [("host", netloc), ("range", f"bytes={offset}-{offset + PART - 1}")]))
        t = [time.monotonic(), 0.0, 0.0, 0]
        client.get(req, t)
        done = time.monotonic()
        assert t[3] == PART, t
        times.append((t[1] - t[0], t[2] - t[0], done - t[0]))
        nbytes += t[3]
    cpu = cpu_s() - cpu0
    p50 = [statistics.median(x[k] for x in times) * 1e3 for k in range(3)]
    return {"client": client.name, "gets": len(times), "headers_ms_p50": round(p50[0], 2),
            "first_body_ms_p50": round(p50[1], 2), "whole_ms_p50": round(p50[2], 2),
            "cpu_s_per_GB": round(cpu / (nbytes / 1e9), 3)}


def main() -> None:
    args = bench_args(__doc__, 6.0, "s3-ttfb")
    server, setup = bench_server()
    rows = []
    try:
        setup.put_object(Bucket=BUCKET, Key=KEY, Body=os.urandom(SIZE))
        elg = crt_io.EventLoopGroup(2)
        boot = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
        creds = auth.AwsCredentialsProvider.new_static(server.access_key, server.secret_key)
        netloc = server.endpoint.split("//", 1)[1]
        clients = [SocketGets(server, boot, creds), HttpGets(server, boot, creds), S3ClientGets(server, boot, creds)]
        for rnd in range(args.rounds):
            for client in clients:
                row = {"round": rnd, **cell(client, netloc, args.seconds), "load": round(os.getloadavg()[0], 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.remove()
    command = write_rows(args, rows)
    lines = ["# Time to first byte: iodl's sockets, awscrt.http and awscrt's S3Client (bench/bench_s3_ttfb.py)", "",
             f"    {command.strip()}", "",
             f"Local SeaweedFS 4.48, 8 MiB ranged GETs of a 64 MiB object, 1 in flight, {args.seconds:g} s per cell, "
             "each round's cells listed; client and server share this 2-core VM.", "",
             "| round | client | GETs | headers p50 ms | first body byte p50 ms | whole GET p50 ms | client CPU s/GB | "
             "load |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['client']} | {r['gets']} | {r['headers_ms_p50']} | {r['first_body_ms_p50']} | "
              f"{r['whole_ms_p50']} | {r['cpu_s_per_GB']} | {r['load']} |" for r in rows]
    if max(r["load"] for r in rows) > os.cpu_count() + 1:
        lines += ["", "**The machine was NOT idle** (other work ran beside the bench): re-run on an idle machine."]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
