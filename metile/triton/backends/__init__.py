"""`triton.backends`: Triton's table of compiler backends (`backends`, name -> compiler and driver), which metile
leaves empty.

Triton's backends are plug-ins its own `compile()` drives (NVIDIA's, AMD's, a CPU one); metile compiles Triton
kernels itself and plugs nothing in. Programs read the table to ask what Triton can compile for: torch asks
whether `"cpu"` is in it before it lets TorchInductor generate Triton code for CPU tensors, and the answer must be
no (TorchInductor's generated Triton code is not what metile serves), so torch keeps its own C++ code generation.
"""

from __future__ import annotations

from metile.triton.backends.compiler import BaseBackend, GPUTarget, Language

backends: dict = {}

__all__ = ["BaseBackend", "GPUTarget", "Language", "backends"]
