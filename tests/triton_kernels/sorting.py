"""Sorting, top-k, bitonic merges, flips and histograms in Triton kernels (`tl.sort`, `tl.topk`,
`tl.bitonic_merge`, `tl.flip`, `tl.histogram`). `run()` launches each kernel and returns the outputs by case name, on
whichever `triton` is imported.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sorts(X, I, Asc, Desc, Top, Flip0, Flip1, Merged, Ints, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(X + r * C + c)
    tl.store(Asc + r * C + c, tl.sort(x))
    tl.store(Desc + r * C + c, tl.sort(x, descending=True))
    tl.store(Top + r * K + tl.arange(0, K)[None, :], tl.topk(x, K))
    tl.store(Flip0 + r * C + c, tl.flip(x, 0))
    tl.store(Flip1 + r * C + c, x.flip())
    up = tl.sort(x)
    bitonic = tl.where(c < C // 2, up, tl.flip(up, 1))   # rising then falling: a bitonic sequence
    tl.store(Merged + r * C + c, tl.bitonic_merge(bitonic))
    i = tl.load(I + tl.arange(0, C))
    tl.store(Ints + tl.arange(0, C), tl.sort(i, descending=True))


@triton.jit
def histograms(X, Out, Masked, N: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(Out + tl.arange(0, B), tl.histogram(x, B))
    tl.store(Masked + tl.arange(0, B), tl.histogram(x, B, mask=offs % 3 == 0))


def run(device: str = "cpu") -> dict:
    import torch

    g = torch.Generator().manual_seed(1)
    R, C, K = 4, 32, 8
    x = torch.randn(R, C, generator=g)
    x[1, :8] = 0.5        # ties
    i = torch.randint(-50, 50, (C,), generator=g, dtype=torch.int32)
    outs = {"asc": torch.zeros(R, C), "desc": torch.zeros(R, C), "top": torch.zeros(R, K),
            "flip0": torch.zeros(R, C), "flip1": torch.zeros(R, C), "merged": torch.zeros(R, C),
            "ints": torch.zeros(C, dtype=torch.int32)}
    outs = {k: v.to(device) for k, v in outs.items()}
    sorts[(1,)](x.to(device), i.to(device), *outs.values(), R=R, C=C, K=K)
    n, b = 128, 16
    h = torch.randint(-3, b + 3, (n,), generator=g, dtype=torch.int32)
    outs["hist"] = torch.zeros(b, dtype=torch.int32, device=device)
    outs["hist_masked"] = torch.zeros(b, dtype=torch.int32, device=device)
    histograms[(1,)](h.to(device), outs["hist"], outs["hist_masked"], N=n, B=b)
    return {k: v.cpu().numpy() for k, v in outs.items()}


if __name__ == "__main__":
    import pickle
    import sys

    sys.stdout.buffer.write(pickle.dumps(run()))
