"""What a Metal device can do with Metal 4 tensor ops: whether they compile there, and whether they are accelerated.

- "Tensor ops compile": an MSL 4 kernel using `<metal_tensor>` and MetalPerformancePrimitives compiles on the
  device (`mts_device_probe_tensor_ops`). That is one Metal compile, so the answer is kept in a small file in
  metile's cache directory, keyed by the system's build and the device's name: a new macOS build asks again.
- "Accelerated": the GPU runs them on Neural Accelerators. metile decides it as MLX decides whether to use its
  tensor-op ("NAX") kernels (mlx/backend/metal/device.cpp, is_nax_available): macOS 26.2 or later and a GPU
  architecture of generation 17 (M5) or later, 18 for an architecture name ending in "p" (the generation is the
  two digits before the name's last letter: "applegpu_g17s" is 17). Before that, tensor ops compile but run on
  the shader cores.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from metile.metal.cpu.toolchain import sha256_hex

ACCELERATED_FROM_MACOS = (26, 2)


def gpu_generation(architecture: str) -> tuple[int, str]:
    """(generation, last letter) of an architecture name ("applegpu_g17s" -> (17, "s")); (0, "") if it has none."""
    m = re.search(r"(\d\d)([A-Za-z])$", architecture or "")
    return (int(m.group(1)), m.group(2)) if m else (0, "")


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:2]) or (0,)


def tensor_ops_accelerated(architecture: str, os_version: str | None) -> bool:
    """Whether tensor ops run on Neural Accelerators on a GPU of `architecture` under macOS `os_version`."""
    generation, letter = gpu_generation(architecture)
    needed = 18 if letter == "p" else 17
    return generation >= needed and _version(os_version) >= ACCELERATED_FROM_MACOS


def probe_path(cache_dir: Path, os_build: str, device_name: str) -> Path:
    key = sha256_hex("tensor-ops-probe", os_build, device_name)
    return cache_dir / "metal" / "tensor_ops_probe" / f"{key[:24]}.txt"


def cached_tensor_probe(cache_dir: Path, os_build: str, device_name: str, probe: Callable[[], bool]) -> bool:
    """`probe()`'s answer for this OS build and device, from the cache when it has one; without a known build
    (`os_build` empty) it is asked every time."""
    if not os_build:
        return probe()
    path = probe_path(cache_dir, os_build, device_name)
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    if text in ("0", "1"):
        return text == "1"
    answer = probe()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text("1\n" if answer else "0\n")
        os.replace(part, path)
    except OSError:
        pass   # a cache that cannot be written only costs a compile next time
    return answer
