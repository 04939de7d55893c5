"""Composite values a kernel holds: Python objects made of traced values and compile-time parts (Triton's block
pointers and tensor descriptors), which runtime loops carry part by part.

A composite's class defines `__metile_parts__()` (its traced values, in a fixed order), `__metile_with_parts__(parts)`
(the same object with those values replaced) and `__metile_key__()` (everything else, which must not change inside
a loop). `CarriedParts` turns a loop's carried names into one carried name per traced part (`name_part0`,
`name_part1`...) and rebuilds the composites from the loop's variables.
"""

from __future__ import annotations

from metile.frontend.errors import KernelTypeError
from metile.ir.errors import Loc


def is_composite(v) -> bool:
    return hasattr(type(v), "__metile_parts__")


class CarriedParts:
    """The carried names of a loop (`names`: composites split into their parts), read from and rebuilt into an
    environment."""

    def __init__(self, env: dict, names: list[str], loc: Loc | None):
        self.given, self.loc = names, loc
        self.templates = {n: env[n] for n in names if is_composite(env[n])}
        self.names = names if not self.templates else [part for n in names for part in (
            [f"{n}_part{i}" for i in range(len(self.templates[n].__metile_parts__()))] if n in self.templates else [n])]

    def flat(self, env: dict) -> list:
        """The carried values of `env`, composites part by part."""
        if not self.templates:   # the common case: no composite
            return [env[n] for n in self.given]
        out = []
        for n in self.given:
            v = env[n]
            template = self.templates.get(n)
            if template is None:
                out.append(v)
                continue
            if type(v) is not type(template) or v.__metile_key__() != template.__metile_key__():
                raise KernelTypeError(f"loop-carried variable '{n}' holds a {type(template).__name__} whose "
                                      "compile-time parts (shape, block shape, order) change in the loop; only its "
                                      "traced values (offsets, base) may", self.loc)
            out += v.__metile_parts__()
        return out

    def rebuilt(self, values) -> dict:
        """Per given name, its value made of `values` (one per entry of `names`)."""
        if not self.templates:
            return dict(zip(self.given, values))
        values, out = list(values), {}
        for n in self.given:
            template = self.templates.get(n)
            if template is None:
                out[n] = values.pop(0)
                continue
            k = len(template.__metile_parts__())
            out[n], values = template.__metile_with_parts__(tuple(values[:k])), values[k:]
        return out


__all__ = ["CarriedParts", "is_composite"]
