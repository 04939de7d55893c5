"""`and`, `or` and `not` in metile kernels (`docs/language.md` 4.2).

On compile-time operands they are Python's. On a traced scalar they short-circuit at run time: `a and b` evaluates
`b` only where `a` holds (an `If` on `a` whose branch evaluates `b`), `a or b` only where `a` does not, so
`i < n and metile.load(X + i) > 0` never loads past `n`. Their result is then a traced bool (Python's would be one
of the operands). `not x` of a traced scalar is the bool `x == 0`. A tile operand is refused: combine masks with
`&`, `|` and `~`, which work element by element.
"""

from __future__ import annotations

import ast

from metile.frontend.errors import RuntimeConditionError
from metile.ir.errors import Loc
from metile.ir.types import PtrType
from metile.ir.values import Value
from metile.language import constexpr


def _scalar(tr, value: Value, word: str, node: ast.AST):
    t = value.type
    if isinstance(t, PtrType) or t.shape:
        hint = {"and": "&", "or": "|", "not": "~"}[word]
        raise RuntimeConditionError(f"`{word}` takes scalars, and this operand is a {t}: combine masks element by "
                                    f"element with `{hint}` (with parentheses around comparisons)", tr.loc(node))
    return tr.truth(value, node, word)


def boolop(tr, word: str, operands: list[ast.expr], loc: Loc):
    """`operands[0] and operands[1] and ...` (or `or`), short-circuiting at compile time and at run time."""
    value = None
    for i, operand in enumerate(operands):
        value = tr.eval(operand)
        if isinstance(value, Value):
            cond = _scalar(tr, value, word, operand)
            rest = operands[i + 1:]
            if not rest:
                return cond

            def others(rest=rest):
                v = boolop(tr, word, rest, loc)
                return _scalar(tr, v, word, rest[-1]) if isinstance(v, Value) else bool(v)

            if word == "and":
                return tr.lazy_bool(cond, others, lambda: False, loc)
            return tr.lazy_bool(cond, lambda: True, others, loc)
        if (word == "and") != bool(value):
            break
    return value.value if isinstance(value, constexpr) else value


def logical_not(tr, x, node: ast.AST):
    """`not x`: Python's on a compile-time value, the bool `x == 0` on a traced scalar."""
    if not isinstance(x, Value):
        return not x
    cond = _scalar(tr, x, "not", node)
    return tr.dialect.unary("invert", cond, tr.loc(node))


__all__ = ["boolop", "logical_not"]
