"""Compile-time Python containers in kernels: lists, tuples and dicts whose items are traced values or Python
values, built and changed while tracing (`docs/language.md` 7.5).

- **Ownership.** A list or dict that the kernel's own code builds (a display, a comprehension, `list()`, `dict()`,
  a slice, `+`, `.copy()`...) is registered with the tracer (`own`), with the region it was built in. Only those can
  be changed. A container that comes from outside the trace (a global, a closure variable, a constexpr, a default
  argument) is refused at the change: changing it would change what later traces see, and would carry this
  kernel's traced values into other kernels.
- **Regions.** The tracer is always in one region (`Region`): the kernel's body, or the body of a runtime construct
  (one branch of a runtime `if`, a runtime loop's condition and body, a `simdgroup_role` block). A container may be
  changed freely in the region it was built in. In a region nested inside that one, an item may be assigned: the
  write barrier (`write`) records the container's state at the entry of every region in between, and each
  construct then settles what changed (`metile.frontend.regions`: the branches of an `if` are merged item by item,
  a loop carries the items it assigns, a role block hands them to the other simdgroups). A change of the length
  (`append`, `pop`, `insert`, a new dict key...) there is refused, since the length would depend on the path taken
  when the kernel runs.
- **Values.** A traced expression stored in a container is bound to a name first (`keep`), as an assignment to a
  variable binds it, so that the IR reads like the source and the value is computed where it is stored.
- Their methods and the builtins that take them are in `metile.frontend.container_calls`; displays and
  comprehensions in `metile.frontend.displays`.
"""

from __future__ import annotations

from metile.frontend import semantic as sem
from metile.frontend.errors import ConstexprRequiredError, KernelTypeError
from metile.ir.errors import Loc
from metile.ir.values import Const, Param, Value, Var

MUTABLE = (list, dict)
MAX_ITEMS = 100_000
"""The most items a container built while tracing may get from one comprehension or conversion."""


class Region:
    """A stretch of the trace with one run-time path: the kernel's body or one body of a runtime construct.
    `writes` holds, per container built outside it and changed inside it, the container and its state when the
    region was entered."""

    __slots__ = ("active", "parent", "what", "writes")

    def __init__(self, parent: Region | None, what: str):
        self.parent, self.what, self.active = parent, what, True
        self.writes: dict[int, tuple[object, object]] = {}


class Entered:
    """`with Entered(tracer, what) as region:` traces its block in a new region inside the current one (`what`
    names the construct in errors: "the tile_range loop at line 12")."""

    __slots__ = ("region", "tracer", "what")

    def __init__(self, tracer, what: str):
        self.tracer, self.what = tracer, what

    def __enter__(self) -> Region:
        tr = self.tracer
        self.region = tr.region = Region(tr.region, self.what)
        return self.region

    def __exit__(self, *exc) -> None:
        self.region.active = False
        self.tracer.region = self.region.parent


def snapshot(c):
    """The items of a list or dict, as a new list or dict (shallow)."""
    return list(c) if c.__class__ is list else dict(c)


def restore(c, state) -> None:
    """Put the items of `state` (a `snapshot`) back into `c`."""
    if c.__class__ is list:
        c[:] = state
    else:
        c.clear()
        c.update(state)


def own(tr, c):
    """Register `c`, a list or dict the kernel's code has just built, as changeable in the current region."""
    if c.__class__ in MUTABLE:
        tr.owned[id(c)] = (c, tr.region)
    return c


def kind(c) -> str:
    return {list: "list", dict: "dict", tuple: "tuple"}.get(c.__class__, type(c).__name__)


_ANY = object()


def write(tr, c, loc: Loc, what: str, *, resize: bool, value=_ANY) -> None:
    """The write barrier: `c` is about to be changed by `what` (a change of its length when `resize`; `value` is
    the item stored, when one is). Refuses a container the kernel did not build, and, in a runtime construct
    entered after `c` was built, a change of length or an item that is a compile-time value other than a number;
    otherwise records `c`'s state in each region between the current one and `c`'s own."""
    entry = tr.owned.get(id(c))
    if entry is None or entry[0] is not c:
        raise KernelTypeError(
            f"{what}: this {kind(c)} was not built by this kernel's code (it comes from a global, a closure variable, "
            f"a constexpr or a default argument); changing it would change it for later traces and other kernels. "
            f"Copy it first ({'list(x)' if c.__class__ is list else 'dict(x)'}) and change the copy", loc)
    home = entry[1]
    while not home.active:  # built in a construct already left: it lives on where that construct was
        home = home.parent
    r = tr.region
    if r is home:
        return
    if resize:
        raise KernelTypeError(
            f"{what} changes the length of a {kind(c)} built outside {r.what}: its length would then depend on the "
            f"path the kernel takes when it runs. Build it with one item per value before, and assign its items "
            f"(x[i] = ...) inside", loc)
    if value is not _ANY and not (isinstance(value, Value) or sem.is_number(value)):
        raise KernelTypeError(
            f"{what}: a compile-time {type(value).__name__} cannot be stored in a {kind(c)} built outside {r.what}: "
            "the items it changes there must be numbers or traced values, which can differ from path to path", loc)
    key = id(c)
    while r is not home:
        if key not in r.writes:
            r.writes[key] = (c, snapshot(c))
        r = r.parent


def holds_traced(v) -> bool:
    """Whether `v` is a traced value or a container holding one (at any depth)."""
    cls = v.__class__
    if cls is tuple or cls is list:
        return any(holds_traced(x) for x in v)
    if cls is dict:
        return any(holds_traced(x) for x in v.values())
    return isinstance(v, Value)


def keep(tr, v, loc: Loc, hint: str | None = None):
    """`v` as stored in a container: a traced expression is bound to a fresh name first."""
    if isinstance(v, Value) and not isinstance(v, (Var, Param, Const)):
        return tr.bind(v, hint or tr.hint or "item", loc)
    return v


def check_key(c, key, loc: Loc) -> None:
    """Refuse a traced value (or a slice or tuple holding one) as the index or key of a compile-time container."""
    parts = (key.start, key.stop, key.step) if key.__class__ is slice else (key,)
    if any(holds_traced(p) for p in parts):
        raise KernelTypeError(f"a compile-time {kind(c)} can only be indexed by a compile-time value (a constexpr or a "
                              "number), not by a traced value: select with metile.where instead", loc)


def items_of(v, what: str, loc: Loc) -> list:
    """The items of a compile-time iterable, at most `MAX_ITEMS`; a traced value is refused."""
    if isinstance(v, Value):
        raise ConstexprRequiredError(f"{what} needs a compile-time iterable (a list, tuple, dict or range), not a "
                                     f"traced {v.type}", loc)
    try:
        it = iter(v)
    except TypeError:
        raise KernelTypeError(f"{what}: cannot iterate over {type(v).__name__}", loc) from None
    out = []
    for x in it:
        if len(out) >= MAX_ITEMS:
            raise ConstexprRequiredError(f"{what}: more than {MAX_ITEMS} items", loc)
        out.append(x)
    return out


def set_item(tr, c, key, value, loc: Loc, name: str | None) -> None:
    """`c[key] = value` for a compile-time container `c` (`name` is the variable it was read from, if any)."""
    if c.__class__ not in MUTABLE:
        raise KernelTypeError(f"cannot assign to an item of a {kind(c)}: only the lists and dicts a kernel builds can "
                              "be changed", loc)
    check_key(c, key, loc)
    what = f"assigning to an item of {f'{name!r}' if name else f'a {kind(c)}'}"
    if c.__class__ is dict:
        try:
            hash(key)
        except TypeError as e:
            raise KernelTypeError(f"{what}: this key cannot be used: {e}", loc) from None
        write(tr, c, loc, what, resize=key not in c, value=value)
        c[key] = keep(tr, value, loc, name)
        return
    if key.__class__ is slice:
        new = list(c)
        try:
            new[key] = items_of(value, what, loc)
        except (TypeError, ValueError) as e:
            raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
        write(tr, c, loc, what, resize=len(new) != len(c))
        c[:] = [keep(tr, v, loc, name) for v in new]
        return
    try:
        c[key]
    except (IndexError, TypeError) as e:
        raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
    write(tr, c, loc, what, resize=False, value=value)
    c[key] = keep(tr, value, loc, name)


__all__ = ["MAX_ITEMS", "MUTABLE", "Entered", "Region", "check_key", "holds_traced", "items_of", "keep", "kind",
           "own", "restore", "set_item", "snapshot", "write"]
