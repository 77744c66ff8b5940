"""What a newcomer meets in the first hour, held by real runs: plots without an extra, iodl run from
the folder holding its clone, every command's output within 80 columns with no cell cut, progress
on long work, errors that say what is wrong, the 5x-RAM advice, the workloads table, sizing labels."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys

import pytest

from iodl import cache, progress, sweep
from tests.helpers import BIN, iodl, load_json, mpiexec
from tests.conftest import require_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IODL = os.path.join(BIN, "iodl")
NULL_READ = ("--engine", "null", "--steps", "4", "--compute-time", "0.02")
NARROW = {"COLUMNS": "80"}


def _run(args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def _iodl(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """The console script, as the README's set-up installs it."""
    return _run([IODL, *args], cwd=cwd, env=env, timeout=timeout)


# ---------------------------------------------------------------- 1. plots work after the README's set-up

def test_matplotlib_is_a_core_dependency_and_plot_needs_no_extra():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    core = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert re.search(r'"matplotlib>=[\d.]+"', core), core
    assert not re.search(r"^plot = ", text, re.M)   # no extra left to install for plots
    # the import stays lazy: iodl.cmd.report does not pull matplotlib in unless --plot is given
    code = "import sys, iodl.cmd.report, iodl.report; print('matplotlib' in sys.modules)"
    assert _run([sys.executable, "-c", code]).stdout.strip() == "False"


# ---------------------------------------------------------------- 2. run from the folder that holds the clone

@pytest.fixture
def clone_parent(tmp_path):
    """A folder holding a directory named iodl (a clone, for Python an empty namespace package)."""
    (tmp_path / "iodl").mkdir()
    (tmp_path / "iodl" / "README.md").write_text("a clone\n")
    return tmp_path


def test_python_m_iodl_from_the_folder_that_holds_the_clone(clone_parent):
    proc = _run([sys.executable, "-m", "iodl", "--version"], cwd=clone_parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"iodl {__import__('iodl').__version__}"


def test_sweep_points_start_without_the_working_directory_on_sys_path(clone_parent):
    cmd = sweep.point_command("mpiexec", 2, ["--engine", "null"], "out.json")
    if sys.version_info >= (3, 11):
        assert cmd[3:7] == [sys.executable, "-P", "-m", "iodl"]
    else:
        assert cmd[3:5] == [sys.executable, "-c"]
    # the 3.10 form works too (run here by whatever Python runs the tests)
    proc = _run([sys.executable, "-c", sweep._BOOT_310, "--version"], cwd=clone_parent)
    assert proc.returncode == 0 and proc.stdout.startswith("iodl "), proc.stderr


def test_sweep_runs_from_the_folder_that_holds_the_clone(clone_parent):
    assert mpiexec()
    proc = _iodl("sweep", "--ranks", "1,2", "--out", "s.json", "--", *NULL_READ, cwd=clone_parent)
    assert proc.returncode == 0, proc.stderr
    doc = load_json(str(clone_parent / "s.json"))
    assert [p["ranks"] for p in doc["points"]] == [1, 2]
    assert "accelerators supported:" in proc.stdout


# ---------------------------------------------------------------- 5. errors and accepted spellings

def test_read_root_that_is_a_file_says_not_a_directory(tmp_path):
    f = tmp_path / "data.bin"
    f.write_bytes(b"x" * 10)
    proc = iodl("read", "--root", str(f), "--steps", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iodl: error: --root {f}: not a directory (give the folder that holds "
                                   f"the dataset's files)")
    proc = iodl("read", "--root", str(tmp_path / "nope"), "--steps", "1")
    assert proc.stderr.strip() == f"iodl: error: --root {tmp_path / 'nope'}: no such directory"


@pytest.mark.parametrize("content", ["{not json", "step,MB/s\n1,2\n", "\xff\xfe"])
def test_report_on_a_file_that_is_not_json(tmp_path, content):
    path = tmp_path / "r.csv"
    path.write_bytes(content.encode("latin-1"))
    proc = iodl("report", str(path))
    assert proc.returncode == 2
    assert proc.stderr == (f"iodl: error: {path}: not a JSON result file (iodl read --out and iodl sweep --out "
                           f"write one)\n")


def test_sweep_takes_read_options_without_double_dash(tmp_path):
    out = tmp_path / "s.json"
    proc = iodl("sweep", "--ranks", "1", *NULL_READ, "--out", str(out), "--batch-size", "8")
    assert proc.returncode == 0, proc.stderr
    doc = load_json(str(out))
    assert doc["engine"] == "null" and doc["workload"]["train"]["batch_size"] == 8
    assert [p["ranks"] for p in doc["points"]] == [1]
    # with -- as before; a read option the sweep does not know is still refused in one line
    proc = iodl("sweep", "--ranks", "1", "--bogus")
    assert proc.returncode == 2 and proc.stderr.startswith("iodl: error: read options after --: "), proc.stderr
    from iodl.cmd.sweep import own_options_first
    assert own_options_first(["sweep", "--engine", "null", "--ranks", "1,2", "--out=x", "--steps", "3"]) == \
        ["sweep", "--ranks", "1,2", "--out=x", "--", "--engine", "null", "--steps", "3"]
    assert own_options_first(["sweep", "--ranks", "1", "--", "--out", "y"]) == ["sweep", "--ranks", "1", "--", "--out", "y"]


@pytest.mark.parametrize("fio_name, ours, direct", [("libaio", "aio", True), ("io_uring", "uring", False),
                                                    ("sync", "psync", False), ("psync", "psync", False)])
def test_fio_engine_names_are_accepted(tmp_path, fio_name, ours, direct):
    from iodl.engines import available

    if available()[ours] is not None:
        require_or_skip(ours, False, f"engine {ours} not usable here: {available()[ours]}")
    data = tmp_path / "data"
    assert iodl("generate", "--root", str(data), "--files", "4", "--quiet").returncode == 0
    out = tmp_path / "r.json"
    # the window is fixed from the start barrier: 0.3 s of it once passed with no read completed in it (a CI
    # run's phase 1, three workers on two cores), so a full second
    proc = iodl("read", "--root", str(data), "--engine", fio_name, *(["--direct"] if direct else []),
                "--pattern", "storage-only", "--duration", "1", "--ramp", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = load_json(str(out))
    assert doc["engine"] == ours and doc["total"]["bytes"] > 0


# ---------------------------------------------------------------- 6. the 5x-RAM advice

def test_small_dataset_warning_says_the_size_and_fits_a_plain_folder(tmp_path):
    gen = tmp_path / "gen"
    assert iodl("generate", "--root", str(gen), "--quiet").returncode == 0
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.bin").write_bytes(b"x" * 4096)
    from iodl.units import format_size

    ram, data = 25_300_000_000, 67_000_000
    node = {"host": "vm", "mem_total_bytes": ram, "dataset_bytes": data,
            "mounts": [{"copies": 1, "path": str(gen)}]}
    (line,) = cache.small_dataset_warnings([node])
    need = cache.copies_needed(data, 1, ram)
    assert line == (f"vm reads 67.0 MB of datasets but has 25.3 GB of RAM. Under 5x RAM (126 GB) the page cache "
                    f"serves repeat reads, so the bandwidth measured is not the storage's. Read with --direct, or "
                    f"regenerate with --copies {need}: {format_size(need * data)} in all on this host.")
    node["mounts"][0]["path"] = str(plain)
    (line,) = cache.small_dataset_warnings([node])
    assert "--copies" not in line.split("e.g.")[0]   # generate does not write into a plain folder
    assert line.endswith("Read with --direct, or read a dataset of at least 126 GB (iodl generate writes only into "
                         "a new or iodl-made --root, e.g. iodl generate --root NEWDIR --copies N).")
    # a real run prints it whole (a tiny dataset is far under 5x RAM here)
    proc = iodl("read", "--root", str(gen), "--steps", "3", env=NARROW)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert re.search(r"regenerate with --copies \d+: [\d.]+ [GT]B in all on this host\.", text), text


# ---------------------------------------------------------------- 7. the workloads table against the built-ins

def test_workloads_readme_table_matches_every_builtin():
    from iodl import workload
    from iodl.sizing import workload_demand_MBps

    text = open(os.path.join(ROOT, "workloads", "README.md")).read()
    rows = {}
    for line in text.split("## Keys")[0].splitlines():
        m = re.match(r"\| `([\w.-]+)`(?: \(default\))? \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    names = workload.builtin_names()
    assert sorted(rows) == sorted(names)
    units = {"kB": 1e-3, "MB": 1, "GB": 1e3}
    for name in names:
        wl = workload.load_workload(name, need_dataset=False)
        if wl.dataset is None:   # the checkpoint workloads' table
            from iodl.checkpoint import plan

            p, par = plan(wl.checkpoint_model()), wl.parallelism
            assert rows[name] == [f"{par.tensor} x {par.pipeline} x {par.data}", str(par.zero_stage),
                                  str(p.layout.ranks), f"{p.total_bytes / 2**30:,.2f} GiB"], name
            continue
        pattern, dataset, batch, compute, demand = rows[name]
        assert pattern == wl.pattern, name
        same = re.match(r"same as (\S+)$", dataset)
        if same:
            dataset = rows[same.group(1)][1]
        files, fmt, per_file = re.match(r"([\d,]+) (\w+) x ([\d,]+) x", dataset).groups()
        assert (int(files.replace(",", "")), fmt, int(per_file.replace(",", ""))) == \
            (wl.dataset.files, wl.dataset.format, wl.dataset.samples_per_file), name
        assert int(batch) == wl.train.batch_size, name
        assert float(compute.split()[0]) == pytest.approx(wl.train.compute_time_s), name
        value, unit = re.match(r"~?([\d.,]+) (kB|MB|GB)/s", demand).groups()
        # the table rounds (~82 MB/s, ~3.2 GB/s): within 3 %
        assert float(value.replace(",", "")) * units[unit] == pytest.approx(workload_demand_MBps(wl), rel=0.03), name


# ---------------------------------------------------------------- 4. progress

class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_ticker_on_a_log_prints_at_most_a_line_every_interval(monkeypatch):
    monkeypatch.delenv("IODL_PROGRESS_EVERY", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    clock, out = _Clock(), io.StringIO()
    t = progress.Ticker("iodl generate", total=1000e6, stream=out, tty=False, every=5.0, clock=clock)
    for k in range(1, 101):   # 100 updates over 10 s: two lines (at 5 s and at 10 s), none at the start
        clock.t = 100.0 + k / 10
        t.update(k * 1e6)
    lines = out.getvalue().splitlines()
    assert lines == ["iodl generate: 50.0 of 1,000.0 MB (5%), 10.0 MB/s, ETA 1 min 35 s, 5 s elapsed",
                     "iodl generate: 100.0 of 1,000.0 MB (10%), 10.0 MB/s, ETA 1 min 30 s, 10 s elapsed"]


def test_ticker_drops_the_least_needed_parts_to_fit(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    clock = _Clock()
    t = progress.Ticker("iodl generate", total=1000e6, stream=io.StringIO(), tty=False, clock=clock)
    clock.t += 5
    assert t.text(50e6) == "iodl generate: 50.0 of 1,000.0 MB (5%), 10.0 MB/s"


def test_ticker_on_a_terminal_redraws_one_line_and_erases_it():
    clock, out = _Clock(), io.StringIO()
    t = progress.Ticker("gen", total=200e6, stream=out, tty=True, clock=clock)
    clock.t += 2
    t.update(100e6)
    clock.t += 0.1
    t.update(110e6)   # within the redraw interval: not drawn
    t.close()
    assert out.getvalue() == "\r\x1b[2Kgen: 100.0 of 200.0 MB (50%), 50.0 MB/s, ETA 2 s, 2 s elapsed\r\x1b[2K"


def test_generate_progress_on_a_log_and_on_a_terminal(tmp_path):
    proc = _iodl("generate", "--root", str(tmp_path / "a"), "--files", "48",
                 env={"IODL_PROGRESS_EVERY": "0.05", **NARROW})
    assert proc.returncode == 0, proc.stderr
    ticks = [ln for ln in proc.stdout.splitlines() if re.match(r"iodl generate: [\d.,]+ of [\d.,]+ MB \(\d+%\)", ln)]
    assert ticks, proc.stdout
    for ln in ticks:
        assert re.search(r", [\d.,]+ MB/s, ETA \d+ (s|min)", ln), ln
        assert len(ln) <= 80
    assert "\r" not in proc.stdout   # a log gets whole lines
    done = [float(re.match(r"iodl generate: ([\d.,]+) of", ln).group(1).replace(",", "")) for ln in ticks]
    assert done == sorted(done)
    if not shutil.which("script"):
        return
    cmd = f"{IODL} generate --root {tmp_path / 'b'} --files 48"
    tty = _run(["script", "-qc", cmd, "/dev/null"], env=NARROW)
    assert tty.returncode == 0, tty.stdout
    # (text mode reads the carriage return as a newline)
    assert re.search(r"\x1b\[2Kiodl generate: [\d.,]+ of [\d.,]+ MB \(\d+%\), [\d.,]+ MB/s, ETA", tty.stdout), \
        tty.stdout
    assert "48 files (48 written, 0 already there)" in " ".join(tty.stdout.split())


@pytest.mark.fio
def test_fio_compare_says_fio_is_running(tmp_path):
    job = tmp_path / "j.fio"
    job.write_text(f"[r]\nrw=randread\nbs=4k\nsize=1m\nruntime=1\ntime_based\ndirectory={tmp_path}\n")
    proc = _iodl("fio-compare", str(job), env=NARROW)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == "fio-compare: running fio on the job file (then the same work in iodl) ..."


# ---------------------------------------------------------------- 8. sizing labels each measured mount by file

def _read_result(tmp_path, name, roots, ranks=0):
    out = tmp_path / name
    args = ["read", *[a for r in roots for a in ("--root", str(r))], "--steps", "3", "--out", str(out)]
    proc = iodl(*args, ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    return str(out)


@pytest.fixture(scope="module")
def two_mounts(tmp_path_factory):
    base = tmp_path_factory.mktemp("mounts")
    roots = [base / "a-rather-long-mount-name-number-one", base / "a-rather-long-mount-name-number-two"]
    for r in roots:
        assert iodl("generate", "--root", str(r), "--quiet").returncode == 0
    return base, roots


def test_sizing_labels_mounts_by_result_file(tmp_path, two_mounts):
    _base, roots = two_mounts
    a = _read_result(tmp_path, "first.json", roots[:1])
    b = _read_result(tmp_path, "second.json", roots[:1])   # same mount path, another file
    proc = iodl("sizing", "--workload", "tiny", "--result", a, "--result", b, env=NARROW)
    assert proc.returncode == 0, proc.stderr
    flat = re.sub(r"\s+", "", proc.stdout)   # the legend's long lines wrap at 80 columns
    assert re.sub(r"\s+", "", f"[1] {a}, mount {roots[0]}") in flat
    assert re.sub(r"\s+", "", f"[2] {b}, mount {roots[0]}") in flat
    table = proc.stdout.split("[1] /")[0]
    assert "[1]" in table and "[2]" in table, proc.stdout   # the columns carry the legend's numbers


# ---------------------------------------------------------------- 3. 80 columns, no cell cut, every README command

def _check_fits(proc, what):
    assert proc.returncode == 0, (what, proc.stderr)
    over = [ln for ln in (proc.stdout + proc.stderr).splitlines() if len(ln) > 80]
    assert not over, (what, over)
    assert "…" not in proc.stdout, (what, proc.stdout)


def _cells(stdout: str) -> list[str]:
    return [c.strip() for ln in stdout.splitlines() if ln.startswith("│") for c in ln.strip("│").split("│")]


def test_every_readme_command_fits_80_columns_with_no_cell_cut(tmp_path, two_mounts):
    assert mpiexec()
    base, roots = two_mounts
    readme = open(os.path.join(ROOT, "README.md")).read()
    table = readme.split("## Commands", 1)[1].split("\n\n", 2)[1]
    commands = re.findall(r"^\| `iodl ([\w-]+)", table, re.M)
    assert commands == ["read", "generate", "probe", "fio-compare", "sweep", "sizing", "workloads", "datasize",
                        "checkpoint", "report", "compare"]
    ran = set()
    env = dict(NARROW)

    # read: two mounts under mpirun (rank 0's stdout is a pipe), every table iodl prints (--detail)
    r2 = str(tmp_path / "r2.json")
    cmd = [mpiexec(), "-n", "2", IODL, "read", *[a for r in roots for a in ("--root", str(r))], "--steps", "6",
           "--detail", "--out", r2]
    proc = _run(cmd, env=env)
    _check_fits(proc, "read")
    ran.add("read")
    assert f"mounts under {base}/" in proc.stdout
    cells = _cells(proc.stdout)
    for r in roots:   # each mount whole, once factored: never two mounts cut to one prefix
        assert os.path.basename(r) in cells, proc.stdout
    doc = load_json(r2)
    total = doc["total"]
    assert f"{total['bandwidth_MBps']:,.1f}" in cells and f"{total['latency_us']['max']:,.0f}" in cells
    r1 = _read_result(tmp_path, "r1.json", roots[:1])

    _check_fits(_iodl("generate", "--root", str(tmp_path / "g"), env=env), "generate")
    ran.add("generate")
    # iodl/cmd/probe.py prints through its own Console (not fitted here): a long --root is cut there
    _check_fits(_iodl("probe", "--root", "/tmp", env=env), "probe")
    ran.add("probe")
    if shutil.which("fio"):
        job = tmp_path / "j.fio"
        job.write_text(f"[r]\nrw=randread\nbs=4k\nsize=1m\nruntime=1\ntime_based\ndirectory={tmp_path}\n")
        _check_fits(_iodl("fio-compare", str(job), env=env), "fio-compare")
    else:
        job = tmp_path / "j.fio"
        job.write_text(f"[r]\nrw=randread\nbs=4k\nsize=1m\nruntime=1\ntime_based\ndirectory={tmp_path}\n")
        _check_fits(_iodl("fio-compare", "--no-fio", str(job), env=env), "fio-compare")
    ran.add("fio-compare")
    s = str(tmp_path / "s.json")
    proc = _iodl("sweep", "--ranks", "1,2", "--out", s, "--", *NULL_READ, env=env)
    _check_fits(proc, "sweep")
    ran.add("sweep")
    for k in (1, 2):
        p = next(p for p in load_json(s)["points"] if p["ranks"] == k)
        assert f"{p['samples_per_s']:,.1f}" in _cells(proc.stdout)
    _check_fits(_iodl("sizing", env=env), "sizing")
    _check_fits(_iodl("sizing", "--result", r1, "--result", r2, env=env), "sizing --result")
    ran.add("sizing")
    _check_fits(_iodl("workloads", env=env), "workloads")
    ran.add("workloads")
    _check_fits(_iodl("datasize", "--workload", "unet3d_h100", "--accelerators", "8", env=env), "datasize")
    ran.add("datasize")
    _check_fits(_iodl("checkpoint", "--workload", "llama3-405b", "--plan", env=env), "checkpoint --plan")
    proc = _run([mpiexec(), "-n", "2", IODL, "checkpoint", "--workload", "llama3-8b", "--root", str(tmp_path / "ck"),
                 "--engine", "null", "--writes", "1", "--reads", "1"], env=env)
    _check_fits(proc, "checkpoint")
    assert "subset mode" in proc.stdout
    ran.add("checkpoint")
    _check_fits(_iodl("report", r1, r2, s, env=env), "report")
    _check_fits(_iodl("report", "--detail", r1, r2, env=env), "report --detail")
    _check_fits(_iodl("report", r2, "--plot", str(tmp_path / "p.png"), "--csv", str(tmp_path / "p.csv"), env=env),
                "report --plot --csv")
    ran.add("report")
    _check_fits(_iodl("compare", r1, r2, env=env), "compare")
    ran.add("compare")
    for c in commands + [""]:
        proc = _iodl(*([c] if c else []), "--help", env=env)
        assert proc.returncode == 0 and not [ln for ln in proc.stdout.splitlines() if len(ln) > 80], (c, proc.stdout)
    assert ran == set(commands)


def test_tables_split_rather_than_cut_at_80_columns():
    from rich.console import Console

    from iodl.report import print_table

    console = Console(width=80, record=True, file=io.StringIO())
    columns = [("mount", "left")] + [(f"figure number {i}", "right") for i in range(10)]
    rows = [["/data/some/mount"] + [f"{12345.678 * i:,.1f}" for i in range(10)]]
    print_table(console, "t", columns, rows)
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert text.count("/data/some/mount") >= 2        # the key column repeats in the second table
    cells = _cells(text)
    for i in range(10):
        assert f"{12345.678 * i:,.1f}" in cells        # every figure whole
    assert "…" not in text


def test_default_width_is_80_off_a_terminal_and_columns_wins(monkeypatch):
    from iodl.report import make_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == 80   # pytest's stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "132")
    assert make_console().width == 132


def test_probe_folds_a_long_root_rather_than_cutting_it(tmp_path):
    """A --root longer than the console: its path wraps onto more lines, never cut with an ellipsis."""
    long_root = tmp_path / ("d" * 100)
    long_root.mkdir()
    proc = _iodl("probe", "--root", str(long_root), env=NARROW)
    _check_fits(proc, "probe with a long --root")
    assert proc.stdout.count("d" * 20) >= 1 and proc.stdout.count("d") >= 100   # the whole name, folded
