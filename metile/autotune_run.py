"""One tuning of `metile.autotune`: prune the configurations, compile and time the rest, report, choose.

Pruning comes first and compiles nothing: the user's `prune_configs_by` (Triton's `early_config_prune`, then
`perf_model` with `top_k`), then each remaining configuration is lowered to Metal IR (`JITKernel.lower`) and left
out when its launch plan asks for more threads per threadgroup or threadgroup memory than the device has. The
others are compiled and prepared once (`kernel[grid].prepare`), launched `warmup` times and timed over `rep`
launches (`metile.testing.bench_calls`); the smallest median wins. With `by="model"` each is instead launched once
with `profile=` (a sample of its threadgroups, on the CPU device) and the Apple GPU model's estimate on the chosen
GPU stands for its time (`metile.profile.model`).
"""

from __future__ import annotations

import statistics
import sys

import numpy as np

from metile.devices import device
from metile.frontend.specialize import NO_DEFAULT
from metile.ir.errors import MetileError
from metile.kernel import Launcher
from metile.testing import bench_calls


def tune(tuner, grid, args: tuple, kwargs: dict, key: tuple):
    """The fastest of `tuner.configs` for this launch and its median milliseconds (see the module docstring);
    `AutotuneError` listing every configuration and why when none could run."""
    from metile.autotune import AutotuneError, print_choice

    k = tuner.kernel
    named = named_arguments(k, args, kwargs)
    rows: list = []          # (config, median ms or None, why it has none)
    candidates = user_pruned(tuner, named, kwargs, rows)
    dev = device()
    runnable = []
    for config in candidates:
        try:
            plan = k.lower(*args, **kwargs, **config.all_kwargs()).plan
        except MetileError as e:
            rows.append((config, None, f"does not compile: {_first_line(e)}"))
            continue
        if plan.threads > dev.max_threads_per_threadgroup:
            rows.append((config, None, f"pruned: it runs {plan.threads} threads per threadgroup, the device allows "
                                       f"{dev.max_threads_per_threadgroup}"))
        elif plan.threadgroup_memory > dev.max_threadgroup_memory:
            rows.append((config, None, f"pruned: it needs {plan.threadgroup_memory} bytes of threadgroup memory, the "
                                       f"device has {dev.max_threadgroup_memory}"))
        else:
            runnable.append(config)
    saved = {name: np.array(_host(named[name]), copy=True) for name in tuner.restore_value}
    launcher = Launcher(k, grid)
    steps = runnable
    if tuner.verbose and runnable:
        from tqdm import tqdm

        steps = tqdm(runnable, desc=f"autotune {k.fn.__name__}", file=sys.stderr, leave=False)
    for config in steps:
        rows.append(_time(tuner, launcher, config, args, kwargs, named))
        _restore(named, saved)
    timed = [(ms, i) for i, (_, ms, _) in enumerate(rows) if ms is not None]
    order = {c: i for i, c in enumerate(tuner.configs)}
    rows.sort(key=lambda r: order[r[0]])
    if not timed:
        listing = "".join(f"\n  {c!r}: {why}" for c, _, why in rows)
        raise AutotuneError(f"autotune {k.fn.__name__}: no configuration could run for {_key_text(tuner, key)}:"
                            f"{listing}", k.source.def_loc)
    best = min((ms, order[c], c) for c, ms, _ in rows if ms is not None)
    _zero(tuner, named)
    if tuner.verbose:
        print_choice(tuner, key, best[2], rows)
    return best[2], best[0]


MODEL_SAMPLE = 8   # threadgroups counted per configuration when ranking by the model


def _time(tuner, launcher: Launcher, config, args, kwargs, named) -> tuple:
    if tuner.by == "model":
        return _model(tuner, launcher, config, args, kwargs, named)
    try:
        prepared = launcher.prepare(*args, **kwargs, **config.all_kwargs())
    except MetileError as e:
        return config, None, f"does not compile: {_first_line(e)}"

    def call():
        _zero(tuner, named)
        prepared()

    try:
        times = bench_calls(call, tuner.warmup, tuner.rep)
    except MetileError as e:
        return config, None, f"failed while timed: {_first_line(e)}"
    return config, statistics.median(times), ""


def _model(tuner, launcher: Launcher, config, args, kwargs, named) -> tuple:
    """A configuration's estimate on `tuner.gpu` in milliseconds, from one profiled launch of a sample of its
    threadgroups (the outputs are left incomplete: `reset_to_zero` arrays are zeroed after tuning)."""
    from metile.profile.model import estimate

    _zero(tuner, named)
    try:
        profile = launcher(*args, **kwargs, **config.all_kwargs(), profile=MODEL_SAMPLE, profile_only=True)
    except MetileError as e:
        return config, None, f"could not be profiled: {_first_line(e)}"
    return config, estimate(profile, tuner.gpu).estimate_s * 1e3, ""


def user_pruned(tuner, named: dict, kwargs: dict, rows: list) -> list:
    """The configurations the user's `prune_configs_by` keeps (those it leaves out recorded in `rows`)."""
    from metile.autotune import AutotuneError

    configs = list(tuner.configs)
    early, perf, top_k = (tuner.prune.get(n) for n in ("early_config_prune", "perf_model", "top_k"))
    where = tuner.kernel.source.def_loc
    if early is not None:
        kept = _user_call(early, "early_config_prune", where, configs, named, **kwargs)
        if not isinstance(kept, (list, tuple)) or any(c not in configs for c in kept):
            raise AutotuneError("autotune: prune_configs_by['early_config_prune'] must return a list of the "
                                f"configurations it was given, not {kept!r}", where)
        configs = _left_out(configs, list(kept), "pruned by early_config_prune", rows)
    if perf is not None:
        estimate = {c: _user_call(perf, "perf_model", where, **named, **kwargs, **c.all_kwargs()) for c in configs}
        bad = [v for v in estimate.values() if isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            raise AutotuneError(f"autotune: prune_configs_by['perf_model'] must return a number, not {bad[0]!r}",
                                where)
        n = top_k if isinstance(top_k, int) else max(1, int(top_k * len(configs)))
        ranked = sorted(configs, key=lambda c: estimate[c])
        configs = _left_out(configs, ranked[:n], f"pruned by perf_model (not among the top_k={top_k})", rows)
    return configs


def _left_out(configs: list, kept: list, why: str, rows: list) -> list:
    for c in configs:
        if c not in kept:
            rows.append((c, None, why))
    return [c for c in configs if c in kept]


def _user_call(fn, what: str, where, *args, **kwargs):
    from metile.autotune import AutotuneError

    try:
        return fn(*args, **kwargs)
    except MetileError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function: its error, named
        raise AutotuneError(f"autotune: prune_configs_by[{what!r}] raised {type(e).__name__}: {e}", where) from e


def named_arguments(k, args: tuple, kwargs: dict) -> dict:
    """The launch's arguments by parameter name (constexprs with their defaults), as Triton's `named_args`."""
    src = k.source
    out = {s.name: s.default for s in src.specs if s.default is not NO_DEFAULT}
    out.update(zip(src.binding.ordered, args))
    out.update(kwargs)
    return out


def _host(a):
    """A numpy view of an array argument (a `metile.Buffer`'s memory, or the array itself)."""
    return a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a


def _zero(tuner, named: dict) -> None:
    for name in tuner.reset_to_zero:
        _host(named[name])[...] = 0


def _restore(named: dict, saved: dict) -> None:
    for name, values in saved.items():
        _host(named[name])[...] = values


def _first_line(e: MetileError) -> str:
    text = getattr(e, "message", None) or str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _key_text(tuner, key: tuple) -> str:
    return ", ".join(f"{n}={v!r}" for (n, _, _), v in zip(tuner._key_at, key)) or "this launch"


__all__ = ["named_arguments", "tune", "user_pruned"]
