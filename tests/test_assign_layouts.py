"""`assign_layouts`: each product's simdgroups arranged over its 8x8 pieces, recorded in its `MmaPlan`, and
carried out by the lowering; a pass of the user's may choose another arrangement, and every arrangement is
right on ragged shapes."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from test_split_k import check_product
from test_split_k import gemv_like as gemm

import metile
from metile.ir import pretty, verify
from metile.ir.layouts import Fragments
from metile.ir.tile import Dot, MmaPlan
from metile.ir.verify import VerifyError
from metile.rewrite.layouts import assign_layouts
from metile.rewrite.pipeline import DEFAULT_PIPELINE, TILE_PIPELINE, run

pytestmark = pytest.mark.usefixtures("on_cpu")


def arranged(sgs: tuple[int, int]):
    """A user pass recording `sgs` as every product's arrangement."""

    def arrange(k):
        dots = {d: attrs.evolve(k.schedule.dots.get(d, MmaPlan()), simdgroups=sgs)
                for d in metile.rewrite.scan.scan(k).of(Dot)}
        return attrs.evolve(k, schedule=attrs.evolve(k.schedule, dots=k.schedule.dots.update(dots)))

    arrange.__name__ = f"arrange_{sgs[0]}x{sgs[1]}"
    return arrange


def _with(extra):
    at = DEFAULT_PIPELINE.index(assign_layouts) + 1
    return [*DEFAULT_PIPELINE[:at], extra, *DEFAULT_PIPELINE[at:]]


def _check(a, b, c, r, rtol):
    check_product(a, b, c, r, 32, rtol, 10 * rtol)


def _outputs(M, N):
    return np.zeros((M, N), np.float32), np.zeros((M, -(-N // 32)), np.float32)


def test_the_pass_records_the_squarest_arrangement():
    x = np.zeros(1, np.float32)
    k = gemm.trace(x, x, x, x, 40, 50, 30, BM=64, BN=32, BK=16)
    planned = run(DEFAULT_PIPELINE[:DEFAULT_PIPELINE.index(assign_layouts) + 1], k)
    (how,) = planned.schedule.dots.values()
    assert how.simdgroups == (2, 2)   # 8x4 pieces on 4 simdgroups: blocks of 4x2, not 2x4 (4x1) or 8x1 (1x4)
    assert "simdgroups [2, 2]" in pretty(planned)


@pytest.mark.parametrize("sgs", [(4, 1), (1, 4), (2, 2)])
@pytest.mark.parametrize(("dtype", "shape"), [(np.float32, (70, 45, 37)), (np.float16, (33, 64, 50))])
def test_every_arrangement_of_the_simdgroups_is_right(sgs, dtype, shape):
    M, N, K = shape
    rng = np.random.default_rng(M * N + K)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    c, r = _outputs(M, N)
    kernel = gemm.with_pipeline(_with(arranged(sgs)))
    kernel[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, r, M, N, K, BM=32, BN=32, BK=16, sanitize=True)
    _check(a, b, c, r, 2e-3)
    msl = kernel.compile(a, b, c, r, M, N, K, BM=32, BN=32, BK=16).msl
    assert (msl == gemm.compile(a, b, c, r, M, N, K, BM=32, BN=32, BK=16).msl) == (sgs == (2, 2))


def test_an_arrangement_of_other_simdgroups_is_chosen_again():
    """Recorded for 8 simdgroups while 4 run the product: the lowering arranges the 4 itself."""
    M, N, K = 40, 24, 20
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c, r = _outputs(M, N)
    kernel = gemm.with_pipeline(_with(arranged((4, 2))))
    kernel[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, r, M, N, K, BM=32, BN=32, BK=16)
    _check(a, b, c, r, 1e-4)
    assert kernel.compile(a, b, c, r, M, N, K, BM=32, BN=32, BK=16).msl == \
        gemm.compile(a, b, c, r, M, N, K, BM=32, BN=32, BK=16).msl


def test_the_verifier_refuses_an_arrangement_that_does_not_divide_the_pieces():
    x = np.zeros(1, np.float32)
    k = run(TILE_PIPELINE, gemm.trace(x, x, x, x, 40, 50, 30, BM=32, BN=16, BK=16))
    (d,) = k.schedule.dots
    bad = attrs.evolve(k, schedule=attrs.evolve(k.schedule, dots=k.schedule.dots.set(
        d, attrs.evolve(k.schedule.dots[d], simdgroups=(1, 4)))))
    with pytest.raises(VerifyError, match=r"simdgroups \(1, 4\) do not divide the 8x8 pieces of a \[32, 16\]"):
        verify(bad)


def test_the_verifier_refuses_fragments_on_more_simdgroups_than_the_program_runs():
    """Recorded decisions must agree: an accumulator laid out over 2x2 simdgroups in 2 slices of k needs 8, and
    the launch plan runs 4."""
    x = np.zeros(1, np.float32)
    k = run(TILE_PIPELINE, gemm.trace(x, x, x, x, 40, 50, 30, BM=32, BN=32, BK=16))
    name, held = next((n, lay) for n, lay in k.schedule.layouts.items() if isinstance(lay, Fragments))
    assert k.plan.simdgroups == 4 and held.sg_m * held.sg_n * held.split * held.replicas == 4
    verify(k)
    bad = attrs.evolve(k, schedule=attrs.evolve(k.schedule, layouts=k.schedule.layouts.set(
        name, attrs.evolve(held, split=2))))
    with pytest.raises(VerifyError, match=r"take 8 simdgroups, and the program runs 4"):
        verify(bad)


@metile.kernel
def product_in_a_role(A, B, C, D, n, P: metile.constexpr):
    r, c = metile.arange(0, 16), metile.arange(0, 32)
    a = metile.load(A + r[:, None] * 16 + r[None, :])
    b = metile.load(B + r[:, None] * 32 + c[None, :])
    with metile.simdgroup_role(role=0, num_roles=2, num_sgs=P):
        metile.store(C + r[:, None] * 32 + c[None, :], metile.dot(a, b))
    with metile.simdgroup_role(role=1, num_roles=2, num_sgs=1):
        offs = metile.arange(0, 32)
        metile.store(D + offs, metile.load(A + offs) * 2.0, mask=offs < n)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_a_product_in_a_role_is_arranged_over_the_roles_simdgroups(p):
    rng = np.random.default_rng(p)
    a, b = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    c, d = np.zeros((16, 32), np.float32), np.zeros(32, np.float32)
    product_in_a_role[(1,)](a, b, c, d, 30, P=p, sanitize=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d[:30], 2 * a.reshape(-1)[:30])
    k = run(TILE_PIPELINE, product_in_a_role.trace(a, b, c, d, 30, P=p))
    (how,) = k.schedule.dots.values()
    assert how.simdgroups == {1: (1, 1), 2: (1, 2), 4: (1, 4)}[p]   # 2x4 pieces: blocks of 2x2, 2x1
