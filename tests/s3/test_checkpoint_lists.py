"""`iodl checkpoint`'s LISTs against the server's own count (SeaweedFS's request counters): the checks
rank 0 makes before writing into s3:// prefixes, counted in the write's `lists` as a read counts its
listing."""
import json

import pytest

from tests.helpers import iodl
from tests.s3.test_checkpoint import DLIO_S3
from tests.s3.tls import counts


@pytest.mark.mpiexec
def test_the_prefix_checks_are_counted_as_the_server_counts_them(seaweed, bucket, tmp_path):
    """2 ranks over 2 roots, one endpoint. A fresh prefix: one LIST each that it holds nothing
    (prepare), then per checkpoint one LIST each that its name holds nothing (new_checkpoint): 2 + 2 x
    2 = 6 for 2 writes; run again into the same prefixes (the store object there: no first check),
    1 write: 2. Each check is one page (ListObjectsV2 asks up to 1000 keys; the first that comes back
    answers it), whatever the prefix holds. The server answered exactly those; rank 0 made them all."""
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    out = tmp_path / "c.json"
    roots = ["--root", f"s3://{bucket}/a", "--root", f"s3://{bucket}/b"]
    for writes, lists in ((2, 6), (1, 2)):
        before = counts(seaweed, bucket)
        proc = iodl("checkpoint", "--workload", str(config), *roots, "--endpoint", seaweed.endpoint, "--writes",
                    str(writes), "--reads", "1", "--out", str(out), ranks=2, env=seaweed.env())
        assert proc.returncode == 0, proc.stderr
        got = counts(seaweed, bucket) - before
        assert sum(n for (kind, _code), n in got.items() if kind == "LIST") == got["LIST", 200] == lists, got
        ck = json.loads(out.read_text())["checkpoint"]
        write, read = ck["write"], ck["read"]
        assert write["lists"] == lists and read["lists"] == 0
        assert [r["lists"] for r in write["per_rank"]] == [lists, 0]
        assert [m["lists"] for m in write["mounts"]] == [lists, 0]      # rank 0's mount
        # the other figures reduced with them are untouched: each mount's time is its one rank's
        for op in (write, read):
            assert [m["duration_s"] for m in op["mounts"]] == pytest.approx([r["duration_s"] for r in op["per_rank"]])
        assert [e["lists"] for e in write["endpoints"]] == [lists]
        assert write["list_ops_per_s"] == pytest.approx(lists / write["per_rank"][0]["list_s"], rel=1e-9)
        assert write["per_rank"][1]["list_s"] == 0.0 and read["list_ops_per_s"] == 0.0
        put_row = next(line for line in proc.stdout.split("requests per endpoint")[1].splitlines()
                       if line.lstrip("│ ").startswith("PUT "))
        assert put_row.split("│")[-2].strip() == str(lists)   # the table's LISTs column
