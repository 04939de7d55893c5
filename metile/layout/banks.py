"""A threadgroup-memory bank model: how many extra cycles one simdgroup access costs under a layout."""

from __future__ import annotations

from typing import Any

from .layout import size


def bank_conflicts(
    layout: Any, *, element_bytes: int = 4, banks: int = 32, bank_bytes: int = 4, lanes: int = 32, offset: int = 0
) -> int:
    """Extra cycles for one step in which lane ``i`` accesses element ``offset + layout(i)``, for ``i < lanes``.

    ``layout`` is a Layout or a swizzled ``ComposedLayout`` giving element offsets; the access covers lanes
    ``0 .. min(lanes, size(layout)) - 1``. Memory is a sequence of ``bank_bytes``-byte words and word ``w``
    lives in bank ``w % banks``. An element touches every word its ``element_bytes`` bytes overlap. A bank
    serves one distinct word per cycle, and lanes that touch the same word share it (broadcast), so the
    step takes ``max over banks of (distinct words in that bank)`` cycles. Returns that maximum minus one:
    0 means conflict-free. Stride-1 floats give 0; stride-32 floats give 31 (all 32 words in one bank).
    ``offset`` moves every access by that many elements (it matters when elements share words).
    """
    if lanes < 1:
        raise ValueError(f"bank_conflicts: lanes must be >= 1, got {lanes}")
    offsets = [offset + layout(lane) for lane in range(min(lanes, size(layout)))]
    for lane, at in enumerate(offsets):
        if at < 0:
            raise ValueError(f"bank_conflicts: lane {lane} accesses the negative offset {at} of {layout}")
    return access_conflicts(offsets, element_bytes=element_bytes, banks=banks, bank_bytes=bank_bytes)


def access_conflicts(offsets, *, element_bytes: int = 4, banks: int = 32, bank_bytes: int = 4) -> int:
    """`bank_conflicts` of one step in which lane `i` accesses element `offsets[i]` (non-negative)."""
    for name, v in (("element_bytes", element_bytes), ("banks", banks), ("bank_bytes", bank_bytes)):
        if v < 1:
            raise ValueError(f"bank_conflicts: {name} must be >= 1, got {v}")
    if bank_bytes % element_bytes == 0:   # each element within one word
        words = {at * element_bytes // bank_bytes for at in offsets}
    else:
        words = {w for at in offsets for w in range(at * element_bytes // bank_bytes,
                                                    (at * element_bytes + element_bytes - 1) // bank_bytes + 1)}
    per_bank = [0] * banks
    for w in words:
        per_bank[w % banks] += 1
    return max(per_bank) - 1
