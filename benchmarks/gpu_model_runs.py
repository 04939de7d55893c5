"""The problems of the GPU-model table (`benchmarks/gpu_model.py`) and how each side runs them on the CPU device.

A `Problem` is one workload (a GEMM, a softmax, a layer norm, an attention) with its ideal cost: its FLOPs (GEMM,
attention) or the bytes it must move at least (softmax, layer norm: the input read and the output written once,
plus the weights). `run_metile` launches metile's kernel (`benchmarks/metile_kernels.py`) with `profile=`;
`run_mlx` dispatches Apple MLX's kernel through the MLX corpus's own cases (`benchmarks/mlx_kernels`), which
compile and dispatch it as MLX's host code does, on a device that profiles every dispatch. A problem small enough
runs whole and its output is compared with numpy; a larger one counts a sample of threadgroups only
(`profile_only=True`), its output left incomplete and unchecked.
"""

from __future__ import annotations

import enum
import functools
import math
import time
from pathlib import Path

import attrs
import numpy as np

from benchmarks import metile_kernels as mk
from benchmarks.mlx_kernels.common import CorpusUnavailable, Mismatch, check_close
from metile.profile.gpus import GpuSpec
from metile.profile.model import peak_flops, tensor_peak_flops

SAMPLE = 32                       # threadgroups counted per dispatch
NAX_SAMPLE = 4                    # of a tensor-op dispatch counted in part: the CPU device runs its products one by one
DISPATCH_TIMEOUT_S = 900.0        # the watchdog of every profiled dispatch: MLX's D=128 attention takes ~100 s on 2
                                  # cores, metile's f32 1024^3 GEMM 12 s quiet and 151 s on a machine at load 12
REFERENCE_GEMM = Path(__file__).resolve().parents[1] / "tests/data/reference_msl/gemm_f32_64x64x32/kernel.metal"
NAX_WHOLE_FLOPS = 2 * 256 ** 3     # MLX's tensor-op GEMM runs whole (and is checked) up to 256^3
MEASURED_REFERENCE_M1_S = 2.34e-3  # the reference GEMM at 1024^3 f32 on an M1, as meTile's CI measured it

_ITEMSIZE = {"float32": 4, "float16": 2}
_SHORT = {"float32": "f32", "float16": "f16"}


class Kind(enum.Enum):
    GEMM = "gemm"
    SOFTMAX = "softmax"
    LAYER_NORM = "layer_norm"
    ATTENTION = "attention"


@attrs.frozen
class Problem:
    """A workload: `shape` is (M, N, K) for GEMM, (rows, cols) for softmax and layer norm, (batch, heads, sequence,
    head_dim) for attention. `whole`: run the whole dispatch and check it, else count a sample only."""

    kind: Kind
    dtype: str
    shape: tuple[int, ...]
    whole: bool

    @property
    def name(self) -> str:
        if self.kind is Kind.ATTENTION:
            size = "B{} H{} N{} D{}".format(*self.shape)
        else:
            size = "x".join(str(d) for d in self.shape)
        return f"{self.kind.value} {_SHORT[self.dtype]} {size}"

    @property
    def flops(self) -> float:
        """The FLOPs of the matrix products (an FMA counts two); 0 for the row kernels."""
        if self.kind is Kind.GEMM:
            m, n, k = self.shape
            return 2.0 * m * n * k
        if self.kind is Kind.ATTENTION:
            b, h, n, d = self.shape
            return 4.0 * b * h * n * n * d          # Q K^T and P V
        return 0.0

    @property
    def compulsory_bytes(self) -> float:
        """Bytes device memory must move at least: every input read once, every output written once."""
        size = _ITEMSIZE[self.dtype]
        if self.kind is Kind.GEMM:
            m, n, k = self.shape
            return size * (m * k + k * n + m * n)
        if self.kind is Kind.ATTENTION:
            b, h, n, d = self.shape
            return size * 4 * b * h * n * d
        rows, cols = self.shape
        weights = 2 * cols if self.kind is Kind.LAYER_NORM else 0
        return size * (2 * rows * cols + weights)

    @property
    def flop_bound(self) -> bool:
        return self.flops > 0

    @property
    def work(self) -> float:
        """What the counters are normalised by: FLOPs for the products, compulsory bytes for the row kernels."""
        return self.flops if self.flop_bound else self.compulsory_bytes

    def ideal_seconds(self, spec: GpuSpec) -> float:
        """FLOPs over the GPU's peak for the dtype (products), else the compulsory bytes' least time
        (`compulsory_seconds`)."""
        if self.flop_bound:
            dtype = "half" if self.dtype == "float16" else "float"
            return self.flops / max(peak_flops(spec, dtype), tensor_peak_flops(spec, dtype))
        return compulsory_seconds(self.compulsory_bytes, spec)


def compulsory_seconds(nbytes: float, spec: GpuSpec) -> float:
    """The least time `nbytes` of compulsory traffic takes, as the model's device bound reckons it: what the
    last-level cache cannot hold at the memory bandwidth, and all of it no faster than the cache's peak."""
    from metile.profile.rates import CACHE_BYTES_PER_CORE_CLOCK_BOUND

    cache_bw = spec.gpu_cores * CACHE_BYTES_PER_CORE_CLOCK_BOUND * spec.clock_hz
    return max(max(0.0, nbytes - spec.last_level_cache) / spec.memory_bandwidth, nbytes / cache_bw)


@attrs.frozen
class Run:
    """One profiled dispatch: who ran it, which kernel, its profile (None when it could not run) and a note (how it
    was checked, or why it did not run); `failed` when it ran wrong or raised."""

    impl: str
    kernel: str
    profile: object
    note: str
    seconds: float
    failed: bool = False


def problems(quick: bool) -> list[Problem]:
    if quick:
        return [Problem(Kind.GEMM, "float32", (128, 128, 128), True),
                Problem(Kind.GEMM, "float16", (128, 128, 128), True),
                Problem(Kind.SOFTMAX, "float32", (64, 1024), True),
                Problem(Kind.LAYER_NORM, "float32", (64, 1024), True),
                Problem(Kind.ATTENTION, "float16", (1, 1, 64, 64), True)]
    return [Problem(Kind.GEMM, "float32", (1024, 1024, 1024), True),
            Problem(Kind.GEMM, "float16", (1024, 1024, 1024), True),
            Problem(Kind.GEMM, "float32", (4096, 4096, 4096), False),
            Problem(Kind.GEMM, "float16", (4096, 4096, 4096), False),
            Problem(Kind.SOFTMAX, "float32", (4096, 4096), True),
            Problem(Kind.LAYER_NORM, "float32", (4096, 4096), True),
            Problem(Kind.ATTENTION, "float16", (1, 8, 1024, 64), False),
            Problem(Kind.ATTENTION, "float16", (1, 8, 4096, 64), False),
            Problem(Kind.ATTENTION, "float16", (1, 8, 4096, 128), False)]


# -- metile ----------------------------------------------------------------------------------------------------------
def _data(shape, dtype: str, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(-1.0, 1.0, shape) * scale).astype(dtype)


def _metile_gemm(p: Problem, prof: dict):
    m, n, k = p.shape
    a, b = _data((m, k), p.dtype, 1), _data((k, n), p.dtype, 2)
    out = np.full((m, n), np.nan, p.dtype)
    profile = mk.run_matmul(a, b, out, **prof)
    return "matmul_kernel " + mk.gemm_config(p.dtype), profile, out, functools.partial(_matmul, a, b)


def _metile_softmax(p: Problem, prof: dict):
    x = _data(p.shape, p.dtype, 3, 4.0)
    out = np.full_like(x, np.nan)
    return "softmax_kernel", mk.run_softmax(x, out, **prof), out, functools.partial(_softmax, x)


def _metile_layer_norm(p: Problem, prof: dict):
    x = _data(p.shape, p.dtype, 4, 4.0)
    w, bias = _data(p.shape[1], p.dtype, 5) + 1.0, _data(p.shape[1], p.dtype, 6)
    out = np.full_like(x, np.nan)
    profile = mk.run_layer_norm(x, w, bias, out, 1e-5, **prof)
    return "layer_norm_fwd_fused", profile, out, functools.partial(_layer_norm, x, w, bias, 1e-5)


def _metile_attention(p: Problem, prof: dict):
    q, k, v = (_data(p.shape, p.dtype, seed) for seed in (7, 8, 9))
    out = np.full_like(q, np.nan)
    scale = 1.0 / math.sqrt(p.shape[3])
    profile = mk.run_attention(q, k, v, out, scale, **prof)
    blocks = "{}x{}".format(*mk.ATTN_BLOCKS[p.shape[3]])
    return f"attn_fwd {blocks}", profile, out, functools.partial(_attention, q, k, v, scale)


_METILE = {Kind.GEMM: _metile_gemm, Kind.SOFTMAX: _metile_softmax, Kind.LAYER_NORM: _metile_layer_norm,
           Kind.ATTENTION: _metile_attention}


def metile_target(p: Problem, spec: GpuSpec) -> str | None:
    """The target metile's kernel for `p` is compiled for when the model estimates `spec`: the M5 for an f16 GEMM on a
    chip whose Neural Accelerators run Metal 4 tensor ops (its products then run on `matmul2d`, as MLX's do there),
    else the CPU device's own (an f32 GEMM's exact products stay on simdgroup matrices on every target, so it is the
    same kernel, run whole and checked where the problem is small enough)."""
    return "M5" if p.kind is Kind.GEMM and p.dtype == "float16" and spec.neural_accelerator else None


def run_metile(p: Problem, target: str | None = None) -> Run:
    """Launch metile's kernel for `p` with `profile=` (whole and checked, or a sample only), compiled for `target`
    (`metile_target`)."""
    start = time.perf_counter()
    # tensor ops run their products one by one on the CPU device: as MLX's, whole up to 256^3, else 4 threadgroups
    whole = p.whole and (target is None or p.flops <= NAX_WHOLE_FLOPS)
    sample = SAMPLE if target is None else NAX_SAMPLE
    prof = dict(profile=sample, profile_only=not whole, timeout=DISPATCH_TIMEOUT_S,
                **({} if target is None else {"target": target}))
    kernel, profile, out, want = _METILE[p.kind](p, prof)
    kernel += "" if target is None else f" for {target}"
    if not whole:
        return Run("metile", kernel, profile, f"counted {sample} threadgroups only (profile_only)",
                   time.perf_counter() - start)
    rtol, atol = (2e-5, 1e-4) if p.dtype == "float32" else (1e-3, 2e-3)
    if p.kind is Kind.GEMM:
        atol *= math.sqrt(p.shape[2] / 64) + 1      # float accumulation over K terms
    elif p.kind is Kind.SOFTMAX:
        atol = 1e-9
    try:
        r = check_close(out, want(), rtol, atol)
    except Mismatch as e:
        return Run("metile", kernel, profile, f"WRONG RESULT: {e}", time.perf_counter() - start, failed=True)
    return Run("metile", kernel, profile, f"checked (max error {r.max_error:.2g})", time.perf_counter() - start)


def _matmul(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w.astype(np.float64) + b.astype(np.float64)


def _attention(q, k, v, scale):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    return _softmax(q @ k.swapaxes(-1, -2) * scale) @ v


# -- MLX -------------------------------------------------------------------------------------------------------------
class _Counted(Exception):
    """A sampled dispatch returned: the case stops before comparing its incomplete output."""


class ProfilingDevice:
    """The CPU device, profiling every dispatch (`profiles` collects them); with `profile_only` it stops the case
    after its first dispatch (`_Counted`), since the outputs are then incomplete."""

    def __init__(self, dev, sample: int, profile_only: bool):
        self._dev = dev
        self._prof = dict(profile=sample, profile_only=profile_only, timeout=DISPATCH_TIMEOUT_S)
        self.profiles: list = []

    def __getattr__(self, name):
        return getattr(self._dev, name)

    def _record(self, profile):
        self.profiles.append(profile)
        if self._prof["profile_only"]:
            raise _Counted
        return profile

    def dispatch_threadgroups(self, fn, threadgroups, threads_per_threadgroup, args=(), **kw):
        return self._record(self._dev.dispatch_threadgroups(fn, threadgroups, threads_per_threadgroup, args,
                                                            **kw, **self._prof))

    def dispatch_threads(self, fn, threads, threads_per_threadgroup, args=(), **kw):
        return self._record(self._dev.dispatch_threads(fn, threads, threads_per_threadgroup, args, **kw,
                                                       **self._prof))


def mlx_gemm_tile(p: Problem, spec: GpuSpec) -> tuple[int, int, int, int, int]:
    """(bm, bn, bk, wm, wn) that MLX's GEMM_TPARAM_MACRO (mlx/backend/metal/matmul.cpp) picks for a row-major
    (nn) GEMM on `spec`. The macro keys on the last letter of the GPU's architecture name (applegpu_g13g for the
    M1): by our reading 'g' for the base chips (a small device), 's' and 'c' for Pro and Max (medium: the
    default tile) and 'd' for Ultra (large)."""
    m, n, k = p.shape
    half = p.dtype != "float32"
    if spec.tier == "base":                                     # small device
        return (64, 64, 16, 1, 2) if half else (64, 64, 16, 2, 2)
    if spec.tier == "Ultra" and half:                           # large device, half and bfloat
        if m * n >= 1 << 20:
            return (64, 64, 16, 1, 2) if 2 * max(m, n) > k else (32, 64, 16, 1, 2)
        return (64, 64, 16, 1, 2)
    if spec.tier == "Ultra" and m * n < 1 << 20:                # large device, small float matmul
        return (64, 32, 32, 2, 2)
    return (64, 64, 16, 2, 2)                                   # medium device, and large float matmuls


def mlx_nax_tile(p: Problem, spec: GpuSpec) -> tuple[int, int, int, int, int]:
    """(bm, bn, bk, wm, wn) of MLX's tensor-op GEMM (steel_gemm_fused_nax, steel_matmul_regular_axpby_nax in
    mlx/backend/metal/matmul.cpp): 128x128x512 with 4x4 simdgroups, or, on the GPUs whose architecture name ends
    in 's', 'c' or 'd' (the Pro, Max and Ultra tiers, as `mlx_gemm_tile` reads them), bm 64 with wm 2 and bk 64
    when K >= 8192 and K > M + N, else 256."""
    m, n, k = p.shape
    if spec.tier == "base":
        return (128, 128, 512, 4, 4)
    return (64, 128, 64 if k >= 8192 and k > m + n else 256, 2, 4)


def mlx_uses_nax(p: Problem, spec: GpuSpec) -> bool:
    """MLX runs a GEMM with its tensor-op kernels on a GPU of generation 17 or later (M5 on, the chips with Neural
    Accelerators) on macOS 26.2 or later, for half and bfloat and, as MLX_ENABLE_TF32 defaults to 1, float32 (in
    TF32) too (mlx/backend/metal/device.cpp is_nax_available, matmul.cpp)."""
    return p.kind is Kind.GEMM and spec.neural_accelerator


def mlx_key(p: Problem, spec: GpuSpec) -> tuple:
    """What decides which MLX dispatch serves `p` on `spec` (only the GEMM kernel and tile depend on the GPU)."""
    if mlx_uses_nax(p, spec):
        return (p, ("nax", *mlx_nax_tile(p, spec)))
    return (p, mlx_gemm_tile(p, spec) if p.kind is Kind.GEMM else None)


def run_mlx(dev, p: Problem, tile: tuple | None) -> Run:
    """Dispatch MLX's kernel for `p` as MLX's host code does (the corpus's cases), profiled; `tile` is the second
    item of `mlx_key`."""
    from benchmarks.mlx_kernels.cases_matmul import _steel_attention_case, _steel_gemm_case
    from benchmarks.mlx_kernels.cases_nax import _nax_gemm_case
    from benchmarks.mlx_kernels.cases_rows import run_softmax
    from benchmarks.mlx_kernels.cases_source import run_layer_norm

    start = time.perf_counter()
    nax = p.kind is Kind.GEMM and tile[0] == "nax"
    # the CPU device runs matmul2d's products one by one: a tensor-op GEMM above NAX_WHOLE_FLOPS counts a sample
    whole = p.whole and not (nax and p.flops > NAX_WHOLE_FLOPS)
    sample = NAX_SAMPLE if nax and not whole else SAMPLE
    pdev = ProfilingDevice(dev, sample, not whole)
    if nax:
        m, n, k = p.shape
        kernel = "steel_gemm_fused_nax {}x{}x{} wm{} wn{}".format(*tile[1:])
        run = _nax_gemm_case(p.name, p.dtype, m, n, k, tile[1:]).run
    elif p.kind is Kind.GEMM:
        m, n, k = p.shape
        kernel = "steel_gemm_fused {}x{}x{} wm{} wn{}".format(*tile)
        run = _steel_gemm_case(p.name, p.dtype, m, n, k, tile).run
    elif p.kind is Kind.ATTENTION:
        b, h, n, d = p.shape
        kernel = f"steel_attention 32x{32 if d < 128 else 16} wm4 wn1"
        run = _steel_attention_case(p.name, p.dtype, b, h, h, n, n, d).run
    elif p.kind is Kind.SOFTMAX:
        rows, cols = p.shape
        kernel = ("looped" if cols > 4096 else "block") + "_softmax"
        tol = (1e-5, 1e-9) if p.dtype == "float32" else (1e-2, 1e-4)
        run = functools.partial(run_softmax, tname=p.dtype, rows=rows, axis=cols, precise=False, rtol=tol[0],
                                atol=tol[1])
    else:
        rows, cols = p.shape
        kernel = "layer_norm" + ("_looped" if cols > 6656 else "")
        tol = (1e-5, 1e-5) if p.dtype == "float32" else (2e-3, 2e-3)
        run = functools.partial(run_layer_norm, tname=p.dtype, rows=rows, axis=cols, rtol=tol[0], atol=tol[1])
    try:
        result = run(pdev)
    except _Counted:
        return Run("mlx", kernel, pdev.profiles[0], f"counted {sample} threadgroups only (profile_only)",
                   time.perf_counter() - start)
    except CorpusUnavailable as e:
        return Run("mlx", kernel, None, f"unavailable: {e}", time.perf_counter() - start)
    except Mismatch as e:
        return Run("mlx", kernel, pdev.profiles[-1] if pdev.profiles else None, f"WRONG RESULT: {e}",
                   time.perf_counter() - start, failed=True)
    if len(pdev.profiles) != 1:
        raise AssertionError(f"{kernel}: expected one dispatch, got {len(pdev.profiles)}")
    return Run("mlx", kernel, pdev.profiles[0], f"checked (max error {result.max_error:.2g})",
               time.perf_counter() - start)


def run_reference_gemm(dev, n: int, whole: bool) -> Run:
    """The original meTile GEMM (`mtile_matmul`, 64x64x32 tiles, 128 threads) on n^3 f32, as its tests dispatch
    it: the calibration point of the model."""
    start = time.perf_counter()
    fn = dev.compile(REFERENCE_GEMM.read_text(), name="gemm_f32_64x64x32.metal").function("mtile_matmul")
    a, b = _data((n, n), "float32", 10), _data((n, n), "float32", 11)
    c = np.full((n, n), np.nan, np.float32)
    profile = dev.dispatch_threadgroups(fn, (n // 64, n // 64, 1), (128, 1, 1),
                                        [a, b, c, np.int32(n), np.int32(n), np.int32(n)],
                                        profile=SAMPLE if whole else 8, profile_only=not whole)
    note = "counted 8 threadgroups only (profile_only)"
    failed = False
    if whole:
        try:
            r = check_close(c, a.astype(np.float64) @ b.astype(np.float64), 2e-5, 1e-4 * (math.sqrt(n / 64) + 1))
            note = f"checked (max error {r.max_error:.2g})"
        except Mismatch as e:
            note, failed = f"WRONG RESULT: {e}", True
    return Run("meTile", "mtile_matmul 64x64x32", profile, note, time.perf_counter() - start, failed)
