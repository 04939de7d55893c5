"""`@metile.kernel`: a Python function -> a `JITKernel` that traces to Tile IR and launches.

`kernel.trace(*args, **constexprs)` classifies the arguments (`metile.frontend.specialize`), traces
the function's `ast` (`metile.frontend.trace`) and returns the verified Tile IR `Kernel`, cached per
specialization key. `kernel.compile(*args, **constexprs)` runs the lowering pipeline
(`metile.rewrite.pipeline.DEFAULT_PIPELINE`) on it, emits MSL and compiles it on the default device,
cached per specialization key too. `kernel[grid](*args, **constexprs)` compiles, then dispatches one
threadgroup per program: arguments bind `[[buffer(i)]]` in parameter order (constexprs excluded),
numpy arrays are written back, and Python numbers travel as numpy scalars of the parameter's type.
A kernel that the lowering does not handle yet raises `LoweringUnavailableError` at its source line.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

import attrs
import numpy as np

from metile.devices import device
from metile.emit.msl import emit_msl
from metile.frontend.errors import GridError, KernelArgumentError, LoweringUnavailableError, UnsupportedSyntaxError
from metile.frontend.specialize import ParamSpec, arg_type, bind, cache_key, classify
from metile.frontend.trace import Tracer
from metile.ir.errors import Loc
from metile.ir.stmts import Kernel
from metile.ir.types import PtrType
from metile.ir.values import Param
from metile.ir.verify import verify
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.pipeline import DEFAULT_PIPELINE, run

MAX_GRID = (1 << 31) - 1


def visible_names(fn) -> dict:
    """The names a kernel's body and annotations can see: its module's globals and its closure's variables
    (so kernels defined inside functions resolve `metile.constexpr` and helpers like module-level ones)."""
    names = dict(fn.__globals__)
    if fn.__closure__:
        names.update(inspect.getclosurevars(fn).nonlocals)
    return names


class _Source:
    """The parsed function: its `ast`, file, line and column offsets, and parameter kinds."""

    def __init__(self, fn):
        self.file = inspect.getsourcefile(fn) or fn.__code__.co_filename
        lines, first = inspect.getsourcelines(fn)
        raw = "".join(lines)
        self.text = textwrap.dedent(raw)
        self.col_offset = len(lines[0]) - len(lines[0].lstrip())  # what textwrap.dedent removed
        self.line_offset = first - 1
        tree = ast.parse(self.text)
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise UnsupportedSyntaxError("@metile.kernel applies to plain `def` functions", self.loc(fdef))
        self.fdef = fdef
        sig = inspect.signature(fn)
        defaults = {n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
        self.specs: tuple[ParamSpec, ...] = classify(fdef, visible_names(fn), defaults, self.loc)

    def loc(self, node: ast.AST) -> Loc:
        return Loc(self.file, node.lineno + self.line_offset, node.col_offset + self.col_offset)


@attrs.frozen
class CompiledKernel:
    """One specialization of a kernel, compiled: its IR at both levels, its MSL and the device function."""

    entry: str
    tile_ir: Kernel
    metal_ir: Kernel
    msl: str
    threadgroup_size: int
    threadgroup_memory: int
    function: object = attrs.field(repr=False)
    device: object = attrs.field(repr=False)


def scalar_arg(value, t):
    """A runtime scalar argument as the numpy scalar of its parameter type (pointers pass unchanged)."""
    if isinstance(t, PtrType):
        return value
    return t.dtype.numpy.type(value)


class JITKernel:
    """A kernel function; `trace(...)` gives its Tile IR, `kernel[grid](...)` launches it."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._src: _Source | None = None
        self._cache: dict[tuple, Kernel] = {}
        self._compiled: dict[tuple, CompiledKernel] = {}

    @property
    def source(self) -> _Source:
        if self._src is None:
            self._src = _Source(self.fn)
        return self._src

    def specialize(self, args: tuple, kwargs: dict):
        """`(cache key, runtime [(spec, value, type)], constexprs, options)` for one call."""
        src = self.source
        values, consts, options = bind(src.specs, args, kwargs, self.fn.__name__, src.loc(src.fdef))
        typed = [(s, v, arg_type(s, v)) for s, v in values]
        key = cache_key(self.fn, src.text, tuple(t for _, _, t in typed), consts, options)
        return key, typed, consts, options

    def cache_key(self, *args, **kwargs) -> tuple:
        return self.specialize(args, kwargs)[0]

    def trace(self, *args, **kwargs) -> Kernel:
        """The verified Tile IR of the kernel for these arguments and constexprs."""
        return self._trace(self.specialize(args, kwargs))

    def _trace(self, spec) -> Kernel:
        key, typed, consts, _ = spec
        found = self._cache.get(key)
        if found is not None:
            return found
        src = self.source
        params = [Param(s.name, i, t, loc=s.loc) for i, (s, _, t) in enumerate(typed)]
        env = {p.name: p for p in params} | consts
        meta = {k: int(v) for k, v in consts.items() if isinstance(v, (int, np.integer))}
        tracer = Tracer(src.fdef, name=self.fn.__name__, file=src.file, line_offset=src.line_offset,
                        col_offset=src.col_offset, globals_=self._globals(), env=env, params=params, meta=meta)
        kernel = verify(tracer.run(), after="trace")
        self._cache[key] = kernel
        return kernel

    def compile(self, *args, **kwargs) -> CompiledKernel:
        """Lower, emit and compile the kernel for these arguments and constexprs, without launching."""
        return self._compile(self.specialize(args, kwargs))

    def _compile(self, spec) -> CompiledKernel:
        key = spec[0]
        found = self._compiled.get(key)
        if found is not None:
            return found
        tile_ir = self._trace(spec)
        try:
            metal_ir = run(DEFAULT_PIPELINE, tile_ir)
        except UnsupportedConstructError as e:
            raise LoweringUnavailableError(f"cannot launch {self.fn.__name__}: {e.message}", e.loc) from e
        msl = emit_msl(metal_ir)
        dev = device()
        fn = dev.compile(msl, name=f"{metal_ir.name}.metal").function(metal_ir.name)
        compiled = CompiledKernel(metal_ir.name, tile_ir, metal_ir, msl, int(metal_ir.meta["threads_per_threadgroup"]),
                                  0, fn, dev)
        self._compiled[key] = compiled
        return compiled

    def _globals(self) -> dict:
        return visible_names(self.fn)

    def __getitem__(self, grid) -> Launcher:
        return Launcher(self, grid)

    def __call__(self, *args, **kwargs):
        raise KernelArgumentError(f"a kernel is launched with {self.fn.__name__}[grid](...), not called directly")

    def __repr__(self) -> str:
        return f"<metile.kernel {self.fn.__module__}.{self.fn.__qualname__}>"


def normalize_grid(grid) -> tuple[int, ...]:
    """`grid` as a tuple of 1 to 3 positive ints, or a `GridError`."""
    if callable(grid):
        raise GridError("a callable grid is only accepted by autotuned kernels; pass a tuple of ints")
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(dims) <= 3:
        raise GridError(f"a grid has 1, 2 or 3 dimensions, not {len(dims)}")
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise GridError(f"grid dimensions must be ints, not {type(d).__name__}")
        if not 0 < int(d) <= MAX_GRID:
            raise GridError(f"grid {tuple(dims)} is empty or too large: each dimension must be in 1..{MAX_GRID}")
        out.append(int(d))
    return tuple(out)


class Launcher:
    """`kernel[grid]`: calling it traces, checks the grid, then launches."""

    def __init__(self, kernel: JITKernel, grid):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, **kwargs):
        spec = self.kernel.specialize(args, kwargs)  # argument errors first, then kernel errors, then the grid
        typed = spec[1]
        self.kernel._trace(spec)
        grid = normalize_grid(self.grid)
        compiled = self.kernel._compile(spec)
        grid3 = grid + (1,) * (3 - len(grid))
        bound = [scalar_arg(v, t) for _, v, t in typed]
        compiled.device.dispatch_threadgroups(compiled.function, grid3, (compiled.threadgroup_size, 1, 1), bound)


def kernel(fn=None):
    """Decorator: `@metile.kernel` turns a function into a `JITKernel`."""
    if fn is None:
        return kernel
    return JITKernel(fn)


__all__ = ["CompiledKernel", "JITKernel", "Launcher", "kernel", "normalize_grid"]
