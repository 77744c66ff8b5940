"""fio-compare's sum over hosts against fio's own: `fio --client` to two local `fio --server`s gives
each client's jobs and fio's "All clients" sum; compare.fio_sides over the clients' entries, one
result per host as fio-compare gathers them, must give the same bytes, I/Os, runtime, bandwidth
and mean latency."""
import json
import socket
import subprocess
import time

import pytest

from iodl.fio import compare
from iodl.fio.jobfile import read_sections, resolve
from tests.conftest import require_or_skip

JOB = "[sum]\nioengine=null\nrw=read\nbs=4k\nsize=32m\nnumjobs=2\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int, timeout: float = 10) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


@pytest.mark.fio
def test_the_sum_over_hosts_is_fio_client_modes_all_clients(tmp_path):
    job = tmp_path / "sum.fio"
    job.write_text(JOB)
    ports = [_free_port(), _free_port()]
    servers = [subprocess.Popen(["fio", f"--server=ip:127.0.0.1,{p}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for p in ports]
    try:
        if not all(_listening(p) for p in ports):
            require_or_skip("loopback", False, "fio --server did not listen on 127.0.0.1 (no loopback networking here)")
        out = tmp_path / "clients.json"
        args = ["fio", "--output-format=json+", f"--output={out}"]
        for p in ports:
            args += [f"--client=ip:127.0.0.1,{p}", str(job)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        for s in servers:
            s.terminate()
            s.wait(timeout=10)
    data = compare.load_fio_json(str(out))
    entries = data["client_stats"]
    (every,) = [e for e in entries if e["jobname"] == "All clients"]
    by_client: dict = {}
    for e in entries:
        if e["jobname"] != "All clients":
            by_client.setdefault(e["port"], []).append(e)
    assert sorted(by_client) == sorted(ports) and all(len(es) == 2 for es in by_client.values())
    jobs = resolve(read_sections(str(job)))
    per_job, per_group = compare.fio_sides([{"jobs": es} for es in by_client.values()], jobs, [2])
    fio_all = every["read"]
    for total in (per_job[0], per_group[0]):
        assert total["bytes"] == fio_all["io_bytes"] == 2 * 2 * 32 * 2**20
        assert total["ios"] == fio_all["total_ios"]
        assert total["runtime_s"] == fio_all["runtime"] / 1000
        # fio's bw_bytes is an integer division of the same sum by the same runtime
        assert total["bandwidth_MBps"] * 1e6 == pytest.approx(fio_all["bw_bytes"], abs=1)
        # fio prints means to 6 decimals (ns)
        assert total["latency_us"]["mean"] == pytest.approx(fio_all["clat_ns"]["mean"] / 1000, abs=1e-9)
        # fio 3.33's "All clients" JSON has no percentiles (nor bins): the merged percentile of a
        # distribution lies between its parts' (fio_sides merges the clients' json+ bins, as
        # stat.c sum_thread_stats adds their io_u_plat)
        parts = [e["read"]["clat_ns"]["percentile"] for e in entries if e["jobname"] != "All clients"]
        for key, p in compare.PERCENTILES.items():
            got = [part[f"{p:f}"] / 1000 for part in parts]
            assert min(got) <= total["latency_us"][key] <= max(got), (key, got)
    print(json.dumps({"fio All clients MB/s": fio_all["bw_bytes"] / 1e6, "sum": per_job[0]["bandwidth_MBps"]}))
