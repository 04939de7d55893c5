"""Every optimisation pass of the default schedule can be removed: the Triton-tutorial vector add, GEMM, attention,
softmax and layer norm, on ragged shapes (the GEMM also compiled for the M5, on tensor operations), and a product of
one 8x8 piece, are still right with each pass of `OPTIONAL_PASSES` dropped in turn (and with all of them dropped),
and each pass does change the code of some kernel here (it is not a no-op).
"""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.rewrite.pipeline import DEFAULT_PIPELINE, OPTIONAL_PASSES
from tests.acceptance_kernels import triton_tutorials as tt

RNG = np.random.default_rng(7)


def without(*passes) -> list:
    return [p for p in DEFAULT_PIPELINE if p not in passes]


PIPELINES = {"default": list(DEFAULT_PIPELINE), "none": without(*OPTIONAL_PASSES),
             **{f"no_{p.__name__}": without(p) for p in OPTIONAL_PASSES}}
LAUNCH = {"num_stages": 2, "group_programs": 2}   # so that multi_buffer and group_programs have work to do


def gemm(pipe, dtype, shape, launch=LAUNCH) -> str:
    M, N, K = shape
    a = RNG.standard_normal((M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    c = np.zeros((M, N), np.float16)
    bm, bn, bk = 32, 32, 16
    kernel = tt.matmul_kernel.with_pipeline(pipe)
    args = (a, b, c, M, N, K, K, N, N)
    blocks = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=2, ACTIVATION="leaky_relu")
    kernel[(metile.cdiv(M, bm) * metile.cdiv(N, bn),)](*args, **blocks, **launch)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    ref = np.where(ref >= 0, ref, 0.01 * ref)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=1e-2, atol=3e-2 * np.sqrt(K))
    return kernel.compile(*args, **blocks, **launch).msl


def attention(pipe) -> str:
    Z, H, N, D = 1, 2, 72, 32
    q, k, v = (RNG.standard_normal((Z, H, N, D)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    lse = np.zeros((Z, H, N), np.float32)
    scale = 0.5
    kernel = tt._attn_fwd.with_pipeline(pipe)
    args = (q, k, v, scale, lse, o, *tt.elem_strides(q), *tt.elem_strides(k), *tt.elem_strides(v),
            *tt.elem_strides(o), Z, H, N)
    consts = dict(HEAD_DIM=D, BLOCK_M=32, BLOCK_N=16, STAGE=1, **LAUNCH)
    kernel[(metile.cdiv(N, 32), Z * H, 1)](*args, **consts)
    s = np.einsum("zhqd,zhkd->zhqk", q.astype(np.float32), k.astype(np.float32)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("zhqk,zhkd->zhqd", p / p.sum(-1, keepdims=True), v.astype(np.float32))
    np.testing.assert_allclose(o.astype(np.float32), ref, atol=2e-2)
    return kernel.compile(*args, **consts).msl


def softmax(pipe) -> str:
    x = RNG.standard_normal((5, 333)).astype(np.float32)
    y = np.zeros_like(x)
    kernel = tt.softmax_kernel.with_pipeline(pipe)
    args = (y, x, x.shape[1], y.shape[1], x.shape[0], x.shape[1])
    kernel[(x.shape[0],)](*args, BLOCK_SIZE=512)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    return kernel.compile(*args, BLOCK_SIZE=512).msl


def layer_norm(pipe) -> str:
    M, N = 3, 1000
    x = RNG.standard_normal((M, N)).astype(np.float32)
    w, b = RNG.standard_normal(N).astype(np.float32), RNG.standard_normal(N).astype(np.float32)
    y = np.zeros_like(x)
    mean, rstd = np.zeros(M, np.float32), np.zeros(M, np.float32)
    kernel = tt._layer_norm_fwd_fused.with_pipeline(pipe)
    args = (x, y, w, b, mean, rstd, N, N, 1e-5)
    kernel[(M,)](*args, BLOCK_SIZE=1024)
    mu = x.mean(1, keepdims=True)
    ref = (x - mu) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    return kernel.compile(*args, BLOCK_SIZE=1024).msl


def vector_add(pipe) -> str:
    n = 1003
    x, y = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    kernel = tt.add_kernel.with_pipeline(pipe)
    kernel[(metile.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    np.testing.assert_array_equal(out, x + y)
    return kernel.compile(x, y, out, n, BLOCK_SIZE=1024).msl


@metile.kernel
def skinny(A, B, C, Acc, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr):
    """A product of one 8x8 piece per program, onto a loaded accumulator: `split_k` spreads its k over 4
    simdgroups; its unmasked operands are read straight from device memory when the launch asks."""
    r, c, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, K)
    a = metile.load(A + r[:, None] * K + k[None, :])
    b = metile.load(B + k[:, None] * N + c[None, :])
    acc = metile.load(Acc + r[:, None] * N + c[None, :])
    out = metile.dot(a, b, acc)
    metile.store(C + r[:, None] * N + c[None, :], out)


def skinny_product(pipe) -> str:
    M, N, K = 8, 8, 192
    a, b = RNG.standard_normal((M, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
    acc, c = RNG.standard_normal((M, N)).astype(np.float32), np.zeros((M, N), np.float32)
    kernel = skinny.with_pipeline(pipe)
    kernel[(1,)](a, b, c, acc, M=M, N=N, K=K, direct_operands=True)
    np.testing.assert_allclose(c, a @ b + acc, rtol=1e-5, atol=1e-4)
    return kernel.compile(a, b, c, acc, M=M, N=N, K=K, direct_operands=True).msl


KERNELS = {"vector_add": vector_add, "skinny_product": skinny_product,
           "gemm_f16": lambda p: gemm(p, np.float16, (70, 45, 50)),
           "gemm_f32": lambda p: gemm(p, np.float32, (33, 64, 40)),
           "gemm_f16_m5": lambda p: gemm(p, np.float16, (70, 45, 50), {**LAUNCH, "target": "M5"}),   # tensor ops
           "attention": attention, "softmax": softmax, "layer_norm": layer_norm}


@pytest.fixture(scope="module")
def default_msl() -> dict[str, str]:
    return {name: run(PIPELINES["default"]) for name, run in KERNELS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", sorted(set(PIPELINES) - {"default"}))
def test_kernels_are_right_without_a_pass(pipeline, default_msl):
    changed = [name for name, run in KERNELS.items() if run(PIPELINES[pipeline]) != default_msl[name]]
    assert changed, f"removing {pipeline[3:]} changes no kernel: the pass does nothing on the acceptance kernels"
