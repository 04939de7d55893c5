"""`triton.autotune`, `triton.Config` and `triton.heuristics` on metile, with Triton's behaviour.

- `Config(kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None)`: constexprs and launch
  options; `num_warps` becomes metile's `num_simdgroups` and `num_stages` metile's `num_stages` at the launch
  (`metile.triton.jit`); `num_ctas`, `maxnreg` and `ir_override` are accepted and change nothing.
- `@autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
  post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False)`: the first
  launch with new values of the `key` arguments (and new dtypes of array arguments) prunes the configurations
  (`early_config_prune`, `perf_model` with `top_k`), times each with `triton.testing.do_bench` (`warmup` and `rep`
  milliseconds, 25 and 100 by default; `use_cuda_graph` times the same way), keeps the fastest median in memory and
  launches it. Configurations that launch the same kernel the same way (one MSL, threadgroup size, threadgroup
  memory and grid: `num_stages` or `num_ctas` alone often change nothing here) are timed once and share the timing,
  the first of them winning a tie (a configuration with its own `pre_hook`, or a kernel under `@heuristics`, is
  always timed). A configuration that cannot run on the device (too many threads or too much threadgroup memory, a
  tile metile cannot lower, a failed `tl.static_assert`) is left out; when none is left, `AutotuneError` lists each
  and why. The hooks, `reset_to_zero` and `restore_value` run as Triton runs them (on torch tensors or numpy
  arrays). `cache_results` is accepted: choices are kept for the process.
- `@heuristics({"NAME": fn(args) -> value})` computes constexprs from the launch's arguments (by name).
Decorators stack as in Triton (`@autotune` over `@heuristics` over `@jit`, in either order).
"""

from __future__ import annotations

import time

from metile.autotune import AutotuneError
from metile.frontend.errors import CompileTimeAssertionError, LoweringUnavailableError, ShapeMismatchError
from metile.ir.errors import MetileError
from metile.metal.errors import LaunchError
from metile.triton.jit import JITFunction, KernelInterface, _call_grid

_UNRUNNABLE = (LaunchError, LoweringUnavailableError, CompileTimeAssertionError, ShapeMismatchError)
"""What leaves a configuration out of tuning: it cannot run on this device (or its constexprs fail an assertion)."""


class Config:
    """One candidate configuration of `triton.autotune` (see the module docstring)."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None,
                 ir_override=None):
        self.kwargs = kwargs
        self.num_warps, self.num_stages, self.num_ctas = num_warps, num_stages, num_ctas
        self.maxnreg, self.pre_hook, self.ir_override = maxnreg, pre_hook, ir_override

    def all_kwargs(self) -> dict:
        options = (("num_warps", self.num_warps), ("num_ctas", self.num_ctas), ("num_stages", self.num_stages),
                   ("maxnreg", self.maxnreg), ("ir_override", self.ir_override))
        return {**self.kwargs, **{k: v for k, v in options if v is not None}}

    def __str__(self) -> str:
        parts = [f"{k}: {v}" for k, v in self.kwargs.items()]
        parts += [f"num_warps: {self.num_warps}", f"num_ctas: {self.num_ctas}", f"num_stages: {self.num_stages}",
                  f"maxnreg: {self.maxnreg}"]
        return ", ".join(parts)

    __repr__ = __str__

    def _key(self) -> tuple:
        return (*self.all_kwargs().items(), self.pre_hook)

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self._key() == other._key()


def _zero(x) -> None:
    if hasattr(x, "zero_"):
        x.zero_()
    else:
        x[...] = 0


def _copy(x):
    return x.clone() if hasattr(x, "clone") else x.copy()


def _restore(x, saved) -> None:
    if hasattr(x, "copy_"):
        x.copy_(saved)
    else:
        x[...] = saved


class Autotuner(KernelInterface):
    """An autotuned kernel (see the module docstring): `fn[grid](...)` chooses, then launches."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None, post_hook=None,
                 prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 cache_results=False):
        self.fn, self.arg_names = fn, list(arg_names)
        self.configs = list(configs) if configs else [Config({}, num_warps=4, num_stages=3, num_ctas=1)]
        self.keys = list(key)
        unknown = [k for k in self.keys if k not in self.arg_names]
        if unknown:
            raise AutotuneError(f"autotune: key names {unknown}, which are not parameters of "
                                f"{getattr(fn, '__name__', fn)} ({', '.join(self.arg_names)})")
        self.reset_to_zero, self.restore_value = list(reset_to_zero or ()), list(restore_value or ())
        self.user_pre_hook, self.user_post_hook = pre_hook, post_hook
        prune = prune_configs_by or {}
        self.perf_model, self.configs_top_k = prune.get("perf_model"), prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        self.warmup_ms = 25 if warmup is None else warmup
        self.rep_ms = 100 if rep is None else rep
        self.use_cuda_graph, self.user_do_bench, self.cache_results = use_cuda_graph, do_bench, cache_results
        self.cache: dict[tuple, Config] = {}
        self.configs_timings: dict = {}
        self.nargs: dict | None = None
        self.best_config: Config | None = None
        self.bench_time = 0.0
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.restore_copies: dict = {}

    # -- Triton's hooks ----------------------------------------------------------------------------------------------

    def pre_hook(self, nargs: dict, reset_only: bool = False) -> None:
        if self.user_pre_hook is not None:
            self.user_pre_hook(nargs, reset_only)
            return
        for name in self.reset_to_zero:
            _zero(nargs[name])
        if not reset_only:
            self.restore_copies = {name: _copy(nargs[name]) for name in self.restore_value}

    def post_hook(self, nargs: dict, exception) -> None:
        if self.user_post_hook is not None:
            self.user_post_hook(nargs, exception)
            return
        for name in self.restore_value:
            _restore(nargs[name], self.restore_copies[name])
        self.restore_copies = {}

    # -- choosing ----------------------------------------------------------------------------------------------------

    def prune_configs(self, kwargs: dict) -> list[Config]:
        configs = self.configs
        if self.early_config_prune:
            configs = self.early_config_prune(self.configs, self.nargs, **kwargs)
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(self.configs) * top_k)
            elif not isinstance(top_k, int):
                raise AutotuneError("autotune: top_k must be either 1) a float <= 1.0 or 2) an int")
            if len(configs) > top_k:
                estimate = {c: self.perf_model(**self.nargs, **kwargs, **c.all_kwargs()) for c in configs}
                configs = sorted(estimate, key=estimate.get)[:top_k]
        return list(configs)

    def _bench(self, *args, config: Config, **meta):
        clash = meta.keys() & config.kwargs.keys()
        if clash:
            raise AutotuneError(f"Conflicting meta-parameters: {', '.join(sorted(clash))}. Make sure that you don't "
                                "re-define auto-tuned symbols.")
        current = dict(meta, **config.all_kwargs())
        full = {**self.nargs, **current}

        def call():
            if config.pre_hook:
                config.pre_hook(full)
            self.pre_hook(full)
            try:
                self.fn.run(*args, **current)
            except Exception as e:
                self.post_hook(full, exception=e)
                raise
            self.post_hook(full, exception=None)

        from metile.triton import testing

        if self.user_do_bench is not None:
            return self.user_do_bench(call, quantiles=(0.5, 0.2, 0.8))
        return testing.do_bench(call, warmup=self.warmup_ms, rep=self.rep_ms, quantiles=(0.5, 0.2, 0.8))

    def _launched(self, config: Config, args: tuple, kwargs: dict) -> tuple | None:
        """What a launch with `config` runs: its kernel's MSL, threadgroup size and memory, and its grid (None when that
        is not known: a hook of the config's own, or a kernel under another decorator). Compiling it raises what
        launching it would."""
        if config.pre_hook is not None or not isinstance(self.fn, JITFunction):
            return None
        current = {**kwargs, **config.all_kwargs()}
        grid = current.pop("grid", None)
        current.pop("warmup", None)
        compiled = self.fn.warmup(*args, grid=grid, **current).compiled
        if callable(grid):
            grid = _call_grid(grid, self.fn.bind(args, current)[0])
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        return compiled.msl, compiled.threadgroup_size, compiled.threadgroup_memory, grid

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        if len(self.configs) > 1:
            everything = {**self.nargs, **kwargs}
            named = {k: v for k, v in everything.items() if k in self.arg_names}
            key = [named[k] for k in self.keys if k in named]
            key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
            key = tuple(key)
            if key not in self.cache:
                self._tune(key, args, kwargs)
            config = self.cache[key]
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        out = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return out

    def _tune(self, key: tuple, args: tuple, kwargs: dict) -> None:
        start = time.time()
        timings, why, timed = {}, {}, {}
        for config in self.prune_configs(kwargs):
            try:
                launched = self._launched(config, args, kwargs)
                if launched is not None and launched in timed:   # the same launch as one timed before
                    timings[config] = timings[timed[launched]]
                    continue
                timings[config] = self._bench(*args, config=config, **kwargs)
                if launched is not None:
                    timed[launched] = config
            except _UNRUNNABLE as e:
                why[config] = f"{type(e).__name__}: {(getattr(e, 'message', None) or str(e)).splitlines()[0]}"
        self.bench_time = time.time() - start
        if not timings:
            listing = "".join(f"\n  {c}: {w}" for c, w in why.items()) or " (pruning left none)"
            raise AutotuneError(f"autotune {self.__name__}: no configuration could run:{listing}")
        self.configs_timings = timings
        best = min(timings, key=lambda c: list(timings[c]) if isinstance(timings[c], (list, tuple)) else [timings[c]])
        self.cache[key] = best
        self.pre_hook({**self.nargs, **kwargs, **best.all_kwargs()}, reset_only=True)

    def warmup(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        out = [self.fn.warmup(*args, **kwargs, **c.all_kwargs()) for c in self.prune_configs(kwargs)]
        self.nargs = None
        return out


class Heuristics(KernelInterface):
    """A kernel whose constexprs `values` computes from the launch's arguments (by name)."""

    def __init__(self, fn, arg_names, values: dict):
        self.fn, self.arg_names, self.values = fn, list(arg_names), values
        self.__name__ = getattr(fn, "__name__", "kernel")

    def _with_values(self, args: tuple, kwargs: dict) -> dict:
        for name, heuristic in self.values.items():
            kwargs[name] = heuristic({**dict(zip(self.arg_names, args)), **kwargs})
        return kwargs

    def run(self, *args, **kwargs):
        return self.fn.run(*args, **self._with_values(args, kwargs))

    def warmup(self, *args, **kwargs):
        return self.fn.warmup(*args, **self._with_values(args, kwargs))


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False):
    """`@triton.autotune(...)` over a `@triton.jit` function (see the module docstring)."""
    def decorator(fn):
        try:
            return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                             post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                             use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)
        except MetileError as e:
            raise e.with_traceback(None) from None
    return decorator


def heuristics(values: dict):
    """`@triton.heuristics({"NAME": lambda args: ...})` over a `@triton.jit` function."""
    def decorator(fn):
        return Heuristics(fn, fn.arg_names, values)
    return decorator


__all__ = ["Autotuner", "Config", "Heuristics", "autotune", "heuristics"]
