"""How the elements of a tile are spread over the threads of a program, as `metile.layout` layouts.

A program is one threadgroup; a *group* is the set of threads running a region of the kernel (all of
them, or the simdgroups of one `simdgroup_role`). A tile of `N` elements, numbered in row-major order
(its *flat* index), lives in a group of `T` threads as described by a thread-value layout (CuTe's "TV
layout") `(T, (V, R)) : (V, (1, T*V))`, mapping (thread `t`, value slot `s`) to the flat index it holds:
each thread holds `R` runs of `V` consecutive elements, and the runs of consecutive threads are
consecutive, so `V`-wide runs can move as one vector and each group of `T*V` elements is one sweep of the
group. The layout depends only on `N`, `T` and `V`, so tiles of one size (a reshape, `x[:, None]`)
share it and their registers line up.

When `T*V*R > N` the last sweep runs past the tile: those slots are *padding*. They compute on a copy of
element `flat mod N` (so loads stay in bounds and arithmetic sees real data) and `guard` marks the real
ones for stores, atomics and reductions.

The 8x8 pieces of a `dot` result live in simdgroup matrices instead, described by `MmaGeometry`.
"""

from __future__ import annotations

import functools

import attrs

from metile.ir.tile import Dot
from metile.ir.types import DType
from metile.layout import Layout, suffix_product

MATRIX_DTYPES = (DType.F32, DType.F16, DType.BF16)   # what simdgroup matrices hold


@attrs.frozen(cache_hash=True)
class Blocked:
    """The thread-value layout of an `size`-element tile over `threads` threads, `vec` elements per run.

    Its derived numbers are fields outside equality computed with it (`reps`, `slots`, `tv`, `thread_stride`,
    `has_padding`), and its offsets are kept in a slot when first asked, rather than `functools.cached_property`s:
    attrs gives a slotted class with those a `__getattr__`, which makes every attribute read of every instance go
    through Python's lookup hook instead of the interpreter's cached slot reads (the lowering reads a layout's
    fields at every element)."""

    size: int
    threads: int
    vec: int
    reps: int = attrs.field(init=False, eq=False, repr=False)
    slots: int = attrs.field(init=False, eq=False, repr=False)
    """Values per thread."""
    tv: Layout = attrs.field(init=False, eq=False, repr=False)
    thread_stride: int = attrs.field(init=False, eq=False, repr=False)
    has_padding: bool = attrs.field(init=False, eq=False, repr=False)
    _offsets: tuple[int, ...] | None = attrs.field(init=False, eq=False, repr=False, default=None)
    _paddings: tuple[bool, ...] | None = attrs.field(init=False, eq=False, repr=False, default=None)

    def __attrs_post_init__(self) -> None:
        t, v = self.threads, self.vec
        reps = -(-self.size // (t * v))
        tv = Layout((t, (v, reps)), (v, (1, t * v)))
        for name, value in (("reps", reps), ("slots", v * reps), ("tv", tv), ("thread_stride", tv.stride[0]),
                            ("has_padding", t * v * reps != self.size)):
            object.__setattr__(self, name, value)

    @property
    def offsets(self) -> tuple[int, ...]:
        """`offset(slot)` for every slot (the layout evaluated once)."""
        found = self._offsets
        if found is None:
            found = tuple(self.tv((0, slot)) for slot in range(self.slots))
            object.__setattr__(self, "_offsets", found)
        return found

    @property
    def paddings(self) -> tuple[bool, ...]:
        found = self._paddings
        if found is None:
            last = (self.threads - 1) * self.thread_stride
            found = tuple(off + last >= self.size for off in self.offsets)
            object.__setattr__(self, "_paddings", found)
        return found

    def offset(self, slot: int) -> int:
        """The flat index thread 0 holds in `slot`; thread `t` holds `offset(slot) + t * thread_stride`."""
        return self.offsets[slot]

    def padded(self, slot: int) -> bool:
        """True when some thread's `slot` lies past the end of the tile."""
        return self.paddings[slot]


def choose_vec(size: int, threads: int, vec: int) -> int:
    """The run width for a tile of `size` elements: the kernel's `vec` when every thread gets at least
    one whole run, else 1."""
    while vec > 1 and (size % vec or size < threads * vec):
        vec //= 2
    return max(vec, 1)


@functools.cache
def blocked(size: int, threads: int, vec: int) -> Blocked:
    return blocked_as_recorded(size, threads, choose_vec(size, threads, vec))   # the same object as a recorded one


@functools.cache
def blocked_as_recorded(size: int, threads: int, vec: int) -> Blocked:
    """`Blocked(size, threads, vec)` as a layout recorded it (its `vec` kept), one object per value, so that its
    layout and offsets are worked out once."""
    return Blocked(size, threads, vec)


@functools.cache
def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The element strides of a row-major tile (CuTe's compact right-major stride)."""
    if not shape:
        return ()
    strides = suffix_product(tuple(shape))
    return strides if isinstance(strides, tuple) else (strides,)


@attrs.frozen(cache_hash=True)
class MmaGeometry:
    """A `[m, n]` result split into 8x8 pieces over `sg_m x sg_n` simdgroups: simdgroup `(i, j)` (index
    `i * sg_n + j`) owns the `per_m x per_n` pieces starting at piece `(i * per_m, j * per_n)`. As a
    layout: `piece_layout` maps (simdgroup, local piece) to the piece's (row, col) in units of 8. With `split`
    > 1, `split` times as many simdgroups compute the product, slice `s` of k on simdgroups `first_sg + s * sg_m *
    sg_n ...` (the same pieces as those of slice 0), which own the sum. With `replicas` > 1 the group running the
    product has `replicas` times as many simdgroups as own pieces (a product with fewer 8x8 pieces than the
    program's `num_simdgroups`): the others compute a copy of the pieces of the owner their index is congruent to,
    which nothing reads (every use of the result runs on the owners)."""

    m: int
    n: int
    sg_m: int
    sg_n: int
    first_sg: int = 0  # the owning simdgroups are first_sg .. first_sg + sg_m * sg_n - 1
    split: int = 1
    replicas: int = 1
    # derived numbers and layouts: fields outside equality, the layouts made when first asked (see `Blocked`)
    per_m: int = attrs.field(init=False, eq=False, repr=False)
    per_n: int = attrs.field(init=False, eq=False, repr=False)
    pieces: int = attrs.field(init=False, eq=False, repr=False)
    """Pieces per simdgroup."""
    _layouts: dict[str, Layout] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        per_m, per_n = self.m // 8 // self.sg_m, self.n // 8 // self.sg_n
        for name, value in (("per_m", per_m), ("per_n", per_n), ("pieces", per_m * per_n)):
            object.__setattr__(self, name, value)

    def _layout(self, name: str, shape, stride) -> Layout:
        found = self._layouts.get(name)
        if found is None:
            found = self._layouts[name] = Layout(shape, stride)
        return found

    @property
    def rows(self) -> Layout:
        """(simdgroup, local piece) -> the piece's row, in units of 8 rows."""
        return self._layout("rows", ((self.sg_n, self.sg_m), (self.per_n, self.per_m)), ((0, self.per_m), (0, 1)))

    @property
    def first_row(self) -> Layout:
        """simdgroup -> the first row (in elements) of its block of pieces: `8 * rows(simdgroup, 0)`."""
        return self._layout("first_row", (self.sg_n, self.sg_m), (0, 8 * self.per_m))

    @property
    def first_col(self) -> Layout:
        """simdgroup -> the first column (in elements) of its block of pieces: `8 * cols(simdgroup, 0)`."""
        return self._layout("first_col", (self.sg_n, self.sg_m), (8 * self.per_n, 0))

    @property
    def cols(self) -> Layout:
        """(simdgroup, local piece) -> the piece's column, in units of 8 columns."""
        return self._layout("cols", ((self.sg_n, self.sg_m), (self.per_n, self.per_m)), ((self.per_n, 0), (1, 0)))


def matrix_dims(d: Dot) -> tuple[int, int, int] | None:
    """`(m, n, k)` of a product computed on 8x8 simdgroup matrices: two 2-D operands of a matrix type whose sides are
    all multiples of 8. None for any other product (batched, or a side not a multiple of 8), which each thread
    computes by multiply-adds (`metile.rewrite.lower.fma`)."""
    ash, bsh = d.a.type.shape, d.b.type.shape
    if len(ash) != 2 or len(bsh) != 2 or d.a.type.dtype not in MATRIX_DTYPES:
        return None
    (m, k), n = ash, bsh[1]
    return None if m % 8 or n % 8 or k % 8 else (m, n, k)


PAD_WASTE = 2   # a product is padded to 8x8 pieces when that at most doubles its multiply-adds


def padded_dims(d: Dot) -> tuple[int, int, int] | None:
    """`(m8, n8, k8)`, the sides of each matrix of a product of a matrix type rounded up to multiples of 8, for a
    product that `matrix_dims` does not take (sides not all multiples of 8, or a batch of products) when padding at
    most `PAD_WASTE` times its multiply-adds (`[12, 16] x [16, 20]`, `[5, 32] x [32, 32]`, a batch of 16 x 16
    products: padding is cheap, or none is needed); None otherwise (`[3, 16] x [16, 16]` would do 2.7 times the
    work, and is computed by per-thread multiply-adds instead)."""
    ash, bsh = d.a.type.shape, d.b.type.shape
    if len(ash) not in (2, 3) or d.a.type.dtype not in MATRIX_DTYPES or matrix_dims(d) is not None:
        return None
    m, k = ash[-2:]
    n = bsh[-1]
    m8, n8, k8 = (-(-x // 8) * 8 for x in (m, n, k))
    return (m8, n8, k8) if m8 * n8 * k8 <= PAD_WASTE * m * n * k else None


def k_slices(m: int, n: int, k: int, split: int, simdgroups: int) -> int:
    """The slices of k a product of `[m, k] x [k, n]` asking for `split` gets on `simdgroups`: `split` when they
    divide among the slices, the pieces among each slice's simdgroups, and k into steps of 8 among the slices
    (at least 2 steps each); else 1."""
    if split > 1 and simdgroups % split == 0 and k % (16 * split) == 0 and mma_split(m, n, simdgroups // split):
        return split
    return 1


def mma_arrangement(m: int, n: int, simdgroups: int) -> tuple[int, int, int] | None:
    """`(sg_m, sg_n, replicas)` for an `[m, n]` product on `simdgroups`: `mma_split`'s arrangement of all of them,
    else that of the most simdgroups dividing their number whose pieces split evenly, each owner with `replicas`
    copies (None when `m` or `n` is not a multiple of 8)."""
    if m % 8 or n % 8:
        return None
    for owners in range(simdgroups, 0, -1):
        if simdgroups % owners == 0 and (split := mma_split(m, n, owners)) is not None:
            return (*split, simdgroups // owners)
    return None


def mma_split(m: int, n: int, simdgroups: int) -> tuple[int, int] | None:
    """`(sg_m, sg_n)` with `sg_m * sg_n == simdgroups` dividing the piece grid of an `[m, n]` product as
    squarely as possible, or None."""
    pm, pn = m // 8, n // 8
    best = None
    for sg_m in range(1, simdgroups + 1):
        if simdgroups % sg_m:
            continue
        sg_n = simdgroups // sg_m
        if pm % sg_m == 0 and pn % sg_n == 0:
            score = abs(pm // sg_m - pn // sg_n)
            if best is None or score < best[0]:
                best = (score, sg_m, sg_n)
    return None if best is None else best[1:]


__all__ = ["MATRIX_DTYPES", "PAD_WASTE", "Blocked", "MmaGeometry", "blocked", "choose_vec", "k_slices",
           "matrix_dims", "mma_arrangement", "mma_split", "padded_dims", "row_major_strides"]
