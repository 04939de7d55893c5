"""Printer goldens and parser round trips on hand-written texts.

Goldens live in `tests/golden/print/<case>.mtir`: `//` comment lines (a `// RUN:` header naming no
pass, since these check the printer itself), then the canonical text of the example kernel
`tests/test_ir_examples.py::<case>`. `pytest --update-golden` rewrites
them for review.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ir_examples import EXAMPLES, gemm, softmax, vector_add

from metile.ir import (
    Binary,
    BinOp,
    DType,
    For,
    Kernel,
    Let,
    Loc,
    ParseError,
    Stage,
    TileType,
    Var,
    parse,
    pretty,
    verify,
)

GOLDEN = Path(__file__).parent / "golden" / "print"
CASES = ["vector_add", "softmax", "gemm", "thread_level", "shapes", "metal_vector_add", "metal_row_sum", "metal_gemm"]


def _header(case: str) -> str:
    return (f"// RUN:\n// The printer's text of tests/test_ir_examples.py::{case}; "
            "regenerate with pytest --update-golden.\n")


def _update(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.mark.parametrize("case", CASES)
def test_golden(case, request):
    path = GOLDEN / f"{case}.mtir"
    k = EXAMPLES[case]()
    text = pretty(k)
    if _update(request):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_header(case) + text)
    stored = path.read_text()
    body = "".join(line for line in stored.splitlines(keepends=True) if not line.startswith("//"))
    assert text == body, f"{path} is stale: run pytest --update-golden and review the diff"
    assert parse(stored, file=str(path)) == k
    assert pretty(parse(stored)) == body


HAND_WRITTEN = [
    """\
kernel @scale(%X: ptr<f32, device>, %Out: ptr<f32, device>, %N: i32) stage tile meta {BLOCK = 4} {
  %0 = program_id 0 : i32
  %1 = const 4 : i32
  %2 = mul %0, %1 : i32
  %3 = broadcast %2 : tile<4xi32>
  %4 = arange 0, 4 : tile<4xi32>
  %offs = add %3, %4 : tile<4xi32>
  %5 = broadcast %N : tile<4xi32>
  %mask = lt %offs, %5 : tile<4xbool>
  %6 = broadcast %X : tile<4xptr<f32, device>>
  %7 = addptr %6, %offs : tile<4xptr<f32, device>>
  %x = load %7, mask %mask : tile<4xf32>
  %8 = broadcast %Out : tile<4xptr<f32, device>>
  %9 = addptr %8, %offs : tile<4xptr<f32, device>>
  %10 = const 2.5 : f32
  %11 = full %10 : tile<4xf32>
  %12 = mul %x, %11 : tile<4xf32>
  store %9, %12, mask %mask
}
""",
    """\
kernel @collatz(%Out: ptr<i32, device>, %N: i32) stage metal {
  %0 = const 0 : i32
  while iter_args(%n: i32 = %N, %steps: i32 = %0) -> (%last: i32, %count: i32) {
    %1 = const 1 : i32
    %2 = gt %n, %1 : bool
    condition %2
  } do {
    %3 = const 2 : i32
    %4 = rem %n, %3 : i32
    %5 = eq %4, %0 : bool
    if %5 -> (%next: i32) {
      %6 = truncdiv %n, %3 : i32
      yield %6
    } else {
      %7 = const 3 : i32
      %8 = mul %n, %7 : i32
      %9 = add %8, %1 : i32
      yield %9
    }
    %10 = add %steps, %1 : i32
    yield %next, %10
  }
  store %Out, %count
}
""",
    """\
kernel @located(%X: ptr<f32, device> loc("k.py":1:11)) stage tile loc("k.py":1:0) {
  %0 = const 0 : i32 loc("k.py":2:8)
  %1 = const 1 : i32
  for %i: i32 = %0 to %1 step %1 loc("k.py":3:4) {
    barrier device_and_threadgroup loc("k.py":4:8)
  }
}
""",
]


@pytest.mark.parametrize("text", HAND_WRITTEN, ids=["tile", "metal_while", "locs"])
def test_hand_written_texts_are_canonical(text):
    k = parse(text)
    verify(k, after="parse")
    assert pretty(k, locs="loc(" in text) == text


def test_comments_and_spacing_are_ignored():
    messy = """// RUN: canonicalize
    kernel   @scale ( %X : ptr< f32 ,device>,%Out: ptr<f32, device>, %N: i32 ) stage tile meta { BLOCK=4 } {
      // the body
      %0 = program_id 0 : i32   // a comment at the end of a line
    }"""
    assert pretty(parse(messy)) == (
        "kernel @scale(%X: ptr<f32, device>, %Out: ptr<f32, device>, %N: i32) stage tile meta {BLOCK = 4} {\n}\n")


def test_shared_subtrees_print_once_per_open_body():
    k = softmax()
    text = pretty(k)
    assert text.count("= program_id 0") == 1
    assert text.count("= const -inf : f32") == 1  # defined before the first loop, reused in the others
    assert text.count("= arange 0, 256") == 3  # defined inside each loop body, not visible after it


def test_locations_print_only_when_asked():
    k = vector_add()
    assert "loc(" not in pretty(k)
    located = pretty(k, locs=True)
    assert 'store %11, %12, mask %mask loc("vector_add.py":9:4)' in located
    assert parse(located).body[-1].loc == Loc("vector_add.py", 9, 4)


def test_meta_keys_are_sorted():
    k = gemm()
    assert "meta {BLOCK_K = 16, BLOCK_M = 32, BLOCK_N = 32}" in pretty(k).splitlines()[0]


def test_ill_typed_let_spells_its_declared_type_and_round_trips():
    a = Var("a", TileType(DType.I32))
    k = Kernel("k", Stage.TILE, [], [Let(a, a.__class__("b", TileType(DType.I32)))], {})
    bad = Kernel("k", Stage.TILE, [], [Let(Var("x", TileType(DType.F32)), Binary(BinOp.ADD, a, a))], {})
    assert "%x: f32 = add %a, %a : i32" in pretty(bad)
    assert pretty(k).splitlines()[1] == "  %a = %b : i32"


def test_pretty_of_a_statement_and_a_value():
    k = softmax()
    loop = next(s for s in k.body if isinstance(s, For))
    assert pretty(loop).startswith("%0 = const 0 : i32\n%1 = const 256 : i32\n")
    assert pretty(loop.yields[0]).splitlines()[-1] == "%1 = max %m, %0 : f32"
    assert pretty(loop.index) == "%i0\n"


PARSE_ERRORS = [
    ("kernel @k() stage tile {\n  %0 = frobnicate 1 : i32\n}\n", "unknown operation 'frobnicate'", 2),
    ("kernel @k() stage tile {\n  %0 = add %1, %1 : i32\n}\n", "%1 is not defined here", 2),
    ("kernel @k() stage tile {\n  %0 = const 1 : i32\n  %1 = add %0, %0 : f32\n}\n",
     "type mismatch: add of these operands has type i32, the text says f32", 3),
    ("kernel @k() stage tile {\n  %0 = const 1 : f64\n}\n", "expected a type", 2),
    ("kernel @k() stage tile {\n  %0 = const 1.5 : i32\n}\n", "'1.5' is not a i32 constant", 2),
    ("kernel @k() stage tile {\n}\nkernel", "expected the end of the text", 3),
    ("kernel @k() stage gpu {\n}\n", "expected a stage", 1),
    ("kernel @k() stage tile {\n  %0 = const 1 : i32\n  %0 = const 2 : i32\n}\n", "%0 is defined twice", 3),
    ("kernel @k() stage tile {\n  while {\n  } do {\n  }\n}\n", "expected 'condition %c'", 3),
    ("kernel @k() stage tile {\n  jump\n}\n", "expected a statement, not 'jump'", 2),
    ("kernel @k() stage tile {\n  %0 = const 1 : tile<4xi32>\n}\n", "a constant has a scalar type", 2),
    ("kernel @k(%X: ptr<f32, private>) stage tile {\n}\n", "expected an address space", 1),
]


@pytest.mark.parametrize(("text", "message", "line"), PARSE_ERRORS, ids=[m for _, m, _ in PARSE_ERRORS])
def test_parse_errors_point_at_the_text(text, message, line):
    with pytest.raises(ParseError) as info:
        parse(text, file="bad.mtir")
    err = info.value
    assert message in err.message
    assert err.loc.file == "bad.mtir" and err.loc.line == line
    assert str(err).startswith(f"bad.mtir:{line}:")
    assert "^" in str(err)  # the source line and a caret
