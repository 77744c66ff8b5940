"""Files iodl creates itself (iodl/outputs.py): exclusively, under names not taken, nothing left
behind; and the page-cache probe's threads (iodl/cache.py) against files whose pages are known."""
import os
import shutil
import stat
import tempfile

import pytest

from iodl import cache
from iodl.outputs import create_new, write_text_atomically


def test_create_new_makes_a_private_file_of_a_fresh_name(tmp_path):
    made = [create_new(str(tmp_path), ".r.json.", ".tmp") for _ in range(50)]
    for fd, path in made:
        os.close(fd)
        name = os.path.basename(path)
        assert os.path.dirname(path) == str(tmp_path) and name.startswith(".r.json.") and name.endswith(".tmp")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len({p for _fd, p in made}) == 50


def test_create_new_never_opens_a_file_that_is_there(tmp_path, monkeypatch):
    (tmp_path / "x-aaaaaaaaaaaa").write_text("someone else's")
    monkeypatch.setattr(os, "urandom", lambda n: b"\xaa" * n)   # every name it draws is taken
    with pytest.raises(FileExistsError):
        create_new(str(tmp_path), "x-")
    assert (tmp_path / "x-aaaaaaaaaaaa").read_text() == "someone else's"


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old\n")

    def fail(f):
        f.write("half")
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        write_text_atomically(str(out), fail)
    assert out.read_text() == "old\n" and os.listdir(tmp_path) == ["r.json"]
    write_text_atomically(str(out), lambda f: f.write("new\n"))
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o644


def test_the_cache_probe_counts_every_file_on_its_threads():
    # files on tmpfs are in the page cache whole and stay there (on ext4 a page of one was gone once
    # when another process on the machine dropped the caches: 1,327,104 of 1,331,200 B); more files
    # than threads, of sizes that tell them apart, and one that is gone counts nothing
    sizes = [4096 * (i + 1) for i in range(3 * cache.PROBE_THREADS + 1)]
    top = tempfile.mkdtemp(prefix="iodl-cache-probe-", dir="/dev/shm")
    try:
        paths = []
        for i, size in enumerate(sizes):
            p = os.path.join(top, f"f{i}")
            with open(p, "wb") as f:
                f.write(b"\1" * size)
            paths.append(p)
        assert cache.resident(paths) == sum(sizes)
        assert cache.resident([*paths, os.path.join(top, "gone")]) == sum(sizes)
        assert cache.resident([]) == 0
    finally:
        shutil.rmtree(top)
