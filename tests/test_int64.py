"""64-bit integers (`i64`, `u64`) run on the CPU device and match numpy: arithmetic that wraps modulo 2**64,
Python's division of negative values, shifts past 32 bits, comparisons that see the high word, casts, reductions
and scans, offsets widened with `.to(metile.int64)`, loops with 64-bit bounds, SIMD-group functions and random
numbers of 64-bit offsets (docs/language.md 3.9)."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from tests import philox_reference as ref
from tests.msl_source import kernel_line

pytestmark = pytest.mark.usefixtures("on_cpu")

DTYPES = [np.int64, np.uint64]


def full_range(dtype, n: int, seed: int) -> np.ndarray:
    """`n` values spread over the whole range of `dtype`, its extremes and a few small ones first."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    special = np.array([info.min, info.max, 0, 1, 7, info.max - 6], dtype=object).astype(dtype)
    x[:6] = special[:n]
    return x


@metile.kernel
def arith(A, B, Add, Sub, Mul, Neg, Abs, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    a = metile.load(A + offs, mask=ok)
    b = metile.load(B + offs, mask=ok)
    metile.store(Add + offs, a + b, mask=ok)
    metile.store(Sub + offs, a - b, mask=ok)
    metile.store(Mul + offs, a * b, mask=ok)
    metile.store(Neg + offs, -a, mask=ok)
    metile.store(Abs + offs, metile.abs(a), mask=ok)


@pytest.mark.parametrize("dtype", DTYPES)
def test_arithmetic_wraps_around_as_numpys_does(dtype):
    n = 700
    a, b = full_range(dtype, n, 1), full_range(dtype, n, 2)[::-1].copy()
    outs = [np.zeros(n, dtype) for _ in range(5)]
    arith[(metile.cdiv(n, 256),)](a, b, *outs, n, BLOCK=256)
    metile.synchronize()
    with np.errstate(over="ignore"):
        for got, want in zip(outs, (a + b, a - b, a * b, -a, np.abs(a) if dtype is np.int64 else a)):
            np.testing.assert_array_equal(got, want)


@metile.kernel
def divide(A, B, Q, R, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    a = metile.load(A + offs, mask=ok)
    b = metile.load(B + offs, mask=ok, other=1)
    metile.store(Q + offs, a // b, mask=ok)
    metile.store(R + offs, a % b, mask=ok)


@pytest.mark.parametrize("dtype", DTYPES)
def test_floor_division_and_modulo_are_pythons_and_never_trap(dtype):
    """`//` floors and `%` takes the divisor's sign, on values beyond 32 bits; the lowest i64 divided by a run-time
    -1 wraps to itself (and `% -1` is 0), as numpy gives, where the CPU's 64-bit division would trap."""
    n = 600
    a = full_range(dtype, n, 3)
    b = np.random.default_rng(4).integers(1, 2**40, n, dtype=np.int64).astype(dtype)
    if dtype is np.int64:
        b[::2] *= -1
        b[100:110] = np.random.default_rng(5).integers(-9, 9, 10)
        a[:4], b[:4] = [-2**63, -2**63, -7, 7], [-1, 1, 2, -2]
    b[b == 0] = 3
    q, r = np.zeros(n, dtype), np.zeros(n, dtype)
    divide[(metile.cdiv(n, 256),)](a, b, q, r, n, BLOCK=256)
    metile.synchronize()
    with np.errstate(over="ignore", divide="ignore"):
        np.testing.assert_array_equal(q, a // b)
        np.testing.assert_array_equal(r, a % b)
    if dtype is np.int64:
        assert q[0] == -2**63 and r[0] == 0 and (q[2], r[2]) == (-4, 1) and (q[3], r[3]) == (-4, -1)


def test_a_64_bit_division_by_zero_is_a_device_fault():
    a, b = np.array([5, 2**40], np.int64), np.array([1, 0], np.int64)
    q, r = np.zeros(2, np.int64), np.zeros(2, np.int64)
    with pytest.raises(metile.DeviceFault) as info:
        divide[(1,)](a, b, q, r, 2, BLOCK=2)
        metile.synchronize()
    assert info.value.kind == "division-by-zero"


@metile.kernel
def bits(A, S, Shl, Shr, Logic, Not, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs)
    s = metile.load(S + offs)
    metile.store(Shl + offs, a << s)
    metile.store(Shr + offs, a >> s)
    metile.store(Logic + offs, (a & 0x0F0F0F0F0F0F) | (a ^ (s << 40)))
    metile.store(Not + offs, ~a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shifts_reach_every_bit_and_right_shifts_of_signed_values_are_arithmetic(dtype):
    a = full_range(dtype, 64, 6)
    s = np.arange(64).astype(dtype)
    outs = [np.zeros(64, dtype) for _ in range(4)]
    bits[(1,)](a, s, *outs, BLOCK=64)
    metile.synchronize()
    for got, want in zip(outs, (a << s, a >> s, (a & dtype(0x0F0F0F0F0F0F)) | (a ^ (s << dtype(40))), ~a)):
        np.testing.assert_array_equal(got, want)


@metile.kernel
def compare(A, B, Lt, Eq, W, M, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs)
    b = metile.load(B + offs)
    metile.store(Lt + offs, a < b)
    metile.store(Eq + offs, a == b)
    metile.store(W + offs, metile.where(a > b, a, b - 1))
    metile.store(M + offs, metile.maximum(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons_see_the_high_word(dtype):
    """Values with the same low 32 bits and different high words compare by their high words."""
    low = np.random.default_rng(7).integers(0, 2**32, 64, dtype=np.int64)
    high = np.random.default_rng(8).integers(-4 if dtype is np.int64 else 0, 4, (2, 64))
    a, b = ((high[0] << 32) + low).astype(dtype), ((high[1] << 32) + low).astype(dtype)
    lt, eq = np.zeros(64, bool), np.zeros(64, bool)
    w, m = np.zeros(64, dtype), np.zeros(64, dtype)
    compare[(1,)](a, b, lt, eq, w, m, BLOCK=64)
    metile.synchronize()
    with np.errstate(over="ignore"):
        for got, want in zip((lt, eq, w, m), (a < b, a == b, np.where(a > b, a, b - dtype(1)), np.maximum(a, b))):
            np.testing.assert_array_equal(got, want)


@metile.kernel
def casts(I, U, F, Wide, UWide, Narrow, Byte, Float, Back, Bits, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    i = metile.load(I + offs)   # i32
    u = metile.load(U + offs)   # u32
    w = metile.load(Wide + offs)   # i64
    f = metile.load(F + offs)   # f32
    metile.store(Wide + offs, i.to(metile.int64))
    metile.store(UWide + offs, u.to(metile.int64))
    metile.store(Narrow + offs, w.to(metile.int32))
    metile.store(Byte + offs, w.to(metile.uint8))
    metile.store(Float + offs, w.to(metile.float32))
    metile.store(Back + offs, f.to(metile.int64))
    metile.store(Bits + offs, w.to(metile.uint64, bitcast=True))


def test_casts_extend_keep_the_low_bits_round_and_reinterpret():
    n = 64
    rng = np.random.default_rng(9)
    i = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2**32, n, dtype=np.int64).astype(np.uint32)
    f = (rng.standard_normal(n) * 2.0**50).astype(np.float32)
    w = full_range(np.int64, n, 10)
    w[6] = 2**60 + 2**36 + 1   # rounds up to f32: rounding through a double first would round down
    wide, uwide = w.copy(), np.zeros(n, np.int64)
    outs = [np.zeros(n, np.int32), np.zeros(n, np.uint8), np.zeros(n, np.float32), np.zeros(n, np.int64),
            np.zeros(n, np.uint64)]
    casts[(1,)](i, u, f, wide, uwide, *outs, BLOCK=n)
    metile.synchronize()
    narrow, byte, flt, back, bits_ = outs
    np.testing.assert_array_equal(wide, i.astype(np.int64))
    np.testing.assert_array_equal(uwide, u.astype(np.int64))
    np.testing.assert_array_equal(narrow, w.astype(np.int32))
    np.testing.assert_array_equal(byte, w.astype(np.uint8))
    np.testing.assert_array_equal(flt, w.astype(np.float32))
    assert flt[6] == np.float32(2**60 + 2**37)
    np.testing.assert_array_equal(back, np.trunc(f).astype(np.int64))
    np.testing.assert_array_equal(bits_, w.view(np.uint64))


@metile.kernel
def reductions(X, S, MX, MN, AM, AN, RS, RX, CS, CP, R: metile.constexpr, C: metile.constexpr):
    r = metile.arange(0, R)
    c = metile.arange(0, C)
    x = metile.load(X + r[:, None] * C + c[None, :])
    metile.store(S, metile.sum(x))
    metile.store(MX, metile.max(x))
    metile.store(MN, metile.min(x))
    metile.store(AM, metile.argmax(x))
    metile.store(AN, metile.argmin(x))
    metile.store(RS + r, metile.sum(x, axis=1))
    metile.store(RX + c, metile.max(x, axis=0))
    metile.store(CS + r[:, None] * C + c[None, :], metile.cumsum(x, axis=1))
    metile.store(CP + r[:, None] * C + c[None, :], metile.cumprod(x, axis=0))


def reduction_inputs(dtype, shape, seed):
    """Full-range values, and values that share their high word (then the low words decide), negative ones too."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    spread = full_range(dtype, size, seed)
    base = -(2**40) if dtype is np.int64 else 2**40
    shared = (base + rng.integers(0, 2**32, size)).astype(dtype)
    return [spread.reshape(shape), shared.reshape(shape)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 8), (16, 64), (3, 5), (1, 2)])
def test_reductions_and_scans_of_64_bit_tiles(dtype, shape):
    """Across several simdgroups (16 x 64 is 1024 elements), within one, and in partial ones: Metal's SIMD-group
    functions take no 64-bit values, so the reductions are built from 32-bit ones."""
    R, C = shape
    for x in reduction_inputs(dtype, shape, R * C):
        x[0, -1] = x[-1, 0] = x.max()   # ties: argmax gives the first
        outs = [np.zeros(1, dtype) for _ in range(3)] + [np.zeros(1, np.int32) for _ in range(2)]
        outs += [np.zeros(R, dtype), np.zeros(C, dtype), np.zeros(shape, dtype), np.zeros(shape, dtype)]
        reductions[(1,)](x, *outs, R=R, C=C)
        metile.synchronize()
        s, mx, mn, am, an, rs, rx, cs, cp = outs
        with np.errstate(over="ignore"):
            assert s[0] == x.sum(dtype=dtype) and mx[0] == x.max() and mn[0] == x.min()
            assert am[0] == x.argmax() and an[0] == x.argmin()
            np.testing.assert_array_equal(rs, x.sum(1, dtype=dtype))
            np.testing.assert_array_equal(rx, x.max(0))
            np.testing.assert_array_equal(cs, np.cumsum(x, 1, dtype=dtype))
            np.testing.assert_array_equal(cp, np.cumprod(x, 0, dtype=dtype))


@metile.kernel
def masked_sum(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(Out, metile.sum(x))
    metile.store(Out + 1, metile.max(x))
    metile.store(Out + 2, metile.min(x))


@pytest.mark.parametrize("n", [1, 5, 33, 250])
def test_reductions_skip_inactive_elements_in_partial_simdgroups(n):
    x = (np.arange(256, dtype=np.int64) - 128) * (2**35 + 3)
    out = np.zeros(3, np.int64)
    masked_sum[(1,)](x, out, n, BLOCK=256)
    metile.synchronize()
    assert list(out) == [x[:n].sum(), x[:n].max(), x[:n].min()]


@metile.kernel
def widened(X, Y, Off, stride, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    off = pid.to(metile.int64) * stride + cols        # beyond 2**31 for stride = 2**33
    metile.store(Off + pid * BLOCK + cols, off)
    x = metile.load(X + (off - pid * stride) + pid * BLOCK)
    metile.store(Y + pid * BLOCK + cols, x)


def test_offsets_widened_with_to_int64_are_computed_in_64_bits():
    """Triton's `pid.to(tl.int64) * stride` for offsets past 2**31: the stride is a Python int beyond i32, so an
    i64 argument, and the pointer arithmetic takes the i64 offset tiles."""
    x = np.arange(4 * 32, dtype=np.float32)
    y, off = np.zeros_like(x), np.zeros(4 * 32, np.int64)
    stride = 2**33 + 5
    widened[(4,)](x, y, off, stride, BLOCK=32)
    metile.synchronize()
    np.testing.assert_array_equal(off, (np.arange(4)[:, None] * stride + np.arange(32)).ravel())
    np.testing.assert_array_equal(y, x)
    assert "long" in widened.compile(x, y, off, stride, BLOCK=32).msl


@metile.kernel
def unsigned_offsets(X, O, W, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    o = metile.load(O + offs)
    w = metile.load(W + offs)
    metile.store(Y + offs, metile.load(X + 200 - o) + metile.load(X + 100 + w) * metile.load(X + 299 - w))


def test_unsigned_offsets_subtract_in_64_bits_and_64_bit_offsets_add():
    """`P - o` with a u32 `o` negates it as an i64, so every u32 value subtracts right (an offset of 3e9 needs an
    array too large to test; the IR and MSL show the 64-bit negation); a u64 offset adds, and subtracts as an i64."""
    x = np.arange(300, dtype=np.float32)
    o = np.arange(64, dtype=np.uint32) * 3
    w = np.arange(64, dtype=np.uint64)
    y = np.zeros(64, np.float32)
    unsigned_offsets[(1,)](x, o, w, y, BLOCK=64)
    metile.synchronize()
    w64 = w.astype(np.int64)
    np.testing.assert_array_equal(y, x[200 - o.astype(np.int64)] + x[100 + w64] * x[299 - w64])
    ir = metile.ir.pretty(unsigned_offsets.trace(x, o, w, y, BLOCK=64))
    assert "= cast %o : tile<64xi64>" in ir and "= neg " in ir
    assert "[-static_cast<long>(o_1)]" in unsigned_offsets.compile(x, o, w, y, BLOCK=64).msl


@metile.kernel
def loop_sum(Y, start, stop, step):
    acc = metile.zeros((1,), metile.int64)
    count = 0
    for i in range(start, stop, step):
        acc += i
        count += 1
    metile.store(Y + metile.arange(0, 1), acc)
    metile.store(Y + 1 + metile.arange(0, 1), count + metile.zeros((1,), metile.int64))


@pytest.mark.parametrize(("start", "stop", "step"), [
    (2**33, 2**33 + 10, 3), (-(2**40), -(2**40) + 7, 2), (2**63 - 10, 2**63 - 1, 4), (5, 2**40, 2**39),
    (2**33, 2**33, 1)])
def test_loops_with_64_bit_bounds_count_with_an_i64_index_that_never_wraps(start, stop, step):
    y = np.zeros(2, np.int64)
    loop_sum[(1,)](y, start, stop, step)
    metile.synchronize()
    r = range(start, stop, step)
    with np.errstate(over="ignore"):
        assert y[1] == len(r) and y[0] == np.array(list(r) or [0], np.int64).sum()


@metile.kernel
def gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    row, col = metile.program_id(0).to(metile.int64) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, row, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


@pytest.mark.parametrize("K", [96, 90, 7])   # rows aligned, misaligned (a run-time alignment test), short
def test_a_gemm_at_64_bit_row_offsets(K):
    """The operands are staged in runs of 4 elements after a run-time alignment test of their 64-bit offsets."""
    M, N = 70, 36
    rng = np.random.default_rng(K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm[(metile.cdiv(M, 64), metile.cdiv(N, 32))](a, b, c, M, N, K, BM=64, BN=32, BK=32)
    metile.synchronize()
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def lanes(X, Shuffled, Broadcast, Summed, BLOCK: metile.constexpr):
    t = metile.thread_id()
    x = metile.load(X + t)
    metile.store(Shuffled + t, metile.simd_shuffle_xor(x, 5))
    metile.store(Broadcast + t, metile.simd_broadcast(x, 3))
    metile.store(Summed + t, metile.simd_sum(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_simd_functions_move_64_bit_values_whole(dtype):
    x = full_range(dtype, 64, 11)
    outs = [np.zeros(64, dtype) for _ in range(3)]
    lanes[(1,)](x, *outs, BLOCK=64)
    metile.synchronize()
    i = np.arange(64)
    np.testing.assert_array_equal(outs[0], x[i ^ 5])
    np.testing.assert_array_equal(outs[1], x[i // 32 * 32 + 3])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs[2], np.repeat(x.reshape(2, 32).sum(1, dtype=dtype), 32))


@metile.kernel
def draw(O, Y, seed, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.randint(seed, metile.load(O + offs)))


@pytest.mark.parametrize("seed", [2**40 + 3, -5, 2**63 + 11])
def test_random_numbers_of_64_bit_offsets_and_seeds_are_tritons(seed):
    """The high word of a 64-bit offset goes to the counter, of a 64-bit seed to the key (a run-time i64 or u64
    argument here), as Triton's generator does."""
    o = np.array([2**32 + 5, -1, -(2**63), 7, 2**40, 3, 2**63 - 1, 0], np.int64)
    for offsets in (o, o.view(np.uint64)):
        y = np.zeros(8, np.uint32)
        draw[(1,)](offsets, y, seed, BLOCK=8)
        metile.synchronize()
        np.testing.assert_array_equal(y, ref.randint(seed, offsets))


@metile.kernel
def copy(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs) + 1)   # the load and the store


def test_64_bit_arrays_of_every_kind_are_arguments_and_the_profile_counts_8_bytes_each():
    torch = pytest.importorskip("torch")
    x = np.arange(64, dtype=np.int64) * 2**35
    for src, dst in ((x, np.zeros(64, np.int64)), (torch.from_numpy(x.copy()), torch.zeros(64, dtype=torch.int64)),
                     (metile.Buffer(data=x.view(np.uint64)), metile.Buffer(shape=64, dtype="u64"))):
        copy[(1,)](src, dst, BLOCK=64)
        metile.synchronize()
        got = dst.numpy() if hasattr(dst, "numpy") else dst
        np.testing.assert_array_equal(np.asarray(got).view(np.int64), x + 1)
    d = copy[(1,)](x, np.zeros(64, np.int64), BLOCK=64, profile=True).to_dict()
    assert d["device_bytes_read"] == 64 * 8 and d["device_bytes_written"] == 64 * 8


@metile.kernel
def clipped(X, Y, row, BLOCK: metile.constexpr):
    t = metile.tile_load(X, row, 0, 1, (BLOCK, 1))   # without bounds=: clipped to X's length
    metile.store(Y + metile.arange(0, BLOCK)[:, None], t)


def test_an_array_too_long_for_the_clipping_length_is_refused_at_its_parameter():
    """A tile access without `bounds=` clips to its array's length, an i32: with 64-bit offsets a tile past 2**31
    elements would be dropped, so such an array is refused (a strided view reaching that far, never touched)."""
    from metile.launch import ArrayTooLongError, array_elements

    far = np.lib.stride_tricks.as_strided(np.zeros(4, np.uint8), shape=(2,), strides=(2**31,))
    with pytest.raises(ArrayTooLongError):   # checked first: a launch that took the view would copy its span
        array_elements(far, 1)
    y = np.zeros((4, 1), np.uint8)
    with pytest.raises(metile.MetileError, match=r"argument 'X' has 2147483649 elements.*give it bounds=") as info:
        clipped[(1,)](far, y, 0, BLOCK=4)
    assert info.value.loc.line == kernel_line(clipped.fn, "def clipped")
    clipped[(1,)](np.arange(4, dtype=np.uint8), y, 1, BLOCK=4)
    metile.synchronize()
    assert list(y[:, 0]) == [1, 2, 3, 0]
