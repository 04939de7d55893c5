"""`triton.tools.experimental_descriptor`: Triton's older host descriptors, CUDA tensor maps (`CUtensorMap`, the
128-byte format of NVIDIA's tensor memory accelerator) filled by the CUDA driver for `tl._experimental_descriptor_load`.
The module is served so that programs importing it (Triton's tutorial 09 does, using it on CUDA only) import on
metile; making such a descriptor raises `NotSupportedYetError`, since an Apple GPU has no tensor maps: pass a
`triton.tools.tensor_descriptor.TensorDescriptor` instead, or make the descriptor in the kernel with
`tl.make_tensor_descriptor`.
"""

from __future__ import annotations

from metile.triton.errors import not_yet


class TmaDescKernelParam:
    """A CUDA tensor map of a 1-D or 2-D tensor; refused on metile (see the module docstring)."""

    TMA_DESC_SIZE = 128

    def __init__(self, ptr, dims, block_dims, element_size):
        raise not_yet("triton.tools.experimental_descriptor (CUDA tensor maps)", None,
                      "use triton.tools.tensor_descriptor.TensorDescriptor or tl.make_tensor_descriptor")


def create_1d_tma_descriptor(ptr, dim, block_dim, element_size):
    return TmaDescKernelParam(ptr, [dim], [block_dim], element_size)


def create_2d_tma_descriptor(ptr, dim1, dim0, block_dim1, block_dim0, element_size):
    return TmaDescKernelParam(ptr, [dim1, dim0], [block_dim1, block_dim0], element_size)


__all__ = ["TmaDescKernelParam", "create_1d_tma_descriptor", "create_2d_tma_descriptor"]
