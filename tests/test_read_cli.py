"""`iodl read` end to end, the way the README runs it, and the result-file contract."""
import pytest

from tests.helpers import iodl, load_json, write_random_files

TOTAL_KEYS = {"bytes", "ios", "bandwidth_MBps", "iops", "latency_us", "cache_hit_fraction", "storage_bandwidth_MBps"}
LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max"}


def test_default_run_generates_tiny_dataset_then_reads_it(tmp_path):
    env = {"IODL_DATA": str(tmp_path / "data")}
    out = tmp_path / "r.json"
    first = iodl("read", "--duration", "1", "--ramp", "0", "--out", str(out), env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "generating the default dataset" in first.stdout + first.stderr   # says it made it
    result = load_json(out)
    assert result["schema"] == "iodl.result/1"
    assert {"pattern", "engine", "ranks", "hosts", "workload", "seed", "window_s", "total", "mounts"} <= set(result)
    assert TOTAL_KEYS <= set(result["total"]) and LATENCY_KEYS <= set(result["total"]["latency_us"])
    assert result["workload"]["name"] == "tiny"
    assert result["total"]["bytes"] > 0 and result["window_s"] > 0
    second = iodl("read", "--pattern", "validate", "--out", str(out), env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "generating the default dataset" not in second.stdout + second.stderr  # reused


def test_validate_counts_a_foreign_directory_exactly_and_writes_nothing(tmp_path):
    root = tmp_path / "foreign"
    root.mkdir()
    write_random_files(str(root), 3, (1 << 20) + 17)
    before = sorted(p.name for p in root.iterdir())
    out = tmp_path / "r.json"
    proc = iodl("read", "--pattern", "validate", "--root", str(root), "--engine", "psync", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    total = load_json(out)["total"]
    assert total["bytes"] == 3 * ((1 << 20) + 17)
    assert total["ios"] == 3 * 2
    assert sorted(p.name for p in root.iterdir()) == before


@pytest.mark.odirect
def test_direct_reads_count_odd_tails_exactly(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    write_random_files(str(root), 2, 3 * 4096 + 5)
    out = tmp_path / "r.json"
    proc = iodl("read", "--pattern", "validate", "--root", str(root), "--direct", "--block-size", "8KiB",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    total = load_json(out)["total"]
    assert total["bytes"] == 2 * (3 * 4096 + 5) and total["ios"] == 2 * 2
    assert total["cache_hit_fraction"] == 0.0
