"""iodl's import graph: cycles between its modules, and imports made inside functions.

Run from the repo: `python bench/import_graph.py` prints both and exits 1 when either is found.
tests/unit/test_import_graph.py holds the package to it. Read from the source (ast), nothing imported.
"""
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "iodl"

# Imported inside a function on purpose: optional dependencies (a run without them still works),
# mpi4py, whose import starts MPI (`iodl --help` and fio-compare must not), and the asyncio engine,
# whose asyncio, ssl, aiofiles and uvloop cost every rank 2.5 MB when only C engines run.
LAZY_OK = {"mpi4py", "h5py", "matplotlib", "uvloop", "aiofiles", "pyarrow", "rich", "yaml", "numpy.lib.format",
           "iodl.asyncio_engine"}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = mod.split(".")
        keep = len(parts) - node.level + (1 if is_pkg else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    # `from iodl import x` may name a module x or a name in iodl/__init__: try both
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _type_checking(tree) -> set:
    """Nodes under `if TYPE_CHECKING:`: annotations only, never run, so not an edge of the graph."""
    out = set()
    for top in tree.body:
        if isinstance(top, ast.If) and getattr(top.test, "id", None) == "TYPE_CHECKING":
            out.update(id(n) for n in ast.walk(top))
    return out


def scan():
    """(graph: module -> set of iodl modules it imports, lazy: [(module, line, imported)])"""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph, lazy = {}, []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        deps, typing_only = set(), _type_checking(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = _resolve(mod, is_pkg, node)
            else:
                continue
            internal = [n for n in names if n in modules and n != mod]
            deps.update(internal)
            if node.col_offset > 0 and not _guarded(tree, node):
                top = names[0]
                if not any(top == ok or top.startswith(ok + ".") for ok in LAZY_OK):
                    lazy.append((mod, node.lineno, top))
        graph[mod] = deps
    return graph, lazy


def _guarded(tree, node) -> bool:
    """An import at module level under `if`/`try` (optional dependency, TYPE_CHECKING) is not lazy."""
    for top in tree.body:
        if isinstance(top, (ast.If, ast.Try)) and any(n is node for n in ast.walk(top)):
            return True
    return False


def cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    graph, lazy = scan()
    found = cycles(graph)
    for comp in found:
        print("cycle:", " <-> ".join(comp))
    for mod, line, name in lazy:
        print(f"import inside a function: {mod}:{line} imports {name}")
    print(f"{len(graph)} modules, {len(found)} cycles, {len(lazy)} imports inside functions")
    return 1 if found or lazy else 0


if __name__ == "__main__":
    sys.exit(main())
