"""`simdgroup_role` blocks that read tiles computed before them: the whole program's threads hold such a tile
in registers laid out for all of them, so the compiler hands it to the role's threads through threadgroup
memory, written before the block (a barrier cannot be placed inside one)."""

from __future__ import annotations

import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def split_roles(X, Y, Z, n, BLOCK: metile.constexpr, P: metile.constexpr, Q: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    x = metile.load(X + offs, mask=ok)
    with metile.simdgroup_role(role=0, num_roles=2, num_sgs=P):
        doubled = x * 2.0
        metile.store(Y + offs, doubled, mask=ok)
    with metile.simdgroup_role(role=1, num_roles=2, num_sgs=Q):
        shifted = x + 1.0
    metile.store(Z + offs, doubled + shifted, mask=ok)


@pytest.mark.parametrize(("n", "block", "p", "q"), [(256, 256, 1, 2), (1000, 256, 3, 1), (64, 64, 4, 4),
                                                    (100, 128, 1, 1), (513, 512, 2, 6)])
def test_roles_read_a_tile_loaded_before_them(n, block, p, q):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    split_roles[(-(-n // block),)](x, y, z, n, BLOCK=block, P=p, Q=q)
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_allclose(z, 3 * x + 1, rtol=1e-6, atol=1e-6)


def test_a_role_reads_a_loop_carried_tile():
    @metile.kernel
    def scaled_running_sum(X, Out, n_cols, BLOCK: metile.constexpr):
        row = metile.program_id(0)
        acc = metile.zeros((BLOCK,), dtype="f32")
        for c0 in metile.tile_range(0, n_cols, BLOCK):
            cols = c0 + metile.arange(0, BLOCK)
            acc = acc + metile.load(X + row * n_cols + cols, mask=cols < n_cols)
            with metile.simdgroup_role(role=1, num_roles=2, num_sgs=1):
                seen = acc * 0.5
            acc = seen * 2.0
        metile.store(Out + row * BLOCK + metile.arange(0, BLOCK), acc)

    x = np.random.default_rng(3).standard_normal((3, 300)).astype(np.float32)
    out = np.zeros((3, 128), np.float32)
    scaled_running_sum[(3,)](x, out, 300, BLOCK=128)
    padded = np.zeros((3, 384), np.float32)
    padded[:, :300] = x
    np.testing.assert_allclose(out, padded.reshape(3, 3, 128).sum(1), rtol=1e-5, atol=1e-5)
