"""A kernel the frontend refuses: kernels cannot contain `try` statements."""

from __future__ import annotations

import metile


@metile.kernel
def guarded_copy(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    try:
        metile.store(Out + offs, metile.load(X + offs, mask=offs < n), mask=offs < n)
    except ValueError:
        pass
