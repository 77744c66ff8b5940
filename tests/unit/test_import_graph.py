"""iodl's modules import one another without a cycle, at the top of the module but for a short,
explained list (bench/import_graph.py reads the source); a rank imports no printing side."""
import importlib.util
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "import_graph.py")


def _graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_module_of_iodl_is_part_of_an_import_cycle():
    g = _graph_module()
    graph, _lazy = g.scan()
    assert "iodl.runner" in graph and "iodl.data.open" in graph   # it read the package
    assert g.cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle():
    g = _graph_module()
    assert g.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert g.cycles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_are_only_the_allowed_ones():
    g = _graph_module()
    _graph, lazy = g.scan()
    assert ("iodl.cmd.read", "iodl.read_report.ReadReport") in {(m, n) for m, _l, n in lazy}   # it sees them
    assert [(m, line, n) for m, line, n in lazy if not g.allowed(m, n)] == []
    # every entry of the list is still needed, and says why
    used = {(m, a) for m, a in g.ALLOWED for mod, _l, n in lazy if g.allowed(mod, n) and mod == m
            and (n == a or n.startswith(a + "."))}
    assert set(g.ALLOWED) == used
    assert all(len(why) > 20 for why in g.ALLOWED.values())


def test_the_allow_list_names_the_module_and_what_it_imports():
    g = _graph_module()
    assert g.allowed("iodl.workload", "iodl.dlio")
    assert not g.allowed("iodl.runner", "iodl.dlio")          # allowed in one module, not anywhere
    assert not g.allowed("iodl.workload", "iodl.dlio_output")  # a prefix of a name is not the name
    assert g.allowed("iodl.formats", "PIL.Image")


def test_a_rank_imports_no_printing_side():
    """What every rank of `iodl read` imports (the command and the run) holds none of rank 0's side:
    at 72 ranks on 2 cores each module is ~36x its import time of start-up."""
    code = ("import sys, iodl.cli, iodl.cmd.read, iodl.runner; "
            "print(' '.join(m for m in ('rich', 'yaml', 'csv', 'iodl.read_report', 'iodl.report', 'iodl.progress', "
            "'iodl.series', 'iodl.dlio', 'iodl.comm.MPI', 'mpi4py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
