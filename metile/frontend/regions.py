"""What a runtime construct does with the compile-time containers its body changes (see
`metile.frontend.containers` for ownership and the write barrier).

- A runtime `if` traces both branches from the same state: after each branch, the containers it changed are put
  back as they were (`leave_branch`), and then every item that differs between the two branches becomes a result
  of the `If` (`merge_value`, which also merges the values of variables, item by item when both branches leave a
  list, tuple or dict of the same shape there).
- A runtime loop carries the items its body assigns, as it carries variables (`LoopSlots`): the first attempt at
  tracing the body finds which items change; the next attempts see a carried variable in each such item, until
  the items and their types settle; after the loop each item holds the loop's result.
- A `simdgroup_role` block hands the items it assigns to the other simdgroups, as it does variables
  (`hand_off`).

Only numbers and traced values can differ between paths; an item holding another compile-time value (a string, a
list) that a construct changes is refused, as a variable holding one is.
"""

from __future__ import annotations

from metile.frontend import semantic as sem
from metile.frontend.composites import is_composite
from metile.frontend.containers import holds_traced, own, restore, snapshot
from metile.frontend.errors import KernelTypeError
from metile.frontend.replay import same_var
from metile.ir.errors import Loc
from metile.ir.values import Const, Param, Value, Var


def label_of(tr, c) -> str:
    """The name of a variable holding container `c`, for the names of its items' IR values and for errors."""
    for name, v in tr.env.items():
        if v is c:
            return name
    return "item"


def _changeable(v) -> bool:
    return sem.is_ir(v) or sem.is_number(v)


# ---- runtime `if`

def leave_branch(region, entry: dict) -> dict:
    """After tracing one branch in `region`: the state each container it changed is left in, by id; the containers
    go back to their state before the `if`, which `entry` collects."""
    ends = {}
    for key, (c, state) in region.writes.items():
        entry.setdefault(key, (c, state))
        ends[key] = snapshot(c)
        restore(c, state)
    return ends


def merge_value(tr, name: str, what: str, a, b, loc: Loc, acc: tuple[list, list, list]):
    """The value after a runtime `if` of something holding `a` after one branch and `b` after the other: itself
    when they are the same, a container merged item by item when both are containers of one shape, else a result
    of the `If` (its values in the branches appended to `acc`: then-values, else-values, result variables)."""
    if a is b:
        return a
    ca, cb = a.__class__, b.__class__
    if (ca is list or ca is tuple) and ca is cb and len(a) == len(b):
        items = [merge_value(tr, name, f"item {i} of {what}", x, y, loc, acc) for i, (x, y) in enumerate(zip(a, b))]
        return own(tr, items) if ca is list else tuple(items)
    if ca is dict and cb is dict and a.keys() == b.keys():
        return own(tr, {k: merge_value(tr, name, f"item {k!r} of {what}", a[k], b[k], loc, acc) for k in a})
    if is_composite(a) and ca is cb and a.__metile_key__() == b.__metile_key__():   # a block pointer, part by part
        parts = zip(a.__metile_parts__(), b.__metile_parts__())
        return a.__metile_with_parts__(tuple(merge_value(tr, name, f"part {i} of {what}", x, y, loc, acc)
                                             for i, (x, y) in enumerate(parts)))
    if not isinstance(a, Value) and not isinstance(b, Value) and ca is cb \
            and not holds_traced(a) and not holds_traced(b):
        try:
            equal = bool(a == b)
        except (TypeError, ValueError):  # a numpy array's truth, say
            equal = False
        if equal:
            return a
    if not _changeable(a) or not _changeable(b):
        raise KernelTypeError(f"{what} holds compile-time values of kind {type(a).__name__} and {type(b).__name__} "
                              f"in the two branches of a runtime `if`", loc)
    t = sem.join_type(sem.type_of(a, loc), b, f"{what} after the runtime `if`", loc)
    then_ys, else_ys, results = acc
    then_ys.append(tr.coerce_to(a, t, loc))
    else_ys.append(tr.coerce_to(b, t, loc))
    var = Var(tr.fresh(name), t, loc=loc)
    results.append(var)
    return var


def merge_containers(tr, entry: dict, ends: list[dict], loc: Loc, acc: tuple[list, list, list]) -> None:
    """Set each container a branch changed to its items merged over the two branches (`merge_value`)."""
    for key, (c, start) in entry.items():
        then_c, else_c = (e.get(key, start) for e in ends)
        label = label_of(tr, c)
        if c.__class__ is list:
            c[:] = [merge_value(tr, label, f"item {i} of '{label}'", x, y, loc, acc)
                    for i, (x, y) in enumerate(zip(then_c, else_c))]
        else:
            merged = {k: merge_value(tr, label, f"item {k!r} of '{label}'", then_c[k], else_c[k], loc, acc)
                      for k in start}
            c.clear()
            c.update(merged)


# ---- runtime loops

class LoopSlots:
    """The items of containers built before a runtime loop that its body assigns: found attempt by attempt
    (`leave`), given a carried variable in each next attempt (`place`), and set to the loop's results after it
    (`finish`)."""

    __slots__ = ("containers", "inits", "labels", "loc", "order", "tr", "types", "vars", "what", "yields")

    def __init__(self, tr, what: str, loc: Loc):
        self.tr, self.what, self.loc = tr, what, loc
        self.containers: dict[int, tuple[object, object]] = {}  # by id: (container, its state before the loop)
        self.order: list[tuple[int, object]] = []  # the slots (container id, index or key), as found
        self.inits: dict = {}
        self.types: dict = {}
        self.vars: dict = {}
        self.yields: dict = {}
        self.labels: dict = {}

    def place(self) -> list[Var]:
        """Put a carried variable in each slot found so far; returns them in order."""
        out = []
        for slot in self.order:
            c = self.containers[slot[0]][0]
            var = same_var(self.vars.get(slot), self.tr.fresh(self.labels[slot]), self.types[slot], self.loc)
            self.vars[slot] = c[slot[1]] = var
            out.append(var)
        return out

    def leave(self, region) -> bool:
        """After an attempt at tracing the body in `region`: record what each slot holds at the end of the body,
        find the slots it assigned for the first time, widen the slots' types, and put the containers back as
        they were before the loop. True when a slot was found or a type widened (another attempt is needed)."""
        changed = False
        for cid, (c, entered) in region.writes.items():
            before = self.containers.setdefault(cid, (c, entered))[1]
            for k in (range(len(c)) if c.__class__ is list else list(c)):
                slot = (cid, k)
                if slot in self.types:
                    self.yields[slot] = c[k]
                elif c[k] is not entered[k]:
                    changed = True
                    self._found(slot, c, before[k], c[k])
        for slot in self.order:
            if slot[0] not in region.writes:  # not assigned this time: it keeps its carried value
                self.yields[slot] = self.vars.get(slot, self.inits[slot])
            y = self.yields[slot]
            if not _changeable(y):
                raise KernelTypeError(f"item {slot[1]!r} of '{self.labels[slot]}' is assigned a compile-time "
                                      f"{type(y).__name__} in {self.what}; only numbers and traced values can change "
                                      "across iterations", self.loc)
            t = sem.join_type(self.types[slot], y, f"item {slot[1]!r} of '{self.labels[slot]}' in {self.what}",
                              self.loc)
            if t != self.types[slot]:
                self.types[slot], changed = t, True
        for c, state in self.containers.values():
            restore(c, state)
        return changed

    def _found(self, slot, c, init, end) -> None:
        label = label_of(self.tr, c)
        if not _changeable(init):
            raise KernelTypeError(f"item {slot[1]!r} of '{label}' holds a compile-time {type(init).__name__} and is "
                                  f"assigned in {self.what}; only numbers and traced values can change across "
                                  "iterations", self.loc)
        self.order.append(slot)
        self.labels[slot] = label
        self.inits[slot] = init
        self.types[slot] = sem.type_of(init, self.loc)
        self.yields[slot] = end

    def carried(self) -> tuple[list, list]:
        """The slots' initial values and values at the end of the body, as values of their settled types."""
        coerce = self.tr.coerce_to
        return ([coerce(self.inits[s], self.types[s], self.loc) for s in self.order],
                [coerce(self.yields[s], self.types[s], self.loc) for s in self.order])

    def finish(self) -> list[Var]:
        """The loop's result variables for the slots, each put in its slot."""
        out = []
        for slot in self.order:
            var = Var(self.tr.fresh(self.labels[slot]), self.types[slot], loc=self.loc)
            self.containers[slot[0]][0][slot[1]] = var
            out.append(var)
        return out


# ---- simdgroup_role blocks

def hand_off(tr, name: str, v, loc: Loc, yields: list, results: list):
    """`v`, assigned in a role block, as the other simdgroups see it after the block: each traced value in it is a
    result of the block (containers are rebuilt around their results)."""
    cls = v.__class__
    if cls is list or cls is tuple:
        items = [hand_off(tr, name, x, loc, yields, results) for x in v]
        return own(tr, items) if cls is list else tuple(items)
    if cls is dict:
        return own(tr, {k: hand_off(tr, name, x, loc, yields, results) for k, x in v.items()})
    if not isinstance(v, Value) or isinstance(v, (Const, Param)):
        return v
    var = Var(tr.fresh(name), v.type, loc=loc)
    yields.append(v)
    results.append(var)
    return var


def hand_off_items(tr, region, loc: Loc, yields: list, results: list) -> None:
    """The items a role block assigned in containers built before it, handed off (`hand_off`)."""
    for c, entered in region.writes.values():
        label = label_of(tr, c)
        for k in (range(len(c)) if c.__class__ is list else list(c)):
            if c[k] is not entered[k]:
                c[k] = hand_off(tr, label, c[k], loc, yields, results)


__all__ = ["LoopSlots", "hand_off", "hand_off_items", "label_of", "leave_branch", "merge_containers", "merge_value"]
