"""`triton.runtime.cache`: `triton_key()`, the string that names the compiler in cache keys (Triton hashes its own
sources; metile's is its version and the Triton API level it serves). metile keeps its own compile cache."""

from __future__ import annotations


def triton_key() -> str:
    """A key that changes when the compiler does."""
    import metile
    from metile import triton

    return f"metile-{metile.__version__}-triton-{triton.__version__}"


__all__ = ["triton_key"]
