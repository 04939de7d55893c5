"""Arguments that stand for several: a dialect's `composite(spec, value)` rule says that a launch's argument (Triton's
host `TensorDescriptor`) is passed as runtime arguments of its own (its parts: a tensor, integers) plus a compile-time
template, and the kernel's parameter is the value the template builds from the parts' traced values.

- `expand_composites` (at specialization): the runtime arguments with each composite replaced by its parts, named
  `<parameter>_<part>`, and its template bound as a constexpr of the parameter's name, so that the specialization key
  holds the template (a frozen, hashable object) and the parts' types.
- `build_composites` (at tracing): the parameter bound to `template.build(parts, loc)`, the parts' traced values in
  the template's order.
A template has `parts` (the names of its parts, in order), `loc` and `build(values, loc)`.
"""

from __future__ import annotations

from metile.frontend.specialize import NO_DEFAULT, ParamSpec


class Composite:
    """The base of a dialect's templates: `parts` names the runtime parts, `build(values, loc)` makes the value."""

    parts: tuple[str, ...] = ()

    def build(self, values: list, loc):  # pragma: no cover - every template defines it
        raise NotImplementedError


def expand_composites(values: list, consts: dict, composite) -> list:
    """`values` (`[(spec, argument)]`) with each argument `composite` splits replaced by its parts, its template
    added to `consts` under the parameter's name."""
    out = []
    for s, v in values:
        found = composite(s, v)
        if found is None:
            out.append((s, v))
            continue
        template, parts = found
        consts[s.name] = template
        out += [(ParamSpec(f"{s.name}_{name}", False, NO_DEFAULT, s.loc), value) for name, value in parts]
    return out


def build_composites(env: dict, consts: dict) -> None:
    """Bind each parameter whose constexpr is a template to the value it builds from its parts in `env`."""
    for name, c in consts.items():
        if isinstance(c, Composite):
            env[name] = c.build([env[f"{name}_{part}"] for part in c.parts], c.loc)


__all__ = ["Composite", "build_composites", "expand_composites"]
