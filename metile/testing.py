"""Timing kernels: `do_bench`, Triton's `triton.testing.do_bench` for metile's devices.

A call is timed from the moment it starts to the moment the device has finished the work it queued:
- on the Apple GPU device, by the GPU's own timestamps of the command buffers the call committed
  (`MTLCommandBuffer.GPUStartTime`/`GPUEndTime`, summed over the buffers one `synchronize()` waited for), so
  the host's own overhead and the wait are not counted;
- on the CPU device, by the wall clock around the call and `synchronize()` (a CPU device launch runs the kernel
  before it returns).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from metile.devices import _default_if_none
from metile.ir.errors import MetileError

RETURN_MODES = ("median", "mean", "min", "max", "all")
ESTIMATE_CALLS = 5   # calls timed first, to turn the warm-up and repetition budgets into numbers of calls


class BenchmarkError(MetileError):
    """A bad argument to `do_bench`, or a function that raised while it was timed (the error is chained)."""


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100, quantiles: Sequence[float] | None = None,
             return_mode: str = "median", *, device=None):
    """Milliseconds one call of `fn` (a function of no arguments that launches kernels) takes on `device` (the default
    device, or a device or its name), as Triton's `do_bench` measures: `fn` is called once (compiling what it
    launches), five calls estimate its time, then it runs for about `warmup` milliseconds untimed and about `rep`
    milliseconds timed, each call timed on its own (at least one of each).

    Returns the `return_mode` of the timed calls ("median", "mean", "min", "max", or "all": the list), or, when
    `quantiles` is given (numbers in [0, 1]), the list of those quantiles. Raises `BenchmarkError` for bad
    arguments; an error `fn` raises propagates as it is."""
    dev = _check(fn, warmup, rep, quantiles, return_mode, device)
    fn()
    dev.synchronize()
    estimate = statistics.median(_times(fn, dev, ESTIMATE_CALLS))
    warmups = max(1, int(warmup / estimate)) if estimate > 0 and math.isfinite(warmup / estimate) else 1
    repeats = max(1, int(rep / estimate)) if estimate > 0 and math.isfinite(rep / estimate) else 1
    for _ in range(warmups):
        fn()
    dev.synchronize()
    return summarize(_times(fn, dev, repeats), quantiles, return_mode)


def bench_calls(fn: Callable[[], object], warmup: int, rep: int, device=None) -> list[float]:
    """The milliseconds of each of `rep` timed calls of `fn`, after `warmup` untimed ones (counts of calls, as
    `metile.autotune` takes them)."""
    dev = _default_if_none(device)
    for _ in range(warmup):
        fn()
    dev.synchronize()
    return _times(fn, dev, max(1, rep))


def summarize(times: list[float], quantiles: Sequence[float] | None = None, return_mode: str = "median"):
    """`do_bench`'s result for the timed calls `times` (milliseconds)."""
    if quantiles is not None:
        return [float(q) for q in np.quantile(np.asarray(times, dtype=np.float64), list(quantiles))]
    if return_mode == "all":
        return list(times)
    return float({"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}[return_mode](times))


def _times(fn, dev, n: int) -> list[float]:
    """Milliseconds of each of `n` calls of `fn`, each waited for: the GPU's time where the device reports it."""
    gpu_time = getattr(dev, "gpu_time", None)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        dev.synchronize()
        wall = time.perf_counter() - start
        gpu = gpu_time() if gpu_time is not None else None
        out.append(1e3 * (wall if gpu is None else gpu))
    return out


def _check(fn, warmup, rep, quantiles, return_mode, device):
    if not callable(fn):
        raise BenchmarkError(f"do_bench times a function of no arguments, not {type(fn).__name__}")
    for name, value, least in (("warmup", warmup, 0), ("rep", rep, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < least or (name == "rep" and value == 0):
            raise BenchmarkError(f"do_bench: {name}={value!r} must be a number of milliseconds, "
                                 f"{'>= 0' if name == 'warmup' else '> 0'}")
    if quantiles is not None:
        qs = list(quantiles) if isinstance(quantiles, (list, tuple)) else None
        if not qs or any(isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1 for q in qs):
            raise BenchmarkError(f"do_bench: quantiles={quantiles!r} must be a list of numbers in [0, 1]")
    if return_mode not in RETURN_MODES:
        raise BenchmarkError(f"do_bench: return_mode={return_mode!r} must be one of {', '.join(RETURN_MODES)}")
    return _default_if_none(device)


__all__ = ["BenchmarkError", "RETURN_MODES", "bench_calls", "do_bench", "summarize"]
