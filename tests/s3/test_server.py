"""The test servers themselves (tests/s3/server.py): what the suite's other S3 tests stand on."""
import socket
import tempfile

from tests.conftest import require_or_skip
from tests.s3.server import Seaweed, weed_missing


def test_a_port_taken_after_it_was_chosen_moves_the_server_to_other_ports():
    """Ports are free when chosen; another process can take one before weed binds it (a CI run lost
    a module's server so: "Port allocation failed"). The server then starts on other ports."""
    why = weed_missing()
    require_or_skip("s3", why is None, f"s3: {why}")
    server = Seaweed(tempfile.mkdtemp(prefix="iodl-s3-taken-"))
    chosen = server.base
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", chosen))   # the master's port, as the other worker's server took it
        squatter.listen()
        try:
            server.start()
            assert server.base != chosen and server.endpoint == f"http://127.0.0.1:{server.base + 3}"
            assert server._answers()
        finally:
            server.remove()
