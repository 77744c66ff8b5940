"""`s3://BUCKET/PREFIX` roots and `--endpoint`, understood without loading any S3 client: the
commands look at their roots with this, and import the client (iodl.s3store) only for a bucket."""
from __future__ import annotations

import os
import re

from .errors import UsageError
from .records import record

SCHEME = "s3://"
DEFAULT_REGION = "us-east-1"
ADDRESSING = ("auto", "path", "virtual")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _urlsplit(url: str):
    """urllib.parse.urlsplit, imported at first use: a run with no bucket parses no URL, and the
    import (ipaddress's with it) was 3-4 ms of CPU on every rank of every run."""
    from urllib.parse import urlsplit

    return urlsplit(url)


def is_s3(root: str) -> bool:
    return root.startswith(SCHEME)


@record(frozen=True)
class Target:
    """An s3:// root: the bucket and the prefix under it (no leading or trailing slash)."""
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, root: str, flag: str = "--root") -> "Target":
        bucket, _, prefix = root[len(SCHEME):].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.match(bucket):
            raise UsageError(f"{flag} {root}: '{bucket}' is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')")
        if not prefix:
            raise UsageError(f"{flag} {root}: give a prefix (s3://{bucket}/NAME): iodl writes only under a prefix "
                             "it creates, never at a bucket's top")
        if any(part in ("", ".", "..") for part in prefix.split("/")):
            raise UsageError(f"{flag} {root}: the prefix may not hold empty, '.' or '..' parts")
        return cls(bucket, prefix)

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def url(self, rel: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(rel) if rel else self.prefix}"


def add_s3_arguments(p) -> None:
    """--endpoint and --addressing, of the commands that take s3:// roots."""
    p.add_argument("--endpoint", action="append", default=[], metavar="URL",
                   help="S3 endpoint of s3:// roots, http(s)://HOST[:PORT] (repeatable: ranks map to endpoints "
                        "round-robin; default: AWS's for AWS_REGION); credentials: AWS_ACCESS_KEY_ID/"
                        "AWS_SECRET_ACCESS_KEY or the AWS files (docs/s3.md)")
    p.add_argument("--addressing", choices=ADDRESSING,
                   help="path: http://HOST/BUCKET/KEY; virtual: http://BUCKET.HOST/KEY; auto: virtual on AWS's "
                        "endpoint, path on any other (default: the AWS config file's s3 addressing_style, else auto)")


def endpoint_urls(given: list[str] | str | None) -> list[str]:
    """Every --endpoint as iodl connects to it (one, AWS's, when none is given)."""
    given = [given] if isinstance(given, str) or given is None else list(given) or [None]
    urls = [endpoint_url(g) for g in given]
    if len(set(urls)) != len(urls):
        raise UsageError("--endpoint: the same endpoint is given twice")
    return urls


def given_endpoints(given: list[str], workload) -> list[str]:
    """--endpoint as given, else the one the workload's file names (DLIO storage_options
    endpoint_url), else none (AWS's)."""
    if given:
        return list(given)
    return [workload.read.endpoint] if workload is not None and workload.read.endpoint else []


def endpoint_of(rank: int, urls: list[str]) -> int:
    """Ranks spread over endpoints round-robin, as DLIO's multi-endpoint mode and as over mounts."""
    return rank % len(urls)


def endpoint_url(given: str | None) -> str:
    """--endpoint as iodl connects to it; without one, AWS's endpoint for the region."""
    if not given:
        return f"https://s3.{region()}.amazonaws.com"
    parts = _urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise UsageError(f"--endpoint {given}: give http://HOST[:PORT] or https://HOST[:PORT]")
    if parts.username or parts.password:
        raise UsageError("--endpoint: credentials do not go in the URL (use AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY, or the AWS config files)")
    return f"{parts.scheme}://{parts.netloc}"


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def bucket_needed(workload, what: str = "or --engine null") -> UsageError:
    """A workload whose data is in a bucket (DLIO storage_type s3), given directories: never read or
    generated there without a word, the storage would not be the one the workload names."""
    at = f" at {workload.read.endpoint}" if workload.read.endpoint else ""
    endpoint = "" if at else " and --endpoint URL"
    return UsageError(f"workload {workload.name}: its data is in a bucket{at} (DLIO storage_type s3): give --root "
                      f"s3://BUCKET/PREFIX{endpoint} (docs/s3.md){', ' + what if what else ''}")


def addressing(given: str | None) -> str:
    """--addressing as the run uses it: given, else the AWS config file's `s3 = addressing_style`
    of the profile (AWS_PROFILE, else default), as the AWS CLI and boto3 read it, else auto."""
    style = given or _config_addressing() or "auto"
    if style not in ADDRESSING:
        raise UsageError(f"s3 addressing_style {style!r} (AWS config file): give one of {', '.join(ADDRESSING)}")
    return style


def _config_addressing() -> str | None:
    # the s3 key's value is a nested block: "\naddressing_style = virtual"
    for line in _profile()[1].get("s3", "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "addressing_style":
            return value.strip()
    return None


def _profile() -> tuple[str, dict[str, str]]:
    """(name, keys) of the AWS config file's profile (AWS_PROFILE, else default), as the AWS CLI and
    boto3 read the file (AWS_CONFIG_FILE, else ~/.aws/config): no keys when it has no such profile."""
    path = os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
    profile = os.environ.get("AWS_PROFILE") or "default"
    import configparser   # here: only a run on s3:// reads the file, and every rank imports this module

    config = configparser.ConfigParser(interpolation=None)
    try:
        config.read(path)
    except (configparser.Error, UnicodeDecodeError):
        return profile, {}   # awscrt reads the same file for credentials and says what is wrong with it
    section = "default" if profile == "default" else f"profile {profile}"
    return profile, dict(config[section]) if config.has_section(section) else {}


def ca_bundle() -> tuple[str, str] | None:
    """The CAs an https endpoint's certificate must chain to when not the system's: (the PEM file,
    where it was given). AWS_CA_BUNDLE, else the config file's `ca_bundle` of the profile: the
    AWS CLI's and the SDKs' setting, the environment first, as they read it. As with them, the
    file replaces the system's trust store (an endpoint signed by a public CA needs no bundle)."""
    if "AWS_CA_BUNDLE" in os.environ:
        path, where = os.environ["AWS_CA_BUNDLE"], "AWS_CA_BUNDLE"
    else:
        name, keys = _profile()
        path, where = keys.get("ca_bundle"), f"ca_bundle (AWS config file, profile {name})"
        if path is None:
            return None
    if not os.path.isfile(path):
        raise UsageError(f"{where}={path!r}: not a file (give the PEM file of the CA certificates that signed "
                         "the endpoint's certificate)")
    return path, where


def virtual_host(style: str, url: str, bucket: str) -> bool:
    """Whether requests to bucket at url name it in the host (BUCKET.HOST, virtual-host style) or
    in the path (HOST/BUCKET). auto, as boto3's: virtual on AWS's own endpoint, path on any
    --endpoint given (every S3 server takes it). A bucket with dots stays path-style over https,
    virtual asked for or not (as boto3 keeps it): BUCKET.HOST would not match the server's
    certificate (a wildcard *.HOST covers one label)."""
    parts = _urlsplit(url)
    if "." in bucket and parts.scheme == "https":
        return False
    if style == "auto":
        return parts.hostname.endswith(".amazonaws.com") and "." not in bucket
    return style == "virtual"


def object_url(url: str, bucket: str, key: str, style: str) -> str:
    """The URL of an object (or of a prefix: key without the trailing slash) at endpoint url."""
    if virtual_host(style, url, bucket):
        parts = _urlsplit(url)
        return f"{parts.scheme}://{bucket}.{parts.netloc}/{key}"
    return f"{url}/{bucket}/{key}"
