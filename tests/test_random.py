"""`metile.rand`, `randn`, `randint` and their `4x` forms run on the CPU device and match Triton's generator, modelled
in numpy by `tests/philox_reference.py`: integer words and uniform floats bit for bit, normal samples within a few
float32 ulps (their logarithm, square root and cosine come from the device's math library)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metile
from metile.frontend.errors import KernelArgumentError, KernelTypeError
from tests import philox_reference as ref

PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def draw(I0, I1, I2, I3, F, N, n, seed, base, ROUNDS: metile.constexpr, BLOCK: metile.constexpr):
    offs = base + metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK) < n
    at = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    w0, w1, w2, w3 = metile.randint4x(seed, offs, n_rounds=ROUNDS)
    for ptr, w in ((I0, w0), (I1, w1), (I2, w2), (I3, w3)):
        metile.store(ptr + at, w, mask=m)
    metile.store(F + at, metile.rand(seed, offs, ROUNDS), mask=m)
    metile.store(N + at, metile.randn(seed, offs, ROUNDS), mask=m)


def run(n: int, seed, base: int, rounds: int = 10, block: int = 256):
    words = [np.zeros(n, np.uint32) for _ in range(4)]
    f, normal = np.zeros(n, np.float32), np.zeros(n, np.float32)
    draw[(metile.cdiv(n, block),)](*words, f, normal, n, seed, base, ROUNDS=rounds, BLOCK=block)
    return words, f, normal


@PROPERTY
@given(st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**31 - 2000), st.integers(1, 700))
def test_words_and_uniforms_are_bit_identical_to_triton(seed, base, n):
    words, f, normal = run(n, seed, base)
    offs = np.arange(base, base + n, dtype=np.int32)
    for got, want in zip(words, ref.randint4x(seed, offs)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(f.view(np.uint32), ref.rand(seed, offs).view(np.uint32))
    np.testing.assert_allclose(normal, ref.randn(seed, offs), rtol=2e-6, atol=2e-6)
    assert (f >= 0).all() and (f < 1).all()


@pytest.mark.parametrize("rounds", [0, 1, 7, 10])
def test_the_number_of_rounds(rounds):
    words, f, _ = run(300, 1234, 10, rounds)
    offs = np.arange(10, 310, dtype=np.int32)
    for got, want in zip(words, ref.randint4x(1234, offs, n_rounds=rounds)):
        np.testing.assert_array_equal(got, want)


@metile.kernel
def draw_const(I0, F4, N4, SEED: metile.constexpr, OFFSET: metile.constexpr, BLOCK: metile.constexpr):
    at = metile.arange(0, BLOCK)
    metile.store(I0 + at, metile.randint(SEED, OFFSET) + at * 0)
    f = metile.rand4x(SEED, at)
    nrm = metile.randn4x(SEED, at)
    for j in range(4):
        metile.store(F4 + j * BLOCK + at, f[j])
        metile.store(N4 + j * BLOCK + at, nrm[j])


@pytest.mark.parametrize("seed", [0, -1, 2**32 - 1, 2**40 + 7, 0x0123456789ABCDEF, 2**63 + 5, -(2**40)])
def test_compile_time_seeds_of_64_bits(seed):
    """A constexpr seed is taken as a 64-bit integer, as Triton takes an int64 or uint64 seed."""
    i0 = np.zeros(64, np.uint32)
    f4, n4 = np.zeros(4 * 64, np.float32), np.zeros(4 * 64, np.float32)
    draw_const[(1,)](i0, f4, n4, SEED=seed, OFFSET=5, BLOCK=64)
    at = np.arange(64, dtype=np.int32)
    np.testing.assert_array_equal(i0, ref.randint(seed, np.full(64, 5, np.int32)))
    np.testing.assert_array_equal(f4.reshape(4, 64).view(np.uint32), np.stack(ref.rand4x(seed, at)).view(np.uint32))
    np.testing.assert_allclose(n4.reshape(4, 64), np.stack(ref.randn4x(seed, at)), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("offset", [2**31, 2**32 - 1, 2**32 + 9, 2**40])
def test_compile_time_offsets_beyond_32_bits(offset):
    """Triton types an integer literal that i32 cannot hold as i64, whose high word goes to the counter."""
    i0 = np.zeros(32, np.uint32)
    f4, n4 = np.zeros(128, np.float32), np.zeros(128, np.float32)
    draw_const[(1,)](i0, f4, n4, SEED=3, OFFSET=offset, BLOCK=32)
    np.testing.assert_array_equal(i0, ref.randint(3, np.full(32, offset, np.int64)))


def test_unsigned_and_narrow_seeds_and_offsets():
    @metile.kernel
    def narrow(S, O, Y, BLOCK: metile.constexpr):
        at = metile.arange(0, BLOCK)
        seed = metile.load(S)
        metile.store(Y + at, metile.randint(seed, metile.load(O + at)))

    for seed in (np.array([2**32 - 5], np.uint32), np.array([-7], np.int16)):
        offs = np.arange(-64, 64, 2).astype(np.int8)
        y = np.zeros(64, np.uint32)
        narrow[(1,)](seed, offs, y, BLOCK=64)
        np.testing.assert_array_equal(y, ref.randint(seed[0], offs))


def test_random_number_mistakes_are_refused():
    @metile.kernel
    def bad(Y, WHAT: metile.constexpr):
        at = metile.arange(0, 32)
        if WHAT == "float seed":
            metile.store(Y + at, metile.rand(1.5, at))
        elif WHAT == "float offsets":
            metile.store(Y + at, metile.rand(1, at * 1.0))
        elif WHAT == "huge seed":
            metile.store(Y + at, metile.rand(2**64, at))
        else:
            metile.store(Y + at, metile.rand(1, at, n_rounds=-1))

    y = np.zeros(32, np.float32)
    for what, error, words in [("float seed", KernelTypeError, "seed must be an integer"),
                               ("float offsets", KernelTypeError, "offsets must be integers"),
                               ("huge seed", KernelTypeError, "does not fit 64 bits"),
                               ("rounds", KernelArgumentError, "n_rounds must be at least 0")]:
        with pytest.raises(error, match=words):
            bad[(1,)](y, WHAT=what)
