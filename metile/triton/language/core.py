"""The functions of `triton.language` (its `core` and `standard` parts), with Triton 3.4's signatures.

Inside a `@triton.jit` kernel the tracer recognises each function by identity and builds Tile IR with Triton's rules
(`metile.triton.dialect`); the names metile does not compile yet raise `NotSupportedYetError` at the kernel's line.
Called as ordinary Python, outside a kernel, each raises `OutsideKernelError`, except `cdiv` on Python ints and the
classes (`range`, `static_range`), which Triton programs may build anywhere.
"""

from __future__ import annotations

from metile.frontend.errors import OutsideKernelError
from metile.triton.language.types import PropagateNan, float32

_NONE = PropagateNan.NONE


def _outside(name: str):
    raise OutsideKernelError(f"tl.{name}() can only be used inside a @triton.jit function")


# ---- programs, memory
def program_id(axis): _outside("program_id")
def num_programs(axis): _outside("num_programs")
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="", eviction_policy="",
         volatile=False): _outside("load")
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""): _outside("store")
def atomic_add(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_add")
def atomic_and(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_and")
def atomic_or(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_or")
def atomic_xor(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_xor")
def atomic_max(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_max")
def atomic_min(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_min")
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None): _outside("atomic_xchg")
def atomic_cas(pointer, cmp, val, sem=None, scope=None): _outside("atomic_cas")
def make_block_ptr(base, shape, strides, offsets, block_shape, order): _outside("make_block_ptr")
def advance(base, offsets): _outside("advance")
def make_tensor_descriptor(base, shape, strides, block_shape): _outside("make_tensor_descriptor")
def load_tensor_descriptor(desc, offsets): _outside("load_tensor_descriptor")
def store_tensor_descriptor(desc, offsets, value): _outside("store_tensor_descriptor")


# ---- creation and shapes
def arange(start, end): _outside("arange")
def full(shape, value, dtype): _outside("full")
def zeros(shape, dtype): _outside("zeros")
def zeros_like(input): _outside("zeros_like")  # noqa: A002 - Triton's parameter names
def ones_like(input): _outside("ones_like")  # noqa: A002
def broadcast(input, other): _outside("broadcast")  # noqa: A002
def broadcast_to(input, *shape): _outside("broadcast_to")  # noqa: A002
def expand_dims(input, axis): _outside("expand_dims")  # noqa: A002
def trans(input, *dims): _outside("trans")  # noqa: A002
def permute(input, *dims): _outside("permute")  # noqa: A002
def reshape(input, *shape, can_reorder=False): _outside("reshape")  # noqa: A002
def view(input, *shape): _outside("view")  # noqa: A002
def ravel(x, can_reorder=False): _outside("ravel")
def cat(input, other, can_reorder=False): _outside("cat")  # noqa: A002
def join(a, b): _outside("join")
def split(a): _outside("split")
def interleave(a, b): _outside("interleave")
def gather(src, index, axis): _outside("gather")
def flip(x, dim=None): _outside("flip")


# ---- element-wise
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False): _outside("cast")  # noqa: A002
def where(condition, x, y): _outside("where")
def maximum(x, y, propagate_nan=_NONE): _outside("maximum")
def minimum(x, y, propagate_nan=_NONE): _outside("minimum")
def clamp(x, min, max, propagate_nan=_NONE): _outside("clamp")  # noqa: A002
def add(x, y, sanitize_overflow=True): _outside("add")
def sigmoid(x): _outside("sigmoid")
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False): _outside("softmax")
def swizzle2d(i, j, size_i, size_j, size_g): _outside("swizzle2d")
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack): _outside("inline_asm_elementwise")


def cdiv(x, div):
    """`ceil(x / div)`; on Python ints it computes anywhere (Triton's `(x + div - 1) // div`)."""
    a, b = (v.value if isinstance(v, constexpr) else v for v in (x, div))
    if isinstance(a, int) and isinstance(b, int):
        return (a + b - 1) // b
    _outside("cdiv")


# ---- reductions, scans, products
def sum(input, axis=None, keep_dims=False, dtype=None): _outside("sum")  # noqa: A001, A002
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):  # noqa: A001, A002
    _outside("max")
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):  # noqa: A001, A002
    _outside("min")
def argmax(input, axis, tie_break_left=True, keep_dims=False): _outside("argmax")  # noqa: A002
def argmin(input, axis, tie_break_left=True, keep_dims=False): _outside("argmin")  # noqa: A002
def xor_sum(input, axis=None, keep_dims=False): _outside("xor_sum")  # noqa: A002
def reduce_or(input, axis, keep_dims=False): _outside("reduce_or")  # noqa: A002
def cumsum(input, axis=0, reverse=False, dtype=None): _outside("cumsum")  # noqa: A002
def cumprod(input, axis=0, reverse=False): _outside("cumprod")  # noqa: A002
def reduce(input, axis, combine_fn, keep_dims=False): _outside("reduce")  # noqa: A002
def associative_scan(input, axis, combine_fn, reverse=False): _outside("associative_scan")  # noqa: A002
def sort(x, dim=None, descending=0): _outside("sort")
def topk(x, k, dim=None): _outside("topk")
def bitonic_merge(x, dim=None, descending=0): _outside("bitonic_merge")
def histogram(input, num_bins, mask=None): _outside("histogram")  # noqa: A002
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,  # noqa: A002
        out_dtype=float32): _outside("dot")
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, lhs_k_pack=True,
               rhs_k_pack=True, out_dtype=float32): _outside("dot_scaled")


# ---- compiler hints, debugging, compile-time checks
def multiple_of(input, values): _outside("multiple_of")  # noqa: A002
def max_contiguous(input, values): _outside("max_contiguous")  # noqa: A002
def max_constancy(input, values): _outside("max_constancy")  # noqa: A002
def assume(cond): _outside("assume")
def debug_barrier(): _outside("debug_barrier")
def static_assert(cond, msg=""): _outside("static_assert")
def static_print(*values, sep="", end="\n", file=None, flush=False): _outside("static_print")
def device_print(prefix, *args, hex=False): _outside("device_print")  # noqa: A002
def device_assert(cond, msg=""): _outside("device_assert")


class range:  # noqa: N801, A001 - Triton's name
    """`for i in tl.range(start, stop, step, num_stages=...)`: a loop that runs on the device."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step
        self.num_stages, self.loop_unroll_factor = num_stages, loop_unroll_factor


class static_range:  # noqa: N801
    """`for i in tl.static_range(start, stop, step)`: a loop unrolled while tracing, `i` a constexpr."""

    def __init__(self, arg1, arg2=None, step=None):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step


class slice:  # noqa: N801, A001
    """Triton's slice of a tuple (a name only on metile)."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


class tuple:  # noqa: N801, A001
    """Triton's tuple of values (a name only on metile: kernels hold Python tuples)."""

    def __init__(self, args, type=None):  # noqa: A002
        self.values = list(args)


class async_task:  # noqa: N801
    """Triton's warp-specialisation context (not supported by metile yet)."""

    def __init__(self, task_ids, _builder=None):
        self.task_ids = task_ids


class tensor_descriptor:  # noqa: N801
    """The class of Triton's tensor descriptors in a kernel (`tl.make_tensor_descriptor`'s, metile's
    `metile.triton.impl_blocks.TensorDescriptor`), so that `isinstance(x, tl.tensor_descriptor)` tells them apart from
    pointers while a kernel is traced."""


class tensor_descriptor_type:  # noqa: N801
    """The type of a tensor descriptor (a name only on metile)."""


def constexpr_function(f):
    """`@tl.constexpr_function`: a Python function that a kernel calls on compile-time values (it runs while the
    kernel is traced)."""
    f.__triton_constexpr_function__ = True
    return f


def must_use_result(x, s=True):
    """Triton's marker of functions whose result must be used (no effect)."""
    return x if callable(x) else (lambda fn: fn)


from metile.triton.language.types import (  # noqa: E402, F401 - the names of triton.language (`dtype` is
    # imported by the package: these functions' parameters named `dtype` would shadow it here)
    TRITON_MAX_TENSOR_NUMEL,
    bfloat16,
    block_type,
    const,
    constexpr,
    float8e4b8,
    float8e4b15,
    float8e4nv,
    float8e5,
    float8e5b16,
    float16,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pi32_t,
    pointer_type,
    tensor,
    tuple_type,
    uint8,
    uint16,
    uint32,
    uint64,
    void,
)
