"""iodl's modules import one another without a cycle (bench/import_graph.py reads the source)."""
import importlib.util
import os

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
