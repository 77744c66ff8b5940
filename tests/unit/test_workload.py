import dataclasses
import json
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from iodl import workload as W
from iodl.errors import UsageError

GOOD = textwrap.dedent("""\
    # a comment
    [workload]
    name = "t"
    description = "test"

    [dataset]
    format = "tfrecord"
    files = 4
    samples_per_file = 10
    sample_size = "4KiB"
    sample_size_stdev = "1KiB"
    copies = 1

    [train]
    batch_size = 8
    compute_time_s = 0.01
    epochs = 1
    shuffle = "file"
    seed = 1

    [read]
    block_size = "1MiB"
    iodepth = 8
    read_threads = 4
    """)


def write(tmp_path, text, name="w.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("name", W.builtin_names())
def test_every_builtin_loads_and_round_trips_to_json(name):
    wl = W.load_workload(name, need_dataset=False)
    assert wl.name == name and wl.source == f"builtin:{name}"
    d = wl.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert isinstance(d["read"]["block_size"], int)
    if wl.dataset is None:   # checkpoint-only (llama3-*): a model, and reading it is one line
        assert isinstance(d["model"]["num_layers"], int) and name.startswith("llama3-")
        with pytest.raises(UsageError, match=r"checkpoint-only"):
            W.load_workload(name)
    else:
        assert isinstance(d["dataset"]["sample_size"], int)
    assert W.workload_from_dict(d, "manifest").to_dict() == d


def test_builtins_shipped():
    assert {"tiny", "resnet50", "resnet50-infer", "inception-v4-large", "unet3d", "cosmoflow"} <= set(W.builtin_names())


def demand_MBps(wl):
    return wl.train.batch_size * wl.dataset.sample_size / wl.train.compute_time_s / 1e6


def test_builtin_numbers_match_their_sources():
    r = W.load_workload("resnet50")
    assert (r.dataset.files, r.dataset.samples_per_file, r.dataset.sample_size, r.train.batch_size) == (1024, 1251, 114_660, 256)
    assert r.train.batch_size / r.train.compute_time_s == pytest.approx(711, rel=0.01)   # images/s per V100
    assert 75 <= demand_MBps(r) <= 95                                                      # ~90 MB/s per GPU
    assert demand_MBps(W.load_workload("resnet50-infer")) == pytest.approx(160, rel=0.01)
    assert W.load_workload("resnet50-infer").pattern == "infer-async"
    inc = W.load_workload("inception-v4-large")
    assert inc.dataset.sample_size == 1_300_000 and demand_MBps(inc) == pytest.approx(300, rel=0.01)
    u = W.load_workload("unet3d")
    assert (u.dataset.format, u.dataset.files, u.dataset.samples_per_file) == ("npz", 168, 1)
    assert (u.dataset.sample_size, u.dataset.sample_size_stdev, u.train.batch_size, u.train.compute_time_s) == \
        (146_600_628, 68_341_808, 7, 0.323)
    c = W.load_workload("cosmoflow")
    assert (c.dataset.format, c.dataset.samples_per_file, c.dataset.sample_size, c.dataset.sample_size_stdev) == \
        ("tfrecord", 1, 2_828_486, 71_311)
    assert (c.train.batch_size, c.train.compute_time_s, c.metric.au_threshold) == (1, 0.0035, 0.70)


def test_tiny_is_small():
    t = W.load_workload("tiny")
    assert t.dataset.files * t.dataset.samples_per_file * t.dataset.sample_size <= 128 << 20


def test_path_and_defaults(tmp_path):
    wl = W.load_workload(write(tmp_path, GOOD))
    assert wl.dataset.sample_size == 4096 and wl.dataset.sample_size_stdev == 1024
    assert wl.pattern == "train-sync" and wl.train.prefetch == 2 and wl.metric.au_threshold == 0.90
    assert wl.read.block_size == 1 << 20


def test_with_overrides_checks_and_replaces():
    wl = W.load_workload("tiny")
    o = wl.with_overrides(files=3, copies=2, format="npz", seed=9)
    assert (o.dataset.files, o.dataset.copies, o.dataset.format, o.train.seed) == (3, 2, "npz", 9)
    assert wl.dataset.files == 16                     # frozen original untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        wl.name = "x"
    for kw in ({"files": 0}, {"copies": -1}, {"format": "csv"}, {"seed": -1}):
        with pytest.raises(UsageError):
            wl.with_overrides(**kw)


@pytest.mark.parametrize("old,new,key,reason", [
    ("files = 4", "files = -3", "[dataset] files", "must be a positive integer, got -3"),
    ("files = 4", "files = 0", "[dataset] files", "must be a positive integer, got 0"),
    ("files = 4", 'files = "4"', "[dataset] files", "must be a positive integer"),
    ("files = 4", "files = 4.0", "[dataset] files", "must be a positive integer"),
    ("files = 4", "files = true", "[dataset] files", "must be a positive integer"),
    ('sample_size = "4KiB"', 'sample_size = "-4KiB"', "[dataset] sample_size", "must not be negative"),
    ('sample_size = "4KiB"', 'sample_size = "0B"', "[dataset] sample_size", "must be a positive size"),
    ('sample_size = "4KiB"', 'sample_size = "4 furlongs"', "[dataset] sample_size", "not a size"),
    ('sample_size = "4KiB"', "sample_size = 1.5", "[dataset] sample_size", "expected a size"),
    ('format = "tfrecord"', 'format = "csv"', "[dataset] format", "must be one of tfrecord, hdf5, npz, raw"),
    ("compute_time_s = 0.01", "compute_time_s = -1", "[train] compute_time_s", "non-negative"),
    ('shuffle = "file"', 'shuffle = "yes"', "[train] shuffle", "must be one of"),
    ("iodepth = 8", "iodepth = 0", "[read] iodepth", "positive"),
    ("files = 4", "filez = 4", "[dataset] filez", "unknown key (did you mean 'files'?)"),
    ("[read]", "[reed]", "[reed]", "unknown section (did you mean [read]?)"),
])
def test_bad_values_name_file_line_section_and_key(tmp_path, old, new, key, reason):
    text = GOOD.replace(old, new, 1)
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as e:
        W.load_workload(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line_of(text, new)}: {key}"), msg
    assert reason in msg and "\n" not in msg


def test_builtin_error_names_the_builtin_file_and_line(monkeypatch):
    text = GOOD.replace("files = 4", "files = -3")
    with pytest.raises(UsageError, match=r"^resnet50\.toml:8: \[dataset\] files: must be a positive integer, got -3$"):
        W.parse_workload(text, "resnet50.toml")


def test_au_threshold_range(tmp_path):
    for bad in ("0", "1.5", "-0.1"):
        with pytest.raises(UsageError, match=r"\[metric\] au_threshold: must be a number in \(0, 1\]"):
            W.load_workload(write(tmp_path, GOOD + f"\n[metric]\nau_threshold = {bad}\n"))


def test_missing_required_key_points_at_its_section(tmp_path):
    text = GOOD.replace("batch_size = 8\n", "")
    with pytest.raises(UsageError, match=r":14: \[train\] batch_size: required key is missing"):
        W.load_workload(write(tmp_path, text))


def test_invalid_toml_reports_the_line(tmp_path):
    text = GOOD.replace("files = 4", "files = = 4")
    path = write(tmp_path, text)
    with pytest.raises(UsageError, match=rf"^{path}:8: invalid TOML: "):
        W.load_workload(path)


def test_line_scan_is_section_aware_and_skips_multiline_strings(tmp_path):
    # "files" also appears in [workload] as part of a multi-line description, and as a key name of
    # another table: the error must point at [dataset]'s line.
    text = GOOD.replace('description = "test"', 'description = """\nfiles = 99\n"""').replace("files = 4", "files = 0")
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as e:
        W.load_workload(path)
    assert str(e.value).startswith(f"{path}:{line_of(text, 'files = 0')}: [dataset] files")


def test_unknown_workload_and_missing_file():
    with pytest.raises(UsageError, match=r"unknown workload 'nope' \(built-in: .*resnet50"):
        W.load_workload("nope")
    with pytest.raises(UsageError, match=r"no/such\.toml"):
        W.load_workload("no/such.toml")


def test_not_utf8(tmp_path):
    p = tmp_path / "b.toml"
    p.write_bytes(b"\xff\xfe[workload]\n")
    with pytest.raises(UsageError, match="invalid TOML"):
        W.load_workload(str(p))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_toml_text_only_ever_raises_usage_error(text):
    try:
        W.parse_workload(GOOD + text, "f.toml")
    except UsageError as exc:
        assert str(exc).startswith("f.toml") and "\n" not in str(exc)


def test_every_pattern_a_workload_may_name_is_registered_once():
    from iodl.patterns import PATTERNS

    reg = PATTERNS
    assert sorted(reg) == sorted(W.PATTERNS)
    assert {n for n, p in reg.items() if p.accelerators} == {"train-sync", "infer-async"}
    assert all(p.name == n for n, p in reg.items())
