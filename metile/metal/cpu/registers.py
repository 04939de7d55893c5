"""An estimate of the 32-bit registers one thread of a kernel holds, read from its MSL (the profiler's `registers`).

The Apple GPU model (`metile.profile.model.occupancy`) limits the threadgroups a core holds by it: a thread's
registers come out of the core's register file, so the more each thread needs, the fewer threads run at once
(docs/performance.md, "The model", gives the table and its sources).

What is counted, from the body of the kernel's function (for an instantiation of a kernel template, the template's
body with the instantiation's arguments for its parameters):
- each value declared in thread space, live from its declaration to the end of its block (a loop's `for`
  declarations belong to its body); the estimate is the most that are live at any point of the body, nested blocks
  included. Registers are counted in 16-bit halves, as Apple's register file is addressed (half, bfloat, short,
  ushort, char, uchar and bool take one half, 32-bit types two, 64-bit types and pointers four), rounded up to
  32-bit registers at the end;
- a vector of n components is n values; an array its element count times its element (a dimension written as an
  integer literal, a template argument or a `constexpr` integer of the source; any other counts 1);
- a simdgroup_matrix is spread over its simdgroup's 32 lanes: 8 x 8 / 32 = 2 elements a lane;
- a struct or class defined in the source is the sum of its non-static data members (the same rules, recursively);
- a value of any other type (a template type the instantiation does not name, a type of a header the reader does
  not see, `auto`) counts one 32-bit register;
- a reference declares no storage; the kernel's buffer arguments live in uniform registers, shared by the
  threads, and count nothing; its thread-position arguments count like locals.
Not counted: temporaries inside expressions and the values of functions the kernel calls (inlined by the compiler,
their locals are live only during the call). The count is therefore a floor of what the compiler allocates for
straight-line code and an upper estimate where it reuses the registers of values that die before their block ends.
"""

from __future__ import annotations

import functools
import math
import re

from metile.metal.cpu.arms import _function_bodies, _parameter_list
from metile.metal.cpu.declarations import brackets
from metile.metal.msl_lex import LexError, Tok, Token, tokenize
from metile.metal.msl_templates import TemplateSyntaxError, bind, parse_header, split_args

# halves (16-bit registers) of one scalar of each built-in type
_SCALAR_HALVES = {"half": 1, "bfloat": 1, "short": 1, "ushort": 1, "char": 1, "uchar": 1, "bool": 1,
                  "int8_t": 1, "uint8_t": 1, "int16_t": 1, "uint16_t": 1,
                  "float": 2, "int": 2, "uint": 2, "int32_t": 2, "uint32_t": 2, "unsigned": 2,
                  "long": 4, "ulong": 4, "size_t": 4, "int64_t": 4, "uint64_t": 4, "double": 4}
_BUILTIN = re.compile(r"(?:packed_)?(" + "|".join(sorted(_SCALAR_HALVES, key=len, reverse=True)) + r")([234])?")
_MATRIX = re.compile(r"simdgroup_(half|float|bfloat)8x8")
_MATRIX_LANE_ELEMENTS = 8 * 8 // 32       # a simdgroup_matrix's elements a lane holds
_QUALIFIERS = frozenset({"const", "constexpr", "static", "thread", "volatile", "register", "typename", "metal",
                         "::", "unsigned", "signed"})
_SKIP = frozenset({"return", "if", "else", "switch", "case", "default", "break", "continue", "goto", "while",
                   "do", "using", "typedef", "static_assert", "template", "struct", "class", "union", "enum",
                   "namespace", "delete", "new", "throw"})
_NOT_THREAD = frozenset({"device", "threadgroup", "constant", "threadgroup_imageblock", "ray_data", "object_data"})
_DEPTH = 8                                 # struct nesting the reader follows
_CONSTANT_WORDS = _QUALIFIERS | {"constant", "int", "uint", "short", "ushort", "size_t", "int32_t", "uint32_t", "long",
                                 "char"}
UNKNOWN_HALVES = 2                         # a value of a type the reader cannot size: one 32-bit register


def kernel_registers(text: str, signature) -> int:
    """`estimate_registers` of a kernel of `text` by its signature (`metile.emit.signature.KernelSignature`): the
    function it is defined as, with an instantiation's template arguments (`callee`, "f<float, 4>")."""
    call = signature.call_name
    name, _, rest = call.partition("<")
    args: list[str] = []
    if rest:
        try:
            args = [" ".join(t.text for t in run) for run in split_args(tokenize(rest.rsplit(">", 1)[0]))]
        except LexError:
            args = []
    return estimate_registers(text, signature.defined_as if not rest else name.strip(), tuple(args))


@functools.lru_cache(maxsize=64)
def estimate_registers(text: str, function: str, template_args: tuple[str, ...] = ()) -> int:
    """32-bit registers a thread of `function` (a kernel, or a kernel template instantiated with `template_args`)
    holds at most, by the rules of the module docstring; 0 when the function's body cannot be found or read."""
    try:
        tokens = [t for t in tokenize(text) if t.kind is not Tok.DIRECTIVE]
    except LexError:
        return 0
    close, open_of = brackets(tokens)
    if close is None:
        return 0
    bodies = [b for name, b in _function_bodies(tokens, close, open_of) if name == function]
    best = 0
    for lbrace in bodies:   # overloads and specializations: the largest
        params = _parameter_list(tokens, lbrace, open_of)
        if params is None:
            continue
        reader = _Reader(tokens, close, open_of, _template_mapping(tokens, params[0], list(template_args)))
        best = max(best, reader.parameters(params) + reader.block(lbrace + 1, close[lbrace]))
    return math.ceil(best / 2)


def _template_mapping(tokens: list[Token], paren: int, args: list[str]) -> dict[str, str]:
    """The template parameters of the function whose parameter list opens at tokens[paren], bound to `args` (empty
    when it is no template or they do not bind)."""
    k = paren - 1
    while k >= 0 and tokens[k].text not in (";", "}", "{"):
        if tokens[k].text == "template" and k + 1 < paren and tokens[k + 1].text == "<":
            try:
                params, _ = parse_header(tokens, k)
                return bind(params, args, tokens[k], "kernel template") if args else {}
            except (TemplateSyntaxError, LexError, IndexError):
                return {}
        k -= 1
    return {}


class _Reader:
    def __init__(self, tokens: list[Token], close: dict[int, int], open_of: dict[int, int], mapping: dict[str, str]):
        self.t, self.close, self.open_of, self.mapping = tokens, close, open_of, mapping
        self.constants = _constants(tokens)
        self.structs = _structs(tokens, close)

    # -- the body ----------------------------------------------------------------------------------------------
    def block(self, a: int, b: int) -> int:
        """Halves live at most inside tokens[a:b], the statements of one block."""
        live = peak = 0
        i = a
        while i < b:
            e = self.statement_end(i, b)
            decl, inner = self.statement(i, e)
            live += decl
            peak = max(peak, live + inner)
            i = e
        return max(peak, live)

    def statement_end(self, i: int, b: int) -> int:
        """The index after the statement starting at tokens[i] (a block, a control statement, or up to `;`)."""
        t = self.t
        if t[i].text == "{":
            return self.close[i] + 1
        if t[i].text in ("if", "for", "while", "switch") and i + 1 < b and t[i + 1].text in ("(", "constexpr"):
            p = i + 1 if t[i + 1].text == "(" else i + 2
            end = self.statement_end(self.close[p] + 1, b)
            if t[i].text == "if" and end < b and t[end].text == "else":
                end = self.statement_end(end + 1, b)
            return end
        if t[i].text == "do":
            end = self.statement_end(i + 1, b)
            while end < b and t[end].text != ";":
                end = self.close.get(end, end) + 1
            return end + 1
        if t[i].text == "else":
            return self.statement_end(i + 1, b)
        j = i
        while j < b and t[j].text != ";":
            j = self.close.get(j, j) + 1
        return min(j + 1, b)

    def statement(self, i: int, e: int) -> tuple[int, int]:
        """(halves the statement declares into its block, halves live at most inside its nested blocks)."""
        t = self.t
        word = t[i].text
        if word == "{":
            return 0, self.block(i + 1, e - 1)
        if word in ("if", "while", "switch"):
            p = i + 1 if t[i + 1].text == "(" else i + 2
            cond = self.declaration(p + 1, self.close[p])
            body = self.statement_end(self.close[p] + 1, e)
            inner = self.nested(self.close[p] + 1, body)
            if word == "if" and body < e and t[body].text == "else":
                inner = max(inner, self.nested(body + 1, e))
            return 0, cond + inner
        if word == "for":
            p = i + 1
            init_end = next((k for k in range(p + 1, self.close[p]) if t[k].text == ";"), self.close[p])
            init = self.declaration(p + 1, init_end)
            return 0, init + self.nested(self.close[p] + 1, e)
        if word == "do":
            return 0, self.nested(i + 1, e)
        if word == "else":
            return 0, self.nested(i + 1, e)
        if word in _SKIP or t[i].kind is not Tok.IDENT:
            return 0, 0
        if t[i + 1].text == ":" if i + 1 < e else False:   # a label
            return self.statement(i + 2, e) if i + 2 < e else (0, 0)
        stop = e - 1 if t[e - 1].text == ";" else e
        return self.declaration(i, stop), 0

    def nested(self, a: int, b: int) -> int:
        """Halves live at most in the statement tokens[a:b] that is a control statement's arm or body."""
        if a >= b:
            return 0
        decl, inner = self.statement(a, b)
        return max(decl, inner)   # an arm's declarations are its own scope

    # -- declarations ------------------------------------------------------------------------------------------
    def parameters(self, params: tuple[int, int]) -> int:
        """Halves of the kernel's thread-space arguments (thread positions and the like; buffers take none)."""
        total = 0
        for a, b in _split(self.t, params[0] + 1, params[1], self.close):
            words = {t.text for t in self.t[a:b]}
            if words & _NOT_THREAD or any(t.text in ("*", "&") for t in self.t[a:b]):
                continue
            k = a
            while k < b and self.t[k].text in _QUALIFIERS:
                k += 1
            if k < b:
                total += self.type_halves(k, b)[0]
        return total

    def declaration(self, a: int, b: int) -> int:
        """Halves the declaration tokens[a:b] holds in thread space (0 when it declares nothing there)."""
        t = self.t
        k, elsewhere = a, False     # `threadgroup float x[..]`: not in registers (a pointer to it is)
        while k < b and (t[k].text in _QUALIFIERS or t[k].text in _NOT_THREAD):
            elsewhere = elsewhere or t[k].text in _NOT_THREAD
            k += 1
        if k >= b or t[k].kind is not Tok.IDENT or t[k].text in _SKIP or not self._declares(k, b):
            return 0
        halves, k = self.type_halves(k, b)
        total = 0
        for count, pointer, reference in self.declarators(k, b):
            if pointer:
                total += count * 4
            elif not reference and not elsewhere:
                total += count * halves
        return total

    def declarators(self, k: int, b: int):
        """(elements, is a pointer, is a reference) of each name the declarators tokens[k:b] (after the type) declare:
        `*p`, `&r`, `x[4][2]` (8 elements)."""
        t = self.t
        for s, e in _split(t, k, b, self.close):
            j, pointer, reference = s, False, False
            while j < e and t[j].text in ("*", "&", "&&", "const", "thread", "device", "threadgroup", "constant"):
                pointer = pointer or t[j].text == "*"
                reference = reference or t[j].text in ("&", "&&")
                j += 1
            if j >= e or t[j].kind is not Tok.IDENT:
                continue
            count = 1
            j += 1
            while j < e and t[j].text == "[":
                count *= self.dimension(j + 1, self.close[j])
                j = self.close[j] + 1
            yield count, pointer, reference

    def _declares(self, k: int, b: int) -> bool:
        """Whether tokens[k:b], starting at a type name, is `Type name ...` (not an expression statement)."""
        t = self.t
        j = k + 1
        while j < b and t[j].text == "::" and j + 1 < b:
            j += 2
        if j < b and t[j].text == "<":
            j = _angle_end(t, j, b)
        while j < b and t[j].text in ("*", "&", "&&", "const", "thread", "device", "threadgroup", "constant"):
            j += 1
        return j < b and t[j].kind is Tok.IDENT and (j + 1 >= b or t[j + 1].text in ("=", ";", ",", "[", "(", "{"))

    def type_halves(self, k: int, b: int, depth: int = 0) -> tuple[int, int]:
        """(halves of one value of the type named at tokens[k], index after the type name and its arguments)."""
        t = self.t
        name = t[k].text
        j = k + 1
        while j < b and t[j].text == "::" and j + 1 < b:   # metal::float4, ns::Type: the last name
            name = t[j + 1].text
            j += 2
        args: list[str] = []
        if j < b and t[j].text == "<":
            end = _angle_end(t, j, b)
            args = [" ".join(x.text for x in run) for run in _split_angle(t[j + 1:end - 1])]
            j = end
        return self.halves_of(name, args, depth), j

    def halves_of(self, name: str, args: list[str], depth: int = 0) -> int:
        name = self.mapping.get(name, name)
        if name in ("simdgroup_matrix", "vec") and args:
            elem = self.halves_of(args[0].split()[-1], [], depth)
            if name == "vec":
                return elem * self.dimension_text(args[1] if len(args) > 1 else "1")
            return _MATRIX_LANE_ELEMENTS * elem
        if (m := _MATRIX.fullmatch(name)) is not None:
            return _MATRIX_LANE_ELEMENTS * _SCALAR_HALVES[m.group(1)]
        if (m := _BUILTIN.fullmatch(name)) is not None:
            return _SCALAR_HALVES[m.group(1)] * int(m.group(2) or 1)
        if name in self.structs and depth < _DEPTH:
            a, b = self.structs[name]
            return sum(self.member_halves(s, e, depth + 1) for s, e in _members(self.t, a, b, self.close)) \
                or UNKNOWN_HALVES
        return UNKNOWN_HALVES

    def member_halves(self, a: int, b: int, depth: int) -> int:
        t = self.t
        if any(x.text == "static" for x in t[a:b]) or t[a].text in _SKIP or t[a].text in ("public", "private"):
            return 0
        k = a
        while k < b and t[k].text in _QUALIFIERS:
            k += 1
        if k >= b or t[k].kind is not Tok.IDENT or not self._declares(k, b):
            return 0
        halves, k = self.type_halves(k, b, depth)
        return sum(count * (4 if pointer else halves) for count, pointer, _ in self.declarators(k, b))

    def dimension(self, a: int, b: int) -> int:
        return self.dimension_text(" ".join(x.text for x in self.t[a:b]))

    def dimension_text(self, text: str) -> int:
        """An array dimension's value: an integer expression of literals, template arguments and constants (1 when
        it names anything else)."""
        words = re.sub(r"[A-Za-z_]\w*", lambda m: self._value(m.group()), text)
        if not re.fullmatch(r"[\d\s()+\-*/%]*", words) or not words.strip():
            return 1
        try:
            value = eval(words.replace("/", "//"), {"__builtins__": {}})   # noqa: S307 - digits and operators only
        except (SyntaxError, ZeroDivisionError, TypeError):
            return 1
        return value if isinstance(value, int) and value > 0 else 1

    def _value(self, name: str) -> str:
        seen = set()
        while name not in seen:
            seen.add(name)
            v = self.mapping.get(name, self.constants.get(name))
            if v is None:
                return name
            v = v.strip()
            if re.fullmatch(r"\d+[uUlL]*", v):
                return v.rstrip("uUlL")
            name = v
        return name


def _constants(tokens: list[Token]) -> dict[str, str]:
    """`constexpr` integer names of the source: `constexpr int N = 4;` (any scope; the first definition wins)."""
    out: dict[str, str] = {}
    for i, t in enumerate(tokens):
        if t.text != "constexpr":
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].text in _CONSTANT_WORDS:
            j += 1
        if j + 2 < len(tokens) and tokens[j].kind is Tok.IDENT and tokens[j + 1].text == "=":
            end = j + 2
            while end < len(tokens) and tokens[end].text not in (";", ","):
                end += 1
            out.setdefault(tokens[j].text, " ".join(x.text for x in tokens[j + 2:end]))
    return out


def _structs(tokens: list[Token], close: dict[int, int]) -> dict[str, tuple[int, int]]:
    """{name: (index after `{`, index of `}`)} of each struct or class defined in the source."""
    out: dict[str, tuple[int, int]] = {}
    for i, t in enumerate(tokens):
        if t.text not in ("struct", "class") or i + 2 >= len(tokens) or tokens[i + 1].kind is not Tok.IDENT:
            continue
        j = i + 2
        while j < len(tokens) and tokens[j].text not in ("{", ";", "(", ")", "=", ">"):
            j += 1
        if j < len(tokens) and tokens[j].text == "{" and j in close:
            out.setdefault(tokens[i + 1].text, (j + 1, close[j]))
    return out


def _members(tokens: list[Token], a: int, b: int, close: dict[int, int]) -> list[tuple[int, int]]:
    """The member declarations of a class body tokens[a:b] (functions, nested types and access labels left out)."""
    out, i = [], a
    while i < b:
        j, body = i, False
        while j < b and tokens[j].text != ";":
            if tokens[j].text == "{":
                body = True
                j = close.get(j, j) + 1
                break
            if tokens[j].text == ":" and j == i + 1 and tokens[i].text in ("public", "private", "protected"):
                break
            j = close.get(j, j) + 1
        if not body and not any(tokens[k].text == "(" for k in range(i, min(j, b))):
            out.append((i, min(j, b)))
        elif not body and tokens[i].kind is Tok.IDENT and any(tokens[k].text in ("{", "=") for k in range(i, j)):
            out.append((i, min(j, b)))
        i = j + 1
        while i < b and tokens[i].text == ";":
            i += 1
    return out


def _angle_end(t: list[Token], j: int, b: int) -> int:
    """The index after the `>` closing the `<` at t[j]."""
    depth = 0
    while j < b:
        depth += {"<": 1, ">": -1, ">>": -2}.get(t[j].text, 0)
        j += 1
        if depth <= 0:
            return j
    return b


def _split_angle(run: list[Token]) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    depth = 0
    for x in run:
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(x.text, 0)
        if x.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(x)
    return [p for p in parts if p]


def _split(tokens: list[Token], a: int, b: int, close: dict[int, int]) -> list[tuple[int, int]]:
    """tokens[a:b] split at its top-level commas."""
    out, start, j, angle = [], a, a, 0
    while j < b:
        x = tokens[j].text
        if x == "<":
            angle += 1
        elif x in (">", ">>") and angle:
            angle = max(0, angle - len(x))
        elif x == "," and not angle:
            out.append((start, j))
            start = j + 1
        j = close.get(j, j) + 1
    out.append((start, b))
    return [(s, e) for s, e in out if s < e]
