"""A Triton kernel of shape changes (`tl.reshape`, `tl.permute`, n-D `tl.trans`, `tl.join`, `tl.split`,
`tl.interleave`, `tl.expand_dims`, `tl.view`) and of products metile computes without simdgroup matrices as they
are (a batched 3-D `tl.dot`, a 2-D one with N = 2), written as Triton kernels are. Run as a script,
`python triton_shapes.py OUT.npz` launches it on torch CPU tensors and saves its outputs: under Triton's interpreter
(`TRITON_INTERPRET=1`) and under `python -m metile.triton`, so that `tests/test_triton_shapes.py` compares the two."""

from __future__ import annotations

import sys

import numpy as np
import torch
import triton
import triton.language as tl

A, B, C = 4, 8, 16


@triton.jit
def shapes_kernel(X, P, R, T, J, H, IL, V, Q, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    a = tl.arange(0, A)[:, None, None]
    b = tl.arange(0, B)[None, :, None]
    c = tl.arange(0, C)[None, None, :]
    x = tl.load(X + a * B * C + b * C + c, mask=c < C - 1, other=0.0)
    flat = tl.arange(0, A * B * C)
    tl.store(P + flat, tl.reshape(tl.permute(x, 2, 0, 1), A * B * C))
    tl.store(R + flat, tl.reshape(tl.reshape(x, A * B, C) * 3.0, [A * B * C]))
    tl.store(T + flat, tl.reshape(tl.trans(x, 0, 2, 1), A * B * C))
    j = tl.join(x, x + 1.0)
    tl.store(J + tl.arange(0, 2 * A * B * C), tl.reshape(j, 2 * A * B * C))
    lo, hi = tl.split(j)
    tl.store(H + flat, tl.reshape(hi - lo + tl.trans(tl.trans(x, (1, 0, 2)), 1, 0, 2), A * B * C))
    tl.store(IL + tl.arange(0, 2 * A * B * C), tl.reshape(tl.interleave(x, -x), 2 * A * B * C))
    tl.store(V + flat, x.expand_dims((0, 4)).view(A * B * C))
    q = tl.dot(tl.reshape(tl.permute(x, 1, 0, 2), (B, A, C)), tl.permute(x, 1, 2, 0))    # [B, A, A]
    tl.store(Q + tl.arange(0, B * A * A), tl.reshape(q, B * A * A))
    w = tl.load(X + tl.arange(0, B * C)[:, None] * 2 + tl.arange(0, 2)[None, :])         # [B * C, 2]
    tl.store(Q + B * A * A + tl.arange(0, A * 2), tl.reshape(tl.dot(tl.reshape(x, A, B * C), w), A * 2))


def main(path: str) -> None:
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((A, B, C)).astype(np.float32))
    n = A * B * C
    outs = [torch.zeros(s) for s in (n, n, n, 2 * n, n, 2 * n, n, B * A * A + 2 * A)]
    shapes_kernel[(1,)](x, *outs, A, B, C)
    np.savez(path, *[o.numpy() for o in outs])


if __name__ == "__main__":
    main(sys.argv[1])
