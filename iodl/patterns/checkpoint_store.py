"""A checkpoint root and what iodl wrote in it: the store file that says so (docs/design.md, safety).

A checkpoint root is a directory iodl created, or an empty one it adopted, marked by its store
file; an older checkpoint is removed only when the store says iodl wrote it, and only the files
iodl wrote in it. Only the latest checkpoint is kept: a restore reads it.
"""
from __future__ import annotations

import json
import os
import stat
import time

from ..data.files import refuse_kernel_fs, write_json
from ..data.layout import MANIFEST
from ..errors import UsageError
from ..metrics import process_age_s

STORE = "iodl-checkpoints.json"
STORE_SCHEMA = "iodl.checkpoints/1"
_MAX_STORE = 1 << 26


def read_store(root: str) -> dict | None:
    path = os.path.join(root, STORE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_STORE:
            raise UsageError(f"{path}: not an iodl checkpoint store")
        try:
            doc = json.loads(f.read())
        except ValueError:
            raise UsageError(f"{path}: unreadable checkpoint store") from None
    if not isinstance(doc, dict) or doc.get("schema") != STORE_SCHEMA or not isinstance(doc.get("checkpoints"), list):
        raise UsageError(f"{path}: not an iodl checkpoint store")
    return doc


def prepare_root(root: str) -> dict:
    """The root's store, creating the root (or adopting an empty directory, e.g. a mount point)
    when new. A dataset root, a file, a link or a folder of someone else's files is refused."""
    refuse_kernel_fs(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        parent = os.path.dirname(root.rstrip(os.sep)) or "."
        if not os.path.isdir(parent):
            raise UsageError(f"--root {root}: parent directory {parent} does not exist") from None
        try:
            os.mkdir(root)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"--root {root}: cannot create it: {exc.strerror}") from None
        st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--root {root}: not a directory" + (" (a symlink: iodl never writes through links)"
                                                             if stat.S_ISLNK(st.st_mode) else ""))
    if not os.access(root, os.W_OK | os.X_OK):
        raise UsageError(f"--root {root}: not writable")
    store = read_store(root)
    if store is not None:
        return store
    if os.path.lexists(os.path.join(root, MANIFEST)):
        raise UsageError(f"--root {root} is an iodl dataset; checkpoints need a root of their own")
    if [n for n in os.listdir(root) if n != "lost+found"]:
        raise UsageError(f"--root {root} holds files that iodl did not write (no {STORE}); "
                         "choose an empty or new directory")
    store = {"schema": STORE_SCHEMA, "next": 1, "checkpoints": []}
    save_store(root, store)
    return store


def save_store(root: str, store: dict) -> None:
    write_json(os.path.join(root, STORE), store)


def _entry_path(root: str, entry: dict) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name.startswith("ckpt-") or os.sep in name:
        raise UsageError(f"{os.path.join(root, STORE)}: a checkpoint named {name!r} is not one iodl writes")
    return os.path.join(root, name)


def remove_checkpoint(root: str, entry: dict) -> int:
    """Unlink the files iodl wrote for entry (names from its store entry, regular files only,
    never following a link) and then its directory if empty; the bytes freed."""
    path = _entry_path(root, entry)
    freed = 0
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    try:
        for name in entry.get("files", []):
            if not isinstance(name, str) or "/" in name or name in (".", ".."):
                continue
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                freed += st.st_blocks * 512
    finally:
        os.close(dfd)
    try:
        os.rmdir(path)
    except OSError:
        pass   # something iodl did not write is in it: left alone
    return freed


def new_checkpoint(root: str, store: dict, signature: dict, names: list[str], need: int) -> str:
    """Mount leader: forget and remove what iodl wrote before, check that the next checkpoint
    fits, then record it (its files' names first, so that what iodl writes can be removed later)
    and make its directory."""
    for entry in store["checkpoints"]:
        remove_checkpoint(root, entry)
    store["checkpoints"] = []
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        save_store(root, store)
        raise UsageError(f"--root {root}: a checkpoint of this mount's ranks needs {need:,} bytes, "
                         f"the filesystem has {free:,} free")
    number = int(store.get("next", 1))
    name = f"ckpt-{number:06d}"
    store.update(next=number + 1, checkpoints=[{"name": name, "state": "writing", "files": names, **signature}])
    save_store(root, store)
    path = os.path.join(root, name)
    try:
        os.mkdir(path)
    except FileExistsError:
        raise UsageError(f"{path}: exists, and the checkpoint store does not say iodl wrote it; "
                         "iodl will not write there") from None
    return name


def complete(root: str, store: dict) -> None:
    """Mark the checkpoint just written complete, and when: a later read-only run says how long
    after it it began (MLPerf's 30 s)."""
    store["checkpoints"][-1].update(state="complete", completed_at=time.time())
    save_store(root, store)


def latest(store: dict, signature: dict, root: str) -> str:
    """The name of the last complete checkpoint that matches signature, or a one-line refusal."""
    done = [e for e in store["checkpoints"] if e.get("state") == "complete"]
    if not done:
        raise UsageError(f"--root {root}: no complete checkpoint to read (write one first: --writes 1)")
    entry = done[-1]
    theirs = {k: entry.get(k) for k in signature}
    if theirs != signature:
        diff = ", ".join(f"{k} {theirs[k]!r} (this run: {signature[k]!r})" for k in signature if theirs[k] != signature[k])
        raise UsageError(f"--root {root}: its checkpoint {entry['name']} was written with another {diff}")
    return entry["name"]


def read_gap_s(root: str) -> float | None:
    """A read-only run: seconds from the end of the last checkpoint written in root to this
    process's start (None when the store does not say when that was)."""
    done = [e for e in ((read_store(root) or {}).get("checkpoints") or []) if e.get("state") == "complete"]
    if not done or not isinstance(done[-1].get("completed_at"), (int, float)):
        return None
    return time.time() - process_age_s() - done[-1]["completed_at"]
