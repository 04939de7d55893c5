"""64-bit integers under `triton.language`: `tl.int64`/`tl.uint64` are metile's i64/u64, `pid.to(tl.int64)` widens
offsets as Liger-Kernel's kernels do, int64 tensors and Python ints beyond i32 are arguments of Triton's types, and
promotion, division, reductions and pointer arithmetic follow Triton 3.4's rules for them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError
from metile.ir.types import DType
from metile.triton.errors import NotSupportedYetError
from metile.triton.language.types import metile_dtype, triton_dtype

pytestmark = pytest.mark.usefixtures("on_cpu")


def test_the_64_bit_dtypes_are_metiles():
    assert metile_dtype(tl.int64) is DType.I64 and metile_dtype(tl.uint64) is DType.U64
    assert triton_dtype(DType.I64) is tl.int64 and triton_dtype(DType.U64) is tl.uint64
    with pytest.raises(KernelTypeError, match="float64"):
        metile_dtype(tl.float64)


@triton.jit
def row_starts(Out, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)          # Liger-Kernel's idiom: row offsets past 2**31 elements
    tl.static_assert(pid.dtype == tl.int64)
    start = pid * stride                          # i64 * i32: i64 (Triton's integer promotion)
    tl.store(Out + pid, start + tl.max(tl.arange(0, BLOCK), axis=0))


@triton.jit
def row_starts_narrow(Out, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(Out + pid, pid * stride + tl.max(tl.arange(0, BLOCK), axis=0))


def test_program_id_widened_to_int64_computes_offsets_past_2_31():
    stride = 2**30 + 3
    out = torch.zeros(4, dtype=torch.int64)
    row_starts[(4,)](out, stride, BLOCK=16)
    assert out.tolist() == [i * stride + 15 for i in range(4)]
    narrow = torch.zeros(4, dtype=torch.int32)
    row_starts_narrow[(4,)](narrow, stride, BLOCK=16)
    wrapped = np.array([i * stride + 15 for i in range(4)], np.int64).astype(np.int32)
    assert narrow.tolist() == wrapped.tolist()    # without the widening, i32 wraps as Triton's does


@triton.jit
def promote(A, B, Out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(A + offs)                         # i64
    b = tl.load(B + offs)                         # u32
    s = a + b
    tl.static_assert(s.dtype == tl.int64)         # u32 with i64: the wider signed type
    w = a + 5
    tl.static_assert(w.dtype == tl.int64)         # a Python int is weak
    u = a.to(tl.uint64) + 1
    tl.static_assert(u.dtype == tl.uint64)
    big = 2**40                                   # an assigned number past i32 is a traced i64
    tl.static_assert(big.dtype == tl.int64)
    c = b < 2**40                                 # compared in i64, not wrapped into u32
    tl.static_assert(c.dtype == tl.int1)
    tl.store(Out + offs, s * 3 + big + c.to(tl.int64))


def test_promotion_with_int64():
    a = torch.tensor([-(2**40), -1, 0, 7], dtype=torch.int64)
    b = np.array([2**32 - 1, 1, 2, 3], np.uint32)
    out = torch.zeros(4, dtype=torch.int64)
    promote[(1,)](a, b, out, BLOCK=4)
    want = (a + torch.from_numpy(b.astype(np.int64))) * 3 + 2**40 + 1
    assert out.tolist() == want.tolist()


@triton.jit
def divide64(A, B, Q, R, S, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(A + offs)
    b = tl.load(B + offs)
    tl.store(Q + offs, a // b)
    tl.store(R + offs, a % b)
    tl.store(S, tl.sum(a, axis=0))
    tl.store(S + 1, tl.max(tl.zeros((BLOCK,), dtype=tl.int64) + 2**40, axis=0))


def test_int64_division_rounds_toward_zero_and_the_lowest_over_minus_one_wraps():
    a = torch.tensor([-(2**63), -7, 7, 2**62, 5, -(2**40), 7, 8], dtype=torch.int64)
    b = torch.tensor([-1, 2, -2, 3, 1, -1, 1, -1], dtype=torch.int64)
    q, r, s = torch.zeros_like(a), torch.zeros_like(a), torch.zeros(2, dtype=torch.int64)
    divide64[(1,)](a, b, q, r, s, BLOCK=8)
    assert q.tolist() == [-(2**63), -3, -3, 2**62 // 3, 5, 2**40, 7, -8]
    assert r.tolist() == [0, -1, 1, 2**62 % 3, 0, 0, 0, 0]
    assert s.tolist() == [int(np.sum(a.numpy())), 2**40]   # the sum wraps modulo 2**64, as numpy's does


@triton.jit
def scalar_args(Out, n, m):
    tl.static_assert(n.dtype == tl.int64)         # Triton types an int argument past i32 as i64...
    tl.static_assert(m.dtype == tl.uint64)        # ...and one from 2**63 as u64
    tl.store(Out, n + 1)
    tl.store(Out + 1, (m >> 32).to(tl.int64))


def test_python_ints_beyond_i32_are_i64_or_u64_arguments():
    out = torch.zeros(2, dtype=torch.int64)
    scalar_args[(1,)](out, 3_000_000_000, 2**63 + 5)
    assert out.tolist() == [3_000_000_001, 2**31]


@triton.jit
def far_pointer(X, Out, off):
    p = X + off                                   # an i64 offset
    q = p - off + 2                               # pointer - i64, then + a Python int
    tl.store(Out, tl.load(q))


def test_pointer_arithmetic_with_int64_offsets():
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(1)
    far_pointer[(1,)](x, out, 2**40)
    assert out.item() == 2.0


@triton.jit
def wide_loop(Out, n):
    acc = tl.zeros((1,), dtype=tl.int64)
    for i in range(0, n, 2**30):                  # an i64 bound: the index is i64 and does not wrap
        acc += i
    tl.store(Out + tl.arange(0, 1), acc)


def test_loops_with_an_int64_bound():
    out = torch.zeros(1, dtype=torch.int64)
    wide_loop[(1,)](out, 5 * 2**31)
    assert out.tolist() == [45 * 2**30]   # the indexes 0, 2**30, ..., 9 * 2**30


@triton.jit
def atomic64(X):
    tl.atomic_add(X, 1)


def test_atomics_on_int64_memory_are_refused_at_the_line():
    with pytest.raises((KernelTypeError, NotSupportedYetError), match="64") as e:
        atomic64[(1,)](torch.zeros(1, dtype=torch.int64))
    assert e.value.loc.line == atomic64.fn.__code__.co_firstlineno + 2


def test_a_constant_that_fits_no_64_bit_type_is_refused():
    @triton.jit
    def huge(Out):
        tl.store(Out, tl.load(Out) + 2**64)

    @triton.jit
    def huge_assigned(Out):
        big = 2**64
        tl.store(Out, big)

    with pytest.raises(KernelTypeError, match="the constant 18446744073709551616 does not fit i64"):
        huge[(1,)](torch.zeros(1, dtype=torch.int64))
    with pytest.raises(KernelTypeError, match="the integer 18446744073709551616 does not fit 64 bits"):
        huge_assigned[(1,)](torch.zeros(1, dtype=torch.int64))
