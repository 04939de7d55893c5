"""The methods of compile-time lists, dicts and tuples in kernels, and the builtins that take containers
(`metile.frontend.containers` owns the containers themselves).

- Methods (`BoundMethod`, `call_method`): `append extend insert pop clear copy index count remove reverse sort` of
  lists, `get keys values items pop popitem setdefault update copy clear` of dicts, `index count` of tuples. Each
  change goes through the write barrier (`containers.write`), a change of length declared as one.
- Builtins (`container_builtin`): `list`, `dict`, `sorted`, `reversed`, `zip`, `enumerate`, `sum`, `any`, `all`
  and the one-iterable forms of `min` and `max` (element-wise over traced items, as `min(a, b)` is). `zip`,
  `enumerate`, `reversed` and dict views give tuples, not iterators: a value read twice (a loop body is traced
  more than once) must give the same items.
- Anything that would compare traced values with Python's `==` or `<` (`index`, `count`, `remove`, `sort`,
  `sorted`) is refused when the items are traced, since the answer is only known when the kernel runs; `any` and
  `all` need compile-time truth values.
"""

from __future__ import annotations

import builtins

from metile.frontend import semantic as sem
from metile.frontend.containers import check_key, holds_traced, items_of, keep, kind, own, write
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelArgumentError,
    KernelTypeError,
    RuntimeConditionError,
)
from metile.ir.errors import Loc
from metile.ir.values import Value


def _compared(items, what: str, loc: Loc) -> None:
    """Refuse an operation that compares items by Python's `==` or `<` when some are traced."""
    if any(holds_traced(x) for x in items):
        raise KernelTypeError(f"{what} compares items, and some are traced values whose comparison is only known when "
                              "the kernel runs: compare them with metile.where, or index by position", loc)


# ---- methods

class BoundMethod:
    """`container.name`: a method of a compile-time list, dict or tuple; `hint` names the values it stores."""

    __slots__ = ("container", "hint", "name")

    def __init__(self, container, name: str, hint: str | None):
        self.container, self.name, self.hint = container, name, hint


_LIST_METHODS = ("append", "extend", "insert", "pop", "clear", "copy", "index", "count", "remove", "reverse", "sort")
_DICT_METHODS = ("get", "keys", "values", "items", "pop", "popitem", "setdefault", "update", "copy", "clear")
_TUPLE_METHODS = ("index", "count")
METHODS = {list: _LIST_METHODS, dict: _DICT_METHODS, tuple: _TUPLE_METHODS}


def method(base, attr: str, hint: str | None, loc: Loc) -> BoundMethod:
    """`base.attr` for a list, dict or tuple `base`."""
    names = METHODS[base.__class__]
    if attr not in names:
        raise KernelTypeError(f"a {kind(base)} in a kernel has no method '{attr}' (it has {', '.join(names)})", loc)
    return BoundMethod(base, attr, hint)


def _args(m: BoundMethod, args: list, kwargs: dict, lo: int, hi: int, loc: Loc, keywords=()) -> None:
    if not lo <= len(args) <= hi or any(k not in keywords for k in kwargs):
        raise KernelArgumentError(f"{kind(m.container)}.{m.name}() got the wrong arguments", loc)


def call_method(tr, m: BoundMethod, args: list, kwargs: dict, loc: Loc):
    """The call `m(*args, **kwargs)`."""
    c, name = m.container, m.name
    what = f"{kind(c)}.{name}()"
    if c.__class__ is dict:
        return _dict_method(tr, m, c, name, args, kwargs, what, loc)
    if name in ("index", "count", "remove"):
        _args(m, args, kwargs, 1, 3 if name == "index" else 1, loc)
        _compared([*c, args[0]], what, loc)
        if name == "remove":
            write(tr, c, loc, what, resize=True)
        try:
            return getattr(c, name)(*args)
        except ValueError as e:
            raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
    if name == "copy":
        _args(m, args, kwargs, 0, 0, loc)
        return own(tr, list(c))
    if name == "append":
        _args(m, args, kwargs, 1, 1, loc)
        write(tr, c, loc, what, resize=True)
        c.append(keep(tr, args[0], loc, m.hint))
        return None
    if name == "extend":
        _args(m, args, kwargs, 1, 1, loc)
        items = items_of(args[0], what, loc)
        if items:
            write(tr, c, loc, what, resize=True)
            c.extend(keep(tr, x, loc, m.hint) for x in items)
        return None
    if name == "insert":
        _args(m, args, kwargs, 2, 2, loc)
        check_key(c, args[0], loc)
        write(tr, c, loc, what, resize=True)
        c.insert(args[0], keep(tr, args[1], loc, m.hint))
        return None
    if name == "pop":
        _args(m, args, kwargs, 0, 1, loc)
        if args:
            check_key(c, args[0], loc)
        write(tr, c, loc, what, resize=True)
        try:
            return c.pop(*args)
        except (IndexError, TypeError) as e:
            raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
    if name == "clear":
        _args(m, args, kwargs, 0, 0, loc)
        if c:
            write(tr, c, loc, what, resize=True)
            c.clear()
        return None
    if name == "reverse":
        _args(m, args, kwargs, 0, 0, loc)
        for item in c:  # every item may move
            write(tr, c, loc, what, resize=False, value=item)
        c.reverse()
        return None
    # sort
    _args(m, args, kwargs, 0, 0, loc, keywords=("reverse",))
    _compared(c, what, loc)
    for item in c:
        write(tr, c, loc, what, resize=False, value=item)
    try:
        c.sort(reverse=bool(kwargs.get("reverse", False)))
    except TypeError as e:
        raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
    return None


def _dict_method(tr, m, c: dict, name: str, args, kwargs, what: str, loc: Loc):
    if name in ("keys", "values", "items"):
        _args(m, args, kwargs, 0, 0, loc)
        return tuple(getattr(c, name)())
    if name == "copy":
        _args(m, args, kwargs, 0, 0, loc)
        return own(tr, dict(c))
    if name == "get":
        _args(m, args, kwargs, 1, 2, loc)
        check_key(c, args[0], loc)
        return c.get(*args)
    if name in ("pop", "popitem", "clear"):
        _args(m, args, kwargs, 0, 2 if name == "pop" else 0, loc)
        if name == "pop" and not args:
            raise KernelArgumentError("dict.pop() needs a key", loc)
        if args:
            check_key(c, args[0], loc)
        if name != "pop" or args[0] in c:
            write(tr, c, loc, what, resize=bool(c))
        try:
            return c.clear() if name == "clear" else getattr(c, name)(*args)
        except KeyError as e:
            raise KernelTypeError(f"{what} failed at compile time: no key {e}", loc) from None
    if name == "setdefault":
        _args(m, args, kwargs, 1, 2, loc)
        check_key(c, args[0], loc)
        if args[0] not in c:
            write(tr, c, loc, what, resize=True)
            c[args[0]] = keep(tr, args[1] if len(args) > 1 else None, loc, m.hint)
        return c[args[0]]
    # update
    _args(m, args, kwargs, 0, 1, loc, keywords=tuple(kwargs))
    new = dict(args[0]) if args else {}
    new.update(kwargs)
    for k in new:
        check_key(c, k, loc)
    if new:
        write(tr, c, loc, what, resize=any(k not in c for k in new))
        c.update((k, keep(tr, v, loc, m.hint)) for k, v in new.items())
    return None


# ---- builtins on containers

def _fold(op: str, items: list, start, what: str, loc: Loc):
    if not items and start is _NOTHING:
        raise KernelTypeError(f"{what} of an empty sequence", loc)
    out = items[0] if start is _NOTHING else start
    for x in items if start is not _NOTHING else items[1:]:
        out = sem.binary(op, out, x, loc)
    return out


_NOTHING = object()


def container_builtin(tr, fn, args: list, kwargs: dict, loc: Loc):
    """A call of `list`, `dict`, `sorted`, `reversed`, `zip`, `enumerate`, `sum`, `any`, `all`, or of `min`/`max`
    with one iterable; `NotImplemented` for other calls."""
    name = getattr(fn, "__name__", "")
    what = f"{name}()"
    if fn is builtins.list or fn is builtins.sorted or fn is builtins.reversed:
        if len(args) > 1 or any(k not in ("reverse",) for k in kwargs) or (kwargs and fn is not builtins.sorted):
            raise KernelArgumentError(f"{what} got the wrong arguments", loc)
        items = items_of(args[0], what, loc) if args else []
        if fn is builtins.reversed:
            return tuple(reversed(items))
        if fn is builtins.sorted:
            _compared(items, what, loc)
            try:
                items.sort(reverse=bool(kwargs.get("reverse", False)))
            except TypeError as e:
                raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
        return own(tr, items)
    if fn is builtins.dict:
        if len(args) > 1:
            raise KernelArgumentError(f"{what} takes at most one positional argument", loc)
        try:
            out = dict(args[0]) if args else {}
        except (TypeError, ValueError) as e:
            raise KernelTypeError(f"{what} failed at compile time: {e}", loc) from None
        out.update(kwargs)
        for k in out:
            check_key(out, k, loc)
        return own(tr, out)
    if fn is builtins.zip:
        if any(k != "strict" for k in kwargs):
            raise KernelArgumentError(f"{what} got the wrong arguments", loc)
        seqs = [items_of(a, what, loc) for a in args]
        if kwargs.get("strict") and len({len(s) for s in seqs}) > 1:
            raise KernelTypeError(f"{what}: the sequences have different lengths {[len(s) for s in seqs]}", loc)
        return tuple(zip(*seqs))
    if fn is builtins.enumerate:
        if not 1 <= len(args) + len(kwargs) <= 2 or any(k != "start" for k in kwargs) or len(args) > 2:
            raise KernelArgumentError(f"{what} got the wrong arguments", loc)
        start = kwargs.get("start", args[1] if len(args) > 1 else 0)
        if isinstance(start, Value):
            raise ConstexprRequiredError(f"{what}: the start must be a compile-time int", loc)
        return tuple(enumerate(items_of(args[0], what, loc), start))
    if fn is builtins.sum:
        if not 1 <= len(args) <= 2 or any(k != "start" for k in kwargs):
            raise KernelArgumentError(f"{what} got the wrong arguments", loc)
        start = kwargs.get("start", args[1] if len(args) > 1 else 0)
        return _fold("add", items_of(args[0], what, loc), start, what, loc)
    if fn is builtins.any or fn is builtins.all:
        if len(args) != 1 or kwargs:
            raise KernelArgumentError(f"{what} takes one iterable", loc)
        items = items_of(args[0], what, loc)
        if any(isinstance(x, Value) for x in items):
            raise RuntimeConditionError(f"{what} needs compile-time truth values; reduce traced masks with metile.max "
                                        "(any) or metile.min (all) instead", loc)
        return fn(items)
    if (fn is builtins.min or fn is builtins.max) and len(args) == 1 and not kwargs \
            and not isinstance(args[0], Value):
        items = items_of(args[0], what, loc)
        if any(isinstance(x, Value) for x in items):  # element-wise, as min(a, b) of traced values
            return _fold(name, items, _NOTHING, what, loc)
        return NotImplemented
    return NotImplemented


CONTAINER_BUILTINS = frozenset({builtins.list, builtins.dict, builtins.sorted, builtins.reversed, builtins.zip,
                                builtins.enumerate, builtins.sum, builtins.any, builtins.all})

CONTAINER_BUILTINS = frozenset({builtins.list, builtins.dict, builtins.sorted, builtins.reversed, builtins.zip,
                                builtins.enumerate, builtins.sum, builtins.any, builtins.all})

__all__ = ["CONTAINER_BUILTINS", "METHODS", "BoundMethod", "call_method", "container_builtin", "method"]
