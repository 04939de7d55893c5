"""`AppleTarget`: what the compiler may assume of the Apple GPU a kernel is compiled for, as one frozen value.

The passes read the SIMD width, threadgroup memory, thread limits, vector and matrix shapes from the target they
are given (`metile.rewrite.context.PassContext.target`) instead of from constants of their own modules, as
tinygrad's `Renderer` carries its device's limits. Every Apple GPU family metile targets (Apple7, the M1, and
later) has the values of `DEFAULT_TARGET`: 32-wide simdgroups, 32 KiB of threadgroup memory and up to 1024
threads per threadgroup (Apple's Metal feature set tables), 8x8 simdgroup matrices of f32, f16 and bf16, and
16-byte aligned buffers (Metal's minimum buffer offset alignment for device memory reads as `float4`).
"""

from __future__ import annotations

import attrs

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
    - `family`: Apple's GPU family name; `tensor_ops`: whether Metal 4 tensor operations (M5) are available;
    - `staging_memory`: the most bytes a `dot`'s two operands staged whole may take before they are staged a chunk
      of k at a time (None: `threadgroup_memory`); `metile.rewrite.pipeline.run` lowers a kernel again with less
      when its threadgroup memory exceeds the target's.
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
    staging_memory: int | None = None


DEFAULT_TARGET = AppleTarget()

__all__ = ["DEFAULT_TARGET", "AppleTarget"]
