"""The text form is lossless and canonical, and generated kernels verify.

- `parse(pretty(k)) == k` and `pretty(parse(pretty(k))) == pretty(k)`, with and without locations;
- `verify` accepts every kernel the strategies build (they are well typed by construction);
- `map_children` with the identity returns the very same node (sharing survives a no-op rewrite);
- the strategies reach every node class.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis.errors import NoSuchExample
from test_ir_strategies import any_kernels

from metile.ir import STMT_CLASSES, VALUE_CLASSES, Kernel, Loc, Node, map_children, parse, pretty, verify, walk

# The slower companions run at most 200 examples under the ci profile.
BOUNDED = settings(max_examples=min(settings().max_examples, 200))


@given(any_kernels())
def test_generated_kernels_verify_and_round_trip(k: Kernel):
    verify(k, after="strategy")
    text = pretty(k)
    back = parse(text)
    assert back == k
    assert pretty(back) == text


def locate(n: Node, lines: Iterator[int]) -> Node:
    """`n` with a distinct location on every node."""
    return attrs.evolve(map_children(lambda c: locate(c, lines), n), loc=Loc("kernel.py", next(lines), 4))


def statement_locs(body) -> list[Loc | None]:
    out = []
    for s in body:
        out.append(s.loc)
        for field in ("body", "then", "orelse", "cond_body"):
            out += statement_locs(getattr(s, field, ()))
    return out


@BOUNDED
@given(any_kernels())
def test_locations_round_trip(k: Kernel):
    located = locate(k, itertools.count(1))
    text = pretty(located, locs=True)
    back = parse(text)
    assert back == k
    assert back.loc == located.loc
    assert [p.loc for p in back.params] == [p.loc for p in located.params]
    assert statement_locs(back.body) == statement_locs(located.body)
    assert pretty(back, locs=True) == text
    assert pretty(back) == pretty(k)


@BOUNDED
@given(any_kernels())
def test_identity_rewrite_keeps_every_node(k: Kernel):
    for n in walk(k):
        assert map_children(lambda c: c, n) is n


def test_strategies_reach_every_node_class():
    wanted = set(VALUE_CLASSES + STMT_CLASSES)
    seen: set[type] = set()

    def reached_all(k: Kernel) -> bool:
        seen.update(type(n) for n in walk(k))
        return seen >= wanted

    # stops at the first kernel that completes the set; the bound is only a guard against never reaching it
    quick = settings(max_examples=10000, phases=[Phase.generate], database=None, deadline=None)
    try:
        find(any_kernels(), reached_all, settings=quick)
    except NoSuchExample:
        pytest.fail("never generated: " + ", ".join(sorted(c.__name__ for c in wanted - seen)))
