"""iodl.s3root's choices from the environment and the AWS config file, against what boto3 does with
the same settings: addressing (a bucket with dots over https) and the CA bundle of https endpoints."""
import pytest

from iodl.errors import UsageError
from iodl.s3root import ca_bundle, virtual_host


@pytest.mark.parametrize("style,url,bucket,virtual", [
    ("auto", "https://s3.us-east-1.amazonaws.com", "plain-bucket", True),
    ("auto", "https://s3.us-east-1.amazonaws.com", "my.dotted.bucket", False),
    ("auto", "https://s3.example.test", "plain-bucket", False),
    ("virtual", "https://s3.example.test", "plain-bucket", True),
    # boto3 (botocore 1.x, addressing_style virtual): https://s3.example.test/my.dotted.bucket/k, but over
    # http http://my.dotted.bucket.s3.example.test/k: a certificate for *.s3.example.test covers one label
    ("virtual", "https://s3.example.test", "my.dotted.bucket", False),
    ("virtual", "http://s3.example.test", "my.dotted.bucket", True),
    ("path", "https://s3.us-east-1.amazonaws.com", "plain-bucket", False),
])
def test_a_bucket_with_dots_stays_path_style_over_https(style, url, bucket, virtual):
    assert virtual_host(style, url, bucket) is virtual


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """No AWS setting of the caller's; a config file of the test's own (written by each test)."""
    for k in ("AWS_CA_BUNDLE", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    config = tmp_path / "config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return config


def test_the_environment_wins_over_the_profiles_ca_bundle(aws, monkeypatch, tmp_path):
    env_ca, file_ca, other_ca = (tmp_path / n for n in ("env.pem", "file.pem", "other.pem"))
    for f in (env_ca, file_ca, other_ca):
        f.write_text("")
    aws.write_text(f"[default]\nca_bundle = {other_ca}\n[profile bench]\nca_bundle = {file_ca}\n")
    assert ca_bundle() == (str(other_ca), "ca_bundle (AWS config file, profile default)")
    monkeypatch.setenv("AWS_PROFILE", "bench")
    assert ca_bundle() == (str(file_ca), "ca_bundle (AWS config file, profile bench)")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(env_ca))
    assert ca_bundle() == (str(env_ca), "AWS_CA_BUNDLE")


def test_no_bundle_is_the_systems_trust_store(aws, monkeypatch):
    aws.write_text("[profile other]\nca_bundle = /nowhere.pem\n")
    assert ca_bundle() is None
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    assert ca_bundle() is None


@pytest.mark.parametrize("value", ["", "/no/such/ca.pem", "/"])
def test_a_bundle_that_is_not_a_file_is_a_usage_error(aws, monkeypatch, value):
    monkeypatch.setenv("AWS_CA_BUNDLE", value)
    with pytest.raises(UsageError, match=r"^AWS_CA_BUNDLE=.*: not a file \(give the PEM file"):
        ca_bundle()
