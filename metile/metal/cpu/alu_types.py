"""The types of the values `alu_counts` reads: built-in scalar and vector type names, and the template type
parameters of a function template that its explicit instantiations (or its defaults) give one kind, so that the
operations of `T x` in a kernel template instantiated for float, half and bfloat count as float ones.
"""

from __future__ import annotations

import re

from metile.metal.msl_lex import Tok, Token
from metile.metal.msl_templates import TemplateSyntaxError, match_angle, parse_header, split_args

_TYPE = re.compile(r"(?:packed_)?(float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool|size_t"
                   r"|u?int(?:8|16|32|64)_t)([234])?")
_FLOATS = frozenset({"float", "half", "bfloat"})
# issue cycles of an integer operation the model times (metal-benchmarks, "Instruction Throughputs": IADD32, bitwise,
# compares and selects 1 cycle a simdgroup instruction, IMUL32 and IMAD32 4; a division or remainder is at least a
# high multiply, IMULHI32 8 cycles, which is how a division by a constant compiles; by a variable it takes more)
INT_ISSUE = {"*": 4, "/": 8, "%": 8}


class Type:
    """A value's type as the reader sees it: kind "f" (float), "i" (integer) or None (unknown), width, pointer."""

    __slots__ = ("kind", "width", "pointer")

    def __init__(self, kind: str | None, width: int = 1, pointer: bool = False):
        self.kind, self.width, self.pointer = kind, width, pointer


UNKNOWN = Type(None)


class TypeName(Type):
    """A template type parameter in a function's names (`env`), the type every instantiation gives it."""

    __slots__ = ()


def named(name: str, env: dict[str, Type]) -> Type | None:
    """The type a name spells: a built-in type's, or a template type parameter's (None for any other name)."""
    ty = type_of_name(name)
    if ty is None and isinstance(found := env.get(name), TypeName):
        return Type(found.kind, found.width)
    return ty


def type_of_name(name: str) -> Type | None:
    """The type a type name spells (`float4` -> float, 4), None for any other name."""
    m = _TYPE.fullmatch(name)
    if m is None:
        return None
    base = m.group(1)
    return Type("f" if base in _FLOATS else "i", int(m.group(2) or 1))


def instantiations(tokens: list[Token]) -> dict[str, list[list[str]]]:
    """{template name: the argument lists of its explicit instantiations} (`template [[host_name("f_float")]] [[kernel]]
    decltype(f<float, 4>) f<float, 4>;`, `template void g<half>(...);`)."""
    out: dict[str, list[list[str]]] = {}
    for i, t in enumerate(tokens):
        if t.text != "template" or i + 1 >= len(tokens) or tokens[i + 1].text == "<":
            continue
        j = i + 1
        while j + 1 < len(tokens) and tokens[j].text != ";":
            if tokens[j].kind is Tok.IDENT and tokens[j + 1].text == "<" and tokens[j].text != "decltype":
                try:
                    end = match_angle(tokens, j + 1)
                except (TemplateSyntaxError, IndexError):
                    break
                args = [" ".join(x.text for x in run) for run in split_args(tokens[j + 2:end])]
                out.setdefault(tokens[j].text, []).append(args)
                break
            j += 1
    return out


def aliases(tokens: list[Token]) -> dict[str, str]:
    """{name: built-in type} of `typedef float name;` and `using name = float;` in the source."""
    out: dict[str, str] = {}
    for i in range(len(tokens) - 3):
        a, b, c, d = (x.text for x in tokens[i:i + 4])
        if a == "typedef" and type_of_name(b) is not None and d == ";":
            out[c] = b
        elif a == "using" and c == "=" and type_of_name(d) is not None and i + 4 < len(tokens) \
                and tokens[i + 4].text == ";":
            out[b] = d
    return out


def template_types(tokens: list[Token], paren: int, instances: dict[str, list[list[str]]],
                    aliases: dict[str, str]) -> dict[str, TypeName]:
    """The type parameters of the function template whose parameter list opens at tokens[paren] that every explicit
    instantiation binds to a float type (or every one to an integer type), or, without instantiations, whose default
    is a built-in type: {name: that kind}. Parameters bound to types of both kinds stay unknown."""
    name = tokens[paren - 1].text if paren > 0 else ""
    k = paren - 1
    while k >= 0 and tokens[k].text not in (";", "}", "{"):
        if tokens[k].text == "template" and k + 1 < paren and tokens[k + 1].text == "<":
            break
        k -= 1
    else:
        return {}
    if k < 0 or tokens[k].text != "template":
        return {}
    try:
        params, _ = parse_header(tokens, k)
    except (TemplateSyntaxError, IndexError):
        return {}
    out: dict[str, TypeName] = {}
    for n, p in enumerate(params):
        if not p.is_type or not p.name:
            continue
        texts = [args[n] for args in instances.get(name, []) if n < len(args)]
        if not texts and p.default:
            texts = [" ".join(p.default)]
        kinds = {(type_of_name(aliases.get(x, x)) or UNKNOWN).kind for x in texts}
        widths = {(type_of_name(aliases.get(x, x)) or UNKNOWN).width for x in texts}
        if len(kinds) == 1 and None not in kinds and len(widths) == 1:
            out[p.name] = TypeName(kinds.pop(), widths.pop())
    return out


def compile_time_names(tokens: list[Token]) -> frozenset[str]:
    """Names of compile-time values anywhere in the source: `constexpr` variables (`constexpr int N = 4;`, MLX's
    `STEEL_CONST short TM = ...`) and the value parameters of templates (`template <typename T, int BM>`)."""
    out: set[str] = set()
    for i, t in enumerate(tokens):
        if t.text == "constexpr":
            j = i + 1
            while j + 1 < len(tokens) and tokens[j + 1].text not in ("=", ";", "(", "{", ","):
                j += 1
            if j + 1 < len(tokens) and tokens[j + 1].text == "=" and tokens[j].kind is Tok.IDENT:
                out.add(tokens[j].text)
        elif t.text == "template" and i + 1 < len(tokens) and tokens[i + 1].text == "<":
            try:
                params, _ = parse_header(tokens, i)
            except (TemplateSyntaxError, IndexError):
                continue
            out.update(p.name for p in params if p.name and not p.is_type)
    return frozenset(out)


def statement_default(tokens: list[Token], a: int, b: int, env: dict[str, Type], declared: Type | None) -> str:
    """The kind an operator of two unknown operands in tokens[a:b] takes: the declared type of what the statement
    initializes or assigns, else float when a float operand or literal appears in it, else integer."""
    if declared is not None and declared.kind is not None:
        return declared.kind
    for t in tokens[a:b]:
        if t.kind is Tok.NUMBER and not t.text.lower().startswith("0x") and any(c in t.text.lower() for c in ".ef"):
            return "f"
        ty = env.get(t.text) if t.kind is Tok.IDENT else None
        if ty is not None and ty.kind == "f" or t.kind is Tok.IDENT and (type_of_name(t.text) or UNKNOWN).kind == "f":
            return "f"
    return "i"
