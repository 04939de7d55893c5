"""Function constants on the CPU device: the C++ that gives each specialisation its values.

Each specialisation of a library is its own C++ translation unit, so its constants are compile-time constants:

- `constant T name [[function_constant(i)]];` becomes `constexpr T name = T(__MT_FC_VALUE_name);` (a vector:
  `static const T name = T(...)`), and a prelude after the compatibility header defines `__MT_FC_VALUE_name` as the
  value's literal, or as nothing when no value was given (the constant is then zero);
- `is_function_constant_defined(name)` is a macro that reads `__MT_FC_DEFINED_name` (1 or 0) from the prelude;
- a program-scope `constant T x = expr;` computed only from function constants becomes `constexpr`, so templates
  and array sizes can use it as Metal allows;
- in an included header, which the front end does not rewrite, `function_constant` is a macro: the declaration
  `constant T name [[function_constant(i)]];` becomes `T name [[ ]] = T(value), __mt_fc_unused_i() [[ ]];` (a
  compile-time constant where the header says `constexpr`, as MLX's `STEEL_CONST` does), and a kernel parameter's
  `function_constant(b)` disappears; an index or name the front end did not find in the headers it read expands
  to `__mt_function_constant_unknown_to_metile_<it>`, a syntax error, never a constant read as zero.

`specialize(tr, values)` swaps the prelude of a translation for one with `values`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

import attrs

from metile.metal.errors import MSLCompileError
from metile.metal.function_constants import ConstantTable, FunctionConstant

PRELUDE_BEGIN = "/* metile: function constant values */\n"
PRELUDE_END = "/* metile: end of function constant values */\n"
UNKNOWN = "__mt_function_constant_unknown_to_metile_"


def edits(table: ConstantTable) -> list[tuple[int, int, str]]:
    """Source edits for the declarations of `table` (see the module docstring)."""
    out = []
    for c in table.constants:
        if c.header:
            continue
        start, end = c.span
        lead = "constexpr" if c.lanes == 1 else "static const"
        out.append((start, end, f"{lead} {c.type_text} {c.name} = {c.type_text}(__MT_FC_VALUE_{c.name});"))
    for d in table.derived:
        if d.header:
            continue
        out.append((d.keyword[0], d.keyword[1], "constexpr"))
    return out


def with_prelude(cpp: str, table: ConstantTable, values: Mapping[str, object]) -> str:
    """`cpp` (whose first line includes the compatibility header) with the prelude for `values` after that line."""
    first, rest = cpp.split("\n", 1)
    return f"{first}\n{prelude(table, values)}{rest}"


def prelude(table: ConstantTable, values: Mapping[str, object]) -> str:
    lines = [PRELUDE_BEGIN.rstrip("\n"),
             f"#define function_constant(x) ]] {UNKNOWN}##x [[",
             "#define is_function_constant_defined(name) __MT_FC_DEFINED_##name"]
    for c in table.constants:
        given = c.name in values
        lines.append(f"#define __MT_FC_DEFINED_{c.name} {1 if given else 0}")
        lines.append(f"#define __MT_FC_VALUE_{c.name} {literal(c, values[c.name]) if given else ''}".rstrip())
        lines.append(f"#define {UNKNOWN}{c.name}")
        if c.header:
            lines.append(f"#define {UNKNOWN}{c.index} = {c.type_text}(__MT_FC_VALUE_{c.name}), "
                         f"__mt_fc_unused_{c.index}()")
    lines += [f"#define {UNKNOWN}{d.name}" for d in table.derived]
    return "\n".join(lines) + "\n" + PRELUDE_END


def specialize(tr, values: Mapping[str, object]):
    """The translation `tr` with the function constant values `values` (checked, by name)."""
    table: ConstantTable = tr.function_constants

    def specialized(cpp: str) -> str:
        head, rest = cpp.split(PRELUDE_BEGIN, 1)
        _, tail = rest.split(PRELUDE_END, 1)
        return head + prelude(table, values) + tail

    kernels = tuple(table.specialize_signature(k, values, tr.metal_name) for k in tr.kernels)
    instrument = functools.cache(lambda: specialized(tr.instrumented_cpp))   # the sanitizer build's text too
    check = functools.cache(lambda: None if tr.checked_cpp is None else specialized(tr.checked_cpp))   # and checked
    return attrs.evolve(tr, cpp=specialized(tr.cpp), kernels=kernels, instrument=instrument, check=check)


def literal(c: FunctionConstant, value) -> str:
    """C++ text of `value` for the constant `c` (components separated by commas for a vector)."""
    parts = value if c.lanes > 1 else (value,)
    return ", ".join(_scalar_literal(c.scalar, v) for v in parts)


def _scalar_literal(scalar: str, v) -> str:
    if scalar == "bool":
        return "true" if v else "false"
    if scalar in ("half", "float"):
        if math.isnan(v):
            return "__builtin_nanf(\"\")"
        if math.isinf(v):
            return "__builtin_inff()" if v > 0 else "(-__builtin_inff())"
        return f"{float(v).hex()}f"   # exact: the value was rounded to the constant's type already
    if v == -(2 ** 63):
        return "(-9223372036854775807ll - 1)"
    return f"{v}ull" if v >= 2 ** 63 else f"({v}ll)"


def explain_unseen(e: MSLCompileError) -> MSLCompileError:
    """A build error caused by a function constant the front end did not see, said plainly (else `e` itself)."""
    m = re.search(UNKNOWN + r"(\w+)", e.compiler_output)
    if m is None:
        return e
    what = f"index {m.group(1)}" if m.group(1).isdigit() else f"`{m.group(1)}`"
    return MSLCompileError(
        f"function constant {what} is declared or used in a file the CPU device's front end does not read (one "
        "included through a macro, or from a directory not on its include path), so the device cannot give it a "
        "value; include that header with a quoted or <...> path beside the .metal file",
        e.loc, source_line=e.source_line, compiler_output=e.compiler_output)
