"""The model of the constructs added to the fuzzer after its first version, called from `tests.fuzz.interp`:
shape changes, combine functions, gathers, sorts, flips, histograms, batched dots, atomics (docs/language.md 5.5,
5.6: each element one atomic, in row-major order; the generator makes only programs whose checked results do
not depend on that order), `and`/`or`/`not` on traced scalars (short-circuit), and the signals of `return`,
`break` and `continue`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tests.fuzz import model as M
from tests.fuzz import model_reduce as R
from tests.fuzz import model_shapes as S
from tests.fuzz.dtypes import TYPES, as_f64, is_float
from tests.fuzz.interp_memory import ModelError, Ptr, Undecidable, mask_of
from tests.fuzz.prog import BoolOp, Call, Num, Py, Tup

if TYPE_CHECKING:
    from tests.fuzz.interp import Interp


class Signal(Exception):  # noqa: N818 - control flow, not an error
    """`return`, `break` or `continue` taken: the statements after it in its block do not run."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


SHAPE_FNS = ("reshape", "ravel", "permute", "expand_dims", "broadcast_to", "join", "split", "interleave", "flip",
             "gather", "sort", "topk", "histogram", "reduce", "associative_scan")
ATOMICS = ("atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg",
           "atomic_cas")


def _py(x):
    return x.value if isinstance(x, (Py, Num)) else x


def _tiles(it: Interp, e) -> tuple[list[M.MVal], bool]:
    if isinstance(e, Tup):
        return [it.as_traced(it.ev(x)) for x in e.items], True
    return [it.as_traced(it.ev(e))], False


def call(it: Interp, c: Call):
    """The model of `metile.<c.fn>(...)` for the functions of this module (None: not one of them)."""
    fn, args = c.fn, c.args
    kw = {k: v for k, v in c.kwargs}
    if fn in ATOMICS:
        return atomic(it, c)
    if fn == "dot" and len(it.as_traced(it.ev(args[0])).shape) == 3:
        return batched_dot(it, c)
    if fn not in SHAPE_FNS and not (fn == "trans" and (len(args) > 1 or "dims" in kw)):
        return None
    if fn in ("reduce", "associative_scan"):
        xs, many = _tiles(it, args[0])
        axis = _py(args[1])
        name = args[2].name
        got = S.combine(name, xs, axis, bool(_py(kw.get("keep_dims", Py(False)))),
                        bool(_py(kw.get("reverse", Py(False)))), fn == "associative_scan")
        return tuple(got) if many else got[0]
    if fn in ("join", "interleave"):                # a Python number takes the other's type
        a, b = it.pair(it.ev(args[0]), it.ev(args[1]), computation=False)
        return S.join(a, b) if fn == "join" else S.interleave(a, b)
    x = it.as_traced(it.ev(args[0]))
    if fn == "reshape":
        return S.reshape(x, _py(args[1]))
    if fn == "ravel":
        return S.reshape(x, (x.v.size,))
    if fn in ("permute", "trans"):
        return S.permute(x, _py(args[1]) if len(args) > 1 else _py(kw["dims"]))
    if fn == "expand_dims":
        return S.expand_dims(x, _py(args[1]))
    if fn == "broadcast_to":
        return S.broadcast_to(x, _py(args[1]))
    if fn == "split":
        return S.split(x)
    if fn == "flip":
        return S.flip(x, _py(kw.get("dim", Py(-1))))
    if fn == "gather":
        return S.gather(x, it.as_traced(it.ev(args[1])), _py(args[2]))
    if fn == "sort":
        return S.sort(x, bool(_py(kw.get("descending", Py(False)))))
    if fn == "topk":
        return S.topk(x, _py(args[1]), bool(_py(kw.get("descending", Py(True)))))
    if fn == "histogram":
        m = kw.get("mask")
        mask = None if m is None else mask_of(it, m, x.shape)
        return S.histogram(x, _py(args[1]), mask)
    raise ModelError(f"no model for metile.{fn}")


def batched_dot(it: Interp, c: Call) -> M.MVal:
    a, b = (it.as_traced(it.ev(x)) for x in c.args[:2])
    acc = it.ev(c.args[2]) if len(c.args) > 2 else None
    out = c.kw("out_dtype")
    res = []
    for i in range(a.shape[0]):
        ai, bi = (S.each(x, lambda v, i=i: v[i]) for x in (a, b))
        if isinstance(acc, Num):
            res.append(R.dot(ai, bi, None, acc.value, None, it.relax))
        else:
            ac = None if acc is None else S.each(M.bcast(acc, (a.shape[0], a.shape[1], b.shape[2])),
                                                  lambda v, i=i: v[i])
            res.append(R.dot(ai, bi, ac, None, None, it.relax))
    r = M.MVal(res[0].t, np.stack([x.v for x in res]), np.stack([x.act for x in res]),
               np.stack([x.err for x in res]))
    return M.cast(r, out.value) if out is not None else r


def bool_op(it: Interp, e: BoolOp) -> M.MVal:
    """`a and b`, `a or b`, `not a` on traced scalars: a traced bool, `b` evaluated only where it decides (7.2)."""
    def truth(x) -> bool:
        x = it.as_traced(x)
        if x.shape:
            raise ModelError("and/or/not of a tile")
        if x.err.max(initial=0) > 0:
            raise Undecidable("a condition the model cannot decide")
        return bool(x.v != 0)
    a = truth(it.ev(e.a))
    if e.op == "not":
        r = not a
    elif e.op == "and":
        r = a and truth(it.ev(e.b))
    else:
        r = a or truth(it.ev(e.b))
    return M.mval("bool", r)


# ---- atomics


def _combine(op: str, old: np.ndarray, val: np.ndarray, t: str, cmp: np.ndarray | None):
    if op == "xchg":
        return val
    if op == "cas":
        return np.where(old == cmp, val, old)
    if is_float(t):
        a, b = as_f64(old), as_f64(val)
        if op == "add":
            return np.float32(np.float32(a) + np.float32(b))
        big = op == "max"
        r = np.maximum(a, b) if big else np.minimum(a, b)
        zeros = (a == 0) & (b == 0)                # -0.0 below +0.0: the integer atomics on the bits order them
        if big:
            r = np.where(zeros, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0), r)
        else:
            r = np.where(zeros, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0), r)
        return np.float32(r)
    a, b = int(old), int(val)
    bits = TYPES[t].bits
    r = {"add": a + b, "max": max(a, b), "min": min(a, b), "and": a & b, "or": a | b, "xor": a ^ b}[op]
    r &= (1 << bits) - 1
    if TYPES[t].kind == "i" and r >= 1 << (bits - 1):
        r -= 1 << bits
    return r


def atomic(it: Interp, c: Call) -> M.MVal:
    """Each element of the broadcast addresses, values, mask (and compared values) one atomic, in row-major order;
    the old values (0 where the mask is false)."""
    op = c.fn[len("atomic_"):]
    p = it.ev(c.args[0])
    if not isinstance(p, Ptr):
        raise ModelError("an atomic of a non-pointer")
    if op == "cas":
        cmp, val = (it.ev(x) for x in c.args[1:3])
    else:
        cmp, val = None, it.ev(c.args[1])
    mem_t = p.t
    val = M.literal(val.value, mem_t) if isinstance(val, Num) else M.cast(val, mem_t)
    if cmp is not None:
        cmp = M.literal(cmp.value, mem_t) if isinstance(cmp, Num) else M.cast(cmp, mem_t)
    shapes = [p.off.shape, val.shape] + ([cmp.shape] if cmp is not None else [])
    m = c.kw("mask")
    mv = None if m is None else it.ev(m)
    if isinstance(mv, M.MVal):
        shapes.append(mv.shape)
    shape = np.broadcast_shapes(*shapes)
    mask = mask_of(it, m, shape, mv) if m is not None else np.ones(shape, bool)
    off = np.broadcast_to(p.off, shape)
    vals = M.bcast(val, shape)
    cmps = M.bcast(cmp, shape) if cmp is not None else None
    if (vals.err > 0).any() or (cmps is not None and (cmps.err > 0).any()):
        raise Undecidable("an atomic of values the model cannot decide")
    arr, errs = it.mem.arrays[p.buf], it.mem.errs[p.buf]
    old = np.zeros(shape, arr.dtype)
    oerr = np.zeros(shape)
    for idx in np.ndindex(shape):
        if not mask[idx]:
            continue
        a = int(off[idx])
        if it.probe:
            a = min(max(a, 0), arr.size - 1)
        elif not 0 <= a < arr.size:
            raise ModelError(f"an atomic on {p.buf} out of bounds: {a} of {arr.size}")
        old[idx] = arr[a]
        oerr[idx] = errs[a]
        if it.probe:
            continue
        arr[a] = _combine(op, arr[a], vals.v[idx], mem_t, cmps.v[idx] if cmps is not None else None)
        errs[a] = 0.0
    return M.MVal(mem_t, old, np.ones(shape, bool), oerr)
