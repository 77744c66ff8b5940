"""One SeaweedFS per test session (tests/s3/server.py), and a fresh bucket per test."""
import secrets
import tempfile

import pytest

from tests.conftest import require_or_skip
from tests.s3.server import DOMAIN, Seaweed, weed_missing


@pytest.fixture(scope="session")
def seaweed():
    why = weed_missing()
    require_or_skip("s3", why is None, f"s3: {why}")
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-"), domain=DOMAIN).start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def bucket(seaweed):
    """A new, empty bucket's name on the session's server."""
    name = "iodl-test-" + secrets.token_hex(4)
    seaweed.client().create_bucket(Bucket=name)
    return name
