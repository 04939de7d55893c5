"""Reductions and scans with combine functions, and gathers, in Triton kernels: `tl.reduce`, `tl.associative_scan`
(one tensor or a tuple, any axis, `keep_dims`, `axis=None`, `reverse`), `tl.xor_sum`, `tl.reduce_or`, `tl.gather`.
`run()` launches each kernel and returns the outputs by case name, on whichever `triton` is imported.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_fn(a, b):
    return a + b


@triton.jit
def first_max(v1, i1, v2, i2):      # the larger value; on a tie, the smaller index
    gt = v1 > v2
    tie = v1 == v2
    left = gt | (tie & (i1 < i2))
    return tl.where(left, v1, v2), tl.where(left, i1, i2)


@triton.jit
def affine(a1, b1, a2, b2):         # composing x -> a1 x + b1, then x -> a2 x + b2: a linear recurrence
    return a1 * a2, b1 * a2 + b2


@triton.jit
def take_right(a, b):               # associative, not commutative: the result is the last element
    return b


@triton.jit
def rows(X, A, Sums, Maxs, Idx, ScanA, ScanB, Rev, Last, All, Kept, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(X + r * C + c)
    a = tl.load(A + r * C + c)
    tl.store(Sums + tl.arange(0, R), tl.reduce(x, 1, add_fn))
    idx = tl.broadcast_to(c, (R, C))
    m, i = tl.reduce((x, idx), 1, first_max)
    tl.store(Maxs + tl.arange(0, R), m)
    tl.store(Idx + tl.arange(0, R), i)
    sa, sb = tl.associative_scan((a, x), 1, affine)
    tl.store(ScanA + r * C + c, sa)
    tl.store(ScanB + r * C + c, sb)
    tl.store(Rev + r * C + c, tl.associative_scan(x, 0, add_fn, reverse=True))
    tl.store(Last + tl.arange(0, C), tl.reduce(x, 0, take_right))
    tl.store(All, tl.reduce(x, None, add_fn))
    k = tl.reduce(x, 0, add_fn, keep_dims=True)
    tl.store(Kept + c, k)


@triton.jit
def bits(X, Out, Gathered, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(Out, tl.xor_sum(x, 0))
    tl.store(Out + 1, tl.reduce_or(x, 0))
    tl.store(Out + 2, x.xor_sum(axis=0))
    flags = x > 100
    tl.store(Out + 3, tl.reduce_or(flags, 0).to(tl.int32))
    tl.store(Gathered + offs, tl.gather(x, (offs * 5) % N, 0))


def run(device: str = "cpu") -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    R, C = 8, 16
    x = torch.randn(R, C, generator=g).to(device)
    x[2, 3] = x[2, 9] = 5.0      # a tie for the maximum: the first index wins
    a = (torch.rand(R, C, generator=g) * 0.5 + 0.5).to(device)
    outs = {"sums": torch.zeros(R), "maxs": torch.zeros(R), "idx": torch.zeros(R, dtype=torch.int32),
            "scan_a": torch.zeros(R, C), "scan_b": torch.zeros(R, C), "rev": torch.zeros(R, C),
            "last": torch.zeros(C), "all": torch.zeros(1), "kept": torch.zeros(C)}
    outs = {k: v.to(device) for k, v in outs.items()}
    rows[(1,)](x, a, *outs.values(), R=R, C=C)
    n = 64
    xi = torch.randint(0, 200, (n,), generator=g, dtype=torch.int32).to(device)
    bits_out, gathered = torch.zeros(4, dtype=torch.int32, device=device), torch.zeros(n, dtype=torch.int32,
                                                                                      device=device)
    bits[(1,)](xi, bits_out, gathered, N=n)
    outs["bits"], outs["gathered"] = bits_out, gathered
    return {k: v.cpu().numpy() for k, v in outs.items()}


if __name__ == "__main__":
    import pickle
    import sys

    sys.stdout.buffer.write(pickle.dumps(run()))
