"""Kernels for the `python -m metile compile` tests: a vector add, a scaled copy with a default constexpr,
and things that are not kernels."""

from __future__ import annotations

import metile

STEP = 2


@metile.kernel
def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live)
    metile.store(C + offs, a + b, mask=live)


@metile.kernel
def scale(X, Out, n, alpha, BLOCK: metile.constexpr = 128):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Out + offs, metile.load(X + offs, mask=live) * alpha, mask=live)


def vec_add_reference(a, b):
    return a + b
