"""Virtual-host addressing (`--addressing virtual`, or the AWS config file's s3 addressing_style):
requests name the bucket in the host, `BUCKET.ENDPOINT/KEY` — generate, read and checkpoint.

Ground truth: the session's SeaweedFS serving virtual-host names (-s3.domainName) on 127.0.0.1,
and iodl run in a mount namespace of its own whose /etc/hosts knows the bucket's name,
BUCKET.s3.iodl.test, and not the endpoint's, s3.iodl.test: a path-style request (to s3.iodl.test)
cannot even be sent, so what iodl wrote and read went by virtual-host names. Nothing of the
host's /etc/hosts changes.
"""
import json
import os
import sys
import subprocess

import pytest

from tests.conftest import require_or_skip
from tests.s3.server import DOMAIN
from tests.s3.test_checkpoint import DLIO_S3


def _iodl_with_hosts(hosts: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    """iodl in a private mount namespace where /etc/hosts is the file `hosts`."""
    cmd = ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts,
           sys.executable, "-m", "iodl", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.root
def test_virtual_host_addressing_writes_and_reads_by_bucket_names(seaweed, bucket, tmp_path):
    require_or_skip("root", os.geteuid() == 0, "root: a mount namespace for a private /etc/hosts")
    server = seaweed
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {bucket}.{DOMAIN}\n")
    endpoint = f"http://{DOMAIN}:{server.port}"
    gen = _iodl_with_hosts(str(hosts), "generate", "--root", f"s3://{bucket}/ds", "--endpoint", endpoint,
                           "--addressing", "virtual", "--files", "4", "--quiet", env=server.env())
    assert gen.returncode == 0, gen.stderr
    # the objects are the bucket's, under the prefix (seen path-style on the server's address)
    objects = {o["Key"]: o["Size"] for o in server.client().list_objects_v2(Bucket=bucket, Prefix="ds/")["Contents"]}
    manifest = json.loads(server.client().get_object(Bucket=bucket, Key="ds/iodl-dataset.json")["Body"].read())
    assert manifest.get("status") != "incomplete" and manifest["files"] == 4
    shards = {k: v for k, v in objects.items() if k.startswith("ds/copy-")}
    assert len(shards) == 4

    # read back with no flag: the AWS config file's profile says virtual, as boto3 reads it
    config = tmp_path / "config"
    config.write_text("[default]\ns3 =\n    addressing_style = virtual\n")
    env = {**server.env(), "AWS_CONFIG_FILE": str(config)}
    read = _iodl_with_hosts(str(hosts), "read", "--root", f"s3://{bucket}/ds", "--endpoint", endpoint,
                            "--pattern", "validate", "--out", str(tmp_path / "v.json"), env=env)
    assert read.returncode == 0, read.stderr
    total = json.loads((tmp_path / "v.json").read_text())["total"]
    assert total["bytes"] == sum(shards.values()) and total["errors"] == 0

    # --addressing path wins over the file: its requests go to s3.iodl.test, which has no address here
    path = _iodl_with_hosts(str(hosts), "read", "--root", f"s3://{bucket}/ds", "--endpoint", endpoint,
                            "--addressing", "path", "--pattern", "validate", env=env)
    assert path.returncode != 0
    line = path.stderr.strip()
    assert "\n" not in line and line.startswith(f"iodl: error: {endpoint}: GET s3://{bucket}/ds/"), line

    # a checkpoint under the same rule: its multipart uploads and ranged GETs by the bucket's name
    config = tmp_path / "tiny_s3.yaml"
    config.write_text(DLIO_S3)
    ck = _iodl_with_hosts(str(hosts), "checkpoint", "--workload", str(config), "--root", f"s3://{bucket}/ck",
                          "--endpoint", endpoint, "--writes", "1", "--reads", "1", "--out", str(tmp_path / "c.json"),
                          env=env)
    assert ck.returncode == 0, ck.stderr
    result = json.loads((tmp_path / "c.json").read_text())["checkpoint"]
    stored = sum(o["Size"] for o in server.client().list_objects_v2(Bucket=bucket, Prefix="ck/ckpt-")["Contents"])
    assert result["write"]["bytes"] == result["read"]["bytes"] == stored > 0
