"""iodl.records.record behaves as a dataclass does: each record here has a stdlib twin to answer to."""
import dataclasses

import pytest

from iodl.records import record


def _pair(frozen: bool, kw_only: bool = False):
    """The same class body, as a record and as a dataclass."""
    def body():
        class Spec:
            name: str
            size: int = 4096
            tags: tuple = ()
            extra: dict = dataclasses.field(default_factory=dict)
        return Spec
    return (record(frozen=frozen, kw_only=kw_only)(body()),
            dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(body()))


@pytest.mark.parametrize("frozen", [False, True])
def test_repr_and_equality_are_the_dataclass_ones(frozen):
    Rec, Twin = _pair(frozen)
    a, b = Rec("x", 1, ("t",)), Twin("x", 1, ("t",))
    assert repr(a) == repr(b)       # the same text, the qualified name of each
    assert a == Rec("x", 1, ("t",)) and not a != Rec("x", 1, ("t",))
    assert a != Rec("x", 2, ("t",)) and a != Rec("y", 1, ("t",))
    assert (a == b) is False        # another class, even with the same fields (as dataclasses: NotImplemented both ways)
    assert (a == "x") is False
    assert a.__eq__(b) is NotImplemented


def test_a_frozen_record_hashes_its_fields_and_refuses_assignment():
    Rec, Twin = _pair(frozen=True)
    a = Rec("x", 1, ("t",), extra=None)
    assert hash(a) == hash(Twin("x", 1, ("t",), extra=None)) == hash(("x", 1, ("t",), None))
    assert {a: 1}[Rec("x", 1, ("t",), extra=None)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.size


def test_a_mutable_record_is_unhashable_as_a_dataclass_is():
    Rec, Twin = _pair(frozen=False)
    assert Rec.__hash__ is None and Twin.__hash__ is None
    with pytest.raises(TypeError):
        hash(Rec("x"))


def test_dataclasses_functions_take_records():
    Rec, _ = _pair(frozen=True, kw_only=True)
    a = Rec(name="x", extra={"k": 1})
    assert dataclasses.is_dataclass(a)
    assert dataclasses.replace(a, size=8) == Rec(name="x", size=8, extra={"k": 1})
    assert dataclasses.asdict(a) == {"name": "x", "size": 4096, "tags": (), "extra": {"k": 1}}
    assert [f.name for f in dataclasses.fields(a)] == ["name", "size", "tags", "extra"]
    assert Rec.__match_args__ == () and _pair(frozen=True)[0].__match_args__ == ("name", "size", "tags", "extra")
    with pytest.raises(TypeError):
        Rec("x")                    # kw_only holds


def test_what_the_class_body_defines_stays():
    @record(frozen=True)
    class Own:
        a: int

        def __repr__(self):
            return "own"

        def __hash__(self):
            return 7
    assert repr(Own(1)) == "own" and hash(Own(1)) == 7 and Own(1) == Own(1)


def test_the_methods_are_shared_not_compiled_per_class():
    # the point of record (its module says why): no class has its own generated copy of the three
    A, _ = _pair(frozen=True)
    B, _ = _pair(frozen=False)
    assert A.__repr__ is B.__repr__ and A.__eq__ is B.__eq__
    assert A.__repr__.__module__ == A.__eq__.__module__ == A.__hash__.__module__ == "iodl.records"
