"""The original meTile compiler as an anchor for `compile_latency.py`: the same five kernels, written as meTile's
own examples write them, compiled to MSL by meTile in the same process as metile's.

`Anchor(path)` imports meTile's package from a checkout at `path` (the directory holding its `metile/` package;
its Metal runtime may be stubbed: only the compile path runs). Both packages are named `metile`, so meTile's
modules are kept out of `sys.modules` except inside `Anchor.active()`, which swaps them in for the duration of one
compile (the swap is outside every timed region). Nothing of meTile's is copied here: its package is imported
from the path at run time.

What is timed for meTile is `KernelLauncher._compile(args, constexprs, names)`, the step its launches and its
`get_compiled()` run on a cache miss: trace the Python function, lower to Metal IR, run its passes, emit MSL,
and hand the MSL to the device (a no-op with the stub); it returns the MSL in `CompiledKernel.msl_source`.
- cold: a fresh kernel object (`metile.kernel(fn)`, untimed) for each repetition;
- warm: a fresh kernel object that has already compiled the kernel once with other constexprs (untimed), then
  the timed compile. meTile keeps no per-object state but the function's signature and has no parse step (it
  runs the Python function), so its warm and cold figures differ only by noise.

The kernels are meTile's as its examples and `kernels/*.py` write them, so they differ from metile's cases where
those do: layer norm in two passes (the sum and the sum of squares in one loop), RMS norm with its epsilon fixed at
1e-5, softmax without `where`. Compiled by meTile at commit 719726b, softmax, layer norm, RMS norm and GEMM give
the MSL of `tests/data/reference_msl/{softmax,layernorm,rmsnorm}_block256` and `gemm_f32_64x64x32` (meTile orders
layer norm's two accumulators as a set of strings iterates, so with another hash seed their names and the order of
their lines differ from those files; its `_ew_end_N` loop bounds are numbered per function, so they match).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import attrs
import numpy as np

# ---- the kernels, in meTile's dialect. `metile` here is meTile's package, bound by `Anchor` when it loads.

metile = None


def vec_add(X, Y, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


def softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        m = metile.maximum(m, x)
    m = metile.max(m)

    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + metile.exp(x - m)
    s = metile.sum(s)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=mask)


def layernorm(X, W, B, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    s = 0.0
    ss = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + x
        ss = ss + x * x
    mean = metile.sum(s) / N
    inv_std = 1.0 / metile.sqrt(metile.sum(ss) / N - mean * mean + 1e-5)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        metile.store(Out + row * N + cols, (x - mean) * inv_std * w + b, mask=mask)


def rmsnorm(X, W, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    ss = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        ss = ss + x * x

    ss = metile.sum(ss)

    rms = 1.0 / metile.sqrt(ss / N + 1e-5)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        metile.store(Out + row * N + cols, x * rms * w, mask=mask)


def matmul(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


def _f32(n: int) -> np.ndarray:
    return np.zeros(n, np.float32)


@attrs.frozen
class AnchorCase:
    """One kernel for meTile: its function, arguments, launch grid, the timed constexprs and the other constexprs
    a warm compile is preceded by."""

    fn: object
    args: tuple
    grid: tuple
    constexprs: dict
    alt: dict


# By the names of compile_latency.CASES; the same problem sizes and blocks as metile's cases.
CASES = {
    "vec_add": AnchorCase(vec_add, (_f32(1024), _f32(1024), _f32(1024), 1024), (4,), {"BLOCK": 256}, {"BLOCK": 128}),
    "softmax": AnchorCase(softmax, (_f32(64 * 300), _f32(64 * 300), 300), (64,), {"BLOCK": 256}, {"BLOCK": 128}),
    "layernorm": AnchorCase(layernorm, (_f32(32 * 300), _f32(300), _f32(300), _f32(32 * 300), 300), (32,),
                            {"BLOCK": 256}, {"BLOCK": 128}),
    "rmsnorm": AnchorCase(rmsnorm, (_f32(32 * 300), _f32(300), _f32(32 * 300), 300), (32,), {"BLOCK": 256},
                          {"BLOCK": 128}),
    "gemm": AnchorCase(matmul, (_f32(128 * 128), _f32(128 * 128), _f32(128 * 128), 128, 128, 128), (2, 2),
                       {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16}),
}


def _names_constexpr(annotation) -> bool:
    """Whether a parameter's annotation is `metile.constexpr`: a string here (postponed evaluation), or the class of
    an anchor loaded before."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return text.endswith("constexpr")


def _take_modules() -> dict:
    """Remove the `metile` package and its submodules from `sys.modules` and return them."""
    names = [n for n in sys.modules if n == "metile" or n.startswith("metile.")]
    return {n: sys.modules.pop(n) for n in names}


class Anchor:
    """meTile's package, imported from `path` and kept apart from metile's modules (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        if not (self.path / "metile" / "__init__.py").is_file():
            raise SystemExit(f"--anchor {path}: no meTile checkout there (expected {self.path}/metile/__init__.py)")
        ours = _take_modules()
        sys.path.insert(0, str(self.path))
        try:
            package = importlib.import_module("metile")
            launcher = getattr(importlib.import_module("metile.frontend.kernel"), "KernelLauncher", None)
        finally:
            sys.path.remove(str(self.path))
            self._modules = _take_modules()
            sys.modules.update(ours)
        if launcher is None or not hasattr(launcher, "_compile"):
            raise SystemExit(f"--anchor {path}: {package.__file__} is not the original meTile "
                             f"(no metile.frontend.kernel.KernelLauncher._compile)")
        self.package, self.launcher = package, launcher
        global metile
        metile = package   # the kernels above call meTile through this name, and are annotated with its constexpr
        for case in CASES.values():
            case.fn.__annotations__ = {k: package.constexpr if _names_constexpr(v) else v
                                       for k, v in case.fn.__annotations__.items()}

    @contextlib.contextmanager
    def active(self):
        """meTile's modules in `sys.modules` (for the imports its compile does as it runs), metile's afterwards."""
        ours = _take_modules()
        sys.modules.update(self._modules)
        try:
            yield
        finally:
            self._modules = _take_modules()
            sys.modules.update(ours)

    def _launcher(self, case: AnchorCase):
        return self.launcher(self.package.kernel(case.fn), case.grid)

    def _compile(self, launcher, case: AnchorCase, constexprs: dict):
        return launcher._compile(list(case.args), dict(constexprs), list(launcher.kernel_fn._sig.parameters))

    def cold(self, name: str) -> float:
        """Seconds of one meTile compile on a fresh kernel object."""
        case = CASES[name]
        with self.active():
            launcher = self._launcher(case)
            gc.collect()
            t = time.perf_counter()
            self._compile(launcher, case, case.constexprs)
            return time.perf_counter() - t

    def warm(self, name: str) -> float:
        """Seconds of one meTile compile on a fresh kernel object that has compiled the kernel with `alt` first."""
        case = CASES[name]
        with self.active():
            launcher = self._launcher(case)
            self._compile(launcher, case, case.alt)
            gc.collect()
            t = time.perf_counter()
            self._compile(launcher, case, case.constexprs)
            return time.perf_counter() - t

    def msl(self, name: str) -> str:
        """meTile's MSL for one kernel (to check that the anchor compiles it)."""
        case = CASES[name]
        with self.active():
            return self._compile(self._launcher(case), case, case.constexprs).msl_source


def load_anchor(path: str, names: list[str]) -> Anchor:
    """The anchor at `path`, after checking that it compiles each of the kernels `names` to MSL."""
    anchor = Anchor(path)
    for name in names:
        msl = anchor.msl(name)
        if "[[kernel]]" not in msl:
            raise SystemExit(f"--anchor {path}: meTile gave no kernel for {name}:\n{msl[:400]}")
    return anchor


@attrs.frozen
class AnchorRow:
    """Medians in seconds for one kernel: metile's cold compile (without and with its parse) and warm compile, None
    where the lowering refuses the kernel, and meTile's cold and warm compiles."""

    name: str
    cold: float | None
    cold_with_parse: float | None
    anchor_cold: float
    warm: float | None
    anchor_warm: float


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def print_anchor_table(anchor: Anchor, rows: list[AnchorRow], reps: int) -> None:
    """Per kernel: metile's and meTile's medians in ms and their ratio, cold and warm; the geometric means."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nmetile against meTile ({anchor.package.__file__}), interleaved in one loop, medians over {reps} reps "
          f"in ms;\nratio = metile / meTile. Load average (1, 5, 15 min): {load}.\n")
    print(f"{'kernel':10s} {'cold: metile':>12s} {'+parse':>7s} {'meTile':>7s} {'ratio':>6s} {'+parse':>7s}   "
          f"{'warm: metile':>12s} {'meTile':>7s} {'ratio':>6s}")
    cold, cold_parse, warm = [], [], []
    for r in rows:
        ms = [f"{v * 1e3:.3f}" if v is not None else "-" for v in (r.cold, r.cold_with_parse, r.warm)]
        ratios = []
        for mine, theirs, into in ((r.cold, r.anchor_cold, cold), (r.cold_with_parse, r.anchor_cold, cold_parse),
                                   (r.warm, r.anchor_warm, warm)):
            if mine is None:
                ratios.append("-")
            else:
                into.append(mine / theirs)
                ratios.append(f"{mine / theirs:.1f}x")
        print(f"{r.name:10s} {ms[0]:>12s} {ms[1]:>7s} {r.anchor_cold * 1e3:7.3f} {ratios[0]:>6s} {ratios[1]:>7s}   "
              f"{ms[2]:>12s} {r.anchor_warm * 1e3:7.3f} {ratios[2]:>6s}")
    print(f"{'geomean':10s} {'':>12s} {'':>7s} {'':>7s} {_geomean(cold):5.1f}x {_geomean(cold_parse):6.1f}x   "
          f"{'':>12s} {'':>7s} {_geomean(warm):5.1f}x")
