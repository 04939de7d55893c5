"""`fold_constants`: a rewrite pass of pure `match` rules that folds constant arithmetic, at any stage.

Rules (each returns a smaller node, or None when it does not apply):
- `fold_binary`: integer and bool operators on two constants (division and remainder only by a nonzero
  divisor, shifts only within the bit width, `mulhi` as the high half of the product, results wrapped to the
  dtype);
- `fold_identity`: `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x` on integers (the constant a scalar or a tile of
  it: `full`, a broadcast constant), `x & true`, `true & x` on scalars;
- `fold_compare`: a comparison of two constants;
- `fold_where`: a selection on a constant condition;
- `fold_cast`: an integer or bool constant converted to an integer type (wrapped), or to a float type (rounded
  once, `to_float`).

Floats are never folded (rounding would have to match Metal's exactly). The rules run bottom-up over the
whole kernel, as `metile.rewrite.driver.bottom_up` runs them, when at least one of them matches somewhere: only the
nodes matched and those containing them are visited again, in the order of the kernel's scan.
"""

from __future__ import annotations

import operator

from metile.ir.node import Node, children, map_children
from metile.ir.ops import BinOp, CmpOp
from metile.ir.stmts import Kernel
from metile.ir.tile import Broadcast, Full
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Cast, Compare, Const, Where
from metile.rewrite.context import PassContext
from metile.rewrite.driver import _apply, _key, bottom_up, by_class, first_of
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import Scan, scan, scan_analysis

_INT_OPS = {
    BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul, BinOp.AND: operator.and_,
    BinOp.OR: operator.or_, BinOp.XOR: operator.xor, BinOp.MAX: max, BinOp.MIN: min,
}
_CMP = {CmpOp.LT: operator.lt, CmpOp.LE: operator.le, CmpOp.GT: operator.gt, CmpOp.GE: operator.ge,
        CmpOp.EQ: operator.eq, CmpOp.NE: operator.ne}


def wrap(value: int, dtype: DType) -> int | bool:
    """`value` as the integer type `dtype` holds it (two's complement wrap-around)."""
    if dtype is DType.BOOL:
        return bool(value)
    bits = dtype.bits
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype.is_signed and value >= 1 << (bits - 1) else value


def _exact(c: Node) -> bool:
    return isinstance(c, Const) and not c.dtype.is_float and isinstance(c.type, TileType)


def _int_result(op: BinOp, a: int, b: int, dtype: DType) -> int | None:
    if op in _INT_OPS:
        return _INT_OPS[op](a, b)
    if op in (BinOp.TRUNCDIV, BinOp.REM) and b != 0:
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q if op is BinOp.TRUNCDIV else a - q * b
    if op in (BinOp.FLOORDIV, BinOp.MOD) and b != 0:
        return a // b if op is BinOp.FLOORDIV else a % b
    if op in (BinOp.SHL, BinOp.SHR) and 0 <= b < dtype.bits:
        return a << b if op is BinOp.SHL else a >> b
    if op is BinOp.MULHI:
        return (a * b) >> dtype.bits
    return None


def fold_binary(n: Node) -> Node | None:
    match n:
        case Binary(op, Const(a, dtype) as x, Const(b)) if _exact(x) and dtype is not DType.BOOL:
            r = _int_result(op, a, b, dtype)
            return None if r is None else Const(wrap(r, dtype), dtype, loc=n.loc)
        case Binary(BinOp.AND | BinOp.OR | BinOp.XOR as op, Const(a, DType.BOOL), Const(b, DType.BOOL)):
            return Const(bool(_INT_OPS[op](a, b)), DType.BOOL, loc=n.loc)
    return None


def _splat(c: Node) -> Node:
    """The constant a tile of one constant repeats (`full`, a broadcast constant), else `c` itself."""
    match c:
        case Full(value=Const() as v) | Broadcast(x=Const() as v):
            return v
    return c


def fold_identity(n: Node) -> Node | None:
    match n:
        case Binary(op=BinOp.ADD | BinOp.SUB, lhs=x, rhs=z) if _is(z, 0) and x.type == n.type:
            return x
        case Binary(op=BinOp.ADD, lhs=z, rhs=x) if _is(z, 0) and x.type == n.type:
            return x
        case Binary(op=BinOp.MUL, lhs=x, rhs=one) if _is(one, 1) and x.type == n.type:
            return x
        case Binary(op=BinOp.MUL, lhs=one, rhs=x) if _is(one, 1) and x.type == n.type:
            return x
        case Binary(op=BinOp.AND, lhs=x, rhs=Const(value=True, dtype=DType.BOOL)) \
                | Binary(op=BinOp.AND, lhs=Const(value=True, dtype=DType.BOOL), rhs=x) \
                if x.type == n.type:
            return x
    return None


def _is(c: Node, value: int) -> bool:
    """`c` is the integer constant `value`, or a tile of it."""
    c = _splat(c)
    return _exact(c) and c.value == value and c.dtype is not DType.BOOL


def fold_compare(n: Node) -> Node | None:
    match n:
        case Compare(op, Const(a) as x, Const(b)) if _exact(x):
            return Const(_CMP[op](a, b), DType.BOOL, loc=n.loc)
    return None


def fold_where(n: Node) -> Node | None:
    match n:
        case Where(Const(c, DType.BOOL), x, y) if x.type == n.type and y.type == n.type:
            return x if c else y
    return None


def fold_cast(n: Node) -> Node | None:
    """An integer constant converted to another number type (not to an 8-bit float, which has no constants: its
    conversion from f32 runs in the kernel)."""
    match n:
        case Cast(Const(v) as c, dtype) if _exact(c) and dtype is not DType.BOOL and not dtype.storage_only:
            return Const(to_float(int(v), dtype) if dtype.is_float else wrap(int(v), dtype), dtype, loc=n.loc)
    return None


_SIGNIFICAND = {DType.F32: 24, DType.F16: 11, DType.BF16: 8}


def to_float(value: int, dtype: DType) -> float:
    """The integer `value` rounded once to the precision of the float type `dtype`, to nearest, ties to even (as a
    conversion does on the device). `float(value)` would round a 64-bit integer to a double first, and rounding that
    again can differ (2**60 + 2**36 + 1 rounds up to f32, its double 2**60 + 2**36 down)."""
    n = abs(value)
    drop = n.bit_length() - _SIGNIFICAND.get(dtype, 53)
    if drop > 0:
        q, r = divmod(n, 1 << drop)
        half = 1 << (drop - 1)
        n = (q + (r > half or (r == half and q & 1))) << drop
    return float(n if value >= 0 else -n)


FOLD_TABLE = {Binary: first_of(fold_binary, fold_identity), Compare: fold_compare, Where: fold_where,
              Cast: fold_cast}
FOLD_RULES = by_class(FOLD_TABLE)


@define_pass(precedes=[Fact.METAL_IR])
def fold_constants(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` with constant integer and bool arithmetic folded (any stage); one rewrite over the whole kernel,
    so a value shared by several statements is folded once.

    The rules are first tried on the nodes of `scan(k)`, the walk the later passes share. Most kernels have
    nothing to fold: then `k` itself is returned, so its scan stays valid for `plan_launch` and `lower_tiles`.
    Otherwise only the nodes that matched and the nodes containing them are rewritten (`_fold_matched`: the
    same result as `bottom_up(FOLD_RULES, k)`, which rebuilds a node only when a rule matched inside it), and
    the scan of the folded kernel is made from the scan of `k`, walking only the statements rebuilt."""
    found = scan(k, ctx.analyses)
    hits = {id(n): out for n in _candidates(found) if (out := _apply(FOLD_TABLE[n.__class__], n)) is not None}
    if not hits:
        return k
    out = _fold_matched(found, hits)
    if isinstance(out, Kernel):
        ctx.analyses.record(scan_analysis, out, Scan(out, found))
    return out


def _fold_matched(found: Scan, hits: dict[int, Node]) -> Node:
    """The kernel of `found` folded bottom-up, visiting its nodes in the scan's order (children before parents)
    and rewriting a node only when a rule matched it (`hits`: what the rule made of it) or one of its children was
    rewritten: a node without either is a fixpoint of the rules already. Equal nodes get the first one's result,
    as `bottom_up`'s memo gives them."""
    done: dict[int, Node] = {}         # id(node) -> its folded form, for the nodes that changed
    by_key: dict[object, Node] = {}    # `_key(node)` -> its folded form, for the nodes that changed
    get, changed = done.get, done.keys()
    nodes = found.nodes
    start = next(i for i, n in enumerate(nodes) if id(n) in hits)   # no node before the first match contains one
    for n in nodes[start:]:
        key = id(n)
        if key not in hits:
            kids = children(n)
            if not kids or changed.isdisjoint(map(id, kids)):
                continue
        same = by_key.get(_key(n))
        if same is not None:
            done[key] = same
            continue
        cur = map_children(lambda c: get(id(c), c), n)
        if cur is n:   # no child rewritten: a node of `hits`
            nxt = hits[key]
        else:
            rule = FOLD_TABLE.get(cur.__class__)
            nxt = None if rule is None else _apply(rule, cur)
        if nxt is not None:
            final = {id(c) for c in children(cur)}
            cur = nxt if id(nxt) in final else bottom_up(FOLD_RULES, nxt)
        if cur is n:
            continue
        done[key] = by_key[_key(n)] = cur
    root = nodes[-1]
    return done.get(id(root), root)


def _candidates(found) -> list[Node]:
    """The nodes of the scan that some rule of `FOLD_TABLE` could match: every rule needs a constant operand
    (both operands of a `Binary` for `fold_binary`, for `fold_identity` one that is 0 or 1, or a tile of it, under an
    operator it folds; both operands of a `Compare`, the condition of a `Where`), so a node without one is skipped
    before any `match` runs. The property test of the fast path checks this against the full rewrite."""
    out = [n for n in found.of(Binary) if _binary_candidate(n)]
    out += [n for n in found.of(Compare) if isinstance(n.lhs, Const) and isinstance(n.rhs, Const)]
    out += [n for n in found.of(Where) if isinstance(n.cond, Const)]
    out += [n for n in found.of(Cast) if isinstance(n.x, Const)]
    return out


_IDENTITY_OPS = frozenset({BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.AND})   # the operators `fold_identity` folds
_SPLATS = frozenset({Const, Full, Broadcast})   # the classes `_constant_in` finds a constant in


def _binary_candidate(n: Binary) -> bool:
    """Whether `fold_binary` or `fold_identity` could match `n`: both operands constants, or one of them 0 or 1 (a
    bool `True` is 1), alone or as a tile, under an operator `fold_identity` folds."""
    lhs, rhs = n.lhs, n.rhs
    left, right = lhs.__class__, rhs.__class__
    if left is Const and right is Const:
        return True
    if (left not in _SPLATS and right not in _SPLATS) or n.op not in _IDENTITY_OPS:
        return False   # most operands (names, index arithmetic) are of no class holding a constant
    a, b = _constant_in(lhs), _constant_in(rhs)
    return (a is not None and a.value in (0, 1)) or (b is not None and b.value in (0, 1))


def _constant_in(c: Node) -> Const | None:
    """`_splat(c)` when that is a constant, else None, told by the classes of `c` and its operand (the built nodes of
    these classes are of the class itself, never of a subclass)."""
    cls = c.__class__
    if cls is Const:
        return c
    if cls is Full:
        v = c.value
    elif cls is Broadcast:
        v = c.x
    else:
        return None
    return v if v.__class__ is Const else None


__all__ = ["FOLD_RULES", "FOLD_TABLE", "fold_binary", "fold_cast", "fold_compare", "fold_constants", "fold_identity",
           "fold_where", "to_float", "wrap"]
