"""Tile shapes under `triton.language`: `tl.dot` of every size (a decode step's few rows, sides not multiples of 8,
batched 3-D products) with `acc`, `out_dtype` and `input_precision`, checked against numpy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import ShapeMismatchError

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def decode_matmul(A, B, C, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  F16_OUT: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if F16_OUT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if F16_OUT:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        else:
            acc = tl.dot(a, b, acc, input_precision="tf32")
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize(("m", "block_m"), [(1, 1), (2, 2), (3, 4), (5, 8), (7, 8), (9, 16)])
@pytest.mark.parametrize("f16_out", [False, True], ids=["f32", "f16"])
def test_dot_of_decode_shapes(m, block_m, f16_out):
    rng = np.random.default_rng(m)
    n, k = 50, 40
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16 if f16_out else np.float32)
    decode_matmul[(triton.cdiv(n, 32),)](a, b, c, m, n, k, BLOCK_M=block_m, BLOCK_N=32, BLOCK_K=16, F16_OUT=f16_out)
    want = a.astype(np.float32) @ b.astype(np.float32)
    tol = 3e-2 if f16_out else 1e-4   # an f16 accumulator rounds after each block of k
    np.testing.assert_allclose(c.astype(np.float32), want, rtol=tol, atol=tol)


@triton.jit
def batched(A, B, C, NB: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    z = tl.arange(0, NB)[:, None, None]
    i = tl.arange(0, M)[None, :, None]
    j = tl.arange(0, N)[None, None, :]
    kk = tl.arange(0, K)
    a = tl.load(A + z * M * K + i * K + kk[None, None, :])
    b = tl.load(B + z * K * N + kk[None, :, None] * N + j)
    acc = tl.full((NB, M, N), 1.0, tl.float32)
    c = tl.dot(a, b, acc)
    tl.store(C + z * M * N + i * N + j, c)


@pytest.mark.parametrize(("nb", "m", "n", "k"), [(2, 16, 16, 16), (4, 2, 8, 16), (2, 1, 4, 2)])
def test_batched_dot(nb, m, n, k):
    rng = np.random.default_rng(nb * m)
    a = rng.standard_normal((nb, m, k)).astype(np.float16)
    b = rng.standard_normal((nb, k, n)).astype(np.float16)
    c = np.zeros((nb, m, n), np.float32)
    batched[(1,)](a, b, c, nb, m, n, k)
    want = a.astype(np.float32) @ b.astype(np.float32) + 1.0
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@triton.jit
def mismatched(A, WHICH: tl.constexpr):
    x = tl.zeros((2, 4, 4), tl.float16)
    if WHICH == 0:
        y = tl.dot(x, tl.zeros((4, 4), tl.float16))
    else:
        y = tl.dot(x, tl.zeros((2, 8, 4), tl.float16))
    tl.store(A + tl.arange(0, 4), tl.sum(tl.sum(y, 0), 0))


@pytest.mark.parametrize(("which", "message"), [(0, "Both inputs must be either 2D or 3D"),
                                                 (1, "not compatible for matmul")])
def test_dot_shapes_are_checked(which, message):
    with pytest.raises(ShapeMismatchError, match=message):
        mismatched[(1,)](np.zeros(4, np.float32), which)


@triton.jit
def tl_shapes(X, P, R, T, J, H, IL, V, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    a = tl.arange(0, A)[:, None, None]
    b = tl.arange(0, B)[None, :, None]
    c = tl.arange(0, C)[None, None, :]
    x = tl.load(X + a * B * C + b * C + c, mask=c < C - 1, other=0.0)
    flat = tl.arange(0, A * B * C)
    tl.store(P + flat, tl.permute(x, 2, 0, 1).ravel())
    tl.store(R + flat, tl.reshape(x.reshape(A * B, C) * 3.0, [A * B * C]))
    tl.store(T + flat, tl.reshape(x.T, A * B * C, can_reorder=False))            # the last two dimensions swapped
    j = tl.join(x, x + 1.0)
    tl.store(J + tl.arange(0, 2 * A * B * C), tl.ravel(j))
    lo, hi = j.split()
    tl.store(H + flat, tl.ravel(hi - lo + tl.trans(tl.trans(x, (1, 0, 2)), 1, 0, 2)))
    tl.store(IL + tl.arange(0, 2 * A * B * C), tl.ravel(tl.interleave(x, -x)))
    tl.store(V + flat, tl.view(tl.expand_dims(x, (0, 4)), A * B * C))


@pytest.mark.parametrize(("a", "b", "c"), [(2, 4, 8), (1, 2, 2), (4, 8, 4)])
def test_shape_functions_of_triton_language(a, b, c):
    rng = np.random.default_rng(a * b + c)
    x = rng.standard_normal((a, b, c)).astype(np.float32)
    n = a * b * c
    p, r, t, h, v = (np.zeros(n, np.float32) for _ in range(5))
    j, il = np.zeros(2 * n, np.float32), np.zeros(2 * n, np.float32)
    tl_shapes[(1,)](x, p, r, t, j, h, il, v, a, b, c)
    xm = x.copy()
    xm[:, :, c - 1] = 0.0
    np.testing.assert_array_equal(p, xm.transpose(2, 0, 1).ravel())
    np.testing.assert_array_equal(r, (xm * 3).ravel())
    np.testing.assert_array_equal(t, xm.transpose(0, 2, 1).ravel())
    np.testing.assert_array_equal(j, np.stack([xm, xm + 1], -1).ravel())
    np.testing.assert_allclose(h, (1 + xm).ravel(), rtol=1e-6)
    np.testing.assert_array_equal(il, np.stack([xm, -xm], -1).ravel())
    np.testing.assert_array_equal(v, xm.ravel())


@triton.jit
def bad_reshape(X):
    x = tl.load(X + tl.arange(0, 8))
    tl.store(X + tl.arange(0, 8), tl.reshape(x, (2, 3)).ravel())


def test_reshape_takes_powers_of_two():
    with pytest.raises(ShapeMismatchError, match="shape element 1 must be a power of 2, not 3"):
        bad_reshape[(1,)](np.zeros(8, np.float32))


def _run_script(tmp_path, name: str, runner: list[str], env: dict) -> dict:
    out = tmp_path / f"{name}.npz"
    script = Path(__file__).parent / "acceptance_kernels" / "triton_shapes.py"
    done = subprocess.run([sys.executable, *runner, str(script), str(out)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out))


def test_shape_functions_give_what_tritons_interpreter_gives(tmp_path):
    """The same script under Triton's own interpreter and under `python -m metile.triton`: every output equal."""
    root = str(Path(__file__).parent.parent)
    if subprocess.run([sys.executable, "-c", "import triton.language"], capture_output=True).returncode:
        pytest.skip("needs Triton's wheel for its interpreter")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTHONPATH"))}
    theirs = _run_script(tmp_path, "triton", [], {**env, "TRITON_INTERPRET": "1"})
    ours = _run_script(tmp_path, "metile", ["-m", "metile.triton"], {**env, "PYTHONPATH": root, "METILE_DEVICE": "cpu"})
    assert theirs.keys() == ours.keys()
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-6, atol=1e-5, err_msg=k)


@triton.jit
def concatenated(X, Y, Z, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(X + r)
    tl.store(Y + tl.arange(0, 2 * N), tl.cat(x, x * 10.0, can_reorder=True))
    rows = tl.reshape(x, (N // 2, 2))
    tl.store(Z + tl.arange(0, 2 * N), tl.ravel(tl.cat(rows, -rows)))


@pytest.mark.parametrize("n", [2, 8, 64])
def test_cat_puts_one_tensor_after_the_other(n):
    x = np.random.default_rng(n).random(n).astype(np.float32)
    y, z = np.zeros(2 * n, np.float32), np.zeros(2 * n, np.float32)
    concatenated[(1,)](x, y, z, n)
    np.testing.assert_array_equal(y, np.concatenate([x, x * 10]))
    rows = x.reshape(n // 2, 2)
    np.testing.assert_array_equal(z, np.concatenate([rows, -rows]).ravel())
