"""`triton.tools.tensor_descriptor.TensorDescriptor`: Triton's host-side description of a tensor's blocks (a base
tensor, its shape and strides, and the block shape kernels load), as Triton 3.4 defines it.

A `TensorDescriptor` given to a kernel is passed as its tensor, shape and strides, its block shape compiled in
(`metile.triton.host_descriptors`): in the kernel it is the descriptor `tl.make_tensor_descriptor` makes of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TensorDescriptor:
    base: Any
    shape: list[int]
    strides: list[int]
    block_shape: list[int]
    padding: str = "zero"

    def __post_init__(self):
        rank = len(self.shape)
        if len(self.strides) != rank or len(self.block_shape) != rank:
            raise ValueError(f"shape, strides and block_shape must have the same rank ({rank}): "
                             f"{list(self.strides)}, {list(self.block_shape)}")
        if rank and self.strides[-1] != 1:
            raise ValueError("the last dimension of a tensor descriptor must be contiguous (stride 1)")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"padding must be 'zero' or 'nan', not {self.padding!r}")

    @staticmethod
    def from_tensor(tensor: Any, block_shape: list[int], padding: str = "zero") -> TensorDescriptor:
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)


__all__ = ["TensorDescriptor"]
