"""`@metile.autotune`: choose a kernel's constexprs and compiler options by timing candidate configurations.

```python
@metile.autotune(configs=[metile.Config(BLOCK=128), metile.Config(BLOCK=256, num_simdgroups=8)], key=["n"])
@metile.kernel
def scale(X, Y, n, BLOCK: metile.constexpr): ...

scale[lambda meta: (metile.cdiv(meta["n"], meta["BLOCK"]),)](x, y, n)
```

The first launch with a new value of the `key` arguments (and new argument types) tunes: the configurations are
pruned (the user's `prune_configs_by`, then those whose threads or threadgroup memory the device cannot give,
found by lowering each one without compiling it), each remaining one is compiled, launched `warmup` times and
timed over `rep` launches (`metile.testing.bench_calls`), and the fastest median wins. A configuration that fails
to compile or faults is skipped with its error; when none is left, `AutotuneError` lists every configuration and
why. The choice is kept in memory and on disk (`metile.cache`), keyed by what decides it: the kernel's source and
pipeline, the configurations, the key values and argument types, the device and metile's version; a later process
finds it there without timing anything. `METILE_AUTOTUNE=off` skips timing: the stored choice, else the first
configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable

import numpy as np

from metile import cache
from metile.devices import device
from metile.frontend.errors import KernelArgumentError
from metile.frontend.specialize import COMPILER_OPTIONS, MET_TILE_OPTIONS, NO_DEFAULT, exact_key
from metile.ir.errors import MetileError
from metile.kernel import JITKernel, Launcher, PreparedLaunch, _user_error
from metile.kernel import kernel as make_kernel
from metile.rewrite.passes import pass_key

AUTOTUNE_ENV = "METILE_AUTOTUNE"
_DTYPED: dict[type, bool] = {int: False, float: False, bool: False, np.ndarray: True}   # per class: an array?
ALIASES = {"num_warps": "num_simdgroups"}   # Triton's name for the same thing (a warp is a simdgroup of 32)


class AutotuneError(MetileError):
    """A mistake in `metile.autotune`'s arguments or a launch of an autotuned kernel, or every configuration
    failing (the message lists each one and why)."""


class Config:
    """One candidate of `metile.autotune`: constexpr values and compiler options (`num_simdgroups`, `num_stages`,
    `group_programs`, `direct_operands`; Triton's `num_warps` is `num_simdgroups`). `Config(BLOCK=128,
    num_simdgroups=4)`, or Triton's `Config({"BLOCK": 128}, num_warps=4)`."""

    __slots__ = ("_all", "_suffix", "kwargs", "options")

    def __init__(self, kwargs: dict | None = None, **values):
        if kwargs is not None and not isinstance(kwargs, dict):
            raise AutotuneError(f"Config takes its constexprs as keywords or one dict, not {type(kwargs).__name__}")
        merged = dict(kwargs or {})
        options = {}
        for name, v in values.items():
            name = ALIASES.get(name, name)
            if name in COMPILER_OPTIONS:
                if v is not None:
                    options[name] = v
            else:
                merged[name] = v
        clash = sorted(set(merged) & set(options))
        if clash:
            raise AutotuneError(f"Config gives {', '.join(clash)} twice")
        self.kwargs = merged       # the constexprs
        self.options = options     # the compiler options
        self._all = {**merged, **options}
        # what these keywords add to a kernel's launch-cache key (`JITKernel._fast_key`), found once
        self._suffix = tuple((k, v.__class__, v) if v.__class__ in (int, bool, str) else (k, exact_key(v))
                             for k, v in self._all.items())

    def all_kwargs(self) -> dict:
        """The constexprs and compiler options, as one launch's keywords."""
        return dict(self._all)

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.all_kwargs().items()) + ")"

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self.all_kwargs() == other.all_kwargs()

    def __hash__(self) -> int:
        return hash(repr(self))


def autotune(configs: Iterable[Config], key: Iterable[str], warmup: int = 5, rep: int = 20, verbose: bool = False,
             prune_configs_by: dict | None = None, reset_to_zero: Iterable[str] | None = None,
             restore_value: Iterable[str] | None = None, by: str = "time", gpu: str | None = None):
    """Decorator over `@metile.kernel` (or a plain kernel function): see the module docstring.

    `key`: names of the kernel's arguments whose values (arrays: their shapes) decide the choice. `warmup`, `rep`:
    untimed and timed launches per configuration. `verbose`: print each configuration's time or why it was left
    out, and a progress bar while tuning. `prune_configs_by`: Triton's `{"early_config_prune": f(configs,
    named_args, **kwargs) -> configs, "perf_model": f(**named_args, **config) -> estimate, "top_k": n}`.
    `reset_to_zero`, `restore_value`: array arguments zeroed before each timed launch, or restored after tuning
    (kernels that accumulate into, or update, their outputs). `by="model"` ranks the configurations by the Apple
    GPU model's estimate on `gpu` (a name of `metile.profile.GPUS`) instead of timing them: each is launched once
    with `profile=` on the CPU device (a sample of its threadgroups), and the smallest `estimate_s` wins."""
    settings = dict(configs=configs, key=key, warmup=warmup, rep=rep, verbose=verbose,
                    prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero, restore_value=restore_value,
                    by=by, gpu=gpu)

    def decorate(fn) -> Autotuner:
        k = fn if isinstance(fn, JITKernel) else fn.kernel if isinstance(fn, Autotuner) else None
        if k is None:
            if not callable(fn):
                raise AutotuneError(f"metile.autotune decorates a kernel function, not {type(fn).__name__}")
            k = make_kernel(fn)
        try:
            return Autotuner(k, **settings)
        except MetileError as e:
            raise _user_error(e, k.fn.__name__) from None

    return decorate


class Autotuner:
    """An autotuned kernel: `tuned[grid](*args, **kwargs)` launches it with the configuration chosen for these
    arguments, `tuned[grid].prepare(...)` returns the winner's prepared launch; `tuned.kernel` is the kernel
    itself and `tuned.cache` the choices made in this process (tuning key -> Config)."""

    def __init__(self, kernel: JITKernel, *, configs, key, warmup, rep, verbose, prune_configs_by, reset_to_zero,
                 restore_value, by="time", gpu=None):
        self.kernel = kernel
        src = kernel.source
        where = src.def_loc
        self.by, self.gpu = _ranking(by, gpu, where)
        params = {s.name: s for s in src.specs}
        self.configs = _configs(configs, params, where)
        self.key = _names(key, "key", params, where, arrays_only=False)
        self.reset_to_zero = _names(reset_to_zero or (), "reset_to_zero", params, where, arrays_only=True)
        self.restore_value = _names(restore_value or (), "restore_value", params, where, arrays_only=True)
        for name, value in (("warmup", warmup), ("rep", rep)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "rep"):
                raise AutotuneError(f"autotune: {name}={value!r} must be a whole number of launches"
                                    f"{' (at least 1)' if name == 'rep' else ''}", where)
        self.warmup, self.rep, self.verbose = warmup, rep, bool(verbose)
        self.prune = _prune_settings(prune_configs_by, where)
        ordered = src.binding.ordered
        self._key_at = tuple((name, ordered.index(name), params[name].default) for name in self.key)
        self._n_runtime = src.binding.n_runtime
        self.chosen_names = frozenset(n for c in self.configs for n in c.all_kwargs())
        self.cache: dict[tuple, Config] = {}
        self._fast: dict[tuple, Config] = {}   # (key values, the kernel's launch-cache key) -> the choice
        self._launchers: dict = {}

    def __getitem__(self, grid) -> AutotunedLauncher:
        if grid.__class__ is tuple or grid.__class__ is int:   # a grid of numbers: one launcher per grid, kept
            found = self._launchers.get(grid)
            if found is None:
                if len(self._launchers) >= 256:
                    self._launchers.clear()
                found = self._launchers[grid] = AutotunedLauncher(self, grid)
            return found
        return AutotunedLauncher(self, grid)

    def __call__(self, *args, **kwargs):
        error = KernelArgumentError(f"an autotuned kernel is launched with {self.kernel.fn.__name__}[grid](...), not "
                                    "called directly")
        raise _user_error(error, self.kernel.fn.__name__) from None

    def __repr__(self) -> str:
        return f"<metile.autotune of {self.kernel!r}, {len(self.configs)} configs, key {list(self.key)}>"

    # -- choosing -------------------------------------------------------------------------------------------------

    def key_values(self, args: tuple, kwargs: dict) -> list:
        """The key arguments' values (arrays: shape and dtype)."""
        return [v if v.__class__ is int else _key_value(v) for v in
                [args[at] if at < len(args) else kwargs.get(name, default) for name, at, default in self._key_at]]

    def tuning_key(self, args: tuple, kwargs: dict) -> tuple:
        """What a choice is kept under: `key_values`, and the dtype of every array argument."""
        out = self.key_values(args, kwargs)
        typed = _DTYPED
        for a in args[:self._n_runtime]:
            has = typed.get(a.__class__)
            if has is None:
                has = typed[a.__class__] = hasattr(a.__class__, "dtype") and not issubclass(a.__class__, np.generic)
            if has:
                out.append(a.dtype)
        return tuple(out)

    def choose(self, grid, args: tuple, kwargs: dict, key: tuple) -> Config:
        """The configuration for a launch whose tuning key is `key`: stored (in memory or on disk), or found by
        timing (the launch's arrays are written to while timing; `reset_to_zero`/`restore_value` say which to
        reset)."""
        name = self.kernel.fn.__name__
        clash = sorted(self.chosen_names & set(kwargs))
        if clash:
            raise AutotuneError(f"{name}[grid](...) gives {', '.join(clash)}, which the autotuner chooses; launch "
                                f"{name}.kernel[grid](...) to choose them yourself", self.kernel.source.def_loc)
        self.kernel.specialize(args, {**kwargs, **self.configs[0].all_kwargs()})   # the launch's own argument errors
        mode = os.environ.get(AUTOTUNE_ENV, "").strip().lower()
        if mode not in ("", "on", "off"):
            raise AutotuneError(f"{AUTOTUNE_ENV}={mode!r}: use 'off' to launch the stored or first configuration "
                                "without timing, or leave it unset")
        digest = self.digest(key)
        found = cache.read_choice(digest)
        chosen = self._stored(found)
        if chosen is None and mode == "off":
            chosen = self.configs[0]
        if chosen is None:
            chosen, ms = self.tune(grid, args, kwargs, key)
            cache.store_choice(digest, {"kernel": self.kernel.fn.__qualname__, "config": self.configs.index(chosen),
                                        "repr": repr(chosen), "key": repr(key), "ms": ms})
        self.cache[key] = chosen
        return chosen

    def _stored(self, entry: dict | None) -> Config | None:
        if entry is None:
            return None
        at = entry.get("config")
        if isinstance(at, int) and 0 <= at < len(self.configs) and repr(self.configs[at]) == entry.get("repr"):
            return self.configs[at]
        return None

    def digest(self, key: tuple) -> str:
        """The on-disk name of a choice: a digest of the kernel's source, pipeline and configurations, the tuning
        key, the device and metile's version."""
        import metile

        k = self.kernel
        facts = {"kernel": f"{k.fn.__module__}.{k.fn.__qualname__}",
                 "source": hashlib.sha256(k.source.text.encode()).hexdigest(),
                 "pipeline": [pass_key(p) for p in k.pipeline],
                 "configs": [repr(c) for c in self.configs], "key": repr(key), "device": repr(device()),
                 "by": self.by, "gpu": self.gpu,
                 "version": metile.__version__}
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()

    def tune(self, grid, args: tuple, kwargs: dict, key: tuple) -> tuple[Config, float]:
        """Time every configuration left after pruning; the fastest and its median milliseconds."""
        from metile.autotune_run import tune

        return tune(self, grid, args, kwargs, key)


class AutotunedLauncher:
    """`tuned[grid]`: launching chooses the configuration (once per tuning key), then launches the kernel with it;
    `prepare(...)` chooses, then returns the winner's `PreparedLaunch`."""

    __slots__ = ("grid", "launcher", "tuner")

    def __init__(self, tuner: Autotuner, grid):
        self.tuner = tuner
        self.grid = grid
        self.launcher = Launcher(tuner.kernel, grid)

    def __call__(self, *args, **kwargs):
        tuner = self.tuner
        k = tuner.kernel
        getenv = os.environ.get
        base = k._fast_key(args, kwargs, getenv("METILE_DEBUG"), getenv("METILE_SANITIZE"))
        if base is not None:   # the fast path: the kernel's own launch key (argument types, keywords) and key values
            values = tuple(tuner.key_values(args, kwargs))
            try:
                config = tuner._fast.get((values, base))
                entry = None if config is None else k._launches.get(base + config._suffix)
            except TypeError:   # an unhashable value
                entry = None
            if entry is not None:
                launcher = self.launcher
                grid = self.grid if not launcher.meta_grid else launcher.grid_of(args, {**kwargs, **config._all})
                try:
                    return entry(grid, args)
                except MetileError as e:
                    raise _user_error(e, k.fn.__name__) from None
        key = tuner.tuning_key(args, kwargs)
        config = tuner.cache.get(key)
        if config is None:
            config = self._choose(args, kwargs, key)
        if base is not None:
            try:
                tuner._fast[(values, base)] = config
            except TypeError:
                pass
        try:
            return self.launcher(*args, **kwargs, **config._all)
        except TypeError:   # a keyword given twice: one the autotuner chooses
            if not tuner.chosen_names & kwargs.keys():
                raise
            self._choose(args, kwargs, None)   # raises the AutotuneError naming it
            raise

    def prepare(self, *args, **kwargs) -> PreparedLaunch:
        config = self._choose(args, kwargs, self.tuner.tuning_key(args, kwargs))
        return self.launcher.prepare(*args, **kwargs, **config.all_kwargs())

    def _choose(self, args, kwargs, key) -> Config:
        tuner = self.tuner
        try:
            return tuner.cache.get(key) or tuner.choose(self.grid, args, kwargs, key)
        except MetileError as e:
            raise _user_error(e, tuner.kernel.fn.__name__) from None


def _ranking(by, gpu, where) -> tuple[str, str | None]:
    """`by` and the GPU row's name (`by="model"` needs a known `gpu`)."""
    if by not in ("time", "model"):
        raise AutotuneError(f"autotune: by={by!r} must be 'time' (time each configuration) or 'model' (rank them by "
                            "the Apple GPU model's estimate)", where)
    if by == "time":
        if gpu is not None:
            raise AutotuneError("autotune: gpu= names the Apple GPU of by='model'; timing runs on the device", where)
        return by, None
    from metile.profile.gpus import UnknownGpuError
    from metile.profile.gpus import gpu as find_gpu

    if gpu is None:
        raise AutotuneError("autotune: by='model' needs gpu=, the Apple GPU to estimate for (such as 'M3 Max')",
                            where)
    try:
        return by, find_gpu(gpu).name
    except UnknownGpuError as e:
        raise AutotuneError(f"autotune: gpu={gpu!r}: {e.message}", where) from None


def _key_value(v):
    """What a key argument's value contributes to the tuning key: arrays their shape and dtype, numbers their value."""
    shape = getattr(v, "shape", None)
    if shape is not None and not isinstance(v, np.generic):
        return (tuple(shape), str(getattr(v, "dtype", "")))
    if isinstance(v, np.generic):
        return v.item()
    return v


def _configs(configs, params: dict, where) -> tuple[Config, ...]:
    if isinstance(configs, Config) or not isinstance(configs, Iterable):
        raise AutotuneError("autotune: configs is a list of metile.Config", where)
    out = tuple(configs)
    if not out:
        raise AutotuneError("autotune: configs is empty: give at least one metile.Config", where)
    for i, c in enumerate(out):
        if not isinstance(c, Config):
            raise AutotuneError(f"autotune: configs[{i}] is a {type(c).__name__}, not a metile.Config", where)
        for name in c.kwargs:
            spec = params.get(name)
            if spec is None and name in MET_TILE_OPTIONS:   # meTile's NUM_SG and schedule keys (WM, NAX_*...)
                continue
            if spec is None or not spec.constexpr:
                what = "a runtime argument" if spec is not None else "not a parameter of the kernel"
                raise AutotuneError(f"autotune: configs[{i}] = {c!r} sets {name!r}, which is {what}: a Config sets "
                                    f"constexprs ({', '.join(n for n, s in params.items() if s.constexpr) or 'none'}"
                                    f") and the options {', '.join(sorted(COMPILER_OPTIONS))}", where)
    if len(set(map(repr, out))) != len(out):
        raise AutotuneError("autotune: configs holds the same Config twice", where)
    return out


def _names(names, what: str, params: dict, where, arrays_only: bool) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise AutotuneError(f"autotune: {what} is a list of argument names, not {names!r}", where)
    out = tuple(names)
    for n in out:
        spec = params.get(n) if isinstance(n, str) else None
        if spec is None:
            raise AutotuneError(f"autotune: {what} names {n!r}, which is not a parameter of the kernel "
                                f"({', '.join(params)})", where)
        if arrays_only and spec.constexpr:
            raise AutotuneError(f"autotune: {what} names {n!r}, a constexpr; it takes array arguments", where)
    return out


def _prune_settings(prune, where) -> dict:
    if prune is None:
        return {}
    if not isinstance(prune, dict):
        raise AutotuneError(f"autotune: prune_configs_by is a dict, not {type(prune).__name__}", where)
    allowed = ("early_config_prune", "perf_model", "top_k")
    bad = sorted(set(prune) - set(allowed))
    if bad:
        raise AutotuneError(f"autotune: prune_configs_by takes {', '.join(allowed)}, not {', '.join(bad)}", where)
    for name in ("early_config_prune", "perf_model"):
        if prune.get(name) is not None and not callable(prune[name]):
            raise AutotuneError(f"autotune: prune_configs_by[{name!r}] must be a function", where)
    top_k = prune.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, float)) or top_k <= 0):
        raise AutotuneError(f"autotune: prune_configs_by['top_k']={top_k!r} must be a count, or a fraction of the "
                            "configurations", where)
    if (top_k is None) != (prune.get("perf_model") is None):
        raise AutotuneError("autotune: prune_configs_by takes perf_model and top_k together", where)
    return dict(prune)


def print_choice(tuner: Autotuner, key: tuple, chosen: Config, rows: list[tuple[Config, float | None, str]],
                 out: Callable = print) -> None:
    """The verbose report of one tuning: the choice, then each configuration's time or why it was left out."""
    names = ", ".join(f"{n}={v!r}" for (n, _, _), v in zip(tuner._key_at, key))
    out(f"autotune {tuner.kernel.fn.__name__} [{names}]: {chosen!r}", file=sys.stdout)
    for config, ms, why in rows:
        mark = "  <- chosen" if config is chosen else ""
        out(f"  {config!r}: {f'{ms:.4f} ms' if ms is not None else why}{mark}", file=sys.stdout)


__all__ = ["AUTOTUNE_ENV", "AutotuneError", "AutotunedLauncher", "Autotuner", "Config", "NO_DEFAULT", "autotune",
           "print_choice"]
