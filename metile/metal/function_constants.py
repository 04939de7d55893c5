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
larger, so a false answer is a refusal, never a constant silently read as zero.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Mapping
from pathlib import Path

import attrs
import numpy as np

from metile.ir.errors import Loc
from metile.metal.args import SCALARS, element_type
from metile.metal.errors import FunctionConstantError, MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, tokenize
from metile.metal.msl_signature import KernelSignature, Param, SourceErrors

_QUALIFIERS = {"constant", "static", "constexpr", "const"}
_BINARY = {  # C precedence (higher binds tighter)
    "*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, "<=": 7, ">": 7, ">=": 7,
    "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1,
}
_CONST_PUNCT = set(_BINARY) | {"!", "~", "(", ")", "?", ":"}
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
class Item:
    """A program-scope declaration: the names it declares (empty: unknown, reached by every kernel), the identifiers
    it mentions and the names it passes to `is_function_constant_defined`."""

    names: frozenset[str]
    idents: frozenset[str]
    guarded: frozenset[str]
    is_kernel: bool = False


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


# -- scanning a source --------------------------------------------------------------------------------------------
def scan(tokens: list[Token], errors: SourceErrors, kernels: tuple[KernelSignature, ...],
         headers: tuple[tuple[str, list[Token]], ...] = ()) -> ConstantTable:
    """The function constants declared in `tokens` (and in the included `headers`: (path, tokens) pairs) and what
    each of `kernels` uses."""
    constants: list[FunctionConstant] = []
    derived: list[DerivedConstant] = []
    calls: list[tuple[int, int, str]] = []
    files = [("", tokens), *headers]
    for header, toks in files:
        for start, end in _statements(toks):
            stmt = toks[start:end + 1]
            fc = _declaration(stmt, errors, header)
            if fc is not None:
                _check_unique(fc, constants, errors, stmt[0])
                constants.append(fc)
    names = {c.name for c in constants}
    for header, toks in files:
        for start, end in _statements(toks):
            d = _derived(toks[start:end + 1], names | {d.name for d in derived})
            if d is not None:
                derived.append(attrs.evolve(d, header=header))
    for header, toks in files:
        for n, t in enumerate(toks):
            if t.kind is Tok.IDENT and t.text == DEFINED:
                arg = toks[n + 2] if n + 3 < len(toks) and toks[n + 1].text == "(" else None
                if arg is None or toks[n + 3].text != ")" or arg.text not in names:
                    raise _error(errors, header, t, f"{DEFINED}() takes the name of a function constant declared "
                                 f"in this file or its headers (declared: {', '.join(sorted(names)) or 'none'})")
                if not header:
                    calls.append((t.start, toks[n + 3].end, arg.text))
    if not constants:
        return EMPTY
    uses, guarded = _kernel_uses([toks for _, toks in files], kernels, names)
    return ConstantTable(tuple(constants), tuple(derived), tuple(calls), uses, guarded)


def _error(errors: SourceErrors, header: str, tok: Token, message: str, cls=MSLCompileError):
    if not header:
        return errors.at(tok, message, cls)
    return cls(message, Loc(header, tok.line, tok.col))


def included_headers(tokens: list[Token], include_dirs, system_dirs=()) -> tuple[tuple[str, list[Token]], ...]:
    """The files `#include`d by `tokens`, directly or not, resolved as a C++ compiler does (a quoted name beside the
    including file first, then in `include_dirs`), as (path, tokens) pairs. Names found in `system_dirs` (the
    device's own headers) and files that cannot be found or read are left out: what they declare is unknown here
    and the device refuses it when it compiles."""
    dirs = [Path(d) for d in include_dirs]
    seen: set[Path] = set()
    out: list[tuple[str, list[Token]]] = []
    work: list[tuple[Path | None, list[Token]]] = [(None, tokens)]
    while work:
        here, toks = work.pop(0)
        for t in toks:
            m = _INCLUDE.match(t.text) if t.kind is Tok.DIRECTIVE else None
            if m is None:
                continue
            name = m.group(1) or m.group(2)
            if any((Path(d) / name).exists() for d in system_dirs):
                continue
            where = ([here.parent] if here is not None and m.group(1) else []) + dirs
            path = next((d / name for d in where if (d / name).is_file()), None)
            if path is None or path.resolve() in seen:
                continue
            seen.add(path.resolve())
            try:
                sub = tokenize(path.read_text())
            except (OSError, UnicodeDecodeError, LexError):
                continue
            out.append((str(path), sub))
            work.append((path, sub))
    return tuple(out)


_DEFINE = re.compile(r"\s*#\s*define\s+([A-Za-z_]\w*)")
_WORD = re.compile(r"[A-Za-z_]\w*")
_GUARD = re.compile(DEFINED + r"\s*\(\s*([A-Za-z_]\w*)\s*\)")
_INCLUDE = re.compile(r'\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')


def _statements(tokens: list[Token]):
    """(first, last) token indices of each program-scope statement ending in `;` (namespaces are looked into)."""
    depth, start, ns = 0, 0, []
    for n, t in enumerate(tokens):
        if t.kind is Tok.DIRECTIVE:
            start = n + 1
        elif t.text == "{":
            if depth == 0 and any(x.text == "namespace" for x in tokens[start:n]):
                ns.append(depth)
                start = n + 1
                continue
            depth += 1
        elif t.text == "}":
            if depth == 0 and ns:
                ns.pop()
            else:
                depth -= 1
            if depth == 0:
                start = n + 1
        elif t.text == ";" and depth == 0:
            if n > start:
                yield start, n
            start = n + 1


def _declaration(stmt: list[Token], errors: SourceErrors, header: str = "") -> FunctionConstant | None:
    at = next((n for n, t in enumerate(stmt) if t.text == "[[" and n + 1 < len(stmt)
               and stmt[n + 1].text == "function_constant"), None)
    if at is None:
        return None
    close = match_paren(stmt, at)
    attr = stmt[at + 1:close]
    if (len(attr) != 4 or attr[1].text != "(" or attr[2].kind is not Tok.NUMBER or attr[3].text != ")"
            or close + 2 != len(stmt)):
        raise _error(errors, header, stmt[at], "expected `constant T name [[function_constant(index)]];` "
                                  "with an integer index")
    index = int(attr[2].text.rstrip("uU"), 0)
    if not 0 <= index <= 65535:
        raise _error(errors, header, attr[2], f"function constant index {index} is out of range (0..65535)")
    decl = stmt[:at]
    if len(decl) < 2 or decl[-1].kind is not Tok.IDENT or decl[-2].kind is not Tok.IDENT:
        raise _error(errors, header, stmt[0], "expected `constant T name [[function_constant(index)]];`")
    name, type_text = decl[-1].text, decl[-2].text
    et = element_type(type_text)
    if et.scalar == "bfloat":
        raise _error(errors, header, decl[-2], "bfloat function constants are not supported yet", MSLUnsupportedError)
    if et.scalar is None or type_text.startswith("packed_") or type_text.startswith("atomic"):
        raise _error(errors, header, decl[-2], f"function constant `{name}` has type `{type_text}`; a function "
                     "constant is a scalar (bool, an integer type, half, float) or a vector of one")
    return FunctionConstant(name, type_text, index, decl[-1].line, et.scalar, et.lanes,
                            span=(stmt[0].start, stmt[-1].end), header=header)


def _check_unique(fc: FunctionConstant, seen: list[FunctionConstant], errors: SourceErrors, tok: Token) -> None:
    for c in seen:
        where = f"{c.header or errors.metal_name}:{c.line}"
        if c.index == fc.index:
            raise _error(errors, fc.header, tok, f"function constants `{c.name}` ({where}) and `{fc.name}` share "
                                                 f"index {fc.index}")
        if c.name == fc.name:
            raise _error(errors, fc.header, tok, f"function constant `{fc.name}` is declared twice ({where})")


def _derived(stmt: list[Token], constexpr_names: set[str]) -> DerivedConstant | None:
    if not stmt or stmt[0].text != "constant" or any(t.text in ("[[", "constexpr") for t in stmt):
        return None
    eq = next((n for n, t in enumerate(stmt) if t.text == "="), None)
    if eq is None or eq < 3 or stmt[eq - 1].kind is not Tok.IDENT:
        return None
    expr = stmt[eq + 1:-1]
    if not expr or not any(t.text in constexpr_names for t in expr):
        return None
    for t in expr:
        ok = (t.kind is Tok.NUMBER or t.text in ("true", "false", DEFINED) or t.text in constexpr_names
              or (t.kind is Tok.PUNCT and t.text in _CONST_PUNCT))
        if not ok:
            return None
    return DerivedConstant(stmt[eq - 1].text, tuple(t.text for t in expr), (stmt[0].start, stmt[0].end))


def _kernel_uses(token_lists: list[list[Token]], kernels, names: set[str]):
    items = [it for toks in token_lists for it in _items(toks)]
    by_name: dict[str, list[Item]] = {}
    always: list[Item] = []
    for it in items:
        for nm in it.names:
            by_name.setdefault(nm, []).append(it)
        if not it.names:
            always.append(it)
    uses, guarded = {}, {}
    for k in kernels:
        own = [it for it in by_name.get(k.name, ()) if it.is_kernel]
        if not own:
            continue  # not found by name (e.g. an instantiated template): every constant counts as used
        reached, seen_items, work = set(), set(), [*own, *always]
        while work:
            it = work.pop()
            if id(it) in seen_items:
                continue
            seen_items.add(id(it))
            for ident in it.idents - reached:
                reached.add(ident)
                work += by_name.get(ident, ())
        used = frozenset(reached & names)
        uses[k.name] = used
        guarded[k.name] = frozenset(g for it in items if id(it) in seen_items for g in it.guarded)
    return uses, guarded


def _items(tokens: list[Token]) -> list[Item]:
    items, depth, start, ns = [], 0, 0, []
    for n, t in enumerate(tokens):
        if t.kind is Tok.DIRECTIVE:
            m = _DEFINE.match(t.text)
            if m is not None:
                words = frozenset(_WORD.findall(t.text[m.end():]))
                guarded = frozenset(_GUARD.findall(t.text[m.end():]))
                items.append(Item(frozenset({m.group(1)}), words, guarded))
            start = n + 1
        elif t.text == "{":
            if depth == 0 and any(x.text == "namespace" for x in tokens[start:n]):
                ns.append(depth)
                start = n + 1
                continue
            depth += 1
        elif t.text == "}":
            if depth == 0 and ns:
                ns.pop()
                start = n + 1
                continue
            depth -= 1
            if depth == 0:
                items.append(_item(tokens[start:n + 1]))
                start = n + 1
        elif t.text == ";" and depth == 0:
            if n > start:
                items.append(_item(tokens[start:n + 1]))
            start = n + 1
    return items


def _item(toks: list[Token], names: frozenset[str] | None = None) -> Item:
    idents = frozenset(t.text for t in toks if t.kind is Tok.IDENT)
    guarded = frozenset(toks[n + 2].text for n, t in enumerate(toks[:-3])
                        if t.text == DEFINED and toks[n + 1].text == "(")
    is_kernel = "kernel" in idents
    if names is None:
        name = _declared_name(toks)
        names = frozenset({name}) if name else frozenset()
    return Item(names, idents, guarded, is_kernel)


def _declared_name(toks: list[Token]) -> str | None:
    top, n = [], 0
    while n < len(toks):  # the tokens outside [[...]], (...) and {...}, each bracket kept as one marker
        t = toks[n]
        if t.kind is Tok.PUNCT and t.text in ("[[", "(", "{", "["):
            try:
                close = match_paren(toks, n)
            except LexError:
                return None   # unknown: the declaration counts as reached by every kernel
            if t.text != "[[":
                top.append(t)
            n = close + 1
            continue
        top.append(t)
        n += 1
    words = [t.text for t in top]
    for kw in ("struct", "class", "union", "enum"):
        if kw in words and "(" not in words[:words.index(kw)]:
            rest = [w for w in words[words.index(kw) + 1:] if w not in ("class", "struct")]
            return rest[0] if rest and rest[0].isidentifier() else None
    at = next((n for n, w in enumerate(words) if w in ("(", "=", "[", ";", "{")), None)
    prev = top[at - 1] if at else None
    if prev is not None and prev.kind is Tok.IDENT and prev.text not in ("operator", "decltype"):
        return prev.text
    return None


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
