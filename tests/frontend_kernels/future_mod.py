"""A kernel module using postponed (string) annotations, and a same-named kernel for the cache-key test."""

from __future__ import annotations

import metile


@metile.kernel
def scale(X, Out, n, alpha, BLOCK: metile.constexpr, TWICE: metile.constexpr = False):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    x = metile.load(X + offs, mask=live)
    if TWICE:
        x = x * 2.0
    metile.store(Out + offs, x * alpha, mask=live)
