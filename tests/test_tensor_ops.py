"""`dot` by Metal 4 tensor operations (`matmul2d`) on targets that have them (`metile.target("M5")`).

Every kernel here is compiled for the M5 and run by the CPU device, which runs `matmul2d` (include/mt_mpp.h), and
checked against numpy: f16 and bf16 exactly as simdgroup matrices compute them (f32 sums), f32 with
`input_precision="tf32"` against the product of the operands cut to TF32's 10 mantissa bits, at a tolerance the
product of the uncut operands misses; ragged sizes (M, N, K not multiples of the tile) through masks and through
`tile_load`/`tile_store` with `bounds=`; both execution modes (each simdgroup its block, the whole threadgroup the
product). The same kernels compiled for the M1 to M4 keep simdgroup matrices, and so do the products `matmul2d` would
not compute as asked (exact f32, integers, sides that are not multiples of 16). A GEMM's accumulator stays in
`matmul2d`'s destination tensors across the k loop, written out once after it, unless the loop reads it otherwise or
it does not start from zeros.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import metile
from metile.ir import parse, pretty, verify
from metile.ir.verify import VerifyError
from metile.profile.gpus import gpu
from metile.profile.model import estimate
from metile.rewrite.context import PassContext
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import TILE_PIPELINE, run

pytestmark = pytest.mark.usefixtures("on_cpu")

M5 = metile.target("M5")


@metile.kernel
def gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr,
         PREC: metile.constexpr):
    """C = A @ B with masks at the matrix's edges."""
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        rk = k0 + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = metile.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc, input_precision=PREC)
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@metile.kernel
def gemm_bounded(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """C = relu(A @ B) in C's type, through tiles clipped to the matrices (`bounds=`)."""
    pm, pn = metile.program_id(0), metile.program_id(1)
    acc = metile.zeros((BM, BN), metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, pm * BM, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, pn * BN, N, (BK, BN), bounds=(K, N))
        acc += metile.dot(a, b, allow_tf32=True)
    metile.tile_store(C, pm * BM, pn * BN, N, metile.maximum(acc, 0.0).to(C.dtype), (BM, BN),
                      bounds=(M, N))


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 values cut toward zero to 10 mantissa bits, as the CPU device's relaxed matmul2d reads them."""
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def operands(dtype, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def exact(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def run_gemm(a, b, *, tile=(64, 64, 32), prec="tf32", **options):
    (m, k), n = a.shape, b.shape[1]
    c = np.zeros((m, n), np.float32)
    bm, bn, bk = tile
    gemm[(metile.cdiv(m, bm), metile.cdiv(n, bn))](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, PREC=prec, **options)
    metile.synchronize()
    return c


SHAPES = [(128, 128, 128), (100, 70, 90), (64, 64, 32), (33, 17, 5), (1, 130, 47)]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_half_types_by_tensor_ops_match_numpy(m, n, k, dtype):
    a, b = operands(dtype, m, n, k, seed=m + n + k)
    got = run_gemm(a, b, target="M5")
    np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_f32_with_tf32_is_the_product_of_tf32_operands(m, n, k):
    a, b = operands(np.float32, m, n, k, seed=7 * m + k)
    got = run_gemm(a, b, target="M5")
    want = exact(tf32(a), tf32(b))
    tol = 1e-5 * np.sqrt(k) + 1e-6
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol)
    if k >= 32:   # the tolerance tells TF32 from f32: the exact product is outside it
        assert np.abs(got - exact(a, b)).max() > 10 * tol


@pytest.mark.parametrize("mma", ["tensor_ops_simdgroup", "tensor_ops_threadgroup"])
@pytest.mark.parametrize("tile", [(32, 32, 16), (64, 32, 32), (16, 64, 16)], ids=["32x32x16", "64x32x32", "16x64x16"])
def test_both_execution_modes(mma, tile):
    a, b = operands(np.float16, 75, 90, 61, seed=3)
    got = run_gemm(a, b, tile=tile, target=M5, mma=mma)
    np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mma", ["tensor_ops_simdgroup", "tensor_ops_threadgroup"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float32], ids=["bf16", "f32-tf32"])
def test_both_execution_modes_in_bf16_and_tf32(mma, dtype):
    a, b = operands(dtype, 75, 90, 61, seed=6)
    got = run_gemm(a, b, tile=(32, 32, 16), target=M5, mma=mma)
    if dtype is np.float32:
        np.testing.assert_allclose(got, exact(tf32(a), tf32(b)), rtol=1e-5, atol=1e-5 * np.sqrt(61) + 1e-6)
    else:
        np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-4)


def test_each_mode_is_emitted_as_asked():
    a, b, c = np.zeros((1, 1), np.float16), np.zeros((1, 1), np.float16), np.zeros((1, 1), np.float32)
    args = (a, b, c, 1, 1, 1)
    per_sg = gemm.compile(*args, BM=32, BN=32, BK=16, PREC="tf32", target="M5", mma="tensor_ops_simdgroup")
    whole = gemm.compile(*args, BM=32, BN=32, BK=16, PREC="tf32", target="M5", mma="tensor_ops_threadgroup")
    chosen = gemm.compile(*args, BM=32, BN=32, BK=16, PREC="tf32", target="M5")
    assert "matmul2d<desc, execution_simdgroup> op;" in per_sg.msl and "execution_simdgroups" not in per_sg.msl
    assert "matmul2d<desc, execution_simdgroups<4>> op;" in whole.msl
    assert "execution_simdgroup>" in chosen.msl   # 16x16 blocks per simdgroup: the schedule's choice
    small = gemm.compile(*args, BM=32, BN=16, BK=16, PREC="tf32", target="M5")   # 16x8 blocks: the whole threadgroup
    assert "execution_simdgroups<" in small.msl
    asked = gemm.compile(*args, BM=32, BN=16, BK=16, PREC="tf32", target="M5", mma="tensor_ops_simdgroup")
    assert "execution_simdgroups<" in asked.msl   # the mode asked for cannot run on 16x8 blocks: the other one does
    assert "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>" in chosen.msl


@pytest.mark.parametrize("target", ["M1", "M2", "M3", "M4"])
def test_older_targets_keep_simdgroup_matrices(target):
    a, b = operands(np.float16, 100, 70, 90, seed=1)
    compiled = gemm.compile(a, b, np.zeros((100, 70), np.float32), 100, 70, 90, BM=64, BN=64, BK=32, PREC="tf32",
                            target=target)
    assert "matmul2d" not in compiled.msl and "simdgroup_multiply_accumulate" in compiled.msl
    got = run_gemm(a, b, target=target)
    np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-4)


def test_the_cpu_device_compiles_for_an_m1_unless_told():
    a, b = operands(np.float16, 64, 64, 32)
    compiled = gemm.compile(a, b, np.zeros((64, 64), np.float32), 64, 64, 32, BM=64, BN=64, BK=32, PREC="tf32")
    assert metile.device().target == metile.target("M1") and "matmul2d" not in compiled.msl
    assert "matmul2d" in gemm.compile(a, b, np.zeros((64, 64), np.float32), 64, 64, 32, BM=64, BN=64, BK=32,
                                      PREC="tf32", target=metile.target("apple10")).msl


@pytest.mark.parametrize(("dtype", "prec", "mma"), [
    (np.float32, "ieee", None),               # exact f32: metile's default
    (np.float32, "tf32x3", None),             # more precise than TF32
    (np.float16, "tf32", "simdgroup"),        # asked for
], ids=["f32-ieee", "f32-tf32x3", "mma-simdgroup"])
def test_products_tensor_ops_would_change_keep_simdgroup_matrices(dtype, prec, mma):
    a, b = operands(dtype, 70, 50, 40, seed=5)
    options = {} if mma is None else {"mma": mma}
    compiled = gemm.compile(a, b, np.zeros((70, 50), np.float32), 70, 50, 40, BM=32, BN=32, BK=16, PREC=prec,
                            target="M5", **options)
    assert "matmul2d" not in compiled.msl
    got = run_gemm(a, b, tile=(32, 32, 16), prec=prec, target="M5", **options)
    np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-4)


@metile.kernel
def int_dot(A, B, C, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr):
    m, n, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, K)
    a = metile.load(A + m[:, None] * K + k[None, :])
    b = metile.load(B + k[:, None] * N + n[None, :])
    metile.store(C + m[:, None] * N + n[None, :], metile.dot(a, b, input_precision="tf32"))


def test_integer_products_keep_simdgroup_matrices():
    rng = np.random.default_rng(2)
    a, b = rng.integers(-100, 100, (32, 64)).astype(np.int8), rng.integers(-100, 100, (64, 32)).astype(np.int8)
    c = np.zeros((32, 32), np.int32)
    compiled = int_dot.compile(a, b, c, M=32, N=32, K=64, target="M5")
    assert "matmul2d" not in compiled.msl
    int_dot[(1,)](a, b, c, M=32, N=32, K=64, target="M5")
    metile.synchronize()
    assert (c == a.astype(np.int32) @ b.astype(np.int32)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize(("m", "n", "k"), [(100, 70, 90), (64, 64, 64), (17, 33, 130)])
def test_bounded_tiles_with_an_epilogue(dtype, m, n, k):
    a, b = operands(dtype, m, n, k, seed=k)
    c = np.full((m, n), -7.0, dtype)
    compiled = gemm_bounded.compile(a, b, c, m, n, k, BM=32, BN=32, BK=32, target="M5")
    assert "matmul2d" in compiled.msl
    gemm_bounded[(metile.cdiv(m, 32), metile.cdiv(n, 32))](a, b, c, m, n, k, BM=32, BN=32, BK=32, target="M5")
    metile.synchronize()
    if dtype is np.float32:
        want = np.maximum(exact(tf32(a), tf32(b)), 0)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    else:
        want = np.maximum(exact(a, b), 0).astype(dtype).astype(np.float64)
        np.testing.assert_allclose(c.astype(np.float64), want, rtol=1e-2, atol=1e-2)


def test_a_target_with_tensor_ops_needs_a_device_that_runs_them(monkeypatch):
    dev = metile.device()
    monkeypatch.setattr(type(dev), "supports_tensor_ops", False)
    a, b = operands(np.float16, 32, 32, 32)
    with pytest.raises(metile.LaunchError, match="compiled for a GPU with Metal 4 tensor operations"):
        gemm.compile(a, b, np.zeros((32, 32), np.float32), 31, 32, 32, BM=32, BN=32, BK=32, PREC="tf32",
                     target="M5")


def test_bad_options_are_refused():
    a, b = operands(np.float16, 32, 32, 32)
    args = (a, b, np.zeros((32, 32), np.float32), 32, 32, 32)
    with pytest.raises(metile.frontend.errors.KernelArgumentError, match="mma='tensor' must be one of"):
        gemm.compile(*args, BM=32, BN=32, BK=32, PREC="tf32", mma="tensor")
    with pytest.raises(metile.frontend.errors.KernelArgumentError, match="target='M7' names no GPU"):
        gemm.compile(*args, BM=32, BN=32, BK=32, PREC="tf32", target="M7")
    with pytest.raises(metile.TargetError, match="known: M1, M2, M3, M4, M5"):
        metile.target("A17")


def test_autotuning_chooses_between_tensor_ops_and_simdgroup_matrices():
    tuned = metile.autotune(configs=[metile.Config(BM=32, BN=32, BK=16, mma="simdgroup"),
                                     metile.Config(BM=32, BN=32, BK=16, mma="tensor_ops")],
                            key=["M", "N", "K"], warmup=1, rep=1)(gemm)
    a, b = operands(np.float16, 64, 48, 40)
    c = np.zeros((64, 48), np.float32)
    tuned[lambda meta: (metile.cdiv(64, meta["BM"]), metile.cdiv(48, meta["BN"]))](a, b, c, 64, 48, 40, PREC="tf32",
                                                                                   target="M5")
    metile.synchronize()
    np.testing.assert_allclose(c, exact(a, b), rtol=1e-5, atol=1e-4)



def test_triton_kernels_keep_tritons_default_of_tf32():
    import torch

    import metile.triton as triton
    import metile.triton.language as tl

    @triton.jit
    def mm(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            a = tl.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc) if PREC == "default" else tl.dot(a, b, acc, input_precision=PREC)
        tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    a, b = operands(np.float32, 70, 40, 50, seed=11)
    for prec, relaxed in (("default", True), ("tf32", True), ("ieee", False), ("tf32x3", False)):
        c = torch.zeros(70, 40)
        mm[(3, 2)](torch.from_numpy(a), torch.from_numpy(b), c, 70, 40, 50, BM=32, BN=32, BK=32, PREC=prec,
                   target="M5")
        want = exact(tf32(a), tf32(b)) if relaxed else exact(a, b)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-5, atol=1e-4)



@pytest.mark.parametrize(("mma", "runs"), [("tensor_ops_simdgroup", {"simdgroup": 4 * 4 * 2}),
                                           ("tensor_ops_threadgroup", {"simdgroups": 4 * 2})])
def test_the_profiler_counts_the_tensor_operations(mma, runs):
    """A 64x64x64 f16 GEMM in 32x32 tiles, k in steps of 32: 4 programs of 4 simdgroups, 2 steps each; every
    multiply-add of the product is counted once, as half tensor-op FLOPs, and none on simdgroup matrices."""
    a, b = operands(np.float16, 64, 64, 64)
    c = np.zeros((64, 64), np.float32)
    p = gemm[(2, 2)](a, b, c, 64, 64, 64, BM=32, BN=32, BK=32, PREC="tf32", target="M5", mma=mma, profile=True)
    np.testing.assert_allclose(c, exact(a, b), rtol=1e-5, atol=1e-4)
    assert p.totals.tensor_flops == {"half": 2 * 64 ** 3}
    assert p.totals.tensor_runs == runs
    assert p.totals.flops == {}   # on the M4 the same launch counts {"half": 2 * 64 ** 3} simdgroup-matrix FLOPs
    # the GPU model bounds its compute by the M5's neural accelerators
    assert estimate(p, "M5").compute_s == pytest.approx(2 * 64 ** 3 / gpu("M5").tensor_fp16_flops)



@metile.kernel
def scores(Q, Kt, S, n, D: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr):
    """Attention's scores, a product without an accumulator in a loop over blocks of keys, then an epilogue."""
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    d = metile.arange(0, D)
    q = metile.load(Q + rows[:, None] * D + d[None, :])
    for start in metile.tile_range(0, n, BN):
        cols = start + metile.arange(0, BN)
        k = metile.load(Kt + d[:, None] * n + cols[None, :], mask=cols[None, :] < n, other=0.0)
        metile.store(S + rows[:, None] * n + cols[None, :], metile.exp(metile.dot(q, k) * 0.1), mask=cols[None, :] < n)


@pytest.mark.parametrize("mma", ["tensor_ops_simdgroup", "tensor_ops_threadgroup"])
def test_a_product_without_an_accumulator_overwrites_its_destination(mma):
    q, kt = operands(np.float16, 32, 70, 64, seed=4)
    s = np.full((32, 70), np.nan, np.float32)
    compiled = scores.compile(q, kt, s, 70, D=64, BM=32, BN=32, target="M5", mma=mma)
    assert "matmul2d_descriptor::mode::multiply)" in compiled.msl and "multiply_accumulate" not in compiled.msl
    scores[(1,)](q, kt, s, 70, D=64, BM=32, BN=32, target="M5", mma=mma)
    metile.synchronize()
    np.testing.assert_allclose(s, np.exp(exact(q, kt) * 0.1), rtol=1e-5, atol=1e-5)


# ---- the accumulator of a GEMM held in matmul2d's destination tensors across the k loop

def _msl(kernel, *args, **options) -> str:
    return kernel.compile(*args, target="M5", **options).msl


@pytest.mark.parametrize(("mma", "tile", "runs"), [("tensor_ops_simdgroup", (64, 64, 32), 2),
                                                   ("tensor_ops_simdgroup", (32, 32, 16), 1),
                                                   ("tensor_ops_threadgroup", (32, 32, 16), 1)])
def test_a_gemm_holds_its_accumulator_across_the_k_loop(mma, tile, runs):
    """The destination tensors are declared before the loop, every product accumulates into them in registers, and
    they are written out once after it: no simdgroup matrix is stored or loaded inside the loop. A simdgroup's 32x32
    block of a 64x64 tile takes two 16x32 runs (`_block`: its destinations in scratch fit half of what the staged
    operands leave)."""
    a, b = operands(np.float16, 100, 70, 90, seed=9)
    bm, bn, bk = tile
    text = _msl(gemm, a, b, np.zeros((100, 70), np.float32), 100, 70, 90, BM=bm, BN=bn, BK=bk, PREC="tf32", mma=mma)
    before, loop = text.split("for (int k0", 1)
    loop, after = loop.split("\n    }\n", 1)
    assert before.count("get_destination_cooperative_tensor") == runs
    assert loop.count("op.run(ta, tb, tacc") == runs and "simdgroup_store" not in loop and "simdgroup_load" not in loop
    assert after.count(".store(tensor<threadgroup float") == runs
    got = run_gemm(a, b, tile=tile, target=M5, mma=mma)
    np.testing.assert_allclose(got, exact(a, b), rtol=1e-5, atol=1e-4)


@metile.kernel
def gemm_watched(A, B, C, P, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr,
                 INIT: metile.constexpr, WATCH: metile.constexpr):
    """C = INIT + A @ B (unmasked, sizes multiples of the tile), and with WATCH, P the running sum after each step of
    k: the accumulator is read element by element inside the loop."""
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.full((BM, BN), INIT, metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        rk = k0 + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :])
        b = metile.load(B + rk[:, None] * N + rn[None, :])
        acc = metile.dot(a, b, acc)
        if WATCH:
            metile.store(P + (k0 // BK) * M * N + rm[:, None] * N + rn[None, :], acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc)


@pytest.mark.parametrize("mma", ["tensor_ops_simdgroup", "tensor_ops_threadgroup"])
@pytest.mark.parametrize(("init", "watched"), [(0.0, False), (0.0, True), (1.5, False)],
                         ids=["held", "read-in-the-loop", "from-non-zeros"])
def test_an_accumulator_read_in_the_loop_or_not_from_zeros_makes_the_round_trip(mma, init, watched):
    """Only an accumulator that starts from zeros and that nothing else in the loop reads is held in the destination
    tensors; the others go through threadgroup memory for each product, as simdgroup matrices, and stay exact."""
    m, n, k, bk = 64, 64, 64, 16
    a, b = operands(np.float16, m, n, k, seed=13)
    c = np.zeros((m, n), np.float32)
    p = np.zeros((k // bk, m, n), np.float32)
    args = (a, b, c, p, m, n, k)
    consts = {"BM": 32, "BN": 32, "BK": bk, "INIT": init, "WATCH": watched}
    held = "get_destination_cooperative_tensor" in _msl(gemm_watched, *args, **consts, mma=mma)
    assert held == (init == 0.0 and not watched)
    gemm_watched[(m // 32, n // 32)](*args, **consts, target=M5, mma=mma)
    metile.synchronize()
    np.testing.assert_allclose(c, init + exact(a, b), rtol=1e-5, atol=1e-4)
    if watched:
        for step in range(k // bk):
            part = exact(a[:, :(step + 1) * bk], b[:(step + 1) * bk])
            np.testing.assert_allclose(p[step], part, rtol=1e-5, atol=1e-4)


# ---- goldens: the SIMT IR the lowering makes and the MSL emitted, in each execution mode

GOLDEN = Path(__file__).parent / "golden"
MODES = {"tensor_ops_simdgroup": "execution_simdgroup", "tensor_ops_threadgroup": "execution_simdgroups<4>"}


def _traced(mode: str):
    x, y = np.zeros(1, np.float16), np.zeros(1, np.float32)
    return gemm.trace(x, x, y, 64, 64, 64, BM=32, BN=32, BK=16, PREC="tf32", mma=mode)


@pytest.mark.parametrize("mode", list(MODES))
def test_golden_msl_of_each_mode(mode, request):
    text = metile.compile_to_msl(_traced(mode), target=M5).msl
    assert f"matmul2d<desc, {MODES[mode]}> op;" in text
    path = GOLDEN / "emit" / f"{mode}.metal"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.read_text() == text, f"{path} is stale: run pytest --update-golden and review the diff"


def test_golden_lowering(request):
    """`lower_tiles` with the rules of metile/rewrite/lower/tensor_ops.py, in both modes."""
    parts = ["// RUN: lower_tiles, the rules of metile/rewrite/lower/tensor_ops.py, for the target apple10\n"
             "// `gemm` of tests/test_tensor_ops.py (f16, 32x32 tiles, k steps of 16) in each mode: the SIMT IR "
             "made; regenerate with pytest --update-golden.\n"]
    for mode in MODES:
        tile = run(TILE_PIPELINE, _traced(mode), target=M5)
        simt = lower_tiles(tile, PassContext(M5))
        verify(simt, after="lower_tiles")
        text = pretty(simt)
        assert parse(text) == simt, "the lowering's output does not round-trip through the printer"
        parts.append(f"// ---- {mode}\n{text}")
    got = "".join(parts)
    path = GOLDEN / "lowering" / "tensor_ops.mtir"
    if request.config.getoption("--update-golden"):
        path.write_text(got)
    assert path.read_text() == got, f"{path} is stale: run pytest --update-golden and review it"


def test_the_verifier_refuses_a_run_into_an_undeclared_held_destination():
    """Metal IR whose `matmul2d` names a held destination no `tensor_hold` declared before it is refused."""
    text = (GOLDEN / "lowering" / "tensor_ops.mtir").read_text().split("// ---- ")[1].split("\n", 1)[1]
    assert "  tensor_hold tacc, " in text
    verify(parse(text), after="test")
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("  tensor_hold tacc, "))
    with pytest.raises(VerifyError, match="tacc is not declared by an earlier tensor_hold"):
        verify(parse(dropped), after="test")
