"""Several endpoints (`--endpoint` given twice): ranks spread over them round-robin, and each one's
figures in the result's `endpoints` blocks.

Ground truth: two servers, each in its own network namespace behind a veth shaped with tbf at a
different rate (200 and 400 Mbit/s; tests/s3/link.py). Each link's GET payload rate is measured on
the link itself by a bare awscrt loop making the same requests (1 MiB ranged GETs, 8 in flight,
the same ramp and window), and storage-only with one rank per endpoint must report each
endpoint's bandwidth within 5% of its link's.
"""
import json

import pytest

from tests.conftest import require_or_skip
from tests.helpers import iodl, mpiexec
from tests.s3.link import linked_servers, payload_rate, require

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
        yield [s for _l, s in up]


def _largest(server) -> tuple[str, int]:
    objects = server.client().list_objects_v2(Bucket="ep-bkt", Prefix="ds/copy-")["Contents"]
    o = max(objects, key=lambda o: o["Size"])
    return o["Key"], o["Size"]


@pytest.mark.root
def test_each_endpoints_bandwidth_is_its_links(two_links, tmp_path):
    a, b = two_links
    links = [payload_rate(s, "ep-bkt", *_largest(s), ramp_s=2.0, seconds=6.0) for s in two_links]
    assert links[1] > 1.7 * links[0], links          # the two links do differ as set
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
