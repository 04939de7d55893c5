"""The Apple GPU device: a cffi binding to a small Objective-C shim over Metal (`shim.h`, `shim.m`).

`device.py` holds `MetalDevice`; `binding.py` builds and loads the shim (macOS only); `compile.py`
turns MSL into Metal libraries (AOT with `xcrun metal` when present, else JIT); `stream.py` batches
launches into command buffers; `launch.py` prepares arguments; `memory.py` wraps `MTLBuffer`s.
"""

from __future__ import annotations
