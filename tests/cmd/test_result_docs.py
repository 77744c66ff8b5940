"""docs/numbers.md against real results: every key it lists exists in a result, every key a
result holds is listed, and each derived figure is what the docs define it to be, recomputed from
the counts in the same result."""
import math
import os
import re

import pytest

from iodl import result_types as R
from tests.helpers import REPO, iodl, load_json

DOCS = os.path.join(REPO, "docs", "numbers.md")


def _schema_block() -> str:
    text = open(DOCS, encoding="utf-8").read()
    section = text[text.index("## Result file"):]
    return section[section.index("```") + 3:section.index("```", section.index("```") + 3)]


def _strip_comments(block: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in block.splitlines())


def _group(block: str, key: str) -> str:
    """The text of the braces that follow '"key":' in the schema block."""
    at = block.index(f'"{key}":')
    start = block.index("{", at)
    depth = 0
    for i in range(start, len(block)):
        depth += {"{": 1, "}": -1}.get(block[i], 0)
        if depth == 0:
            return block[start:i + 1]
    raise AssertionError(f"unbalanced braces after {key}")


def _words(text: str) -> set[str]:
    return set(re.findall(r'"([A-Za-z_0-9]+)"', text))


def _top_level_keys(block: str) -> set[str]:
    """Keys at the outermost level of the (commented) schema block."""
    keys, depth = set(), 0
    for m in re.finditer(r'[{}\[\]]|"([A-Za-z_0-9]+)"\s*:', _strip_comments(block)):
        tok = m.group(0)
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
        elif depth == 1:
            keys.add(m.group(1))
    return keys


def _all_keys(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _all_keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _all_keys(v)}
    return set()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A buffered train-sync over two roots, a storage-only pass and an infer-async run."""
    tmp = tmp_path_factory.mktemp("docs")
    a, b = tmp / "a", tmp / "b"
    gen = iodl("generate", "--workload", "tiny", "--root", str(a), "--root", str(b), "--quiet")
    assert gen.returncode == 0, gen.stderr
    runs = {"train-sync": ["--epochs", "2", "--compute-time", "0.01"],
            "storage-only": ["--duration", "1", "--ramp", "0.2"],
            "infer-async": ["--duration", "1", "--ramp", "0.2", "--compute-time", "0.01"]}
    out = {}
    for pattern, extra in runs.items():
        path = tmp / f"{pattern}.json"
        proc = iodl("read", "--pattern", pattern, "--root", str(a), "--root", str(b), "--engine", "psync",
                    "--out", str(path), *extra, ranks=2, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out[pattern] = load_json(path)
    return out


def test_the_top_level_keys_are_the_documented_ones(results):
    documented = _top_level_keys(_schema_block())
    assert documented == set(R.RESULT_KEYS) | set(R.OPTIONAL_KEYS)
    for doc in results.values():
        assert set(R.RESULT_KEYS) <= set(doc) <= documented


@pytest.mark.parametrize("part", ["total", "train", "per_rank", "sizing"])
def test_every_key_of_a_part_is_documented_and_every_documented_one_exists(results, part):
    block = _strip_comments(_schema_block())
    documented = _words(_group(block, part))
    if part == "total":   # the comment lines of the block add latency_hist and cache to every total and mount
        documented |= {"latency_hist", "ns", "count", "cache", "predicted_hit_fraction", "resident_at_start_fraction",
                       "dataset_bytes", "page_cache_bytes"}
    for pattern, doc in results.items():
        value = doc.get(part)
        if value is None:
            continue
        present = _all_keys(value)
        assert present <= documented, (pattern, part, present - documented)
    seen = set().union(*(_all_keys(d.get(part)) for d in results.values()))
    optional = {"resident_at_start_note", "per_rank_samples_per_s", "sum", "min", "median", "max"}
    assert documented - seen <= optional | {"p90", "p999"} - seen, (part, documented - seen)


def test_each_figure_is_its_definition(results):
    for pattern, doc in results.items():
        window = doc["window_s"]
        assert window > 0
        for block in [doc["total"], *doc["mounts"]]:
            assert block["window_s"] == window                       # one window for every block
            assert block["bandwidth_MBps"] == pytest.approx(block["bytes"] / window / 1e6, rel=1e-12)
            assert block["iops"] == pytest.approx(block["ios"] / window, rel=1e-12)
            assert block["cache_hit_fraction"] == pytest.approx(block["cached_bytes"] / block["bytes"], rel=1e-12)
            assert block["storage_bandwidth_MBps"] == pytest.approx(
                (block["bytes"] - block["cached_bytes"]) / window / 1e6, rel=1e-12)
            assert block["latency_us"]["max"] >= block["latency_us"]["p999"] >= block["latency_us"]["p50"]
            assert sum(block["depth"]) > 0
        ranks = doc["per_rank"]
        assert doc["total"]["bytes"] == sum(r["bytes"] for r in ranks) == sum(m["bytes"] for m in doc["mounts"])
        assert doc["total"]["ios"] == sum(r["ios"] for r in ranks)
        assert doc["total"]["cached_bytes"] == sum(r["cached_bytes"] for r in ranks)
        for m in doc["sizing"]["mounts"]:
            demand = doc["sizing"]["demand_MBps_per_accelerator"]
            assert m["accelerators_fed"] == math.floor(m["storage_MBps"] / demand + 1e-9)
        if pattern in ("storage-only", "infer-async"):
            assert window == doc["duration_s"] and doc["ramp_s"] == 0.2
        train = doc.get("train")
        if train:
            assert train["window_s"] == window
            assert train["samples_per_s"] == pytest.approx(train["samples_in_window"] / window, rel=1e-12)
            assert train["consumed_MBps"] == pytest.approx(train["consumed_bytes"] / window / 1e6, rel=1e-12)
            assert train["epochs_wrong"] == 0
        if pattern == "train-sync":
            # every step inside the window; each root holds tiny's 16 shards x 64 samples, 2 epochs
            assert train["samples_in_window"] == train["samples"] == 2 * 16 * 64 * 2
            # each rank's first epoch is checked when its second begins; the second when read-ahead
            # starts a third (prefetch reads past the last step)
            assert 2 <= train["epochs_checked"] <= 4
            assert train["consumed_bytes"] <= doc["total"]["bytes"]
        if pattern == "infer-async":
            assert train["samples_per_s"] == pytest.approx(train["per_rank_samples_per_s"]["sum"], rel=1e-12)


def _required(td) -> set[str]:
    return set(td.__required_keys__)


def test_results_are_of_the_types_that_own_the_schema(results):
    """iodl.result's types are the schema: every real result has each required key of each part,
    and no key the types do not name."""
    for doc in results.values():
        assert _required(R._Result) <= set(doc) <= set(R.Result.__annotations__)
        assert _required(R.Block) <= set(doc["total"]) <= set(R.Total.__annotations__)
        for m in doc["mounts"]:
            assert _required(R._Mount) <= set(m) <= set(R.Mount.__annotations__)
        for r in doc["per_rank"]:
            assert set(r) == set(R.PerRank.__annotations__)
        assert set(doc["total"]["latency_us"]) == set(R.Latency.__annotations__)
        if "train" in doc:
            assert _required(R._Train) <= set(doc["train"]) <= set(R.Train.__annotations__)
            if doc["train"]["mlperf"] is not None:
                assert set(doc["train"]["mlperf"]) == set(R.MLPerfView.__annotations__)


def test_the_docs_list_the_types_keys():
    block = _strip_comments(_schema_block())
    assert set(R.Block.__annotations__) - {"latency_hist"} <= _words(_group(block, "total"))
    assert set(R.Train.__annotations__) <= _words(_group(block, "train"))
    assert set(R.PerRank.__annotations__) <= _words(_group(block, "per_rank"))
