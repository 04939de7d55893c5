"""What is known at compile time about an integer or pointer tile along its last dimension.

`AxisInfo(contig, div, const)`, in the spirit of Triton's axis analysis:
- `contig`: the last dimension splits into aligned runs of `contig` elements whose values go up by 1;
- `const`: it splits into aligned runs of `const` equal values;
- `div`: the value at the start of every run is a multiple of `div` (for pointers: counted in elements
  from a buffer start, buffers being 16-byte aligned).

The lowering uses it to prove that `V` consecutive elements of a load or store are `V` consecutive,
`V`-aligned addresses, so they can move as one `float4`/`half4`. Anything the rules do not cover is
`UNKNOWN` (runs of 1, divisible by 1), which only ever costs vectorization. The rules are Triton's (a sum
runs where one side runs and the other is constant; a product of a run of consecutive values keeps only the
other side's divisibility), with run lengths combined by their gcd and the divisibility of an operand read at
the starts of the result's runs (`div_at`), so they hold for tiles of any length;
`property_tests/test_axis_info_laws.py` checks every claim against the values of random index expressions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from metile.ir.ops import BinOp, CmpOp
from metile.ir.tile import Arange, Broadcast, ExpandDims, Full, NumPrograms, ProgramId, Reshape
from metile.ir.types import DType, PtrType
from metile.ir.values import AddPtr, Binary, Bitcast, Cast, Compare, Const, Param, Unary, Value, Var, Where

BIG = 1 << 30
BUFFER_ALIGN = 16


class AxisInfo(NamedTuple):
    """See the module docstring (a named tuple: the analysis makes one per value it looks at)."""

    contig: int
    div: int
    const: int


_new = tuple.__new__   # `_new(AxisInfo, (contig, div, const))`: a named tuple made in C (its own `__new__` is a
# Python function, a call the analysis would make for every value it looks at)
UNKNOWN = _new(AxisInfo, (1, 1, 1))


def pow2_factor(n: int) -> int:
    return BIG if n == 0 else min(n & -n, BIG)


class AxisAnalysis:
    """Memoised `info(v)` over one kernel; `defs` maps a `Let` name to its value, to see through names, and
    `loops` a `For` index's name to the loop's `(start, step)`: every value it takes is `start + i * step`."""

    def __init__(self, defs: dict[str, Value], loops: dict[str, tuple[Value, Value]] | None = None):
        self.defs = defs
        self.loops = loops or {}
        self.memo: dict[Value, AxisInfo] = {}
        self._strides: _Strides | None = None

    def strides(self, v: Value) -> tuple[Stride, ...] | None:
        """`strides(v, self.defs)`, each value's found once over the kernel."""
        finder = self._strides
        if finder is None:
            finder = self._strides = _Strides(self.defs, {})
        return finder.of(v)

    def info(self, v: Value) -> AxisInfo:
        found = self.memo.get(v)
        if found is None:
            rule = _RULES.get(v.__class__)
            found = self.memo[v] = _other(self, v) if rule is None else rule(self, v)
        return found


# The rules of `AxisAnalysis.info`, one per node class (found by one lookup of the value's class, instead of trying
# every case in turn); a value of any other class is `_other`.

def _var(a: AxisAnalysis, v: Var) -> AxisInfo:
    name = v.name
    if name in a.defs:
        return a.info(a.defs[name])
    if name in a.loops:
        start, step = a.loops[name]
        return _new(AxisInfo, (1, math.gcd(div_at(a.info(start), 1), div_at(a.info(step), 1)), BIG))
    return _other(a, v)


def _broadcast(a: AxisAnalysis, v: Broadcast) -> AxisInfo:
    x, shape = v.x, v.shape
    xi = a.info(x)
    if x.type.shape == () or x.type.shape[-1] == 1:   # each row is one value, repeated along the row
        return _new(AxisInfo, (1, div_at(xi, 1), BIG if not shape else shape[-1]))
    return xi


def _add_ptr(a: AxisAnalysis, v: AddPtr) -> AxisInfo:
    return _add(a.info(v.ptr), a.info(v.offset))


def _binary(a: AxisAnalysis, v: Binary) -> AxisInfo:
    info = a.info
    match v:
        case Binary(op=BinOp.ADD, lhs=x, rhs=y):
            return _add(info(x), info(y))
        case Binary(op=BinOp.SUB, lhs=x, rhs=y):
            xi, yi = info(x), info(y)
            contig = meet(xi.contig, yi.const)
            return _new(AxisInfo, (contig, math.gcd(div_at(xi, contig), div_at(yi, contig)), meet(xi.const, yi.const)))
        case Binary(op=BinOp.MUL, lhs=x, rhs=y):
            xi, yi = info(x), info(y)
            const = meet(xi.const, yi.const)
            if _is_one(y):
                return _new(AxisInfo, (xi.contig, xi.div, const))
            if _is_one(x):
                return _new(AxisInfo, (yi.contig, yi.div, const))
            # each element a product: of the two values' divisibilities, which a run of consecutive values
            # has only at its start (Triton's rule)
            return _new(AxisInfo, (1, min(div_at(xi, 1) * div_at(yi, 1), BIG), const))
    return _new(AxisInfo, (1, 1, meet(info(v.lhs).const, info(v.rhs).const)))


def _arange(a: AxisAnalysis, v: Arange) -> AxisInfo:
    return _new(AxisInfo, (v.stop - v.start, pow2_factor(v.start), 1))


def _const(a: AxisAnalysis, v: Const) -> AxisInfo:
    value = v.value
    if isinstance(value, int) and not isinstance(value, bool):
        return _new(AxisInfo, (1, pow2_factor(value), BIG))
    return _other(a, v)


def _param(a: AxisAnalysis, v: Param) -> AxisInfo:
    t = v.type
    if isinstance(t, PtrType):
        return _new(AxisInfo, (1, max(BUFFER_ALIGN // t.dtype.itemsize, 1), BIG))
    return _new(AxisInfo, (1, v.multiple, BIG))


def _program(a: AxisAnalysis, v: Value) -> AxisInfo:
    return _new(AxisInfo, (1, 1, BIG))


def _full(a: AxisAnalysis, v: Full) -> AxisInfo:
    return _new(AxisInfo, (1, div_at(a.info(v.value), 1), BIG))


def _expand_dims(a: AxisAnalysis, v: ExpandDims) -> AxisInfo:
    x = v.x
    xi = a.info(x)
    return _new(AxisInfo, (1, div_at(xi, 1), BIG)) if v.axis == len(x.type.shape) else xi


def _reshape(a: AxisAnalysis, v: Reshape) -> AxisInfo:
    x, shape = v.x, v.shape
    return a.info(x) if x.type.shape and shape and x.type.shape[-1] == shape[-1] else UNKNOWN


def _cast(a: AxisAnalysis, v: Cast) -> AxisInfo:
    x, dtype = v.x, v.dtype
    if dtype.is_int and x.type.dtype.is_int:
        xi = a.info(x)
        src = x.type.dtype
        if dtype.bits > src.bits and (dtype.is_signed or not src.is_signed) or dtype is src:
            return xi   # every value kept as it is
        # wrapped modulo 2**bits: equal values stay equal, and powers of 2 up to 2**bits still divide
        return _new(AxisInfo, (1, min(div_at(xi, 1), 1 << dtype.bits), xi.const))
    return _new(AxisInfo, (1, 1, a.info(x).const))


def _bitcast(a: AxisAnalysis, v: Bitcast) -> AxisInfo:
    return _new(AxisInfo, (1, 1, a.info(v.x).const))


def _where(a: AxisAnalysis, v: Where) -> AxisInfo:
    ci, xi, yi = a.info(v.cond), a.info(v.x), a.info(v.y)
    contig = meet(ci.const, meet(xi.contig, yi.contig))
    const = meet(ci.const, meet(xi.const, yi.const))
    return _new(AxisInfo, (contig, math.gcd(div_at(xi, contig), div_at(yi, contig)), const))


def _compare(a: AxisAnalysis, v: Compare) -> AxisInfo:
    op, x, y = v.op, v.lhs, v.rhs
    xi, yi = a.info(x), a.info(y)
    if op in _ORDERED and x.type.dtype.is_int and not isinstance(x.type, PtrType):
        run = _split_run(xi, yi) if op in (CmpOp.LT, CmpOp.GE) else _split_run(yi, xi)
        return _new(AxisInfo, (1, 1, max(meet(xi.const, yi.const), run)))
    return _new(AxisInfo, (1, 1, meet(xi.const, yi.const)))


def _unary(a: AxisAnalysis, v: Unary) -> AxisInfo:
    return _new(AxisInfo, (1, 1, a.info(v.x).const))


def _other(a: AxisAnalysis, v: Value) -> AxisInfo:
    """A value no rule knows: one value (a scalar), else nothing known."""
    return _new(AxisInfo, (1, 1, BIG)) if v.type.shape == () else UNKNOWN


_RULES = {Var: _var, Broadcast: _broadcast, AddPtr: _add_ptr, Binary: _binary, Arange: _arange, Const: _const,
          Param: _param, ProgramId: _program, NumPrograms: _program, Full: _full, ExpandDims: _expand_dims,
          Reshape: _reshape, Cast: _cast, Bitcast: _bitcast, Where: _where, Compare: _compare, Unary: _unary}


def meet(a: int, b: int) -> int:
    """The longest run length that aligned runs of `a` and of `b` both split into: their gcd, `BIG` (a run as
    long as the dimension) leaving the other as it is."""
    return b if a == BIG else a if b == BIG else math.gcd(a, b)


def div_at(x: AxisInfo, run: int) -> int:
    """What divides `x`'s elements at every multiple of `run` along the dimension. `x.div` divides its values at
    multiples of `x.contig` (run starts); elsewhere a value is a run start plus an offset that is a multiple of
    `gcd(run, x.contig)`."""
    contig = x.contig
    if contig == 1 or (run != BIG and run % contig == 0) or run == contig:
        return x.div
    return math.gcd(x.div, meet(run, contig))


_ORDERED = frozenset({CmpOp.LT, CmpOp.GE, CmpOp.GT, CmpOp.LE})


def _split_run(x: AxisInfo, y: AxisInfo) -> int:
    """A run length `L` over which `x < y` (and so `x >= y`) is one value: aligned runs of `L` elements of `x`
    are `L` consecutive values starting at a multiple of `L` and `y` is one multiple of `L` over each, so a run
    lies wholly below `y` or wholly at or above it (`offs < n` with `offs` a block of consecutive indices and `n`
    a multiple of 16 is one value over runs of 16: Triton's rule for comparisons); 1 when none longer is known."""
    run = meet(x.contig, y.const)
    if run in (1, BIG):
        return 1
    run = math.gcd(run, div_at(x, run), div_at(y, run))
    ok = (run > 1 and x.contig % run == 0 and (y.const == BIG or y.const % run == 0)
          and div_at(x, run) % run == 0 and div_at(y, run) % run == 0)
    return run if ok else 1


def _add(a: AxisInfo, b: AxisInfo) -> AxisInfo:
    """`a + b`: runs of consecutive values where one side runs and the other is constant (Triton's rule), whose
    starts both sides' divisibilities at those starts divide."""
    contig = max(meet(a.contig, b.const), meet(a.const, b.contig))
    return _new(AxisInfo, (contig, math.gcd(div_at(a, contig), div_at(b, contig)), meet(a.const, b.const)))


# A stride of `strides`: an int, or `(k, s)` for `k` times the uniform scalar Tile IR value `s`.
Stride = int | tuple[int, Value]


def strides(v: Value, defs: dict[str, Value]) -> tuple[Stride, ...] | None:
    """Per axis, what the integer or pointer tile `v` adds from one element to the next along that axis, when
    `v` is affine in the element's coordinates (`v[i, j] = v[0, 0] + i * s0 + j * s1`); None when the rules
    cannot show it. The rules: aranges, broadcasts and expansions of scalars or of affine tiles, sums, and
    products with a value constant over the tile whose scalar is known (a constant, or a broadcast scalar),
    seen through `Let` names (`defs`) and widening integer casts. `AxisAnalysis.strides` is the same, memoised
    over a kernel."""
    return _Strides(defs, {}).of(v)


class _Strides:
    """`strides` over `defs`, each value's result kept in `memo` (shared subtrees are found once)."""

    def __init__(self, defs: dict[str, Value], memo: dict):
        self.defs, self.memo = defs, memo

    def of(self, v: Value) -> tuple[Stride, ...] | None:
        memo = self.memo
        if v in memo:
            return memo[v]
        found = memo[v] = self._of(v)
        return found

    def _of(self, v: Value) -> tuple[Stride, ...] | None:
        rule = _STRIDE_RULES.get(v.__class__)   # (any other class: not known to be affine)
        return None if rule is None else rule(self, v)


# The rules of `strides`, one per node class (found by one lookup of the value's class, as `AxisAnalysis.info`'s
# are); each takes the finder, whose `of` gives an operand's strides (memoised), and a value of its class. A value
# of shape () has none, but for a name's definition.

def _s_var(f: _Strides, v: Var) -> tuple[Stride, ...] | None:
    found = f.defs.get(v.name)
    return None if found is None else f.of(found)


def _s_arange(f: _Strides, v: Arange) -> tuple[Stride, ...] | None:
    return (1,)


def _s_full(f: _Strides, v: Full) -> tuple[Stride, ...] | None:
    shape = v.type.shape
    return (0,) * len(shape) if shape else None


def _s_broadcast(f: _Strides, v: Broadcast) -> tuple[Stride, ...] | None:
    x, shape = v.x, v.shape
    if not v.type.shape:
        return None
    if x.type.shape == ():
        return (0,) * len(shape)
    inner = f.of(x)
    if inner is None or len(x.type.shape) != len(shape):
        return None
    return tuple(0 if e == 1 else s for e, s in zip(x.type.shape, inner))


def _s_expand_dims(f: _Strides, v: ExpandDims) -> tuple[Stride, ...] | None:
    if not v.type.shape:
        return None
    inner, axis = f.of(v.x), v.axis
    return None if inner is None else (*inner[:axis], 0, *inner[axis:])


def _s_cast(f: _Strides, v: Cast) -> tuple[Stride, ...] | None:
    x, dtype = v.x, v.dtype
    if v.type.shape and dtype.is_int and x.type.dtype.is_int and dtype.bits >= x.type.dtype.bits:
        return f.of(x)
    return None


def _s_sum(f: _Strides, p: Value, off: Value) -> tuple[Stride, ...] | None:
    a, b = f.of(p), f.of(off)
    if a is None or b is None:
        return None
    out = [y if x == 0 else x if y == 0 else x + y if isinstance(x, int) and isinstance(y, int) else None
           for x, y in zip(a, b)]
    return None if None in out else tuple(out)


def _s_add_ptr(f: _Strides, v: AddPtr) -> tuple[Stride, ...] | None:
    return _s_sum(f, v.ptr, v.offset) if v.type.shape else None


def _s_binary(f: _Strides, v: Binary) -> tuple[Stride, ...] | None:
    if not v.type.shape:
        return None
    op, a, b = v.op, v.lhs, v.rhs
    if op is BinOp.ADD:
        return _s_sum(f, a, b)
    if op is BinOp.MUL:
        for x, y in ((a, b), (b, a)):
            scale, inner = _uniform_scalar(y), f.of(x)
            if scale is not None and inner is not None:
                out = [_scaled(s, scale) for s in inner]
                return None if None in out else tuple(out)
    return None


_STRIDE_RULES = {Var: _s_var, Arange: _s_arange, Full: _s_full, Broadcast: _s_broadcast, ExpandDims: _s_expand_dims,
                 Cast: _s_cast, AddPtr: _s_add_ptr, Binary: _s_binary}


def _uniform_scalar(v: Value) -> Value | None:
    """The scalar every element of `v` equals, when `v` is a broadcast, expansion or fill of one."""
    while isinstance(v, (Broadcast, ExpandDims)):
        v = v.x
    if isinstance(v, Full):
        return v.value
    return v if v.type.shape == () else None


def _scaled(s: Stride, scale: Value) -> Stride | None:
    if isinstance(scale, Const) and isinstance(scale.value, int) and not isinstance(scale.value, bool):
        return s * scale.value if isinstance(s, int) else (s[0] * scale.value, s[1])
    if isinstance(s, int):
        return 0 if s == 0 else (s, scale)
    return None


def vector_width(axes: AxisAnalysis, vec: int, ptr: Value) -> int:
    """`vec` when each aligned run of `vec` elements of the pointer tile `ptr` is `vec` consecutive,
    `vec`-aligned addresses of a type that moves as a vector, else 1."""
    t = ptr.type
    if vec == 1 or t.shape[-1] % vec or t.dtype in (DType.BOOL, DType.BF16) or t.dtype.storage_only:
        return 1
    info = axes.info(ptr)
    return vec if info.contig % vec == 0 and info.div % vec == 0 else 1


def _is_one(v: Value) -> bool:
    while isinstance(v, Broadcast):
        v = v.x
    return isinstance(v, Const) and v.value == 1


__all__ = ["BIG", "AxisAnalysis", "AxisInfo", "Stride", "UNKNOWN", "div_at", "meet", "pow2_factor", "strides",
           "vector_width"]
