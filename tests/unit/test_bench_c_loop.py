"""bench/c_loop.c, the C reference of bench/bench_emu_cost.py, does what its figure says it does:
each file of its share opened, read to its last byte (one read of the file's size, or block-size
reads to EOF) and closed, once a pass; held against the calls strace sees."""
import os
import re
import shutil
import subprocess

import pytest

from tests.helpers import REPO

SIZES = [5_000, 322_957, 70_001, 4_096, 123]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:   # the package's own C extension needs one: a machine that built iodl has it
        pytest.fail("no C compiler on PATH")
    exe = str(tmp_path_factory.mktemp("c_loop") / "c_loop")
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(REPO, "bench", "c_loop.c")], check=True)
    return exe


@pytest.fixture
def listing(tmp_path):
    paths = []
    for i, size in enumerate(SIZES):
        p = tmp_path / f"f{i}.jpg"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    lst = tmp_path / "files.list"
    lst.write_text("\n".join(paths) + "\n")
    return str(lst), paths


def _traced(tmp_path, loop, *args) -> tuple[float, dict[str, list]]:
    """(the CPU a file it printed, per file: the bytes each read returned), as strace saw them."""
    out = tmp_path / "trace"
    proc = subprocess.run(["strace", "-qq", "-e", "trace=openat,read,close", "-o", str(out), loop, *map(str, args)],
                          capture_output=True, text=True, check=True)
    fd_file, reads = {}, {}
    for line in out.read_text().splitlines():
        m = re.match(r'openat\(AT_FDCWD, "([^"]+\.jpg)", .*\)\s+=\s+(\d+)', line)
        if m:
            fd_file[m.group(2)] = m.group(1)
            reads.setdefault(m.group(1), []).append([])
            continue
        m = re.match(r"read\((\d+), .*\)\s+=\s+(\d+)", line)
        if m and m.group(1) in fd_file:
            reads[fd_file[m.group(1)]][-1].append(int(m.group(2)))
        m = re.match(r"close\((\d+)\)", line)
        if m:
            fd_file.pop(m.group(1), None)
    return float(proc.stdout), reads


@pytest.mark.strace
def test_whole_files_one_read_each_every_pass(tmp_path, loop, listing):
    lst, paths = listing
    cpu_us, reads = _traced(tmp_path, loop, lst, 0, 1, 0, 24, 0, 3, 0)
    assert cpu_us > 0
    assert sorted(reads) == sorted(paths)
    for path, size in zip(paths, SIZES):
        assert reads[path] == [[size]] * 3   # opened once a pass, read whole in one call


@pytest.mark.strace
def test_blocks_to_eof_and_a_share_of_the_files(tmp_path, loop, listing):
    lst, paths = listing
    _cpu, reads = _traced(tmp_path, loop, lst, 1, 2, 1, 2, 0.001, 2, 4096)
    assert sorted(reads) == sorted(paths[1::2])   # lines 1 and 3: its share of two
    for path, size in zip(paths[1::2], SIZES[1::2]):
        full, rest = divmod(size, 4096)
        assert reads[path] == [[4096] * full + ([rest] if rest else []) + [0]] * 2
