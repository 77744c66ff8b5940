"""Listing a directory: a plain root's files (a foreign dataset, read as it is), and the files a
generate re-run finds already written in a folder."""
from __future__ import annotations

import os
import stat

import numpy as np

from .. import _native
from ..errors import UsageError

LIST_THREADS = 4   # stat threads per directory listed (_native.list_dir): a cold inode cache waits on the disk


def list_plain(root: str) -> dict[str, np.ndarray]:
    """Every regular file under root (recursive; in each directory its files by name, then its
    subdirectories by name, as os.walk with sorted names gives them): relative names packed in one
    byte array, their offsets, their sizes. Each directory is read and its files stat'ed in C
    (_native.list_dir: no Python work per file); directories are opened relative to their parent
    without following links. A symlink is followed only when it resolves inside the root (to a
    file, or to a directory that is not one of its own ancestors); a FIFO, socket or device is
    refused, a dangling link skipped."""
    real_root = os.path.realpath(root)
    parts: list[tuple[bytes, np.ndarray, np.ndarray]] = []   # (names, offsets, sizes) of each directory, in order

    def refuse(path: bytes, why: str):
        raise UsageError(f"dataset root {root}: {os.fsdecode(path)} {why}")

    def walk(fd: int, rel: bytes, chain: tuple[str, ...]) -> None:
        """The directory open on fd (ROOT/rel), then its subdirectories; closes fd. chain: the real
        paths of the directories walked down to it, itself last (a link back up one is a loop)."""
        try:
            try:
                blob, offsets, sizes, rest = _native.list_dir(fd, rel, LIST_THREADS)
            except OSError as exc:
                where = os.path.join(root, os.fsdecode(rel), os.fsdecode(exc.filename or b""))
                raise UsageError(f"dataset root {root}: {where.rstrip('/')}: {exc.strerror}") from None
            offsets, sizes = np.frombuffer(offsets, dtype=np.int64), np.frombuffer(sizes, dtype=np.int64)
            subdirs: list[tuple[bytes, str | None]] = []   # (name, real path of a linked directory, else None)
            linked: list[tuple[bytes, int]] = []           # (rel name, size) of links to files inside the root
            for name, kind in rest:
                path = os.path.join(os.fsencode(root), rel + name)
                if kind == "d":
                    subdirs.append((name, None))
                elif kind == "o":
                    refuse(path, "is not a regular file (FIFO, socket or device); iodl reads regular files only")
                else:   # a link: judged by where it leads
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue   # dangling
                    target = os.path.realpath(path)
                    if os.path.commonpath([real_root, os.fsdecode(target)]) != real_root:
                        refuse(path, f"is a symlink to {os.fsdecode(target)}, outside the root")
                    if stat.S_ISDIR(st.st_mode):
                        target = os.fsdecode(target)
                        if any(os.path.commonpath([target, up]) == target for up in chain):
                            refuse(path, "is a symlink to a directory it is inside (a loop)")
                        subdirs.append((name, target))
                    elif stat.S_ISREG(st.st_mode):
                        linked.append((rel + name, st.st_size))
                    else:
                        refuse(path, "is not a regular file (FIFO, socket or device); iodl reads regular files only")
            if linked:   # rare: merged into the name order in Python
                names = [blob[offsets[i]:offsets[i + 1]] for i in range(len(sizes))] + [n for n, _s in linked]
                all_sizes = sizes.tolist() + [s for _n, s in linked]
                order = sorted(range(len(names)), key=names.__getitem__)
                blob = b"".join(names[i] for i in order)
                offsets = np.zeros(len(order) + 1, dtype=np.int64)
                np.cumsum([len(names[i]) for i in order], out=offsets[1:])
                sizes = np.array([all_sizes[i] for i in order], dtype=np.int64)
            if len(sizes):
                parts.append((blob, offsets, sizes))
            for name, target in sorted(subdirs):
                try:
                    sub = (os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if target else
                           os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd))
                except OSError as exc:
                    refuse(os.path.join(os.fsencode(root), rel + name), f"cannot be listed ({exc.strerror})")
                walk(sub, rel + name + b"/", (*chain, target or os.path.join(chain[-1], os.fsdecode(name))))
        finally:
            os.close(fd)

    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"dataset root: {root}: {exc.strerror}") from None
    walk(top, b"", (real_root,))
    if not parts:
        raise UsageError(f"dataset root {root} is empty: no files to read (run iodl generate --root {root})")
    offsets = np.zeros(sum(len(p[2]) for p in parts) + 1, dtype=np.int64)
    at, base = 1, 0
    for _blob, offs, sizes in parts:   # each directory's offsets start at 0: shifted onto the joined names
        offsets[at:at + len(sizes)] = offs[1:] + base
        at, base = at + len(sizes), base + int(offs[-1])
    sizes = np.concatenate([p[2] for p in parts])
    return {"blob": np.frombuffer(b"".join(p[0] for p in parts), dtype=np.uint8), "offsets": offsets,
            "sizes": sizes, "stats": np.array([sizes.max(), sizes.sum()], dtype=np.int64)}


def files_present(folder: str) -> dict[str, int]:
    """name -> size of the regular files already in a folder (none when it does not exist yet)."""
    out = {}
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_file(follow_symlinks=False):
                    out[entry.name] = entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        pass
    return out


def not_present(folder: str, idx: np.ndarray, names, want: np.ndarray) -> np.ndarray:
    """Of the files idx, those not yet in folder with their planned size want[i] (names[i]: file
    i's path inside its copy directory): one listing of the folder, no call per file."""
    have = files_present(folder) if len(idx) else None
    if not have:
        return idx
    done = np.array([have.get(os.path.basename(names[i])) == want[i] for i in idx.tolist()], dtype=bool)
    return idx[~done]
