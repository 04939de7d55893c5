"""Hypothesis strategies that build admissible layouts directly (no ``assume``): compact layouts whose strides
are prefix products of a permuted shape, hierarchical groupings, injective layouts whose sorted modes chain
by divisibility, power-of-two tiles, and (A, B) pairs that composition must accept by construction."""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st

from metile.layout import Layout, Swizzle, size

MAX_SIZE = 256


def bounded(n: int) -> settings:
    """Settings for an expensive property: the active profile's example count, capped at ``n``."""
    return settings(max_examples=min(settings().max_examples, n))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def mode_sizes(draw, *, max_modes: int = 4, max_size: int = MAX_SIZE, min_size: int = 1, pow2: bool = False):
    """A list of mode sizes whose product is at most ``max_size``."""
    n = draw(st.integers(1, max_modes))
    budget = max_size
    out = []
    for _ in range(n):
        hi = min(8, budget)
        if hi < max(min_size, 1):
            break
        if pow2:
            s = 2 ** draw(st.integers(0 if min_size <= 1 else 1, int(math.log2(hi))))
        else:
            s = draw(st.integers(min_size, hi))
        out.append(s)
        budget //= s
    return out or [1]


@st.composite
def profile(draw, n: int, *, top: bool = True, depth: int = 0):
    """A random nesting of the indices ``0..n-1`` in order: an int for one index, else nested tuples."""
    return _profile(draw, 0, n, top, depth)


def _profile(draw, lo: int, hi: int, top: bool, depth: int):
    if hi - lo == 1:
        return lo if not (top and draw(st.integers(0, 9)) == 0) else (lo,)
    if depth >= 2 or draw(st.booleans()):
        return tuple(range(lo, hi))
    cuts = sorted(draw(st.sets(st.integers(lo + 1, hi - 1), max_size=hi - lo - 1)))
    bounds = [lo, *cuts, hi]
    return tuple(_profile(draw, a, b, False, depth + 1) for a, b in zip(bounds, bounds[1:], strict=False))


def apply_profile(prof, values):
    if isinstance(prof, tuple):
        return tuple(apply_profile(p, values) for p in prof)
    return values[prof]


@st.composite
def nested(draw, shapes: list[int], strides: list[int]) -> Layout:
    """The flat modes ``shapes:strides`` grouped into a random hierarchy (the 1-D function is unchanged)."""
    prof = draw(profile(len(shapes)))
    return Layout(apply_profile(prof, shapes), apply_profile(prof, strides))


def prefix_strides(sizes: list[int], order: list[int]) -> list[int]:
    """Strides making ``sizes`` compact when the modes are laid out in ``order`` (fastest first)."""
    strides = [0] * len(sizes)
    acc = 1
    for k in order:
        strides[k] = acc
        acc *= sizes[k]
    return strides


@st.composite
def compact_flat(draw, *, pow2: bool = False, max_modes: int = 4, max_size: int = MAX_SIZE):
    """Flat (sizes, strides) of a compact layout: a bijection onto ``[0, size)``."""
    sizes = draw(mode_sizes(pow2=pow2, max_modes=max_modes, max_size=max_size))
    order = draw(st.permutations(range(len(sizes))))
    return sizes, prefix_strides(sizes, list(order))


@st.composite
def compact_layouts(draw, *, pow2: bool = False, max_modes: int = 4, max_size: int = MAX_SIZE) -> Layout:
    """Compact layouts: strides are prefix products of a permuted shape, then grouped hierarchically."""
    sizes, strides = draw(compact_flat(pow2=pow2, max_modes=max_modes, max_size=max_size))
    return draw(nested(sizes, strides))


@st.composite
def layouts(draw, *, max_stride: int = 24, max_modes: int = 4, max_size: int = MAX_SIZE) -> Layout:
    """Any layout with non-negative strides, including stride-0 (broadcast) and size-1 modes."""
    sizes = draw(mode_sizes(max_modes=max_modes, max_size=max_size))
    strides = [draw(st.integers(0, max_stride)) for _ in sizes]
    return draw(nested(sizes, strides))


@st.composite
def injective_flat(draw, *, pow2: bool = False, max_modes: int = 4, zeros: bool = False):
    """Flat modes of an injective layout whose stride-sorted modes chain by divisibility (complementable).

    Sorted by stride: ``d0 >= 1`` and ``d_{j+1} = s_j * d_j * k_j`` with ``k_j >= 1``; then the modes are put
    in a random order. With ``zeros``, stride-0 modes are mixed in (not injective, still complementable).
    """
    sizes = draw(mode_sizes(pow2=pow2, max_modes=max_modes, max_size=64, min_size=2))
    gaps = [1, 2] if pow2 else [1, 2, 3]
    d = draw(st.sampled_from(gaps))
    strides = []
    for s in sizes:
        strides.append(d)
        d = s * d * draw(st.sampled_from(gaps))
    modes_ = list(zip(sizes, strides, strict=True))
    if zeros:
        for _ in range(draw(st.integers(0, 2))):
            modes_.append((draw(st.sampled_from([2, 4] if pow2 else [2, 3])), 0))
    modes_ = list(draw(st.permutations(modes_)))
    return [s for s, _ in modes_], [d for _, d in modes_]


@st.composite
def injective_layouts(draw, *, pow2: bool = False, max_modes: int = 4, zeros: bool = False) -> Layout:
    sizes, strides = draw(injective_flat(pow2=pow2, max_modes=max_modes, zeros=zeros))
    return draw(nested(sizes, strides))


@st.composite
def refine(draw, shapes: list[int], strides: list[int]) -> Layout:
    """Same function as the flat ``shapes:strides`` (also past its size), with modes split, size-1 modes
    inserted (never after the last mode, which carries the extension) and a random hierarchy."""
    out_s: list[int] = []
    out_d: list[int] = []
    for s, d in zip(shapes, strides, strict=True):
        parts = [s]
        if s > 1 and draw(st.booleans()):
            a = draw(st.sampled_from(divisors(s)))
            parts = [a, s // a]
        acc = d
        for p in parts:
            if draw(st.integers(0, 5)) == 0:
                out_s.append(1)
                out_d.append(draw(st.integers(0, 9)))
            out_s.append(p)
            out_d.append(acc)
            acc *= p
    return draw(nested(out_s, out_d))


def aligned_positions(a_sizes: list[int], bound: int) -> list[int]:
    """Index positions of the flat A where a leaf of B may start or end: ``s0*...*s_{j-1} * q`` with
    ``q | s_j`` inside A's modes but the last, and any multiple of where the last mode starts."""
    out = set()
    p = 1
    for s in a_sizes[:-1]:
        out.update(p * q for q in divisors(s))
        p *= s
    out.update(range(p, bound + 1, p))
    return sorted(out)


@st.composite
def composable_pairs(draw, *, max_size: int = MAX_SIZE) -> tuple[Layout, Layout]:
    """(A, B) that composition must accept, built from A's flat sizes.

    A leaf ``n:r`` of B is admissible when it starts and ends at aligned positions of A (``r`` and ``r*n``).
    Leaves chained so that each starts at a multiple of where the previous one ends never carry from one
    mode of A into the next; leaves inside A's last mode and stride-0 leaves may overlap anything. A is a
    refinement (split modes, size-1 modes, regrouped) of the flat layout.
    """
    a_sizes = draw(mode_sizes(min_size=2, max_size=128))
    a_strides = [draw(st.integers(0, 16)) for _ in a_sizes]
    last_start = math.prod(a_sizes[:-1])
    positions = aligned_positions(a_sizes, 8 * max(last_start, 8))
    leaves_: list[tuple[int, int]] = []
    cur, total = 1, 1
    for _ in range(draw(st.integers(1, 3))):
        starts = [x for x in positions if x % cur == 0][:6]
        r = draw(st.sampled_from(starts))
        ends = [x for x in positions if x % r == 0 and x > r and total * (x // r) <= max_size]
        if not ends:
            break
        e = draw(st.sampled_from(ends[:8]))
        leaves_.append((e // r, r))
        cur, total = e, total * (e // r)
    for _ in range(draw(st.integers(0, 2))):
        n = draw(st.integers(1, 4))
        if total * n > max_size:
            break
        r = draw(st.sampled_from([0, last_start, 2 * last_start, 3 * last_start]))
        leaves_.append((n, r))
        total *= n
    if not leaves_:
        leaves_.append((draw(st.integers(1, 4)), 0))
    leaves_ = list(draw(st.permutations(leaves_)))
    b = draw(nested([n for n, _ in leaves_], [r for _, r in leaves_]))
    a = draw(refine(a_sizes, a_strides))
    return a, b


@st.composite
def pow2_tilers(draw, a: Layout) -> Layout:
    """An injective power-of-two layout with size at most ``size(a)`` (a tile for dividing ``a``).

    Dropping modes from a stride-sorted divisibility chain keeps it a chain, so the result stays
    complementable."""
    sizes, strides = draw(injective_flat(pow2=True, max_modes=3))
    while math.prod(sizes) > size(a) and len(sizes) > 1:
        sizes, strides = sizes[:-1], strides[:-1]
    return draw(nested(sizes, strides))


@st.composite
def rank2_compact(draw, *, pow2: bool = True, max_size: int = 64) -> Layout:
    """A compact layout with exactly two top-level modes (each possibly hierarchical)."""
    sizes = draw(mode_sizes(pow2=pow2, max_modes=4, max_size=max_size))
    if len(sizes) == 1:
        sizes = [*sizes, draw(st.sampled_from([1, 2]))]
    order = list(draw(st.permutations(range(len(sizes)))))
    strides = prefix_strides(sizes, order)
    cut = draw(st.integers(1, len(sizes) - 1))

    def group(s: list[int]):
        return s[0] if len(s) == 1 else tuple(s)

    return Layout(
        (group(sizes[:cut]), group(sizes[cut:])),
        (group(strides[:cut]), group(strides[cut:])),
    )


@st.composite
def swizzles(draw) -> Swizzle:
    """A valid ``Swizzle(bits, base, shift)``: ``abs(shift) >= bits``."""
    bits = draw(st.integers(0, 3))
    base = draw(st.integers(0, 3))
    mag = draw(st.integers(max(bits, 0), bits + 3))
    shift = mag if draw(st.booleans()) else -mag
    if shift < 0 and base - shift + bits > 12:
        shift = mag
    return Swizzle(bits, base, shift)
