"""`@triton.jit` on metile: `JITFunction`, launched with Triton's binding and options, compiled by metile's kernel
machinery (`metile.kernel.JITKernel`) in the Triton dialect (`metile.triton.dialect.TRITON`).

- **Binding.** `kernel[grid](*args, **kwargs)` binds positional arguments to the parameters in declaration order,
  constexprs included (`def k(Out, A: tl.constexpr, B)`, `k[(1,)](out, 1, 2)` gives A=1, B=2), as Triton does; metile's
  own kernels bind runtime parameters first (docs/language.md 2.2). The bound call is handed to the metile kernel as
  its own binding reads it. A callable grid receives the bound arguments by name (defaults included).
- **Options.** `num_warps=N` is metile's `num_simdgroups` (a warp is a simdgroup of 32 threads); `num_stages` is
  metile's `num_stages` (0 is 1); the other options of Triton's NVIDIA and AMD back ends (`num_ctas`, `maxnreg`,
  `enable_fp_fusion`, `debug`, `waves_per_eu`, ... in `IGNORED_OPTIONS`) are accepted and change nothing. A keyword
  that names a parameter sets the parameter. metile's own launch keywords (`sanitize=`, `timeout=`, `in_place=`,
  `num_simdgroups=`) are accepted too.
- **Specialisation** is Triton's: an int equal to 1 is the constant 1 (and reads as the Python number 1 in the body),
  one that is a multiple of 16 is known to be one, except for parameters named (or numbered) in `do_not_specialize`.
- `kernel.warmup(*args, grid=..., **kwargs)` compiles without launching and returns a `CompiledKernel` with Triton's
  attributes; calling a `@triton.jit` function inside a kernel inlines it (`noinline` is accepted).
- **`launch_options(**keywords)`**: metile's launch keywords (`sanitize=`, `timeout=`, `profile=`...) for every
  launch made while the block runs, by whatever code makes it (a library's host code, such as Liger-Kernel's), the
  launch's own keywords winning; the block's value, a `Launches`, lists each launch's kernel name and what it
  returned (a `metile.Profile` with `profile=`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import textwrap
import types

import attrs

from metile.frontend.errors import GridError, KernelArgumentError, OutsideKernelError
from metile.frontend.funcs import Func
from metile.frontend.specialize import NO_DEFAULT
from metile.ir.errors import MetileError
from metile.kernel import JITKernel, _user_error
from metile.language import constexpr
from metile.triton import profiler
from metile.triton.dialect import TRITON

OPTION_NAMES = {"num_warps": "num_simdgroups", "num_stages": "num_stages"}
"""Triton's launch options metile uses, and metile's names of them."""
IGNORED_OPTIONS = frozenset({
    "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid", "launch_pdl", "debug", "sanitize_overflow",
    "extern_libs", "instrumentation_mode", "ir_override", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
    "num_buffers_warp_spec", "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer", "schedule_hint",
    "allowed_dot_input_precisions", "max_num_imprecise_acc_default", "supported_fp8_dtypes", "arch", "backend_name",
})
"""Options of Triton's NVIDIA and AMD compilers that have no meaning on metile's devices: accepted, without effect."""
METILE_KEYWORDS = frozenset({"num_simdgroups", "group_programs", "direct_operands", "sanitize", "timeout", "profile",
                             "profile_only", "in_place"})


class Launches(list):
    """The launches made inside a `launch_options` block, in order: `(kernel name, what the launch returned)`."""

    @property
    def profiles(self) -> list:
        """The `metile.Profile` of each launch made with `profile=`."""
        return [r for _, r in self if r is not None]


_LAUNCH_OPTIONS: contextvars.ContextVar = contextvars.ContextVar("metile_triton_launch_options", default=None)


@contextlib.contextmanager
def launch_options(**keywords):
    """metile's launch keywords for every `@triton.jit` launch in the block (see the module docstring)."""
    unknown = sorted(set(keywords) - METILE_KEYWORDS)
    if unknown:
        raise KernelArgumentError(f"launch_options takes metile's launch keywords ({', '.join(sorted(METILE_KEYWORDS))}"
                                  f"), not {', '.join(unknown)}")
    outer = _LAUNCH_OPTIONS.get()
    merged = {**(outer[0] if outer else {}), **keywords}
    launches = Launches()
    token = _LAUNCH_OPTIONS.set((merged, launches))
    try:
        yield launches
    finally:
        _LAUNCH_OPTIONS.reset(token)


class KernelInterface:
    """What can be launched as `kernel[grid](...)`: `run(*args, grid=..., warmup=False, **kwargs)`."""

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid, warmup=False)


@attrs.frozen
class _Param:
    name: str
    num: int
    is_constexpr: bool
    default: object
    do_not_specialize: bool


class JITFunction(KernelInterface):
    """A `@triton.jit` function: a kernel (`fn[grid](...)`) and a helper other kernels inline when they call it."""

    def __init__(self, fn, version=None, do_not_specialize=None, do_not_specialize_on_alignment=None, debug=None,
                 noinline=None, repr=None, launch_metadata=None):  # noqa: A002 - Triton's names
        if not isinstance(fn, types.FunctionType):
            raise KernelArgumentError(f"@triton.jit applies to functions written with `def`, not {type(fn).__name__}")
        self.fn = fn
        self.module = fn.__module__
        self.version, self.debug, self.noinline, self.launch_metadata = version, debug, noinline, launch_metadata
        self.signature = inspect.signature(fn)
        dns = set(do_not_specialize or ())
        self.do_not_specialize = list(do_not_specialize or ())
        self.do_not_specialize_on_alignment = list(do_not_specialize_on_alignment or ())
        self.kernel = JITKernel(fn, dialect=TRITON_JIT, do_not_specialize=frozenset(
            p for i, p in enumerate(self.signature.parameters) if p in dns or i in dns))
        self.__doc__, self.__name__, self.__qualname__ = fn.__doc__, fn.__name__, fn.__qualname__
        self.__module__, self.__globals__ = fn.__module__, fn.__globals__
        self.func = Func(fn)   # what a call inside another kernel inlines
        self.pre_run_hooks: list = []
        specs = self.kernel.source.specs   # the source is read and the constexprs found once, here
        self.params = [_Param(s.name, i, s.constexpr, self.signature.parameters[s.name].default,
                              s.name in self.kernel.do_not_specialize) for i, s in enumerate(specs)]
        self.arg_names = [p.name for p in self.params]
        self.constexprs = [p.num for p in self.params if p.is_constexpr]
        self._names = tuple(s.name for s in specs)
        self._runtime = tuple(s.name for s in specs if not s.constexpr)
        self._consts = tuple(s.name for s in specs if s.constexpr)
        self._defaults = {s.name: s.default for s in specs if s.default is not NO_DEFAULT}

    # -- binding -----------------------------------------------------------------------------------------------------

    def bind(self, args: tuple, kwargs: dict) -> tuple[dict, dict]:
        """`(arguments by parameter name, options)` for a launch, Triton's way."""
        names, defaults = self._names, self._defaults
        if len(args) > len(names):
            raise KernelArgumentError(f"{self.__name__}() takes {len(names)} arguments but {len(args)} were given",
                                      self.kernel.source.def_loc)
        bound = dict(zip(names, args))
        options = {}
        for k, v in kwargs.items():
            if k in bound:
                raise KernelArgumentError(f"{self.__name__}() got multiple values for argument '{k}'",
                                          self.kernel.source.def_loc)
            if k in defaults or k in names:
                bound[k] = v
            else:
                options[k] = v
        for n in names:
            if n not in bound:
                if n not in defaults:
                    raise KernelArgumentError(f"{self.__name__}() is missing the argument '{n}'",
                                              self.kernel.source.def_loc)
                bound[n] = defaults[n]
        return bound, options

    def _metile_call(self, bound: dict, options: dict) -> tuple[list, dict]:
        """The positional runtime arguments and keywords of the metile kernel's launch."""
        keywords = {n: bound[n] for n in self._consts}
        for k, v in options.items():
            if k in OPTION_NAMES:
                if v is not None:
                    keywords[OPTION_NAMES[k]] = max(v, 1) if k == "num_stages" and isinstance(v, int) else v
            elif k not in IGNORED_OPTIONS:
                keywords[k] = v   # metile's keywords, or a mistake its binding names with a suggestion
        return [bound[n] for n in self._runtime], keywords

    # -- launching ---------------------------------------------------------------------------------------------------

    def run(self, *args, grid, warmup=False, **kwargs):
        """Launch over `grid` (or with `warmup`, compile only and return the `CompiledKernel`)."""
        for hook in self.pre_run_hooks:
            hook(*args, **kwargs)
        try:
            bound, options = self.bind(args, kwargs)
            runtime, keywords = self._metile_call(bound, options)
            if warmup:
                return CompiledKernel(self, self.kernel.compile(*runtime, **keywords), options)
            if callable(grid):
                grid = _call_grid(grid, bound)
        except MetileError as e:
            raise _user_error(e, self.__name__) from None
        extra = _LAUNCH_OPTIONS.get()
        with profiler.launch_scope(self, grid, bound):   # a profile recording with hook="triton" times the launch
            if extra is None:
                result = self.kernel[grid](*runtime, **keywords)
            else:
                result = self.kernel[grid](*runtime, **{**extra[0], **keywords})
                extra[1].append((self.__name__, result))
        return LaunchedKernel(self, runtime, keywords, options, result)

    def warmup(self, *args, grid=None, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __call__(self, *args, **kwargs):
        raise OutsideKernelError(f"{self.__name__}() is a @triton.jit function: launch it with "
                                 f"{self.__name__}[grid](...), or call it inside another @triton.jit function")

    def add_pre_run_hook(self, hook) -> None:
        self.pre_run_hooks.append(hook)

    @property
    def src(self) -> str:
        return textwrap.dedent(inspect.getsource(self.fn))

    @property
    def cache_key(self) -> str:
        return self.kernel.source.text

    @property
    def starting_line_number(self) -> int:
        return self.fn.__code__.co_firstlineno

    def __repr__(self) -> str:
        return f"JITFunction({self.module}:{self.__qualname__})"


def _call_grid(grid, bound: dict):
    try:
        return grid(dict(bound))
    except MetileError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function: its error, at the launch
        raise GridError(f"the grid function {getattr(grid, '__name__', grid)!r} raised {type(e).__name__}: {e}") from e


NOMINAL_REGISTERS = 32
"""`CompiledKernel.n_regs`: Metal reports no register count, so a compiled kernel names this nominal one (with
`driver.active.utils.get_device_properties()["max_num_regs"]`, 65536, occupancy formulas give 64 simdgroups)."""


class _Metadata(types.SimpleNamespace):
    """`CompiledKernel.metadata`: Triton's fields that mean something on metile."""


class CompiledKernel:
    """A compiled specialization, with Triton's attributes: `metadata.shared` (threadgroup memory, bytes),
    `metadata.num_warps` (simdgroups), `n_regs` (nominal, `NOMINAL_REGISTERS`), `n_spills` (0), `asm["msl"]` and
    `asm["tile_ir"]`; `kernel[grid](*args)` launches it with the arguments of a launch of its function."""

    def __init__(self, fn: JITFunction, compiled, options: dict):
        self.fn, self.compiled, self._options = fn, compiled, dict(options)
        self.name = fn.__name__
        plan = compiled.metal_ir.plan
        self.metadata = _Metadata(name=self.name, shared=compiled.threadgroup_memory,
                                  num_warps=plan.threads // 32 if plan is not None else 0,
                                  num_stages=options.get("num_stages", 3), num_ctas=options.get("num_ctas", 1),
                                  threads_per_threadgroup=compiled.threadgroup_size, target=_target())
        self.n_regs, self.n_spills = NOMINAL_REGISTERS, 0
        self.n_max_threads = compiled.threadgroup_size
        self.function = compiled.function

    @property
    def asm(self) -> dict:
        from metile.ir import pretty

        return {"msl": self.compiled.msl, "tile_ir": pretty(self.compiled.tile_ir),
                "metal_ir": pretty(self.compiled.metal_ir)}

    def _init_handles(self) -> None:
        return None   # the device function is ready once compiled

    def __getitem__(self, grid):
        def runner(*args, stream=None):   # the launch options of the warm-up, the arguments of this call
            return self.fn.run(*args, grid=grid, warmup=False, **self._options)
        return runner


class LaunchedKernel:
    """What a launch returns: the kernel's `CompiledKernel` attributes, found when first read, and `profile`, the
    launch's `metile.Profile` when it was made with `profile=` (else None)."""

    __slots__ = ("_args", "_compiled", "_fn", "profile")

    def __init__(self, fn: JITFunction, runtime: list, keywords: dict, options: dict, result=None):
        self._fn, self._args, self._compiled = fn, (runtime, keywords, options), None
        self.profile = result

    def __getattr__(self, name):
        if self._compiled is None:
            runtime, keywords, options = self._args
            self._compiled = CompiledKernel(self._fn, self._fn.kernel.compile(*runtime, **keywords), options)
        return getattr(self._compiled, name)


@functools.cache
def _target():
    from metile.triton.backends.compiler import GPUTarget
    from metile.triton.runtime.driver import metal_target

    return GPUTarget("metal", metal_target(), 32)


def jit(fn=None, *, version=None, repr=None, launch_metadata=None, do_not_specialize=None,  # noqa: A002
        do_not_specialize_on_alignment=None, debug=None, noinline=None):
    """`@triton.jit`, or `@triton.jit(do_not_specialize=[...], debug=..., noinline=...)`."""
    def decorator(f):
        return JITFunction(f, version=version, do_not_specialize=do_not_specialize,
                           do_not_specialize_on_alignment=do_not_specialize_on_alignment, debug=debug,
                           noinline=noinline, repr=repr, launch_metadata=launch_metadata)
    return decorator if fn is None else decorator(fn)


def _inline(f: JITFunction) -> Func:
    return f.func


def _static_arg(value) -> bool:
    return TRITON.static_arg(value) or isinstance(value, JITFunction)


TRITON_JIT = attrs.evolve(TRITON, helpers={JITFunction: _inline}, static_arg=_static_arg)
"""Triton's dialect with its helpers: a call of a `@triton.jit` function inside a kernel inlines it, and one given as
an argument is a compile-time value."""

__all__ = ["IGNORED_OPTIONS", "OPTION_NAMES", "CompiledKernel", "JITFunction", "KernelInterface", "TRITON_JIT", "jit",
           "constexpr"]
