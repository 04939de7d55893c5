"""Triton's host `TensorDescriptor` (`triton.tools.tensor_descriptor`) as a kernel argument, as Triton passes one to a
back end without tensor memory accelerators: its tensor, shape and strides become runtime arguments of their own (a
pointer, then one integer per dimension for the shape and for the strides) and its block shape a compile-time part
of the specialization; in the kernel the parameter is the descriptor `tl.make_tensor_descriptor` would make of them,
so `desc.load([m, n])` and `desc.store([m, n], x)` check every dimension and pad with zeros.

The rule is the Triton dialect's `composite` (`metile.frontend.composite_args`). A descriptor whose `padding` is
`"nan"` is refused at its parameter (metile's descriptors pad with zeros).
"""

from __future__ import annotations

import attrs

from metile.frontend.composite_args import Composite
from metile.ir.errors import Loc
from metile.triton.errors import not_yet
from metile.triton.impl_blocks import make_tensor_descriptor
from metile.triton.tools.tensor_descriptor import TensorDescriptor as HostDescriptor


@attrs.frozen
class DescriptorTemplate(Composite):
    """What a host descriptor argument contributes to the specialization: its rank and block shape."""

    block_shape: tuple[int, ...]
    loc: Loc | None = attrs.field(default=None, eq=False)

    @property
    def parts(self) -> tuple[str, ...]:
        n = len(self.block_shape)
        return ("base", *(f"shape{d}" for d in range(n)), *(f"stride{d}" for d in range(n)))

    def build(self, values: list, loc):
        n = len(self.block_shape)
        return make_tensor_descriptor(None, loc, values[0], list(values[1:1 + n]), list(values[1 + n:]),
                                      list(self.block_shape))


def host_descriptor(spec, value):
    """The template and parts of a host `TensorDescriptor` argument; None for any other argument."""
    if value.__class__ is not HostDescriptor:
        return None
    if value.padding != "zero":
        raise not_yet(f"a TensorDescriptor argument with padding={value.padding!r}", spec.loc,
                      "metile's descriptors pad with zeros")
    n = len(value.shape)
    parts = [("base", value.base)]
    parts += [(f"shape{d}", int(value.shape[d])) for d in range(n)]
    parts += [(f"stride{d}", int(value.strides[d])) for d in range(n)]
    return DescriptorTemplate(tuple(int(b) for b in value.block_shape), loc=spec.loc), parts


__all__ = ["DescriptorTemplate", "host_descriptor"]
