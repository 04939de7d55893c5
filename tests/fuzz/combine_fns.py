"""The `@metile.func` combine functions fuzzed programs give `metile.reduce` and `metile.associative_scan`
(docs/language.md 6.8), their source, and their model on `MVal`s: each is associative, and exact on the types it
is given (integers wrap, float maxima and minima are exact but for the sign of a tie of zeros), so that the result
does not depend on the order the device combines in. `affine` and `digits` are not commutative."""

from __future__ import annotations

import attrs

from tests.fuzz import model as M


@attrs.frozen
class Combine:
    name: str
    arity: int              # tiles combined (1, or 2 for a tuple)
    src: str                # the function's body (after its signature)
    floats: bool            # also for float tiles (max and min only: exact)
    commutative: bool


FNS = {c.name: c for c in (
    Combine("c_add", 1, "    return a + b", False, True),
    Combine("c_mul", 1, "    return a * b", False, True),
    Combine("c_max", 1, "    return metile.maximum(a, b)", True, True),
    Combine("c_min", 1, "    return metile.minimum(a, b)", True, True),
    Combine("c_xor", 1, "    return a ^ b", False, True),
    Combine("c_or", 1, "    return a | b", False, True),
    Combine("c_and", 1, "    return a & b", False, True),
    Combine("c_last", 1, "    return b", True, False),
    Combine("c_affine", 2, "    return a1 * a2, b1 * a2 + b2", False, False),
    Combine("c_argmax", 2, "    pick = (v2 > v1) | ((v2 == v1) & (i2 < i1))\n"
            "    return metile.where(pick, v2, v1), metile.where(pick, i2, i1)", False, True),
)}


def signature(c: Combine) -> str:
    if c.arity == 1:
        return "a, b"
    return {"c_affine": "a1, b1, a2, b2", "c_argmax": "v1, i1, v2, i2"}[c.name]


def func_defs(k) -> list[str]:
    """The definitions of the combine functions kernel `k` uses, each followed by two blank lines."""
    from tests.fuzz.prog import kernel_names_of_fns
    out = []
    for name in sorted(kernel_names_of_fns(k)):
        c = FNS[name]
        out += ["@metile.func", f"def {name}({signature(c)}):", *c.src.split("\n"), "", ""]
    return out


def _same(x: M.MVal, t: str) -> M.MVal:
    return M.cast(x, t)


def apply(name: str, lhs: tuple, rhs: tuple) -> tuple:
    """The model of combine function `name` on the first side's values `lhs` and the second's `rhs` (MVals of
    one type per tile), as a tuple; each result keeps its tile's type (the generator picks only combines that
    do)."""
    c = FNS[name]
    if c.arity == 1:
        a, b = lhs[0], rhs[0]
        t = a.t
        if name in ("c_add", "c_mul", "c_xor", "c_or", "c_and"):
            op = {"c_add": "+", "c_mul": "*", "c_xor": "^", "c_or": "|", "c_and": "&"}[name]
            return (_same(M.binary(op, a, b, M.arith_type(op, t, t)), t),)
        if name in ("c_max", "c_min"):
            return (M.extremum(a, b, name == "c_max"),)
        return (b,)
    if name == "c_affine":
        (a1, b1), (a2, b2) = lhs, rhs
        t = a1.t
        return (_same(M.binary("*", a1, a2, t), t),
                _same(M.binary("+", M.binary("*", b1, a2, t), b2, t), t))
    (v1, i1), (v2, i2) = lhs, rhs
    gt = M.binary(">", v2, v1, "bool")
    eq = M.binary("==", v2, v1, "bool")
    lt = M.binary("<", i2, i1, "bool")
    pick = M.binary("|", gt, M.binary("&", eq, lt, "bool"), "bool")
    return M.where(pick, v2, v1), M.where(pick, i2, i1)
