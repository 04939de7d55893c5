"""`@metile.func` helpers in a module of their own, as a library of them would be: kernels in other modules call
them, and their errors are reported at these lines."""

from __future__ import annotations

import metile

SCALE = 3.0


@metile.func
def scaled(x, factor=SCALE):
    return x * factor


@metile.func
def gelu(x):
    return 0.5 * x * (1.0 + metile.erf(x * 0.7071067811865476))


@metile.func
def broken(x):
    y = x + "text"  # the mistake
    return y
