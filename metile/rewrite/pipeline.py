"""The default lowering pipeline, Tile IR -> Metal IR, and `run` to apply a list of passes.

A pass is a plain, named function `Kernel -> Kernel`; a pipeline is a list of passes that users may
copy and edit. `run` verifies the kernel after each pass, so a broken pass is named in the error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metile.ir.stmts import Kernel
from metile.ir.verify import verify
from metile.rewrite.lower_elementwise import lower_elementwise

Pass = Callable[[Kernel], Kernel]

DEFAULT_PIPELINE: list[Pass] = [lower_elementwise]


def run(passes: Sequence[Pass], k: Kernel, *, verify_each: bool = True,
        on_pass: Callable[[str, Kernel], None] | None = None) -> Kernel:
    """`k` after each of `passes` in order; verified after each when `verify_each`, and reported to
    `on_pass(name, kernel)` when given."""
    for p in passes:
        k = p(k)
        if verify_each:
            verify(k, after=p.__name__)
        if on_pass is not None:
            on_pass(p.__name__, k)
    return k


__all__ = ["DEFAULT_PIPELINE", "Pass", "run"]
