"""`Scan(k, prior)`, which takes the statements `k` shares with the kernel `prior` scanned from that scan instead of
walking them again, is `Scan(k)`: the same nodes in the same order, the same nodes per class, the same facts per
value and the same spans, on random kernels of every stage edited as passes edit them (statements kept, rebuilt
around the same children, built anew from equal parts, dropped, swapped, and the same inside loop and branch
bodies)."""

from __future__ import annotations

import copy
import sys
from collections import defaultdict

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from metile.ir.ops import BinOp, Stage
from metile.ir.stmts import For, If, Kernel, Let, While
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Const, Var
from metile.rewrite.scan import Scan, _stack_walk, _visit_all
from property_tests.test_ir_strategies import any_kernels

KEEP, REBUILD, COPY, DROP = "keep", "rebuild", "copy", "drop"


def _edited(stmts, data) -> list:
    out = []
    for s in stmts:
        how = data.draw(st.sampled_from([KEEP, KEEP, REBUILD, COPY, DROP]))
        if how == DROP:
            continue
        if how == COPY:
            out.append(copy.deepcopy(s))   # equal parts, none of them the same object
            continue
        if how == REBUILD:   # a new statement around the same children, or around edited bodies
            match s:
                case For() | While():
                    s = attrs.evolve(s, body=_edited(s.body, data))
                case If():
                    s = attrs.evolve(s, then=_edited(s.then, data), orelse=_edited(s.orelse, data))
                case _:
                    s = copy.copy(s)
        out.append(s)
    if len(out) > 1 and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(out) - 2))
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


def _same_nodes(a, b) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def assert_same_scan(got: Scan, want: Scan) -> None:
    assert _same_nodes(got.nodes, want.nodes)
    got_classes, want_classes = list(got.classes()), list(want.classes())
    assert [c for c, _ in got_classes] == [c for c, _ in want_classes]
    assert all(_same_nodes(x, y) for (_, x), (_, y) in zip(got_classes, want_classes))
    # a scan made from an earlier one may keep entries for nodes the kernel no longer has (see `Scan`): every node
    # of the kernel has the same facts and span
    assert {key: got.facts.get(key) for key in want.facts} == want.facts
    assert not {id(n) for n in got.nodes} & (got.facts.keys() - want.facts.keys())
    assert not {id(n) for n in got.nodes} & (got.spans.keys() - want.spans.keys())
    for key, (s, inner, met) in want.spans.items():
        t, inner2, met2 = got.spans[key]
        assert t is s and _same_nodes(inner2, inner) and _same_nodes(met2, met)


@settings(max_examples=300)
@given(any_kernels(), st.data())
def test_a_scan_reusing_an_earlier_one_is_the_scan(k, data):
    prior = Scan(k)
    edited = attrs.evolve(k, body=_edited(k.body, data))
    assert_same_scan(Scan(edited, prior), Scan(edited))


@settings(max_examples=100)
@given(any_kernels())
def test_a_scan_of_the_same_kernel_takes_everything(k):
    assert_same_scan(Scan(k, Scan(k)), Scan(k))


def _walked(walk, k, prior=None) -> Scan:
    """A scan of `k` (from `prior`) made by the walk function `walk` of `metile.rewrite.scan`."""
    out = Scan.__new__(Scan)
    out.nodes, out._by_type, out._matching, seen, skipped = [], defaultdict(list), {}, set(), []
    out.facts, out.spans = ({}, {}) if prior is None else (dict(prior.facts), dict(prior.spans))
    out._held = None if prior is None else (prior.nodes, prior._held)
    walk(k, prior, out.nodes, out._by_type, out.facts, out.spans, seen, skipped)
    return out


@settings(max_examples=200)
@given(any_kernels(), st.data())
def test_the_stack_walk_is_the_recursive_walk(k, data):
    """The walk by an explicit stack, which kernels deeper than the recursion limit take, makes the scan the
    recursive walk makes, from scratch and from an earlier scan."""
    assert_same_scan(_walked(_stack_walk, k), _walked(_visit_all, k))
    prior = Scan(k)
    edited = attrs.evolve(k, body=_edited(k.body, data))
    assert_same_scan(_walked(_stack_walk, edited, prior), _walked(_visit_all, edited, prior))
    assert_same_scan(_walked(_stack_walk, edited, _walked(_stack_walk, k)), Scan(edited))


def test_a_chain_deeper_than_the_recursion_limit_is_scanned():
    x = Var("x", TileType(DType.F32, (32,)))
    acc = x
    for _ in range(sys.getrecursionlimit() + 100):
        acc = Binary(BinOp.ADD, acc, x)
    y = Var("y", acc.type)
    k = Kernel("deep", Stage.TILE, [], [Let(x, Const(1.0, DType.F32)), Let(y, acc)])
    found = Scan(k)
    assert len(found.nodes) == sys.getrecursionlimit() + 100 + 6
    assert found.names(acc) == {"x"} and found.of(Let)[1].value is acc
    assert_same_scan(found, _walked(_stack_walk, k))


def test_a_malformed_node_is_scanned_as_children_lists_it():
    """A node holding a non-node where its class declares one (malformed, for the verifier to report) is scanned
    as `metile.ir.node.walk` walks it: the non-node is skipped, not taken for a node."""
    from metile.ir.node import walk

    x, y = Var("x", TileType(DType.I32, (4,))), Var("y", TileType(DType.I32, (4,)))
    bad = Binary(BinOp.ADD, x, 5)
    k = Kernel("bad", Stage.TILE, [], [Let(x, Const(1, DType.I32)), Let(y, bad)])
    found = Scan(k)
    assert _same_nodes(found.nodes, list(walk(k)))
    assert found.names(bad) == {"x"} and found.of(Binary) == [bad]


@settings(max_examples=300)
@given(any_kernels(), st.data())
def test_the_scan_skip_inactive_records_after_removing_marks_is_the_scan(k, data):
    """`skip_inactive` replaces each `AllActive(x)` by `x` and records the scan of the kernel it makes from the scan
    it was given, without a walk (`metile.rewrite.scan.replaced_scan`): it is the scan of that kernel. Random kernels
    with some of their values (each wherever it occurs) wrapped in `AllActive`."""
    from metile.ir.tile import AllActive
    from metile.ir.values import Value
    from metile.rewrite.context import PassContext
    from metile.rewrite.driver import substitute
    from metile.rewrite.inactive import _unmarked
    from metile.rewrite.scan import scan_analysis

    values = [n for n in Scan(k).nodes if isinstance(n, Value) and not isinstance(n, Var)]
    if values:
        chosen = data.draw(st.lists(st.sampled_from(values), max_size=4))
        k = substitute(k, {v: AllActive(v) for v in chosen})
    found = Scan(k)
    marks = found.of(AllActive)
    # the kernel given may be another one of the same body (a pass changed its plan), whose scan that is
    given = attrs.evolve(k, name="other") if data.draw(st.booleans()) else k
    ctx = PassContext()
    out = _unmarked(given, found, marks, ctx)
    if not marks:
        assert out is given
        return
    assert out.name == given.name and not Scan(out).has(AllActive)
    assert_same_scan(ctx.analyses.kept(scan_analysis, out), Scan(out))


@settings(max_examples=200)
@given(any_kernels())
def test_the_scan_meets_the_nodes_walk_meets(k):
    """The scan reads children by attrgetters of the fields declared as nodes (`_field_getter`): it meets the nodes
    `metile.ir.node.walk`, which reads them with the getters the node classes generate, meets, in the same order."""
    from metile.ir.node import walk

    assert _same_nodes(Scan(k).nodes, list(walk(k)))
