"""Function constants on the Apple GPU device: the table of a library's constants, and their values as the shim's
`mts_constant` entries (an `MTLDataType` and the value's bytes) for `MTLFunctionConstantValues`."""

from __future__ import annotations

import numpy as np

from metile.metal.args import SCALARS
from metile.metal.function_constant_scan import included_headers, scan
from metile.metal.function_constants import ConstantTable, FunctionConstant
from metile.metal.msl_signature import KernelSignature, SourceErrors, lex

# MTLDataType of each scalar kind (a vector of n lanes is the scalar's value + n - 1)
DATA_TYPES: dict[str, int] = {
    "float": 3, "half": 16, "int": 29, "uint": 33, "short": 37, "ushort": 41, "char": 45, "uchar": 49, "bool": 53,
    "long": 81, "ulong": 85,
    "int8_t": 45, "uint8_t": 49, "int16_t": 37, "uint16_t": 41, "int32_t": 29, "uint32_t": 33, "int64_t": 81,
    "uint64_t": 85, "size_t": 85,
}


def constant_table(source: str, metal_name: str, kernels: tuple[KernelSignature, ...], include_dirs) -> ConstantTable:
    """The function constants of an MSL source and of the headers it includes from `include_dirs`."""
    errors = SourceErrors(source, metal_name)
    tokens = lex(source, errors)
    return scan(tokens, errors, kernels, included_headers(tokens, include_dirs))


def data_type(c: FunctionConstant) -> int:
    return DATA_TYPES[c.scalar] + c.lanes - 1


def value_bytes(c: FunctionConstant, value) -> bytes:
    """The bytes Metal reads for `value` of the constant `c` (components one after another)."""
    lanes = value if c.lanes > 1 else (value,)
    return np.asarray(lanes, dtype=SCALARS[c.scalar]).tobytes()


def shim_constants(ffi, constants):
    """An `mts_constant[]` for (FunctionConstant, value, by_name) triples, and what must outlive it."""
    entries = ffi.new("mts_constant[]", max(len(constants), 1))
    keep = [entries]
    for entry, (c, value, by_name) in zip(entries, constants):
        if by_name:
            name = ffi.new("char[]", c.name.encode())
            keep.append(name)
            entry.name = name
        entry.index = c.index
        entry.data_type = data_type(c)
        raw = value_bytes(c, value)
        ffi.memmove(entry.value, raw, len(raw))
    return entries, keep
