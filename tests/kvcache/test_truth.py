"""iodl kvcache against the truth of a loop device: its own sectors-written counter
(/sys/block/loopN/stat), the bytes cgroup v1 blkio saw its ranks read, and blkio throttles.
Under mpiexec at 1 and 2 ranks (every rank its own folder of the same root)."""
import os
import random
from types import SimpleNamespace

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount
from iodl.kvcache import HEADER_BYTES, MODELS
from iodl.patterns.kvcache import Arrivals, make_users
from tests.helpers import NotJudged, iodl, load_json, mpiexec

MB = 1_000_000
# ext4 with its inode tables and journal initialised at mkfs: no lazy-init writes while we count
MKFS = ("-E", "lazy_itable_init=0,lazy_journal_init=0")
RANKS = [pytest.param(1, id="1-rank"), pytest.param(2, id="2-ranks")]

pytestmark = [pytest.mark.root, pytest.mark.loopdev,
              pytest.mark.skipif(not mpiexec(), reason="no mpiexec next to the test interpreter")]


def _entries(root: str) -> list[int]:
    """Sizes of every entry file under the root's rank folders."""
    return [os.stat(os.path.join(root, d, n)).st_size for d in os.listdir(root) if d.startswith("rank_")
            for n in os.listdir(os.path.join(root, d)) if n.endswith(".kv")]


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("model", ["llama3.1-8b", "llama3.1-70b-instruct"])
def test_prefill_only_writes_tokens_times_bytes_per_token_plus_a_header_per_entry_to_the_device(tmp_path, model,
                                                                                                   ranks):
    """Write-only requests, no earlier turns read: the device is asked to write every entry byte,
    sum(tokens x bytes per token + 128), plus no more than the filesystem's own: each entry's last
    block rounded up and the journal commit its fsync makes (64 KiB an entry at most), and the
    root, its mark and the rank folders (512 KiB)."""
    bpt = MODELS[model].bytes_per_token
    with LoopMount(2 << 30, mkfs_args=MKFS) as m:
        root = os.path.join(m.path, "kv")
        out = tmp_path / "r.json"
        before = m.bytes_written()
        proc = iodl("kvcache", "--root", root, "--model", model, "--users", "4", "--context", "100:400",
                    "--prefill-only", "--no-multi-turn", "--max-requests", "5", "--duration", "120",
                    "--out", str(out), ranks=ranks, timeout=180)
        reached = m.bytes_written() - before
        assert proc.returncode == 0, proc.stderr
        sizes = _entries(root)
    kv = load_json(out)["kvcache"]
    entries = 5 * ranks
    print(f"{model} x {ranks} rank(s): {entries} entries, {kv['prefill_tokens']:,} tokens, reported "
          f"{kv['written_bytes']:,} B, device {reached:,} B (+{reached - kv['written_bytes']:,})")
    assert kv["bytes_per_token"] == bpt and kv["entries_written"] == len(sizes) == entries
    assert kv["written_bytes"] == kv["prefill_tokens"] * bpt + entries * HEADER_BYTES == sum(sizes)
    assert kv["entry_reads"] == 0 and kv["read_bytes"] == 0
    assert kv["written_bytes"] <= reached <= kv["written_bytes"] + entries * 65536 + 524288


@pytest.mark.blkio
@pytest.mark.parametrize("ranks, direct", [(1, False), (2, False), (1, True)],
                         ids=["1-rank", "2-ranks", "1-rank-direct"])
def test_every_reported_read_reaches_the_device(tmp_path, ranks, direct):
    """Decode re-reads and earlier turns, each after dropping the file's pages (or, --direct, with
    O_DIRECT: the entries just written would otherwise be read from the page cache): what blkio saw
    the ranks read is what they report within 1 %."""
    with LoopMount(2 << 30, mkfs_args=MKFS) as m, BlkioGroup(f"iodl-kvcache-reads-{ranks}-{direct}") as group:
        root = os.path.join(m.path, "kv")
        out = tmp_path / "r.json"
        proc = iodl("kvcache", "--root", root, "--model", "llama3.1-8b", "--users", "6", "--context", "50:400",
                    "--max-requests", "20", "--duration", "120", "--out", str(out), *(["--direct"] if direct else []),
                    ranks=ranks, preexec_fn=group.enter, timeout=180)
        device = group.read_bytes(m.majmin)
        assert proc.returncode == 0, proc.stderr
    kv = load_json(out)["kvcache"]
    print(f"{ranks} rank(s){' direct' if direct else ''}: reported {kv['read_bytes']:,} B read in "
          f"{kv['entry_reads']} entry reads; blkio {device:,} B")
    assert kv["entry_reads"] >= 2 * kv["entries_written"] > 0
    assert device == pytest.approx(kv["read_bytes"], rel=0.01)
    assert kv["device_read_fraction"] > 0.99


@pytest.mark.blkio
@pytest.mark.flaky(reruns=1)   # two cores shared with the other helpers' tests: a throttle needs the CPU to stay busy
@pytest.mark.parametrize("op, ranks", [("write", 1), ("write", 2), ("read", 1)],
                         ids=["write-1-rank", "write-2-ranks", "read-1-rank"])
def test_bandwidth_is_the_throttle_within_5_percent_and_never_above(tmp_path, op, ranks):
    """A write throttle on write-only requests, 4 entries of at most 1.3 MB written at once per rank
    (an entry's bytes count when its fsync returns: what is in progress when the 12 s window ends,
    at most 5.2 MB a rank, 4.3 % of 240 MB at 2 ranks, is not; 4 at once keep the device busy between
    one fsync and the next entry), or a read throttle on the re-reads of a full run: 32 users a rank
    ask for more than the throttle; the reported bandwidth is the throttle within 5 %, not above it.
    Reads at 2 ranks: the two-core run of test_two_ranks_on_one_core_report_what_they_report_on_two.
    Reads count per block completed in the window, so their shortfall is the start alone: the users'
    first entries written (unthrottled, each fsync'd) before there is anything to re-read. Entries of
    4-10 tokens (0.5-1.3 MB; 32 users write ~29 MB first, not the ~84 MB of 10-30 tokens) make that
    start 0.05 s idle and at most 0.2 s at a load average of 21 (-0.7 to -2.8 %, 8 runs at 6-12 s):
    the 8 s window's 5 % is 0.4 s, twice that. 10-30 tokens in 12 s fell 0.27-0.29 s short (-2.3 %)."""
    bps = 20 * MB
    window = 12 if op == "write" else 8
    with LoopMount(2 << 30, mkfs_args=MKFS) as m, BlkioGroup(f"iodl-kvcache-{op}-{ranks}") as group:
        getattr(group, f"throttle_{op}")(m.majmin, bps)
        out = tmp_path / "r.json"
        args = (["--prefill-only", "--no-multi-turn", "--max-concurrent-writes", "4", "--context", "4:10"]
                if op == "write" else ["--context", "4:10"])
        proc = iodl("kvcache", "--root", os.path.join(m.path, "kv"), "--model", "llama3.1-8b", "--users", "32",
                    "--duration", str(window), *args, "--out", str(out), ranks=ranks,
                    preexec_fn=group.enter, timeout=120)
        assert proc.returncode == 0, proc.stderr
    kv = load_json(out)["kvcache"]
    got = kv[f"{op}_bandwidth_MBps"] * MB
    print(f"{op} throttle {bps / MB:.0f} MB/s, {ranks} rank(s): reported {got / MB:.2f} MB/s "
          f"(write {kv['write_bandwidth_MBps']:.2f}, read {kv['read_bandwidth_MBps']:.2f}) over {kv['window_s']} s")
    assert kv["window_s"] == window
    assert got <= bps * 1.005   # the throttle's own accounting slack, nothing more
    assert got == pytest.approx(bps, rel=0.05)


def test_direct_entries_are_whole_4k_blocks_and_reach_the_device_as_written(tmp_path):
    """--direct: every entry is written with O_DIRECT, padded to whole 4 KiB blocks: each file's size is
    its entry rounded up to 4 KiB, the reported bytes are those sizes' sum, and the device's own
    sectors-written counter has them all when the command returns (plus no more than the
    filesystem's own, as for buffered entries: 64 KiB an entry, 512 KiB for the root)."""
    bpt = MODELS["llama3.1-8b"].bytes_per_token
    with LoopMount(2 << 30, mkfs_args=MKFS) as m:
        root = os.path.join(m.path, "kv")
        out = tmp_path / "r.json"
        before = m.bytes_written()
        proc = iodl("kvcache", "--root", root, "--model", "llama3.1-8b", "--users", "4", "--context", "100:400",
                    "--prefill-only", "--no-multi-turn", "--max-requests", "6", "--duration", "120", "--direct",
                    "--out", str(out), ranks=1, timeout=180)
        reached = m.bytes_written() - before
        assert proc.returncode == 0, proc.stderr
        sizes = _entries(root)
    r = load_json(out)
    kv = r["kvcache"]
    print(f"direct: {len(sizes)} entries, reported {kv['written_bytes']:,} B, device {reached:,} B "
          f"(+{reached - kv['written_bytes']:,})")
    assert r["direct"] is True and kv["entries_written"] == len(sizes) == 6
    assert all(size % 4096 == 0 for size in sizes) and kv["written_bytes"] == sum(sizes)
    unpadded = kv["prefill_tokens"] * bpt + 6 * HEADER_BYTES
    assert unpadded < kv["written_bytes"] < unpadded + 6 * 4096   # 128 B of header each: never a whole block
    assert kv["written_bytes"] <= reached <= kv["written_bytes"] + 6 * 65536 + 524288


def test_a_root_without_room_for_the_largest_entry_is_refused_before_writing(tmp_path):
    with LoopMount(64 << 20, mkfs_args=MKFS) as m:
        root = os.path.join(m.path, "kv")
        proc = iodl("kvcache", "--root", root, "--model", "llama3.1-8b", "--context", "1000", "--duration", "1",
                    ranks=1, timeout=60)
        assert proc.returncode == 2, proc.stderr
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("iodl: error")][0]
        assert "131,072,128 bytes" in line and "free space" in line, line
        assert _entries(root) == []


@pytest.mark.blkio
@pytest.mark.flaky(reruns=1)
def test_two_ranks_on_one_core_report_what_they_report_on_two(tmp_path):
    """kv-cache.py's scores follow the client's CPU (mlcommons/storage#334); iodl's must not: 2 ranks
    under a 40 MB/s read throttle report the same read bandwidth (within 5 %) on one core as on two.
    The two-core run is also the read bandwidth check at 2 ranks: the throttle within 5 %, never above."""
    bps, got = 40 * MB, {}
    for cores in ({0, 1}, {0}):
        with LoopMount(2 << 30, mkfs_args=MKFS) as m, BlkioGroup(f"iodl-kvcache-cores-{len(cores)}") as group:
            group.throttle_read(m.majmin, bps)
            out = tmp_path / f"r{len(cores)}.json"

            def enter(group=group, cores=cores):
                group.enter()
                os.sched_setaffinity(0, cores)

            proc = iodl("kvcache", "--root", os.path.join(m.path, "kv"), "--model", "llama3.1-8b", "--users", "32",
                        "--context", "10:30", "--duration", "7", "--out", str(out), ranks=2, preexec_fn=enter,
                        timeout=120)
            assert proc.returncode == 0, proc.stderr
        got[len(cores)] = load_json(out)["kvcache"]["read_bandwidth_MBps"] * MB
    print(f"read throttle {bps / MB:.0f} MB/s: two cores {got[2] / MB:.2f} MB/s, one core {got[1] / MB:.2f} MB/s")
    assert got[2] <= bps * 1.005   # the throttle's own accounting slack, nothing more
    assert got[2] == pytest.approx(bps, rel=0.05)
    busy = os.getloadavg()[0]
    if got[1] < 0.95 * got[2] and busy > 8:
        # the claim is about what the ranks need; with other work queued 4 deep on each core, the
        # one core they are pinned to is not theirs to measure with
        raise NotJudged(f"load average {busy:.0f} on 2 cores: the one core was shared with other work")
    assert got[1] == pytest.approx(got[2], rel=0.05)
    assert got[1] == pytest.approx(bps, rel=0.05) and got[1] <= bps * 1.005


def _open_entries(pid: int, fds: list[str] | None = None) -> list[tuple[str, int, str]]:
    """(file name, access mode, fd) of every entry file the process holds open now (or among `fds`),
    from the kernel's own table (/proc/PID/fd and its fdinfo flags); an fd closed while we look is
    skipped."""
    held = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd") if fds is None else fds
    except FileNotFoundError:
        return held
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        if target.endswith(".kv"):
            held.append((os.path.basename(target), flags & os.O_ACCMODE, fd))
    return held


def _readers_of_one_entry(pid: int, reading: list[tuple[str, str]]) -> int:
    """The most fds reading one entry at once, of (name, fd) pairs seen in one pass over the fd table.
    A pass is not an instant: a reader that closes an entry and the next one that opens it between two
    of its reads show the entry twice (seen in a CI run: 2 in 2,900 samples). So an entry seen at
    several fds counts only as many of them as, read again at once, still hold it for reading."""
    names = [name for name, _fd in reading]
    most = 1 if reading else 0
    for name in {n for n in names if names.count(n) > 1}:
        again = _open_entries(pid, [fd for n, fd in reading if n == name])
        most = max(most, sum(n == name and mode == os.O_RDONLY for n, mode, _fd in again))
    return most


@pytest.mark.blkio
def test_writes_are_capped_reads_are_not_and_one_entry_is_read_by_one_reader_at_a_time(tmp_path):
    """The kernel's fd table of the running process, sampled every few ms: entries open for writing
    (create to fsync) never exceed --max-concurrent-writes 2 and reach it (a 10 MB/s write throttle
    keeps the fsyncs long); entries open for reading do exceed it (reads are not capped, 32 workers
    under a 10 MB/s read throttle); no entry is ever open for reading twice at once (kv-cache.py
    reads one entry under its lock)."""
    import subprocess
    import sys
    import time

    cap = 2
    with LoopMount(2 << 30, mkfs_args=MKFS) as m, BlkioGroup("iodl-kvcache-caps") as group:
        group.throttle_read(m.majmin, 10 * MB)
        group.throttle_write(m.majmin, 10 * MB)
        out = tmp_path / "r.json"
        proc = subprocess.Popen([sys.executable, "-m", "iodl", "kvcache", "--root", os.path.join(m.path, "kv"),
                                 "--model", "llama3.1-8b", "--users", "32", "--context", "10:40",
                                 "--max-concurrent-writes", str(cap), "--duration", "8", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=group.enter)
        writers = readers = same_entry = samples = 0
        while proc.poll() is None:
            held = _open_entries(proc.pid)
            reading = [(name, fd) for name, mode, fd in held if mode == os.O_RDONLY]
            writers = max(writers, sum(mode == os.O_WRONLY for _name, mode, _fd in held))
            readers = max(readers, len(reading))
            same_entry = max(same_entry, _readers_of_one_entry(proc.pid, reading))
            samples += bool(held)
            time.sleep(0.002)
        _stdout, stderr = proc.communicate()
        assert proc.returncode == 0, stderr
    kv = load_json(out)["kvcache"]
    print(f"{samples} samples with entries open: at most {writers} open for writing (cap {cap}), {readers} for "
          f"reading, {same_entry} reader(s) of one entry; {kv['entries_written']} entries written, "
          f"{kv['entry_reads']} read")
    # both kinds went past the cap; which is larger is the users' timing (here 35-36 written, 36 read; CI once 36 and 36)
    assert samples > 100 and kv["entries_written"] > cap and kv["entry_reads"] > cap
    assert writers == cap
    assert readers > cap
    assert same_entry == 1


def test_entries_are_unlinked_least_recently_used_first_to_stay_within_95_percent_of_the_free_space(tmp_path):
    """A 256 MiB filesystem and more entries than fit: the run writes more than the free space yet
    never fills it: what is left on it at the end is within 95 % of the space free at the start (the
    filesystem's own count, statvfs), the rest unlinked as it went, with no write failing."""
    with LoopMount(256 << 20, mkfs_args=MKFS) as m:
        root = os.path.join(m.path, "kv")
        st = os.statvfs(m.path)
        free = st.f_bavail * st.f_frsize
        out = tmp_path / "r.json"
        proc = iodl("kvcache", "--root", root, "--model", "llama3.1-8b", "--users", "4", "--context", "100:200",
                    "--max-requests", "40", "--duration", "120", "--out", str(out), ranks=1, timeout=180)
        assert proc.returncode == 0, proc.stderr
        st = os.statvfs(m.path)
        used = free - st.f_bavail * st.f_frsize
        sizes = _entries(root)
    kv = load_json(out)["kvcache"]
    print(f"free at the start {free:,} B; written {kv['written_bytes']:,} B in {kv['entries_written']} entries, "
          f"{kv['evictions']} unlinked; left {sum(sizes):,} B in {len(sizes)} files, the filesystem {used:,} B")
    assert kv["errors"] == 0 and kv["written_bytes"] > free
    assert kv["evictions"] == kv["entries_written"] - len(sizes) > 0
    assert sum(sizes) <= used <= 0.95 * free


@pytest.mark.blkio
def test_the_queue_serves_the_highest_priority_first_then_by_arrival(tmp_path):
    """Open-loop arrivals into kv-cache.py's priority queue: for 3 s, 40 users send requests far
    faster than one worker under an 8 MiB/s write throttle can serve them (a 1 MiB entry's fsync: 125 ms), so a
    queue builds and what the worker takes from it shows its order. The users' classes are drawn
    by the seed (iodl's make_users, tested against MLPerf's mix in test_generator.py). Served in
    priority order, the entries written (one a request, --prefill-only) are interactive first:
    once the queue holds interactive requests no batch one is taken, so batch requests, half of
    what arrives, are at most the few served before the queue built up; served FIFO they would be
    half. Within a class, the earliest arrivals are served: the entries of each class are the first
    ones that class's users sent, in the order drawn."""
    users, window = 40, 3.0
    rng = random.Random(42)
    drawn = make_users(SimpleNamespace(users=users, context=(1, 1)), rng)
    arrivals = Arrivals(drawn, rng)
    arrived = []
    while (r := arrivals.next()).at_s < window:
        arrived.append(r)
    with LoopMount(1 << 30, mkfs_args=MKFS) as m, BlkioGroup("iodl-i24-kv2-priority") as group:
        group.throttle_write(m.majmin, 8 << 20)
        root = os.path.join(m.path, "kv")
        proc = iodl("kvcache", "--root", root, "--option", "1", "--users", str(users), "--workers", "1",
                    "--bytes-per-token", str((1 << 20) - 128), "--context", "1", "--prefill-only", "--no-multi-turn",
                    "--seed", "42", "--duration", str(window), ranks=0, preexec_fn=group.enter, timeout=60)
        assert proc.returncode == 0, proc.stderr
        served = {n[:-len(".kv")] for n in os.listdir(os.path.join(root, "rank_0"))}
    by_class = {p: [r.key for r in arrived if r.priority == p] for p in (3, 2, 1)}
    got = {p: [k for k in keys if k in served] for p, keys in by_class.items()}
    print(f"{len(arrived)} requests arrived in {window} s (interactive {len(by_class[3])}, responsive "
          f"{len(by_class[2])}, batch {len(by_class[1])}); {len(served)} served: interactive {len(got[3])}, "
          f"responsive {len(got[2])}, batch {len(got[1])}")
    assert sum(map(len, got.values())) == len(served) >= 10
    assert len(by_class[1]) > len(arrived) / 3   # batch: half the arrivals
    assert len(got[1]) <= 3 < len(got[3])
    for p, keys in by_class.items():   # each class's earliest arrivals, none skipped
        assert got[p] == keys[:len(got[p])], p
