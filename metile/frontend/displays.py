"""Displays and comprehensions of compile-time containers: `[a, b]`, `{k: v}`, `[f(x) for x in xs if c]`,
`{k: v for ...}` and generator expressions, evaluated while tracing.

A list or dict made here is owned by the kernel (`metile.frontend.containers.own`), so its code may change it, and
its traced items are bound to names (`keep`). A comprehension's `for` clauses iterate compile-time iterables (it is
unrolled, as a Python `for` is), its `if` clauses need compile-time conditions, and its variables live in a scope of
their own, as in Python 3. A generator expression runs at once and gives a tuple of its items.
"""

from __future__ import annotations

import ast

from metile.frontend.containers import MAX_ITEMS, check_key, items_of, keep, own
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelTypeError,
    RuntimeConditionError,
    UnsupportedSyntaxError,
)
from metile.ir.values import Value


def display_items(tr, elts: list[ast.expr]) -> list:
    """The values of a display's items, `*x` spreading the items of a compile-time iterable."""
    out = []
    for e in elts:
        if e.__class__ is ast.Starred:
            out.extend(items_of(tr.eval(e.value), "`*` in a display", tr.loc(e)))
        else:
            out.append(tr.eval(e))
    return out


def list_display(tr, node: ast.List):
    """A list display: a list the kernel owns (`metile.frontend.containers`), its traced items bound to names."""
    loc = tr.locs.get(node) or tr.loc(node)
    return own(tr, [keep(tr, v, loc) for v in display_items(tr, node.elts)])


def dict_display(tr, node: ast.Dict):
    """A dict display: compile-time keys, values of any kind; `**d` merges a compile-time mapping."""
    loc = tr.locs.get(node) or tr.loc(node)
    out: dict = own(tr, {})
    for k, v in zip(node.keys, node.values):
        value = tr.eval(v)
        if k is None:
            if not isinstance(value, dict):
                raise KernelTypeError(f"`**` in a dict display needs a dict, not {type(value).__name__}", tr.loc(v))
            out.update(value)
            continue
        key = tr.eval(k)
        check_key(out, key, tr.loc(k))
        try:
            out[key] = keep(tr, value, loc)
        except TypeError as e:
            raise KernelTypeError(f"this dict key cannot be used: {e}", tr.loc(k)) from None
    return out


def run_comprehension(tr, node, emit) -> None:
    """Run the `for` and `if` clauses of a comprehension while tracing, calling `emit()` once per item, with
    the clauses' variables in a scope of their own (as in Python 3)."""
    saved = tr.env
    tr.env = dict(saved)
    count = [0]

    def clause(i: int) -> None:
        if i == len(node.generators):
            count[0] += 1
            if count[0] > MAX_ITEMS:
                raise ConstexprRequiredError(f"a comprehension makes more than {MAX_ITEMS} items", tr.loc(node))
            emit()
            return
        gen = node.generators[i]
        if gen.is_async:
            raise UnsupportedSyntaxError("async comprehensions are not supported inside a kernel", tr.loc(gen.iter))
        seq = tr.eval(gen.iter)
        for item in items_of(seq, "a comprehension", tr.loc(gen.iter)):
            tr.assign(gen.target, item)
            for cond in gen.ifs:
                ok = tr.eval(cond)
                if isinstance(ok, Value):
                    raise RuntimeConditionError("the `if` of a comprehension needs a compile-time condition; select "
                                                "per element with metile.where instead", tr.loc(cond))
                if not ok:
                    break
            else:
                clause(i + 1)

    try:
        clause(0)
    finally:
        tr.env = saved


def list_comprehension(tr, node: ast.ListComp):
    loc = tr.locs.get(node) or tr.loc(node)
    out: list = []
    elt = node.elt
    run_comprehension(tr, node, lambda: out.append(keep(tr, tr.eval(elt), loc)))
    return own(tr, out)


def generator_expression(tr, node: ast.GeneratorExp):
    """A generator expression, run at once: its items as a tuple (read twice, it gives the same items)."""
    out: list = []
    elt = node.elt
    run_comprehension(tr, node, lambda: out.append(tr.eval(elt)))
    return tuple(out)


def dict_comprehension(tr, node: ast.DictComp):
    loc = tr.locs.get(node) or tr.loc(node)
    out: dict = {}

    def emit() -> None:
        key = tr.eval(node.key)
        check_key(out, key, tr.loc(node.key))
        out[key] = keep(tr, tr.eval(node.value), loc)

    run_comprehension(tr, node, emit)
    return own(tr, out)


__all__ = ["dict_comprehension", "dict_display", "display_items", "generator_expression", "list_comprehension",
           "list_display", "run_comprehension"]
