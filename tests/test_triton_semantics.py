"""Triton's semantics under `triton.language` (metile's Triton front end): binding by position, C's division on
traced integers and Python's on compile-time values, Triton's promotion with weak Python numbers, assignments that
make numbers traced, runtime `range` loops, typed scalar arguments and casts, and Triton's integer
specialisation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelArgumentError, KernelTypeError

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def middle_constexpr(Out, A: tl.constexpr, B):
    tl.store(Out, A * 10 + B)


@metile.kernel
def metile_middle_constexpr(Out, A: metile.constexpr, B):
    metile.store(Out, A * 10 + B)


def test_positional_arguments_bind_in_declaration_order_constexprs_included():
    out = np.zeros(1, np.int32)
    middle_constexpr[(1,)](out, 1, 2)
    assert out[0] == 12                      # A=1, B=2, as Triton binds them
    middle_constexpr[(1,)](out, B=3, A=4)
    assert out[0] == 43
    metile_middle_constexpr[(1,)](out, 1, 2)
    assert out[0] == 21                      # metile's own rule: runtime parameters first, then constexprs


def test_binding_mistakes_are_named():
    out = np.zeros(1, np.int32)
    with pytest.raises(KernelArgumentError, match="takes 3 arguments but 4 were given"):
        middle_constexpr[(1,)](out, 1, 2, 3)
    with pytest.raises(KernelArgumentError, match="missing the argument 'B'"):
        middle_constexpr[(1,)](out, 1)
    with pytest.raises(KernelArgumentError, match="multiple values for argument 'A'"):
        middle_constexpr[(1,)](out, 1, 2, A=1)
    with pytest.raises(KernelArgumentError, match="did you mean 'B'"):
        middle_constexpr[(1,)](out, 1, 2, BB=5)


@triton.jit
def divide(A, B, Q, R, BLOCK: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(A + offs)
    b = tl.load(B + offs)
    tl.store(Q + offs, a // b)
    tl.store(R + offs, a % b)
    tl.store(Q + BLOCK + offs, tl.zeros([BLOCK], tl.int32) + C // 2)   # compile-time values: Python's
    tl.store(R + BLOCK + offs, tl.zeros([BLOCK], tl.int32) + C % 2)


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_integer_division_of_traced_values_rounds_toward_zero(dtype):
    a = np.array([-7, 7, -7, 7, 0, -1, 9, -9], dtype)
    b = np.array([2, -2, -2, 2, 3, 4, -4, 4], dtype)
    q, r = np.zeros(16, dtype), np.zeros(16, dtype)
    divide[(1,)](a, b, q, r, 8, -7)
    assert (q[:8] == [-3, -3, 3, 3, 0, 0, -2, -2]).all()      # C: -7 // 2 == -3
    assert (r[:8] == np.fmod(a, b)).all()                      # the remainder takes the dividend's sign: -1
    assert (q[8:] == -4).all() and (r[8:] == 1).all()          # C = -7 is a constexpr: Python's -4 and 1


def test_lowest_int32_divided_by_minus_one_wraps():
    a = np.array([-2**31, 5, -2**31, 6], np.int32)
    b = np.array([-1, -1, 1, 4], np.int32)
    q, r = np.zeros(8, np.int32), np.zeros(8, np.int32)
    divide[(1,)](a, b, q, r, 4, 0)
    assert list(q[:4]) == [-2**31, -5, -2**31, 1] and list(r[:4]) == [0, 0, 0, 2]


@triton.jit
def unsigned_divide(A, B, Q, R, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b = tl.load(A + offs), tl.load(B + offs)
    tl.store(Q + offs, a // b)
    tl.store(R + offs, a % b)


def test_unsigned_division():
    a = np.array([4000000000, 7, 9, 255], np.uint32)
    b = np.array([3, 2, 10, 16], np.uint32)
    q, r = np.zeros(4, np.uint32), np.zeros(4, np.uint32)
    unsigned_divide[(1,)](a, b, q, r, 4)
    assert (q == a // b).all() and (r == a % b).all()


@triton.jit
def assigned_numbers(Out):
    a = -7                       # an assignment makes the number a traced i32, as in Triton
    b: tl.constexpr = -7         # unless the name is annotated constexpr
    tl.store(Out, a // 2)
    tl.store(Out + 1, a % 2)
    tl.store(Out + 2, b // 2)
    tl.store(Out + 3, -7 // 2)   # two Python numbers: Python's
    s = 0
    for i in range(-3, 1):       # a runtime loop: i is a traced i32
        s += i // 2
    tl.store(Out + 4, s)
    t: tl.constexpr = 0
    u = t
    for j in tl.static_range(-3, 1):   # unrolled: j is a constexpr
        u += j // 2
    tl.store(Out + 5, u)


def test_assignments_loops_and_compile_time_values():
    out = np.zeros(6, np.int32)
    assigned_numbers[(1,)](out)
    assert list(out) == [-3, -1, -4, -4, -2, -4]


@triton.jit
def floats(X, Y, Out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x, y = tl.load(X + offs), tl.load(Y + offs)
    tl.static_assert((x / 2).dtype == tl.float32)          # `/` of f16 computes in f32
    tl.static_assert((x * 2.0).dtype == tl.float16)        # a weak Python float keeps f16
    tl.store(Out + offs, (x % y).to(tl.float32))           # fmod: the dividend's sign
    tl.store(Out + BLOCK + offs, tl.where(x < 0.1, 1.0, 0.0))   # 0.1 compares as an f32, not rounded to f16


def test_float_remainder_and_comparisons_with_python_numbers():
    x = np.array([-7.5, 7.5, 0.0999755859375, 5.0], np.float16)
    y = np.array([2.0, -2.0, 1.0, 3.0], np.float16)
    out = np.zeros(8, np.float32)
    floats[(1,)](x, y, out, 4)
    assert list(out[:4]) == [-1.5, 1.5, np.float32(np.float16(0.0999755859375)), 2.0]
    assert list(out[4:]) == [1.0, 0.0, 1.0, 0.0]   # f16(0.1) < f32(0.1): true in Triton (false if 0.1 were f16)


def _probe_source(expr: str) -> str:
    """A module whose kernel `probe(A, B)` prints (while it is traced) the Triton dtype of `expr` of `a` and `b`, loaded
    from `A` and `B`."""
    return ("import metile.triton as triton\n"
            "import metile.triton.language as tl\n\n\n"
            "@triton.jit\n"
            "def probe(A, B):\n"
            "    offs = tl.arange(0, 4)\n"
            "    a = tl.load(A + offs)\n"
            "    b = tl.load(B + offs)\n"
            f"    tl.static_print(({expr}).dtype)\n")


PROMOTIONS = [
    ("a + b", "f16", "bf16", "fp16"), ("a + b", "bf16", "i32", "fp32"), ("a + b", "bf16", "bf16", "bf16"),
    ("a + b", "f16", "i32", "fp16"), ("a + b", "i8", "u8", "uint8"), ("a + b", "i16", "u8", "int16"),
    ("a + b", "u32", "i32", "uint32"), ("a * b", "i32", "f32", "fp32"), ("a / b", "i32", "i32", "fp32"),
    ("a / b", "bf16", "bf16", "fp32"), ("a + 1", "u8", "u8", "uint8"), ("a * 0.5", "i32", "i32", "fp32"),
    ("a * 2.0", "bf16", "bf16", "bf16"), ("(a > 0) + 1", "i8", "i8", "int32"), ("(a > 0) + True", "i8", "i8", "int1"),
    ("a & 1", "u16", "u16", "uint16"), ("tl.maximum(a, 0.0)", "f16", "f16", "fp32"),
    ("tl.maximum(a, b)", "bf16", "bf16", "fp32"), ("tl.where(a > 0, a, 1)", "i8", "i8", "int8"),
    ("tl.where(a > 0, 1, 2.0)", "i8", "i8", "fp32"), ("tl.sum(a > 0, axis=0)", "i8", "i8", "uint32"),
    ("tl.sum(a, axis=0)", "i16", "i16", "int32"), ("tl.max(a, axis=0)", "f16", "f16", "fp32"),
    ("tl.cumprod(a, axis=0)", "i8", "i8", "int8"),
]


@pytest.mark.parametrize("expr, da, db, expected", PROMOTIONS, ids=[f"{e} {a} {b}" for e, a, b, _ in PROMOTIONS])
def test_triton_promotion(expr, da, db, expected, tmp_path, capsys):
    import importlib.util

    path = tmp_path / "probe.py"
    path.write_text(_probe_source(expr))
    spec = importlib.util.spec_from_file_location("probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    host = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "i8": np.int8, "u8": np.uint8,
            "i16": np.int16, "u16": np.uint16, "i32": np.int32, "u32": np.uint32}
    capsys.readouterr()
    module.probe.kernel.trace(np.zeros(4, host[da]), np.zeros(4, host[db]))
    assert capsys.readouterr().out == f"{expected}\n"


@triton.jit
def bad_operator(X, Y, WHICH: tl.constexpr):
    offs = tl.arange(0, 4)
    x, y = tl.load(X + offs), tl.load(Y + offs)
    if WHICH == 0:
        z = x // y
    elif WHICH == 1:
        z = x ** 2
    else:
        z = x / y
    tl.store(X + offs, z)


def test_operators_triton_does_not_define_are_refused():
    f = np.zeros(4, np.float32)
    with pytest.raises(KernelTypeError, match="// takes integers"):
        bad_operator[(1,)](f, f, 0)
    with pytest.raises(KernelTypeError, match="no `\\*\\*`"):
        bad_operator[(1,)](f, f, 1)
    with pytest.raises(KernelTypeError, match="different signedness"):
        bad_operator[(1,)](np.zeros(4, np.int32), np.zeros(4, np.uint32), 2)


@triton.jit
def scalars(Out, x, n, flag, eps):
    pid = tl.program_id(0)
    tl.static_assert(eps.dtype == tl.float32 and n.dtype == tl.int32 and flag.dtype == tl.int1)
    tl.store(Out + pid, (eps.to(tl.float16) * 2).to(tl.float32) + pid.to(tl.float32) + n.to(tl.float32) + x)
    tl.store(Out + 2 + pid, tl.cast(2.7, tl.int32) + flag.to(tl.int32) + 0.0)
    tl.store(Out + 4 + pid, x.to(tl.int32, bitcast=True).to(tl.float32))


def test_scalar_arguments_are_typed_values():
    out = np.zeros(6, np.float32)
    scalars[(2,)](out, 1.5, 7, True, 0.25)
    assert list(out[:2]) == [9.0, 10.0]
    assert list(out[2:4]) == [3.0, 3.0]
    assert out[4] == np.float32(np.array([1.5], np.float32).view(np.int32)[0])


@triton.jit
def specialised(Out, n):
    tl.store(Out, -n // 2)


@triton.jit(do_not_specialize=["n"])
def not_specialised(Out, n):
    tl.store(Out, -n // 2)


def test_integer_specialisation_is_tritons():
    out = np.zeros(1, np.int32)
    specialised[(1,)](out, 1)       # Triton makes an argument equal to 1 a constexpr: Python's -1 // 2
    assert out[0] == -1
    not_specialised[(1,)](out, 1)   # a traced i32: C's -1 / 2
    assert out[0] == 0
    specialised[(1,)](out, 3)
    assert out[0] == -1
    multiple = specialised.kernel.trace(out, 32).params[1]
    plain = not_specialised.kernel.trace(out, 32).params[1]
    assert multiple.multiple == 16 and plain.multiple == 1


@triton.jit
def optional(Out, B, HAS_B: tl.constexpr):
    if B is None:
        tl.store(Out, 1.0)
    else:
        tl.store(Out, tl.load(B))


def test_none_arguments_are_compile_time():
    out = np.zeros(1, np.float32)
    optional[(1,)](out, None, False)
    assert out[0] == 1.0
    optional[(1,)](out, np.array([5.0], np.float32), True)
    assert out[0] == 5.0


@triton.jit
def bools(Out, A, B, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b = tl.load(A + offs) > 0, tl.load(B + offs) > 0
    tl.store(Out + offs, (a + b).to(tl.int32))       # int1 arithmetic wraps in one bit: True + True is False
    tl.store(Out + BLOCK + offs, (a * b).to(tl.int32))
    tl.store(Out + 2 * BLOCK + offs, (-a).to(tl.int32))


def test_int1_arithmetic_wraps_in_one_bit():
    a = np.array([1, 1, 0, 0], np.int32)
    b = np.array([1, 0, 1, 0], np.int32)
    out = np.zeros(12, np.int32)
    bools[(1,)](out, a, b, 4)
    assert list(out) == [0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0]


SCALE = tl.constexpr(3)


@triton.jit
def builtins_and_globals(X, Out):
    x = tl.load(X + tl.arange(0, 4))
    tl.static_assert(x.dtype is tl.float16 and X.dtype.element_ty == tl.float16)
    tl.static_assert(X.dtype == tl.pointer_type(tl.float16))
    small = min(SCALE, 2)             # Python's min is tl.minimum, on constexprs too: a traced i32
    tl.static_assert(small.dtype == tl.int32)
    tl.store(Out + tl.arange(0, 4), max(x, 0.5).to(tl.float32) * SCALE + small)


def test_python_min_max_are_tritons_and_globals_are_constexprs():
    x = np.array([-1.0, 0.25, 1.0, 2.0], np.float16)
    out = np.zeros(4, np.float32)
    builtins_and_globals[(1,)](x, out)
    assert list(out) == [3.5, 3.5, 5.0, 8.0]


@triton.jit
def prints(X):
    print("x", tl.load(X))


def test_print_is_device_print(capfd):
    prints[(1,)](np.full(1, 2.5, np.float32))
    assert capfd.readouterr().out == "pid (0, 0, 0) idx () x: 2.500000\n"
