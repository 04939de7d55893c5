"""The atomics other than add, as statements, in metile's language and under `triton.language`: `atomic_max`,
`atomic_min`, `atomic_and`, `atomic_or`, `atomic_xor` on i32 and u32 memory and `atomic_xchg` on f32 too, each
element combined once where the mask holds, and a uniform scalar atomic once per program; the types Metal's
atomics lack are refused at the line, and so are the old values Triton's atomics return."""

from __future__ import annotations

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError
from metile.ir import AtomicAdd, AtomicOp, parse, pretty
from metile.triton.errors import NotSupportedYetError

pytestmark = pytest.mark.usefixtures("on_cpu")

OPS = {"max": np.maximum, "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@metile.kernel
def combine(Acc, X, n, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    x = metile.load(X + offs, mask=ok)
    slot = Acc + offs % 4                        # many elements meet at each of 4 addresses
    if OP == "max":
        metile.atomic_max(slot, x, mask=ok)
    elif OP == "min":
        metile.atomic_min(slot, x, mask=ok)
    elif OP == "and":
        metile.atomic_and(slot, x, mask=ok)
    elif OP == "or":
        metile.atomic_or(slot, x, mask=ok)
    else:
        metile.atomic_xor(slot, x, mask=ok)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("op", sorted(OPS))
def test_atomic_combines_every_element_once(op, dtype):
    n = 1000
    x = np.random.default_rng(5).integers(0, 2**31 - 1, n).astype(dtype)
    if dtype is np.int32:
        x[::7] = -x[::7]
    start = {"and": ~dtype(0), "min": np.iinfo(dtype).max}.get(op, dtype(0))
    acc = np.full(4, start, dtype)
    combine[(metile.cdiv(n, 128),)](acc, x, n, OP=op, BLOCK=128)
    want = np.array([OPS[op].reduce(np.concatenate([[start], x[i::4]])) for i in range(4)], dtype)
    assert acc.tolist() == want.tolist()


@metile.kernel
def swap(Flags, Out, value):
    metile.atomic_xchg(Flags + metile.program_id(0), value)   # a uniform scalar: once per program
    metile.atomic_add(Out, 1)


def test_xchg_of_f32_and_uniform_scalars_run_once_per_program():
    flags, out = np.zeros(3, np.float32), np.zeros(1, np.int32)
    swap[(3,)](flags, out, 2.5)
    assert flags.tolist() == [2.5] * 3 and out.tolist() == [3]


@metile.kernel
def float_max(Acc, X):
    metile.atomic_max(Acc, metile.load(X))


def test_types_metal_atomics_lack_are_refused_at_the_line():
    with pytest.raises(KernelTypeError, match="atomic_max works on i32, u32 memory, not f32: Metal's atomic_float "
                                              "only adds and exchanges") as e:
        float_max[(1,)](np.zeros(1, np.float32), np.zeros(1, np.float32))
    assert e.value.loc.line == float_max.fn.__code__.co_firstlineno + 2
    with pytest.raises(KernelTypeError, match="no 64-bit atomic max"):
        float_max[(1,)](np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_the_op_prints_and_reads_back():
    k = combine.trace(np.zeros(4, np.int32), np.zeros(8, np.int32), 8, OP="xor", BLOCK=8)
    assert "atomic_xor " in pretty(k)
    assert parse(pretty(k)) == k
    ops = [s.op for s in k.body if isinstance(s, AtomicAdd)]
    assert ops == [AtomicOp.XOR]


@triton.jit
def triton_atomics(Lock, Hist, X, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.atomic_max(Hist + offs % 2, x, sem="acq_rel", scope="gpu")
    tl.atomic_or(Hist + 2, x, mask=x > 0)
    tl.atomic_xchg(Lock, 7)


@triton.jit
def triton_cas(Lock):
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass


def test_triton_atomics_as_statements():
    x = np.array([3, -1, 8, 2, 5, 9, -4, 1], np.int32)
    lock, hist = np.zeros(1, np.int32), np.full(3, -100, np.int32)
    hist[2] = 0
    triton_atomics[(1,)](lock, hist, x, BLOCK=8)
    assert hist.tolist() == [8, 9, int(np.bitwise_or.reduce(x[x > 0]))] and lock.tolist() == [7]
    with pytest.raises(NotSupportedYetError, match="tl.atomic_cas"):
        triton_cas[(1,)](lock)
