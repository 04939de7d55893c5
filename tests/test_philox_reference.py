"""Checks of the Philox reference (tests/philox_reference.py), the oracle for metile's `rand`, `randn` and `randint`:
against Random123's published Philox4x32 known answers, against values Triton's own implementation produced, and
against properties the generator must have."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import philox_reference as ref

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, derandomize=bool(os.environ.get("CI")))

# Random123's kat_vectors for philox4x32 (the counter's four words, the key's two, the output's four), which test the
# bare rounds and key schedule.
RANDOM123_PHILOX4X32 = [
    (7, (0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    (7, (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    (7, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A)),
    (10, (0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (10, (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (10, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

# ---------------------------------------------------------------------------------------------------------------
# Values produced by Triton 3.8.0's interpreter (TRITON_INTERPRET=1, on the CPU, with numpy 2.4) from a kernel that
# stored tl.randint, tl.randint4x, tl.rand, tl.rand4x, tl.randn and tl.randn4x for the seeds and offsets below,
# plus calls of its uint_to_uniform_float and pair_uniform_to_normal on chosen inputs. The seed is a Python int
# kernel argument; the offsets are loaded from an int32 or int64 buffer. Integer words and float32 bit patterns are
# written in hex. The reference reproduces every integer and every `rand` word exactly; its normals are within 3
# float32 ulps of these (the interpreter evaluates log, sqrt, cos and sin with numpy's float32 functions).
# ---------------------------------------------------------------------------------------------------------------

# randint for offsets 0, 1, 2, 3 (int32), by seed.
TRITON_RANDINT_BY_SEED = {
    0: [0x6627E8D5, 0xF8E4CCA4, 0x04FAA329, 0xC990EF29],
    1: [0xE3E80670, 0xAC08141B, 0x3F55B3F0, 0xC1F3CFA1],
    42: [0x9CEAF053, 0xFCDB2127, 0xD36C0225, 0xBAC70475],
    2**31 - 1: [0x57E1FA99, 0x16124322, 0x01510B76, 0xC7BFD054],
    -1: [0x72A47709, 0x19FED511, 0x17625282, 0x8E8FD014],
    -12345: [0xA609630E, 0xF1A003CD, 0xA1ACADE3, 0x6E239EA4],
    2**31: [0x2AA832EC, 0xB273DB15, 0xA2D5E0E6, 0xEE9DEDD7],
    2**32 - 1: [0xF60BA7E1, 0x87C8813C, 0xF66E31EA, 0x807CB2DA],
    2**32: [0xFDDE3E0B, 0xCCF3076A, 0x9F3B3C64, 0xFC669D65],
    2**32 + 42: [0x95C7828E, 0x92EA8606, 0x70B41DE8, 0x268D934F],
    0x0123456789ABCDEF: [0xB850222E, 0xADCA1466, 0xF7CE299F, 0xAC3078F0],
    -(2**40): [0x406AF1CF, 0x61C24544, 0x2F8D5777, 0xAC27492A],
    2**63 + 5: [0xF8802C11, 0x611A76C6, 0x65B5A25B, 0xCC62FF0D],
}
OFFSETS_I32 = [0, 1, 2, 3, 1000, 123456789, 2**31 - 2, 2**31 - 1, -1, -2, -(2**31), -(2**31) + 1, 7, 8, 77777, 2**24]
OFFSETS_I64 = [
    0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 7,
    -1, -(2**32), 2**63 - 1, -(2**63), 5, 2**33 + 1, -2, 99,
]
# randint: (seed, offsets dtype, words for OFFSETS_I32 or OFFSETS_I64).
TRITON_RANDINT = [
    (42, "int32", [
        0x9CEAF053, 0xFCDB2127, 0xD36C0225, 0xBAC70475, 0xC7F39578, 0x5F01ABA0, 0xD1D419EB, 0xD0F2743B,
        0x6E2412DE, 0x81B97A34, 0x2BF9E5DB, 0x853FA4F0, 0x5BBD83B1, 0x8C4A529C, 0x2AA40355, 0x3B2BA34A,
    ]),
    (-1, "int32", [
        0x72A47709, 0x19FED511, 0x17625282, 0x8E8FD014, 0xE1B10477, 0xB418B8A7, 0xA5778348, 0xD6A65D28,
        0xC25672DE, 0x444716CA, 0xBF47D986, 0xF400C0AE, 0x6E20F2B1, 0xDB1963C0, 0x0354CF77, 0xC8C23955,
    ]),
    (42, "int64", [
        0x9CEAF053, 0xFCDB2127, 0xD0F2743B, 0x2BF9E5DB, 0x6E2412DE, 0x42E0B8B3, 0x131A8A04, 0x2925EF18,
        0x8F40BD76, 0x396FBC15, 0x2C5F681D, 0x1E36901D, 0x5099D809, 0x8AB9F45D, 0x1873F302, 0x9946577D,
    ]),
    (-1, "int64", [
        0x72A47709, 0x19FED511, 0xD6A65D28, 0xBF47D986, 0xC25672DE, 0x85AF3999, 0x1236F804, 0x9121ADFD,
        0x4D18D7D2, 0x69D460B8, 0x7B2535F5, 0xD40087A6, 0x6E5F04E2, 0x3B8ABAEA, 0xC3A19C70, 0xB45CAB03,
    ]),
]
# randint4x: the four words of each of the first six offsets, offset by offset.
TRITON_RANDINT4X = [
    (42, "int32", [
        0x9CEAF053, 0x77F5493B, 0x12BF50AD, 0x5742B3D7, 0xFCDB2127, 0x53BA6CFD, 0x838F5A6E, 0x744E06FB,
        0xD36C0225, 0xA8875DCB, 0x9A4D6D99, 0xC609A559, 0xBAC70475, 0xABAF0DAB, 0x961E5543, 0x610E67F7,
        0xC7F39578, 0xAE44BF6C, 0xB9B0A1BB, 0xF42D5E4C, 0x5F01ABA0, 0xB67F0D70, 0xF25E8D57, 0xFDA7C468,
    ]),
    (2**32 + 42, "int64", [
        0x95C7828E, 0xE1232961, 0x4793034D, 0x567B1AA5, 0x92EA8606, 0x76BB506D, 0x119B67BD, 0x63DE0AA0,
        0x8EA8FE43, 0xD598B3A7, 0x6FF49F8C, 0xA3FF8DA0, 0x5AC83D4D, 0x5F978900, 0x619AEAF3, 0x1B09FEFA,
        0x1EAE7BD0, 0xC1B6DEF5, 0x6CB608CD, 0x6F1F8703, 0x849C0C1C, 0x26CB5FBA, 0xFF32D934, 0x0E2EFCD3,
    ]),
]
# rand: float32 bit patterns.
TRITON_RAND = [
    (0, "int32", [
        0x3F4C4FD1, 0x3D63666A, 0x3D1F5464, 0x3ED9BC42, 0x3DAADDB7, 0x3EEA4EDB, 0x3F7ACE26, 0x3F3F67F7,
        0x3EE937D5, 0x3DFBBC8A, 0x3F00C75A, 0x3F2BD3A9, 0x3F2E99C5, 0x3EFF1AA5, 0x3F0947F5, 0x3F039C1C,
    ]),
    (2**32 + 42, "int64", [
        0x3F5470FA, 0x3F5A2AF3, 0x3F62AE02, 0x3F35907A, 0x3E7573DD, 0x3F76C7E7, 0x3F50350B, 0x3F02B42D,
        0x3F13D980, 0x3E80B2B3, 0x3F2CF740, 0x3E2A0234, 0x3E65173F, 0x3E50D3BC, 0x3F34AF81, 0x3F206D55,
    ]),
]
# rand4x: float32 bit patterns, four per offset.
TRITON_RAND4X = [
    (-1, "int32", [
        0x3F6548ED, 0x3E2A3A39, 0x3F417C9F, 0x3E89E668, 0x3E4FF6A8, 0x3F16CFBF, 0x3F45A7F9, 0x3F402F50,
        0x3E3B1293, 0x3F5E7B0B, 0x3E69F55A, 0x3F4E38DE, 0x3F62E05F, 0x3F235C22, 0x3F2E79C2, 0x3F58DB1F,
    ]),
]
# randn: float32 bit patterns.
TRITON_RANDN = [
    (42, "int32", [
        0x3F291DF5, 0xBFC577A3, 0xBF17289F, 0xBF1A0420, 0xBF540CBC, 0xBF308A83, 0xBFAECD3B, 0xBF2D850F,
        0xBF0BC6AD, 0xBDC2A839, 0xBF851C13, 0x3E887353, 0x3EA8C725, 0xBD580515, 0xBFAFB532, 0x3F93D79C,
    ]),
    (0, "int64", [
        0x3D3EACD1, 0xBEC6D74F, 0xBF43372C, 0xBF942077, 0xBF9D1C77, 0x3E93066D, 0xBF65C50B, 0x3F1260DF,
        0xBCEFCF6D, 0x3FD6B701, 0x3FF2EE5D, 0xBF06D4D3, 0x3EDC1FC2, 0xBF9F6DC4, 0xBF211525, 0x3F62C6B7,
    ]),
]
# randn4x: float32 bit patterns, four per offset.
TRITON_RANDN4X = [
    (0, "int32", [
        0x3D3EACD1, 0x3F2B84CE, 0x3E8C63A5, 0xBF8C36F0, 0xBEC6D74F, 0xC017DFC7, 0x3F6292C0, 0x3EE3FC50,
        0xBFD1A869, 0xBFF9DE6A, 0xBFC422DD, 0xBEDBE709, 0x3F21AC0C, 0xBF9292AA, 0x3ED482B6, 0xBF0B95B8,
        0xBFF5A2C9, 0x3F911634, 0x4033278E, 0x3FCE1FED, 0xBF8F79BF, 0xBF0DD51C, 0x3EE504D4, 0x3EF731DF,
    ]),
]

# uint_to_uniform_float on chosen words: zero, the smallest and largest folded values, values around 2**24 where
# float32 conversion starts rounding, and words whose float32 product differs from a float64 product rounded once.
TRITON_UNIFORM_OF_WORDS = [
    (0x00000000, 0x00000000), (0x00000001, 0x2FFFFFFF), (0x00000002, 0x307FFFFF), (0x00FFFFFF, 0x3BFFFFFE),
    (0x01000001, 0x3BFFFFFF), (0x7FFFFF7F, 0x3F7FFFFE), (0x7FFFFFC0, 0x3F7FFFFF), (0x7FFFFFFF, 0x3F7FFFFF),
    (0x80000000, 0x3F7FFFFF), (0x80000001, 0x3F7FFFFF), (0xFFFFFFFE, 0x2FFFFFFF), (0xFFFFFFFF, 0x00000000),
    (0xF1E54A8B, 0x3DE1AB56), (0xAF266A95, 0x3F21B32A), (0xE5AFCDBC, 0x3E528191), (0x940AF962, 0x3F57EA0C),
]
# pair_uniform_to_normal: (u1, u2, cosine output, sine output) as float32 bit patterns; u1 = 0, 1e-9 and 5e-8 are
# raised to 1e-7.
TRITON_NORMAL_OF_UNIFORMS = [
    (0x00000000, 0x00000000, 0x40B5AFA8, 0x00000000),
    (0x3089705F, 0x3E800000, 0xB4853D93, 0x40B5AFA8),
    (0x3356BF95, 0x3F000000, 0xC0B5AFA8, 0xB5053D93),
    (0x33D6BF95, 0x3F400000, 0x339165A9, 0xC0B5AFA8),
    (0x3456BF95, 0x3F7FFFFF, 0x40B1BC91, 0xB5E1210C),
    (0x3E800000, 0x3E000000, 0x3F96B55F, 0x3F96B55F),
    (0x3F000000, 0x3E99999A, 0xBEBA4939, 0x3F8F5510),
    (0x3F7FFFFF, 0x00000000, 0x39B504F4, 0x00000000),
]

NORMAL_ULPS = 4


def words(values) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def floats(bit_patterns) -> np.ndarray:
    return words(bit_patterns).view(np.float32)


def offsets_of(dtype: str) -> np.ndarray:
    return np.array(OFFSETS_I32 if dtype == "int32" else OFFSETS_I64, dtype=dtype)


def interleave(blocks) -> np.ndarray:
    """Four blocks as one array ordered offset by offset (the four values of the first offset, then the next)."""
    return np.stack(blocks, axis=1).ravel()


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between a and b (0 when equal, 1 for neighbours), across zero too."""

    def line(x):
        bits = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return np.abs(line(a) - line(b))


def assert_words_equal(got, expected):
    got, expected = np.asarray(got), words(expected)
    assert got.dtype == np.uint32
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, [(int(i), hex(int(got[i])), hex(int(expected[i]))) for i in bad[:8]]


def assert_f32_bits_equal(got, expected):
    got = np.asarray(got)
    assert got.dtype == np.float32
    assert_words_equal(got.view(np.uint32), expected)


def assert_normals_close(got, expected):
    got = np.asarray(got)
    assert got.dtype == np.float32
    distance = ulp_distance(got, floats(expected))
    assert distance.max() <= NORMAL_ULPS, (distance.max(), got, floats(expected))


# --- the bare rounds ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rounds, counter, key, expected", RANDOM123_PHILOX4X32)
def test_philox_matches_random123_known_answers(n_rounds, counter, key, expected):
    got = ref.philox_with_key(*key, *counter, n_rounds=n_rounds)
    assert [int(w) for w in got] == list(expected)


@pytest.mark.parametrize("n_rounds, counter, key, expected", RANDOM123_PHILOX4X32)
def test_philox_takes_its_key_from_the_seed(n_rounds, counter, key, expected):
    seed = key[0] | key[1] << 32
    assert [int(w) for w in ref.philox(seed, *counter, n_rounds=n_rounds)] == list(expected)


def test_seed_zero_offset_zero_is_the_all_zero_known_answer():
    # Seed 0 is the zero key and offset 0 the zero counter, so Triton's first draw is Random123's zero vector.
    got = ref.randint4x(0, np.array([0], np.int32))
    assert [int(w[0]) for w in got] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_zero_rounds_return_the_counter():
    got = ref.philox(123, np.uint32(5), np.uint32(6), np.uint32(7), np.uint32(8), n_rounds=0)
    assert [int(w) for w in got] == [5, 6, 7, 8]


# --- Triton's values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, expected", list(TRITON_RANDINT_BY_SEED.items()))
def test_randint_matches_triton_for_each_kind_of_seed(seed, expected):
    assert_words_equal(ref.randint(seed, np.arange(4, dtype=np.int32)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RANDINT)
def test_randint_matches_triton_for_int32_and_int64_offsets(seed, dtype, expected):
    assert_words_equal(ref.randint(seed, offsets_of(dtype)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RANDINT4X)
def test_randint4x_matches_triton(seed, dtype, expected):
    offsets = offsets_of(dtype)[: len(expected) // 4]
    assert_words_equal(interleave(ref.randint4x(seed, offsets)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RAND)
def test_rand_matches_triton_bit_for_bit(seed, dtype, expected):
    assert_f32_bits_equal(ref.rand(seed, offsets_of(dtype)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RAND4X)
def test_rand4x_matches_triton_bit_for_bit(seed, dtype, expected):
    offsets = offsets_of(dtype)[: len(expected) // 4]
    assert_f32_bits_equal(interleave(ref.rand4x(seed, offsets)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RANDN)
def test_randn_matches_triton_within_a_few_ulps(seed, dtype, expected):
    assert_normals_close(ref.randn(seed, offsets_of(dtype)), expected)


@pytest.mark.parametrize("seed, dtype, expected", TRITON_RANDN4X)
def test_randn4x_matches_triton_within_a_few_ulps(seed, dtype, expected):
    offsets = offsets_of(dtype)[: len(expected) // 4]
    assert_normals_close(interleave(ref.randn4x(seed, offsets)), expected)


def test_uniform_conversion_matches_triton_bit_for_bit():
    x, expected = zip(*TRITON_UNIFORM_OF_WORDS)
    assert_f32_bits_equal(ref.uint_to_uniform_float(words(x)), expected)


def test_uniform_conversion_is_float32_arithmetic_not_a_rounded_float64_product():
    # The last four listed words were picked because a float64 product of the folded integer and the scale
    # written as a decimal (as it appears in Triton's source), rounded once to float32, disagrees with the float32
    # arithmetic; Triton gave the float32 results.
    x = words([w for w, _ in TRITON_UNIFORM_OF_WORDS[-4:]])
    signed = x.view(np.int32)
    folded = np.where(signed < 0, ~signed, signed)
    via_float64 = (folded.astype(np.float64) * 4.6566127342e-10).astype(np.float32)
    assert (via_float64 != ref.uint_to_uniform_float(x)).all()


def test_box_muller_matches_triton_within_a_few_ulps():
    u1, u2, cos_out, sin_out = zip(*TRITON_NORMAL_OF_UNIFORMS)
    n1, n2 = ref.pair_uniform_to_normal(floats(u1), floats(u2))
    assert_normals_close(n1, cos_out)
    assert_normals_close(n2, sin_out)


# --- the seed and offset rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, key",
    [
        (0, (0, 0)),
        (42, (42, 0)),
        (-1, (0xFFFFFFFF, 0xFFFFFFFF)),
        (np.int32(-1), (0xFFFFFFFF, 0xFFFFFFFF)),
        (2**32 - 1, (0xFFFFFFFF, 0)),
        (np.uint32(2**32 - 1), (0xFFFFFFFF, 0)),
        (2**32 + 42, (42, 1)),
        (-(2**40), (0, 0xFFFFFF00)),
        (2**64 - 1, (0xFFFFFFFF, 0xFFFFFFFF)),
        (np.array(7, np.int64), (7, 0)),
    ],
)
def test_seed_is_its_value_modulo_two_to_the_64(seed, key):
    assert ref.seed_key_words(seed) == key


@pytest.mark.parametrize("seed, error", [(2**64, ValueError), (-(2**63) - 1, ValueError), (1.0, TypeError),
                                         (np.arange(2), TypeError)])
def test_seed_out_of_range_or_not_an_integer_is_refused(seed, error):
    with pytest.raises(error):
        ref.seed_key_words(seed)


@pytest.mark.parametrize(
    "offsets, c0, c1",
    [
        (np.array([5, -1, -(2**31)], np.int32), [5, 0xFFFFFFFF, 0x80000000], [0, 0, 0]),
        (np.array([2**32 - 1], np.uint32), [0xFFFFFFFF], [0]),
        (np.array([-1], np.int8), [0xFFFFFFFF], [0]),
        (np.array([2**32 + 5, -1, -(2**63)], np.int64), [5, 0xFFFFFFFF, 0], [1, 0xFFFFFFFF, 0x80000000]),
        (np.array([2**64 - 1], np.uint64), [0xFFFFFFFF], [0xFFFFFFFF]),
        # Python ints are typed as Triton types an integer literal: int32, else uint32, else int64, else uint64.
        (-1, [0xFFFFFFFF], [0]),
        ([3, 2**32 - 1], [3, 0xFFFFFFFF], [0, 0]),
        ([-1, 2**32], [0xFFFFFFFF, 0], [0xFFFFFFFF, 1]),
    ],
)
def test_offset_counter_words(offsets, c0, c1):
    got0, got1 = ref.offset_counter_words(offsets)
    assert got0.dtype == got1.dtype == np.uint32
    assert got0.ravel().tolist() == c0 and got1.ravel().tolist() == c1


@pytest.mark.parametrize("offsets", [np.array([0.0], np.float32), np.array([True])])
def test_offsets_that_are_not_integers_are_refused(offsets):
    with pytest.raises(TypeError):
        ref.randint(0, offsets)


def test_uniform_conversion_endpoints():
    largest_below_one = float(np.nextafter(np.float32(1), np.float32(0)))
    got = ref.uint_to_uniform_float(words([0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000]))
    assert got.tolist() == [0.0, 0.0, largest_below_one, largest_below_one]


def test_uniform_conversion_needs_uint32_words():
    with pytest.raises(TypeError):
        ref.uint_to_uniform_float(np.array([1], np.int32))


# --- properties --------------------------------------------------------------------------------------------------

seeds = st.integers(-(2**63), 2**64 - 1)
words32 = st.integers(0, 2**32 - 1)
OFFSET_RANGES = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1)}


@st.composite
def offset_blocks(draw, dtype=None):
    dtype = dtype or draw(st.sampled_from(sorted(OFFSET_RANGES)))
    lo, hi = OFFSET_RANGES[dtype]
    return np.array(draw(st.lists(st.integers(lo, hi), min_size=1, max_size=16)), dtype=dtype)


def scalar_philox(counter, key, n_rounds):
    """Philox4x32 on Python ints, written as in Random123: the key is raised before every round but the first."""
    (c0, c1, c2, c3), (k0, k1) = counter, key
    for i in range(n_rounds):
        if i:
            k0, k1 = (k0 + 0x9E3779B9) % 2**32, (k1 + 0xBB67AE85) % 2**32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 % 2**32, (p0 >> 32) ^ c3 ^ k1, p0 % 2**32
    return c0, c1, c2, c3


@PROPERTY_SETTINGS
@given(counter=st.tuples(words32, words32, words32, words32), key=st.tuples(words32, words32),
       n_rounds=st.integers(0, 12))
def test_vectorized_philox_agrees_with_a_scalar_one(counter, key, n_rounds):
    got = ref.philox_with_key(*key, *(np.array([c], np.uint32) for c in counter), n_rounds=n_rounds)
    assert tuple(int(w[0]) for w in got) == scalar_philox(counter, key, n_rounds)


@PROPERTY_SETTINGS
@given(seed=seeds, offsets=offset_blocks())
def test_draws_are_deterministic_and_consistent(seed, offsets):
    four = ref.randint4x(seed, offsets)
    assert all(w.dtype == np.uint32 and w.shape == offsets.shape for w in four)
    one = ref.randint(seed, offsets)
    np.testing.assert_array_equal(one, four[0])
    np.testing.assert_array_equal(one, ref.randint(seed, offsets.copy()))
    uniform = ref.rand(seed, offsets)
    assert uniform.dtype == np.float32
    np.testing.assert_array_equal(uniform, ref.uint_to_uniform_float(one))
    np.testing.assert_array_equal(uniform, ref.rand4x(seed, offsets)[0])
    normal = ref.randn(seed, offsets)
    assert normal.dtype == np.float32
    np.testing.assert_array_equal(normal, ref.randn4x(seed, offsets)[0])


@PROPERTY_SETTINGS
@given(seed=seeds, offsets=offset_blocks())
def test_rand_is_in_the_unit_interval_and_randn_is_bounded(seed, offsets):
    for block in ref.rand4x(seed, offsets):
        assert ((block >= 0) & (block < 1)).all()
    bound = math.sqrt(-2 * math.log(float(ref.NORMAL_U1_FLOOR))) * (1 + 1e-6)
    for block in ref.randn4x(seed, offsets):
        assert np.isfinite(block).all() and (np.abs(block) <= bound).all()


@PROPERTY_SETTINGS
@given(seed=seeds, offsets=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=16, unique=True))
def test_distinct_offsets_give_distinct_draws(seed, offsets):
    # For a fixed key Philox is a bijection of the 128-bit counter, and distinct int64 offsets are distinct counters.
    four = ref.randint4x(seed, np.array(offsets, np.int64))
    assert len(set(zip(*(w.tolist() for w in four)))) == len(offsets)


@PROPERTY_SETTINGS
@given(seed=seeds, offsets=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=16))
def test_offset_widths_agree_where_their_values_agree(seed, offsets):
    as_u32 = np.array(offsets, np.uint32)
    expected = ref.randint4x(seed, as_u32)
    for other in (as_u32.view(np.int32), as_u32.astype(np.int64), as_u32.astype(np.uint64)):
        for got, want in zip(ref.randint4x(seed, other), expected):
            np.testing.assert_array_equal(got, want)


@PROPERTY_SETTINGS
@given(seed=seeds, offset=st.integers(-(2**31), -1))
def test_a_negative_offset_is_a_different_counter_at_32_and_64_bits(seed, offset):
    narrow = ref.randint4x(seed, np.array([offset], np.int32))
    wide = ref.randint4x(seed, np.array([offset], np.int64))
    assert [int(w[0]) for w in narrow] != [int(w[0]) for w in wide]
    assert ref.offset_counter_words(np.array([offset], np.int64))[1].tolist() == [0xFFFFFFFF]


@PROPERTY_SETTINGS
@given(x=words32)
def test_uniform_conversion_folds_a_word_and_its_complement_together(x):
    pair = ref.uint_to_uniform_float(words([x, x ^ 0xFFFFFFFF]))
    assert pair[0] == pair[1]
    folded = x if x < 2**31 else x ^ 0xFFFFFFFF
    assert pair[0] == np.float32(folded) * ref.UNIFORM_SCALE
