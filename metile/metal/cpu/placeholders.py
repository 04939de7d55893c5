"""What the CPU device binds to a `[[buffer(i)]]` parameter that gets no memory from a dispatch.

- A parameter a function constant switched off (`[[buffer(i), function_constant(b)]]` with `b` false) does not
  exist on Metal, but the kernel's C++ still has it, and code the GPU never runs may still load from it on the CPU
  (MLX's steel GEMM reads `addmm_params->alpha` whatever `use_out_source` says; on the GPU the value is dead). It
  points at read-only zeros: such loads read 0, and a write faults.
- A parameter a dispatch passes `None` for (Metal lets a dispatch leave unbound an index the kernel does not access)
  points at memory that cannot be accessed at all: any access faults.

Each is a private anonymous mapping of `SLOT` bytes (address space only: untouched pages take no memory) made once
per device, kind and index and reused, so a fault within `SLOT` bytes of its start names the parameter (see
`metile.metal.cpu.faults.BufferRange.note`).
"""

from __future__ import annotations

import mmap
import threading

from metile.metal.cpu.faults import BufferRange
from metile.metal.cpu.runtime_api import ffi
from metile.metal.msl_signature import Param

SLOT = 1 << 20
_NO_ACCESS = 0   # PROT_NONE (the mmap module names only PROT_READ, PROT_WRITE and PROT_EXEC)


class Placeholders:
    """One device's placeholder mappings, made on first use."""

    def __init__(self):
        self._maps: dict[tuple[bool, int], tuple[mmap.mmap, object]] = {}
        self._lock = threading.Lock()

    def _pointer(self, readable: bool, index: int):
        key = (readable, index)
        with self._lock:
            got = self._maps.get(key)
            if got is None:
                m = mmap.mmap(-1, SLOT, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ if readable else _NO_ACCESS)
                got = self._maps[key] = (m, ffi.cast("void*", ffi.from_buffer(m)))
        return got[1]

    def switched_off(self, p: Param):
        """The pointer for `p`, removed by its function constant, and its fault-report range."""
        ptr = self._pointer(True, p.index)
        note = (f"was removed by function constant `{p.function_constant}` (false in this specialisation): "
                "reads of it give 0 and it cannot be written")
        return ptr, _range(p, ptr, note)

    def unbound(self, p: Param):
        """The pointer for `p`, which the dispatch left unbound (None), and its fault-report range."""
        ptr = self._pointer(False, p.index)
        note = (f"was not bound (args[{p.index}] is None): a dispatch may leave unbound only a buffer the kernel "
                "does not access")
        return ptr, _range(p, ptr, note)


def _range(p: Param, ptr, note: str) -> BufferRange:
    address = int(ffi.cast("uintptr_t", ptr))
    return BufferRange(p.index, p.name, address, 0, address, address + SLOT, note=note)
