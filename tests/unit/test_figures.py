"""Each number defined once: every key docs/numbers.md documents is made by one function
(iodl/figures.py), that function names it, and no other function divides to make a figure of that
name (a rate or fraction computed a second time). These are checks of the source, not of a run;
tests/cmd/test_result_docs.py holds real results to the same page."""
import ast
import importlib
import inspect
import os
import re

from iodl import figures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs", "numbers.md")
PACKAGE = os.path.join(ROOT, "iodl")

_TOKEN = re.compile(r'"([A-Za-z_][A-Za-z_0-9]*)"(\s*:)?|([A-Z]+)\s*=|[{}\[\]|:]')


def doc_paths(text: str) -> set[str]:
    """Every key of the two result schemas on the page (the read result's, the checkpoint's) as a
    dotted path from "result" or "checkpoint"; OP = {...} is the checkpoint's operation block.
    A quoted word that is a value (after "key": or beside |) is not a key."""
    out = set()
    blocks = re.findall(r"```\n(.*?)```", text, re.S)
    schemas = [b for b in blocks if '"schema"' in b]
    for name, block in zip(("result", "checkpoint", "kvcache"), schemas):
        stack, pending, prev = [name], None, ""
        for m in _TOKEN.finditer(block):
            tok = m.group(0)
            if m.group(3):
                pending = m.group(3)
            elif tok in "{[":
                stack.append(pending)
                pending = None
            elif tok in "}]":
                stack.pop()
            elif m.group(1):
                nxt = block[m.end():m.end() + 1]
                if not m.group(2) and (prev in (":", "|") or nxt == "|"):
                    prev = tok
                    continue   # a value, not a key
                out.add(".".join(k for k in [*stack, m.group(1)] if k))
                pending = m.group(1) if m.group(2) else None
                tok = ":" if m.group(2) else tok
            prev = tok.strip()[-1:] if tok.strip() else prev
    return out


def leaves(paths: set[str]) -> set[str]:
    """The paths that hold a value, not a group of keys."""
    return {p for p in paths if not any(q.startswith(p + ".") for q in paths)}


def _resolve(name: str):
    module, qualname = name.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_page_is_parsed_into_its_keys():
    paths = doc_paths(open(DOCS, encoding="utf-8").read())
    # a few keys at each depth, and values that are not keys
    assert {"result.total.bandwidth_MBps", "result.nodes.mounts.copies", "result.train.mlperf.au",
            "checkpoint.OP.per_round.bytes", "checkpoint.checkpoint.write", "result.latency_hist.ns"} <= paths
    assert not {"result.start", "result.epoch", "checkpoint.checkpoint.checkpoint"} & paths
    assert len(paths) > 150


def test_every_documented_key_has_one_definition_and_the_table_holds_no_other():
    documented = doc_paths(open(DOCS, encoding="utf-8").read())
    listed = [p for paths in figures.DEFINED_BY.values() for p in paths]
    assert len(listed) == len(set(listed)), sorted({p for p in listed if listed.count(p) > 1})   # each once
    defined = set(listed)
    assert not defined & set(figures.AS_RUN), sorted(defined & set(figures.AS_RUN))
    missing = leaves(documented) - defined - set(figures.AS_RUN)
    assert not missing, f"documented in docs/numbers.md, defined nowhere in iodl/figures.py: {sorted(missing)}"
    extra = (defined | set(figures.AS_RUN)) - documented
    assert not extra, f"in iodl/figures.py, not in docs/numbers.md: {sorted(extra)}"


def test_each_defining_function_names_its_keys():
    for name, paths in figures.DEFINED_BY.items():
        source = inspect.getsource(_resolve(name))
        for path in paths:
            key = path.rsplit(".", 1)[1]
            assert re.search(rf"\b{key}\b", source), f"{name} does not make {path}"


def _divides(node) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for n in ast.walk(node))


def _made_by_division(tree: ast.Module):
    """(key, outermost function's qualname) of every key given a value by a division: a dict
    entry, a subscript assignment, a keyword argument (block.update(key=x / y))."""
    def visit(node, owner, in_class):
        for child in ast.iter_child_nodes(node):
            name, cls = owner, False
            if isinstance(child, ast.ClassDef) and owner is None:
                name, cls = child.name, True
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and (owner is None or in_class):
                name = child.name if owner is None else f"{owner}.{child.name}"
            if isinstance(child, ast.Dict):
                for k, v in zip(child.keys, child.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str) and _divides(v):
                        yield k.value, name
            elif isinstance(child, ast.Assign) and _divides(child.value):
                for t in child.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                        yield t.slice.value, name
            elif isinstance(child, ast.keyword) and child.arg and _divides(child.value):
                yield child.arg, name
            yield from visit(child, name, cls)

    yield from visit(tree, None, False)


def _sources():
    for folder, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                yield module, open(path, encoding="utf-8").read()


def test_no_other_function_divides_to_make_a_documented_figure():
    allowed: dict[str, set[str]] = {}
    for name, paths in figures.DEFINED_BY.items():
        for path in paths:
            allowed.setdefault(path.rsplit(".", 1)[1], set()).add(name)
    stray = []
    for module, text in _sources():
        if module in figures.OTHER_TOOLS:
            continue
        for key, owner in _made_by_division(ast.parse(text)):
            if key in allowed:
                where = f"{module}:{owner}"
                if where not in allowed[key]:
                    stray.append(f"{where} computes {key!r}; its definition is {sorted(allowed[key])}")
    assert not stray, "\n".join(stray)


def test_the_division_check_sees_each_way_of_making_a_key():
    source = """
class Block:
    def rated(self, block, w):
        block.update(iops=block["ios"] / w)
        def inner():
            return {"bandwidth_MBps": block["bytes"] / w}
        block["cache_hit_fraction"] = block["cached"] / block["bytes"]
        return {"bytes": block["bytes"], "window_s": w}
def top(x):
    return {"iops": rate(x)}
"""
    assert sorted(_made_by_division(ast.parse(source))) == [
        ("bandwidth_MBps", "Block.rated"), ("cache_hit_fraction", "Block.rated"), ("iops", "Block.rated")]


def test_the_cache_hit_fraction_is_divided_out_once():
    """Bytes from the cache over bytes read: reduce.hit_fraction and nowhere else (a unit conversion,
    cached bytes / 1e6 for MB, is not a fraction)."""
    at = [(module, m.group(0)) for module, text in _sources()
          for m in re.finditer(r"\bcached\w*[\"'\]]*\s*/(?!/)(?!\s*(?:1e6|1e9|MB|GB)\b)", text)]
    assert at == [("iodl.reduce", "cached_bytes /")], at
