"""`iodl report` and `iodl compare` on result files built here with known numbers (no I/O runs)."""
import copy
import io
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import iodl


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """These tests read whole tables back, one row a line: a console wide enough for every column
    (how the tables fit 80 columns, splitting and factoring paths, is tests/acceptance/test_newcomer.py's)."""
    monkeypatch.setenv("COLUMNS", "250")

MOUNTS = ("/mnt/nfs0/imagenet", "/mnt/nfs1/imagenet")


def latency_hist(center_us: float) -> dict:
    """A bell of requests around center_us on a log axis, as the engine's buckets would hold them."""
    ns = [int(center_us * 1e3 * 2 ** (k / 4)) for k in range(-12, 13)]
    count = [int(1000 * math.exp(-(k / 4) ** 2)) + 1 for k in range(-12, 13)]
    return {"ns": ns, "count": count}


def figures(nbytes: int, ios: int, cached: int, window: float, p50: float) -> dict:
    return {"bytes": nbytes, "ios": ios, "window_s": window, "bandwidth_MBps": nbytes / window / 1e6,
            "iops": ios / window, "latency_us": {"p50": p50, "p90": 2 * p50, "p99": 4 * p50, "p999": 8 * p50,
                                                 "max": 16 * p50},
            "cache_hit_fraction": cached / nbytes, "storage_bandwidth_MBps": (nbytes - cached) / window / 1e6,
            "errors": 0, "depth": [0, 0, 0, 0, 0, ios, 0]}


def read_result(mounts=MOUNTS, seconds=6, mbps=(400.0, 250.0), scale=1.0, pattern="train-sync", train=True) -> dict:
    """A plausible iodl.result/1: mount m delivers about mbps[m] * scale MB in each second."""
    series, entries = [], []
    for m, path in enumerate(mounts):
        nbytes = [int(mbps[m] * scale * 1e6 * (1 + 0.2 * math.sin(i + m))) for i in range(seconds)]
        ios = [b // (1 << 20) for b in nbytes]
        cached = [b // 4 for b in nbytes]
        series.append({"path": path, "t_s": [float(i) for i in range(seconds)], "bytes": nbytes, "ios": ios,
                       "cached_bytes": cached, "p99_us": [800.0 + 10 * i for i in range(seconds)]})
        entry = {"path": path, "ranks": list(range(m, 4, len(mounts)))}
        entry.update(figures(sum(nbytes), sum(ios), sum(cached), float(seconds), 200.0 * (m + 1) / scale))
        entry["latency_hist"] = latency_hist(200.0 * (m + 1) / scale)
        entry["cache"] = {"predicted_hit_fraction": 0.25, "resident_at_start_fraction": 0.2,
                          "dataset_bytes": 4 << 30, "page_cache_bytes": 1 << 30}
        entries.append(entry)
    total = figures(sum(e["bytes"] for e in entries), sum(e["ios"] for e in entries),
                    sum(sum(s["cached_bytes"]) for s in series), float(seconds), 250.0 / scale)
    total["latency_hist"] = latency_hist(250.0 / scale)
    total["cache"] = dict(entries[0]["cache"], dataset_bytes=8 << 30)
    result = {"schema": "iodl.result/1", "pattern": pattern, "engine": "aio", "direct": False, "iodepth": 8,
              "block_size": 1 << 20, "ranks": 4, "hosts": ["node0"], "workload": {"name": "resnet50"},
              "seed": 1, "duration_s": None, "ramp_s": None, "partial": False, "window_s": float(seconds),
              "total": total, "mounts": entries, "per_rank": [],
              "series": {"bucket_s": 1.0, "mounts": series}}
    if train:
        # every step alike: compute + data wait + barrier wait = the step, AU = compute / step
        compute, barrier = 0.3, 0.01
        step = 0.375 / min(scale, 1.2)
        result["train"] = {"steps": 20, "au": compute / step, "au_threshold": 0.9,
                           "au_excluded_steps": "first step of each epoch", "samples_per_s": 2000.0 * scale,
                           "samples": int(2000 * scale * seconds), "window_s": float(seconds),
                           "step_time_s": {"p50": step, "p90": step, "p99": step, "max": step},
                           "data_wait_s_per_step": step - compute - barrier, "barrier_wait_s_per_step": barrier,
                           "compute_s_per_step": compute}
        result["sizing"] = {"demand_MBps_per_accelerator": 90.0, "demand_MBps": 360.0, "accelerators_fed": 6,
                            "storage_bound": True,
                            "mounts": [{"path": p, "storage_MBps": 300.0, "demand_MBps": 180.0,
                                        "accelerators_fed": 3, "storage_bound": True} for p in mounts]}
    return result


def sweep_result(ranks=(1, 2, 4, 8), per_rank=700.0, scale=1.0) -> dict:
    au = [0.98, 0.96, 0.92, 0.71, 0.5, 0.4][:len(ranks)]
    efficiency = [1.0, 0.98, 0.95, 0.72, 0.5, 0.4][:len(ranks)]
    points = [{"ranks": r, "au": a * min(scale, 1.0), "samples_per_s": per_rank * r * e * scale,
               "bandwidth_MBps": 90.0 * r * e * scale, "storage_bandwidth_MBps": 80.0 * r * e * scale,
               "result": f"sweep/r{r}.json", "exit_code": 0} for r, a, e in zip(ranks, au, efficiency)]
    return {"schema": "iodl.sweep/1", "pattern": "train-sync", "workload": {"name": "resnet50"}, "engine": "aio",
            "au_threshold": 0.9, "launch": "mpiexec per point", "points": points,
            "accelerators_supported": max((p["ranks"] for p in points if p["au"] >= 0.9), default=0),
            "demand_MBps_per_accelerator": 90.0}


def dump(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def assert_one_line_error(proc):
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("iodl: error: "), proc.stderr
    return lines[0]


def tables(stdout: str) -> list[dict[str, list[str]]]:
    """Each rich table printed, in order, as {first cell: the other cells} of its body rows."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("┏"):
            out.append({})
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            out[-1][cells[0]] = cells[1:]
    return out


def table_titles(stdout: str) -> list[str]:
    """The title above each rich table, in the order of tables()."""
    lines = stdout.splitlines()
    return [lines[i - 1].strip() for i, line in enumerate(lines) if line.startswith("┏")]


def number(cell: str) -> float:
    """A printed figure: '1,600' -> 1600.0, '25.0%' -> 0.25."""
    text = cell.replace(",", "")
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


# ---------------------------------------------------------------- report: tables

def test_report_prints_a_read_result_with_its_train_table(tmp_path):
    doc = read_result(seconds=6)
    proc = iodl("report", "--detail", dump(tmp_path, "r.json", doc))
    assert proc.returncode == 0, proc.stderr
    titled = dict(zip(table_titles(proc.stdout), tables(proc.stdout)))
    reads, cache = titled["reads per mount"], titled["page cache per mount"]
    latency = titled["request latency per mount (submit to completion)"]
    # each row against the figures of the per-second series the file was built from (print rounding)
    series = doc["series"]["mounts"]
    for label, parts in [(s["path"], [s]) for s in series] + [("total", series)]:
        nbytes, ios, cached = (sum(sum(s[k]) for s in parts) for k in ("bytes", "ios", "cached_bytes"))
        mbps, iops, _p50, _p99 = map(number, reads[label][1:])
        hit, predicted, at_start, storage = map(number, cache[label])
        assert mbps == pytest.approx(nbytes / 6 / 1e6, abs=0.05), label
        assert iops == pytest.approx(ios / 6, abs=0.5), label
        assert (hit, predicted, at_start) == (pytest.approx(cached / nbytes, abs=5e-4), 0.25, 0.2), label
        assert storage == pytest.approx((nbytes - cached) / 6 / 1e6, abs=0.05), label
    assert [number(c) for c in reads[MOUNTS[1]][3:5]] == [400, 1600]                   # p50, p99 µs
    assert [number(c) for c in latency[MOUNTS[1]]] == [400, 800, 1600, 3200, 6400]     # p50 ... max µs
    # accelerator view: AU = compute / step time; the step is compute + data wait + barrier wait
    train = titled["train-sync: accelerator view (AU leaves out: first step of each epoch)"]
    au, sps, step_p50, _step_p99, compute, data_wait, barrier_wait = map(number, train["20"])   # 20 steps/rank
    assert au == pytest.approx(0.3 / 0.375, abs=5e-4) and au == pytest.approx(compute / step_p50, abs=5e-4)
    assert compute + data_wait + barrier_wait == pytest.approx(step_p50, abs=1e-4)
    assert sps == pytest.approx(2000.0, abs=0.05)
    sizing = titled["accelerators each mount feeds at full AU"]
    assert sizing == {MOUNTS[0]: ["0,2", "180.0", "300.0", "3"], MOUNTS[1]: ["1,3", "180.0", "300.0", "3"],
                      "total": ["4", "360.0", f"{doc['total']['storage_bandwidth_MBps']:,.1f}", "6"]}
    # the answer, before the tables: AU against the threshold in words, the bandwidth against the demand
    answer = proc.stdout.split("┏")[0]
    assert "Does the storage keep the 4 accelerator(s) busy? no: AU 80.0% < 90%" in answer
    assert (f"the storage delivered {doc['total']['storage_bandwidth_MBps']:,.1f} MB/s (of "
            f"{doc['total']['bandwidth_MBps']:,.1f} MB/s read") in answer
    assert "the accelerators ask 360.0 MB/s at full AU (90.0 MB/s each)" in answer
    # 25% from the page cache, more than a dataset of 5x RAM leaves to it
    assert f"warning: {100 * doc['total']['cache_hit_fraction']:.1f}% of the bytes read came from the page cache" \
        in answer


def test_report_prints_a_sweep_with_linear_reference_and_supported_count(tmp_path):
    proc = iodl("report", dump(tmp_path, "s.json", sweep_result()))
    assert proc.returncode == 0, proc.stderr
    (rows,) = tables(proc.stdout)
    points = sweep_result()["points"]
    assert sorted(rows) == ["1", "2", "4", "8"]
    for p in points:
        au, sps, linear, efficiency, mbps, storage = map(number, rows[str(p["ranks"])])
        # linear reference from the smallest point: 700 samples/s per rank
        assert (au, linear) == (pytest.approx(p["au"], abs=5e-4), pytest.approx(700.0 * p["ranks"], abs=0.05))
        assert sps == pytest.approx(p["samples_per_s"], abs=0.05)
        assert efficiency == pytest.approx(p["samples_per_s"] / (700.0 * p["ranks"]), abs=5e-4)
        assert (mbps, storage) == (pytest.approx(p["bandwidth_MBps"], abs=0.05),
                                   pytest.approx(p["storage_bandwidth_MBps"], abs=0.05))
    supported = max(p["ranks"] for p in points if p["au"] >= 0.9)
    assert f"accelerators supported: {supported} (largest rank count with AU >= 90%)" in proc.stdout


def test_report_tolerates_an_old_minimal_result(tmp_path):
    doc = read_result(train=False)
    for key in ("series", "direct", "iodepth"):
        doc.pop(key)
    for entry in [doc["total"], *doc["mounts"]]:
        for key in ("latency_hist", "cache", "errors", "depth", "storage_bandwidth_MBps"):
            entry.pop(key)
    assert "sizing" not in doc and "train" not in doc
    proc = iodl("report", dump(tmp_path, "old.json", doc))
    assert proc.returncode == 0, proc.stderr
    reads, cache = tables(proc.stdout)
    for label, entry in zip([*MOUNTS, "total"], [*doc["mounts"], doc["total"]]):
        assert number(reads[label][1]) == pytest.approx(entry["bandwidth_MBps"], abs=0.05), label
        assert number(cache[label][0]) == pytest.approx(entry["cache_hit_fraction"], abs=5e-4), label
        assert cache[label][1:] == ["-", "-", "nan"], label   # no prediction, no storage figure: never a made-up one
    compare = iodl("compare", dump(tmp_path, "a.json", doc), dump(tmp_path, "b.json", doc))
    assert compare.returncode == 0, compare.stderr
    # nothing to plot in it, and nothing to write as CSV: one line each, no crash
    assert "nothing to plot" in assert_one_line_error(iodl("report", str(tmp_path / "old.json"),
                                                           "--plot", str(tmp_path / "o.png")))
    assert "no time series" in assert_one_line_error(iodl("report", str(tmp_path / "old.json"),
                                                          "--csv", str(tmp_path / "o.csv")))


def test_report_tolerates_a_minimal_sweep(tmp_path):
    doc = {"schema": "iodl.sweep/1", "pattern": "train-sync", "workload": "resnet50",
           "points": [{"ranks": 1, "au": 0.95, "samples_per_s": 700.0}, {"ranks": 2, "au": 0.5}]}
    path = dump(tmp_path, "s.json", doc)
    proc = iodl("report", path, "--plot", str(tmp_path / "s.png"))
    assert proc.returncode == 0, proc.stderr
    (rows,) = tables(proc.stdout)
    assert [number(c) for c in rows["1"][:3]] == [0.95, 700.0, 700.0]            # AU, samples/s, linear
    assert number(rows["2"][0]) == 0.5 and rows["2"][1] == "nan"                  # no samples/s in the file
    fig = assert_png_is_the_figure(tmp_path / "s.png", [(path, doc)])
    scaling, au = fig.axes[:2]
    assert list(scaling.get_lines()[0].get_xdata()) == [1]                        # only the point that has it
    assert list(au.get_lines()[0].get_ydata()) == pytest.approx([95.0, 50.0])


# ---------------------------------------------------------------- CSV

def _check_series_csv(table, doc):
    """One row per second per mount, and every column adds up to the series it came from."""
    series = doc["series"]["mounts"]
    assert len(table) == sum(len(s["t_s"]) for s in series)
    for m, s in enumerate(series):
        rows = table[table["mount"] == m]
        assert sorted(rows["t_s"]) == s["t_s"]     # each second once
        assert rows["bytes"].sum() == sum(s["bytes"])
        assert rows["ios"].sum() == sum(s["ios"])
        assert rows["cached_bytes"].sum() == sum(s["cached_bytes"])
        assert rows["MBps"].sum() == pytest.approx(sum(s["bytes"]) / 1e6, rel=1e-9)
        assert rows["iops"].sum() == pytest.approx(sum(s["ios"]))
        assert list(rows["p99_us"]) == pytest.approx(s["p99_us"])
        assert list(rows["cache_hit_fraction"]) == pytest.approx([c / b for c, b in zip(s["cached_bytes"], s["bytes"])], abs=1e-6)


def test_csv_loads_with_numpy_one_row_per_second_per_mount(tmp_path):
    doc = read_result(seconds=7)
    out = tmp_path / "series.csv"
    proc = iodl("report", dump(tmp_path, "r.json", doc), "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    header = out.read_text().splitlines()[0]
    assert header == "t_s,mount,path,bytes,ios,MBps,iops,p99_us,cached_bytes,cache_hit_fraction"
    table = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding="utf-8")
    _check_series_csv(table, doc)
    assert set(table["path"]) == set(MOUNTS)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]   # the atomic write left nothing behind


def test_csv_loads_with_pandas(tmp_path):
    import pandas as pd
    doc = read_result(seconds=5)
    out = tmp_path / "series.csv"
    from iodl.series import write_csv

    write_csv(doc, str(out))     # the entry point `iodl read --csv` calls
    _check_series_csv(pd.read_csv(out), doc)


def test_csv_rows_rates_follow_the_bucket():
    from iodl.series import csv_rows

    doc = read_result(seconds=3)
    doc["series"]["bucket_s"] = 0.5
    rows = csv_rows(doc)
    assert [r["t_s"] for r in rows[:2]] == [0.0, 0.0] and [r["mount"] for r in rows[:2]] == [0, 1]
    first = doc["series"]["mounts"][0]
    assert rows[0]["MBps"] == pytest.approx(first["bytes"][0] / 0.5 / 1e6)
    assert rows[0]["iops"] == pytest.approx(first["ios"][0] / 0.5)
    doc["series"]["mounts"][0]["bytes"][1] = 0
    assert [r for r in csv_rows(doc) if r["t_s"] == 1.0 and r["mount"] == 0][0]["cache_hit_fraction"] == 0.0


# ---------------------------------------------------------------- plots

def assert_png_is_the_figure(png, docs):
    """The PNG the CLI wrote is, pixel for pixel, iodl.plot.figure(docs) (whose drawn data the
    tests below check), at the figure's size, with every drawn line's colour on it. Returns the figure."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from iodl.plot import figure

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = figure(docs)
    image = imread(png)
    width, height = fig.get_size_inches() * fig.dpi
    assert image.shape[:2] == (round(height), round(width))
    here = io.BytesIO()
    fig.savefig(here, format="png")
    here.seek(0)
    assert np.array_equal(image, imread(here))
    for line in fig.axes[0].get_lines():
        near = np.abs(image[:, :, :3] - np.asarray(to_rgb(line.get_color()))).max(axis=2) < 0.02
        assert near.sum() >= 100, line.get_label()     # a drawn line is hundreds of pixels of its colour
    return fig


def test_png_of_a_read_result_and_of_a_sweep(tmp_path):
    for name, doc in (("r.json", read_result()), ("s.json", sweep_result())):
        out = tmp_path / (name + ".png")
        path = dump(tmp_path, name, doc)
        proc = iodl("report", path, "--plot", str(out))
        assert proc.returncode == 0, proc.stderr
        fig = assert_png_is_the_figure(out, [(path, doc)])
        if name == "r.json":   # MB/s per second of each mount, held to the end of the last second
            for line, s in zip(fig.axes[0].get_lines(), doc["series"]["mounts"]):
                assert list(line.get_ydata()) == pytest.approx([b / 1e6 for b in s["bytes"] + s["bytes"][-1:]])
        else:
            assert list(fig.axes[1].get_lines()[0].get_ydata()) == pytest.approx([100 * p["au"] for p in doc["points"]])


def test_html_is_self_contained(tmp_path):
    out = tmp_path / "r.html"
    proc = iodl("report", dump(tmp_path, "a.json", read_result()), dump(tmp_path, "b.json", read_result(scale=1.5)),
                "--plot", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and ("<svg" in text or "data:image/png" in text)
    assert "<?xml" not in text and 'src="http' not in text   # nothing fetched from elsewhere


def _legend_labels(ax):
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_read_figure_axes_units_and_one_legend_entry_per_mount():
    from iodl.plot import figure

    fig = figure([("r.json", read_result())])
    bw, lat = fig.axes[:2]
    assert "s" in bw.get_xlabel() and "MB/s" in bw.get_ylabel()
    assert "µs" in lat.get_xlabel() and "fraction" in lat.get_ylabel() and lat.get_xscale() == "log"
    assert _legend_labels(bw) == list(MOUNTS)
    assert _legend_labels(lat) == list(MOUNTS)
    assert lat.get_ylim()[0] == 0
    ys = lat.get_lines()[0].get_ydata()
    assert ys[0] == 0 and ys[-1] == pytest.approx(1.0)   # a CDF: from nothing to every request
    assert "train-sync" in fig._suptitle.get_text() and "resnet50" in fig._suptitle.get_text()


def test_overlaid_read_files_are_named_in_the_legend():
    from iodl.plot import figure

    one = read_result(mounts=MOUNTS[:1], mbps=(300.0,))
    fig = figure([("base.json", one), ("tuned.json", read_result(mounts=MOUNTS[:1], mbps=(300.0,), scale=2))])
    assert _legend_labels(fig.axes[0]) == ["base.json", "tuned.json"]


def test_sweep_figure_scaling_linear_reference_threshold_and_supported():
    from iodl.plot import figure

    doc = sweep_result()
    fig = figure([("s.json", doc)])
    sc, au = fig.axes[:2]
    assert "ranks" in sc.get_xlabel() and "samples/s" in sc.get_ylabel()
    assert "ranks" in au.get_xlabel() and "%" in au.get_ylabel()
    measured, linear = sc.get_lines()[:2]
    assert list(measured.get_ydata()) == pytest.approx([p["samples_per_s"] for p in doc["points"]])
    assert linear.get_linestyle() == "--" and list(linear.get_ydata()) == pytest.approx([700, 1400, 2800, 5600])
    labels = _legend_labels(au)
    assert "threshold 90%" in labels and "partial run" not in labels
    assert any(t.get_text().startswith("supported: 4") for t in au.texts)
    assert any(list(line.get_xdata()) == [4, 4] for line in au.get_lines())   # the vertical mark


def test_sweep_figure_rings_a_partial_point_and_uses_a_log_axis_for_wide_sweeps():
    from iodl.plot import figure

    doc = sweep_result(ranks=(1, 2, 4, 8, 16, 32))
    doc["points"][-1]["exit_code"] = 130     # `iodl read` stopped by a signal: figures kept, run shorter
    sc, au = figure([("s.json", doc)]).axes[:2]
    assert "partial run" in _legend_labels(au)
    assert au.get_xscale() == "log" and [t.get_text() for t in au.get_xticklabels()] == ["1", "2", "4", "8", "16", "32"]


# ---------------------------------------------------------------- compare

def _ratios(stdout: str) -> dict:
    """{row label: B/A} from compare's table, for the rows of the first section that has them."""
    out = {}
    section = None
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|┃]", line) if c.strip()]
        if len(cells) == 1:
            section = cells[0]
        elif len(cells) == 4 and re.fullmatch(r"\d+\.\d{3}", cells[3]):
            out[(section, cells[0])] = float(cells[3])
    return out


def test_compare_prints_b_over_a(tmp_path):
    a, b = read_result(), read_result(scale=1.5)
    proc = iodl("compare", dump(tmp_path, "a.json", a), dump(tmp_path, "b.json", b))
    assert proc.returncode == 0, proc.stderr
    ratios = _ratios(proc.stdout)
    for section, x, y in [("total", a["total"], b["total"])] + [
            (f"mount {i}: {MOUNTS[i]}", a["mounts"][i], b["mounts"][i]) for i in range(2)]:
        assert ratios[(section, "MB/s")] == pytest.approx(y["bandwidth_MBps"] / x["bandwidth_MBps"], abs=5e-4)
        assert ratios[(section, "IOPS")] == pytest.approx(y["iops"] / x["iops"], abs=5e-4)
        assert ratios[(section, "p99 µs")] == pytest.approx(y["latency_us"]["p99"] / x["latency_us"]["p99"], abs=5e-4)
        assert ratios[(section, "storage MB/s")] == pytest.approx(
            y["storage_bandwidth_MBps"] / x["storage_bandwidth_MBps"], abs=5e-4)
    assert ratios[("accelerator view", "samples/s")] == pytest.approx(1.5)
    assert ratios[("accelerator view", "AU")] == pytest.approx(1.2)


def test_compare_with_different_mount_counts_compares_totals_and_says_so(tmp_path):
    proc = iodl("compare", dump(tmp_path, "a.json", read_result()),
                dump(tmp_path, "b.json", read_result(mounts=MOUNTS[:1], mbps=(500.0,))))
    assert proc.returncode == 0, proc.stderr
    assert "only the totals" in proc.stdout
    assert not any(s.startswith("mount") for s, _label in _ratios(proc.stdout))


def test_compare_two_sweeps_matches_points_by_ranks(tmp_path):
    a, b = sweep_result(ranks=(1, 2, 4, 8)), sweep_result(ranks=(2, 4, 8, 16), scale=2.0)
    proc = iodl("compare", dump(tmp_path, "a.json", a), dump(tmp_path, "b.json", b))
    assert proc.returncode == 0, proc.stderr
    ratios = _ratios(proc.stdout)
    pa = {p["ranks"]: p for p in a["points"]}
    pb = {p["ranks"]: p for p in b["points"]}
    for r in (2, 4, 8):
        assert ratios[(f"{r} rank(s)", "samples/s")] == pytest.approx(
            pb[r]["samples_per_s"] / pa[r]["samples_per_s"], abs=5e-4)
    assert ("1 rank(s)", "samples/s") not in ratios and "16 rank(s)" in proc.stdout


# ---------------------------------------------------------------- errors: one line, non-zero, no traceback

@pytest.mark.parametrize("case, expect", [
    ("missing", "cannot read"),
    ("not-json", "cannot read"),
    ("not-result", "not an iodl result"),
    ("list", "not an iodl result"),
    ("patterns", "cannot compare a train-sync result with a storage-only result"),
    ("kinds", "cannot compare a train-sync result with a train-sync sweep"),
])
def test_compare_errors(tmp_path, case, expect):
    a = dump(tmp_path, "a.json", read_result())
    b = {"missing": lambda: str(tmp_path / "nope.json"),
         "not-json": lambda: dump(tmp_path, "b.json", "{not json"),
         "not-result": lambda: dump(tmp_path, "b.json", {"schema": "iodl.fio-compare/1"}),
         "list": lambda: dump(tmp_path, "b.json", [1, 2]),
         "patterns": lambda: dump(tmp_path, "b.json", read_result(pattern="storage-only", train=False)),
         "kinds": lambda: dump(tmp_path, "b.json", sweep_result())}[case]()
    proc = iodl("compare", a, b)
    line = assert_one_line_error(proc)
    assert expect in line
    assert proc.returncode == 2


@pytest.mark.parametrize("case, expect", [
    ("missing", "cannot read"),
    ("bad-ext", "unknown format .jpg"),
    ("csv-sweep", "one read result"),
    ("csv-two", "one read result"),
    ("mixed-plot", "not both"),
])
def test_report_errors(tmp_path, case, expect):
    r = dump(tmp_path, "r.json", read_result())
    s = dump(tmp_path, "s.json", sweep_result())
    argv = {"missing": [str(tmp_path / "nope.json")],
            "bad-ext": [r, "--plot", str(tmp_path / "x.jpg")],
            "csv-sweep": [s, "--csv", str(tmp_path / "x.csv")],
            "csv-two": [r, r, "--csv", str(tmp_path / "x.csv")],
            "mixed-plot": [r, s, "--plot", str(tmp_path / "x.png")]}[case]
    proc = iodl("report", *argv)
    assert expect in assert_one_line_error(proc)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.png").exists()


def test_plot_without_matplotlib_says_how_to_install(tmp_path):
    # the CLI in a process where `import matplotlib` fails, as on an install without the plot extra
    code = "import sys; sys.modules['matplotlib'] = None; from iodl.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, "report", dump(tmp_path, "r.json", read_result()),
                           "--plot", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    line = assert_one_line_error(proc)
    assert line == "iodl: error: plotting needs matplotlib: pip install matplotlib"


def test_fixture_helpers_are_not_shared_state():
    # read_result builds fresh lists each call: a test that edits one cannot leak into another
    a = read_result()
    b = copy.deepcopy(a)
    a["series"]["mounts"][0]["bytes"][0] = -1
    assert read_result() == b
