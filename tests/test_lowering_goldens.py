"""What each rule module of `metile.rewrite.lower` makes, as goldens: for one small kernel per module (below, each
exercising the constructs that module lowers), `tests/golden/lowering/<module>.mtir` holds the planned Tile IR the
lowering is given (after `TILE_PIPELINE`) and the SIMT IR `lower_tiles` makes of it, which verifies and parses back
to the same kernel. A change to one module's rules shows up in its own golden. `pytest --update-golden` rewrites
the files for review.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import metile
from metile.ir import parse, pretty, verify
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import TILE_PIPELINE, run

GOLDEN = Path(__file__).parent / "golden" / "lowering"


@metile.kernel
def statements(X, Y, n):
    """A load bound to a name, and a masked store of an expression of it."""
    offs = metile.arange(0, 64)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(Y + offs, x + 1.0, mask=offs < n)


@metile.kernel
def values(X, Y, n):
    """Element-wise values: a program's offset broadcast, a comparison, a select, a scalar broadcast."""
    offs = metile.program_id(0) * 64 + metile.arange(0, 64)
    x = metile.load(X + offs, mask=offs < n, other=0.0)
    metile.store(Y + offs, metile.where(x > 0.0, x, x * 0.5) + n, mask=offs < n)


@metile.kernel
def exchange(X, Y):
    """A 4x16 tile stored transposed: read at elements other threads hold, through scratch (convert_layout)."""
    r, c = metile.arange(0, 4), metile.arange(0, 16)
    x = metile.load(X + r[:, None] * 16 + c[None, :])
    metile.store(Y + c[:, None] * 4 + r[None, :], metile.trans(x))


@metile.kernel
def memory(X, Y):
    """A copy of 256 elements: the load read by the store, a run-time loop over its 2 runs per thread of 4 (vector
    loads and stores)."""
    offs = metile.arange(0, 256)
    metile.store(Y + offs, metile.load(X + offs))


@metile.kernel
def rolled(Y, n):
    """A strided store of 16 slots per thread computed from indices alone: one run-time loop over the slots."""
    offs = metile.arange(0, 512)
    metile.store(Y + offs * 2, offs, mask=offs < n)


@metile.kernel
def reductions(X, Out, Idx, Cum):
    """A sum, an argmax and a prefix sum of a loaded row."""
    offs = metile.arange(0, 64)
    x = metile.load(X + offs)
    metile.store(Out, metile.sum(x))
    metile.store(Idx, metile.argmax(x, axis=0))
    metile.store(Cum + offs, metile.cumsum(x, axis=0))


@metile.kernel
def mma(A, B, C):
    """An 8x16 by 16x8 product on simdgroup matrices, stored as it is."""
    r, k = metile.arange(0, 8), metile.arange(0, 16)
    a = metile.load(A + r[:, None] * 16 + k[None, :])
    b = metile.load(B + k[:, None] * 8 + r[None, :])
    metile.store(C + r[:, None] * 8 + r[None, :], metile.dot(a, b))


@metile.kernel
def mma_use(A, B, C, n):
    """The same product, used element-wise and stored under a mask of rows."""
    r, k = metile.arange(0, 8), metile.arange(0, 16)
    a = metile.load(A + r[:, None] * 16 + k[None, :])
    b = metile.load(B + k[:, None] * 8 + r[None, :])
    y = metile.maximum(metile.dot(a, b), 0.0)
    metile.store(C + r[:, None] * 8 + r[None, :], y, mask=r[:, None] < n)


@metile.kernel
def staged_runs(A, B, C, M, N, K):
    """A 16x16 product over k in steps of 16 with bounds: each operand staged to threadgroup memory in runs of 4, its
    bounds tested once for the tile (runs that test nothing inside the matrices, runs that test their ends on an
    edge)."""
    acc = metile.zeros((16, 16), dtype="f32")
    for k in metile.tile_range(0, K, 16):
        a = metile.tile_load(A, 0, k, K, (16, 16), bounds=(M, K))
        b = metile.tile_load(B, k, 0, N, (16, 16), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    r = metile.arange(0, 16)
    metile.store(C + r[:, None] * 16 + r[None, :], acc)


@metile.kernel
def fma(A, B, C):
    """A 4x8 by 8x4 product, too small for simdgroup matrices."""
    r, k = metile.arange(0, 4), metile.arange(0, 8)
    a = metile.load(A + r[:, None] * 8 + k[None, :])
    b = metile.load(B + k[:, None] * 4 + r[None, :])
    metile.store(C + r[:, None] * 4 + r[None, :], metile.dot(a, b))


@metile.kernel
def control(X, Y, n):
    """An `if` on a scalar and a loop carrying a tile."""
    offs = metile.arange(0, 64)
    x = metile.load(X + offs)
    if n > 4:
        x = x * 2.0
    for _ in range(n):
        x = x + 1.0
    metile.store(Y + offs, x)


@metile.kernel
def debug(X):
    """A tile printed and checked."""
    offs = metile.arange(0, 64)
    x = metile.load(X + offs)
    metile.device_print("x", x)
    metile.device_assert(x >= 0.0, "negative")


def _f32(n: int = 1) -> np.ndarray:
    return np.zeros(n, np.float32)


def _f16(n: int = 1) -> np.ndarray:
    return np.zeros(n, np.float16)


def _i32(n: int = 1) -> np.ndarray:
    return np.zeros(n, np.int32)


EXAMPLES = {
    "statements": (statements, (_f32(), _f32(), 64)),
    "values": (values, (_f32(), _f32(), 64)),
    "exchange": (exchange, (_f32(), _f32())),
    "memory": (memory, (_f32(), _f32())),
    "rolled": (rolled, (_i32(), 512)),
    "reductions": (reductions, (_f32(), _f32(), _i32(), _f32())),
    "mma": (mma, (_f16(), _f16(), _f32())),
    "mma_use": (mma_use, (_f16(), _f16(), _f32(), 8)),
    "staged_runs": (staged_runs, (_f32(), _f32(), _f32(), 16, 16, 30)),
    "fma": (fma, (_f32(), _f32(), _f32())),
    "control": (control, (_f32(), _f32(), 3)),
    "debug": (debug, (_f32(),)),
}
"""Per rule module of `metile.rewrite.lower`, its kernel and arguments (launched on one simdgroup)."""


@pytest.mark.parametrize("module", list(EXAMPLES))
def test_what_the_rule_module_makes(module, request):
    kernel, args = EXAMPLES[module]
    tile = run(TILE_PIPELINE, kernel.trace(*args, num_simdgroups=1))
    simt = lower_tiles(tile)
    verify(simt, after="lower_tiles")
    text = pretty(simt)
    assert parse(text) == simt, "the lowering's output does not round-trip through the printer"
    got = (f"// RUN: lower_tiles, the rules of metile/rewrite/lower/{module}.py\n// `{module}` of "
           "tests/test_lowering_goldens.py: the Tile IR given, then the SIMT IR made; regenerate with pytest "
           f"--update-golden.\n// ---- Tile IR in\n{pretty(tile)}// ---- SIMT IR out\n{text}")
    path = GOLDEN / f"{module}.mtir"
    if request.config.getoption("--update-golden"):
        path.write_text(got)
    assert path.read_text() == got, f"{path} is stale: run pytest --update-golden and review it"
