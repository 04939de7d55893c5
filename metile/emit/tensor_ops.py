"""The MSL of Metal 4 tensor operations: `TensorMatmul` as one MetalPerformancePrimitives `matmul2d`, `TensorHold` and
`TensorRelease` as a cooperative destination tensor declared and stored.

Each operand is a `tensor` over row-major memory of its address space, extents `(columns, rows)` (Metal's order:
index 0 is the contiguous one) and strides `{1, row stride}`, made where the operation runs; the descriptor is a
`constexpr` of the statement's static shape. A held destination is the `get_destination_cooperative_tensor` of the
same `matmul2d` (an object of its own beside it, `<name>_op`), for operand tensors of threadgroup memory,
declared mutable and zeroed element by element (`is_valid_element`); the runs that name it pass it as their
destination, and its release is its `store` to a tensor over memory. A kernel that uses them includes
`<metal_tensor>` and MetalPerformancePrimitives (`HELPERS["tensor_ops"]`), which makes it a Metal 4
(`-std=metal4.0`) source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from metile.emit.spell import msl_bool
from metile.ir.errors import assert_never
from metile.ir.metal import TensorHold, TensorMatmul, TensorRelease
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


def _descriptor(shape: tuple[int, int, int], relaxed: bool, accumulate: bool) -> str:
    m, n, k = shape
    mode = "multiply_accumulate" if accumulate else "multiply"
    return f"matmul2d_descriptor({m}, {n}, {k}, false, false, {msl_bool(relaxed)}, matmul2d_descriptor::mode::{mode})"


def _scope(simdgroups: int) -> str:
    return f"execution_simdgroups<{simdgroups}>" if simdgroups else "execution_simdgroup"


def matmul_lines(s: TensorMatmul, pad: str, text: Callable[[Value], str], helpers: set[str],
                 names: Mapping[str, str]) -> list[str]:
    """The lines of `s` at indentation `pad`, its operands written by `text` (a held destination by its C name in
    `names`); adds the headers it needs to `helpers`."""
    helpers.add("tensor_ops")
    m, n, k = s.shape
    inner = pad + "    "
    fence = [f"{inner}simdgroup_barrier(mem_flags::mem_threadgroup);"] if not (s.simdgroups or s.held) else []
    dst = names[s.held] if s.held else "tc"
    return [
        f"{pad}{{",
        *fence,
        f"{inner}constexpr auto desc = {_descriptor(s.shape, s.relaxed, s.accumulate)};",
        f"{inner}matmul2d<desc, {_scope(s.simdgroups)}> op;",
        f"{inner}auto ta = {_tensor(s.a, text, k, m, s.lda)};",
        f"{inner}auto tb = {_tensor(s.b, text, n, k, s.ldb)};",
        *([] if s.held else [f"{inner}auto tc = {_tensor(s.c, text, n, m, s.ldc)};"]),
        f"{inner}op.run(ta, tb, {dst});",
        *fence,
        f"{pad}}}",
    ]


def hold_lines(s: TensorHold, pad: str, helpers: set[str], names: Mapping[str, str]) -> list[str]:
    """The declaration of the held destination `s`, zeroed, at indentation `pad`."""
    helpers.add("tensor_ops")
    name, desc, op = (names[s.name + suffix] for suffix in ("", "_desc", "_op"))
    operand = f"tensor<threadgroup {s.dtype.msl}, {_EXTENTS}, tensor_inline>"
    return [
        f"{pad}constexpr auto {desc} = {_descriptor(s.shape, s.relaxed, True)};",
        f"{pad}matmul2d<{desc}, {_scope(s.simdgroups)}> {op};",
        f"{pad}auto {name} = {op}.get_destination_cooperative_tensor<{operand}, {operand}, float>();",
        f"{pad}for (uint16_t i = 0; i < {name}.get_capacity(); ++i) {{",
        f"{pad}    if ({name}.is_valid_element(i)) {{",
        f"{pad}        {name}[i] = 0.0f;",
        f"{pad}    }}",
        f"{pad}}}",
    ]


def release_lines(s: TensorRelease, pad: str, text: Callable[[Value], str], names: Mapping[str, str]) -> list[str]:
    """The store of the held destination `s` to its memory, at indentation `pad`."""
    m, n = s.shape
    fence = [f"{pad}simdgroup_barrier(mem_flags::mem_threadgroup);"] if not s.simdgroups else []
    return [*fence, f"{pad}{names[s.name]}.store({_tensor(s.ptr, text, n, m, s.ld)});", *fence]


TENSOR_STMTS = (TensorMatmul, TensorHold, TensorRelease)


def tensor_lines(s: TensorMatmul | TensorHold | TensorRelease, pad: str, text: Callable[[Value], str],
                 helpers: set[str], names: Mapping[str, str]) -> list[str]:
    """The lines of the tensor statement `s` (one of `TENSOR_STMTS`)."""
    match s:
        case TensorMatmul():
            return matmul_lines(s, pad, text, helpers, names)
        case TensorHold():
            return hold_lines(s, pad, helpers, names)
        case TensorRelease():
            return release_lines(s, pad, text, names)
        case _:
            assert_never(s)


__all__ = ["HELPERS", "TENSOR_STMTS", "hold_lines", "matmul_lines", "release_lines", "tensor_lines"]
