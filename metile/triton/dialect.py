"""The dialect of `@triton.jit` kernels: Triton's rules for metile's tracer (`metile.frontend.dialect.Dialect`).

- Operators follow `metile.triton.semantic` (Triton's promotion, weak Python numbers, C's division).
- The functions of `triton.language` (and libdevice's) dispatch to `impl_memory`, `impl_tiles` and `impl_math`,
  their arguments bound by their Triton signatures; the names metile does not compile yet raise
  `NotSupportedYetError` at the call (`REFUSED` says why for each).
- Traced values have Triton's attributes: `.dtype` is a `tl.dtype` (a `tl.pointer_type` for pointers), `.shape`,
  `.type`, `.numel`, `.T`, and Triton's tensor methods (`x.to(...)`, `x.sum(axis)`, `x.exp()`...).
- `x is None` (`is`, `is not`) compares by Python identity, traced values included (a tensor is not None).
- An assignment turns a Python number into a traced value of its Triton type (`semantic.assigned`), as Triton's code
  generator does; a name annotated `tl.constexpr` keeps it.
- Every `for` over `range` or `tl.range` is a loop on the device, its index a traced i32; `tl.static_range` unrolls.
- A launch types a Python bool as int1, takes `None`, `tl.constexpr` values, dtypes and `@triton.jit` functions given
  to runtime parameters as compile-time values, and reads an integer argument equal to 1 as the Python number 1
  (Triton specialises it to a constexpr); `metile.triton.jit` adds the inlining of `@triton.jit` helpers.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import math

from metile.frontend.device_debug import device_assert, device_print
from metile.frontend.dialect import Dialect
from metile.frontend.errors import KernelArgumentError, KernelTypeError
from metile.frontend.exprs import Method
from metile.frontend.specialize import arg_type as metile_arg_type
from metile.ir.errors import Loc
from metile.ir.types import DType, PtrType, TileType
from metile.ir.values import Value
from metile.triton import semantic as ts
from metile.triton.errors import NotSupportedYetError, not_yet
from metile.triton.host_descriptors import host_descriptor
from metile.triton.impl_blocks import BLOCKS
from metile.triton.impl_combine import COMBINE
from metile.triton.impl_math import MATH, libdevice
from metile.triton.impl_memory import MEMORY
from metile.triton.impl_tiles import TILES, trans
from metile.triton.language import core as C
from metile.triton.language import math as M
from metile.triton.language import random as R
from metile.triton.language.extra.libdevice import FUNCTIONS as LIBDEVICE
from metile.triton.language.types import block_type, constexpr, dtype, pointer_type, tensor, triton_dtype

REFUSED = {
    C.dot_scaled: "scaled (microscaling) products",
    C.inline_asm_elementwise: "inline assembly (PTX does not run on Apple GPUs)",
    R.philox: "Philox on four counters of your own (tl.randint4x gives Triton's numbers)", R.philox_impl: "Philox on "
    "four counters of your own (tl.randint4x gives Triton's numbers)", C.tuple: "Triton's tuple values (use Python "
    "tuples)", C.slice: "Triton's tuple values (use Python tuples)", C.async_task: "warp specialization",
}


def _type_object(cls):
    """A Triton type built in a kernel (`tl.pointer_type(tl.float16)`): a compile-time value, as on the host."""
    def impl(tr, loc, *args):
        for a in args:
            if isinstance(a, Value):
                raise KernelTypeError(f"tl.{cls.__name__}() takes compile-time arguments", loc)
        return cls(*args)
    return impl


def _refused(fn, why: str):
    def impl(tr, loc, *args):
        raise not_yet(f"tl.{fn.__name__}", loc, why)
    return impl


def _builtin_extreme(name: str):
    def impl(tr, loc, x, y, propagate_nan):
        return TILES[C.maximum if name == "max" else C.minimum](tr, loc, x, y, propagate_nan)
    return impl


def _isinstance(tr, loc, obj, classinfo):
    """`isinstance(x, cls)` while tracing, as Triton's code generator answers it: a traced value is a `tl.tensor`
    (and nothing else of Triton's), a block pointer or descriptor is what metile built it as."""
    classes = classinfo if isinstance(classinfo, tuple) else (classinfo,)
    if isinstance(obj, Value):
        return any(c is tensor for c in classes)
    return isinstance(obj, classinfo)


def _print(tr, loc, values, sep, end, file, flush):
    """Python's `print` in a kernel is Triton's `device_print`: the first value is the prefix."""
    if not values:
        raise KernelTypeError("print() in a kernel needs a prefix string first, as tl.device_print does", loc)
    device_print(tr, loc, values[0], values[1:], False, "print")


def _device_print(tr, loc, prefix, args, hex):  # noqa: A002 - Triton's parameter name
    device_print(tr, loc, prefix, args, hex, "tl.device_print")


def _device_assert(tr, loc, cond, msg):
    device_assert(tr, loc, cond, msg, None, "tl.device_assert")


CALLS: dict = {**MEMORY, **TILES, **MATH, **BLOCKS, **COMBINE,
               **{f: _refused(f, why) for f, why in REFUSED.items()},
               **{f: libdevice(name) for name, f in LIBDEVICE.items()},
               **{cls: _type_object(cls) for cls in (dtype, pointer_type, block_type)},
               builtins.min: _builtin_extreme("min"), builtins.max: _builtin_extreme("max"), builtins.print: _print,
               builtins.isinstance: _isinstance, C.device_print: _device_print, C.device_assert: _device_assert}
"""Per function object of `triton.language` (and libdevice), its implementation in a kernel. Python's `min` and `max`
of two values are `tl.minimum` and `tl.maximum`, as Triton's code generator reads them (on constexprs too: the result
is a traced value), and `print` is Triton's `device_print`."""
_SIGNATURES = {builtins.min: C.minimum, builtins.max: C.maximum, builtins.print: C.static_print}


@functools.cache
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def bind(fn, args: list, kwargs: dict, loc: Loc) -> list:
    """The arguments of a call to the Triton function `fn` in parameter order (defaults filled in, `*args` as a
    tuple), or a `KernelArgumentError` naming the function."""
    try:
        bound = _signature(_SIGNATURES.get(fn, fn)).bind(*args, **kwargs)
    except TypeError as e:
        raise KernelArgumentError(f"tl.{getattr(fn, '__name__', fn)}(): {e}", loc) from None
    bound.apply_defaults()
    return list(bound.arguments.values())


_METHODS = {
    "to": C.cast, "cast": C.cast, "broadcast_to": C.broadcast_to, "trans": C.trans, "permute": C.permute,
    "split": C.split, "view": C.view, "reshape": C.reshape, "expand_dims": C.expand_dims, "store": C.store,
    "advance": C.advance, "atomic_cas": C.atomic_cas, "atomic_xchg": C.atomic_xchg, "atomic_add": C.atomic_add,
    "atomic_max": C.atomic_max, "atomic_min": C.atomic_min, "atomic_and": C.atomic_and, "atomic_or": C.atomic_or,
    "atomic_xor": C.atomic_xor, "reduce": C.reduce, "associative_scan": C.associative_scan,
    "histogram": C.histogram, "gather": C.gather, "cdiv": C.cdiv, "sigmoid": C.sigmoid, "softmax": C.softmax,
    "ravel": C.ravel, "max": C.max, "argmax": C.argmax, "min": C.min, "argmin": C.argmin, "sum": C.sum,
    "xor_sum": C.xor_sum, "reduce_or": C.reduce_or, "cumsum": C.cumsum, "cumprod": C.cumprod, "sort": C.sort,
    "flip": C.flip, "exp": M.exp, "exp2": M.exp2, "log": M.log, "log2": M.log2, "cos": M.cos, "sin": M.sin,
    "sqrt": M.sqrt, "sqrt_rn": M.sqrt_rn, "rsqrt": M.rsqrt, "abs": M.abs, "erf": M.erf, "floor": M.floor,
    "ceil": M.ceil,
}
"""Triton's tensor methods, as the functions they call with the tensor first (`x.sum(0)` is `tl.sum(x, 0)`)."""
_NOT_YET_MEMBERS = ("logical_and", "logical_or", "item", "handle")


def _type(t) -> dtype:
    element = triton_dtype(t.dtype)
    if isinstance(t, PtrType):
        element = pointer_type(element)
    return block_type(element, t.shape) if t.shape else element


def attribute(tr, value: Value, attr: str, loc: Loc):
    """`value.attr` of a traced value in a Triton kernel."""
    t = value.type
    if attr == "dtype":
        return pointer_type(triton_dtype(t.dtype)) if isinstance(t, PtrType) else triton_dtype(t.dtype)
    if attr == "shape":
        return tuple(t.shape)
    if attr == "type":
        return _type(t)
    if attr == "numel":
        return math.prod(t.shape)
    if attr == "T":
        return trans(tr, loc, value, ())
    fn = _METHODS.get(attr)
    if fn is not None:
        return Method(fn, value)
    if attr in _NOT_YET_MEMBERS:
        raise not_yet(f"tensor.{attr}", loc)
    raise KernelTypeError(f"Triton tensors have no attribute '{attr}'", loc)


def _range_loop(tr, loc: Loc, args: list, kwargs: dict) -> tuple:
    """`tl.range(start, end, step, num_stages=...)` as the bounds of a runtime loop (its other options, which tune
    NVIDIA's pipelining, are accepted)."""
    a = bind(C.range, args, kwargs, loc)
    arg1, arg2, step, num_stages = a[:4]
    start, stop = (0, arg1) if arg2 is None else (arg1, arg2)
    if isinstance(num_stages, int) and not isinstance(num_stages, bool) and num_stages < 1:
        num_stages = None   # Triton's 0 (or 1): no pipelining
    return start, stop, 1 if step is None else step, num_stages


def unsupported(what: str, loc: Loc | None) -> NotSupportedYetError:
    return NotSupportedYetError(f"{what} in a @triton.jit kernel are not supported by metile yet", loc)


def _int1(tr, v: Value, loc: Loc) -> Value:
    """An operand of `and`, `or` or `not` as Triton takes it: a bitcast to int1, so only int1 values pass."""
    t = v.type
    if isinstance(t, PtrType) or t.dtype is not DType.BOOL:
        bits = 64 if isinstance(t, PtrType) else t.dtype.bits
        raise KernelTypeError(f"Cannot bitcast data-type of size {bits} to data-type of size 1: `and`, `or` and "
                              "`not` take int1 values (comparisons) in Triton; compare with 0 first", loc)
    return v


def boolop(tr, word: str, operands: list, loc: Loc):
    """Triton's `and`/`or`: every operand is evaluated in order; a compile-time one that decides the result ends the
    evaluation there and is the result, one that does not is dropped; the traced ones (int1, scalars or tensors)
    are combined with `logical_and`/`logical_or`, without short-circuit at run time."""
    traced: list[Value] = []
    value = None
    for operand in operands:
        value = tr.eval(operand)
        if isinstance(value, Value):
            traced.append(value)
        elif (word == "and") != bool(value):
            return value
    if not traced:
        return value
    while len(traced) >= 2:
        rhs, lhs = traced.pop(), traced.pop()
        traced.append(ts.binary(word, _int1(tr, lhs, loc), _int1(tr, rhs, loc), loc))
    return traced[0]


def logical_not(tr, x, node):
    """Triton's `not`: Python's on compile-time values, the inverse of an int1 value (scalar or tensor)."""
    if not isinstance(x, Value):
        return not x
    loc = tr.loc(node)
    return ts.unary("invert", _int1(tr, x, loc), loc)


def arg_type(spec, value):
    """A launch's argument types: a Python bool is an int1 scalar (Triton's "u1"), the rest as metile types them."""
    if value.__class__ is bool:
        return TileType(DType.BOOL)
    return metile_arg_type(spec, value)


def static_arg(value) -> bool:
    """Arguments a runtime parameter takes as compile-time values (Triton makes them constexprs)."""
    return value is None or isinstance(value, (constexpr, dtype))


TRITON = Dialect(name="@triton.jit kernel", binary=ts.binary, compare=ts.compare, unary=ts.unary, calls=CALLS,
                 attribute=attribute, bind=bind, loops={C.range: _range_loop}, runtime_range=True,
                 assigned=ts.assigned, unsupported=unsupported, boolop=boolop, logical_not=logical_not,
                 traced_identity=True,
                 arg_type=arg_type,
                 static_arg=static_arg, one_as_number=True, composite=host_descriptor)
"""Triton's rules, without the inlining of `@triton.jit` helpers (added by `metile.triton.jit`)."""

__all__ = ["CALLS", "REFUSED", "TRITON", "attribute", "bind"]
