"""What each pass of the default schedule changes, as goldens: `tests/golden/passes/<pass>.diff` holds, for each
example kernel (of `tests/test_ir_examples.py`, and two below), the unified diff of the printed IR before and
after the pass (the input is the example after the passes before it in `DEFAULT_PIPELINE`). The text after the
pass parses back to the same kernel. `pytest --update-golden` rewrites the files for review.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import attrs
import numpy as np
import pytest
from test_conversions import add_row, softmax_t
from test_ir_examples import gemm, vector_add

import metile
from metile.ir import CompileOptions, parse, pretty, verify
from metile.ir.target import DEFAULT_TARGET
from metile.rewrite.context import PassContext
from metile.rewrite.pipeline import LOWERING_PIPELINE, TILE_PIPELINE, run

GOLDEN = Path(__file__).parent / "golden" / "passes"
PASSES = TILE_PIPELINE


@metile.kernel
def scores(Q, K, S, n):
    """Each program multiplies its 16 rows of Q by every block of 16 columns of K (K stored transposed)."""
    rows = metile.program_id(0) * 16 + metile.arange(0, 16)
    d = metile.arange(0, 32)
    q = metile.load(Q + rows[:, None] * 32 + d[None, :])
    for start in metile.tile_range(0, n, 16):
        cols = start + metile.arange(0, 16)
        k = metile.load(K + d[:, None] * n + cols[None, :])
        metile.store(S + rows[:, None] * n + cols[None, :], metile.dot(q, k))


@metile.kernel
def row_times_column(A, B, C):
    """One 8x8 piece of product over k = 64."""
    r, k = metile.arange(0, 8), metile.arange(0, 64)
    a = metile.load(A + r[:, None] * 64 + k[None, :])
    b = metile.load(B + k[:, None] * 8 + r[None, :])
    metile.store(C + r[:, None] * 8 + r[None, :], metile.dot(a, b))


def _examples():
    """The inputs: a GEMM launched with two stages and grouped programs, a vector add, a loop of products sharing
    one operand (launched with direct operands), and a product of one 8x8 piece."""
    x = np.zeros(1, np.float16)
    return {"gemm": attrs.evolve(gemm(), options=CompileOptions(num_stages=2, group_programs=4)),
            "vector_add": vector_add(), "scores": attrs.evolve(scores.trace(x, x, np.zeros(1, np.float32), 64),
                                  options=CompileOptions(direct_operands=1)),
            "row_times_column": row_times_column.trace(x, x, np.zeros(1, np.float32))}


def _moves():
    """The examples of `insert_conversions` beside the others: tiles read at elements other threads hold."""
    x = np.zeros(256, np.float32)
    return {"softmax_t": softmax_t.trace(x, x), "add_row": add_row.trace(x, x, x)}


def _products():
    """The examples of `use_tensor_ops` beside the others: f32 products with and without TF32, and each mode asked."""
    from test_tensor_ops import gemm as mm

    x, y = np.zeros(1, np.float32), np.zeros(1, np.float16)
    return {"gemm_tf32": mm.trace(x, x, x, 64, 64, 64, BM=64, BN=64, BK=32, PREC="tf32"),
            "gemm_ieee": mm.trace(x, x, x, 64, 64, 64, BM=64, BN=64, BK=32, PREC="ieee"),
            "gemm_whole": mm.trace(y, y, x, 64, 64, 64, BM=32, BN=32, BK=16, PREC="tf32",
                                   mma="tensor_ops_threadgroup"),
            "gemm_simdgroup": mm.trace(y, y, x, 64, 64, 64, BM=32, BN=32, BK=16, PREC="tf32", mma="simdgroup")}


def _staged():
    """The examples of `plan_staging` beside the others: operands too large to stage whole, and operands that fit
    whole but not beside the kernel's other scratch."""
    from test_staging_plan import big_product, product_and_exchange

    x, f = np.zeros(1, np.float16), np.zeros(1, np.float32)
    return {"big_product": big_product.trace(x, x, f),
            "product_and_exchange": product_and_exchange.trace(x, x, f, f, f, N=64)}


EXTRA = {"insert_conversions": ("`softmax_t`, `add_row` in tests/test_conversions.py", _moves),
         "plan_staging": ("`big_product`, `product_and_exchange` in tests/test_staging_plan.py", _staged),
         "use_tensor_ops": ("`gemm` in tests/test_tensor_ops.py", _products)}
"""Per pass, examples of its golden beyond the common ones (named in its header, and the function making them)."""

TARGETED = {"use_tensor_ops": metile.target("M5")}
"""Per pass, the target its examples are compiled for (other passes: the default target), named in its header."""


@pytest.mark.parametrize("index", range(len(PASSES)), ids=[p.__name__ for p in PASSES])
def test_what_the_pass_changes(index, request):
    p = PASSES[index]
    named, extra = EXTRA.get(p.__name__, ("", dict))
    parts = [f"// RUN: {p.__name__}\n// What the pass changes in each example (tests/test_ir_examples.py, and "
             f"`scores`, `row_times_column` in tests/test_pass_goldens.py{'; ' + named if named else ''}; empty: "
             "nothing);\n// regenerate with pytest --update-golden.\n"]
    target = TARGETED.get(p.__name__, DEFAULT_TARGET)
    if target != DEFAULT_TARGET:
        parts.append(f"// for the target {target.family}\n")
    for name, k in {**_examples(), **extra()}.items():
        before = run(PASSES[:index], k, target=target)
        after = p(before, PassContext(target))
        verify(after, after=p.__name__)
        text = pretty(after)
        assert parse(text) == after, "the pass's output does not round-trip through the printer"
        diff = difflib.unified_diff(pretty(before).splitlines(keepends=True), text.splitlines(keepends=True),
                                    f"{name} before", f"{name} after", n=1)
        parts.append("".join(diff))
    got = "".join(parts)
    path = GOLDEN / f"{p.__name__}.diff"
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.read_text() == got, f"{path} is stale: run pytest --update-golden and review the diff"


@pytest.mark.parametrize("index", range(len(LOWERING_PIPELINE)), ids=[p.__name__ for p in LOWERING_PIPELINE])
def test_what_the_lowering_makes(index, request):
    """The lowering passes rewrite the whole kernel, so their goldens hold what each makes of the small examples
    (SIMT IR with its symbolic scratch and rings, then Metal IR), which parses back to the same kernel."""
    p = LOWERING_PIPELINE[index]
    parts = [f"// RUN: {p.__name__}\n// What the pass makes of the examples `vector_add`, `gemm` (with two stages) "
             "of tests/test_ir_examples.py and `row_times_column`, `scores` of tests/test_pass_goldens.py;\n"
             "// regenerate with pytest --update-golden.\n"]
    examples = _examples()
    for name in ("vector_add", "row_times_column", "scores", "gemm"):
        before = run([*TILE_PIPELINE, *LOWERING_PIPELINE[:index]], examples[name])
        after = p(before)
        verify(after, after=p.__name__)
        text = pretty(after)
        assert parse(text) == after, "the pass's output does not round-trip through the printer"
        parts.append(f"// ---- {name}\n{text}")
    got = "".join(parts)
    path = GOLDEN / f"{p.__name__}.mtir"
    if request.config.getoption("--update-golden"):
        path.write_text(got)
    assert path.read_text() == got, f"{path} is stale: run pytest --update-golden and review it"
