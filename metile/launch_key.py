"""The launch cache's key of a runtime argument (`type_token`): what decides its IR type, read cheaply, so that a
repeated launch of `metile.kernel` finds its compiled entry with one dict lookup (see `metile.frontend.specialize.
arg_type` for the typing these tokens stand for).
"""

from __future__ import annotations

import sys

import numpy as np

from metile.frontend.specialize import MULTIPLE
from metile.ir.types import F32_OVERFLOW, from_numpy
from metile.metal.buffer import Buffer
from metile.metal.interop import DL_CPU

_I32_MIN, _I32_END = -(1 << 31), 1 << 31


_ARRAY_LIKE: dict[type, bool] = {np.ndarray: True}   # per class: does arg_type read it as an array?
_FOREIGN: dict[type, object] = {}   # per array class: an array of another library (DLPack, with a device)? (_TORCH)
_TORCH = "torch"   # what _FOREIGN holds for a class of torch tensors


def _is_array_like(cls: type) -> bool:
    found = _ARRAY_LIKE.get(cls)
    if found is None:
        foreign = hasattr(cls, "__dlpack_device__") and not issubclass(cls, Buffer)
        torch = sys.modules.get("torch")
        _FOREIGN[cls] = _TORCH if foreign and torch is not None and issubclass(cls, torch.Tensor) else foreign
        found = _ARRAY_LIKE[cls] = issubclass(cls, np.ndarray) or hasattr(cls, "__dlpack__") or (
            hasattr(cls, "dtype") and hasattr(cls, "nbytes") and hasattr(cls, "numpy"))
    return found


ONE_TOKEN = "=1"            # the token part of an integer argument equal to 1
MULTIPLE_TOKEN = "%16"      # the token part of an integer argument that is a multiple of 16 (`integer_facts`)


def type_token(v):
    """What decides the IR type of a runtime argument (see `metile.frontend.specialize.arg_type`), cheaply;
    None for values that must go through `arg_type` every time (ints beyond i32, unknown kinds)."""
    cls = v.__class__
    if cls is np.ndarray:
        return (cls, v.dtype)
    if cls is int:   # 1 and multiples of 16 are specialised on (`integer_facts`), so they have tokens of their own
        if not _I32_MIN <= v < _I32_END:
            return None
        return ONE_TOKEN if v == 1 else MULTIPLE_TOKEN if not v & 15 else cls
    if cls is float:
        return cls if -F32_OVERFLOW < v < F32_OVERFLOW else None  # beyond f32, infinities and NaN: checked every time
    if cls is bool:
        return cls
    if _ARRAY_LIKE.get(cls):       # a class seen before to be an array (a metile.Buffer, a torch tensor)
        dtype = getattr(v, "dtype", None)
        if dtype is None:
            return None
        foreign = _FOREIGN.get(cls)
        if not foreign:
            return (cls, dtype)
        # an array of another library: the device it is on decides how it binds (host memory, or a MTLBuffer); one
        # whose library names no device (an mkldnn torch tensor) goes through `arg_type`, which says why. A torch
        # tensor on the CPU says so far more cheaply than through DLPack (a layout without memory a kernel can index
        # then has the token of a dense one: the launch's binding refuses it at its parameter)
        if foreign is _TORCH and v.is_cpu:
            return (cls, dtype, DL_CPU)
        try:
            return (cls, dtype, v.__dlpack_device__()[0])
        except Exception:  # noqa: BLE001
            return None
    if isinstance(v, np.generic):  # a Metal type holds every value of its own; a wider one is checked every time
        if from_numpy(v.dtype) is None:
            return type_token(v.item())
        if isinstance(v, np.integer):
            return (cls, ONE_TOKEN) if v == 1 else (cls, MULTIPLE_TOKEN) if v % MULTIPLE == 0 else cls
        return cls
    if _is_array_like(cls):
        return type_token(v)
    return None


__all__ = ["MULTIPLE_TOKEN", "ONE_TOKEN", "type_token"]
