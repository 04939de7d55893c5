"""The MLX kernel corpus: MLX's Metal kernels compiled as shipped, dispatched as MLX does, compared with numpy.

`CASES` lists every case in order: the row-wise families (`cases_rows`, `cases_reduce`, and `cases_source` for
kernels defined only in MLX's `.metal` files), then the matrix and attention families (`cases_matmul`, when
present), the quantized family (`cases_quantized`, when present) and the NAX kernels of Metal 4 tensor ops
(`cases_nax`, `cases_nax_gemm` for split-K, gather and segmented NAX GEMM, and `cases_nax_quantized` for the
quantized gather products).
"""

from __future__ import annotations

import importlib

from benchmarks.mlx_kernels import cases_reduce, cases_rows, cases_source
from benchmarks.mlx_kernels.common import Case, CorpusUnavailable, Mismatch, Result

__all__ = ["CASES", "Case", "CorpusUnavailable", "Mismatch", "Result"]


def _optional_cases(module: str) -> list[Case]:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:   # the module exists but something it imports is missing: that is a bug
            raise
        return []
    return list(getattr(mod, "CASES", []))


CASES: list[Case] = [*cases_rows.CASES, *cases_reduce.CASES, *cases_source.CASES,
                     *_optional_cases("benchmarks.mlx_kernels.cases_matmul"),
                     *_optional_cases("benchmarks.mlx_kernels.cases_quantized"),
                     *_optional_cases("benchmarks.mlx_kernels.cases_nax"),
                     *_optional_cases("benchmarks.mlx_kernels.cases_nax_gemm"),
                     *_optional_cases("benchmarks.mlx_kernels.cases_nax_quantized")]
