"""The terminal report of `iodl read` and `iodl report`, from results of real short runs: the answer
comes first and follows the result's figures, every table fits 80 columns with two columns at least,
and --detail adds the tables the default leaves out."""
import io
import re

import pytest
from rich.console import Console

from iodl.report import CACHE_SAYS_LITTLE, print_result
from iodl.result import printable
from tests.helpers import iodl, load_json

NULL = ("--engine", "null", "--progress", "off")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Real results: train-sync on the null engine with AU high (no delay, 0.1 s compute) and low
    (20 ms per request, one at a time, 10 ms compute); 2 ranks of train-sync, storage-only and
    validate on two generated roots (buffered; the second validate finds in the page cache what the
    first put there, unless something dropped it meanwhile); infer-async."""
    tmp = tmp_path_factory.mktemp("text")
    roots = [str(tmp / "a"), str(tmp / "b")]
    gen = iodl("generate", "--workload", "tiny", *(a for r in roots for a in ("--root", r)), "--quiet")
    assert gen.returncode == 0, gen.stderr
    on_roots = [a for r in roots for a in ("--root", r)]
    runs = {"high": (0, [*NULL, "--steps", "8", "--compute-time", "0.1"]),
            "low": (0, [*NULL, "--steps", "8", "--compute-time", "0.01", "--delay-us", "20000", "--iodepth", "1"]),
            "train-sync": (2, [*on_roots, "--steps", "6", "--compute-time", "0.01", "--engine", "psync"]),
            "storage-only": (2, [*on_roots, "--pattern", "storage-only", "--duration", "1", "--ramp", "0.2"]),
            "warm-up": (0, [*on_roots, "--pattern", "validate"]),
            "validate": (0, [*on_roots, "--pattern", "validate"]),   # every byte in the page cache now
            "infer-async": (2, [*NULL, "--pattern", "infer-async", "--duration", "1", "--ramp", "0.2",
                                "--compute-time", "0.01"])}
    out = {}
    for name, (ranks, args) in runs.items():
        path = tmp / f"{name}.json"
        proc = iodl("read", *args, "--out", str(path), ranks=ranks, timeout=120)
        assert proc.returncode == 0, (name, proc.stderr)
        out[name] = load_json(path)
    return out


def render(result: dict, width: int = 200, detail: bool = False) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    print_result(result, console, detail=detail)
    return console.export_text()


def titled(text: str) -> dict[str, dict[str, list[str]]]:
    """{table title: {first cell: the other cells}} of a text rendered wide enough not to wrap."""
    out, title, previous = {}, None, ""
    for line in text.splitlines():
        if line.startswith("┏"):
            title = previous.strip()
            out[title] = {}
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            out[title][cells[0]] = cells[1:]
        previous = line
    return out


def test_the_answer_follows_the_results_au_against_its_threshold(results):
    high, low = results["high"]["train"], results["low"]["train"]
    assert low["au"] < 0.5 and high["au"] > low["au"]   # the delay did what it meant to
    seen = set()
    for name in ("high", "low"):
        result = results[name]
        t = result["train"]
        text = render(result)
        lines = text.splitlines()
        answer = next(i for i, ln in enumerate(lines) if ln.startswith("Does the storage keep"))
        assert answer < min(i for i, ln in enumerate(lines) if ln.startswith("┏"))   # before any table
        assert lines[answer - 1].startswith("iodl train-sync")                       # right after the heading
        au = f"{100 * t['au']:.1f}%"
        verdict = f"yes: AU {au} ≥ 90%" if t["au"] >= t["au_threshold"] else f"no: AU {au} < 90%"
        assert f"Does the storage keep the 1 accelerator(s) busy? {verdict}" in lines[answer], text
        seen.add(verdict.split(":")[0])
        # the same result with the threshold just past its AU turns the answer over
        flipped = dict(result, train=dict(t, au_threshold=t["au"] + 0.001))
        assert "busy? no: AU" in render(flipped)
    assert seen == {"yes", "no"}, seen
    assert "a step waited" in render(results["low"])   # a "no" says where the step's time went


def test_the_emulators_own_cost_and_when_it_limits_au_in_words(results):
    result = results["high"]
    emu = result["train"]["emulator"]
    assert not emu["client_bound"]   # AU high: nothing held it down
    text = render(result)
    assert f"emulator CPU: {emu['cpu_s_per_step'] * 1e3:,.2f} ms per step per rank" in text
    assert "limits AU" not in text
    # the same figures, had they held AU down: with the null engine there was no storage to blame
    bound = dict(result, train=dict(result["train"], emulator=dict(emu, client_bound=True)))
    words = " ".join(render(bound, width=1000).split())
    assert "the client, not the storage, limits AU" in words and "there was no storage (--engine null)" in words
    # on a storage engine the words say the emulator's work does not fit the host's cores
    busy = dict(bound, engine="psync", train=dict(bound["train"], emulator=dict(emu, client_bound=True,
                                                                                  client_cpu_share=1.4)))
    assert "does not fit in a step on this host's cores" in " ".join(render(busy, width=1000).split())
    assert not results["low"]["train"]["emulator"]["client_bound"]   # an emulated device (--delay-us) is storage


def test_bandwidth_against_demand_and_accelerators_per_mount_are_the_results(results):
    result = results["train-sync"]
    sizing, total = result["sizing"], result["total"]
    text = render(result)
    flat = " ".join(text.split())
    assert (f"the storage delivered {total['storage_bandwidth_MBps']:,.1f} MB/s (of {total['bandwidth_MBps']:,.1f} "
            f"MB/s read, {total['iops']:,.0f} IOPS)") in flat
    assert (f"the accelerators took {result['train']['consumed_MBps']:,.1f} MB/s and ask "
            f"{sizing['demand_MBps']:,.1f} MB/s at full AU ({sizing['demand_MBps_per_accelerator']:,.1f} MB/s each)"
            ) in flat
    table = titled(text)["accelerators each mount feeds at full AU"]
    for s, m in zip(sizing["mounts"], result["mounts"]):
        ranks, demand, storage, fed = table[s["path"]]
        assert ranks == ",".join(map(str, m["ranks"]))
        assert demand == f"{s['demand_MBps']:,.1f}" and storage == f"{s['storage_MBps']:,.1f}"
        if s["storage_MBps"] > 0:   # a count, a lower bound unless the mount's ranks waited for data
            assert fed.split()[0:2] in ([str(s["accelerators_fed"])], [">=", str(s["accelerators_fed"])]), fed
            assert fed.startswith(">=") == (not s["storage_bound"]), fed
        else:
            assert fed == "- (all from page cache)"
    assert table["total"][1] == f"{sizing['demand_MBps']:,.1f}"
    # without steps the answer is what the storage gave and how many accelerators that feeds
    so = results["storage-only"]
    flat = " ".join(render(so).split())
    assert f"this feeds {so['sizing']['accelerators_fed']}" in flat
    assert f"of {so['total']['bandwidth_MBps']:,.1f} MB/s read, {so['total']['iops']:,.0f} IOPS" in flat
    # infer-async's ranks are not in step: the answer is what the storage gave against what they ask,
    # and how many accelerators that feeds, not a verdict on the AU
    ia = results["infer-async"]
    flat = " ".join(render(ia).split())
    assert "Does the storage keep" not in flat
    bound = "" if ia["sizing"]["storage_bound"] else ">= "
    assert (f"ask {ia['sizing']['demand_MBps']:,.1f} MB/s at full AU "
            f"({ia['sizing']['demand_MBps_per_accelerator']:,.1f} MB/s each): this feeds "
            f"{bound}{ia['sizing']['accelerators_fed']}") in flat
    v = results["validate"]["validate"]
    assert f"validate: {v['shards']} shards, {v['bytes']:,} of {v['expected_bytes']:,} bytes read" in render(
        results["validate"])


def test_the_page_cache_warning_follows_the_measured_hit_fraction(results):
    for name in ("train-sync", "storage-only", "validate", "high"):
        result = results[name]
        hit = result["total"]["cache_hit_fraction"]
        flat = " ".join(render(result).split())
        warned = "this run says little about the storage" in flat
        assert warned == (hit > CACHE_SAYS_LITTLE), (name, hit)
        if warned:
            assert flat.index("warning:") < flat.index("┏")                     # among the answer's lines
            assert f"warning: {100 * hit:.1f}% of the bytes read came from the page cache" in flat
    # both ways on the same result, whatever the page cache held when the tests ran (another process
    # may drop it between the warm-up and the second validate): the line follows the figure
    result = results["validate"]
    for hit in (0.5, 0.1):
        shown = dict(result, total=dict(result["total"], cache_hit_fraction=hit))
        assert ("this run says little about the storage" in " ".join(render(shown).split())) == (hit > 0.2), hit


@pytest.mark.parametrize("detail", [False, True])
def test_every_table_fits_80_columns_and_has_two_columns_at_least(results, detail):
    for name, result in results.items():
        text = render(result, width=80, detail=detail)
        over = [ln for ln in text.splitlines() if len(ln) > 80]
        assert not over, (name, over)
        tops = [ln for ln in text.splitlines() if ln.startswith("┏")]
        assert tops, name
        assert all(ln.count("┳") >= 1 for ln in tops), (name, text)   # a lone column has no inner border
        assert "…" not in text, name


def test_detail_adds_the_per_rank_table_the_default_omits(results, tmp_path):
    result = results["train-sync"]
    wide = titled(render(result, detail=True))
    ranks = wide["reads per rank (mount: the --root's index, from 0)"]
    assert sorted(ranks) == [str(r["rank"]) for r in result["per_rank"]]
    for r in result["per_rank"]:
        host, mount, mb, cached, ios, _slowest, errors = ranks[str(r["rank"])]
        assert (host, mount, ios, errors) == (r["host"], str(r["mount"]), f"{r['ios']:,}", "0")
        assert (mb, cached) == (f"{r['bytes'] / 1e6:,.1f}", f"{r['cached_bytes'] / 1e6:,.1f}")
    latency = wide["request latency per mount (submit to completion)"]
    assert latency["total"] == [f"{result['total']['latency_us'][k]:,.0f}" for k in ("p50", "p90", "p99", "p999", "max")]
    default = titled(render(result))
    assert not [t for t in default if "per rank" in t or "latency" in t or "per node" in t], list(default)
    assert set(default) < set(wide)
    # the commands: `iodl read --detail` and `iodl report --detail` print it, without the flag neither does
    path = tmp_path / "r.json"
    proc = iodl("read", *NULL, "--steps", "4", "--compute-time", "0.01", "--detail", "--out", str(path), ranks=2)
    assert proc.returncode == 0, proc.stderr
    shown = titled(proc.stdout)["reads per rank (mount: the --root's index, from 0)"]
    assert sorted(shown) == ["0", "1"]
    assert [shown[str(r["rank"])][4] for r in load_json(path)["per_rank"]] == [
        f"{r['ios']:,}" for r in load_json(path)["per_rank"]]
    again = iodl("report", "--detail", str(path))
    assert again.returncode == 0, again.stderr
    assert titled(again.stdout)["reads per rank (mount: the --root's index, from 0)"] == shown
    plain = iodl("report", str(path))
    assert "reads per rank" not in plain.stdout and "more with --detail" in plain.stdout


def test_an_old_result_without_the_new_figures_prints_with_dashes(results):
    """A result written before sizing held each mount's demand: no demand column, never a figure made here."""
    old = dict(results["train-sync"])
    old["sizing"] = {"demand_MBps_per_accelerator": old["sizing"]["demand_MBps_per_accelerator"],
                     "mounts": [{k: v for k, v in m.items() if k != "demand_MBps"} for m in old["sizing"]["mounts"]]}
    text = render(printable(old))
    table = titled(text)["accelerators each mount feeds at full AU"]
    assert "demand MB/s" not in text
    assert sorted(table) == sorted(m["path"] for m in old["mounts"])   # no total row without the run's count
    assert [cells[1] for cells in table.values()] == [f"{m['storage_MBps']:,.1f}" for m in old["sizing"]["mounts"]]
    assert not re.search(r"ask [\d,.]+ MB/s at full AU", " ".join(text.split()))


def test_a_failed_order_check_is_among_the_answers_lines(results):
    """Never expected; when it happens the default says so before the tables, not only --detail."""
    t = results["train-sync"]["train"]
    assert t["epochs_wrong"] == 0 and "order: shuffle" not in render(results["train-sync"])
    assert f"{t['epochs_checked']} finished epoch share(s) checked" in render(results["train-sync"], detail=True)
    wrong = dict(results["train-sync"], train=dict(t, epochs_checked=4, epochs_wrong=1))
    text = render(wrong)
    assert text.index("order: of 4 finished epoch share(s) checked, 1 did NOT take every sample") < text.index("┏")
