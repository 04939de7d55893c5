"""`device_print` and `device_assert` statements as MSL: calls of `metile_device_print` (printf's format) and
`metile_device_assert(cond, message)`.

The CPU device's header defines both (a line on standard output; a fault at the line of the call). Metal has no
printf and no assertions, so the MSL defines them as nothing unless `METILE_DEVICE_DEBUG` is defined (`HELPERS`):
on an Apple GPU the statements compile out, as Triton's assertions do without its debug mode.
"""

from __future__ import annotations

from metile.ir.stmts import DeviceAssert, DevicePrint
from metile.ir.types import DType

HELPERS = {"metile_debug": "#ifndef METILE_DEVICE_DEBUG\n#define metile_device_print(...) ((void)0)\n"
                           "#define metile_device_assert(cond, msg) ((void)0)\n#endif"}

# Per dtype: the printf conversion, the hexadecimal one, and the MSL type the value is converted to.
_FORMATS = {
    DType.F32: ("%f", "%a", "float"), DType.F16: ("%f", "%a", "float"), DType.BF16: ("%f", "%a", "float"),
    DType.I8: ("%d", "0x%x", "int"), DType.I16: ("%d", "0x%x", "int"), DType.I32: ("%d", "0x%x", "int"),
    DType.U8: ("%u", "0x%x", "uint"), DType.U16: ("%u", "0x%x", "uint"), DType.U32: ("%u", "0x%x", "uint"),
    DType.I64: ("%ld", "0x%lx", "long"), DType.U64: ("%lu", "0x%lx", "ulong"), DType.BOOL: ("%d", "%d", "int"),
    DType.F8E4M3: ("%u", "0x%x", "uint"), DType.F8E5M2: ("%u", "0x%x", "uint"),
}


def c_string(text: str, *, percent: bool = False) -> str:
    """`text` as a C string literal (UTF-8 bytes; `%` doubled for a printf format when `percent`)."""
    out = []
    for b in text.encode():
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "%" and percent:
            out.append("%%")
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def print_call(s: DevicePrint, expr) -> str:
    """`metile_device_print(...);` for the Metal IR statement `s` (`expr(v)` spells a value)."""
    pid, coords = s.index[:3], s.index[3:]
    fmt = "pid (%u, %u, %u) idx (" + ", ".join("%d" for _ in coords) + ")"
    fmt_prefix = c_string(s.prefix, percent=True)[1:-1]
    parts, args = [], [f"uint({expr(p)})" for p in pid] + [f"int({expr(c)})" for c in coords]
    for v in s.values:
        plain, hexa, cast = _FORMATS[v.type.dtype]
        parts.append(hexa if s.hex else plain)
        args.append(f"{cast}({expr(v)})")
    call = f'metile_device_print("{fmt}{fmt_prefix}{", ".join(parts)}\\n", {", ".join(args)});'
    return call if s.mask is None else f"if ({expr(s.mask)}) {call}"


def assert_call(s: DeviceAssert, expr) -> str:
    cond = expr(s.cond) if s.mask is None else f"!({expr(s.mask)}) || ({expr(s.cond)})"
    message = "device assertion failed" + (f": {s.msg}" if s.msg else "")
    return f"metile_device_assert({cond}, {c_string(message)});"


def call(s: DevicePrint | DeviceAssert, expr) -> str:
    return print_call(s, expr) if isinstance(s, DevicePrint) else assert_call(s, expr)


__all__ = ["HELPERS", "assert_call", "c_string", "call", "print_call"]
