"""The worked example of docs/worked-example.md, reproducible: two loop mounts throttled at 40 and
80 MB/s, a dataset on each with part of one already in the page cache, and a buffered train-sync
run at 4 ranks with the result, CSV and plot kept. Needs root, loop devices and cgroup v1 blkio.

    python bench/example_two_mounts.py

Writes bench/results/example-two-mounts.{txt,json,csv,png} and prints the blkio truth beside
iodl's figures.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from iodl.cache import drop_caches  # noqa: E402
from iodl.groundtruth import BlkioGroup, LoopMount  # noqa: E402

MB = 1_000_000
OUT = os.path.join(HERE, "results", "example-two-mounts")
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def iodl(*args, preexec_fn=None, ranks=0):
    cmd = [sys.executable, "-m", "iodl", *args]
    if ranks:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=preexec_fn, timeout=600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return proc.stdout


def main() -> None:
    throttles = (40 * MB, 80 * MB)
    links = ("/mnt/a", "/mnt/b")   # short names for the temporary mounts in what is printed and kept
    for link in links:
        if os.path.lexists(link):
            raise SystemExit(f"{link} exists: this example names its mounts /mnt/a and /mnt/b")
    with LoopMount(1 << 30) as a, LoopMount(1 << 30) as b, BlkioGroup("iodl-example") as group:
        for m, link in zip((a, b), links):
            os.symlink(m.path, link)
        try:
            run(a, b, links, group, throttles)
        finally:
            for link in links:
                os.unlink(link)
    iodl("report", OUT + ".json", "--plot", OUT + ".png")


def run(a, b, links, group, throttles) -> None:
    for m in (a, b):
        iodl("generate", "--workload", "tiny", "--copies", "4", "--root", m.path, "--quiet")
    for m, bps in zip((a, b), throttles):
        group.throttle_read(m.majmin, bps)
    drop_caches()
    # a quarter of mount B's shards were read recently: they sit in the page cache
    shards = sorted(os.path.join(dp, f) for dp, _d, fs in os.walk(b.path) for f in fs if f.endswith(".tfrecord"))
    for p in shards[: len(shards) // 4]:
        with open(p, "rb") as f:
            f.read()
    text = iodl("read", "--pattern", "train-sync", "--root", links[0], "--root", links[1], "--epochs", "1",
                "--out", OUT + ".json", "--csv", OUT + ".csv", preexec_fn=group.enter, ranks=4)
    device = [group.read_bytes(m.majmin) for m in (a, b)]
    with open(OUT + ".json") as f:
        result = json.load(f)
    for m, dev, bps in zip(result["mounts"], device, throttles):
        truth = 1 - dev / m["bytes"] if m["bytes"] else 0.0
        print(f"{m['path']}: throttle {bps / MB:.0f} MB/s; storage MB/s {m['storage_bandwidth_MBps']:.1f}; "
              f"cache hit {m['cache_hit_fraction']:.3f} vs blkio truth {truth:.3f}")
    with open(OUT + ".txt", "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
