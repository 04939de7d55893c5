"""Compile latency: the host time from a kernel's Python source to its MSL text, without the C++/Metal compile.

For five kernels written as in docs/language.md section 11 (vector add, three-pass softmax, layer norm, RMS norm,
GEMM with `dot` and `tile_range`), these figures:
- first compile in a warm process: a fresh `JITKernel` made from the same function each repetition, traced
  anew, then `DEFAULT_PIPELINE` and `emit_msl`, after warm-up runs have imported everything and filled the
  process-wide caches; median and min over the repetitions, split into trace, lowering and emission;
- parse: reading and parsing the function's source (`kernel.source`), which `@metile.kernel` does once per
  code object; it is part of decorating a function, not of compiling a specialization, so it is timed apart,
  cold (its cache entry dropped first), and the first-compile figures leave it out. "with parse" is the
  median of the sum, what a function compiled once in a process costs;
- cache hit: `kernel.compile(...)` again on the same object once it has compiled (specialization and the
  cache lookup); for a kernel the lowering refuses, `kernel.trace(...)` again instead.
Targets on the first-compile median: vector add <= 0.5 ms, the others <= 3 ms. A kernel that the lowering does
not handle yet prints "not lowered yet: <message>" (with its trace time) instead.

With `--anchor PATH` (default: the environment variable METILE_ANCHOR), PATH is a checkout of the original meTile
compiler (the directory holding its `metile/` package; its Metal runtime may be stubbed), and the same five kernels,
written as meTile's own examples write them (`benchmarks/compile_anchor.py`), are compiled by meTile in the same
process and the same loop, each repetition running metile's and meTile's compiles one after the other. A second
table gives per kernel the medians and the ratio metile / meTile, and the geometric mean of the ratios:
- cold: metile's first compile above (trace, lowering, emission, no parse; "with parse" adds it) against meTile's
  `KernelLauncher._compile` on a fresh kernel object (trace, lowering, passes, emission);
- warm: the same, on a fresh kernel object that has already compiled the kernel with other constexprs (smaller
  blocks), so that metile's parse, signature binding and function identity are done: a new specialization of a
  kernel in use. meTile keeps nothing per kernel object but the signature, so its warm figure is its cold one.

Until the parse cache existed, "trace" included the parse (a fresh `JITKernel` parsed its source again):
compare "with parse" against figures from before it.

Run: python benchmarks/compile_latency.py [--reps 20] [--profile softmax] [--anchor PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import metile  # noqa: E402 - after the path set-up, so the checkout is measured
from benchmarks.compile_anchor import Anchor, AnchorRow, load_anchor, print_anchor_table  # noqa: E402
from metile.emit.msl import emit_msl  # noqa: E402
from metile.frontend.source import _PARSED  # noqa: E402 - the per-code-object parse cache, emptied to time a cold parse
from metile.ir.errors import MetileError  # noqa: E402
from metile.rewrite.pipeline import DEFAULT_PIPELINE, run  # noqa: E402

WARMUP = 3
HIT_REPS = 2_000


def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live)
    metile.store(C + offs, a + b, mask=live)


def softmax_rows(X, Y, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    run_max = -3.0e38
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_max = metile.maximum(run_max, metile.where(ok, x, -3.0e38))
    row_max = metile.max(run_max)

    run_sum = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_sum = run_sum + metile.where(ok, metile.exp(x - row_max), 0.0)
    denom = metile.sum(run_sum)

    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, metile.exp(x - row_max) / denom, mask=ok)


def layernorm(X, W, Bias, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    part = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        part = part + metile.load(X + row * n_cols + cols, mask=cols < n_cols)
    mean = metile.sum(part) / n_cols

    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        d = metile.where(ok, x - mean, 0.0)
        sq = sq + d * d
    rstd = 1.0 / metile.sqrt(metile.sum(sq) / n_cols + eps)

    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        w = metile.load(W + cols, mask=ok)
        b = metile.load(Bias + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, (x - mean) * rstd * w + b, mask=ok)


def rmsnorm(X, W, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        x = metile.load(X + row * n_cols + cols, mask=cols < n_cols)
        sq = sq + x * x
    scale = metile.rsqrt(metile.sum(sq) / n_cols + eps)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        w = metile.load(W + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, x * scale * w, mask=ok)


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
class Case:
    """One kernel: its function, arguments and constexprs, its first-compile target, and the other constexprs
    that a warm compile (`--anchor`) is preceded by."""

    name: str
    fn: Callable
    args: tuple
    constexprs: dict
    target_ms: float
    alt: dict


CASES = [
    Case("vec_add", vec_add, (_f32(1024), _f32(1024), _f32(1024), 1024), {"BLOCK": 256}, 0.5, {"BLOCK": 128}),
    Case("softmax", softmax_rows, (_f32(64 * 300), _f32(64 * 300), 300), {"BLOCK": 256}, 3.0, {"BLOCK": 128}),
    Case("layernorm", layernorm, (_f32(32 * 300), _f32(300), _f32(300), _f32(32 * 300), 300, 1e-5),
         {"BLOCK": 256}, 3.0, {"BLOCK": 128}),
    Case("rmsnorm", rmsnorm, (_f32(32 * 300), _f32(300), _f32(32 * 300), 300, 1e-5), {"BLOCK": 256}, 3.0,
         {"BLOCK": 128}),
    Case("gemm", matmul, (_f32(128 * 128), _f32(128 * 128), _f32(128 * 128), 128, 128, 128),
         {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 3.0, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16}),
]


@attrs.frozen
class FirstCompile:
    """Seconds per stage of one first compile (`parse`: the cold source parse, not in `total`); `refused` is
    the lowering's message when it stopped there."""

    parse: float
    trace: float
    lower: float = 0.0
    emit: float = 0.0
    refused: str | None = None

    @property
    def total(self) -> float:
        return self.trace + self.lower + self.emit


def first_compile(case: Case) -> FirstCompile:
    """Parse the source cold, then trace a fresh JITKernel, run the pipeline and emit MSL, timing each step."""
    kernel = metile.kernel(case.fn)
    _PARSED.pop(id(case.fn.__code__), None)  # so that `source` reads and parses the file
    tp = time.perf_counter()
    kernel.source  # noqa: B018 - the parse, done by the first trace otherwise
    t0 = time.perf_counter()
    tile_ir = kernel.trace(*case.args, **case.constexprs)
    t1 = time.perf_counter()
    try:
        metal_ir = run(DEFAULT_PIPELINE, tile_ir)
    except MetileError as e:
        where = f" ({e.loc})" if e.loc is not None else ""
        return FirstCompile(t0 - tp, t1 - t0, refused=f"{e.message}{where}")
    t2 = time.perf_counter()
    emit_msl(metal_ir)
    t3 = time.perf_counter()
    return FirstCompile(t0 - tp, t1 - t0, t2 - t1, t3 - t2)


def cache_hit(case: Case, lowered: bool) -> tuple[str, float, float]:
    """(what was timed, median, min) seconds of a cached `compile` (or `trace`) on one kernel object."""
    kernel = metile.kernel(case.fn)
    what = "compile" if lowered else "trace"
    if lowered:
        try:
            kernel.compile(*case.args, **case.constexprs)  # the one device compile; the hits below skip it
        except MetileError as e:
            print(f"  ({case.name}: the device did not compile its MSL, timing the trace cache instead: "
                  f"{e.message.splitlines()[0]})")
            what = "trace"
    step = kernel.compile if what == "compile" else kernel.trace
    step(*case.args, **case.constexprs)
    times = []
    for _ in range(HIT_REPS):
        t = time.perf_counter()
        step(*case.args, **case.constexprs)
        times.append(time.perf_counter() - t)
    return what, statistics.median(times), min(times)


def warm_compile(case: Case) -> float | None:
    """Seconds of the trace, pipeline and emission of `case.constexprs` on a fresh kernel object that has compiled
    the kernel with `case.alt` first (a new specialization of a kernel in use); None when the lowering refuses."""
    kernel = metile.kernel(case.fn)
    try:
        emit_msl(run(DEFAULT_PIPELINE, kernel.trace(*case.args, **case.alt)))
        gc.collect()
        t = time.perf_counter()
        emit_msl(run(DEFAULT_PIPELINE, kernel.trace(*case.args, **case.constexprs)))
        return time.perf_counter() - t
    except MetileError:
        return None


HEADER = (f"{'kernel':10s} {'parse':>6s} {'trace':>7s} {'lower':>7s} {'emit':>7s}   {'first: median':>13s} "
          f"{'min':>7s}  {'target':>9s}      {'with parse':>10s}  {'cache hit: median':>24s} {'min':>6s}")


def measure(case: Case, reps: int, anchor: Anchor | None = None) -> AnchorRow | None:
    """One table row (milliseconds, cache hits in microseconds), and the refusal when the lowering stops. With an
    anchor, each repetition also runs meTile's cold compile, metile's warm one and meTile's warm one, in that order,
    and the medians of the four are returned for the second table."""
    for _ in range(WARMUP):
        first_compile(case)
        if anchor is not None:
            anchor.cold(case.name)
            warm_compile(case)
            anchor.warm(case.name)
    runs, anchored = [], []
    for _ in range(reps):
        gc.collect()
        runs.append(first_compile(case))
        if anchor is not None:
            anchored.append((anchor.cold(case.name), warm_compile(case), anchor.warm(case.name)))
    med = statistics.median
    parse, trace, refused = med(r.parse for r in runs), med(r.trace for r in runs), runs[0].refused
    row = None
    if anchor is not None:
        lowered = refused is None
        row = AnchorRow(case.name, med(r.total for r in runs) if lowered else None,
                        med(r.total + r.parse for r in runs) if lowered else None, med(a[0] for a in anchored),
                        med(a[1] for a in anchored) if lowered else None, med(a[2] for a in anchored))
    what, hit_med, hit_min = cache_hit(case, refused is None)
    hit = f"{what:>7s} {hit_med * 1e6:9.1f} us {hit_min * 1e6:6.1f}"
    if refused is not None:
        verdict = "OVER" if trace > case.target_ms * 1e-3 else "-"  # the trace alone is over the budget
        print(f"{case.name:10s} {parse * 1e3:6.3f} {trace * 1e3:7.3f} {'-':>7s} {'-':>7s}   {'-':>13s} {'-':>7s}  "
              f"<= {case.target_ms:3.1f} ms {verdict:4s}  {'-':>10s}  {hit}")
        print(f"{'':10s} not lowered yet: {refused}")
        return row
    lower, emit = med(r.lower for r in runs), med(r.emit for r in runs)
    total, best = med(r.total for r in runs), min(r.total for r in runs)
    with_parse = med(r.total + r.parse for r in runs)
    verdict = "OK" if total <= case.target_ms * 1e-3 else "OVER"
    print(f"{case.name:10s} {parse * 1e3:6.3f} {trace * 1e3:7.3f} {lower * 1e3:7.3f} {emit * 1e3:7.3f}   "
          f"{total * 1e3:10.3f} ms {best * 1e3:7.3f}  <= {case.target_ms:3.1f} ms {verdict:4s} "
          f"{with_parse * 1e3:7.3f} ms  {hit}")
    return row


def profile(case: Case, reps: int) -> None:
    """cProfile over `reps` first compiles of one kernel (after the warm-up), top 25 by cumulative time."""
    for _ in range(WARMUP):
        first_compile(case)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(reps):
        result = first_compile(case)
    prof.disable()
    if result.refused is not None:
        print(f"{case.name}: not lowered yet: {result.refused} (the profile covers the trace and the refusal)")
    print(f"{case.name}: {reps} first compile(s), top 25 functions by cumulative time")
    pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("cumulative").print_stats(25)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, help="first compiles per kernel (default 20; 1 with --profile)")
    parser.add_argument("--profile", metavar="NAME", choices=[c.name for c in CASES],
                        help="profile the first compile of one kernel instead: " + ", ".join(c.name for c in CASES))
    parser.add_argument("--anchor", metavar="PATH", default=os.environ.get("METILE_ANCHOR") or None,
                        help="a checkout of the original meTile to compile the same kernels with, side by side "
                             "(default: $METILE_ANCHOR, else none)")
    opts = parser.parse_args(argv)
    by_name = {c.name: c for c in CASES}
    if opts.profile:
        profile(by_name[opts.profile], max(1, opts.reps or 1))
        return 0
    reps = max(1, opts.reps or 20)
    anchor = load_anchor(opts.anchor, [c.name for c in CASES]) if opts.anchor else None
    print(f"Source -> Tile IR -> DEFAULT_PIPELINE -> MSL, without the C++/Metal compile. First compile: a fresh kernel "
          f"object in a warm\nprocess, median and min over {reps} reps, in ms, without the source parse (timed cold "
          f"apart, once per function: 'parse'\nand 'with parse'). Cache hit: the same call again on a compiled object, "
          f"median and min over {HIT_REPS}.\n")
    print(HEADER)
    rows = [measure(case, reps, anchor) for case in CASES]
    if anchor is not None:
        print_anchor_table(anchor, rows, reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
