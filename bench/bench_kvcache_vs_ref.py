"""iodl kvcache side by side with MLPerf's reference generator, kv-cache.py, on one loop device.

Both tools run MLPerf's options 1-3 scaled down to fit a small machine: every model's KV bytes per
token divided by --scale (entries shrink by that factor, the requests stay as drawn; iodl's
--bytes-per-token, the reference's own model entry in a --config file of its format), the CPU
tier of option 2 divided by the same factor, the users per option divided by --users-div, and a
short --duration. Each run writes into its own folder of one ext4 loop device (direct I/O to the
backing file, so what the filesystem sends is what a disk would see); the device's own counters
(/sys/block/loopN/stat) are read before and after each process.

Compared per option: the read:write byte ratio (each tool's own count and the device's), the
entry files left on disk (count and size distribution in tokens), the requests and tokens/s.

The reference is not part of iodl: give the path of its kv-cache.py (kv_cache_benchmark/ of
mlcommons/storage) and the Python that has its dependencies (numpy, pyyaml).

Usage (root): python bench/bench_kvcache_vs_ref.py /path/to/kv-cache.py --ref-python /path/to/python
              [--options 1 2 3] [--duration 60] [--scale 128] [--users-div 4] [--out bench/results]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from iodl import groundtruth  # noqa: E402
from iodl.kvcache import HEADER_BYTES, MODELS, OPTIONS  # noqa: E402

# the reference's ModelConfig: layers x kv_heads x (hidden_dim / num_heads) x 2 x 2 bytes; one layer,
# one head of hidden_dim = bytes per token / 4 gives any multiple of 4
REF_MODEL = "iodl-scaled-{option}"


def ref_config(path: str, bytes_per_token: dict[int, int]) -> None:
    """A --config file for kv-cache.py holding only the scaled models (everything else its defaults)."""
    with open(path, "w") as f:
        f.write("model_configs:\n")
        for option, bpt in bytes_per_token.items():
            assert bpt % 4 == 0
            f.write(f"  {REF_MODEL.format(option=option)}:\n    name: scaled option {option}\n    num_layers: 1\n"
                    f"    hidden_dim: {bpt // 4}\n    num_heads: 1\n    kv_heads: 1\n    dtype: float16\n")


def entries(directory: str, suffix: str) -> list[int]:
    return [os.stat(os.path.join(directory, n)).st_size for n in os.listdir(directory) if n.endswith(suffix)]


def run(cmd: list[str], mount, log: str, group) -> dict:
    """One tool's process: its wall time and what the device read and wrote meanwhile."""
    before, cpu_before = mount.device_stat(), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, preexec_fn=group.enter if group else None)
    wall = time.monotonic() - start
    after, cpu_after = mount.device_stat(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}); see {log}")
    cpu_s = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu_s, "device_read_bytes": (after[2] - before[2]) * 512,
            "device_written_bytes": (after[6] - before[6]) * 512}


def size_stats(sizes: list[int], bpt: int) -> dict:
    tokens = np.array(sorted((s - HEADER_BYTES) // bpt for s in sizes)) if sizes else np.zeros(1)
    q = np.percentile(tokens, [10, 50, 90])
    return {"files": len(sizes), "bytes": int(sum(sizes)), "tokens_p10": float(q[0]), "tokens_p50": float(q[1]),
            "tokens_p90": float(q[2]), "tokens_mean": float(tokens.mean()), "tokens_max": int(tokens.max()),
            "prefill_only_share": float((tokens >= 10_000).mean())}


def own_ratio(r: dict) -> str:
    """A tool's own read:write; kv-cache.py counts no demotion among its written bytes, so with a CPU tier
    (every entry demoted) it has none."""
    return f"{r['read_bytes'] / r['written_bytes']:.2f}" if r["written_bytes"] else "n/a (no write counted)"


def ks_distance(a: list[int], b: list[int]) -> float:
    """The largest gap between the two empirical distributions of file sizes (Kolmogorov-Smirnov D)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref", help="kv-cache.py of mlcommons/storage (kv_cache_benchmark/)")
    ap.add_argument("--ref-python", default=sys.executable, help="a Python with numpy and pyyaml for it")
    ap.add_argument("--options", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--duration", type=int, default=60, help="seconds (kv-cache.py takes whole seconds)")
    ap.add_argument("--scale", type=int, default=128, help="bytes per token divided by this")
    ap.add_argument("--users-div", type=int, default=4, help="each option's users divided by this")
    ap.add_argument("--read-throttle", type=float, default=0, metavar="MBPS",
                    help="a blkio read throttle on the device (0: none), so that both tools wait on the same storage "
                         "rather than one on its own CPU")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument("--size", type=int, default=24 << 30, help="loop device bytes (sparse)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--keep", help="keep each run's logs and JSON here (default: a temporary folder)")
    args = ap.parse_args()

    work = args.keep or f"/var/tmp/bench-kvcache-vs-ref-{os.getpid()}"
    os.makedirs(work, exist_ok=True)
    bpt = {o: MODELS[OPTIONS[o].model].bytes_per_token // args.scale for o in args.options}
    config = os.path.join(work, "scaled-models.yaml")
    ref_config(config, bpt)
    rows = []
    with contextlib.ExitStack() as stack:
        m = stack.enter_context(groundtruth.LoopMount(args.size))
        group = None
        if args.read_throttle:
            group = stack.enter_context(groundtruth.BlkioGroup(f"bench-kvcache-vs-ref-{os.getpid()}"))
            group.throttle_read(m.majmin, int(args.read_throttle * 1e6))
        for o, seed in [(o, seed) for o in args.options for seed in args.seeds]:
            opt = OPTIONS[o]
            users = max(1, opt.users // args.users_div)
            cpu_gb = opt.cpu_memory_gb / args.scale
            ref_dir, iodl_root = os.path.join(m.path, f"ref-{o}"), os.path.join(m.path, f"iodl-{o}")
            ref_json, iodl_json = os.path.join(work, f"ref-{o}-{seed}.json"), os.path.join(work, f"iodl-{o}-{seed}.json")
            ref_cmd = [args.ref_python, args.ref, "--config", config, "--model", REF_MODEL.format(option=o),
                       "--num-users", str(users), "--duration", str(args.duration), "--gpu-mem-gb", "0",
                       "--cpu-mem-gb", str(cpu_gb), "--max-concurrent-allocs", str(opt.max_concurrent_writes),
                       "--generation-mode", "none", "--seed", str(seed), "--cache-dir", ref_dir, "--output", ref_json]
            iodl_cmd = [sys.executable, "-m", "iodl", "kvcache", "--root", iodl_root, "--option", str(o),
                        "--bytes-per-token", str(bpt[o]), "--users", str(users), "--duration", str(args.duration),
                        "--cpu-memory-gb", str(cpu_gb), "--seed", str(seed), "--out", iodl_json]
            got = {}
            for tool, cmd in (("ref", ref_cmd), ("iodl", iodl_cmd)):
                print(f"option {o}, {tool}: {' '.join(cmd)}", flush=True)
                got[tool] = run(cmd, m, os.path.join(work, f"{tool}-{o}-{seed}.log"), group)
            ref_sizes = entries(ref_dir, ".npy")
            iodl_sizes = entries(os.path.join(iodl_root, "rank_0"), ".kv")
            ref = json.load(open(ref_json))["summary"]
            kv = json.load(open(iodl_json))
            cs = ref["cache_stats"]
            ref_counts = {"requests": ref["total_requests"], "generated_tokens": ref["total_tokens"],
                          "tokens_per_s": ref["avg_throughput_tokens_per_sec"],
                          # its own counts, at the start of each access (demotions' writes not among them)
                          "read_bytes": round(cs["tier_storage_kv_bytes_read_gb"] * 2**30),
                          "written_bytes": round(cs["tier_storage_kv_bytes_written_gb"] * 2**30),
                          "cache_hit_rate": cs["cache_hit_rate"]}
            rows.append({
                "option": o, "seed": seed, "bytes_per_token": bpt[o], "users": users, "cpu_memory_gb": cpu_gb,
                "duration_s": args.duration, "commands": {"ref": ref_cmd, "iodl": iodl_cmd},
                "ref": {**got["ref"], **size_stats(ref_sizes, bpt[o]), **ref_counts, "summary": ref},
                "iodl": {**got["iodl"], **size_stats(iodl_sizes, bpt[o]),
                         "requests": kv["kvcache"]["requests"], "tokens": kv["kvcache"]["tokens"],
                         "tokens_per_s": kv["kvcache"]["tokens_per_s"],
                         "mlperf_tokens_per_s": kv["mlperf"]["aggregated_avg_throughput_tokens_per_sec"],
                         "read_bytes": kv["kvcache"]["read_bytes"], "written_bytes": kv["kvcache"]["written_bytes"],
                         "entry_reads": kv["kvcache"]["entry_reads"], "cache_hit_rate": kv["kvcache"]["cache_hit_rate"],
                         "window_s": kv["kvcache"]["window_s"]},
                "ks_distance": ks_distance(ref_sizes, iodl_sizes) if ref_sizes and iodl_sizes else None,
            })
            for tool in ("ref", "iodl"):
                r = rows[-1][tool]
                r["device_read_write_ratio"] = r["device_read_bytes"] / max(1, r["device_written_bytes"])
            for tool in ("ref", "iodl"):
                r = rows[-1][tool]
                print(f"  {tool}: {r['requests']} requests, {r['files']} files (p50 {r['tokens_p50']:.0f} tokens), "
                      f"read:write own {own_ratio(r)}, "
                      f"device {r['device_read_write_ratio']:.2f}", flush=True)
            shutil.rmtree(ref_dir, ignore_errors=True)   # room for the next option
            shutil.rmtree(iodl_root, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kvcache-vs-ref.json"), "w") as f:
        json.dump({"scale": args.scale, "users_div": args.users_div, "duration_s": args.duration,
                   "read_throttle_MBps": args.read_throttle, "runs": rows},
                  f, indent=1, default=str)
    print(f"written {os.path.join(args.out, 'kvcache-vs-ref.json')}; logs in {work}")


if __name__ == "__main__":
    main()
