"""Opens against the truth: a dataset of small files on a loop device, caches dropped, read once.

The count is exact (validate opens every file once); the latency is held against a plain loop of
open + fstat + close over the same files on an equally cold cache, timed the same way."""
import json
import os
import subprocess
import sys

import pytest

from iodl.cache import drop_caches
from iodl.groundtruth import LoopMount
from tests.helpers import NotJudged, iodl, load_json

FILES = 3000
SMALL = f"""\
[workload]
name = "small-files"
pattern = "validate"

[dataset]
format = "raw"
files = {FILES}
samples_per_file = 1
sample_size = "4KiB"

[train]
batch_size = 32
compute_time_s = 0.01
"""

PLAIN = """
import json, os, sys, time
paths = sorted(os.path.join(d, n) for d, _s, names in os.walk(sys.argv[1]) for n in names if n.endswith(".bin"))
took = []
for p in paths:
    t0 = time.monotonic_ns()
    fd = os.open(p, os.O_RDONLY)
    os.fstat(fd)
    took.append(time.monotonic_ns() - t0)
    os.close(fd)
took.sort()
print(json.dumps({"files": len(took), "p50_us": took[len(took) // 2] / 1e3}))
"""


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.flaky(reruns=1)   # a latency compared across two runs: a timing claim (not judged when CPU is stolen)
def test_opens_are_counted_exactly_and_their_latency_is_a_plain_open_loops(tmp_path):
    wl = tmp_path / "small.toml"
    wl.write_text(SMALL)
    with LoopMount(512 << 20) as m:
        root = os.path.join(m.path, "data")
        gen = iodl("generate", "--workload", str(wl), "--root", root, "--quiet", timeout=300)
        assert gen.returncode == 0, gen.stderr
        drop_caches()
        plain = json.loads(subprocess.run([sys.executable, "-c", PLAIN, root], capture_output=True, text=True,
                                          check=True).stdout)
        assert plain["files"] == FILES
        drop_caches()
        out = tmp_path / "r.json"
        proc = iodl("read", "--root", root, "--pattern", "validate", "--out", str(out), timeout=300)
        assert proc.returncode == 0, proc.stderr
    total = load_json(out)["total"]
    p50 = total["open_latency_us"]["p50"]
    print(f"{total['opens']} opens at {total['opens_per_s']:,.0f}/s, p50 {p50:.1f} µs; plain loop p50 "
          f"{plain['p50_us']:.1f} µs")
    assert total["opens"] == FILES
    assert total["opens_per_s"] == pytest.approx(FILES / total["window_s"], rel=1e-9)
    assert total["open_latency_us"]["p50"] <= total["open_latency_us"]["p99"] <= total["open_latency_us"]["max"]
    if plain["p50_us"] < 5:
        raise NotJudged(f"a cold open took {plain['p50_us']:.1f} µs: the cache was not cold, nothing to compare")
    assert plain["p50_us"] / 3 <= p50 <= plain["p50_us"] * 3, (p50, plain)
