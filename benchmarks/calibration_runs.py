"""How each calibration entry (benchmarks/calibration/measurements.toml) is profiled on the CPU device.

`profiles_for(entry)` returns the profiles of the dispatches that ran the measured kernel (MLX's, or metile's own,
through the corpus cases of `benchmarks/mlx_kernels`), or None when the entry has no runnable kernel here.

Reduced sizes: a dimension whose only effect on a threadgroup is a loop trip count (a GEMM's K, an attention's key
length, a row kernel's rows, a batch, the elements of a streaming kernel) is profiled at two small sizes and every
count, footprint and traffic figure extrapolated linearly to the published size. That is exact for counts affine in
that dimension, which these are: each loop trip adds the same counts (the two sizes keep the size's remainder by
the tile, so the edge handling is the same), and a grid dimension adds threadgroups with the same counts. The
launch is the one at the published size.
"""

from __future__ import annotations

import functools
import re

import attrs

import metile
from benchmarks.gpu_model_runs import Kind, Problem, ProfilingDevice, _Counted, mlx_gemm_tile, mlx_nax_tile
from metile.profile.counts import Counts, Launch, Profile
from metile.profile.gpus import gpu

SAMPLE = 8     # threadgroups counted per dispatch (the kernels here treat every threadgroup alike)


@attrs.frozen
class Run:
    """A runner's answer: the profiles (one per dispatch), what kernel ran, and whether it is only a proxy of the
    measured one (same problem, another implementation: its bound holds, its estimate is not the measured kernel's)."""

    profiles: tuple[Profile, ...]
    kernel: str
    proxy: bool = False


# -- exact linear extrapolation ----------------------------------------------------------------------------------
def _lerp(a, b, t: float):
    if isinstance(a, dict):
        return {k: _lerp(a.get(k, 0), b.get(k, 0), t) for k in sorted(set(a) | set(b))}
    return a + (b - a) * t


def _lerp_counts(a: Counts, b: Counts, t: float) -> Counts:
    return Counts(*(_lerp(getattr(a, f.name), getattr(b, f.name), t) for f in attrs.fields(Counts)))


def extrapolate(pa: Profile, pb: Profile, xa: float, xb: float, x: float, threadgroups: tuple[int, int, int]
                ) -> Profile:
    """The profile at size `x` from profiles at sizes `xa` and `xb`, every figure affine in the size; the launch
    takes `threadgroups`. Per-line counts are left out (the totals are what the model reads)."""
    t = (x - xa) / (xb - xa)
    la = pb.launch
    launch = Launch(threadgroups, la.threads_per_threadgroup, la.simd_width, la.threadgroup_memory)
    return Profile(kernel=pb.kernel, totals=_lerp_counts(pa.totals, pb.totals, t),
                   lines=(),
                   launch=launch, threadgroups_profiled=pb.threadgroups_profiled,
                   device_unique_bytes_per_threadgroup=_lerp(pa.device_unique_bytes_per_threadgroup,
                                                             pb.device_unique_bytes_per_threadgroup, t),
                   device_unique_bytes=_lerp(pa.device_unique_bytes, pb.device_unique_bytes, t),
                   device_unique_segments_per_threadgroup=_lerp(pa.device_unique_segments_per_threadgroup,
                                                                pb.device_unique_segments_per_threadgroup, t),
                   device_unique_segments=_lerp(pa.device_unique_segments, pb.device_unique_segments, t),
                   model=pb.model, registers=pb.registers)


def _dev():
    return metile.device("cpu")


def _profile(case_run, only: bool, sample: int = SAMPLE) -> list[Profile]:
    pdev = ProfilingDevice(_dev(), sample, only)
    try:
        case_run(pdev)
    except _Counted:
        pass
    return pdev.profiles


def _two_sizes(size: int, step: int) -> tuple[int, int]:
    """Two small sizes with the remainder of `size` by `step` (the same edge handling)."""
    rem = size % step
    return rem + 2 * step, rem + 4 * step


def _scaled(make, size: int, step: int, grid_of) -> list[Profile]:
    """Profiles of `make(n)` at two small sizes, extrapolated to `size` (per dispatch); `grid_of(i, n)` is the
    threadgroup grid of dispatch i at size n, None for a dispatch whose grid does not depend on n."""
    xa, xb = _two_sizes(size, step)
    if xb >= size:
        return make(size)
    pas, pbs = make(xa), make(xb)
    out = []
    for i, (pa, pb) in enumerate(zip(pas, pbs)):
        grid = grid_of(i, size) or pb.launch.threadgroups
        out.append(extrapolate(pa, pb, xa, xb, size, grid))
    return out


# -- the kernels --------------------------------------------------------------------------------------------------
@functools.cache
def steel_gemm(dtype: str, M: int, N: int, K: int, tile: tuple, batch: int = 1, nax: bool = False
               ) -> tuple[Profile, ...]:
    from benchmarks.mlx_kernels.cases_matmul import _steel_gemm_case
    from benchmarks.mlx_kernels.cases_nax import _nax_gemm_case

    case = _nax_gemm_case if nax else _steel_gemm_case
    bm, bn, bk = tile[:3]

    sample = 2 if nax else SAMPLE      # the CPU device runs matmul2d's products one by one: count 2 threadgroups

    def at_k(k: int, b: int = 1):
        return _profile(case("calib", dtype, M, N, k, tile, batch=(b,) if b > 1 else ()).run, True, sample)

    grid = (-(-N // bn), -(-M // bm), batch)
    if batch > 1:
        return tuple(_scaled(lambda b: at_k(K, b), batch, 1, lambda i, n: grid))
    return tuple(_scaled(at_k, K, bk, lambda i, n: grid))


@functools.cache
def steel_gemm_tall(dtype: str, M: int, N: int, K: int, tile: tuple) -> tuple[Profile, ...]:
    """A GEMM whose M is too large to allocate: extrapolated in M (whole tile rows)."""
    from benchmarks.mlx_kernels.cases_matmul import _steel_gemm_case

    bm, bn = tile[:2]
    grid = (-(-N // bn), -(-M // bm), 1)
    return tuple(_scaled(lambda m: _profile(_steel_gemm_case("calib", dtype, m, N, K, tile).run, True),
                         M, 64 * bm, lambda i, n: grid))


@functools.cache
def steel_attention(dtype: str, B: int, H: int, Hkv: int, qL: int, kL: int, D: int) -> tuple[Profile, ...]:
    from benchmarks.mlx_kernels.cases_matmul import _steel_attention_case

    bk = 32 if D < 128 else 16
    return tuple(_scaled(lambda k: _profile(_steel_attention_case("calib", dtype, B, H, Hkv, qL, k, D).run, True),
                         kL, bk, lambda i, n: None))


@functools.cache
def sdpa_vector_2pass(dtype: str, B: int, Hq: int, Hkv: int, qL: int, N: int, D: int, blocks: int
                      ) -> tuple[Profile, ...]:
    from benchmarks.mlx_kernels.cases_matmul import _sdpa_vector_2pass_case

    return tuple(_scaled(lambda n: _profile(_sdpa_vector_2pass_case("calib", dtype, B, Hq, Hkv, qL, n, D,
                                                                    blocks).run, False),
                         N, blocks, lambda i, n: None))


@functools.cache
def softmax(dtype: str, rows: int, cols: int) -> tuple[Profile, ...]:
    from benchmarks.mlx_kernels.cases_rows import run_softmax

    def at(r: int):
        return _profile(functools.partial(run_softmax, tname=dtype, rows=r, axis=cols, precise=False, rtol=1e-5,
                                          atol=1e-9), False)

    return tuple(_scaled(at, rows, 64, lambda i, n: None if i else (n, 1, 1)))


# MLX's softmax op as separate kernels (mlx/ops.cpp builds this graph when it does not use its Softmax primitive):
# max over the row, subtract it (broadcast), exp, sum over the row, divide by it (broadcast).
_GRAPH_REDUCE = ('instantiate_kernel("row_reduce_simple_maxfloat32", row_reduce_simple, float, float, Max<float>)',
                 'instantiate_kernel("row_reduce_simple_sumfloat32", row_reduce_simple, float, float, Sum<float>)')
_GRAPH_UNARY = ('instantiate_kernel("vn_Expfloat32float32", unary_v, float, float, Exp)',)
_GRAPH_BINARY = ('instantiate_kernel("g2_Subtractfloat32", binary_g_nd2, float, float, Subtract, int)',
                 'instantiate_kernel("g2_Dividefloat32", binary_g_nd2, float, float, Divide, int)')


def run_softmax_graph(dev, rows: int, cols: int):
    """The five dispatches of the unfused float32 softmax over the rows of a (rows, cols) array, each with MLX's
    grid: row_reduce_simple (mlx/backend/metal/reduce.cpp), the 2-D general binary kernel for the broadcast
    (binary.cpp: the row's max or sum has stride 0 along the row), and the contiguous unary kernel (unary.cpp)."""
    import numpy as np

    from benchmarks.mlx_kernels.cases_reduce import REDUCE_N_WRITES, _row_tg
    from benchmarks.mlx_kernels.cases_rows import MAX_TG, block_dims, ceildiv, library, random

    red = library(dev, "reduce.metal", ("atomic.h", "reduction/ops.h", "reduce.h"), _GRAPH_REDUCE)
    una = library(dev, "unary.metal", ("unary_ops.h", "unary.h"), _GRAPH_UNARY)
    bin_ = library(dev, "binary.metal", ("binary_ops.h", "binary.h"), _GRAPH_BINARY)
    x = random((rows, cols), "float32", seed=rows)
    tg = _row_tg(cols)
    row_strides = (np.array([cols, 1], np.int64), np.array([1, 0], np.int64))

    def reduce(name: str, a):
        out = np.zeros(rows, np.float32)
        dev.dispatch_threads(red.function(name), (tg, ceildiv(rows, REDUCE_N_WRITES), 1), (tg, 1, 1),
                             [a, out, np.uint64(cols), np.int64(rows)])
        return out

    def broadcast(name: str, a, b):
        out = np.zeros((rows, cols), np.float32)
        dev.dispatch_threads(bin_.function(name), (cols, rows, 1), block_dims(cols, rows, 1),
                             [a, b, out, *row_strides])
        return out

    shifted = broadcast("g2_Subtractfloat32", x, reduce("row_reduce_simple_maxfloat32", x))
    ex = np.zeros_like(shifted)
    n = rows * cols
    dev.dispatch_threads(una.function("vn_Expfloat32float32"), (ceildiv(n, 2), 1, 1),
                         (min(MAX_TG, ceildiv(n, 2)), 1, 1), [shifted, ex, np.uint32(n)])
    out = broadcast("g2_Dividefloat32", ex, reduce("row_reduce_simple_sumfloat32", ex))
    want = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, want / want.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def _softmax_graph_grid(i: int, rows: int, cols: int) -> tuple[int, int, int]:
    from benchmarks.mlx_kernels.cases_reduce import REDUCE_N_WRITES
    from benchmarks.mlx_kernels.cases_rows import MAX_TG, block_dims, ceildiv

    if i in (0, 3):                                            # the row reductions
        return (1, ceildiv(rows, REDUCE_N_WRITES), 1)
    if i == 2:                                                 # exp, two elements a thread
        return (ceildiv(ceildiv(rows * cols, 2), MAX_TG), 1, 1)
    bx, by, _ = block_dims(cols, rows, 1)                      # subtract, divide
    return (ceildiv(cols, bx), ceildiv(rows, by), 1)


@functools.cache
def softmax_graph(rows: int, cols: int) -> tuple[Profile, ...]:
    """The unfused float32 softmax (`run_softmax_graph`), its five dispatches extrapolated in the rows."""
    return tuple(_scaled(lambda r: _profile(functools.partial(run_softmax_graph, rows=r, cols=cols), False),
                         rows, 64, lambda i, n: _softmax_graph_grid(i, n, cols)))


@functools.cache
def all_reduce(dtype: str, size: int) -> tuple[Profile, ...]:
    """MLX's all_reduce as the corpus dispatches it (128 rows, then one simdgroup over them)."""
    from benchmarks.mlx_kernels.cases_reduce import run_all_reduce

    return tuple(_scaled(lambda n: _profile(functools.partial(run_all_reduce, op="sum", tname=dtype, size=n),
                                            False), size, 1 << 20, lambda i, n: None))


@functools.cache
def streaming(size: int) -> tuple[Profile, ...]:
    """A float32 read-one-write-one kernel of MLX (unary vn_Log, 8 bytes a thread): the traffic of a copy or ReLU."""
    from benchmarks.mlx_kernels.cases_rows import run_unary_contiguous

    def at(n: int):
        return _profile(functools.partial(run_unary_contiguous, op="Log", tname="float32", size=n, rtol=1e-5,
                                          atol=1e-6), False)

    tg = 1024
    return tuple(_scaled(at, size, 1 << 17, lambda i, n: (-(-(n // 2) // tg), 1, 1)))


@functools.cache
def metile_matmul(dtype: str, M: int, N: int, K: int, blocks: tuple) -> tuple[Profile, ...]:
    import numpy as np

    from benchmarks.metile_kernels import run_matmul

    def at(k: int):
        a, b = np.ones((M, k), dtype), np.ones((k, N), dtype)
        return [run_matmul(a, b, np.zeros((M, N), dtype), profile=SAMPLE, profile_only=True, blocks=blocks)]

    return tuple(_scaled(at, K, blocks[2], lambda i, n: None))


@functools.cache
def reference_gemm(n: int) -> tuple[Profile, ...]:
    from benchmarks.gpu_model_runs import run_reference_gemm

    return (run_reference_gemm(_dev(), n, False).profile,)


# -- entries to kernels -------------------------------------------------------------------------------------------
_DT = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _tile(dtype: str, M: int, N: int, K: int, chip: str) -> tuple:
    return mlx_gemm_tile(Problem(Kind.GEMM, "float32" if dtype == "float32" else "float16", (M, N, K), False),
                         gpu(chip))


def _ints(pattern: str, text: str) -> tuple[int, ...]:
    m = re.search(pattern, text)
    return tuple(int(g) for g in m.groups()) if m else ()


def run(entry: dict) -> Run | None:
    """The profiles of the kernel an entry measured (or of its proxy), or None when none runs here."""
    i, chip = entry["id"], entry["chip"]
    if i.startswith("mlxbench-bmm-"):
        return Run(steel_gemm("float32", 1024, 256, 64, _tile("float32", 1024, 256, 64, chip), 1000),
                   "steel_gemm_fused batch 1000")
    if i.startswith("mlxbench-tall-"):
        return Run(steel_gemm_tall("float32", 1_000_000, 1024, 64, _tile("float32", 1_000_000, 1024, 64, chip)),
                   "steel_gemm_fused")
    if i.startswith("mlxbench-softmax-"):
        if entry.get("graph") == "unfused":          # measurements.toml: the figure timed separate kernels
            return Run(softmax_graph(65536, 1024), "row_reduce max, g2 subtract, exp, row_reduce sum, g2 divide")
        return Run(softmax("float32", 65536, 1024), "block_softmax_float32")
    if i.startswith("mlxbench-sumall-"):
        return Run(all_reduce("float32", 128_000_000), "all_reduce_sumfloat32 (128 rows)", proxy=True)
    if i.startswith("mlxbench-relu-"):
        return Run(streaming(8388608), "vn_Logfloat32float32 (same traffic)", proxy=True)
    if i.endswith("-copy-bw"):
        return Run(streaming(94_900_000), "vn_Logfloat32float32 (same traffic)", proxy=True)
    if i == "metile-ci-m1-reference-gemm":
        return Run(reference_gemm(1024), "mtile_matmul 64x64x32")
    if i == "metile-m5-fp16-1024cube-simdgroup":
        return Run(metile_matmul("float16", 1024, 1024, 1024, (64, 64, 16)), "metile matmul_kernel 64x64x16",
                   proxy=True)
    if entry["kind"] == "gemm":
        return _gemm(entry)
    if entry["kind"] == "attention":
        return _attention(entry)
    return None


def _gemm(entry: dict) -> Run | None:
    i, chip, problem = entry["id"], entry["chip"], entry["problem"]
    dtype = _DT.get(entry.get("dtype", ""), "float32")
    mnk = _ints(r"M=(\d+), N=(\d+), K=(\d+)", problem)
    if not mnk and (m := _ints(r"M=(\d+), K=(\d+), N=(\d+)", problem)):
        mnk = (m[0], m[2], m[1])
    if not mnk and (m := _ints(r"(\d+) x (\d+) x (\d+)", problem)):
        mnk = m
    if not mnk and (m := _ints(r"(\d+)\^3", problem)):
        mnk = (m[0],) * 3
    batch = (_ints(r"batch (\d+)", problem) or (1,))[0]
    if not mnk or "mps" in i and "mlx" not in i and not i.startswith("chsasank"):
        return None
    M, N, K = mnk
    if "-nax" in i or i.startswith(("mlxi3196-m5-", "mlxpr3295-")):
        tile = mlx_nax_tile(Problem(Kind.GEMM, dtype, (M, N, K), False), gpu(chip))
        return Run(steel_gemm(dtype, M, N, K, tile, batch, nax=True), "steel_gemm_fused_nax",
                   proxy="addmm" in i or "mps" in i)
    if "mpsgraph" in i or "tensorops" in i or "mlx-wall" in i:
        return None
    if K > 16 * max(M, N):      # MLX's split-K path: steel_gemm_fused stands in for it
        return Run(steel_gemm(dtype, M, N, K, _tile(dtype, M, N, K, chip), batch), "steel_gemm_fused", proxy=True)
    return Run(steel_gemm(dtype, M, N, K, _tile(dtype, M, N, K, chip), batch), "steel_gemm_fused",
               proxy=i.startswith("chsasank"))


def _attention(entry: dict) -> Run | None:
    i, problem = entry["id"], entry["problem"]
    dtype = _DT.get(entry.get("dtype", ""), "float16")
    if i.startswith("mlxpr1610"):
        n, d = _ints(r"length (\d+), head dim (\d+)", problem)
        return Run(steel_attention(dtype, 1, 32, 32, n, n, d), "steel_attention bq32")
    if i.startswith("mlxpr4330"):
        return Run(steel_attention(dtype, 1, 16, 16, 8192, 8192, 72), "steel_attention bq32 bd72")
    if m := re.search(r"s(\d+)-l(\d+)$", i):
        s, q = int(m.group(1)), int(m.group(2))
        if q <= 8:
            return Run(sdpa_vector_2pass(dtype, 1, 32, 8, q, s, 128, 64), "sdpa_vector_2pass blocks 64")
        if "m5max" in i:
            return None            # the NAX attention kernel
        return Run(steel_attention(dtype, 1, 32, 8, q, s, 128), "steel_attention bq32 bk16")
    if i == "mlxi3837-m1ultra-sdpa-vector-bf16":
        return Run(sdpa_vector_2pass("bfloat16", 1, 32, 4, 1, 100000, 256, 128), "sdpa_vector_2pass blocks 128")
    if i.startswith("mlxi3837-m5max-sdpa-vector-bf16-nkv"):
        hkv = int(i.rsplit("nkv", 1)[1])
        return Run(sdpa_vector_2pass("bfloat16", 1, 32, hkv, 1, 32768, 128, 64), "sdpa_vector_2pass blocks 64")
    return None
