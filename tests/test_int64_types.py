"""64-bit integer types through every layer: their names and facts, promotion with the other types and with Python
numbers, the IR's text, verifier and constant folding, MSL spellings (`long`, `5L`, the lowest i64), SIMD-group
reductions built from 32-bit ones, the refusals at the user's line (`atomic_add`, `dot`), and binding on the Metal
device (docs/language.md 3.3 and 3.9)."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import metile
from metile.cli import parse_arg, stand_in
from metile.emit.spell import literal, type_name
from metile.frontend.errors import KernelTypeError
from metile.ir import Binary, BinOp, Cast, Const, DType, TileType, parse, pretty, verify
from metile.ir.types import from_numpy, promote
from metile.rewrite.fold import fold_binary, fold_cast, to_float
from tests.msl_source import kernel_line

pytestmark = pytest.mark.usefixtures("on_cpu")

I64, U64 = DType.I64, DType.U64


def test_the_types_facts_and_names():
    assert (I64.bits, I64.itemsize, I64.msl, I64.is_signed, I64.is_int) == (64, 8, "long", True, True)
    assert (U64.bits, U64.itemsize, U64.msl, U64.is_signed, U64.numpy) == (64, 8, "ulong", False, np.dtype(np.uint64))
    assert (metile.int64, metile.uint64) == ("i64", "u64") and DType("i64") is I64
    assert from_numpy(np.int64) is I64 and from_numpy("uint64") is U64 and from_numpy(np.float64) is None
    assert type_name(TileType(I64)) == "long" and type_name(TileType(U64)) == "ulong"


PROMOTIONS = [
    ("i32", "i64", "i64"), ("u32", "i64", "i64"), ("i8", "u64", "u64"), ("i32", "u64", "u64"), ("i64", "u64", "u64"),
    ("u8", "i64", "i64"), ("u16", "u64", "u64"), ("u32", "u64", "u64"), ("i64", "f16", "f16"), ("u64", "bf16", "bf16"),
    ("i64", "f32", "f32"), ("bool", "i64", "i64"), ("bool", "u64", "u64"), ("i64", "i64", "i64"),
]


@pytest.mark.parametrize(("a", "b", "want"), PROMOTIONS)
def test_promotion_of_64_bit_integers(a, b, want):
    """C's rule, as for narrower types: an unsigned type wins when at least as wide, a wider signed type otherwise
    (numpy's too, except where numpy gives float64, which Metal lacks)."""
    assert promote(DType(a), DType(b)) is DType(want) and promote(DType(b), DType(a)) is DType(want)

    @metile.kernel
    def mixed(A, B, Out):
        r = metile.arange(0, 4)
        metile.store(Out + r, metile.load(A + r) + metile.load(B + r))

    host = {"bool": np.bool_, "bf16": np.float32}
    arrays = [np.zeros(4, host.get(d) or DType(d).numpy) for d in (a, b, want)]
    if "bf16" in (a, b):
        return
    ir = mixed.trace(*arrays)
    (store,) = ir.body[-1:]
    assert store.value.type.dtype is DType(want)


@metile.kernel
def weak(X, Out, SHIFT: metile.constexpr, WHAT: metile.constexpr):
    r = metile.arange(0, 4)
    x = metile.load(X + r)
    if WHAT == "add":
        y = x + (1 << SHIFT)   # the number
    elif WHAT == "full":
        y = metile.full((4,), 1 << SHIFT) + x * 0
    else:
        y = metile.scalar(1 << SHIFT) + x * 0
    metile.store(Out + r, y)


@pytest.mark.parametrize(("dtype", "shift", "what", "want"), [
    (np.int64, 62, "add", "i64"), (np.uint64, 63, "add", "u64"), (np.int32, 40, "full", "i64"),
    (np.int32, 63, "full", "u64"), (np.int32, 40, "scalar", "i64"), (np.int32, 30, "full", "i32")])
def test_python_ints_are_weak_and_alone_take_64_bits_beyond_i32(dtype, shift, what, want):
    x, out = np.zeros(4, dtype), np.zeros(4, DType(want).numpy)
    assert weak.trace(x, out, SHIFT=shift, WHAT=what).body[-1].value.type.dtype is DType(want)
    weak[(1,)](x, out, SHIFT=shift, WHAT=what)
    metile.synchronize()
    assert (out == 1 << shift).all()


def test_a_python_int_an_i32_tile_cannot_hold_is_refused_at_its_line():
    with pytest.raises(KernelTypeError, match="the constant 1099511627776 does not fit i32") as info:
        weak.trace(np.zeros(4, np.int32), np.zeros(4, np.int64), SHIFT=40, WHAT="add")
    assert info.value.loc.line == kernel_line(weak.fn, "# the number")


def test_numpy_and_python_64_bit_scalars_are_64_bit_parameters():
    @metile.kernel
    def put(Out, v):
        metile.store(Out + metile.arange(0, 2), v + metile.zeros((2,), metile.int8))

    out = np.zeros(2, np.int64)
    for v, dtype in ((np.int64(5), I64), (np.uint64(2**64 - 1), U64), (2**40, I64), (5, DType.I32)):
        assert put.trace(out, v).params[1].type == TileType(dtype)
        put[(1,)](out, v)
        metile.synchronize()
        assert (out.view(np.uint64 if dtype is U64 else np.int64) == v).all()
    assert stand_in(parse_arg("n=i64:7")) == np.int64(7) and type(stand_in(parse_arg("n=u64"))) is np.uint64


def test_64_bit_constants_print_parse_and_verify():
    @metile.kernel
    def consts(Out):
        r = metile.arange(0, 3)
        lowest = metile.full((3,), -(2**63))
        metile.store(Out + r, metile.where(r == 0, lowest, metile.where(r == 1, 2**63 - 1, -1)))

    out = np.zeros(3, np.int64)
    k = consts.trace(out)
    text = pretty(k)
    assert "const -9223372036854775808 : i64" in text and "const 9223372036854775807 : i64" in text
    assert parse(text) == k and pretty(parse(text)) == text
    verify(k)
    consts[(1,)](out)
    metile.synchronize()
    assert list(out) == [-(2**63), 2**63 - 1, -1]
    msl = consts.compile(out).msl
    assert "(-9223372036854775807L - 1)" in msl and "9223372036854775807L" in msl


def test_the_verifier_refuses_a_constant_beyond_64_bits():
    with pytest.raises(metile.MetileError, match=r"constant 9223372036854775808 does not fit i64"):
        verify(parse("kernel @k(%X: ptr<i64, device>) stage tile {\n  %0 = const 9223372036854775808 : i64\n"
                     "  store %X, %0\n}\n"))


@pytest.mark.parametrize(("op", "a", "b", "dtype", "want"), [
    (BinOp.MUL, 2**62, 4, I64, 0), (BinOp.ADD, 2**63 - 1, 1, I64, -(2**63)), (BinOp.SUB, 0, 1, U64, 2**64 - 1),
    (BinOp.TRUNCDIV, -(2**63), -1, I64, -(2**63)), (BinOp.FLOORDIV, -7 * 2**40, 2**41, I64, -4),
    (BinOp.SHR, -(2**63), 63, I64, -1), (BinOp.SHR, 2**63, 63, U64, 1), (BinOp.SHL, 1, 63, I64, -(2**63)),
    (BinOp.MULHI, 2**63, 6, U64, 3), (BinOp.MULHI, -(2**62), 8, I64, -2)])
def test_constant_folding_wraps_in_64_bits(op, a, b, dtype, want):
    assert fold_binary(Binary(op, Const(a, dtype), Const(b, dtype))) == Const(want, dtype)


def test_an_integer_constant_converts_to_a_float_rounded_once():
    """2**60 + 2**36 + 1 is just above half-way between two f32 values: rounded once it goes up; through a double
    (whose 53 bits drop the 1 and land on the half-way point, ties to even) it would go down."""
    v = 2**60 + 2**36 + 1
    assert float(np.float32(float(v))) == 2**60  # the double rounding this avoids
    assert fold_cast(Cast(Const(v, I64), DType.F32)) == Const(float(2**60 + 2**37), DType.F32)
    assert to_float(-v, DType.F32) == -float(2**60 + 2**37) and to_float(2**64 - 1, DType.BF16) == 2.0**64
    assert to_float(65520, DType.F16) == 65536.0 and to_float(7, DType.F16) == 7.0


@pytest.mark.parametrize(("value", "dtype", "text"), [
    (5, I64, "5L"), (-5, I64, "-5L"), (-(2**63), I64, "(-9223372036854775807L - 1)"), (0, U64, "0UL"),
    (2**64 - 1, U64, "18446744073709551615UL")])
def test_msl_literals_of_64_bits(value, dtype, text):
    assert literal(value, dtype) == text


@metile.kernel
def reduce_both(X, Out, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(Out, metile.sum(x))
    metile.store(Out + 1, metile.max(x))
    metile.store(Out + 2, metile.min(x))


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_msl_passes_no_64_bit_value_to_a_simd_group_function(dtype):
    """Metal's `simd_*` functions take 8- to 32-bit values: every call the kernel makes goes through `mt_simd_*`
    helpers, whose own calls take 32-bit halves and pieces."""
    x, out = np.zeros(256, dtype), np.zeros(3, dtype)
    msl = reduce_both.compile(x, out, BLOCK=256).msl
    kernel = msl[msl.index("kernel void"):]
    calls = re.findall(r"\b(simd_\w+)\(", kernel)
    assert calls == [] and {"mt_simd_sum(", "mt_simd_max(", "mt_simd_min("} <= set(re.findall(r"mt_simd_\w+\(", msl))
    helpers = msl[:msl.index("kernel void")]
    args = re.findall(r"\bsimd_(?:sum|max|min)\(([^;]*)", helpers)
    assert len(args) == 5 and all(a.startswith(("uint(", "high")) for a in args), args


@metile.kernel
def misuse(X, A, WHAT: metile.constexpr):
    r = metile.arange(0, 8)
    x = metile.load(X + r[:, None] * 8 + r[None, :])
    if WHAT == "atomic":
        metile.atomic_add(X + r, 1)   # the atomic
    elif WHAT == "dot":
        metile.store(A + r[:, None] * 8 + r[None, :], metile.dot(x, x))   # the dot
    elif WHAT == "shift":
        metile.store(X + r, (x << 64)[0, :])   # the shift
    else:
        metile.store(A + r, x.to(metile.float32, bitcast=True)[0, :])   # the bitcast


@pytest.mark.parametrize(("what", "marker", "message"), [
    ("atomic", "# the atomic",
     "atomic_add works on i32, u32, f32, f16 and bf16 memory, not i64: Metal has no 64-bit atomic add"),
    ("dot", "# the dot", "dot has no i64 form: Metal's simdgroup matrices multiply 16- and 32-bit floats"),
    ("shift", "# the shift", r"the shift count 64 is out of range for i64 \(0 to 63\)"),
    ("bitcast", "# the bitcast", "both types need one width: i64 has 64 bits and f32 has 32")])
def test_what_64_bit_integers_cannot_do_is_refused_at_the_users_line(what, marker, message):
    x = np.zeros(64, np.int64)
    with pytest.raises(KernelTypeError, match=message) as info:
        misuse.trace(x, np.zeros(64, np.float32), WHAT=what)
    assert info.value.loc.line == kernel_line(misuse.fn, marker)


def test_u64_atomics_are_refused_too():
    with pytest.raises(KernelTypeError, match="not u64: Metal has no 64-bit atomic add"):
        misuse.trace(np.zeros(64, np.uint64), np.zeros(64, np.float32), WHAT="atomic")


@metile.kernel
def axpy(X, Y, a, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, a * metile.load(X + offs) + metile.load(Y + offs))


def test_64_bit_buffers_and_scalars_bind_on_the_metal_device(stub, make_device, monkeypatch):
    """On the Metal device (the stand-in shim, replaying the MSL on the CPU device): an i64 array is a `device
    long*`, a Python int beyond i32 a `constant long&` bound as its 8 bytes."""
    from metal_stub import cpu_device_executor

    kernel_module = importlib.import_module("metile.kernel")
    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(axpy.fn)
    x, y = np.arange(64, dtype=np.int64) - 32, np.full(64, 2**50, np.int64)
    a = 3 * 2**35
    k[(1,)](x, y, a, BLOCK=64)
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_array_equal(y, a * (np.arange(64) - 32) + 2**50)
    msl = k.compile(x, y, a, BLOCK=64).msl
    assert "device const long* X" in msl and "constant long& a" in msl


def test_the_lowerings_i32_indexes_widen_where_they_meet_a_64_bit_one():
    from metile.ir import Var
    from metile.rewrite import metal_ops as mo

    wide, narrow = Var("w", TileType(I64)), Var("n", TileType(DType.I32))
    assert mo.add(wide, mo.const(5)) == Binary(BinOp.ADD, wide, Const(5, I64))
    assert mo.mul(narrow, wide) == Binary(BinOp.MUL, Cast(narrow, I64), wide)
    assert mo.add(Var("u", TileType(U64)), mo.const(-1)).rhs == Const(2**64 - 1, U64)
    assert mo.div(wide, 4).type == TileType(I64) and mo.mod(wide, 4).type == TileType(I64)
    assert mo.add(narrow, mo.const(1)).type == TileType(DType.I32)
