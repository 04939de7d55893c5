"""Parameter kinds, argument types and the specialization cache key, and a kernel's pipeline as a part of its compile
keys (`default_pipeline`, `PassesKey`).

A parameter annotated `metile.constexpr` is compile-time; the annotation is read from the
function's `ast` and evaluated against its globals, so it is recognised whether or not the module
uses `from __future__ import annotations` (string annotations). Other parameters are runtime and
take their type from each call's argument: a numpy array or `metile.Buffer` is a device pointer to
its element type (float64 arrays are refused: Metal cannot hold them), a Python `int` an `i32` scalar,
or when i32 cannot hold it an `i64` one (a `u64` from 2**63, as Triton types int arguments), a Python
`float` an `f32` scalar (a `bool` is an `i32` 0 or 1; numpy scalars keep a supported dtype). Runtime
arguments go positionally or by keyword; constexprs by keyword (or positionally after every runtime
argument); `sanitize` and `timeout` are launch options (unless the kernel has a parameter of that name,
which they then set); meTile's tuning keywords are compiler options.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import inspect
import math
import operator

import attrs
import numpy as np

from metile.frontend.errors import KernelArgumentError
from metile.ir.errors import Loc
from metile.ir.stmts import MMA_CHOICES, CompileOptions
from metile.ir.target import AppleTarget, target_named, target_names
from metile.ir.types import F32_OVERFLOW, AddressSpace, DType, PtrType, TileType, fits, from_numpy
from metile.language import constexpr
from metile.metal.interop import (
    DL_CPU,
    DL_METAL,
    ForeignArrayError,
    device_of,
    foreign_dtype,
    host_view,
    is_foreign_array,
)
from metile.rewrite.pipeline import DEFAULT_PIPELINE, check_pipeline

NO_DEFAULT = _NO_DEFAULT = object()  # the default of a parameter that has none
_REFUSED = {"float64": "Metal has no 64-bit floats; convert with .astype(np.float32)"}


@attrs.frozen
class ParamSpec:
    name: str
    constexpr: bool
    default: object
    loc: Loc


@functools.lru_cache(maxsize=256)
def _parse_annotation(text: str) -> ast.expr | None:
    """A string annotation's expression (None when it does not parse), parsed once per string."""
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _dotted(annotation: ast.expr) -> tuple[str, ...] | None:
    """`("metile", "constexpr")` for the annotation `metile.constexpr` (a name and attributes); None otherwise."""
    path = []
    while isinstance(annotation, ast.Attribute):
        path.append(annotation.attr)
        annotation = annotation.value
    if not isinstance(annotation, ast.Name):
        return None
    path.append(annotation.id)
    return tuple(reversed(path))


def _is_constexpr(annotation: ast.expr | None, globals_: dict) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = _parse_annotation(annotation.value)
        if annotation is None:
            return False
    path = _dotted(annotation)
    if path is not None and path[0] in globals_:  # what `eval` does for a dotted name, without compiling it
        value = globals_[path[0]]
        try:
            for attr in path[1:]:
                value = getattr(value, attr)
        except Exception:  # noqa: BLE001 - as below
            return False
        return value is constexpr
    try:
        value = eval(compile(ast.Expression(annotation), "<annotation>", "eval"), dict(globals_))  # noqa: S307
    except Exception:  # noqa: BLE001 - an annotation we cannot evaluate is not metile.constexpr
        return False
    return value is constexpr


def function_defaults(fn) -> dict:
    """The default value of each parameter of `fn` that has one (what `inspect.signature` reports, read from the
    function itself unless a wrapper or a `__signature__` makes the signature another one)."""
    if "__wrapped__" in fn.__dict__ or "__signature__" in fn.__dict__:
        sig = inspect.signature(fn)
        return {n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
    code = fn.__code__
    out = dict(fn.__kwdefaults__ or {})
    if fn.__defaults__:
        n = code.co_argcount
        out.update(zip(code.co_varnames[n - len(fn.__defaults__):n], fn.__defaults__))
    return out


def classify(fdef: ast.FunctionDef, globals_: dict, defaults: dict, loc_of) -> tuple[ParamSpec, ...]:
    a = fdef.args
    if a.vararg or a.kwarg:
        raise KernelArgumentError("kernels cannot take *args or **kwargs", loc_of(fdef))
    out = []
    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
        out.append(ParamSpec(arg.arg, _is_constexpr(arg.annotation, globals_), defaults.get(arg.arg, _NO_DEFAULT),
                             loc_of(arg)))
    return tuple(out)


class Binding:
    """How a call's arguments bind to a kernel's parameters, made once per function from its `ParamSpec`s:
    positional arguments fill the runtime parameters, then the constexprs, each group in declaration order."""

    __slots__ = ("n_runtime", "names", "ordered", "specs")

    def __init__(self, specs: tuple[ParamSpec, ...]):
        self.specs = specs
        runtime, consts = [], []
        for s in specs:
            (consts if s.constexpr else runtime).append(s.name)
        self.n_runtime = len(runtime)
        self.ordered = (*runtime, *consts)
        self.names = frozenset(self.ordered)


MET_TILE_OPTIONS = frozenset({"NUM_SG", "WM", "WN", "SWIZZLE_SMEM", "SWIZZLE", "NAX_FRAGMENTS", "NAX_OUTER_K",
                              "NAX_K_UNROLL", "NAX_SKIP_FIRST_EPOCH_BARRIER", "NAX_TRAILING_EPOCH_BARRIER"})
"""The original meTile's GEMM tuning keywords (docs/language.md 2.2): accepted at launch when the kernel has
no parameter of that name, and part of the cache key. `NUM_SG` is `num_simdgroups`; the others steer nothing in
metile (a kernel reads a value it wants through a constexpr parameter of that name). Any other unknown keyword
is refused."""

COMPILER_OPTIONS = frozenset({"num_simdgroups", "num_stages", "group_programs", "direct_operands", "num_threads", "mma",
                              "target"})
"""Keywords of a launch that steer the compiler, not the kernel's code: part of the cache key, kept in the Tile
IR's `options` (`metile.ir.CompileOptions`). `num_simdgroups=N` runs 32 N threads per program; `num_stages=N`
pipelines every `tile_range` loop that does not give its own `num_stages`; `group_programs=G` runs the programs
of a 2-D grid in groups of G rows; `direct_operands=True` reads `dot` operands straight from device memory into
simdgroup matrices where it can; `num_threads=N` runs N threads per program of a thread-level kernel; `mma=` chooses
what multiplies `dot` operands on a target with tensor operations (`metile.ir.MMA_CHOICES`); `target=` names the GPU
the kernel is compiled for (`metile.target`; default: the device's)."""

_OPTION_RANGES = {"num_stages": (1, 8, "stages of each tile_range loop"),
                  "group_programs": (1, 1 << 20, "rows of programs per group"),
                  "num_threads": (1, 1024, "threads per program of a thread-level kernel")}


def compile_options(options: dict, name: str, loc: Loc, consts: dict | None = None) -> CompileOptions:
    """The compiler options of a launch's `options` keywords, checked. meTile's `NUM_SG` (a launch keyword, or a
    constexpr parameter of the kernel's, in `consts`) is `num_simdgroups`: here, and nowhere else, that name means
    something to the compiler."""
    given = {k: v for k, v in ((k, options.get(k)) for k in ("num_simdgroups", "NUM_SG")) if v is not None}
    if consts and consts.get("NUM_SG") is not None:
        given.setdefault("NUM_SG", consts["NUM_SG"])
    n = given.get("num_simdgroups", given.get("NUM_SG"))
    if len(given) == 2 and given["NUM_SG"] != n:
        raise KernelArgumentError(f"{name}(): num_simdgroups={n} and NUM_SG={given['NUM_SG']} disagree (NUM_SG is "
                                  "meTile's name for num_simdgroups)", loc)
    if n is not None and (n.__class__ is not int or not 1 <= n <= 32):
        raise KernelArgumentError(f"{name}(): num_simdgroups={n!r} must be an int from 1 to 32 (32 threads each, "
                                  "at most 1024 per threadgroup)", loc)
    rest = {}
    for key, (low, high, what) in _OPTION_RANGES.items():
        v = options.get(key)
        if v is not None and (v.__class__ is not int or not low <= v <= high):
            raise KernelArgumentError(f"{name}(): {key}={v!r} must be an int from {low} to {high} ({what})", loc)
        rest[key] = v
    direct = options.get("direct_operands")
    if direct is not None and direct.__class__ is not bool:
        raise KernelArgumentError(f"{name}(): direct_operands={direct!r} must be True or False", loc)
    mma = options.get("mma")
    if mma is not None and mma not in MMA_CHOICES:
        raise KernelArgumentError(f"{name}(): mma={mma!r} must be one of {', '.join(map(repr, MMA_CHOICES))}", loc)
    compile_target(options.get("target"), name, loc)
    return CompileOptions(n, **rest, direct_operands=1 if direct else None,
                          mma=None if mma is None else MMA_CHOICES.index(mma))


def compile_target(given, name: str, loc: Loc) -> AppleTarget | None:
    """The `AppleTarget` a launch's `target=` names (a name `metile.target` knows, or a target), None when not given."""
    if given is None or isinstance(given, AppleTarget):
        return given
    found = target_named(given)
    if found is None:
        raise KernelArgumentError(f"{name}(): target={given!r} names no GPU metile compiles for; known: "
                                  f"{target_names()}", loc)
    return found


LAUNCH_OPTIONS = frozenset({"sanitize", "timeout", "profile", "profile_only", "in_place"})
"""Keywords of a launch that are not the kernel's: how the device runs it (`sanitize=`, `timeout=`, `profile=`,
`profile_only=`), not what it compiles to, so they are no part of the specialization key. A kernel parameter of
that name takes the keyword instead."""


def bind(binding: Binding, args: tuple, kwargs: dict, name: str, loc: Loc, static_arg=None):
    """`(runtime [(spec, value)], constexprs {name: value}, options {name: value}, launch options {name: value})`;
    a runtime parameter whose argument satisfies `static_arg` (a kernel language's rule: Triton's `None`) is bound
    as a constexpr of this call."""
    ordered = binding.ordered
    if len(args) > len(ordered):
        raise KernelArgumentError(f"{name}() takes {binding.n_runtime} runtime arguments but {len(args)} were given "
                                  f"(pass constexpr parameters by keyword)", loc)
    given = dict(zip(ordered, args))
    options, launch = {}, {}
    if kwargs:
        names = binding.names
        for k, v in kwargs.items():
            if k in given:
                raise KernelArgumentError(f"{name}() got multiple values for argument '{k}'", loc)
            if k in names:
                given[k] = v
            elif k in MET_TILE_OPTIONS or k in COMPILER_OPTIONS:
                options[k] = v
            elif k in LAUNCH_OPTIONS:
                launch[k] = v
            else:
                close = difflib.get_close_matches(k, [*names, *LAUNCH_OPTIONS, *COMPILER_OPTIONS], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise KernelArgumentError(f"{name}() got an unexpected keyword argument '{k}': it names no parameter "
                                          f"of the kernel{hint}", loc)
    values, consts = [], {}
    for s in binding.specs:
        v = given.get(s.name, _NO_DEFAULT)
        if v is _NO_DEFAULT:
            v = s.default
            if v is _NO_DEFAULT:
                if s.constexpr:
                    raise KernelArgumentError(f"missing constexpr '{s.name}': pass it by keyword, e.g. "
                                              f"{name}[grid](..., {s.name}=...)", s.loc)
                raise KernelArgumentError(f"{name}() is missing the runtime argument '{s.name}'", s.loc)
        if s.constexpr or (static_arg is not None and static_arg(v)):
            consts[s.name] = v.value if isinstance(v, constexpr) else v
        else:
            values.append((s, v))
    return values, consts, options, launch


_I32_SCALAR, _F32_SCALAR = TileType(DType.I32), TileType(DType.F32)
_PYTHON_INTS = (DType.I32, DType.I64, DType.U64)   # a Python int argument's type: the first that holds it (Triton's)
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
# Per numpy dtype Metal holds, the type of a numpy array argument: a cache of at most one entry per `DType` (a dtype
# Metal cannot hold is refused before it is stored), as an array's dtype is equal to the one numpy interns for it.
_ARRAY_TYPES: dict[np.dtype, PtrType] = {}
_NDARRAY = np.ndarray


def arg_type(spec: ParamSpec, value) -> PtrType | TileType:
    """The IR type of a runtime argument, or a `KernelArgumentError` at the parameter."""
    cls = value.__class__
    if cls is _NDARRAY:
        found = _ARRAY_TYPES.get(value.dtype)
        if found is not None:
            return found
    elif cls is int:
        if _I32_MIN <= value <= _I32_MAX:
            return _I32_SCALAR
    elif cls is float:
        if -F32_OVERFLOW < value < F32_OVERFLOW:
            return _F32_SCALAR
    return _arg_type(spec, value)


def _numpy_dtype(spec: ParamSpec, dtype) -> np.dtype:
    """`dtype` as numpy reads it, or a `KernelArgumentError` (an array-like of another library, say)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise KernelArgumentError(f"argument '{spec.name}' has the element type {dtype!r}, which numpy does not "
                                  "know: pass a numpy array (e.g. `.numpy()` of a tensor) or a metile.Buffer",
                                  spec.loc) from None


def _refused_array(name: str, dt: np.dtype) -> str:
    """Why an array of `dt` cannot be a kernel argument."""
    if not dt.isnative and from_numpy(dt.newbyteorder("=")) is not None:
        return (f"argument '{name}' is a big-endian {dt.name} array ({dt.str}): Apple GPUs are little-endian; "
                f"convert with .astype(np.{dt.name})")
    why = _REFUSED.get(dt.name, "Metal cannot hold it")
    article = "an" if dt.name[0] in "aeiou" else "a"
    return f"argument '{name}' is {article} {dt.name} array: {why}"


def _arg_type(spec: ParamSpec, value) -> PtrType | TileType:
    """`arg_type` of any value (the types of numpy arrays are kept per dtype: they depend on nothing else)."""
    if is_foreign_array(value):   # a torch tensor, an MLX or JAX array, a buffer-protocol object
        try:
            kind = device_of(value)[0]
            if kind not in (DL_CPU, DL_METAL):
                host_view(value)   # raises, naming the device
            np_dtype = foreign_dtype(value)
        except ForeignArrayError as e:
            raise KernelArgumentError(f"argument '{spec.name}' {e}", spec.loc) from None
        dt = from_numpy(np_dtype)
        if dt is None:
            raise KernelArgumentError(_refused_array(spec.name, np_dtype), spec.loc)
        return PtrType(dt, (), AddressSpace.DEVICE)
    dtype = getattr(value, "dtype", None)
    if isinstance(value, np.ndarray) or (dtype is not None and hasattr(value, "nbytes") and hasattr(value, "numpy")):
        dt = from_numpy(_numpy_dtype(spec, dtype))
        if dt is None:
            raise KernelArgumentError(_refused_array(spec.name, np.dtype(dtype)), spec.loc)
        found = PtrType(dt, (), AddressSpace.DEVICE)
        if value.__class__ is np.ndarray:
            _ARRAY_TYPES[dtype] = found
        return found
    if isinstance(value, np.generic):
        dt = from_numpy(value.dtype)
        if dt is not None:
            return TileType(dt)
        value = value.item()
    if isinstance(value, bool):
        return TileType(DType.I32)
    if isinstance(value, int):
        for dt in _PYTHON_INTS:
            if fits(value, dt):
                return TileType(dt)
        raise KernelArgumentError(f"argument '{spec.name}' = {value} does not fit a 64-bit integer (signed, or "
                                  "unsigned from 2**63)", spec.loc)
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) >= F32_OVERFLOW:
            raise KernelArgumentError(f"argument '{spec.name}' = {value!r} is beyond the range of a 32-bit float (it "
                                      "would become an infinity; pass float('inf') if that is meant)", spec.loc)
        return TileType(DType.F32)
    raise KernelArgumentError(f"argument '{spec.name}' must be a numpy array, a metile.Buffer, an int or a float, "
                              f"not {type(value).__name__}", spec.loc)


class _Same:
    """A key part for a value that has no exact key of its own: equal only to itself, and holding the value, so
    that its identity is not reused while the key lives."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return other.__class__ is _Same and other.value is self.value

    def __hash__(self):
        return id(self.value)


def exact_key(v):
    """A hashable key equal for two constexpr values only when they trace alike: the class takes part (`8.0` is
    not `8`), floats are exact (`-0.0` is not `0.0`), containers and numpy arrays by content (their `repr`
    abbreviates), any other unhashable value by identity."""
    cls = v.__class__
    if cls is int or cls is bool or cls is str or v is None:
        return cls, v
    if cls is float:
        return cls, v.hex()
    if cls is tuple or cls is list:
        return cls, tuple([exact_key(x) for x in v])
    if cls is dict:
        return cls, tuple(sorted(((exact_key(k), exact_key(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (np.ndarray, np.generic)):
        return cls, v.dtype.str, v.shape, v.tobytes()
    if isinstance(v, constexpr):
        return cls, exact_key(v.value)
    try:
        hash(v)
    except TypeError:
        return cls, _Same(v)
    return cls, v


@functools.lru_cache(maxsize=1024)
def source_digest(source: str) -> str:
    """The sha256 of a function's source text, once per text (the parsed source keeps its text object)."""
    return hashlib.sha256(source.encode()).hexdigest()


def function_ident(fn, source: str) -> tuple:
    """What identifies a function in its cache keys: module, qualified name, file, identity of its code object and
    source hash."""
    return (fn.__module__, fn.__qualname__, fn.__code__.co_filename, id(fn.__code__), source_digest(source))


def _items(values: dict) -> tuple:
    return tuple(sorted([(k, exact_key(v)) for k, v in values.items()], key=_first)) if values else ()


def _first(item: tuple):
    return item[0]


def cache_key(ident: tuple, types: tuple, consts: dict, options: dict, facts: tuple = ()) -> tuple:
    """The specialization key: the function (`function_ident`), the constexpr values, the argument types, the
    compiler options and what is known of the integer arguments (`integer_facts`)."""
    key = (ident, _items(consts), types, _items(options))
    return key + (facts,) if facts else key


ONE = 0            # `integer_facts`: the argument equals 1
MULTIPLE = 16      # `integer_facts`: the argument is a multiple of 16


def integer_facts(typed, plain: frozenset[str] = frozenset()) -> tuple[tuple[str, int], ...]:
    """What a kernel is specialised on about its integer scalar arguments, as Triton specialises them, among
    `(spec, value, type)` triples: `(name, ONE)` for an argument equal to 1, compiled as the constant 1 (so that
    `offs * stride` with a unit stride is proven contiguous), and `(name, MULTIPLE)` for one that is a multiple of
    16 (0 too), compiled as a parameter known to be one (`Param.multiple`: `row * n_cols` then proves rows
    aligned for vector loads and stores, with no test at run time). The arguments stay bound; a value of another
    kind compiles and caches another specialization. The parameters named in `plain` are not specialised on (Triton's
    `do_not_specialize`)."""
    out = []
    for s, v, t in typed:
        cls = v.__class__
        if cls is int:   # the common cases first: a Python int, an array
            if v != 1 and v % MULTIPLE:
                continue
        elif cls is _NDARRAY or not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) \
                or not (v == 1 or v % MULTIPLE == 0):
            continue
        if (t is _I32_SCALAR or (t.__class__ is TileType and not t.shape and t.dtype.is_int
                                 and t.dtype is not DType.BOOL)) and (not plain or s.name not in plain):
            out.append((s.name, ONE if v == 1 else MULTIPLE))
    return tuple(out)


class PassesKey:
    """A pipeline (a tuple of passes) as a part of a compile key: hashed once, where the tuple would hash each pass
    (an attrs `Pass` hashes its fields) at every compile call; equal to the key of an equal pipeline."""

    __slots__ = ("_hash", "passes")

    def __init__(self, passes: tuple):
        self.passes, self._hash = passes, hash(passes)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return other.__class__ is PassesKey and (other.passes is self.passes or other.passes == self.passes)


_CHECKED_DEFAULT: list[tuple] = [()]   # `DEFAULT_PIPELINE` as a tuple, checked once for as long as it holds it


def default_pipeline() -> tuple:
    """`check_pipeline(DEFAULT_PIPELINE)`, checked again only when the list's passes have changed."""
    current = tuple(DEFAULT_PIPELINE)
    checked = _CHECKED_DEFAULT[0]
    if len(current) != len(checked) or not all(map(operator.is_, current, checked)):
        checked = _CHECKED_DEFAULT[0] = check_pipeline(current)
    return checked
