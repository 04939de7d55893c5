"""`fold_constants` returns the kernel itself when no rule matches anywhere, and otherwise the bottom-up
rewrite: on random kernels of both stages it agrees with `bottom_up(FOLD_RULES, k)`."""

from __future__ import annotations

from hypothesis import given, settings

from metile.ir.ops import BinOp, Stage
from metile.ir.stmts import Kernel, Let
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Const, Param, Var
from metile.rewrite.driver import bottom_up
from metile.rewrite.fold import FOLD_RULES, fold_constants
from property_tests.test_ir_strategies import any_kernels


@settings(max_examples=200)
@given(any_kernels())
def test_fold_constants_is_the_bottom_up_rewrite(k):
    folded = fold_constants(k)
    assert folded == bottom_up(FOLD_RULES, k)
    if folded == k:
        assert folded is k  # nothing matched: the same object, so later passes reuse its scan


def _kernel(*values) -> Kernel:
    i32 = TileType(DType.I32)
    n = Param("n", 0, i32)
    body = [Let(Var(f"v{i}", v.type), v) for i, v in enumerate(values)]
    return Kernel("k", Stage.TILE, (n,), body)


def test_nothing_to_fold_returns_the_same_kernel():
    i32 = TileType(DType.I32)
    k = _kernel(Binary(BinOp.ADD, Param("n", 0, i32), Const(2, DType.I32)))
    assert fold_constants(k) is k


def test_a_fold_inside_makes_the_parent_foldable():
    c = lambda v: Const(v, DType.I32)  # noqa: E731
    inner = Binary(BinOp.ADD, c(1), c(2))
    k = _kernel(Binary(BinOp.MUL, inner, c(3)))
    folded = fold_constants(k)
    assert folded.body[0].value == c(9)


def test_tiles_of_one_integer_constant_are_identities_too():
    from metile.ir.tile import Arange, Broadcast, Full

    offs = Arange(0, 64)
    one, zero = Full((64,), Const(1, DType.I32)), Broadcast(Const(0, DType.I32), (64,))
    for folds in (Binary(BinOp.MUL, offs, one), Binary(BinOp.MUL, one, offs), Binary(BinOp.ADD, offs, zero),
                  Binary(BinOp.SUB, offs, zero)):
        assert fold_constants(_kernel(folds)).body[0].value == offs
    # a float tile of 1.0 is left alone: floats are never folded
    x = Binary(BinOp.MUL, Full((64,), Const(1.5, DType.F32)), Full((64,), Const(1.0, DType.F32)))
    assert fold_constants(_kernel(x)).body[0].value == x
