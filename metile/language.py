"""The kernel language: the functions kernels call as `metile.<name>(...)`, and `metile.constexpr`.

These functions only mean something inside a `@metile.kernel` function, where the frontend
(`metile.frontend.builtins`) recognises them by identity and builds Tile IR; called as ordinary
Python each raises `OutsideKernelError`. The exceptions are `cdiv` and `next_power_of_2`, which
the host also uses to size grids (`kernel[(metile.cdiv(n, 256),)]`): on Python ints they compute
the answer anywhere.

Semantics where metile goes beyond the original meTile (`docs/language.md`, section 13; each builtin repeats its part):
- `load(ptr, mask, other)` takes Triton's `other=`: the value of masked-off elements, which are otherwise inactive.
- Reductions take `axis=None`: `None` reduces the whole tile to a scalar, an int reduces that axis.
- `//` and `%` on traced values follow Python (floor division, modulo with the divisor's sign).
- Mixed types promote as `metile.ir.types` documents, Python numbers are weak; unary minus works.
- `tile_swizzle` computes the remapped `(pid_m, pid_n)`, a bijection of the grid.
"""

from __future__ import annotations

import operator

from metile.frontend.errors import KernelArgumentError, OutsideKernelError


def _outside(name: str):
    raise OutsideKernelError(f"metile.{name}() can only be used inside a @metile.kernel function")


class constexpr:  # noqa: N801 - the public spelling is metile.constexpr
    """Marks a parameter as compile-time (`BLOCK: metile.constexpr`), or wraps a value.

    Arithmetic between two wrapped values gives a wrapped value; with a plain number, a plain number;
    comparisons give a `bool`. Inside a kernel wrapped values behave as their plain value.
    """

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"

    def __bool__(self) -> bool:
        return bool(self.value)

    def __index__(self) -> int:
        return operator.index(self.value)

    def __hash__(self) -> int:
        return hash(self.value)


def _lift(op):
    def binary(self, other):
        both = isinstance(other, constexpr)
        result = op(self.value, other.value if both else other)
        return constexpr(result) if both else result

    def reflected(self, other):
        return op(other, self.value)

    return binary, reflected


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift"):
    _fn = getattr(operator, _name + "_" if _name in ("and", "or") else _name)
    _b, _r = _lift(_fn)
    setattr(constexpr, f"__{_name}__", _b)
    setattr(constexpr, f"__r{_name}__", _r)
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(constexpr, f"__{_name}__", (lambda op: lambda self, other: op(
        self.value, other.value if isinstance(other, constexpr) else other))(getattr(operator, _name)))
constexpr.__neg__ = lambda self: constexpr(-self.value)


def _plain_int(name: str, value) -> int:
    v = value.value if isinstance(value, constexpr) else value
    if isinstance(v, bool) or not isinstance(v, int):
        raise KernelArgumentError(f"metile.{name}() outside a kernel takes Python ints, not {type(v).__name__}")
    return v


def cdiv(a, b):
    """`ceil(a / b)` for integers (the number of `b`-sized blocks covering `a`)."""
    x, y = _plain_int("cdiv", a), _plain_int("cdiv", b)
    if y == 0:
        raise KernelArgumentError("metile.cdiv: division by zero (the block size is 0)")
    result = -(-x // y)
    return constexpr(result) if isinstance(a, constexpr) and isinstance(b, constexpr) else result


def next_power_of_2(n):
    """The smallest power of two `>= n` (1 for `n <= 1`)."""
    x = _plain_int("next_power_of_2", n)
    result = 1 if x <= 1 else 1 << (x - 1).bit_length()
    return constexpr(result) if isinstance(n, constexpr) else result


def program_id(axis=0): _outside("program_id")
def arange(start, stop): _outside("arange")
def load(ptr, mask=None, other=None, cache_modifier="", eviction_policy="", volatile=False): _outside("load")
def store(ptr, value, mask=None, cache_modifier="", eviction_policy=""): _outside("store")
def tile_load(ptr, row_offset, col_offset, stride, shape, bounds=None): _outside("tile_load")
def tile_store(ptr, row_offset, col_offset, stride, value, shape, bounds=None): _outside("tile_store")
def zeros(shape, dtype="f32"): _outside("zeros")
def dot(a, b, acc=None, input_precision=None, allow_tf32=None, out_dtype=None): _outside("dot")
def tile_range(start, stop, step=1, num_stages=None): _outside("tile_range")
def exp(x): _outside("exp")
def log(x): _outside("log")
def sqrt(x): _outside("sqrt")
def abs(x): _outside("abs")  # noqa: A001 - the language's name
def tanh(x): _outside("tanh")
def where(cond, x, y): _outside("where")
def maximum(a, b): _outside("maximum")
def minimum(a, b): _outside("minimum")
def sum(x, axis=None, keep_dims=False, dtype=None): _outside("sum")  # noqa: A001
def max(x, axis=None, keep_dims=False): _outside("max")  # noqa: A001
def min(x, axis=None, keep_dims=False): _outside("min")  # noqa: A001
def thread_id(): _outside("thread_id")
def simd_lane_id(): _outside("simd_lane_id")
def simd_shuffle_xor(value, mask): _outside("simd_shuffle_xor")
def simd_broadcast(value, lane): _outside("simd_broadcast")
def simdgroup_role(role=0, num_roles=2, num_sgs=0): _outside("simdgroup_role")
def barrier(): _outside("barrier")
def shared(size, dtype="f32"): _outside("shared")
def tile_swizzle(pid_m, pid_n, pattern="morton", block_size=2): _outside("tile_swizzle")
def atomic_add(ptr, value, mask=None): _outside("atomic_add")
def atomic_max(ptr, value, mask=None): _outside("atomic_max")
def atomic_min(ptr, value, mask=None): _outside("atomic_min")
def atomic_and(ptr, value, mask=None): _outside("atomic_and")
def atomic_or(ptr, value, mask=None): _outside("atomic_or")
def atomic_xor(ptr, value, mask=None): _outside("atomic_xor")
def atomic_xchg(ptr, value, mask=None): _outside("atomic_xchg")
def atomic_cas(ptr, compare, value): _outside("atomic_cas")
def num_programs(axis=0): _outside("num_programs")
def cast(x, dtype, bitcast=False): _outside("cast")
def exp2(x): _outside("exp2")
def log2(x): _outside("log2")
def sin(x): _outside("sin")
def cos(x): _outside("cos")
def rsqrt(x): _outside("rsqrt")
def floor(x): _outside("floor")
def ceil(x): _outside("ceil")
def sigmoid(x): _outside("sigmoid")
def erf(x): _outside("erf")
def pow(x, y): _outside("pow")  # noqa: A001
def fma(a, b, c): _outside("fma")
def clamp(x, lo, hi): _outside("clamp")
def argmax(x, axis=None, keep_dims=False): _outside("argmax")
def argmin(x, axis=None, keep_dims=False): _outside("argmin")
def cumsum(x, axis=0, reverse=False, dtype=None): _outside("cumsum")
def cumprod(x, axis=0, reverse=False, dtype=None): _outside("cumprod")
def rand(seed, offsets, n_rounds=10): _outside("rand")
def randn(seed, offsets, n_rounds=10): _outside("randn")
def randint(seed, offsets, n_rounds=10): _outside("randint")
def randint4x(seed, offsets, n_rounds=10): _outside("randint4x")
def rand4x(seed, offsets, n_rounds=10): _outside("rand4x")
def randn4x(seed, offsets, n_rounds=10): _outside("randn4x")
def full(shape, value, dtype=None): _outside("full")
def trans(x, dims=None): _outside("trans")
def permute(x, dims): _outside("permute")
def reshape(x, shape, can_reorder=False): _outside("reshape")
def ravel(x): _outside("ravel")
def expand_dims(x, axis): _outside("expand_dims")
def broadcast_to(x, shape): _outside("broadcast_to")
def join(a, b): _outside("join")
def split(x): _outside("split")
def interleave(a, b): _outside("interleave")
def multiple_of(x, values): _outside("multiple_of")
def max_contiguous(x, values): _outside("max_contiguous")
def max_constancy(x, values): _outside("max_constancy")
def scalar(value, dtype=None): _outside("scalar")
def fast_exp(x): _outside("fast_exp")
def simd_sum(value): _outside("simd_sum")
def simd_max(value): _outside("simd_max")
def static_range(start, stop=None, step=1): _outside("static_range")
def reverse_bits(x): _outside("reverse_bits")
def reduce(x, axis, combine_fn, keep_dims=False): _outside("reduce")
def associative_scan(x, axis, combine_fn, reverse=False): _outside("associative_scan")
def gather(x, index, axis): _outside("gather")
def sort(x, dim=None, descending=False): _outside("sort")
def topk(x, k, dim=None, descending=True): _outside("topk")
def flip(x, dim=None): _outside("flip")
def histogram(x, num_bins, mask=None): _outside("histogram")
def device_print(prefix, *values, hex=False): _outside("device_print")  # noqa: A002 - Triton's name
def device_assert(cond, msg="", mask=None): _outside("device_assert")


# Element types, by the names kernels use (`x.to(metile.float16)`, `zeros(shape, dtype=metile.int8)`): each is the
# string metile spells the type with, so `x.dtype == metile.float16` holds for an f16 tile.
float32, float16, bfloat16 = "f32", "f16", "bf16"
int8, uint8, int16, uint16, int32, uint32 = "i8", "u8", "i16", "u16", "i32", "u32"
int64, uint64 = "i64", "u64"
int1 = bool_ = "bool"
float8_e4m3, float8_e5m2 = "f8e4m3", "f8e5m2"
float8e4nv, float8e5 = float8_e4m3, float8_e5m2  # Triton's names of the same two formats
DTYPE_NAMES = ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "uint64", "int1", "bool_", "float8_e4m3", "float8_e5m2", "float8e4nv", "float8e5")

LANGUAGE_NAMES = (
    "program_id", "arange", "cdiv", "next_power_of_2", "load", "store", "tile_load", "tile_store", "zeros",
    "dot", "tile_range", "exp", "log", "sqrt", "abs", "tanh", "where", "maximum", "minimum", "sum", "max",
    "min", "thread_id", "simd_lane_id", "simd_shuffle_xor", "simd_broadcast", "simdgroup_role", "barrier",
    "shared", "tile_swizzle", "atomic_add", "num_programs", "cast", "exp2", "log2", "sin", "cos", "rsqrt",
    "floor", "ceil", "sigmoid", "erf", "pow", "fma", "clamp", "argmax", "argmin", "cumsum", "cumprod", "rand",
    "randn", "randint", "randint4x", "rand4x", "randn4x", "full", "trans", "multiple_of", "max_contiguous",
    "max_constancy", "scalar", "fast_exp", "simd_sum", "simd_max", "static_range",
    "reverse_bits", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg",
    "atomic_cas",
    "reverse_bits", "reduce", "associative_scan", "gather", "sort", "topk", "flip", "histogram",
    "device_print", "device_assert",
)

__all__ = ["DTYPE_NAMES", "LANGUAGE_NAMES", "constexpr", *LANGUAGE_NAMES, *DTYPE_NAMES]
