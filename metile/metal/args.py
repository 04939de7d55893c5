"""Checking launch arguments against a kernel's MSL signature (shared by every device).

`args[i]` binds `[[buffer(i)]]`. Pointer parameters take numpy arrays or `metile.Buffer`s whose dtype
matches the pointee (`device float4*` takes float32 data whose size is a multiple of 16 bytes);
`constant T&` parameters take a numpy scalar of T's dtype, a Python number that T can hold exactly,
or an array of exactly `sizeof(T)` bytes. `None` leaves a parameter unbound, as Metal allows for an index the kernel
does not access (a `BoundArg` whose value is None). Anything else is a `LaunchError` naming the parameter.
"""

from __future__ import annotations

import functools
import numbers

import attrs
import numpy as np

from metile.metal.errors import ArrayLayoutError, LaunchError
from metile.metal.interop import ForeignArrayError, host_view, is_foreign_array
from metile.metal.msl_signature import KernelSignature, Param

SCALARS: dict[str, np.dtype | None] = {
    "float": np.dtype(np.float32), "half": np.dtype(np.float16), "bfloat": None,
    "int": np.dtype(np.int32), "uint": np.dtype(np.uint32), "short": np.dtype(np.int16),
    "ushort": np.dtype(np.uint16), "char": np.dtype(np.int8), "uchar": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_), "long": np.dtype(np.int64), "ulong": np.dtype(np.uint64),
    "int8_t": np.dtype(np.int8), "uint8_t": np.dtype(np.uint8), "int16_t": np.dtype(np.int16),
    "uint16_t": np.dtype(np.uint16), "int32_t": np.dtype(np.int32), "uint32_t": np.dtype(np.uint32),
    "int64_t": np.dtype(np.int64), "uint64_t": np.dtype(np.uint64), "size_t": np.dtype(np.uint64),
}
_FLOAT8_NAMES = ("float8_e4m3fn", "float8_e5m2")  # ml_dtypes' names of the 8-bit floats metile stores as uchar
_ATOMICS = {"atomic_int": "int", "atomic_uint": "uint", "atomic_float": "float", "atomic_bool": "bool"}


@attrs.frozen
class ElementType:
    """What a pointer or reference parameter points at, as far as the host can check it."""

    text: str
    scalar: str | None        # scalar kind, None for types the host does not know (structs)
    lanes: int = 1            # vector components
    size: int = 0             # sizeof, 0 if unknown

    @property
    def dtype(self) -> np.dtype | None:
        return SCALARS.get(self.scalar) if self.scalar else None


def element_type(text: str) -> ElementType:
    name = text.replace("metal::", "").strip()
    if name.startswith("atomic<") and name.endswith(">"):
        name = _ATOMICS.get("atomic_" + name[7:-1].strip(), name)
    name = _ATOMICS.get(name, name)
    packed = name.startswith("packed_")
    base = name[7:] if packed else name
    if base in SCALARS:
        return ElementType(text, base, 1, _scalar_size(base))
    stem, lanes = base.rstrip("234"), base[len(base.rstrip("234")):]
    if stem in SCALARS and lanes in ("2", "3", "4"):
        n = int(lanes)
        size = _scalar_size(stem) * (n if packed or n != 3 else 4)
        return ElementType(text, stem, n, size)
    return ElementType(text, None)


def _scalar_size(kind: str) -> int:
    return 2 if kind == "bfloat" else SCALARS[kind].itemsize


def accepts_dtype(et: ElementType, dtype: np.dtype) -> bool:
    if et.scalar is None:
        return True
    if et.scalar == "bfloat":
        return dtype == np.dtype(np.uint16) or dtype.name == "bfloat16"
    if et.scalar == "uchar" and dtype.name in _FLOAT8_NAMES:  # an 8-bit float is its bits in MSL
        return True
    want = et.dtype
    return dtype == want


@attrs.frozen
class BoundArg:
    """One checked argument: what to bind and whether results must be copied back."""

    param: Param
    value: object            # np.ndarray, Buffer, bytes for a scalar, or None: left unbound
    nbytes: int              # for an array, its span: from its first element to the end of its last
    write_back: bool
    strided: bool = False    # an array that is not C-contiguous (its span holds gaps of its parent)


def describe(p: Param) -> str:
    return f"argument {p.index} (`{p.name}`, `{p.type_text}`)"


@functools.lru_cache(maxsize=1024)
def _plan(sig: KernelSignature) -> tuple[dict[int, tuple[Param, ElementType]], int]:
    """Per signature, once: the parameter and element type at each [[buffer(i)]] index."""
    params = {p.index: (p, element_type(p.element_type)) for p in sig.buffers}
    return params, (max(params) + 1 if params else 0)


def bind_arguments(sig: KernelSignature, args: list | tuple, buffer_type: type) -> list[BoundArg | None]:
    """Check `args` against the kernel's [[buffer(i)]] parameters; returns one entry per index."""
    plan, needed = _plan(sig)
    if len(args) != needed:
        names = ", ".join(f"{i}: `{plan[i][0].name}`" for i in sorted(plan))
        raise LaunchError(f"kernel `{sig.name}` takes {needed} buffer argument(s) ({names or 'none'}), "
                          f"got {len(args)}")
    bound: list[BoundArg | None] = []
    for i, value in enumerate(args):
        entry = plan.get(i)
        if entry is None:
            if value is not None:
                raise LaunchError(f"kernel `{sig.name}` has no [[buffer({i})]] parameter; pass None at index {i}")
            bound.append(None)
            continue
        bound.append(BoundArg(entry[0], None, 0, False) if value is None
                     else _bind_one(entry[0], entry[1], value, buffer_type))
    return bound


def _bind_one(p: Param, et: ElementType, value, buffer_type: type) -> BoundArg:
    if is_foreign_array(value):   # a torch tensor, an MLX or JAX array...: a numpy view of its memory
        try:
            value = host_view(value, written=not p.is_const)
        except ForeignArrayError as e:
            raise LaunchError(f"{describe(p)} {e}") from None
    if p.is_reference:
        return _bind_reference(p, et, value, buffer_type)
    if isinstance(value, buffer_type):
        _check_array_dtype(p, et, value.dtype, value.nbytes)
        return BoundArg(p, value, value.nbytes, False)
    if isinstance(value, np.ndarray):
        if value.flags.c_contiguous:
            _check_array_dtype(p, et, value.dtype, value.nbytes)
            return BoundArg(p, value, value.nbytes, not p.is_const)
        nbytes = array_span(value, written=not p.is_const)
        if isinstance(nbytes, str):
            raise ArrayLayoutError(f"{describe(p)} {nbytes}", index=p.index, reason=nbytes)
        _check_array_dtype(p, et, value.dtype, nbytes)
        return BoundArg(p, value, nbytes, not p.is_const, strided=True)
    if isinstance(value, (numbers.Number, np.generic)):
        raise LaunchError(f"{describe(p)} is a pointer: pass a numpy array or metile.Buffer, "
                          f"not the scalar {value!r}")
    raise LaunchError(f"{describe(p)}: cannot bind a {type(value).__name__}; "
                      "pass a numpy array or metile.Buffer")


def _check_array_dtype(p: Param, et: ElementType, dtype: np.dtype, nbytes: int) -> None:
    if not accepts_dtype(et, dtype):
        want = "uint16 (raw bfloat bits)" if et.scalar == "bfloat" else str(et.dtype)
        hint = " Metal has no 64-bit floats: convert with .astype(np.float32)." if dtype == np.float64 else ""
        raise LaunchError(f"{describe(p)} needs {want} data, got {dtype}.{hint}")
    if et.size and nbytes % et.size:
        raise LaunchError(f"{describe(p)}: {nbytes} bytes is not a whole number of `{et.text}` "
                          f"({et.size} bytes each)")


def array_span(arr: np.ndarray, *, written: bool = True) -> int | str:
    """The bytes from the first element of `arr` to the end of its last, as a kernel sees them; or why a kernel cannot
    take the view as it is (a phrase following the argument's name).

    The strides must be non-negative whole numbers of elements. When the kernel may write the view (`written`),
    each dimension's stride must also step past everything the smaller strides reach, so that no two elements share
    an address; a view the kernel only reads may repeat elements (`np.broadcast_to`, torch's `expand`), as Triton
    reads such tensors."""
    shape, strides, itemsize = arr.shape, arr.strides, arr.itemsize
    if 0 in shape:
        return 0
    dims = [(st, n) for st, n in zip(strides, shape) if n > 1]
    fix = "pass np.ascontiguousarray(...) of it (and that copy's strides) instead"
    for st, _ in dims:
        if st < 0:
            return (f"is a numpy view with a negative stride (strides {strides} bytes, as x[::-1] makes): a kernel "
                    f"indexes memory upwards from the view's first element; {fix}")
        if st % itemsize:
            return (f"is a numpy view with a stride of {st} bytes, not a whole number of its {itemsize}-byte "
                    f"elements (strides {strides}): a kernel indexes whole elements; {fix}")
    reach = itemsize
    for st, n in sorted(dims):
        if st < reach and written:
            return (f"is a numpy view whose elements overlap in memory (shape {shape}, strides {strides} bytes; a zero "
                    f"stride as np.broadcast_to makes, or an as_strided view): a store to one element would change "
                    f"others; {fix}")
        reach += st * (n - 1)
    return reach


def data_address(arr: np.ndarray) -> int:
    """The address of the first element of `arr`."""
    return arr.__array_interface__["data"][0]


def staged_view(b: BoundArg, raw) -> np.ndarray:
    """The elements of the array argument `b` in `raw`, the device memory it was copied into (its span)."""
    arr: np.ndarray = b.value
    if b.strided:
        return np.ndarray(arr.shape, arr.dtype, buffer=raw, strides=arr.strides)
    return np.frombuffer(raw, dtype=arr.dtype).reshape(arr.shape)


def _bind_reference(p: Param, et: ElementType, value, buffer_type: type) -> BoundArg:
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        reason = (f"binds {et.size or 'a fixed number of'} bytes; pass a C-contiguous array "
                  f"(np.ascontiguousarray), not a view with strides {value.strides}")
        raise ArrayLayoutError(f"{describe(p)} {reason}", index=p.index, reason=reason)
    if isinstance(value, (np.ndarray, buffer_type)):
        _check_array_dtype(p, et, value.dtype, value.nbytes)
        if et.size and value.nbytes != et.size:
            raise LaunchError(f"{describe(p)} binds {et.size} bytes, got an array of {value.nbytes}")
        return BoundArg(p, value, value.nbytes, isinstance(value, np.ndarray) and not p.is_const)
    if et.scalar is None or et.lanes != 1:
        raise LaunchError(f"{describe(p)}: pass a numpy array of {et.size or 'the right number of'} bytes")
    if isinstance(value, np.generic):
        if not accepts_dtype(et, value.dtype):
            want = "uint16" if et.scalar == "bfloat" else str(et.dtype)
            raise LaunchError(f"{describe(p)} needs a {want} scalar, got {value.dtype} ({value!r})")
        return BoundArg(p, np.asarray(value).tobytes(), et.size, False)
    if isinstance(value, bool) or isinstance(value, numbers.Integral):
        dtype = et.dtype
        if dtype is None or dtype.kind not in "biu":
            if dtype is not None and dtype.kind == "f":
                return BoundArg(p, np.asarray(value, dtype=dtype).tobytes(), et.size, False)
            raise LaunchError(f"{describe(p)}: cannot bind the integer {value!r}")
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        if info is not None and not (info.min <= int(value) <= info.max):
            raise LaunchError(f"{describe(p)}: {value} does not fit in `{et.scalar}` "
                              f"({info.min}..{info.max})")
        return BoundArg(p, np.asarray(value, dtype=dtype).tobytes(), et.size, False)
    if isinstance(value, numbers.Real):
        dtype = et.dtype
        if dtype is None or dtype.kind != "f":
            raise LaunchError(f"{describe(p)} is an integer parameter; got the float {value!r}")
        return BoundArg(p, np.asarray(value, dtype=dtype).tobytes(), et.size, False)
    raise LaunchError(f"{describe(p)}: cannot bind a {type(value).__name__}")


def run_options_problem(sanitize, timeout, profile=None, profile_only=False) -> str | None:
    """Why a dispatch's `sanitize=` (a bool), `timeout=` (None, or seconds >= 0; 0 and inf mean no limit),
    `profile=` (None, a bool, or a number of threadgroups >= 1) or `profile_only=` (a bool, with a profile) is not
    taken, or None when all are."""
    if sanitize.__class__ is not bool and not isinstance(sanitize, np.bool_):
        return f"sanitize={sanitize!r} must be True or False"
    if timeout is not None:
        if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real):
            return f"timeout={timeout!r} must be a number of seconds, or None for the device's default"
        if not timeout >= 0:  # NaN too
            return f"timeout={timeout!r} must be a number of seconds >= 0 (0 or inf: no limit)"
    if profile is not None and profile.__class__ is not bool and not (profile.__class__ is int and profile >= 1):
        return (f"profile={profile!r} must be True, False, None or a number of threadgroups to count (>= 1)")
    if profile_only.__class__ is not bool:
        return f"profile_only={profile_only!r} must be True or False"
    if profile_only and not profile:
        return "profile_only=True runs the counted threadgroups only, so it needs profile=True or a number"
    return None


THREADGROUP_MEMORY_ALIGN = 16  # threadgroup memory lengths are multiples of 16 bytes (setThreadgroupMemoryLength)


def round_up(n: int, to: int = THREADGROUP_MEMORY_ALIGN) -> int:
    return -(-n // to) * to


def threadgroup_sizes(sig: KernelSignature, params: tuple[Param, ...], tg_memory, available: int,
                      device_limit: int) -> list[int]:
    """The sizes for the `[[threadgroup(i)]]` parameters `params`, checked against what the kernel has left."""
    if not params and not tg_memory:
        return []
    sizes = [int(x) for x in (tg_memory or ())]
    need = (max(p.index for p in params) + 1) if params else 0
    if len(sizes) < need:
        missing = [f"{p.index} (`{p.name}`)" for p in params if p.index >= len(sizes)]
        raise LaunchError(f"kernel `{sig.name}` needs threadgroup_memory sizes for [[threadgroup(i)]] "
                          f"parameters {', '.join(missing)}")
    if any(s < 0 for s in sizes):
        raise LaunchError(f"threadgroup_memory sizes must be non-negative, got {sizes}")
    total = sum(round_up(s) for s in sizes)
    if total > available:
        declared = device_limit - available
        also = f" besides the {declared} bytes the kernel declares itself" if declared else ""
        raise LaunchError(f"threadgroup_memory {sizes} takes {total} bytes (each rounded up to 16){also}; "
                          f"the device allows {device_limit}")
    return sizes


def dim3(value, what: str) -> tuple[int, int, int]:
    """Normalise an int or 1-3 tuple of positive ints to a 3-tuple."""
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}")
    try:
        dims = tuple(int(v) for v in value)
    except TypeError:
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise LaunchError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    dims = dims + (1,) * (3 - len(dims))
    if any(d < 1 for d in dims):
        raise LaunchError(f"{what} must be positive in every dimension, got {value!r}")
    if any(d >= 2**32 for d in dims):
        raise LaunchError(f"{what} exceeds 2**32 in a dimension: {value!r}")
    return dims
