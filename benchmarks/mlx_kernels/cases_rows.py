"""Row-wise MLX kernels: softmax, normalization, unary, binary, reduce, arg_reduce, scan, sort, fp8."""

from __future__ import annotations

from benchmarks.mlx_kernels.common import Case

CASES: list[Case] = []
