"""A numpy model of Triton's counter-based random numbers, the oracle for metile's `rand`, `randn` and `randint`.

Triton's generator is Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011). For a scalar `seed` and a block of integer `offsets`, each offset is one 128-bit counter and the seed is
the 64-bit key:

* key:      the seed's value taken modulo 2**64 (a negative int32 seed is sign-extended, so -1 gives the key
            words (0xFFFFFFFF, 0xFFFFFFFF) while 2**32 - 1 gives (0xFFFFFFFF, 0)); k0 is the low 32 bits, k1 the high.
* counter:  c0 is the offset modulo 2**32 (an int32 offset's bit pattern); c1 is 0 for offsets of 32 bits or fewer
            and the high 32 bits of the two's complement pattern for 64-bit offsets; c2 = c3 = 0.
* a round:  with (hi_a, lo_a) = the 64-bit product ROUND_A * c0 split into halves and (hi_b, lo_b) = ROUND_B * c2,
            the new state is (hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a); then k0 += KEY_A and k1 += KEY_B,
            all modulo 2**32.
* randint4x returns the four words after 10 rounds, randint the first one (uint32).
* rand maps randint's word to float32 by `uint_to_uniform_float`; randn feeds the first two words, made uniform,
  through the Box-Muller transform and returns the cosine branch.

Everything here works on numpy arrays with explicit 32-bit wrap-around; no function depends on Triton.
"""

from __future__ import annotations

import numpy as np

PHILOX_KEY_A = 0x9E3779B9  # added to k0 after each round (golden ratio)
PHILOX_KEY_B = 0xBB67AE85  # added to k1 after each round (sqrt(3) - 1)
PHILOX_ROUND_A = 0xD2511F53  # multiplies c0
PHILOX_ROUND_B = 0xCD9E8D57  # multiplies c2
N_ROUNDS_DEFAULT = 10

# The largest float32 scale with (2**31 - 1) * scale < 1 after float32 rounding: rand never returns 1.0.
UNIFORM_SCALE = np.float32(4.6566127342e-10)
# Box-Muller constants, as float32 (Triton multiplies float32 blocks by these Python floats).
NORMAL_U1_FLOOR = np.float32(1.0e-7)
TWO_PI = np.float32(6.283185307179586)

_MASK32 = 0xFFFFFFFF
_U64_MASK32 = np.uint64(_MASK32)
_SHIFT32 = np.uint64(32)


def seed_key_words(seed) -> tuple[int, int]:
    """The Philox key (k0, k1) for `seed`: its value modulo 2**64, split into low and high 32-bit words.

    `seed` is a Python or numpy integer scalar in [-2**63, 2**64) (Triton's int32, uint32, int64 and uint64
    seeds); a signed seed is sign-extended, so -1 and 2**64 - 1 give the same key.
    """
    if isinstance(seed, np.ndarray):
        if seed.shape != ():
            raise TypeError(f"seed must be a scalar, got an array of shape {seed.shape}")
        seed = seed[()]
    if not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
    value = int(seed)
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"seed {value} does not fit in 64 bits")
    value %= 2**64
    return value & _MASK32, value >> 32


def _u32_words(c) -> np.ndarray:
    """A counter word as a uint32 array: the value modulo 2**32 (the bit pattern of a 32-bit integer)."""
    arr = np.asarray(c)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"counter words must be integers, got dtype {arr.dtype}")
    return arr.astype(np.uint32)


def _mul_hi_lo(constant: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit product of a 32-bit constant and a uint32 array, as (high word, low word), both uint32."""
    product = np.uint64(constant) * x.astype(np.uint64)  # < 2**64: never wraps
    return (product >> _SHIFT32).astype(np.uint32), (product & _U64_MASK32).astype(np.uint32)


def philox(seed, c0, c1, c2, c3, n_rounds: int = N_ROUNDS_DEFAULT) -> tuple[np.ndarray, ...]:
    """Philox4x32 with `n_rounds` rounds of the counter (c0, c1, c2, c3) under the key from `seed`.

    Counter words are integer arrays (broadcast together) taken modulo 2**32. Each round replaces the state by
    (umulhi(ROUND_B, c2) ^ c1 ^ k0, ROUND_B * c2, umulhi(ROUND_A, c0) ^ c3 ^ k1, ROUND_A * c0) and then raises the
    key by (KEY_A, KEY_B), all modulo 2**32. Returns four uint32 arrays.
    """
    k0, k1 = seed_key_words(seed)
    return philox_with_key(k0, k1, c0, c1, c2, c3, n_rounds)


def philox_with_key(k0: int, k1: int, c0, c1, c2, c3, n_rounds: int = N_ROUNDS_DEFAULT) -> tuple[np.ndarray, ...]:
    """`philox` with the key given as its two 32-bit words, for checking against published known answers."""
    if not (0 <= k0 <= _MASK32 and 0 <= k1 <= _MASK32):
        raise ValueError(f"key words must be in [0, 2**32), got {k0:#x}, {k1:#x}")
    if n_rounds < 0:
        raise ValueError(f"n_rounds must be non-negative, got {n_rounds}")
    c0, c1, c2, c3 = np.broadcast_arrays(*(_u32_words(c) for c in (c0, c1, c2, c3)))
    for _ in range(n_rounds):
        hi_a, lo_a = _mul_hi_lo(PHILOX_ROUND_A, c0)
        hi_b, lo_b = _mul_hi_lo(PHILOX_ROUND_B, c2)
        c0, c1, c2, c3 = hi_b ^ c1 ^ np.uint32(k0), lo_b, hi_a ^ c3 ^ np.uint32(k1), lo_a
        k0 = (k0 + PHILOX_KEY_A) & _MASK32
        k1 = (k1 + PHILOX_KEY_B) & _MASK32
    return c0, c1, c2, c3


def _typed_offsets(offsets) -> np.ndarray:
    """`offsets` as a numpy integer array. Plain Python ints are typed the way Triton types an integer literal:
    int32 when all fit, else uint32, else int64, else uint64."""
    if isinstance(offsets, (np.ndarray, np.integer)):
        arr = np.asarray(offsets)
    else:
        arr = np.asarray(offsets)
        if arr.dtype.kind in "iu" and arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            for dtype in (np.int32, np.uint32, np.int64, np.uint64):
                info = np.iinfo(dtype)
                if info.min <= lo and hi <= info.max:
                    arr = arr.astype(dtype)
                    break
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"offsets must be integers, got dtype {arr.dtype}")
    return arr


def offset_counter_words(offsets) -> tuple[np.ndarray, np.ndarray]:
    """The counter words (c0, c1) for `offsets` (c2 = c3 = 0), as uint32 arrays.

    For offsets of 32 bits or fewer, c0 is the value modulo 2**32 (an int32 offset's bit pattern; narrower signed
    offsets are sign-extended) and c1 is 0. For 64-bit offsets, c0 and c1 are the low and high words of the two's
    complement pattern. So an int32 offset -1 is the counter (0xFFFFFFFF, 0), an int64 offset -1 is
    (0xFFFFFFFF, 0xFFFFFFFF), and 32- and 64-bit offsets agree exactly on [0, 2**31) (uint32 ones on [0, 2**32)).
    """
    arr = _typed_offsets(offsets)
    if arr.dtype.itemsize <= 4:
        return arr.astype(np.uint32), np.zeros(arr.shape, np.uint32)
    pattern = arr.astype(np.uint64)
    return (pattern & _U64_MASK32).astype(np.uint32), (pattern >> _SHIFT32).astype(np.uint32)


def randint4x(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> tuple[np.ndarray, ...]:
    """Four blocks of random uint32, the Philox output words for the counters of `offsets` under `seed`'s key.

    Same as Triton's `tl.randint4x`: `philox(seed, c0, c1, 0, 0)` with (c0, c1) from `offset_counter_words`.
    """
    c0, c1 = offset_counter_words(offsets)
    zero = np.zeros_like(c0)
    return philox(seed, c0, c1, zero, zero, n_rounds)


def randint(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> np.ndarray:
    """A block of random uint32: the first word of `randint4x` (Triton's `tl.randint`)."""
    return randint4x(seed, offsets, n_rounds)[0]


def uint_to_uniform_float(x) -> np.ndarray:
    """uint32 words to float32 in [0, 1), as Triton's `uint_to_uniform_float` does for 32-bit words.

    The word is reinterpreted as int32, a negative value v is folded to ~v (= -v - 1, in [0, 2**31)), the result
    is converted to float32 (rounding to nearest even) and multiplied by `UNIFORM_SCALE` in float32. The largest
    result is 0.99999994 (float32 0x3F7FFFFF); 0 and 0xFFFFFFFF both give 0.0.
    """
    words = np.asarray(x)
    if words.dtype != np.uint32:
        raise TypeError(f"expected uint32 words, got dtype {words.dtype}")
    signed = words.view(np.int32)
    folded = np.where(signed < 0, ~signed, signed)
    return folded.astype(np.float32) * UNIFORM_SCALE


def rand(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> np.ndarray:
    """A block of float32 in [0, 1): `uint_to_uniform_float(randint(seed, offsets))` (Triton's `tl.rand`).

    Exact: the conversion and the multiply are single float32 roundings, so a GPU gives the same bits.
    """
    return uint_to_uniform_float(randint(seed, offsets, n_rounds))


def rand4x(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> tuple[np.ndarray, ...]:
    """Four blocks of float32 in [0, 1): `uint_to_uniform_float` of each word of `randint4x` (Triton's `tl.rand4x`)."""
    return tuple(uint_to_uniform_float(w) for w in randint4x(seed, offsets, n_rounds))


def _f32_of_f64(fn, x: np.ndarray) -> np.ndarray:
    """`fn` of float32 values evaluated in float64 and rounded once to float32 (a nearly always correctly rounded
    float32 result, the same on every machine)."""
    return fn(x.astype(np.float64)).astype(np.float32)


def pair_uniform_to_normal(u1, u2) -> tuple[np.ndarray, np.ndarray]:
    """The Box-Muller transform of two float32 uniform blocks into two float32 standard normal blocks.

    In float32, step by step: u1 = max(1e-7, u1); th = 6.283185307179586 * u2; r = sqrt(-2 * log(u1));
    returns (r * cos(th), r * sin(th)). Each multiply is a float32 rounding; log, sqrt, cos and sin are computed
    in float64 and rounded to float32 here, whereas Triton (and a GPU) use float32 library functions, which may
    differ from these in the last bit or two: compare normals within a few ulps, not bit for bit.
    """
    u1 = np.maximum(NORMAL_U1_FLOOR, np.asarray(u1, dtype=np.float32))
    u2 = np.asarray(u2, dtype=np.float32)
    th = TWO_PI * u2
    r = _f32_of_f64(np.sqrt, np.float32(-2.0) * _f32_of_f64(np.log, u1))
    return r * _f32_of_f64(np.cos, th), r * _f32_of_f64(np.sin, th)


def randn(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> np.ndarray:
    """A block of float32 standard normals (Triton's `tl.randn`): words i1, i2 of `randint4x`, made uniform by
    `uint_to_uniform_float`, and the first (cosine) output of `pair_uniform_to_normal`. Its magnitude is at most
    sqrt(-2 log 1e-7), about 5.68. Last-bit caveats as in `pair_uniform_to_normal`."""
    i1, i2, _, _ = randint4x(seed, offsets, n_rounds)
    n1, _ = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


def randn4x(seed, offsets, n_rounds: int = N_ROUNDS_DEFAULT) -> tuple[np.ndarray, ...]:
    """Four blocks of float32 standard normals (Triton's `tl.randn4x`): with (u1, u2, u3, u4) = `rand4x`, the
    outputs of `pair_uniform_to_normal(u1, u2)` then of `pair_uniform_to_normal(u3, u4)`. The first block equals
    `randn`. Last-bit caveats as in `pair_uniform_to_normal`."""
    u1, u2, u3, u4 = rand4x(seed, offsets, n_rounds)
    return (*pair_uniform_to_normal(u1, u2), *pair_uniform_to_normal(u3, u4))
