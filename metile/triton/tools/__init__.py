"""`triton.tools` served by metile: `triton.tools.tensor_descriptor` (the host's `TensorDescriptor`, which Triton's
tutorials 06 and 09 import) and `triton.tools.experimental_descriptor` (CUDA tensor maps: importable, refused when
made)."""

from __future__ import annotations
