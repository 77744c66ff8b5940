"""iodl's import graph: cycles between its modules, and imports made inside functions.

Run from the repo: `python bench/import_graph.py` prints both and exits 1 when a cycle or an import
inside a function that ALLOWED does not name is found.
tests/unit/test_import_graph.py holds the package to it. Read from the source (ast), nothing imported.
"""
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "iodl"

# Every import is at the top of its module but these, made inside a function on purpose. What a
# rank imports is start-up time and memory: at 72 ranks on 2 cores each module costs ~36x its
# import time before the first step, and its pages 72 times. (importing module, what it imports): why
ALLOWED = {
    ("iodl.cmd.read", "iodl.read_report"):
        "rank 0's side of a run (rich, the tables, DLIO's files, the progress line): rank 0 alone imports it, "
        "before the run opens files (an import fails with EMFILE once a run used its descriptors)",
    ("iodl.runner", "iodl.data.generate"): "a read with no --root: the default dataset, generated on first use",
    ("iodl.workload", "iodl.dlio"): "DLIO's YAML reader (PyYAML, DLIO's key table): only for a YAML workload file",
    ("iodl.engines", "iodl.asyncio_engine"): "asyncio, ssl, aiofiles, uvloop (2.5 MB a rank): only when that engine runs",
    ("iodl.asyncio_engine", "aiofiles"): "optional dependency of the asyncio engine",
    ("iodl.asyncio_engine", "uvloop"): "optional dependency of the asyncio engine",
    ("iodl.formats", "crc32c"): "tfrecord's CRCs, computed by generate and validate only (importlib.metadata: 2 MB a rank)",
    ("iodl.launcher", "ctypes"): "cli.py imports launcher before main() takes over SIGINT: a Ctrl-C there is "
        "a traceback, so its imports stay few (the SysV probe runs inside start_mpi, signals at their defaults)",
    ("iodl.launcher", "_socket"): "the start gate's socket: as ctypes above",
    ("iodl.formats", "zipfile"): "npz shards only (zipfile, bz2, lzma: ~3 ms of every rank's start-up)",
    ("iodl.workload", "difflib"): "the did-you-mean hint of a bad workload file only",
    ("iodl.workload", "tomllib"): "TOML workload files only: a read of an iodl dataset takes its workload from the manifest",
    ("iodl.workload", "tomli"): "tomllib on Python 3.10",
    ("iodl.s3root", "configparser"): "the AWS config file, read only for an s3:// root",
    ("iodl.s3root", "urllib.parse"): "URLs of endpoints and objects: parsed only for an s3:// root",
    ("iodl.formats", "PIL"): "jpeg and png shards only (Pillow and its codecs)",
    ("iodl.formats", "h5py"): "hdf5 shards only (h5py loads the HDF5 C library: megabytes a rank)",
    ("iodl.plot", "matplotlib"): "iodl report --plot only (matplotlib and its fonts)",
    ("iodl.comm", "mpi4py"): "importing mpi4py.MPI starts MPI: only when mpirun launched the process",
    ("iodl.launcher", "mpi4py"): "importing mpi4py.MPI starts MPI: only when mpirun launched the process",
    ("iodl.runner", "iodl.patterns.checkpoint"): "in-training checkpoints (--checkpoint-root) only: the "
        "checkpoint pattern and what it alone imports",
    ("iodl.cli", "iodl.comm"): "numpy only after main() took over SIGTERM (a stop while starting is one line)",
    ("iodl.progress", "rich"): "rank 0's live view: every rank of iodl generate imports progress",
    ("iodl.histogram", "iodl._native"): "is the C module built, and from these sources? (ImportError: not built)",
    ("iodl.engines", "iodl.s3engine"): "awscrt's S3 client: loaded only when a root is s3://",
    ("iodl.runner", "iodl.s3dataset"): "awscrt's S3 client: loaded only when a root is s3://",
    ("iodl.cmd.generate", "iodl.s3generate"): "awscrt's S3 client: loaded only when a root is s3://",
    ("iodl.patterns.checkpoint", "iodl.s3checkpoint"): "awscrt's S3 client: loaded only when a root is s3://",
    ("iodl.probe", "iodl.engines"): "iodl probe reports a C module not built instead of failing",
}

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
                # what it imports: `from a.b import c` -> a.b.c (a module or a name in a.b)
                lazy.append((mod, node.lineno, names[1] if isinstance(node, ast.ImportFrom) else names[0]))
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


def allowed(mod: str, name: str) -> bool:
    return any(mod == m and (name == n or name.startswith(n + ".")) for m, n in ALLOWED)


def main() -> int:
    graph, lazy = scan()
    found = cycles(graph)
    for comp in found:
        print("cycle:", " <-> ".join(comp))
    bad = [(mod, line, name) for mod, line, name in lazy if not allowed(mod, name)]
    for mod, line, name in bad:
        print(f"import inside a function: {mod}:{line} imports {name}")
    print(f"{len(graph)} modules, {len(found)} cycles, {len(lazy)} imports inside functions "
          f"({len(lazy) - len(bad)} allowed by ALLOWED), {len(bad)} not allowed")
    return 1 if found or bad else 0


if __name__ == "__main__":
    sys.exit(main())
