"""What a pass is given beside the kernel: the target it compiles for and the analyses of the run it is part of.

`PassContext` is made once per run of a pipeline (`metile.rewrite.pipeline.run`) and handed to every pass. Its
`Analyses` computes each analysis of a kernel once and keeps it for the rest of the run, as MLIR's analysis
manager does: a kernel is immutable, so an analysis of it never goes stale, and passes that change only a
kernel's plan or schedule (keeping its parameters and statements, which `attrs.evolve` does) share the analyses
of its body. Nothing is kept between runs, and no module-level cache is consulted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs

from metile.ir.stmts import Kernel
from metile.ir.target import DEFAULT_TARGET, AppleTarget

T = TypeVar("T")


class Analyses:
    """Analyses of kernel bodies for one run: `of(analysis, k)` calls `analysis(k, self)` once per body (its
    parameters and statements, by identity) and returns the kept result after that."""

    __slots__ = ("_kept", "_last")

    def __init__(self):
        self._kept: dict[tuple, tuple[object, object, object]] = {}
        self._last: dict[Callable, tuple[object, object, object]] = {}   # per analysis, the entry kept last

    def of(self, analysis: Callable[[Kernel, Analyses], T], k: Kernel) -> T:
        params, body = k.params, k.body
        last = self._last.get(analysis)   # passes ask mostly of the body they were given, the one asked of last
        if last is not None and last[1] is body and last[0] is params:
            return last[2]
        key = (analysis, id(params), id(body))
        kept = self._kept.get(key)
        if kept is not None and kept[0] is params and kept[1] is body:
            self._last[analysis] = kept
            return kept[2]
        found = analysis(k, self)
        # holding the parameters and the body keeps their identities from being reused
        self._kept[key] = self._last[analysis] = (params, body, found)
        return found

    def kept(self, analysis: Callable[[Kernel, Analyses], T], k: Kernel) -> T | None:
        """What `of(analysis, k)` would return without computing anything: the result kept for `k`'s body, else
        None."""
        params, body = k.params, k.body
        last = self._last.get(analysis)
        if last is not None and last[1] is body and last[0] is params:
            return last[2]
        kept = self._kept.get((analysis, id(params), id(body)))
        return kept[2] if kept is not None and kept[0] is params and kept[1] is body else None

    def record(self, analysis: Callable[[Kernel, Analyses], T], k: Kernel, found: T) -> None:
        """Keep `found` as `analysis` of `k`, from the pass that built `k` and knows it without a walk: it must be
        what `analysis(k, self)` would compute (tests check the passes that record against the analysis)."""
        self._kept[(analysis, id(k.params), id(k.body))] = self._last[analysis] = (k.params, k.body, found)


@attrs.frozen
class PassContext:
    """The target and the run's analyses (see the module docstring)."""

    target: AppleTarget = DEFAULT_TARGET
    analyses: Analyses = attrs.field(factory=Analyses, eq=False)


__all__ = ["Analyses", "PassContext"]
