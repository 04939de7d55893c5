"""The MSL of Metal 4 tensor operations: `TensorMatmul` as one MetalPerformancePrimitives `matmul2d`.

Each operand is a `tensor` over row-major memory of its address space, extents `(columns, rows)` (Metal's order:
index 0 is the contiguous one) and strides `{1, row stride}`, made where the operation runs; the descriptor is a
`constexpr` of the statement's static shape. A kernel that uses them includes `<metal_tensor>` and
MetalPerformancePrimitives (`HELPERS["tensor_ops"]`), which makes it a Metal 4 (`-std=metal4.0`) source.
"""

from __future__ import annotations

from collections.abc import Callable

from metile.emit.spell import msl_bool
from metile.ir.metal import TensorMatmul
from metile.ir.types import PtrType
from metile.ir.values import Value

HELPERS: dict[str, str] = {
    "tensor_ops": "#include <metal_tensor>\n#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
                  "using namespace mpp::tensor_ops;",
}

_EXTENTS = "dextents<int32_t, 2>"


def _tensor(ptr: Value, text: Callable[[Value], str], cols: int, rows: int, ld: Value) -> str:
    t: PtrType = ptr.type
    element = f"{t.space._value_} {t.dtype.msl}"
    return (f"tensor<{element}, {_EXTENTS}, tensor_inline>({text(ptr)}, {_EXTENTS}({cols}, {rows}), "
            f"array<int32_t, 2>{{1, int32_t({text(ld)})}})")


def matmul_lines(s: TensorMatmul, pad: str, text: Callable[[Value], str], helpers: set[str]) -> list[str]:
    """The lines of `s` at indentation `pad`, its operands written by `text`; adds the headers it needs to
    `helpers`."""
    helpers.add("tensor_ops")
    m, n, k = s.shape
    mode = "multiply_accumulate" if s.accumulate else "multiply"
    scope = f"execution_simdgroups<{s.simdgroups}>" if s.simdgroups else "execution_simdgroup"
    inner = pad + "    "
    fence = [f"{inner}simdgroup_barrier(mem_flags::mem_threadgroup);"] if not s.simdgroups else []
    return [
        f"{pad}{{",
        *fence,
        f"{inner}constexpr auto desc = matmul2d_descriptor({m}, {n}, {k}, false, false, {msl_bool(s.relaxed)}, "
        f"matmul2d_descriptor::mode::{mode});",
        f"{inner}matmul2d<desc, {scope}> op;",
        f"{inner}auto ta = {_tensor(s.a, text, k, m, s.lda)};",
        f"{inner}auto tb = {_tensor(s.b, text, n, k, s.ldb)};",
        f"{inner}auto tc = {_tensor(s.c, text, n, m, s.ldc)};",
        f"{inner}op.run(ta, tb, tc);",
        *fence,
        f"{pad}}}",
    ]


__all__ = ["HELPERS", "matmul_lines"]
