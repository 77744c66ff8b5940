"""What each rank of a real `iodl read` under mpiexec has imported by its end (the start-up goal:
at 72 ranks on 2 cores every module a rank imports costs ~36x its import time before the first
step). Rank 1 holds none of rank 0's printing side and no checkpoint pattern; rank 0 holds its
printing side, which shows that the check sees what a rank imported."""
import os
import subprocess
import sys

from tests.helpers import iodl, mpiexec

# rank 0's printing side, the write pattern a read run without --checkpoint-root never runs,
# optional libraries a run of the null engine never needs, and the result's types (for type checkers)
PRINTING = ["rich", "iodl.report", "iodl.read_report", "iodl.progress"]
NEVER = ["iodl.patterns.checkpoint", "iodl.patterns.checkpoint_share", "iodl.data.generate", "iodl.dlio", "yaml",
         "h5py", "matplotlib", "iodl.result_types"]
# the standard library's modules that iodl's own code on the way to the first step no longer needs
# (each was 1-4 ms of a rank's start-up: os.uname for the host name, outputs.create_new for
# tempfile, math.fsum for statistics, plain threads for concurrent.futures and its logging, the
# interpreter's own printer for traceback, cli's own terminal width for argparse's shutil and its
# bz2, rank 0 alone reading the built-in workload's TOML); rank 0's printing side may import them
STDLIB = ["socket", "tempfile", "statistics", "concurrent.futures", "logging", "traceback", "shutil", "bz2",
          "tomllib"]

CODE = f"""
import gc, os, sys
from iodl.cli import main
code = main(sys.argv[1:])
seen = [m for m in {PRINTING + NEVER!r} if m in sys.modules]
stdlib = [m for m in {STDLIB!r} if m in sys.modules]
print("rank", os.environ["PMI_RANK"], code, os.environ.get("OPENBLAS_NUM_THREADS"), gc.isenabled(), *seen)
print("stdlib", os.environ["PMI_RANK"], *stdlib)
"""


def test_a_rank_other_than_0_imports_neither_the_printing_side_nor_what_it_does_not_need():
    exe = mpiexec()
    assert exe, "mpiexec not found next to the test interpreter (pip install mpich)"
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-c", CODE, "read", "--pattern", "train-sync",
                           "--engine", "null", "--steps", "2", "--compute-time", "0.01", "--progress", "off"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ranks = {int(line.split()[1]): line.split()[2:] for line in proc.stdout.splitlines() if line.startswith("rank ")}
    assert sorted(ranks) == [0, 1], proc.stdout
    for rank, (code, blas, gc_on, *_seen) in ranks.items():
        # the run went through; numpy's BLAS started one thread; the collector is back on after the imports
        assert (code, blas, gc_on) == ("0", "1", "True"), (rank, ranks[rank])
    assert ranks[1][3:] == []
    assert set(ranks[0][3:]) == set(PRINTING)
    stdlib = {int(line.split()[1]): line.split()[2:] for line in proc.stdout.splitlines() if line.startswith("stdlib ")}
    assert stdlib[1] == [], stdlib


def test_a_rank_reading_an_iodl_dataset_parses_neither_toml_nor_urls(tmp_path):
    """Its workload comes from the dataset's manifest (JSON), so tomllib is not imported, and with no
    bucket no URL is parsed, so urllib.parse is not (3-4 ms of CPU a rank each)."""
    root = str(tmp_path / "data")
    os.mkdir(root)
    gen = iodl("generate", "--root", root, "--files", "4")
    assert gen.returncode == 0, gen.stderr
    code = "import os, sys\nfrom iodl.cli import main\ncode = main(sys.argv[1:])\n" \
           "print('rank', os.environ['PMI_RANK'], code, *[m for m in ('tomllib', 'urllib.parse') if m in sys.modules])"
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", code, "read", "--pattern", "train-sync",
                           "--root", root, "--steps", "2", "--compute-time", "0.01", "--progress", "off"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("rank ")) == \
        [["0", "0"], ["1", "0"]], proc.stdout


def test_an_interpreter_of_the_venv_starts_without_pathlib():
    """`pip install -e` of this project writes a plain path into the venv (pyproject.toml's
    package-dir), not setuptools' import finder, whose pathlib, urllib.parse and ipaddress every
    process of the venv imported at start: 11-15 ms of CPU, every rank of an mpirun."""
    proc = subprocess.run([sys.executable, "-c", "import sys; print(*[m for m in ('pathlib', 'urllib.parse', "
                           "'ipaddress') if m in sys.modules])"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", proc.stdout


def test_rank_0_alone_reads_a_yaml_workload():
    """The workload goes from rank 0 to the others (runner._setup): DLIO's reader and PyYAML, ~35 ms
    of CPU a rank, are imported by rank 0 alone; rank 0 has them, which shows the check sees them."""
    yaml_file = os.path.join(os.path.dirname(__file__), "..", "dlio", "resnet_like_resolved.yaml")
    code = "import os, sys\nfrom iodl.cli import main\ncode = main(sys.argv[1:])\n" \
           "print('rank', os.environ['PMI_RANK'], code, *[m for m in ('yaml', 'iodl.dlio', 'tomllib') if m in sys.modules])"
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", code, "read", "--pattern", "train-sync",
                           "--workload", yaml_file, "--engine", "null", "--steps", "2", "--compute-time", "0.01",
                           "--progress", "off"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("rank ")) == \
        [["0", "0", "yaml", "iodl.dlio"], ["1", "0"]], proc.stdout
