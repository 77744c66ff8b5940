#!/usr/bin/env python3
"""The workload keys a DLIO version reads, taken from its own code: every key LoadConfig
(dlio_benchmark/utils/config.py; src/utils/config.py before 2024) tests for or reads.

    bench/dlio_config_keys.py --git-dir DIR --commit SHA --repo OWNER/NAME > tests/dlio/data/NAME.keys
    bench/dlio_config_keys.py --file config.py --source "OWNER/NAME@SHA path" > ...

Output: '# ' header lines naming the source, then one dotted key per line, sorted (a nested
mapping's keys as `model.parallelism.tensor`; a section only when it is read as a value itself,
e.g. `framework`, or `model` in DLIO 2023). A section DLIO reads under two names (`reader` and
the older `data_reader`) is listed under both. tests/dlio/test_dlio_keys.py holds iodl's key
table (iodl/dlio.py) to every list in tests/dlio/data: a key DLIO reads that iodl gives no stance
fails there.

No DLIO import: the file is parsed (ast), so any version's source works without its dependencies.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys

PATHS = ("dlio_benchmark/utils/config.py", "src/utils/config.py")


def _const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def keys_of(source: str) -> list[str]:
    """The dotted keys LoadConfig reads, in a config.py's source text."""
    tree = ast.parse(source)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "LoadConfig"), None)
    if fn is None:
        raise ValueError("no LoadConfig function")
    config = fn.args.args[1].arg          # LoadConfig(args, config)
    alias: dict[str, set[tuple]] = {}     # reader = config['reader'] / config['data_reader']

    def paths(node) -> set[tuple]:
        """The config paths an expression stands for (empty: not a config path)."""
        if isinstance(node, ast.Name):
            return {()} if node.id == config else alias.get(node.id, set())
        if isinstance(node, ast.Subscript):
            key = _const(node.slice)
            return {p + (key,) for p in paths(node.value)} if key is not None else set()
        return set()

    found: set[tuple] = set()
    # aliases first: they are assigned before they are tested, in source order
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            ps = paths(node.value)
            if ps:
                alias.setdefault(node.targets[0].id, set()).update(ps)
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
            key = _const(node.left)
            if key is not None:
                found |= {p + (key,) for p in paths(node.comparators[0])}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            # a read (DLIO writes into its own copies: preprocess_time["mean"] = ...)
            found |= {p for p in paths(node) if p}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _const(node.args[0]) is not None):
            found |= {p + (_const(node.args[0]),) for p in paths(node.func.value)}
    # a path that only leads to others (config['dataset']) is a section, not a key
    leaves = {p for p in found if not any(q[:len(p)] == p and q != p for q in found)}
    return sorted(".".join(p) for p in leaves)


def mlpstorage_keys_of(source: str) -> list[str]:
    """The workload keys mlpstorage sets as overrides: every string key of a `params_dict`
    (mlpstorage_py/benchmarks/dlio.py: self.params_dict['dataset.skip_listing'] = ...)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        target = None
        if isinstance(node, ast.Subscript):
            target, key = node.value, _const(node.slice)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            target, key = node.comparators[0], _const(node.left)
        if target is not None and key and "." in key and (
                isinstance(target, ast.Attribute) and target.attr == "params_dict"
                or isinstance(target, ast.Name) and target.id == "params_dict"):
            found.add(key)
    return sorted(found)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--git-dir", help="a DLIO git directory (bare is fine)")
    ap.add_argument("--commit", help="the commit to read")
    ap.add_argument("--repo", help="owner/name, for the header")
    ap.add_argument("--file", help="a config.py to read instead of a git tree")
    ap.add_argument("--source", help="with --file: what it is (owner/name@commit path), for the header")
    ap.add_argument("--note", action="append", default=[], help="a header line more (why this commit)")
    ap.add_argument("--mlpstorage", metavar="FILE", help="mlpstorage_py/benchmarks/dlio.py: list the keys it overrides")
    a = ap.parse_args(argv)
    if a.mlpstorage:
        print(f"# {a.source or a.mlpstorage}")
        print("# the workload keys mlpstorage sets as ++workload.KEY=VALUE overrides (bench/dlio_config_keys.py)")
        for key in mlpstorage_keys_of(open(a.mlpstorage, encoding="utf-8").read()):
            print(key)
        return 0
    if a.file:
        text, where = open(a.file, encoding="utf-8").read(), a.source or a.file
    else:
        if not (a.git_dir and a.commit and a.repo):
            ap.error("give --git-dir, --commit and --repo (or --file)")
        sha = subprocess.run(["git", "--git-dir", a.git_dir, "rev-parse", a.commit], check=True,
                             capture_output=True, text=True).stdout.strip()
        for path in PATHS:
            got = subprocess.run(["git", "--git-dir", a.git_dir, "show", f"{sha}:{path}"], capture_output=True,
                                 text=True)
            if got.returncode == 0:
                text, where = got.stdout, f"{a.repo}@{sha} {path}"
                break
        else:
            sys.exit(f"{a.commit}: none of {', '.join(PATHS)}")
    print(f"# {where}")
    for line in a.note:
        print(f"# {line}")
    print("# keys LoadConfig reads (bench/dlio_config_keys.py)")
    for key in keys_of(text):
        print(key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
