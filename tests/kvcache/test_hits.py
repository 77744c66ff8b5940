"""MLPerf's cache hit rate and the share of reads that reached the device, against a hand count of
every lookup of a small deterministic run and against what the device served.

One user, one worker, 14 requests: the requests are served in the order the seed draws them, so
which entry sits in which tier at every lookup follows from the rules alone (docs/kvcache.md):
the CPU tier keeps at most 80 % of its size, demoting its least recently used entry to the storage
to make room; the storage keeps what fits in 95 % of the free space, unlinking its least recently
used entry; a lookup (an earlier turn, or a decode read of the request's own entry) makes the entry
the most recently used of its tier. The count below follows those rules by hand (slots of equal
4 MiB entries) and is then held against the command's result, its MLPerf file and the blkio
group's read bytes (the storage's hits, and nothing else, reach the device)."""
import glob
import json
import os
import random
from collections import OrderedDict
from types import SimpleNamespace

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount
from iodl.kvcache import STORAGE_SHARE, decode_reads
from iodl.patterns.kvcache import Arrivals, entry_key, make_users
from tests.helpers import iodl, load_json

MiB = 1 << 20
ENTRY = 4 * MiB
CPU_MIB = 12        # 80 % of it holds two entries
SEED = 59           # its one user thinks 0.15 s: 14 requests arrive within 2.2 s; its conversations
REQUESTS = 14       # reach past both tiers (hits in each, and misses)
MKFS = ("-E", "lazy_itable_init=0,lazy_journal_init=0")

pytestmark = [pytest.mark.root, pytest.mark.loopdev, pytest.mark.blkio]


def hand_count(seed: int, requests: int, cpu_slots: int, storage_slots: int) -> dict[str, int]:
    """Every lookup of the first `requests` requests of one user, by the tier that served it."""
    rng = random.Random(seed)
    arrivals = Arrivals(make_users(SimpleNamespace(users=1, context=(1, 1)), rng), rng)
    cpu: OrderedDict = OrderedDict()
    storage: OrderedDict = OrderedDict()
    n = {"cpu": 0, "storage": 0, "miss": 0}

    def look(key):
        for tier, name in ((cpu, "cpu"), (storage, "storage")):
            if key in tier:
                tier.move_to_end(key)
                n[name] += 1
                return
        n["miss"] += 1

    for _ in range(requests):
        r = arrivals.next()
        for turn in range(r.turn):
            look(entry_key(r.user, r.conversation, turn))
        while len(cpu) >= cpu_slots:     # demote the least recently used to the storage
            demoted, _ = cpu.popitem(last=False)
            while len(storage) >= storage_slots:
                storage.popitem(last=False)
            storage[demoted] = True
        cpu[r.key] = True
        for _ in range(decode_reads(r.generation)):
            look(r.key)
    return n


def test_hit_rate_and_device_share_are_the_hand_count_and_what_the_device_served(tmp_path):
    with LoopMount(18 * MiB, mkfs_args=MKFS) as m, BlkioGroup("iodl-i24-kv2-hits") as group:
        st = os.statvfs(m.path)
        free = st.f_bavail * st.f_frsize
        slots = int(free * STORAGE_SHARE) // ENTRY
        # the root, its mark and the rank's folder take a few blocks before the room is measured
        assert int((free - 64 * 1024) * STORAGE_SHARE) // ENTRY == slots == 3, free
        out, mlperf = tmp_path / "r.json", tmp_path / "mlperf"
        proc = iodl("kvcache", "--root", os.path.join(m.path, "kv"), "--option", "2", "--users", "1", "--workers", "1",
                    "--cpu-memory-gb", str(CPU_MIB / 1024), "--bytes-per-token", str(ENTRY - 128), "--context", "1",
                    "--seed", str(SEED), "--max-requests", str(REQUESTS), "--duration", "60", "--out", str(out),
                    "--mlperf-dir", str(mlperf), preexec_fn=group.enter, timeout=60)
        device = group.read_bytes(m.majmin)
        assert proc.returncode == 0, proc.stderr
    kv = load_json(out)["kvcache"]
    (rank_file,) = glob.glob(str(mlperf / "option_2" / "trial_0" / "rank_0" / "kvcache_results_*.json"))
    stats = json.loads(open(rank_file).read())["summary"]["cache_stats"]
    n = hand_count(SEED, REQUESTS, cpu_slots=2, storage_slots=slots)
    rate = (n["cpu"] + n["storage"]) / sum(n.values())
    print(f"hand count: {n} (hit rate {rate:.4f}); reported: cpu_reads {kv['cpu_reads']}, entry_reads "
          f"{kv['entry_reads']}, hit rate {kv['cache_hit_rate']:.4f}, read {kv['read_bytes']:,} B, device "
          f"{device:,} B, device share {kv['device_read_fraction']}")
    assert n["cpu"] > 0 and n["storage"] > 0 and n["miss"] > 0   # the run reaches every case
    assert kv["requests"] == REQUESTS and kv["errors"] == 0
    assert (kv["cpu_reads"], kv["entry_reads"]) == (n["cpu"], n["storage"])
    assert kv["cache_hit_rate"] == pytest.approx(rate, rel=1e-12) == stats["cache_hit_rate"]
    # the storage's hits, whole entries, are what the device served (its metadata was cached)
    assert kv["read_bytes"] == n["storage"] * ENTRY
    assert device == pytest.approx(kv["read_bytes"], rel=0.01)
    assert kv["device_read_fraction"] == pytest.approx(device / kv["read_bytes"], abs=0.01)
