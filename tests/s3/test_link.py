"""Ground truth on the wire: a server behind a veth of known speed (tests/s3/link.py).

Every byte `iodl generate` says it wrote to a bucket crossed the link: the host side's transmitted
bytes are the objects' bytes plus the requests' HTTP and TCP/IP headers, which on 4 MB objects are
well under 2%.
"""
import json
import tempfile

import pytest

from tests.helpers import NotJudged, iodl
from tests.s3.link import BURST_KB, Link, payload_rate, require
from tests.s3.server import Seaweed


@pytest.fixture(scope="module")
def linked():
    require()
    link = Link("iodl-s3-link", "iodls3l", 200).open()
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-link-"), ip=link.ns_ip, netns=link.ns)
    try:
        server.start()
        yield link, server
    finally:
        server.remove()
        link.close()


@pytest.mark.root
def test_bytes_written_crossed_the_link(linked):
    link, server = linked
    client = server.client()
    client.create_bucket(Bucket="link-bkt")
    before = link.counters()
    proc = iodl("generate", "--root", "s3://link-bkt/ds", "--endpoint", server.endpoint, "--files", "12",
                env=server.env())
    after = link.counters()
    assert proc.returncode == 0, proc.stderr
    written = sum(o["Size"] for o in client.list_objects_v2(Bucket="link-bkt", Prefix="ds/")["Contents"])
    sent = after["tx_bytes"] - before["tx_bytes"]
    assert written > 40e6
    assert written <= sent <= written * 1.02, (written, sent)


LINK_PAYLOAD_MBPS = 200e6 / 8 * 1448 / 1500 / 1e6   # TCP payload of 1500-byte frames: ~24.1 MB/s


@pytest.fixture(scope="module")
def linked_dataset(linked):
    link, server = linked
    server.client().create_bucket(Bucket="read-link-bkt")
    # 30 shards, ~125 MB: ~5 s on the link, so that the first GETs' connection set-up is ~2% of validate's span
    proc = iodl("generate", "--root", "s3://read-link-bkt/ds", "--endpoint", server.endpoint, "--files", "30",
                "--quiet", env=server.env())
    assert proc.returncode == 0, proc.stderr
    return "s3://read-link-bkt/ds"


@pytest.mark.root
def test_bytes_read_crossed_the_link(linked, linked_dataset, tmp_path):
    """validate GETs every object once, whole, 8 in flight: the bytes it reports are the bytes the
    server sent over the veth (the host side's received bytes), within 2% for the headers, and its
    bandwidth (over its own span, first GET to last byte) is the link's within 5%."""
    link, server = linked
    before = link.counters()
    proc = iodl("read", "--root", linked_dataset, "--endpoint", server.endpoint, "--pattern", "validate",
                "--out", str(tmp_path / "v.json"), env=server.env())
    after = link.counters()
    assert proc.returncode == 0, proc.stderr
    total = json.loads((tmp_path / "v.json").read_text())["total"]
    reported, received = total["bytes"], after["rx_bytes"] - before["rx_bytes"]
    assert reported > 40e6
    assert reported <= received <= reported * 1.02, (reported, received)
    assert abs(total["bandwidth_MBps"] - LINK_PAYLOAD_MBPS) <= 0.05 * LINK_PAYLOAD_MBPS, total["bandwidth_MBps"]


@pytest.mark.root
def test_storage_only_bandwidth_is_the_links(linked, linked_dataset, tmp_path):
    """1 MiB ranged GETs, 8 in flight, through a 200 Mbit/s link: the bandwidth iodl reports over
    its fixed window is the link's TCP payload rate within 5%. (Whole ~4 MB objects 8 at a time
    complete in bursts of ~32 MB every ~1.3 s on this link: a 6 s window of completions is then
    off by up to a burst, so their claim is validate's, over its own span, above.)"""
    link, server = linked
    proc = iodl("read", "--root", linked_dataset, "--endpoint", server.endpoint, "--pattern", "storage-only",
                "--block-size", "1MiB", "--iodepth", "8", "--duration", "6", "--ramp", "2",
                "--out", str(tmp_path / "s.json"), env=server.env())
    assert proc.returncode == 0, proc.stderr
    mbps = json.loads((tmp_path / "s.json").read_text())["total"]["bandwidth_MBps"]
    assert abs(mbps - LINK_PAYLOAD_MBPS) <= 0.05 * LINK_PAYLOAD_MBPS, (mbps, LINK_PAYLOAD_MBPS)


@pytest.mark.root
@pytest.mark.flaky(reruns=1)   # the server and the client share 2 cores: a busy moment delays its first bytes
#                                (a CI run: ttfb p50 12.8 ms of 87.6) and moves the link's looks
def test_ttfb_is_where_the_body_starts(linked, linked_dataset, tmp_path):
    """2 MiB ranged GETs one at a time through the 200 Mbit/s link: after a GET's first byte its
    body takes 2 MiB at the link's payload rate (bytes arriving through a bare awscrt loop, measured
    just before and just after iodl's run), less what tbf's bucket lets through at once: between two GETs
    the link idles for about a time to first byte, and the bucket refills at the line rate meanwhile,
    up to its burst (256 KiB: 12% of a GET, reached at a ttfb of ~10.5 ms, e.g. under load). So
    latency p50 - ttfb p50 is that time within 5%; and the first byte comes in a few ms, not with the
    body. (2/3 of the GETs are 2 MiB, the rest an object's short last part: the p50 is among the 2 MiB
    ones.) When the two looks at the link differ by more than 5%, its rate moved under the run and the
    body time is not judged. (A CI run's one look, counting whole GETs completed rather than bytes
    arrived, said 22.5 MB/s where iodl's bodies came at the tbf's 23.9 and failed the claim.)"""
    link, server = linked
    objects = server.client().list_objects_v2(Bucket="read-link-bkt", Prefix="ds/copy-")["Contents"]
    big = max(objects, key=lambda o: o["Size"])

    def look() -> float:
        return payload_rate(server, "read-link-bkt", big["Key"], big["Size"], ramp_s=1.0, seconds=4.0, arrived=True)

    rates = [look()]
    proc = iodl("read", "--root", linked_dataset, "--endpoint", server.endpoint, "--pattern", "storage-only",
                "--block-size", "2MiB", "--iodepth", "1", "--duration", "5", "--ramp", "1",
                "--out", str(tmp_path / "t.json"), env=server.env())
    assert proc.returncode == 0, proc.stderr
    rates.append(look())
    total = json.loads((tmp_path / "t.json").read_text())["total"]
    assert total["ttfb_us"]["p50"] < 0.1 * total["latency_us"]["p50"]
    body_us = total["latency_us"]["p50"] - total["ttfb_us"]["p50"]
    refill = min(BURST_KB << 10, 200e6 / 8 * total["ttfb_us"]["p50"] / 1e6) * 1448 / 1500   # of payload
    rate = sum(rates) / len(rates)
    expected_us = ((2 << 20) - refill) / (rate * 1e6) * 1e6
    print("rates", rates, "latency p50", total["latency_us"]["p50"], "ttfb p50", total["ttfb_us"]["p50"],
          "body", body_us, "refill", refill, "expected", expected_us)   # with -s
    if max(rates) > 1.05 * min(rates):
        raise NotJudged(f"the link's payload rate moved under the run: {min(rates):.2f} and {max(rates):.2f} MB/s "
                        "by the bare loop before and after")
    assert abs(body_us - expected_us) <= 0.05 * expected_us, (body_us, expected_us)
