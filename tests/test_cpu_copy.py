"""`mt_copy`, the CPU runtime's copy of arrays into device memory and back (runtime_copy.cpp): the bytes it copies at
every size and alignment, non-temporal stores from 1 MiB up included, and that launches copy their arrays with it, the
general way and the repeated way (`metile.metal.cpu.dispatch.CopiedRuns`) alike."""

from __future__ import annotations

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.metal.cpu.runtime_api import ffi

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
pytestmark = pytest.mark.usefixtures("on_cpu")
MIB = 1 << 20


@pytest.mark.parametrize("nbytes", [0, 1, 15, 64, 1000, MIB - 1, MIB, MIB + 77, 3 * MIB + 5])
@pytest.mark.parametrize("offsets", [(0, 0), (3, 0), (0, 5), (7, 9)])
def test_mt_copy_copies_every_byte_and_no_other(nbytes, offsets):
    rt = metile.device("cpu").rt
    rng = np.random.default_rng(nbytes)
    src = rng.integers(0, 256, nbytes + 64, dtype=np.uint8)
    dst = np.full(nbytes + 64, 0xAB, np.uint8)
    s, d = offsets
    rt.mt_copy(ffi.from_buffer(dst) + d, ffi.from_buffer(src) + s, nbytes)
    assert np.array_equal(dst[d:d + nbytes], src[s:s + nbytes])
    assert (dst[:d] == 0xAB).all() and (dst[d + nbytes:] == 0xAB).all()


@triton.jit
def add_one(X, Out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.load(X + offs, mask=offs < n) + 1, mask=offs < n)



def test_launches_copy_their_arrays_in_and_back_with_mt_copy(copies):
    n = (2 * MIB) // 4 + 3   # over 1 MiB each: the non-temporal stores
    for k in range(4):   # the general way, then the repeated way
        x, out = torch.randn(n), torch.full((n,), -1.0)
        copies.clear()
        add_one[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, in_place=False)   # large ones, copied all the same
        torch.testing.assert_close(out, x + 1)
        assert sorted(copies) == [4 * n] * 3, k   # X and Out in, Out back
    a, out = np.random.rand(n).astype(np.float32), np.zeros(n, np.float32)
    copies.clear()
    add_one[(triton.cdiv(n, 1024),)](a, out, n, BLOCK=1024, in_place=False)   # numpy arrays: the general way
    np.testing.assert_allclose(out, a + 1, rtol=1e-6)
    assert sorted(copies) == [4 * n] * 3
