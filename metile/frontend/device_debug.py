"""Printing and assertions on the device: `device_print` and `device_assert` statements (`docs/language.md` 7.6),
shared by metile's language (`metile.device_print`, `metile.device_assert`, `assert` on a traced condition) and
Triton's (`tl.device_print`, `print`, `tl.device_assert`, `assert`).

The values of a print are tiles broadcast to one shape (scalars stay scalars); 8-bit floats print as f32. The prefix
is Triton's: with values after it, it ends in ": " and, longer than two characters, starts with a space, so a line
reads `pid (0, 0, 0) idx (3) x: 1.500000`. An assertion's condition is a bool (another type means `!= 0`), true
where `mask` (broadcast) is false.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.errors import KernelTypeError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp, UnOp
from metile.ir.stmts import DeviceAssert, DevicePrint
from metile.ir.types import DType, PtrType
from metile.ir.values import Binary, Compare, Unary, Value


def triton_prefix(prefix: str, has_values: bool) -> str:
    if has_values and not prefix.endswith(" "):
        prefix += " "
    if has_values and not prefix.endswith(": "):
        prefix = prefix[:-1] + ": "
    if len(prefix) > 2 and not prefix.startswith(" "):
        prefix = " " + prefix
    return prefix


def device_print(tr, loc: Loc, prefix, values, hex_, what: str = "device_print") -> None:
    if not isinstance(prefix, str):
        raise KernelTypeError(f"{what}: the prefix must be a string, not {type(prefix).__name__}", loc)
    if not prefix.isascii() or not prefix.isprintable():
        raise KernelTypeError(f"{what}: the prefix must be printable ASCII text, not {prefix!r}", loc)
    vs = []
    for v in values:
        if sem.is_number(v):
            v = sem.to_ir(v, loc)
        if not isinstance(v, Value) or isinstance(v.type, PtrType):
            kind = v.type if isinstance(v, Value) else type(v).__name__
            raise KernelTypeError(f"{what}: can print numbers and tensors, not {kind}", loc)
        if v.type.dtype.storage_only:
            v = sem.cast(v, DType.F32, loc)
        vs.append(v)
    shape: tuple[int, ...] = ()
    for v in vs:
        shape = sem.broadcast_shape(shape, v.type.shape, what, loc)
    vs = [tr.bind(sem.broadcast_to(v, shape, loc), "printed", loc) if v.type.shape and v.type.shape != shape else v
          for v in vs]
    tr.emit(DevicePrint(triton_prefix(prefix, bool(vs)), vs, bool(hex_), loc=loc))


def device_assert(tr, loc: Loc, cond, msg, mask=None, what: str = "device_assert") -> None:
    if not isinstance(msg, str):
        raise KernelTypeError(f"{what}: the message must be a string, not {type(msg).__name__}", loc)
    if not isinstance(cond, Value):
        if not cond:   # a compile-time false condition: the assertion fails on every thread
            cond = sem.const(False, DType.BOOL, loc)
        else:
            return
    if isinstance(cond.type, PtrType):
        raise KernelTypeError(f"{what}: the condition must be a number or a tensor, not {cond.type}", loc)
    if cond.type.dtype is not DType.BOOL:
        cond = Compare(CmpOp.NE, cond, sem.coerce(0, cond.type.dtype, cond.type.shape, loc), loc=loc)
    if mask is not None:
        if not isinstance(mask, Value) or isinstance(mask.type, PtrType) or mask.type.dtype is not DType.BOOL:
            raise KernelTypeError(f"{what}: the mask must be a bool tensor", loc)
        shape = sem.broadcast_shape(cond.type.shape, mask.type.shape, what, loc)
        cond = Binary(BinOp.OR, sem.broadcast_to(cond, shape, loc),
                      Unary(UnOp.NOT, sem.broadcast_to(mask, shape, loc), loc=loc), loc=loc)
    tr.emit(DeviceAssert(tr.bind(cond, "asserted", loc), msg, loc=loc))


def print_fn(tr, loc, prefix, values, hex):  # noqa: A002 - Triton's parameter name
    device_print(tr, loc, prefix, values, hex, "metile.device_print")


def assert_fn(tr, loc, cond, msg, mask):
    device_assert(tr, loc, cond, msg, mask, "metile.device_assert")


LIBRARY = {L.device_print: print_fn, L.device_assert: assert_fn}

__all__ = ["LIBRARY", "device_assert", "device_print", "triton_prefix"]
