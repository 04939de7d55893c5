"""Metal function constants in MSL sources, for every device: what a source declares, which a kernel needs, and
the values a user gives to specialise a kernel.

A function constant is a program-scope `constant T name [[function_constant(index)]];` of a scalar or vector type.
A kernel is specialised by giving values by index or by name (`lib.function(name, constants={...})`, Metal's
`MTLFunctionConstantValues`). `is_function_constant_defined(name)` is true exactly when a value was given. A kernel
*requires* every function constant it uses unless it also refers to it in an `is_function_constant_defined` call
(Metal's `MTLFunctionConstant.required`); creating it without a value for a required constant is refused. A kernel
parameter `[[buffer(i), function_constant(b)]]` exists only when the bool `b` is true.

Which constants a kernel uses is found by name: the identifiers of the kernel, and of every program-scope
declaration (function, struct, constant, macro) whose name it reaches. Name collisions can only make the set
larger, so a false answer is a refusal, never a constant silently read as zero. Finding all this in a source is
`metile.metal.function_constant_scan`; this module holds what was found and checks values against it.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping

import attrs
import numpy as np

from metile.metal.args import SCALARS
from metile.metal.errors import FunctionConstantError, MSLUnsupportedError
from metile.metal.msl_signature import KernelSignature, Param

_BINARY = {  # C precedence (higher binds tighter)
    "*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, "<=": 7, ">": 7, ">=": 7,
    "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1,
}
CONST_PUNCT = set(_BINARY) | {"!", "~", "(", ")", "?", ":"}
DEFINED = "is_function_constant_defined"


@attrs.frozen
class FunctionConstant:
    """`constant <type_text> <name> [[function_constant(<index>)]];` at `line`; `span` is the declaration's byte
    range in the source (its first token to its `;`), or in `header`."""

    name: str
    type_text: str
    index: int
    line: int
    scalar: str
    lanes: int = 1
    span: tuple[int, int] = attrs.field(default=(0, 0), eq=False)
    header: str = ""   # the included file that declares it ("": the source itself)

    def describe(self) -> str:
        return f"{self.index}: {self.type_text} {self.name}"


@attrs.frozen
class DerivedConstant:
    """A program-scope `constant T name = expr;` whose initializer is made only of function constants, other such
    constants, literals and operators: a compile-time constant of every specialisation. `keyword` is the byte range
    of its `constant` word."""

    name: str
    expr: tuple[str, ...]
    keyword: tuple[int, int] = attrs.field(eq=False)
    header: str = ""


@attrs.frozen
class ConstantTable:
    """The function constants of one MSL source and what each kernel uses (see the module docstring)."""

    constants: tuple[FunctionConstant, ...]
    derived: tuple[DerivedConstant, ...]
    defined_calls: tuple[tuple[int, int, str], ...]   # byte ranges of `is_function_constant_defined(name)` calls
    uses: Mapping[str, frozenset[str]]                 # kernel -> function constants it uses
    guarded: Mapping[str, frozenset[str]]              # kernel -> those it also tests with is_function_constant_defined

    def __bool__(self) -> bool:
        return bool(self.constants)

    def by_name(self, name: str) -> FunctionConstant | None:
        return next((c for c in self.constants if c.name == name), None)

    def required(self, kernel: str) -> tuple[FunctionConstant, ...]:
        used = self.uses.get(kernel, frozenset(c.name for c in self.constants))
        guarded = self.guarded.get(kernel, frozenset())
        return tuple(c for c in self.constants if c.name in used and c.name not in guarded)

    def listing(self) -> str:
        return "; ".join(c.describe() for c in self.constants) or "none"

    def resolve(self, kernel: str, values: Mapping | None, metal_name: str) -> dict[str, object]:
        """The checked values (by constant name) for specialising `kernel`, or a `FunctionConstantError`."""
        if values is not None and not isinstance(values, Mapping):
            raise FunctionConstantError(f"constants= must be a dict of index or name to value, got "
                                        f"{type(values).__name__}")
        given: dict[str, object] = {}
        for key, value in (values or {}).items():
            c = self._lookup(key, metal_name)
            if c.name in given:
                raise FunctionConstantError(f"function constant `{c.name}` (index {c.index}) of {metal_name} "
                                            "is given twice, by index and by name")
            given[c.name] = check_value(c, value, metal_name)
        missing = [c for c in self.required(kernel) if c.name not in given]
        if missing:
            names = ", ".join(f"`{c.name}` (index {c.index}, {c.type_text})" for c in missing)
            raise FunctionConstantError(
                f"kernel `{kernel}` of {metal_name} requires a value for function constant(s) {names}: it uses "
                "them without an is_function_constant_defined() test, so Metal refuses to create it without one; "
                f"pass constants={{...}} (its file declares: {self.listing()})")
        return given

    def _lookup(self, key, metal_name: str) -> FunctionConstant:
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            found = next((c for c in self.constants if c.index == int(key)), None)
            what = f"index {int(key)}"
        elif isinstance(key, str):
            found = self.by_name(key)
            what = f"name `{key}`"
        else:
            raise FunctionConstantError(f"function constant keys are indices (int) or names (str), got {key!r}")
        if found is None:
            raise FunctionConstantError(f"{metal_name} declares no function constant with {what}; it declares: "
                                        f"{self.listing()}")
        return found

    def evaluate(self, name: str, values: Mapping[str, object]):
        """The value of a function constant or derived constant `name` in a specialisation (None if unknown)."""
        c = self.by_name(name)
        if c is not None:
            return values.get(name, _zero(c))
        d = next((d for d in self.derived if d.name == name), None)
        if d is None:
            return None
        return _Evaluator(list(d.expr), self, values).run()

    def param_present(self, p: Param, values: Mapping[str, object], metal_name: str) -> bool:
        """Whether a `[[..., function_constant(b)]]` parameter exists in a specialisation."""
        cond = getattr(p, "function_constant", "")
        if not cond:
            return True
        v = self.evaluate(cond, values)
        if v is None:
            raise MSLUnsupportedError(f"{metal_name}: parameter `{p.name}` of a kernel depends on `{cond}`, which is "
                                      "not a function constant or a constant computed from them in this file")
        return bool(v)

    def specialize_signature(self, sig: KernelSignature, values: Mapping[str, object],
                             metal_name: str) -> KernelSignature:
        params = tuple(p for p in sig.params if self.param_present(p, values, metal_name))
        return sig if len(params) == len(sig.params) else attrs.evolve(sig, params=params)


EMPTY = ConstantTable((), (), (), {}, {})


def _zero(c: FunctionConstant):
    z = False if c.scalar == "bool" else (0.0 if c.scalar in ("half", "float") else 0)
    return z if c.lanes == 1 else (z,) * c.lanes


def check_value(c: FunctionConstant, value, metal_name: str):
    """`value` as the constant's type holds it (a bool, int or float, or a tuple of them for a vector)."""
    where = f"function constant `{c.name}` (index {c.index}, `{c.type_text}`) of {metal_name}"
    if c.lanes > 1:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != c.lanes:
            raise FunctionConstantError(f"{where} takes {c.lanes} values, got {value!r}")
        return tuple(_check_scalar(c.scalar, v, where) for v in value)
    return _check_scalar(c.scalar, value, where)


def _check_scalar(scalar: str, value, where: str):
    dtype = SCALARS[scalar]
    if dtype.kind == "b":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise FunctionConstantError(f"{where} is a bool; got {value!r} (pass True or False)")
    if isinstance(value, (bool, np.bool_)):
        raise FunctionConstantError(f"{where} is not a bool; got {value!r}")
    if dtype.kind in "iu":
        if not isinstance(value, numbers.Integral):
            raise FunctionConstantError(f"{where} is an integer; got {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise FunctionConstantError(f"{where}: {value} does not fit ({info.min}..{info.max})")
        return int(value)
    if not isinstance(value, numbers.Real):
        raise FunctionConstantError(f"{where} is a floating-point number; got {value!r}")
    with np.errstate(over="ignore"):
        held = float(np.asarray(value, dtype=dtype))
    if math.isinf(held) and not math.isinf(float(value)):
        raise FunctionConstantError(f"{where}: {value!r} overflows {scalar}")
    return held


class _Evaluator:
    """Evaluates a derived constant's initializer (C operators on bools, integers and floats)."""

    def __init__(self, toks: list[str], table: ConstantTable, values: Mapping[str, object]):
        self.toks, self.pos, self.table, self.values = toks, 0, table, values

    def run(self):
        v = self.ternary()
        if self.pos != len(self.toks):
            raise ValueError("trailing tokens")
        return v

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str:
        self.pos += 1
        return self.toks[self.pos - 1]

    def ternary(self):
        cond = self.binary(1)
        if self.peek() != "?":
            return cond
        self.take()
        a = self.ternary()
        self.take()  # ':'
        b = self.ternary()
        return a if cond else b

    def binary(self, level: int):
        lhs = self.unary()
        while (op := self.peek()) in _BINARY and _BINARY[op] >= level:
            self.take()
            rhs = self.binary(_BINARY[op] + 1)
            lhs = _apply(op, lhs, rhs)
        return lhs

    def unary(self):
        t = self.take()
        if t == "!":
            return not self.unary()
        if t == "-":
            return -self.unary()
        if t == "~":
            return ~self.unary()
        if t == "(":
            v = self.ternary()
            self.take()
            return v
        if t in ("true", "false"):
            return t == "true"
        if t == DEFINED:
            self.take()
            name = self.take()
            self.take()
            return name in self.values
        if t[0].isdigit() or t[0] == ".":
            text = t.rstrip("uUlLfFhH") if not t.lower().startswith("0x") else t.rstrip("uUlL")
            try:
                return int(text, 0)
            except ValueError:
                return float(text)
        v = self.table.evaluate(t, self.values)
        if v is None:
            raise ValueError(t)
        return v


def _apply(op: str, a, b):
    if op == "&&":
        return bool(a) and bool(b)
    if op == "||":
        return bool(a) or bool(b)
    if op in ("/", "%") and isinstance(a, int) and isinstance(b, int):
        q = int(a / b)  # C truncates towards zero
        return q if op == "/" else a - q * b
    return _OPERATORS[op](a, b)


_OPERATORS = {
    "*": operator.mul, "/": operator.truediv, "%": math.fmod, "+": operator.add, "-": operator.sub,
    "<<": operator.lshift, ">>": operator.rshift, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "&": operator.and_, "^": operator.xor,
    "|": operator.or_,
}
