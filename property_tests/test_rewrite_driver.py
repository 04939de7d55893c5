"""The explicit-stack driver agrees with the recursive reference semantics, and handles deep chains."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from metile.ir.node import Node, children, map_children, node, walk
from metile.rewrite.driver import RewriteError, bottom_up, bottom_up_reference, first_of, replace, substitute


@node
class Num(Node):
    value: int


@node
class Add(Node):
    lhs: Node
    rhs: Node


@node
class Mul(Node):
    lhs: Node
    rhs: Node


def fold_add(n: Node) -> Node | None:
    match n:
        case Add(Num(a), Num(b)):
            return Num(a + b, loc=n.loc)
        case Add(x, Num(0)) | Add(Num(0), x):
            return x
    return None


def distribute(n: Node) -> Node | None:
    match n:
        case Mul(Add(a, b), c):
            return Add(Mul(a, c), Mul(b, c), loc=n.loc)
    return None


def fold_mul(n: Node) -> Node | None:
    match n:
        case Mul(Num(a), Num(b)):
            return Num(a * b)
        case Mul(x, Num(1)):
            return x
    return None


RULES = first_of(distribute, fold_add, fold_mul)


def evaluate(n: Node) -> int:
    match n:
        case Num(v):
            return v
        case Add(a, b):
            return evaluate(a) + evaluate(b)
        case Mul(a, b):
            return evaluate(a) * evaluate(b)
    raise AssertionError(n)


exprs = st.recursive(
    st.integers(-3, 3).map(Num),
    lambda sub: st.one_of(st.builds(Add, sub, sub), st.builds(Mul, sub, sub)),
    max_leaves=25,
)


@given(exprs)
def test_explicit_stack_matches_reference(e):
    got = bottom_up(RULES, e)
    assert got == bottom_up_reference(RULES, e)
    assert evaluate(got) == evaluate(e)


@given(exprs)
def test_inert_subtrees_are_kept_without_a_visit(e):
    """A subtree `inert` names (one of the input's with no `Add` in it, which `fold_add` cannot change) is kept as it
    is, handed to the rule only as the root or as what the rule made of a node, and the result is the one without
    `inert`."""
    plain: set[int] = set()   # ids of the input's nodes with no Add in them
    for n in walk(e):
        if not isinstance(n, Add) and all(id(c) in plain for c in children(n)):
            plain.add(id(n))
    met: list[Node] = []
    made: set[int] = {id(e)}

    def rule(n: Node) -> Node | None:
        met.append(n)
        out = fold_add(n)
        if out is not None:
            made.add(id(out))
        return out

    got = bottom_up(rule, e, inert=lambda n: id(n) in plain)
    assert got == bottom_up(fold_add, e)
    assert all(id(n) in made or id(n) not in plain for n in met)
    if id(e) in plain:
        assert got is e


def substitute_reference(n: Node, table: dict[Node, Node]) -> Node:
    """Every node equal to a key of `table` replaced by its value, recursively (the meaning of `substitute`)."""
    if n in table:
        return table[n]
    return map_children(lambda c: substitute_reference(c, table), n)


def _holding(root: Node, replaced: set[int]) -> set[int]:
    """The ids of the nodes of `root` that are, or contain, a node whose id is in `replaced`."""
    out: set[int] = set()
    for n in walk(root):   # children before parents
        if id(n) in replaced or any(id(c) in out for c in children(n)):
            out.add(id(n))
    return out


@given(exprs, st.data())
def test_substitute_matches_reference(e, data):
    nodes = list(walk(e))
    keys = data.draw(st.lists(st.sampled_from(nodes), max_size=3))
    table = {k: data.draw(exprs) for k in keys}
    want = substitute_reference(e, table)
    assert substitute(e, table) == want
    by_id = {id(n): table[n] for n in nodes if n in table}
    assert replace(e, by_id, _holding(e, set(by_id))) == want
    if not table:
        assert substitute(e, table) is e


def test_deep_chain_beyond_the_recursion_limit():
    e: Node = Num(0)
    for i in range(20_000):
        e = Add(e, Num(i % 3))
    assert bottom_up(fold_add, e) == Num(sum(i % 3 for i in range(20_000)))


def test_unchanged_tree_is_returned_as_is():
    e = Mul(Num(2), Add(Num(1), Num(2)))
    assert bottom_up(lambda n: None, e) is e
    assert map_children(lambda c: c, e) is e
    assert [type(n).__name__ for n in walk(e)] == ["Num", "Num", "Num", "Add", "Mul"]


def test_non_converging_rule_is_an_error_with_its_name():
    def flip(n: Node) -> Node | None:
        match n:
            case Add(a, b):
                return Add(b, a)
        return None

    try:
        bottom_up(flip, Add(Num(1), Num(2)), max_steps=50)
    except RewriteError as err:
        assert "flip" in str(err) and "did not converge" in str(err)
    else:
        raise AssertionError("expected RewriteError")


def test_rule_exceptions_name_the_rule():
    def broken(n: Node) -> Node | None:
        raise ZeroDivisionError("boom")

    try:
        bottom_up(broken, Num(1))
    except RewriteError as err:
        assert "broken" in str(err) and "ZeroDivisionError" in str(err)
    else:
        raise AssertionError("expected RewriteError")


def test_locations_stay_out_of_equality_and_hash():
    from metile.ir.errors import Loc

    a, b = Num(1, loc=Loc("f.py", 1)), Num(1, loc=Loc("g.py", 2))
    assert a == b and hash(a) == hash(b) and "loc" not in repr(a)
    assert Add.__match_args__ == ("lhs", "rhs")


def test_equal_statements_at_different_lines_keep_their_own_locations():
    """Two barriers, equal but on lines 3 and 7: rewriting the kernel (with a rule that matches nothing, or replacing
    a node elsewhere) keeps each at its line; memoising statements by equality alone gave both the first's."""
    from metile.ir.errors import Loc
    from metile.ir.ops import Stage
    from metile.ir.stmts import Barrier, Kernel, Store
    from metile.ir.types import AddressSpace, DType, PtrType
    from metile.ir.values import Const, Param
    from metile.rewrite.driver import substitute

    ptr = Param("P", PtrType(DType.F32, (), AddressSpace.DEVICE), 0)
    k = Kernel("k", Stage.METAL, (ptr,), [Barrier(loc=Loc("f.py", 3)), Store(ptr, Const(1.0, DType.F32)),
                                          Barrier(loc=Loc("f.py", 7)), Store(ptr, Const(1.0, DType.F32))])

    def two_for_one(n: Node) -> Node | None:
        match n:
            case Const(1.0, _):
                return Const(2.0, DType.F32)
        return None

    for out in (bottom_up(two_for_one, k), bottom_up_reference(two_for_one, k),
                substitute(k, {Const(1.0, DType.F32): Const(2.0, DType.F32)})):
        assert [s.loc.line for s in out.body if isinstance(s, Barrier)] == [3, 7]
        assert [s.value.value for s in out.body if isinstance(s, Store)] == [2.0, 2.0]
