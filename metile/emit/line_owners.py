"""`LineOwners`: the location each line of an emitted kernel body comes from (`metile.emit.msl.emit_located`).

A line belongs to the first location given for it: a named value's declaration is given its value's location when it
is written, and once a statement is written, each of its lines without an owner yet is given the statement's location,
so that a line belongs to the innermost located statement that wrote it. A loop's or an `if`'s lines are mostly those
of the statements inside it, all owned already: `nest` keeps the range of lines of each such statement, and the
statement around it skips those ranges instead of looking at each of their lines again.
"""

from __future__ import annotations

from metile.ir.errors import Loc


class LineOwners:
    """`owner`: index of a line -> the location it comes from; `owned`: ranges `(start, end)` of lines that all have an
    owner, in order (each a loop's or an `if`'s, holding the ranges of those inside it)."""

    __slots__ = ("owned", "owner")

    def __init__(self) -> None:
        self.owner: dict[int, Loc] = {}
        self.owned: list[tuple[int, int]] = []

    def own(self, start: int, end: int, loc: Loc) -> None:
        """Give the lines `start` to `end` (excluded) without an owner to `loc`: those of a statement with no statement
        inside."""
        owner = self.owner
        for i in range(start, end):
            owner.setdefault(i, loc)

    def nest(self, start: int, end: int, loc: Loc) -> None:
        """Give the lines `start` to `end` (excluded) without an owner to `loc`, skipping the ranges kept since `start`
        (whose lines all have owners), which the range `start` to `end` then replaces."""
        owner, owned, stop = self.owner, self.owned, end
        while owned and owned[-1][0] >= start:
            first, last = owned.pop()
            for i in range(last, stop):
                owner.setdefault(i, loc)
            stop = first
        for i in range(start, stop):
            owner.setdefault(i, loc)
        owned.append((start, end))


__all__ = ["LineOwners"]
