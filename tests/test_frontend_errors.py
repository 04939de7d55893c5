"""The catalogue of user mistakes the frontend reports: each case checks the error class, the message
and the line (marked in the source with a `# E:<case>` comment) of the rendered diagnostic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import metile
from metile.frontend import errors as E
from metile.frontend.semantic import const
from metile.ir.types import DType

F32 = np.zeros(8, np.float32)
LINES = Path(__file__).read_text().splitlines()


def line_of(case: str) -> int:
    return next(i + 1 for i, text in enumerate(LINES) if text.rstrip().endswith(f"# E:{case}"))


def helper(x):
    return x


@metile.kernel
def k_lambda(X):
    f = lambda v: v  # noqa: E731  # E:lambda
    metile.store(X, f(1.0))


@metile.kernel
def k_try(X):
    try:  # E:try
        metile.store(X, 1.0)
    except Exception:
        pass


@metile.kernel
def k_with(X):
    with open("f"):  # E:with
        pass


@metile.kernel
def k_class(X):
    class A:  # E:class
        pass


@metile.kernel
def k_setcomp(X):
    v = {i for i in range(3)}  # E:setcomp
    metile.store(X, len(v) * 1.0)


@metile.kernel
def k_global(X):
    global LINES  # E:global


@metile.kernel
def k_unknown(X):
    metile.store(X, undefined_thing)  # noqa: F821  # E:unknown


@metile.kernel
def k_attr(X):
    metile.store(X, metile.no_such_function(1))  # E:attr


@metile.kernel
def k_call(X):
    metile.store(X, helper(1.0))  # E:call


@metile.kernel
def k_shape(X, BLOCK: metile.constexpr):
    a = metile.arange(0, BLOCK)
    b = metile.arange(0, 2 * BLOCK)
    metile.store(X + a, a + b)  # E:shape


@metile.kernel
def k_where_shape(X):
    a = metile.arange(0, 16)
    b = metile.arange(0, 32)
    metile.store(X + a, metile.where(a < 3, a, b))  # E:where_shape


@metile.kernel
def k_dot_shape(A):
    a = metile.tile_load(A, 0, 0, 16, (16, 8))
    b = metile.tile_load(A, 0, 0, 16, (16, 8))
    c = metile.dot(a, b)  # E:dot_shape
    metile.tile_store(A, 0, 0, 16, c, (16, 8))


@metile.kernel
def k_dot_1d(A):
    a = metile.arange(0, 16)
    metile.dot(a, a)  # E:dot_1d


@metile.kernel
def k_dot_acc(A):
    a = metile.tile_load(A, 0, 0, 16, (16, 16))
    acc = metile.zeros((8, 8))
    acc = metile.dot(a, a, acc)  # E:dot_acc


@metile.kernel
def k_bitand_float(X):
    x = metile.load(X)
    metile.store(X, x & 1)  # E:bitand_float


@metile.kernel
def k_shift_float(X):
    x = metile.load(X)
    metile.store(X, x << 1)  # E:shift_float


@metile.kernel
def k_where_cond(X):
    x = metile.load(X + metile.arange(0, 8))
    metile.store(X + metile.arange(0, 8), metile.where(x, x, 0.0))  # E:where_cond


@metile.kernel
def k_ptr_float(X):
    metile.store(X + 1.5, 1.0)  # E:ptr_float


@metile.kernel
def k_ptr_mul(X):
    metile.store(X * 2, 1.0)  # E:ptr_mul


@metile.kernel
def k_load_nonptr(X, n):
    metile.load(n)  # E:load_nonptr


@metile.kernel
def k_arange_runtime(X, n):
    metile.arange(0, n)  # E:arange_runtime


@metile.kernel
def k_range_runtime(X, n):
    for i in metile.load(X + metile.arange(0, 4)):  # E:range_runtime
        metile.store(X + i, 1.0)


@metile.kernel
def k_zeros_runtime(X, n):
    metile.zeros((n, 4))  # E:zeros_runtime


@metile.kernel
def k_tile_if(X):
    x = metile.load(X + metile.arange(0, 8))
    if x > 0.0:  # E:tile_if
        metile.store(X, 1.0)


@metile.kernel
def k_and(X, n):
    a = metile.arange(0, 8)
    m = (a < n) and (a > 1)  # E:and
    metile.store(X + a, 1.0, mask=m)


@metile.kernel
def k_ifexp(X, n):
    v = 1.0 if n > 3 else 2.0  # E:ifexp
    metile.store(X, v)


@metile.kernel
def k_scope(X, n):
    for i in metile.tile_range(0, n, 1):
        t = i * 2
    metile.store(X + t, 1.0)  # E:scope


@metile.kernel
def k_return(X):
    return 1  # E:return


@metile.kernel
def k_dtype(X):
    metile.store(X, metile.zeros((8, 8), dtype="f64"))  # E:dtype


@metile.kernel
def k_index(X):
    a = metile.arange(0, 8)
    metile.store(X, a[3])  # E:index


@metile.kernel
def k_program_id(X):
    metile.store(X, metile.program_id(3))  # E:program_id


@metile.kernel
def k_kwarg(X):
    metile.store(X, 1.0, masks=None)  # E:kwarg


@metile.kernel
def k_assert(X, BLOCK: metile.constexpr):
    assert BLOCK % 32 == 0, "BLOCK must be a multiple of 32"  # E:assert


@metile.kernel
def k_shared_loop(X, n):
    for _i in metile.tile_range(0, n, 1):
        s = metile.shared(32)  # E:shared_loop
        metile.store(s, 1.0)


@metile.kernel
def k_carry_shape(X, n):
    acc = metile.zeros((8, 8))
    for _i in metile.tile_range(0, n, 1):
        acc = acc + metile.arange(0, 16)  # E:carry_shape


@metile.kernel
def k_args(X, n, BLOCK: metile.constexpr):  # E:args
    metile.store(X + n, 1.0)


@metile.kernel
def k_half_overflow(X):
    x = metile.load(X + metile.arange(0, 16))
    metile.store(X + metile.arange(0, 16), metile.where(x > 0.0, x, -3.0e38))  # E:half_overflow


@metile.kernel
def k_missing(X):
    metile.store(X + metile.arange(0, 16), mask=metile.arange(0, 16) < 8)  # E:missing


CASES = [
    ("lambda", k_lambda, (F32,), {}, E.UnsupportedSyntaxError, "lambda expressions are not supported"),
    ("try", k_try, (F32,), {}, E.UnsupportedSyntaxError, "try statements are not supported"),
    ("with", k_with, (F32,), {}, E.UnsupportedSyntaxError, "except `with metile.simdgroup_role"),
    ("class", k_class, (F32,), {}, E.UnsupportedSyntaxError, "class definitions are not supported"),
    ("setcomp", k_setcomp, (F32,), {}, E.UnsupportedSyntaxError, "set comprehensions are not supported"),
    ("global", k_global, (F32,), {}, E.UnsupportedSyntaxError, "global statements are not supported"),
    ("unknown", k_unknown, (F32,), {}, E.UndefinedNameError, "name 'undefined_thing' is not defined"),
    ("attr", k_attr, (F32,), {}, E.UndefinedNameError, "'metile' has no attribute 'no_such_function'"),
    ("call", k_call, (F32,), {}, E.UnsupportedCallError, "cannot call 'helper' inside a @metile.kernel"),
    ("shape", k_shape, (F32,), {"BLOCK": 16}, E.ShapeMismatchError, r"`\+`: shapes \[16\] and \[32\] do not"),
    ("where_shape", k_where_shape, (F32,), {}, E.ShapeMismatchError, r"where: shapes \[16\] and \[32\]"),
    ("dot_shape", k_dot_shape, (F32,), {}, E.ShapeMismatchError, r"inner dimensions differ: \[16, 8\] x \[16, 8\]"),
    ("dot_1d", k_dot_1d, (F32,), {}, E.ShapeMismatchError, "dot: 'a' must be a 2-D tile"),
    ("dot_acc", k_dot_acc, (F32,), {}, E.ShapeMismatchError, r"accumulator has shape \[8, 8\]"),
    ("bitand_float", k_bitand_float, (F32,), {}, E.KernelTypeError, "`&` needs integer or bool operands, not f32"),
    ("shift_float", k_shift_float, (F32,), {}, E.KernelTypeError, "`<<` needs integer operands, not f32"),
    ("where_cond", k_where_cond, (F32,), {}, E.KernelTypeError, "where: the condition must be bool"),
    ("ptr_float", k_ptr_float, (F32,), {}, E.KernelTypeError, "pointer offsets must be integers, not f32"),
    ("ptr_mul", k_ptr_mul, (F32,), {}, E.KernelTypeError, r"`\*` is not defined on pointers"),
    ("load_nonptr", k_load_nonptr, (F32, 3), {}, E.KernelTypeError, "load needs a pointer"),
    ("arange_runtime", k_arange_runtime, (F32, 3), {}, E.ConstexprRequiredError,
     "the stop of arange must be a compile-time int"),
    ("range_runtime", k_range_runtime, (F32, 3), {}, E.ConstexprRequiredError, r"use metile.tile_range"),
    ("zeros_runtime", k_zeros_runtime, (F32, 3), {}, E.ConstexprRequiredError, "the shape of zeros dimension"),
    ("tile_if", k_tile_if, (F32,), {}, E.RuntimeConditionError, r"use metile.where\(cond, a, b\)"),
    ("and", k_and, (F32, 3), {}, E.RuntimeConditionError, "combine masks element by element with `&`"),
    ("ifexp", k_ifexp, (F32, 3), {}, E.RuntimeConditionError, "use metile.where"),
    ("scope", k_scope, (F32, 3), {}, E.UndefinedNameError, "only assigned inside the tile_range loop"),
    ("return", k_return, (F32,), {}, E.UnsupportedSyntaxError, "cannot return a value"),
    ("dtype", k_dtype, (F32,), {}, E.KernelTypeError, "unknown dtype 'f64'"),
    ("index", k_index, (F32,), {}, E.UnsupportedSyntaxError, "element indexing is not supported"),
    ("program_id", k_program_id, (F32,), {}, E.KernelArgumentError, "program_id axis must be 0, 1 or 2, not 3"),
    ("kwarg", k_kwarg, (F32,), {}, E.KernelArgumentError, "unexpected keyword argument 'masks'"),
    ("missing", k_missing, (F32,), {}, E.KernelArgumentError, "missing a required argument: 'value'"),
    ("assert", k_assert, (F32,), {"BLOCK": 48}, E.CompileTimeAssertionError, "BLOCK must be a multiple of 32"),
    ("shared_loop", k_shared_loop, (F32, 3), {}, E.UnsupportedSyntaxError, "top level of the kernel"),
    ("carry_shape", k_carry_shape, (F32, 3), {}, E.ShapeMismatchError, r"`\+`: shapes \[8, 8\] and \[16\]"),
    ("args", k_args, (F32,), {"BLOCK": 4}, E.KernelArgumentError, "missing the runtime argument 'n'"),
    ("half_overflow", k_half_overflow, (np.zeros(16, np.float16),), {}, E.KernelTypeError,
     r"the constant -3e\+38 is beyond the range of f16 \(largest finite value 65504\): it would become -inf"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error(case):
    name, kern, args, kwargs, cls, message = case
    with pytest.raises(cls, match=message) as info:
        kern.trace(*args, **kwargs)
    err = info.value
    assert isinstance(err, metile.MetileError)
    assert err.loc is not None and err.loc.line == line_of(name), str(err)
    text = str(err)
    assert text.startswith(f"{err.loc.file}:{err.loc.line}:{err.loc.col + 1}: error: ")
    assert f"# E:{name}" in text and "^" in text  # the source line and the caret


ARG_CASES = [
    ((np.zeros(4, np.float64), 1), {"BLOCK": 4}, "float64 array: Metal has no 64-bit floats"),
    ((np.zeros(4, np.complex64), 1), {"BLOCK": 4}, "complex64 array: Metal cannot hold it"),
    ((F32, "x"), {"BLOCK": 4}, "must be a numpy array, a metile.Buffer, an int or a float, not str"),
    ((F32, 1 << 64), {"BLOCK": 4}, "does not fit a 64-bit integer"),
    ((F32, -(1 << 63) - 1), {"BLOCK": 4}, "does not fit a 64-bit integer"),
    ((F32, 1), {}, "missing constexpr 'BLOCK'"),
    ((F32, 1, 2, 3), {"BLOCK": 4}, "takes 2 runtime arguments but 4 were given"),
]


@pytest.mark.parametrize("args,kwargs,message", ARG_CASES)
def test_argument_errors(args, kwargs, message):
    with pytest.raises(E.KernelArgumentError, match=message) as info:
        k_args.trace(*args, **kwargs)
    assert info.value.loc.line in (line_of("args"), line_of("args"))


@pytest.mark.parametrize("grid,message", [((0,), "empty"), ((1, 2, 3, 4), "1, 2 or 3 dimensions"),
                                          (lambda meta: (0,), "empty"), (lambda meta: meta["nope"], "KeyError"),
                                          ((1.5,), "must be ints")])
def test_grid_errors(grid, message):
    with pytest.raises(E.GridError, match=message):
        k_args[grid](F32, 1, BLOCK=4)


def test_argument_errors_come_before_grid_errors():
    with pytest.raises(E.KernelArgumentError):
        k_args[(0,)](np.zeros(4, np.float64), 1, BLOCK=4)


@metile.kernel
def k_fill(X, s, BLOCK: metile.constexpr):
    metile.store(X + metile.arange(0, BLOCK), s)


@pytest.mark.parametrize(("fits", "beyond", "message"), [
    (5, 1 << 64, "does not fit a 64-bit integer"),
    (np.int32(5), -(1 << 63) - 1, "does not fit a 64-bit integer"),
    (2.5, 1e39, "beyond the range of a 32-bit float"),
    (np.float64(2.5), np.float64(-1e39), "beyond the range of a 32-bit float")])
def test_scalars_out_of_range_are_refused_on_every_launch(fits, beyond, message):
    """A scalar of a type wider than Metal's (a Python int beyond 64 bits, a Python or numpy float64) is checked on
    every launch, also once a launch with a value that fits has cached the kernel; infinities stay allowed."""
    x = np.zeros(4, np.int32 if isinstance(fits, (int, np.integer)) else np.float32)
    k_fill[(1,)](x, fits, BLOCK=4)
    assert (x == fits).all()
    with pytest.raises(E.KernelArgumentError, match=message):
        k_fill[(1,)](x, beyond, BLOCK=4)
    assert (x == fits).all()
    if isinstance(fits, float):
        k_fill[(1,)](x, float("-inf"), BLOCK=4)
        assert (x == -np.inf).all()


@pytest.mark.parametrize(("fits", "beyond", "dtype"), [
    (5, 2**32 + 5, "i64"), (-7, -(2**40) - 3, "i64"), (-3, 2**64 - 1, "u64")])
def test_integer_arguments_beyond_i32_get_a_64_bit_parameter_on_every_launch(fits, beyond, dtype):
    """A Python int that i32 cannot hold is an i64 parameter (u64 from 2**63), also once a launch with a small
    value has cached the i32 kernel: its value is never cut to 32 bits."""
    x = np.zeros(4, np.uint64 if dtype == "u64" else np.int64)
    k_fill[(1,)](x, fits, BLOCK=4)
    assert (x == np.array(fits).astype(x.dtype)).all()
    assert k_fill.trace(x, fits, BLOCK=4).params[1].type.dtype is DType.I32
    k_fill[(1,)](x, beyond, BLOCK=4)
    assert (x == beyond).all()
    assert k_fill.trace(x, beyond, BLOCK=4).params[1].type.dtype is DType(dtype)


def test_a_kernel_without_readable_source_is_refused_by_name():
    scope: dict = {"metile": metile}
    exec("def typed_in(X):\n    metile.store(X, 1.0)\n", scope)  # no file to read the source from
    k = metile.kernel(scope["typed_in"])
    with pytest.raises(E.KernelSourceError, match=r"cannot read the source of kernel 'typed_in'.*\.py file"):
        k.compile(F32)


_LIMITS = {DType.F16: 65520.0, DType.F32: 3.4028235677973366e38, DType.BF16: 3.3961775292304453e38}
"""Roughly where each float type overflows; the test draws around it and asks numpy where the edge is."""


def _rounds_to_infinity(v: float, dtype: DType) -> bool:
    """What the literal metile writes for `v` gives: f16 rounded once from the Python float, f32, and bf16
    through an f32 literal."""
    with np.errstate(over="ignore"):
        if dtype is DType.F16:
            return bool(np.isinf(np.float16(v)))
        if dtype is DType.F32:
            return bool(np.isinf(np.float32(v)))
        return bool(np.isinf(np.float32(v).astype(pytest.importorskip("ml_dtypes").bfloat16)))


@pytest.mark.parametrize("dtype", [DType.F16, DType.F32, DType.BF16])
@settings(max_examples=300, deadline=None)
@given(scale=st.one_of(st.floats(0.5, 1.5), st.floats(1 - 1e-6, 1 + 1e-6),
                       st.sampled_from([1.0, float(np.nextafter(1.0, 0.0))])), negative=st.booleans())
def test_float_constants_are_refused_exactly_when_they_would_round_to_infinity(dtype, scale, negative):
    v = _LIMITS[dtype] * scale * (-1 if negative else 1)
    if _rounds_to_infinity(v, dtype):
        with pytest.raises(E.KernelTypeError, match=f"beyond the range of {dtype}"):
            const(v, dtype, None)
    else:
        assert const(v, dtype, None).value == v


@pytest.mark.parametrize(("dtype", "largest"), [(DType.F16, 65504.0), (DType.F32, float(np.finfo(np.float32).max))])
def test_the_largest_finite_constant_is_accepted_and_infinities_stay_allowed(dtype, largest):
    for v in (largest, -largest, float("inf"), float("-inf")):
        assert const(v, dtype, None).value == v
    with pytest.raises(E.KernelTypeError, match="it would become -inf"):
        const(-2 * largest, dtype, None)
