"""Ground truth on the wire: a server behind a veth of known speed (tests/s3/link.py).

Every byte `iodl generate` says it wrote to a bucket crossed the link: the host side's transmitted
bytes are the objects' bytes plus the requests' HTTP and TCP/IP headers, which on 4 MB objects are
well under 2%.
"""
import tempfile

import pytest

from tests.conftest import require_or_skip
from tests.helpers import iodl
from tests.s3.link import NS_IP, Link, usable
from tests.s3.server import Seaweed, weed_missing


@pytest.fixture(scope="module")
def linked():
    why = weed_missing()
    require_or_skip("s3", why is None, f"s3: {why}")
    why = usable()
    require_or_skip("root", why is None, f"root: {why}")
    link = Link("iodl-s3-link", "iodls3l", 200).open()
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-link-"), ip=NS_IP, netns=link.ns)
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
