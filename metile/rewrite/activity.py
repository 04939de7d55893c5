"""Activity values (`metile.rewrite.inactive`): where a value's elements are active, as a bool value of its shape, or
None for "active everywhere"; how an operation's activity is made of its operands' (`node_activity`), and which
operations make it so (`READS_OPERANDS`: any other value is active everywhere, whatever its operands)."""

from __future__ import annotations

from metile.ir.node import Node
from metile.ir.ops import BinOp, UnOp
from metile.ir.tile import Broadcast, ExpandDims, Full, Join, Permute, Reshape, Scan, Take, Transpose
from metile.ir.types import DType
from metile.ir.values import AddPtr, Binary, Bitcast, Cast, Compare, Const, Fma, IntToPtr, Load, Unary, Value, Where

_TRUE = Const(True, DType.BOOL)


def both(a: Value | None, b: Value | None) -> Value | None:
    """Active where `a` and `b` are."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    return Binary(BinOp.AND, a, b)


def either(a: Value | None, b: Value | None) -> Value | None:
    """Active where `a` or `b` is."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    return Binary(BinOp.OR, a, b)


def pick(c: Value, a: Value | None, b: Value | None) -> Value | None:
    """The activity of `where(c, x, y)`, `x` active at `a` and `y` at `b`."""
    if a == b:
        return a
    if a is None:
        return None if b == Unary(UnOp.NOT, c) else Binary(BinOp.OR, c, b)
    if b is None:
        return None if a == c else Binary(BinOp.OR, Unary(UnOp.NOT, c), a)
    return Where(c, a, b)


def everywhere(shape: tuple[int, ...]) -> Value:
    """An activity value that is true at every element of a value of `shape`."""
    return _TRUE if shape == () else Full(shape, _TRUE)


def node_activity(n: Node, act) -> Value | None:
    """The activity of value `n` from the activity `act(child)` of its children (already known)."""
    match n:
        case Binary(lhs=a, rhs=b) | Compare(lhs=a, rhs=b) | AddPtr(ptr=a, offset=b):
            return both(act(a), act(b))
        case Unary(x=x) | Cast(x=x) | Bitcast(x=x) | IntToPtr(x=x) | Scan(x=x):
            return act(x)
        case Fma(a=a, b=b, c=c):
            return both(both(act(a), act(b)), act(c))
        case Where(cond=c, x=x, y=y):
            return pick(c, act(x), act(y))
        case Load(ptr=ptr, mask=None):
            return act(ptr)
        case Load(ptr=ptr, mask=mask, other=None):
            return both(mask, act(ptr))
        case Load(ptr=ptr, mask=mask, other=other):
            return pick(mask, act(ptr), act(other))
        case Broadcast(x=x, shape=shape):
            a = act(x)
            return None if a is None else Broadcast(a, shape)
        case ExpandDims(x=x, axis=axis):
            a = act(x)
            return None if a is None else ExpandDims(a, axis)
        case Reshape(x=x, shape=shape):
            a = act(x)
            return None if a is None else Reshape(a, shape)
        case Transpose(x=x):
            a = act(x)
            return None if a is None else Transpose(a)
        case Permute(x=x, order=order):
            a = act(x)
            return None if a is None else Permute(a, order)
        case Take(x=x, axis=axis, index=index):
            a = act(x)
            return None if a is None else Take(a, axis, index)
        case Join(a=x, b=y):
            ax, ay = act(x), act(y)
            if ax is None and ay is None:
                return None
            return Join(everywhere(x.type.shape) if ax is None else ax, everywhere(y.type.shape) if ay is None else ay)
    # Constants, ranges, fills, identities, parameters, reductions, gathers (an inactive element picked reads as 0,
    # as reductions and scans built from gathers need), `dot` results, `AllActive`, simdgroup exchanges.
    return None


READS_OPERANDS = (Binary, Compare, AddPtr, Unary, Cast, Bitcast, IntToPtr, Scan, Fma, Where, Load, Broadcast,
                  ExpandDims, Reshape, Transpose, Permute, Take, Join)
"""The classes whose activity `node_activity` makes of their operands'; any other value is active everywhere."""

__all__ = ["READS_OPERANDS", "both", "either", "everywhere", "node_activity", "pick"]
