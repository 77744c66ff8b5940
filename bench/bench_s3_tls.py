"""What TLS costs the client: the s3 engine's GETs over https beside the same GETs over http, same server.

    python bench/bench_s3_tls.py [--seconds 6] [--rounds 3]

One local SeaweedFS (`weed mini`) whose S3 gateway serves plain http on its port and https (a
certificate of a private CA made here, tests/s3/tls.py) on a second port: the same objects, the same
server process, only the client's side of TLS differs. iodl's s3 engine (iodl.s3http: Python's ssl
over the same sockets) runs in this process: whole-object GETs of 16 objects of ~4 MB (`iodl generate`
of tiny), 1 and 8 in flight, --seconds per cell, http and https alternating within each round.
CPU s/GB: this process's own (user + system, every thread), per GB of GET bodies; the server's not.
Writes bench/results/s3-tls.{json,md}.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_s3_client import BUCKET, bench_args, write_rows  # noqa: E402
from bench_s3_iodl import engine_in_process  # noqa: E402
from tests.s3.tls import Pki, TlsSeaweed  # noqa: E402


class BothSchemes(TlsSeaweed):
    """The gateway's port speaks http (endpoint), and base + 9 https (https_endpoint)."""

    def __init__(self, top: str, pki: Pki):
        super().__init__(top, pki)
        self.endpoint = f"http://{self.ip}:{self.port}"
        self.https_endpoint = f"https://{self.ip}:{self.base + 9}"

    def argv(self) -> list[str]:
        return [*super().argv(), f"-s3.port.https={self.base + 9}"]

    def _answers(self) -> bool:
        return super(TlsSeaweed, self)._answers()   # the http port's


class At:
    """engine_in_process's view of the server at one of its endpoints."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint


def main() -> None:
    args = bench_args(__doc__, 6.0, "s3-tls")
    top = tempfile.mkdtemp(prefix="iodl-s3-bench-tls-")
    server = BothSchemes(top, Pki(os.path.join(top, "pki"))).start()
    rows = []
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        gen = subprocess.run([sys.executable, "-m", "iodl", "generate", "--root", f"s3://{BUCKET}/ds", "--endpoint",
                              server.endpoint, "--files", "16", "--quiet"], env=server.env(None), capture_output=True,
                             text=True)
        if gen.returncode:
            raise RuntimeError(gen.stderr)
        keys = [(o["Key"], o["Size"]) for o in client.list_objects_v2(Bucket=BUCKET, Prefix="ds/copy-")["Contents"]]
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})   # AWS_CA_BUNDLE too
        for rnd in range(args.rounds):
            for inflight in (1, 8):
                for scheme, endpoint in (("http", server.endpoint), ("https", server.https_endpoint)):
                    mbps, cpu = engine_in_process(At(endpoint), keys, inflight, args.seconds)
                    row = {"round": rnd, "inflight": inflight, "scheme": scheme, "MBps": round(mbps, 1),
                           "cpu_s_per_GB": round(cpu, 3), "load": round(os.getloadavg()[0], 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        server.remove()
    write(rows, args)


def write(rows: list[dict], args) -> None:
    command = write_rows(args, rows)
    lines = ["# TLS's cost to the client: the s3 engine's GETs over https and http (bench/bench_s3_tls.py)", "",
             f"    {command.strip()}", "",
             f"Local SeaweedFS 4.48, one server serving both (http on one port, https on another: a P-256 "
             f"certificate of a private CA); 16 objects of ~4 MB, whole-object GETs by iodl's s3 engine in the "
             f"bench's process, {args.seconds:g} s per cell, http and https alternating; median of {args.rounds} "
             "rounds; client and server share this 2-core VM. CPU s/GB: the client process's own (every thread).",
             "", "| in flight | http MB/s | https MB/s | http CPU s/GB | https CPU s/GB | https / http CPU, per round |",
             "|---|---|---|---|---|---|"]
    for inflight in sorted({r["inflight"] for r in rows}):
        by = {s: [r for r in rows if (r["inflight"], r["scheme"]) == (inflight, s)] for s in ("http", "https")}
        med = {s: (statistics.median(r["MBps"] for r in rs), statistics.median(r["cpu_s_per_GB"] for r in rs))
               for s, rs in by.items()}
        ratios = ", ".join(f"{b['cpu_s_per_GB'] / a['cpu_s_per_GB']:.2f}" for a, b in zip(by["http"], by["https"]))
        lines.append(f"| {inflight} | {med['http'][0]:.0f} | {med['https'][0]:.0f} | {med['http'][1]:.2f} | "
                     f"{med['https'][1]:.2f} | {ratios} |")
    loads = [r["load"] for r in rows]
    lines += ["", f"Load average (1 min) during the rounds: {min(loads):g}-{max(loads):g} on {os.cpu_count()} cores."]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
