"""CuTe's ``Swizzle<B,M,S>``, swizzled (composed) layouts, and the threadgroup-memory bank model."""

from __future__ import annotations

import pytest

from metile.layout import (
    ComposedLayout,
    Layout,
    Swizzle,
    bank_conflicts,
    composition,
    cosize,
    logical_divide,
    rank,
    row_major,
    shape,
    size,
    zipped_divide,
)


def test_masks_follow_cute():
    # swizzle.hpp: make_swizzle<0b1000, 0b0100>() is Swizzle<1,2,1>; <0b11000000, 0b00000110> is <2,1,5>
    assert (Swizzle(1, 2, 1).yyy_msk, Swizzle(1, 2, 1).zzz_msk) == (0b1000, 0b0100)
    assert (Swizzle(2, 1, 5).yyy_msk, Swizzle(2, 1, 5).zzz_msk) == (0b11000000, 0b00000110)
    sw = Swizzle(3, 4, 3)
    assert (sw.yyy_msk, sw.zzz_msk) == (0b1110000000, 0b0001110000)
    assert Swizzle(2, 3) == Swizzle(2, 3, 2)  # the shift defaults to the number of bits
    assert str(sw) == "Sw<3,4,3>"


def test_swizzle_values():
    sw = Swizzle(3, 4, 3)  # XOR bits 7..9 into bits 4..6
    assert sw(0b0010000000) == 0b0010010000
    assert sw(0b1110001111) == 0b1111111111
    assert sw(0b0000001111) == 0b0000001111  # nothing in yyy: unchanged
    neg = Swizzle(2, 1, -3)  # yyy = bits 1..2, shifted left into bits 4..5
    assert (neg.yyy_msk, neg.zzz_msk) == (0b000110, 0b110000)
    assert neg(0b000010) == 0b010010
    assert all(neg(neg(x)) == x for x in range(256))
    assert [Swizzle(0, 0, 0)(x) for x in range(8)] == list(range(8))


def test_swizzle_is_a_permutation_of_each_aligned_block():
    sw = Swizzle(3, 4, 3)
    assert sorted(sw(x) for x in range(1024)) == list(range(1024))
    assert sorted(sw(x) for x in range(1024, 2048)) == list(range(1024, 2048))


def test_composed_layout():
    tile = composition(Swizzle(3, 2, 3), row_major((64, 32)))
    assert isinstance(tile, ComposedLayout)
    assert str(tile) == "Sw<3,2,3> o 0 o (64,32):(32,1)"
    assert shape(tile) == (64, 32) and size(tile) == 2048 and rank(tile) == 2 and cosize(tile) == 2048
    assert tile(5, 7) == Swizzle(3, 2, 3)(5 * 32 + 7)
    assert tile[1](7) == tile(0, 7)
    assert sorted(tile(i) for i in range(size(tile))) == list(range(2048))
    shifted = ComposedLayout(Swizzle(1, 0, 1), 2, Layout(2, 1))
    assert [shifted(i) for i in range(2)] == [3, 2]


def test_dividing_a_swizzled_tile_keeps_the_swizzle():
    tile = composition(Swizzle(3, 2, 3), row_major((64, 32)))
    blocks = zipped_divide(tile, (8, 8))
    assert isinstance(blocks, ComposedLayout) and blocks.outer == Swizzle(3, 2, 3)
    assert blocks.inner == zipped_divide(row_major((64, 32)), (8, 8))
    assert blocks(9, 1) == tile(8 + 1, 1)  # element (1,1) of tile (1,0)
    assert logical_divide(tile, (8, 8)).inner == logical_divide(row_major((64, 32)), (8, 8))
    assert composition(tile, (8, 8)).inner == composition(row_major((64, 32)), (8, 8))


# ---------------------------------------------------------------------------------------------- bank model


def test_unit_stride_floats_are_conflict_free():
    assert bank_conflicts(Layout(32, 1)) == 0


def test_stride_32_floats_all_hit_one_bank():
    assert bank_conflicts(Layout(32, 32)) == 31


@pytest.mark.parametrize("stride,extra", [(2, 1), (4, 3), (8, 7), (16, 15), (3, 0), (33, 0), (0, 0)])
def test_strided_float_access(stride, extra):
    assert bank_conflicts(Layout(32, stride)) == extra


def test_column_of_a_32x32_float_tile():
    tile = row_major((32, 32))
    swizzled = composition(Swizzle(5, 0, 5), tile)
    for j in range(32):  # lane i reads element (i, j): offset j + 32 * i
        assert bank_conflicts(ComposedLayout(Swizzle(5, 0, 5), j, Layout(32, 32))) == 0
        assert bank_conflicts(ComposedLayout(lambda x: x, j, Layout(32, 32))) == 31
    assert bank_conflicts(composition(swizzled, (32, 1))) == 0
    assert bank_conflicts(composition(tile, (32, 1))) == 31


def test_other_element_sizes_and_bank_configurations():
    assert bank_conflicts(Layout(32, 1), element_bytes=2) == 0  # two halves per word: broadcast
    assert bank_conflicts(Layout(32, 2), element_bytes=2) == 0
    assert bank_conflicts(Layout(32, 64), element_bytes=2) == 31
    assert bank_conflicts(Layout(32, 1), element_bytes=8) == 1  # 64 words over 32 banks
    assert bank_conflicts(Layout(32, 1), banks=16) == 1
    assert bank_conflicts(Layout(32, 1), bank_bytes=8) == 0  # 16 eight-byte words, two floats each
    assert bank_conflicts(Layout(64, 1)) == 0  # only the first 32 lanes take part
    assert bank_conflicts(Layout(64, 32), lanes=4) == 3


def test_an_offset_moves_every_access():
    assert bank_conflicts(Layout(32, 32), offset=7) == 31
    # halves two apart: element 0 of each lane shares no word with another lane's; moved by one half, lane i's
    # element straddles nothing but now sits in the second half of the same word: still one word per lane
    assert bank_conflicts(Layout(32, 2), element_bytes=2, offset=1) == 0
    # halves 66 apart (33 words): moved by one half, every element stays in its own bank
    assert bank_conflicts(Layout(32, 66), element_bytes=2, offset=1) == 0
    with pytest.raises(ValueError, match="negative offset -1"):
        bank_conflicts(Layout(32, 1), offset=-1)


def test_staging_pads_make_simdgroup_loads_conflict_free_for_halves():
    from metile.rewrite.staging import mma_lanes, staging_pad

    # Apple's 8x8 simdgroup_matrix lane layout: lane 9 holds row 0 + 0, columns 4 + 2 (element 0 of its pair)
    ld = 40
    assert mma_lanes(ld)(9) == 0 * ld + 6 and mma_lanes(ld)(2) == 1 * ld and mma_lanes(ld)(16) == 4 * ld
    for n in (16, 32, 64, 128):
        pad = staging_pad(n, 2)
        assert (n + pad) * 2 % 16 == 0 and pad == 8
        assert all(bank_conflicts(mma_lanes(n + pad), element_bytes=2, offset=e) == 0 for e in (0, 1))
        # floats: 4 keeps rows aligned and is the fewest conflicts any aligned pad reaches
        assert staging_pad(n, 4) == 4
    assert staging_pad(12, 4) in range(0, 9)    # 48-byte rows: aligned pads exist (0 is one)


@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_staging_pads_are_those_the_bank_model_chooses(itemsize):
    """`staging_pad` counts the passes of 2- and 4-byte loads lane by lane; the bank model over both elements of
    every lane's pair must choose the same pad for every row length."""
    from metile.rewrite.staging import mma_lanes, staging_pad

    step = max(1, 16 // itemsize)
    for n in range(1, 300):
        aligned = [p for p in range(2 * step + 1) if (n + p) * itemsize % 16 == 0] or list(range(2 * step + 1))
        cost = [sum(bank_conflicts(mma_lanes(n + p), element_bytes=itemsize, offset=e) for e in (0, 1))
                for p in aligned]
        assert staging_pad(n, itemsize) == aligned[cost.index(min(cost))], n


def test_the_lane_bits_that_choose_a_column_are_read_off_the_fragment_layout():
    """A row reduction of a `dot` result shuffles across the lanes holding the other columns of a lane's rows and
    lets the lanes of column 0 write: the bits it flips and tests are those `lane_rows_cols` says choose the column."""
    from metile.rewrite.staging import lane_column_bits, lane_rows_cols
    rows, cols = lane_rows_cols()
    bits = lane_column_bits()
    assert bits == (1, 8)
    for lane in range(32):
        for b in bits:
            assert rows(lane ^ b) == rows(lane) and cols(lane ^ b) != cols(lane)
        assert (lane & sum(bits) == 0) == (cols(lane) == 0)
    assert len({cols(lane) for lane in range(32) if rows(lane) == 0}) == 2 ** len(bits)
