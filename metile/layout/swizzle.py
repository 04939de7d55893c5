"""CuTe's XOR swizzle functor ``Swizzle<B,M,S>`` and ``ComposedLayout``, a function applied after a layout.

A swizzle permutes offsets so that a threadgroup-memory tile is read without bank conflicts: it XORs ``B``
bits taken from above the bottom ``M + max(0, S)`` bits into the ``B`` bits that start at ``M - min(0, S)``.
"""

from __future__ import annotations

from typing import Any

import attrs

from .inttuple import IntTuple
from .layout import Layout, modes


def _shift_default(self: Swizzle) -> int:
    return self.bits


@attrs.frozen
class Swizzle:
    """``Swizzle(bits, base, shift)``: ``f(x) = x ^ ((x & yyy_msk) >> shift)``, a left shift if ``shift < 0``.

    ``yyy_msk = ((1 << bits) - 1) << (base + max(0, shift))`` picks the source bits and
    ``zzz_msk = ((1 << bits) - 1) << (base - min(0, shift))`` the bits they are XORed into; the bottom
    ``base`` bits are never changed. Requires ``bits >= 0``, ``base >= 0`` and ``abs(shift) >= bits`` (so the
    two masks do not overlap). Laws: ``f(f(x)) == x`` (an involution, hence a bijection), and ``f`` maps every
    aligned block ``[k * 2**n, (k + 1) * 2**n)`` onto itself when ``2**n > max(yyy_msk, zzz_msk)``.
    """

    bits: int
    base: int
    shift: int = attrs.field(default=attrs.Factory(_shift_default, takes_self=True))

    def __attrs_post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise ValueError(f"Swizzle({self.bits},{self.base},{self.shift}): bits and base must be >= 0")
        if abs(self.shift) < self.bits:
            raise ValueError(
                f"Swizzle({self.bits},{self.base},{self.shift}): abs(shift) must be >= bits, or the source "
                "and destination bit masks overlap and the swizzle is not a bijection"
            )

    @property
    def yyy_msk(self) -> int:
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_msk(self) -> int:
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    def __call__(self, offset: int) -> int:
        y = offset & (((1 << self.bits) - 1) << (self.base + max(0, self.shift)))
        return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@attrs.frozen
class ComposedLayout:
    """``outer o offset o inner``: the function ``c -> outer(offset + inner(c))``, e.g. a swizzled tile.

    The domain (shape, size, rank, coordinates) is ``inner``'s; ``outer`` is any offset function, usually a
    ``Swizzle``. Laws: ``C(c) == outer(offset + inner(c))``; mode ``C[i]`` is ``outer o offset o inner[i]``,
    so ``C[i](x)`` is ``C`` at the coordinate with ``x`` in mode ``i`` and 0 elsewhere. ``str`` follows CuTe:
    ``Sw<3,4,3> o 0 o (8,64):(64,1)``.
    """

    outer: Any
    offset: int
    inner: Layout

    @property
    def shape(self) -> IntTuple:
        return self.inner.shape

    def __call__(self, *crd: Any) -> int:
        return self.outer(self.offset + self.inner(*crd))

    def __getitem__(self, i: int) -> ComposedLayout:
        return ComposedLayout(self.outer, self.offset, self.inner[i])

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        return iter(tuple(ComposedLayout(self.outer, self.offset, m) for m in modes(self.inner)))

    def __str__(self) -> str:
        return f"{self.outer} o {self.offset} o {self.inner}"
