"""MSL helper functions of simdgroup matrices that Metal's library lacks: `mt_matrix_of(x, y)`, a matrix built from a
lane's two elements."""

from __future__ import annotations

HELPERS = {"mt_matrix_of": """template <typename T>
inline simdgroup_matrix<T, 8, 8> mt_matrix_of(T x, T y) {
    simdgroup_matrix<T, 8, 8> m;
    m.thread_elements()[0] = x;
    m.thread_elements()[1] = y;
    return m;
}"""}

__all__ = ["HELPERS"]
