"""`iodl fio-compare` over several hosts, emulated on one machine (tests/system/test_multihost.py's
harness): each host's leader runs the whole job in fio, then iodl runs it on the host's ranks, the
hosts started together; the totals sum the hosts as `fio --client` sums its clients.

Each host gets its own directory (`--directory BASE/{host}`) on its own throttled loop device, so
each host's figure has a truth of its own: the emulated hosts share one kernel, so two hosts on
one file set would share its page cache and one device's throttle (the caveat in
docs/fio-compare.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time

import pytest

from iodl.groundtruth import BlkioGroup, LoopMount
from tests.system.test_multihost import MB, TWO, mpiexec_hosts  # noqa: F401 (the fixture, by name)

THROTTLES = {"nodea": 4 * MB, "nodeb": 8 * MB}

# 64 KiB O_DIRECT reads, two clones per host (one on each of its ranks), 3 s measured after a 1 s ramp
READ_JOB = textwrap.dedent("""
    [global]
    ioengine=libaio
    direct=1
    rw=read
    bs=64k
    iodepth=2
    size=16m
    numjobs=2
    time_based=1
    ramp_time=1
    runtime=3
    [hostread]
""")


class HostDirs:
    """BASE/nodea and BASE/nodeb, each a bind mount of its own loop mount (so `--directory BASE/{host}`
    puts each host on its own device); unmounted on exit."""

    def __init__(self, base, mounts: dict):
        self.base, self.mounts, self.done = base, mounts, []

    def __enter__(self):
        for host, m in self.mounts.items():
            path = self.base / host
            path.mkdir(parents=True)
            subprocess.run(["mount", "--bind", m.path, str(path)], check=True)
            self.done.append(path)
        return self

    def __exit__(self, *exc):
        for path in self.done:
            subprocess.run(["umount", str(path)], check=False)


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.blkio
@pytest.mark.aio
@pytest.mark.odirect
@pytest.mark.fio
@pytest.mark.flaky(reruns=1)  # the throttle is exact over seconds, a 2-core VM is not: one bounded rerun
def test_each_host_runs_the_whole_job_and_the_totals_sum_the_hosts(mpiexec_hosts, tmp_path):
    """2 hosts x 2 ranks, each host's directory on a loop device throttled at 4 and 8 MB/s. Each
    host's fio and iodl bandwidth is its throttle within 5%; the device saw at least the bytes both
    tools counted on that host (O_DIRECT). The totals are fio's client-mode sum: bytes and I/Os the
    sums of the hosts', runtime the longest, so bandwidth = sum(bytes) / max(runtime) (exactly), within
    5% of the sum of the throttles."""
    job = tmp_path / "hosts.fio"
    job.write_text(READ_JOB)
    out = tmp_path / "cmp.json"
    with LoopMount(64 << 20) as a, LoopMount(64 << 20) as b, BlkioGroup("iodl-test-hostsfio") as group:
        mounts = {"nodea": a, "nodeb": b}
        for host, m in mounts.items():
            group.throttle_read(m.majmin, THROTTLES[host])
        with HostDirs(tmp_path / "by-host", mounts):
            start = time.monotonic()
            proc = mpiexec_hosts(TWO, ["fio-compare", str(job), "--directory", str(tmp_path / "by-host" / "{host}"),
                                       "--out", str(out)], preexec_fn=group.enter, timeout=240)
            elapsed = time.monotonic() - start
            device = {host: group.read_bytes(m.majmin) for host, m in mounts.items()}
            laid_out = {host: sorted(os.listdir(m.path)) for host, m in mounts.items()}
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    hosts = {h["host"]: h["jobs"][0] for h in doc["per_host"]}
    (total,) = doc["jobs"]
    print(f"per host MB/s (fio, iodl): { {h: (round(e['fio']['bandwidth_MBps'], 2), round(e['iodl']['bandwidth_MBps'], 2)) for h, e in hosts.items()} }; "
          f"total fio {total['fio']['bandwidth_MBps']:.2f} iodl {total['iodl']['bandwidth_MBps']:.2f}; {elapsed:.1f} s")
    assert doc["hosts"] == ["nodea", "nodeb"] and list(hosts) == ["nodea", "nodeb"]
    assert doc["ranks"] == 4
    for host, entry in hosts.items():
        assert laid_out[host] == ["hostread.0.0", "hostread.1.0", "lost+found"]   # each host laid out its own files
        for tool in ("fio", "iodl"):
            assert entry[tool]["bandwidth_MBps"] * MB == pytest.approx(THROTTLES[host], rel=0.05), (host, tool)
        assert device[host] >= entry["fio"]["bytes"] + entry["iodl"]["bytes"]   # on that host's device
    for tool in ("fio", "iodl"):
        sides = [e[tool] for e in hosts.values()]
        t = total[tool]
        assert t["bytes"] == sum(s["bytes"] for s in sides)
        assert t["ios"] == sum(s["ios"] for s in sides)
        assert t["runtime_s"] == max(s["runtime_s"] for s in sides)
        assert t["bandwidth_MBps"] == pytest.approx(t["bytes"] / t["runtime_s"] / MB, rel=1e-12)
        # No claim that the total equals the sum of the hosts' bandwidths: it does only when the hosts'
        # runtimes are equal, and a time_based job's runtime runs on until its requests in flight at
        # the deadline complete (4 x 64 KiB take 66 ms at 4 MB/s, 2 % of 3 s). CI measured totals
        # 2.1 % under that sum. The rule above is fio's own (tests/fio/test_client_sum.py).
        assert t["bandwidth_MBps"] * MB == pytest.approx(sum(THROTTLES.values()), rel=0.05)
    # the table: each host and the total, side by side
    rows = [line for line in proc.stdout.splitlines() if line.strip().startswith(("│ nodea", "│ nodeb", "│ total"))]
    assert len(rows) == 3, proc.stdout[-3000:]


WRITE_JOB = "[hostwrite]\nrw=write\nbs=64k\nsize=1m\n"


def test_write_jobs_need_a_directory_per_host(mpiexec_hosts, tmp_path):
    """A write job over 2 hosts in one directory (shared storage) is refused before any timed I/O:
    one line, exit 2 on every rank, no traceback, no marker left behind. With `{host}` in --directory
    each host writes its own files (iodl alone: --no-fio)."""
    job = tmp_path / "w.fio"
    job.write_text(WRITE_JOB)
    shared = tmp_path / "shared"
    shared.mkdir()
    proc = mpiexec_hosts(TWO, ["fio-compare", str(job), "--no-fio", "--directory", str(shared)], timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "more than one host writes this directory" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("more than one host") == 1, proc.stderr
    assert not [n for n in os.listdir(shared) if "iodl-host-probe" in n]

    for host in TWO:
        (tmp_path / "own" / host).mkdir(parents=True)
    out = tmp_path / "w.json"
    proc = mpiexec_hosts(TWO, ["fio-compare", str(job), "--no-fio", "--directory", str(tmp_path / "own" / "{host}"),
                               "--out", str(out)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for host in TWO:
        assert os.path.getsize(tmp_path / "own" / host / "hostwrite.0.0") == 1 << 20
        assert not [n for n in os.listdir(tmp_path / "own" / host) if "iodl-host-probe" in n]
    # not time-based: each host wrote its 1 MiB once; the total is both hosts'
    assert [h["jobs"][0]["iodl"]["bytes"] for h in doc["per_host"]] == [1 << 20, 1 << 20]
    assert doc["jobs"][0]["iodl"]["bytes"] == 2 << 20 and doc["jobs"][0]["fio"] is None


def test_one_fio_result_is_refused_over_hosts(mpiexec_hosts, tmp_path):
    """--fio-json is one fio run: over 2 hosts it is refused before any I/O, in one line, exit 2."""
    job = tmp_path / "r.fio"
    job.write_text(f"[r]\nrw=read\nsize=1m\ndirectory={tmp_path}\n")
    fake = tmp_path / "fio.json"
    fake.write_text('{"jobs": []}')
    proc = mpiexec_hosts(TWO, ["fio-compare", str(job), "--fio-json", str(fake)], timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("--fio-json holds one host's run") == 1 and "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "r.0.0")   # nothing laid out
