"""Several endpoints (`--endpoint` given twice): ranks spread over them round-robin, and each one's
figures in the result's `endpoints` blocks.

Ground truth: two servers, each in its own network namespace behind a veth shaped with tbf at a
different rate (200 and 400 Mbit/s; tests/s3/link.py). Each link's GET payload rate is measured on
the link itself by a bare awscrt loop making the same requests (1 MiB ranged GETs, 8 in flight,
the same ramp and window, both links at once as the runs use them), and storage-only with one
rank per endpoint must report each endpoint's bandwidth within 5% of its link's; train-sync with
three ranks (two on the faster link) is held to the rate its links carried during its own run (see
its test).
"""
import json
import threading

import pytest

from tests.conftest import require_or_skip
from tests.helpers import iodl, mpiexec
from tests.s3.link import bulk_rate, linked_servers, payload_rate, require, wire_clock

RATES_MBIT = (200, 400)
FILES = 12          # tiny's ~4 MB shards: ~50 MB per server
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def two_links():
    require()
    require_or_skip("mpiexec", bool(mpiexec()), "no mpiexec next to the test interpreter")
    with linked_servers("i27-ep", RATES_MBIT, 80, "ep-bkt") as up:
        for _link, server in up:
            proc = iodl("generate", "--root", "s3://ep-bkt/ds", "--endpoint", server.endpoint, "--files", str(FILES),
                        "--quiet", env=server.env())
            assert proc.returncode == 0, proc.stderr
        yield up


def _largest(server) -> tuple[str, int]:
    objects = server.client().list_objects_v2(Bucket="ep-bkt", Prefix="ds/copy-")["Contents"]
    o = max(objects, key=lambda o: o["Size"])
    return o["Key"], o["Size"]


@pytest.fixture(scope="module")
def link_rates(two_links):
    """Each link's GET payload rate (MB/s), both measured at once (as the runs below load them)."""
    rates = [0.0] * len(two_links)

    def measure(i: int, server) -> None:
        rates[i] = payload_rate(server, "ep-bkt", *_largest(server), ramp_s=2.0, seconds=6.0)

    threads = [threading.Thread(target=measure, args=(i, s)) for i, (_link, s) in enumerate(two_links)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(rates) and rates[1] > 1.7 * rates[0], rates          # the two links do differ as set
    return rates


@pytest.mark.root
def test_each_endpoints_bandwidth_is_its_links(two_links, link_rates, tmp_path):
    (_, a), (_, b) = two_links
    links = link_rates
    proc = iodl("read", "--root", "s3://ep-bkt/ds", "--endpoint", a.endpoint, "--endpoint", b.endpoint,
                "--pattern", "storage-only", "--block-size", "1MiB", "--iodepth", "8", "--duration", "6",
                "--ramp", "2", "--out", str(tmp_path / "r.json"), ranks=2, env=a.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    eps = result["endpoints"]
    print("links (MB/s):", links, "endpoints:", [e["bandwidth_MBps"] for e in eps])   # with -s
    assert [e["url"] for e in eps] == [a.endpoint, b.endpoint]
    assert [e["ranks"] for e in eps] == [[0], [1]]
    for e, link in zip(eps, links):
        assert abs(e["bandwidth_MBps"] - link) <= TOLERANCE * link, (e["url"], e["bandwidth_MBps"], link)
        assert e["errors"] == 0 and e["retries"] == 0 and e["ttfb_us"]["p50"] > 0
    # the endpoints' blocks add up to the total (one window)
    assert sum(e["bytes"] for e in eps) == result["total"]["bytes"]
    assert sum(e["ios"] for e in eps) == result["total"]["ios"]
    assert "GETs per endpoint" in proc.stdout


@pytest.mark.root
@pytest.mark.flaky(reruns=1)   # the steps' span has ends the wire's bulk has not (the first GET's wait, the last's answer)
def test_train_sync_each_endpoints_bandwidth_is_its_links(two_links, tmp_path):
    """train-sync's ranks meet after every step, each having read a batch: a rank on a faster
    link waits for the slowest. Three ranks over (400, 200 Mbit/s) round-robin put ranks 0 and 2
    on the 400 Mbit/s endpoint and rank 1 on the 200: each rank has 200 Mbit/s, so with no compute
    time both links are the limit at once. Each endpoint's bandwidth over the steps' span is held to
    what its link carried during that run (link.wire_clock: the veth's counter looked at every ~2 ms,
    from 2% to 98% of its bytes): never above it by more than 3%, nor under it by more than 5% (the
    span's ends: 0.3-1.5% here, idle or with a third process spinning on a core). A rank short of CPU
    for a moment idles both links, and the wire sees that too (a CI run had the fast endpoint 6% under
    a bare loop's look at its link taken at another moment). Each
    endpoint's bytes are the bytes its veth carried to the host (within 2%: the requests' headers and
    the manifest's few objects), its blocks add up to the total, and the fast one carried two ranks'
    batches: twice the slow one's bytes (within 3%: the samples' sizes spread)."""
    (slow_link, a), (fast_link, b) = two_links
    with wire_clock([fast_link, slow_link]) as rows:
        proc = iodl("read", "--root", "s3://ep-bkt/ds", "--endpoint", b.endpoint, "--endpoint", a.endpoint,
                    "--pattern", "train-sync", "--compute-time", "0", "--epochs", "6",
                    "--out", str(tmp_path / "t.json"), ranks=3, env=a.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "t.json").read_text())
    eps = result["endpoints"]
    assert [e["url"] for e in eps] == [b.endpoint, a.endpoint]
    assert [e["ranks"] for e in eps] == [[0, 2], [1]]
    links = [bulk_rate(rows, 2 * i + 1, e["bytes"]) for i, e in enumerate(eps)]
    print("links while it ran (MB/s):", links, "endpoints:", [e["bandwidth_MBps"] for e in eps])   # with -s
    for i, (e, link) in enumerate(zip(eps, links)):
        assert 0.95 * link <= e["bandwidth_MBps"] <= 1.03 * link, (e["url"], e["bandwidth_MBps"], link)
        wire = rows[-1][1][2 * i + 1] - rows[0][1][2 * i + 1]
        assert e["bytes"] <= wire <= 1.02 * e["bytes"], (e["url"], e["bytes"], wire)
        assert e["errors"] == 0 and e["retries"] == 0
    assert links[0] > 1.7 * links[1], links          # the two links do differ as set
    assert sum(e["bytes"] for e in eps) == result["total"]["bytes"]
    assert abs(eps[0]["bytes"] - 2 * eps[1]["bytes"]) <= 0.03 * 2 * eps[1]["bytes"], [e["bytes"] for e in eps]
