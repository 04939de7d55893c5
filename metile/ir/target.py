"""`AppleTarget`: what the compiler may assume of the Apple GPU a kernel is compiled for, as one frozen value.

The passes read the SIMD width, threadgroup memory, thread limits, vector and matrix shapes from the target they
are given (`metile.rewrite.context.PassContext.target`) instead of from constants of their own modules, as
tinygrad's `Renderer` carries its device's limits. Every Apple GPU family metile targets (Apple7, the M1, and
later) has the values of `DEFAULT_TARGET`: 32-wide simdgroups, 32 KiB of threadgroup memory and up to 1024
threads per threadgroup (Apple's Metal feature set tables), 8x8 simdgroup matrices of f32, f16 and bf16, and
16-byte aligned buffers (Metal's minimum buffer offset alignment for device memory reads as `float4`).

The named targets (`TARGETS`, `target_named`) are the GPU families of Apple's M-series chips: M1 (apple7), M2
(apple8), M3 and M4 (apple9), and M5 (apple10), the first with Metal 4 tensor operations run by neural accelerators
in each GPU core (`tensor_ops`). Only `family` and `tensor_ops` differ between them for the compiler.
"""

from __future__ import annotations

import attrs

from metile.ir.errors import MetileError
from metile.ir.types import DType


@attrs.frozen
class AppleTarget:
    """The GPU a kernel is compiled for (see the module docstring).

    - `simd_width`: threads per simdgroup; `max_threads`: threads per threadgroup;
    - `threadgroup_memory`: bytes of threadgroup memory a threadgroup may allocate;
    - `vector_width`: elements of a vector access (`float4`, `half4`); `buffer_alignment`: the bytes every buffer's
      start is a multiple of;
    - `matrix`: the simdgroup matrix shape (rows, columns, inner) and `matrix_types` the element types it holds;
    - `default_simdgroups`: the simdgroups of a program with `dot` unless the launch asks; `max_auto_threads`: the
      most threads chosen for a tile kernel; `max_elements_per_thread`: the most elements of a tile one thread
      holds;
    - `family`: Apple's GPU family name; `tensor_ops`: whether Metal 4 tensor operations (M5) are available.
    """

    family: str = "apple7"
    simd_width: int = 32
    max_threads: int = 1024
    threadgroup_memory: int = 32 * 1024
    vector_width: int = 4
    buffer_alignment: int = 16
    matrix: tuple[int, int, int] = (8, 8, 8)
    matrix_types: frozenset[DType] = frozenset({DType.F32, DType.F16, DType.BF16})
    default_simdgroups: int = 4
    max_auto_threads: int = 256
    max_elements_per_thread: int = 256
    tensor_ops: bool = False


DEFAULT_TARGET = AppleTarget()

TARGETS: dict[str, AppleTarget] = {
    "M1": DEFAULT_TARGET,
    "M2": AppleTarget(family="apple8"),
    "M3": AppleTarget(family="apple9"),
    "M4": AppleTarget(family="apple9"),
    "M5": AppleTarget(family="apple10", tensor_ops=True),
}
"""The targets by chip name; `target_named` also takes the family names (`"apple7"` ... `"apple10"`)."""

_FAMILIES = {t.family: t for t in TARGETS.values()}


def target_named(name: str) -> AppleTarget | None:
    """The target called `name` (a chip, `"M5"`, or a family, `"apple10"`; any case), or None for no such target."""
    if not isinstance(name, str):
        return None
    key = name.strip()
    return TARGETS.get(key.upper()) or _FAMILIES.get(key.lower())


def target_names() -> str:
    """The names `target_named` knows, for messages."""
    return ", ".join([*TARGETS, *_FAMILIES])


class TargetError(MetileError):
    """A name that names no GPU metile compiles for."""


def target(name: str) -> AppleTarget:
    """`metile.target("M5")`: the target of that chip or GPU family (`target_named`), for a launch's `target=`;
    a `TargetError` lists the names known."""
    found = target_named(name)
    if found is None:
        raise TargetError(f"{name!r} names no GPU metile compiles for; known: {target_names()}")
    return found


__all__ = ["DEFAULT_TARGET", "TARGETS", "AppleTarget", "TargetError", "target", "target_named", "target_names"]
