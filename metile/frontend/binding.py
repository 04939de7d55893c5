"""Binding a call's arguments to the parameters of a `metile.language` function (`bind_values`, `bind_args`): the
functions' signatures are the language's, read once per function; one with `*values` (`device_print`) binds them as
a tuple."""

from __future__ import annotations

import inspect

from metile.frontend.errors import KernelArgumentError
from metile.ir.errors import Loc

_MISSING = object()
# Per function of the language (`metile.language`, a fixed set), its parameters' positions, their defaults and the
# positions of the required ones: a cache.
_BINDERS: dict[object, tuple[dict[str, int], tuple[object, ...], tuple[int, ...]]] = {}
_VARIADIC = ((), (), ())   # the binder of a function with `*args` (bound by `inspect.Signature.bind`)


def _binder(fn) -> tuple[dict[str, int], tuple[object, ...], tuple[int, ...]]:
    """The position of each parameter of the language function `fn`, their defaults (`_MISSING` when required) and
    the positions of the required ones."""
    found = _BINDERS.get(fn)
    if found is None:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):   # `device_print(prefix, *values)`
            _BINDERS[fn] = _VARIADIC
            return _VARIADIC
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
        defaults = tuple(_MISSING if p.default is inspect.Parameter.empty else p.default for p in params)
        found = _BINDERS[fn] = ({p.name: i for i, p in enumerate(params)}, defaults,
                                tuple(i for i, d in enumerate(defaults) if d is _MISSING))
    return found


def _bind_error(fn, args, kwargs, loc: Loc) -> KernelArgumentError:
    """The error of a call that does not fit `fn`'s signature, worded by `inspect.Signature.bind`."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        return KernelArgumentError(f"metile.{fn.__name__}(): {e}", loc)
    raise AssertionError(f"metile.{fn.__name__}() accepts arguments its binder refused")


def bind_values(fn, args, kwargs, loc: Loc) -> list:
    """The arguments of a call to the language function `fn`, one per parameter in order (defaults filled
    in), as `inspect.Signature.bind` would bind them; a `KernelArgumentError` when they do not fit."""
    found = _BINDERS.get(fn) or _binder(fn)
    if found is _VARIADIC:
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            raise _bind_error(fn, args, kwargs, loc) from None
        bound.apply_defaults()
        return list(bound.arguments.values())
    index, defaults, required = found
    n = len(args)
    if n == len(defaults) and not kwargs:
        return args
    if n > len(defaults):
        raise _bind_error(fn, args, kwargs, loc)
    out = [*args, *defaults[n:]]
    for k, v in kwargs.items():
        i = index.get(k, -1)
        if i < n:  # unknown, or given by position too
            raise _bind_error(fn, args, kwargs, loc)
        out[i] = v
    if required and required[-1] >= n:
        for i in required:   # a required parameter not given (by position or by keyword)
            if i >= n and out[i] is _MISSING:
                raise _bind_error(fn, args, kwargs, loc)
    return out


def bind_args(fn, args, kwargs, loc: Loc) -> dict:
    """`bind_values` by parameter name."""
    return dict(zip(_binder(fn)[0], bind_values(fn, args, kwargs, loc)))


__all__ = ["bind_args", "bind_values"]
