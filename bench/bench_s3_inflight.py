"""GETs in flight over `iodl read`'s run: does the pipe stay full across storage-only's groups?

    python bench/bench_s3_inflight.py [--rounds 6] [--seconds 6]

A local SeaweedFS (tests/s3/server.py) and the dataset bench_s3_iodl.py reads (tiny, 16 objects of
~4 MB). `iodl read --pattern storage-only --block-size 8MiB --iodepth 8` runs in this process
(iodl.cli.main), its s3 engine's sends and ends timed: the mean number of GETs in flight over the
run after its first second (time-weighted), the engine runs (one per group of shards) and the gaps
between them. Rounds alternate the engine with S3Engine.ahead() and without it (the walk then
hands over a group only after the last one drained, as before ahead() existed). Prints one JSON
line per round. MB/s swings with the load on this shared VM; the mean in flight is the load's less.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench_s3_client import BUCKET, bench_server  # noqa: E402
from bench_s3_iodl import generate_dataset  # noqa: E402
from iodl import _native, cli, s3engine  # noqa: E402


class Timeline:
    """The engine's GET sends and ends (+1, -1 at a monotonic ns), and its runs' (start, end)."""

    def __init__(self):
        self.events, self.runs = [], []
        take, finish, run = s3engine._Job.take, s3engine._Job.finish, s3engine.S3Engine.run

        def timed_take(job, t0, *args):
            self.events.append((t0, 1))
            return take(job, t0, *args)

        def timed_finish(job, *args, **kwargs):
            self.events.append((_native.monotonic_ns(), -1))
            return finish(job, *args, **kwargs)

        def timed_run(engine, *args, **kwargs):
            t0 = _native.monotonic_ns()
            try:
                return run(engine, *args, **kwargs)
            finally:
                self.runs.append((t0, _native.monotonic_ns()))

        s3engine._Job.take, s3engine._Job.finish, s3engine.S3Engine.run = timed_take, timed_finish, timed_run

    def mean_inflight(self, skip_s: float = 1.0) -> float:
        """GETs in flight, averaged over time from skip_s after the first send to the last end."""
        ev = sorted(self.events)
        lo, hi = ev[0][0] + skip_s * 1e9, ev[-1][0]
        n, area, prev = 0, 0.0, ev[0][0]
        for t, d in ev:
            if t > lo:
                area += n * (t - max(prev, lo))
            n, prev = n + d, t
        return area / (hi - lo)

    def clear(self):
        self.events.clear()
        self.runs.clear()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    server, _client = bench_server()
    rows = []
    try:
        generate_dataset(server)
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        timeline, ahead = Timeline(), s3engine.S3Engine.ahead
        for rnd in range(args.rounds):
            with_ahead = rnd % 2 == 0
            if with_ahead:
                s3engine.S3Engine.ahead = ahead
            else:   # the walk looks the method up: without it, each group drains before the next
                del s3engine.S3Engine.ahead
            timeline.clear()
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "r.json")
                with open(os.devnull, "w") as quiet:
                    stdout, sys.stdout = sys.stdout, quiet
                    try:
                        code = cli.main(["read", "--root", f"s3://{BUCKET}/ds", "--endpoint", server.endpoint,
                                         "--pattern", "storage-only", "--block-size", "8MiB", "--iodepth", "8",
                                         "--duration", str(args.seconds), "--ramp", "1", "--out", out])
                    finally:
                        sys.stdout = stdout
                if code:
                    raise RuntimeError(f"iodl read exited {code}")
                with open(out) as f:
                    mbps = json.load(f)["total"]["bandwidth_MBps"]
            runs = timeline.runs
            gaps = [(b[0] - a[1]) / 1e6 for a, b in zip(runs, runs[1:])]
            row = {"ahead": with_ahead, "MBps": round(mbps, 1), "mean_inflight": round(timeline.mean_inflight(), 3),
                   "runs": len(runs), "run_ms_median": round(statistics.median((b - a) / 1e6 for a, b in runs), 1),
                   "gap_ms_median": round(statistics.median(gaps), 2) if gaps else None,
                   "load": round(os.getloadavg()[0], 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.remove()
    for flag in (True, False):
        rs = [r for r in rows if r["ahead"] is flag]
        if rs:
            print(f"ahead={flag}: mean in flight {', '.join(str(r['mean_inflight']) for r in rs)}; "
                  f"MB/s {', '.join(str(r['MBps']) for r in rs)}")


if __name__ == "__main__":
    main()
