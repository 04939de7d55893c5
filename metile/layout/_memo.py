"""Memoisation for the pure layout functions: an LRU cache that falls back to a plain call when an
argument is unhashable (a list tiler, say). Layouts, swizzles and int tuples are all hashable."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def memo(fn: F) -> F:
    """``functools.lru_cache`` for a pure function; ``wrapper.cache_clear()`` empties it."""
    cached = functools.lru_cache(maxsize=1 << 14, typed=True)(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        try:
            return cached(*args)
        except TypeError:
            try:
                hash(args)
            except TypeError:
                return fn(*args)
            raise

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
