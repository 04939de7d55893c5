"""Device-memory reuse by replay: a `SegmentTrace` (the segments each threadgroup touched, in order) run through a
least-recently-used model of the last-level cache, threadgroups in dispatch order, to count the segments that come
from DRAM. `metile.profile.model.device_traffic` reads it; docs/performance.md ("Reuse") describes the method.

A GPU runs `concurrent` threadgroups at once (cores x resident threadgroups, `metile.profile.model.Occupancy`),
taking them in dispatch order (linear index, x fastest: what a grid swizzle reorders is which tiles those are, and
the trace records what each linear threadgroup touched, so a swizzle is honoured as it is). The replay gives each
of `concurrent` slots a threadgroup and runs the slots' next steps in turn (a step: the segments one touched between
two barriers); a slot whose threadgroup is done takes the next one in dispatch order. Every segment a step touches
is looked up in one LRU cache of `lines` segments: a miss is a segment moved from DRAM.
"""

from __future__ import annotations

from collections import OrderedDict

from metile.profile.counts import SegmentTrace


def replay(trace: SegmentTrace, concurrent: int, lines: int, order: list[int] | None = None) -> int:
    """The misses (segments moved from DRAM) of the threadgroups `order` (indices into the trace; all of them, in
    dispatch order, when None) run `concurrent` at a time over an LRU cache of `lines` segments."""
    order = list(range(len(trace.threadgroups))) if order is None else order
    key = (max(1, concurrent), max(0, lines), tuple(order))
    found = trace.memo.get(key)
    if found is None:
        found = trace.memo[key] = _run(trace, *key)
    return found


def _run(trace: SegmentTrace, concurrent: int, lines: int, order: tuple[int, ...]) -> int:
    if order == tuple(range(len(trace.threadgroups))) and trace.distinct() <= lines:
        return trace.distinct()      # nothing is ever evicted: every segment misses once
    cache: OrderedDict[int, None] = OrderedDict()
    waiting = iter(order)
    slots = [iter(trace.steps(k)) for k in (next(waiting, None) for _ in range(concurrent)) if k is not None]
    misses = 0
    while slots:
        running = []
        for steps in slots:
            step = next(steps, None)
            if step is None:             # done: the next threadgroup in dispatch order takes the slot
                k = next(waiting, None)
                if k is None:
                    continue
                steps = iter(trace.steps(k))
                step = next(steps, [])
            for seg in step:
                if seg in cache:
                    cache.move_to_end(seg)
                else:
                    misses += 1
                    cache[seg] = None
                    if len(cache) > lines:
                        cache.popitem(last=False)
            running.append(steps)
        slots = running
    return misses
