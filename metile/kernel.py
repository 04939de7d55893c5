"""`@metile.kernel`: a Python function -> a `JITKernel` that traces to Tile IR, compiles and launches.

`kernel.trace(*args, **constexprs)` classifies the arguments (`metile.frontend.specialize`), traces
the function's `ast` (`metile.frontend.trace`) and returns the Tile IR `Kernel`, cached per
specialization key. The function's source is read and parsed once per code object. The IR is
verified in debug mode only (the Tile IR here, each pass's result in the pipeline).
`kernel.compile(*args, **constexprs)` runs the kernel's pipeline on it (`metile.DEFAULT_PIPELINE`
unless `@metile.kernel(pipeline=[...])` or `kernel.with_pipeline([...])` chose another), checks the
result against the device's limits, emits MSL and compiles it on the default device. Compiles are
cached per (specialization key, pipeline, debug settings): kernels with different pipelines never
share a compiled entry. `kernel[grid](*args, **constexprs)` compiles, then dispatches one threadgroup
per program: arguments bind `[[buffer(i)]]` in parameter order (constexprs excluded), numpy arrays
are written back, and Python numbers travel as numpy scalars of the parameter's type. A kernel that
the lowering does not handle yet raises `LoweringUnavailableError` at its source line.
`kernel[grid].prepare(*args, **constexprs)` does all of it but the dispatch once and returns a
`PreparedLaunch`, which dispatches the same arguments again, unchecked, each time it is called.

`sanitize=`, `timeout=` and `in_place=` at a launch are launch options, handed to the device (unless the kernel has a
parameter of that name, which takes the keyword); they are no part of the compile's key.

This is the only module that reads the environment, and only when it matters:
- `METILE_DEBUG` (see `metile.debug`) and `METILE_SANITIZE` (1: every launch runs with `sanitize=True` unless
  it says `sanitize=False`) on every launch (`os.environ.get`, so a change made through `os.environ` is seen by
  the next launch): a launch whose argument types,
  constexprs, launch options and these two were seen before is one more dict lookup away from the dispatch
  (no tracing, passes, emission or parsing). `METILE_DEBUG_DIR` is read when a compile shows stages.
- `METILE_DEVICE` (through `metile.device()`) when a kernel compiles; the compiled kernel keeps its device.
- `METILE_TRACEBACK` when a `MetileError` leaves a public entry point (a launch, `prepare`, a prepared launch's
  call, `compile`, `trace`, `cache_key`, the decorator): unless it is `full`, the error is raised with the
  user's frames only, ending at the kernel's line (`metile.tracebacks`).

The dispatch itself, the device and grid limits and the reports of faults at Python lines are in
`metile.launch`.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import types

import attrs
import numpy as np

from metile.debug import DebugSettingError, DebugSettings, Dump, debug_settings, short_hash
from metile.emit.artifact import emit_artifact
from metile.frontend.composite_args import build_composites, expand_composites
from metile.frontend.dialect import METILE, Dialect
from metile.frontend.errors import (
    GridError,
    KernelArgumentError,
    KernelTypeError,
    LoweringUnavailableError,
    UnsupportedSyntaxError,
)
from metile.frontend.source import parsed as parse_cached
from metile.frontend.source import visible_names
from metile.frontend.specialize import (
    MULTIPLE,
    NO_DEFAULT,
    ONE,
    Binding,
    ParamSpec,
    PassesKey,
    arg_type,
    bind,
    cache_key,
    classify,
    compile_options,
    compile_target,
    default_pipeline,
    exact_key,
    function_defaults,
    function_ident,
    integer_facts,
)
from metile.frontend.trace import Tracer
from metile.ir.errors import Loc, MetileError
from metile.ir.names import ir_name
from metile.ir.ops import Stage
from metile.ir.stmts import CompileOptions, Kernel
from metile.ir.values import Const, Param
from metile.ir.verify import verify
from metile.launch import (
    MAX_GRID,
    MAX_GRID_THREADS,
    CompiledKernel,
    Launch,
    PreparedLaunch,
    at_python_line,
    check_device_limits,
    compile_target_on,
    grid3,
    normalize_grid,
)
from metile.launch_key import MULTIPLE_TOKEN, ONE_TOKEN, type_token
from metile.metal.args import run_options_problem
from metile.metal.errors import LaunchError, ProfileError
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.pipeline import Pass, PipelineError, check_pipeline, pass_key, pass_name, run
from metile.tracebacks import for_user, traceback_setting

_NO_OPTIONS = CompileOptions()   # a launch that gives no compiler option
_SANITIZE_WORDS = {"": False, "0": False, "false": False, "no": False, "off": False,
                   "1": True, "true": True, "yes": True, "on": True}


def _sanitize_setting(raw) -> bool:
    """`METILE_SANITIZE` (None when unset) as a bool, or a `DebugSettingError`."""
    if raw is None:
        return False
    text = raw
    found = _SANITIZE_WORDS.get(text.strip().lower())
    if found is None:
        raise DebugSettingError(f"METILE_SANITIZE={text!r} is not a setting: use 1 to run every @metile.kernel launch "
                                "with the CPU device's sanitizer, or 0 (or leave it unset) for none")
    return found


class _Source:
    """The parsed function: its `ast`, file, line and column offsets, and parameter kinds."""

    def __init__(self, fn):
        parsed = parse_cached(fn)
        self.file, self.text = parsed.file, parsed.text
        self.col_offset, self.line_offset = parsed.col_offset, parsed.line_offset
        self.prepared = parsed.prepared
        fdef = parsed.fdef
        if not isinstance(fdef, ast.FunctionDef):
            raise UnsupportedSyntaxError("@metile.kernel applies to plain `def` functions", self.loc(fdef))
        self.fdef = fdef
        self.def_loc = self.loc(fdef)
        self.specs: tuple[ParamSpec, ...] = classify(fdef, visible_names(fn), function_defaults(fn), self.loc)
        self.binding = Binding(self.specs)   # how calls bind to the parameters
        self.ident = function_ident(fn, self.text)   # the function's part of its cache keys
        self.ir_names = {s.name: ir_name(s.name) for s in self.specs}   # each parameter's name in the IR

    def loc(self, node: ast.AST) -> Loc:
        return self.prepared.loc(node)


def device():
    """`metile.device()`, imported by the first compile: defining, tracing and lowering a kernel load no device."""
    from metile.devices import device as current
    return current()


def _too_deep(name: str, loc: Loc | None) -> KernelTypeError:
    return KernelTypeError(f"kernel {name} computes a value through a chain of operations too deep for metile to "
                           f"compile (Python's recursion limit, {sys.getrecursionlimit()}): a Python `for` over a "
                           "long range unrolls into one expression; use metile.tile_range for a runtime loop", loc)


class JITKernel:
    """A kernel function; `trace(...)` gives its Tile IR, `compile(...)` its MSL, `kernel[grid](...)` launches it.

    `pipeline` is the tuple of passes that lowers its Tile IR to Metal IR; `debug` verifies the IR after
    every pass of it (as a non-empty `METILE_DEBUG` does).
    """

    def __init__(self, fn, *, pipeline: list[Pass] | tuple[Pass, ...] | None = None, debug: bool = False,
                 dialect: Dialect = METILE, do_not_specialize: frozenset[str] = frozenset()):
        if not isinstance(fn, types.FunctionType):
            raise UnsupportedSyntaxError(f"{dialect.name} applies to functions written with `def`, not to "
                                         f"{type(fn).__name__} {fn!r:.60}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.pipeline: tuple[Pass, ...] = default_pipeline() if pipeline is None else check_pipeline(pipeline)
        self.debug = bool(debug)
        self.dialect = dialect   # the rules of the kernel's language
        self.do_not_specialize = frozenset(do_not_specialize)   # parameters not specialised on 1 and multiples of 16
        self._quiet = DebugSettings(verify_each=self.debug)
        self._src: _Source | None = None
        self._cache: dict[tuple, Kernel] = {}                # Tile IR per specialization key
        self._verified: set[tuple] = set()                  # the keys whose Tile IR has been verified
        self._compiled: dict[tuple, CompiledKernel] = {}     # per (specialization key, pipeline, debug settings)
        self._launches: dict[tuple, Launch] = {}            # per (METILE_DEBUG, argument types, constexprs)
        self._n_runtime: int | None = None
        self._runtime_names: frozenset[str] = frozenset()
        self._plain_at: frozenset[int] = frozenset()   # positions of the `do_not_specialize` parameters
        self._passes_key: PassesKey | None = None   # `pipeline` as a part of compile keys, hashed once

    def with_pipeline(self, pipeline: list[Pass] | tuple[Pass, ...]) -> JITKernel:
        """The same kernel lowered by `pipeline` instead; it shares this kernel's parsed source, Tile IR
        and compile caches (compiled entries are keyed by pipeline, so they never mix)."""
        other = JITKernel(self.fn, pipeline=pipeline, debug=self.debug, dialect=self.dialect,
                          do_not_specialize=self.do_not_specialize)
        other._src, other._cache, other._compiled = self._src, self._cache, self._compiled
        other._verified = self._verified
        return other

    @property
    def source(self) -> _Source:
        if self._src is None:
            self._src = _Source(self.fn)
        return self._src

    def specialize(self, args: tuple, kwargs: dict):
        """`(cache key, runtime [(spec, value, type)], constexprs, options, launch options, integer facts, target)`
        for one call (the launch options' values are checked here; they are no part of the key; the integer facts,
        `integer_facts`, are; the target is the `AppleTarget` of the option `target=`, None when not given)."""
        src = self.source
        values, consts, options, launch = bind(src.binding, args, kwargs, self.fn.__name__, src.def_loc,
                                               self.dialect.static_arg)
        if options or "NUM_SG" in consts:   # checked here, kept in the spec for `_trace` to apply
            compiled = compile_options(options, self.fn.__name__, src.def_loc, consts)
        else:
            compiled = _NO_OPTIONS
        if launch:
            problem = run_options_problem(launch.get("sanitize", False), launch.get("timeout"),
                                          launch.get("profile"), launch.get("profile_only", False))
            in_place = launch.get("in_place")
            if problem is None and in_place is not None and in_place.__class__ is not bool and in_place != "checked":
                problem = (f"in_place={in_place!r} must be True (bind the arrays as their own memory, without "
                           "copies or guard pages), 'checked' (bind them so in the kernel's checked build, whose "
                           "accesses are checked), False (copy them) or None (the device's setting)")
            if problem is not None:
                raise KernelArgumentError(f"{self.fn.__name__}[grid](...): {problem}", src.def_loc)
        if self.dialect.composite is not None:   # arguments standing for several (Triton's host descriptors)
            values = expand_composites(values, consts, self.dialect.composite)
        typing = self.dialect.arg_type or arg_type   # the language's typing of arguments, or metile's
        typed = [(s, v, typing(s, v)) for s, v in values]
        facts = integer_facts(typed, self.do_not_specialize)
        key = cache_key(src.ident, tuple([t for _, _, t in typed]), consts, options, facts)
        target = compile_target(options.get("target"), self.fn.__name__, src.def_loc) if options else None
        return key, typed, consts, compiled, launch, facts, target

    def cache_key(self, *args, **kwargs) -> tuple:
        try:
            return self.specialize(args, kwargs)[0]
        except MetileError as e:
            raise _user_error(e, self.fn.__name__) from None

    def trace(self, *args, **kwargs) -> Kernel:
        """The Tile IR of the kernel for these arguments and constexprs (verified in debug mode)."""
        try:
            spec = self.specialize(args, kwargs)
            env = os.environ.get("METILE_DEBUG")
            return self._trace(spec, self.debug or bool(env and env.strip()))  # as `_settings(env).verify_each`
        except MetileError as e:
            raise _user_error(e, self.fn.__name__) from None

    def _trace(self, spec, verify_each: bool) -> Kernel:
        """The traced Tile IR, cached per specialization; verified when `verify_each` (debug mode)."""
        key, typed, consts = spec[:3]
        found = self._cache.get(key)
        if found is None:
            src = self.source
            facts = dict(spec[5])   # the integer arguments read as 1, or known multiples of 16
            names = src.ir_names
            params, env, ones = [], {}, []
            for i, (s, _, t) in enumerate(typed):
                name = s.name
                fact = facts.get(name) if facts else None
                env[name] = p = Param(names.get(name) or ir_name(name), i, t, MULTIPLE if fact == MULTIPLE else 1,
                                      loc=s.loc)
                params.append(p)
                if fact == ONE:
                    ones.append((name, t))
            env.update(consts)
            build_composites(env, consts)
            for name, t in ones:   # after the composites, which are built of the parameters
                env[name] = 1 if self.dialect.one_as_number else Const(1, t.dtype)
            meta = {names.get(k) or ir_name(k): int(v) for k, v in consts.items()
                    if v.__class__ is int or isinstance(v, (int, np.integer))}
            tracer = Tracer(src.fdef, name=ir_name(self.fn.__name__), file=src.file, line_offset=src.line_offset,
                            col_offset=src.col_offset, globals_=self._globals(), env=env, params=params, meta=meta,
                            prepared=src.prepared, dialect=self.dialect)
            try:
                found = tracer.run()
            except RecursionError:
                raise _too_deep(self.fn.__name__, src.def_loc) from None
            options = spec[3]
            if tracer.thread_level and options.num_threads is None and isinstance(consts.get("BLOCK"), int):
                # meTile's convention, here and nowhere else: a thread-level kernel runs BLOCK threads
                options = attrs.evolve(options, num_threads=int(consts["BLOCK"]))
            if options is not _NO_OPTIONS:
                found = attrs.evolve(found, options=options)
            if verify_each:
                verify(found, after="trace")
                self._verified.add(key)
            self._cache[key] = found
        elif verify_each and key not in self._verified:
            verify(found, after="trace")
            self._verified.add(key)
        return found

    def compile(self, *args, **kwargs) -> CompiledKernel:
        """Lower, emit and compile the kernel for these arguments and constexprs, without launching."""
        try:
            spec = self.specialize(args, kwargs)
            return self._compile(spec, self._settings(os.environ.get("METILE_DEBUG")))
        except MetileError as e:
            raise _user_error(e, self.fn.__name__) from None

    def _settings(self, spec: str | None) -> DebugSettings:
        """The debug settings for `METILE_DEBUG=spec` (read by the caller) and this kernel's `debug`."""
        if not spec:
            return self._quiet
        return debug_settings(spec, os.environ.get("METILE_DEBUG_DIR") or None, verify_each=self.debug)

    def lower(self, *args, **kwargs) -> Kernel:
        """The Metal IR the kernel's pipeline lowers it to for these arguments and constexprs (for its `target=`, else
        an M1: no device is loaded), without emitting MSL or compiling it (its `plan` says what a launch needs)."""
        try:
            spec = self.specialize(args, kwargs)
            return self._lower(spec, self._settings(os.environ.get("METILE_DEBUG")), None, None)[1]
        except MetileError as e:
            raise _user_error(e, self.fn.__name__) from None

    def _compile(self, spec, settings: DebugSettings, build: bool = True) -> CompiledKernel:
        """The kernel compiled for `spec`; `build=False` (a launch) leaves the CPU device's C++ build to the first
        dispatch, which builds only what it runs (`CpuDevice.compile`)."""
        passes = self._passes_key   # `pipeline` as a part of the key, made again if `pipeline` was replaced
        if passes is None or passes.passes is not self.pipeline:
            passes = self._passes_key = PassesKey(self.pipeline)
        key = (spec[0], passes, settings)
        found = self._compiled.get(key)
        if found is not None:
            if build:   # compiled by a launch, which may have built another build only (or none yet)
                found.device.compile(found.artifact)
            return found
        name = self.fn.__name__
        dump = Dump(settings, name, spec[2], short_hash(self._stable_key(spec))) if settings.stages else None
        dev = device()
        tile_ir, metal_ir = self._lower(spec, settings, dump, dev)
        tpt, tg_memory = metal_ir.plan.threads, metal_ir.plan.threadgroup_memory
        check_device_limits(name, tpt, tg_memory, dev, tile_ir.loc, metal_ir, tile_ir)
        try:
            artifact = emit_artifact(metal_ir)
        except RecursionError:
            raise _too_deep(name, tile_ir.loc) from None
        if dump is not None:
            dump.msl(artifact.msl)
        fn = dev.compile(artifact, build=build).function(artifact.entry)
        fn_max = getattr(fn, "max_total_threads_per_threadgroup", tpt)
        if tpt > fn_max:
            raise LaunchError(f"kernel {name} runs {tpt} threads per threadgroup; its compiled pipeline on "
                              f"device {dev.name!r} allows at most {fn_max}", tile_ir.loc)
        max_grid = (min(MAX_GRID, MAX_GRID_THREADS // tpt), MAX_GRID, MAX_GRID)
        compiled = CompiledKernel(tile_ir, metal_ir, artifact, max_grid, fn, dev)
        self._compiled[key] = compiled
        return compiled

    def _lower(self, spec, settings: DebugSettings, dump: Dump | None, dev) -> tuple[Kernel, Kernel]:
        """The traced Tile IR and the Metal IR the pipeline lowers it to for the target on `dev` (its plan checked)."""
        tile_ir = self._trace(spec, settings.verify_each)
        name = self.fn.__name__
        target = compile_target_on(name, spec[6], dev, tile_ir.loc)
        if dump is not None:
            dump.ir("tile_ir", tile_ir)
        try:
            metal_ir = run(self.pipeline, tile_ir, verify_each=settings.verify_each,
                           on_pass=dump.after_pass if dump is not None else None, target=target)
        except UnsupportedConstructError as e:
            raise LoweringUnavailableError(f"cannot launch {name}: {e.message}", e.loc) from e
        except RecursionError:
            raise _too_deep(name, tile_ir.loc) from None
        if metal_ir.stage is not Stage.METAL:
            last = pass_name(self.pipeline[-1]) if self.pipeline else "an empty pipeline"
            raise PipelineError(f"the pipeline of {name} ends in {metal_ir.stage.value} IR after {last}; "
                                f"its passes must lower the kernel to Metal IR", tile_ir.loc)
        if dump is not None:
            dump.ir("metal_ir", metal_ir)
        if metal_ir.plan is None:
            raise PipelineError(f"the pipeline of {name} lowers it without a launch plan (plan_launch sets one)",
                                tile_ir.loc)
        return tile_ir, metal_ir

    def _stable_key(self, spec) -> tuple:
        """The compile's cache key without process-specific parts (object ids), for dump file names."""
        key = spec[0]
        ident = key[0]
        passes = tuple(pass_key(p) for p in self.pipeline)
        return (ident[0], ident[1], ident[-1], *key[1:], passes)

    def _fast_key(self, args: tuple, kwargs: dict, debug, sanitize) -> tuple | None:
        """The launch-cache key: `METILE_DEBUG` and `METILE_SANITIZE` as the environment holds them, each runtime
        argument's type token and each constexpr or option with its class; None when a runtime argument comes by
        keyword or has no cheap token."""
        n = self._n_runtime
        if n is None:
            specs = self.source.specs
            self._runtime_names = frozenset(s.name for s in specs if not s.constexpr)
            self._plain_at = frozenset(map(self.source.binding.ordered.index, self.do_not_specialize))
            n = self._n_runtime = len(self._runtime_names)
        if len(args) < n:
            return None
        out = [debug, sanitize]
        for a in args[:n]:
            tok = type_token(a)
            if tok is None:
                return None
            out.append(tok)
        for i in self._plain_at:   # parameters not specialised on 1 and multiples of 16: an int is an int
            out[i + 2] = int if out[i + 2] is ONE_TOKEN or out[i + 2] is MULTIPLE_TOKEN else out[i + 2]
        for a in args[n:]:
            cls = a.__class__
            out.append((cls, a) if cls is int or cls is bool or cls is str else exact_key(a))
        if kwargs:
            runtime = self._runtime_names
            for k, v in kwargs.items():
                if k in runtime:
                    return None
                cls = v.__class__
                out.append((k, cls, v) if cls is int or cls is bool or cls is str else (k, exact_key(v)))
        return tuple(out)

    def _launch_options(self, given: dict, sanitize_env, dev) -> dict:
        """The keywords a launch gives its device: `sanitize=True` when the launch or `METILE_SANITIZE` (as the
        environment holds it) asks for it, the launch's keyword first; `timeout=`, `profile=`, `profile_only=` and
        `in_place=` when the launch gives them. The sanitizer, profiles and arrays bound in place are CPU device
        features."""
        sanitize = given.get("sanitize")
        if sanitize is None:
            sanitize = _sanitize_setting(sanitize_env)
        out = {}
        if sanitize:
            asked = "sanitize=True" if given.get("sanitize") else "METILE_SANITIZE asks for the sanitizer, but it"
            self._cpu_only(dev, "supports_sanitize", LaunchError, f"{asked} is a CPU device feature")
            out["sanitize"] = True
        if given.get("timeout") is not None:
            out["timeout"] = given["timeout"]
        profile = given.get("profile")
        if profile is not None and profile is not False:
            self._cpu_only(dev, "supports_profile", ProfileError, "profile= counts on the CPU device")
            out["profile"] = profile
        if given.get("profile_only") is not None:
            out["profile_only"] = given["profile_only"]
        in_place = given.get("in_place")
        if in_place:
            self._cpu_only(dev, "binds_in_place", LaunchError, f"in_place={in_place!r} is a CPU device feature")
        if in_place is not None and getattr(dev, "binds_in_place", False):
            out["in_place"] = in_place
        return out

    def _cpu_only(self, dev, feature: str, error: type, what: str) -> None:
        """Refuse a CPU device feature on a device without it, at the kernel's definition."""
        if not getattr(dev, feature, False):
            raise error(f"{what}; kernel {self.fn.__name__} runs on device {dev.name!r} (run it on "
                        "metile.device('cpu'), e.g. with METILE_DEVICE=cpu)", self.source.def_loc)

    def _globals(self) -> dict:
        return visible_names(self.fn)

    def __getitem__(self, grid) -> Launcher:
        return Launcher(self, grid)

    def __call__(self, *args, **kwargs):
        error = KernelArgumentError(f"a kernel is launched with {self.fn.__name__}[grid](...), not called directly")
        raise _user_error(error, self.fn.__name__) from None

    def __repr__(self) -> str:
        return f"<metile.kernel {self.fn.__module__}.{self.fn.__qualname__}>"


class Launcher:
    """`kernel[grid]`: calling it compiles (once per argument types and constexprs), checks the grid, launches;
    `prepare(...)` does all but the launch once and returns a `PreparedLaunch` that launches when called."""

    __slots__ = ("grid", "kernel", "meta_grid")

    def __init__(self, kernel: JITKernel, grid):
        self.kernel = kernel
        self.grid = grid
        self.meta_grid = callable(grid)  # Triton's `grid(meta)`: called with the launch's arguments by name

    def __call__(self, *args, **kwargs):
        k = self.kernel
        try:
            grid = self.grid if not self.meta_grid else self.grid_of(args, kwargs)
            getenv = os.environ.get
            debug, sanitize = getenv("METILE_DEBUG"), getenv("METILE_SANITIZE")
            key = k._fast_key(args, kwargs, debug, sanitize)
            try:
                entry = k._launches.get(key)
            except TypeError:  # an unhashable constexpr: no launch cache for this call
                key = entry = None
            if entry is None:
                entry, args = self._launch(grid, key, debug, sanitize, args, kwargs)
            counted = entry(grid, args)
        except MetileError as e:
            raise _user_error(e, k.fn.__name__) from None
        return counted

    def grid_of(self, args: tuple, kwargs: dict):
        """The grid a callable `grid` gives for this call: it receives the kernel's arguments by name (runtime
        arguments, constexprs with their defaults, and the other launch keywords), as Triton's `grid(meta)` does."""
        src = self.kernel.source
        meta = {s.name: s.default for s in src.specs if s.default is not NO_DEFAULT}
        meta.update(zip(src.binding.ordered, args))
        meta.update(kwargs)
        try:
            return self.grid(meta)
        except MetileError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's function: its error, at the launch
            raise GridError(f"the grid function {getattr(self.grid, '__name__', self.grid)!r} raised "
                            f"{type(e).__name__}: {e}") from e


    def _launch(self, grid, key, debug, sanitize, args, kwargs) -> tuple[Launch, list]:
        """The launch for these arguments (compiled if need be, and cached under `key` unless it is None) and the
        runtime arguments; argument errors come first, then the kernel's, then the grid's."""
        k = self.kernel
        spec = k.specialize(args, kwargs)
        settings = k._settings(debug)
        k._trace(spec, settings.verify_each)
        grid3(grid)
        compiled = k._compile(spec, settings, build=False)
        entry = Launch(compiled, spec[1], k._launch_options(spec[4], sanitize, compiled.device))
        if key is not None:
            k._launches[key] = entry
        return entry, [v for _, v, _ in spec[1]]

    def prepare(self, *args, **kwargs) -> PreparedLaunch:
        """This launch compiled, checked and bound once, as a `PreparedLaunch`: calling it dispatches it again."""
        name = self.kernel.fn.__name__
        try:
            getenv = os.environ.get
            grid = self.grid if not self.meta_grid else self.grid_of(args, kwargs)
            entry, values = self._launch(grid, None, getenv("METILE_DEBUG"), getenv("METILE_SANITIZE"), args, kwargs)
            return PreparedLaunch(entry, grid, values, name, _user_error)
        except MetileError as e:
            raise _user_error(e, name) from None


def kernel(fn=None, *, pipeline: list[Pass] | tuple[Pass, ...] | None = None, debug: bool = False):
    """Decorator: `@metile.kernel` turns a function into a `JITKernel`.

    `@metile.kernel(pipeline=[...])` lowers it with those passes instead of `metile.DEFAULT_PIPELINE`;
    `@metile.kernel(debug=True)` verifies the IR after every pass.
    """
    if fn is None:
        return functools.partial(kernel, pipeline=pipeline, debug=debug)
    try:
        return JITKernel(fn, pipeline=pipeline, debug=debug)
    except MetileError as e:
        raise _user_error(e, getattr(fn, "__name__", "kernel")) from None


def _user_error(error: MetileError, name: str) -> MetileError:
    """What a public entry point raises `from None` for `error`, caught there: the error with a traceback of the
    kernel's line only (`metile.tracebacks.for_user`; `name` is the kernel's). With `METILE_TRACEBACK=full` this
    raises the error itself, its traceback and the exceptions it came from kept (less the entry point's frame,
    which the raise adds again)."""
    if traceback_setting(os.environ.get("METILE_TRACEBACK")):
        tb = error.__traceback__
        raise error.with_traceback(None if tb is None else tb.tb_next)
    return for_user(error, name)


__all__ = ["MAX_GRID", "MAX_GRID_THREADS", "CompiledKernel", "JITKernel", "Launcher", "PreparedLaunch",
           "at_python_line", "check_device_limits", "grid3", "kernel", "normalize_grid"]
