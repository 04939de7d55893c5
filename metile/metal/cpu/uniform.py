"""Which expressions of an MSL function hold one value across a simdgroup, read from its tokens alone.

`arms.py` refuses a simd collective in an operand of `&&`, `||` or `?:` that only some lanes may evaluate. MLX's
kernels guard a collective behind a condition every lane of a threadgroup computes alike (`if
(params->tiles_n <= static_cast<int>(tid.x) || !schedule_row_tile<BM>(..., simd_lane_id, ...)) return;`): all the
lanes of a simdgroup then evaluate the collective, or none does, and it can run. This module says when an
expression is such a condition, conservatively: every name in it is

- a parameter of the function in the `constant` address space (a struct read through it, `params->M`, is the
  same for every thread), or one whose attribute is the same for every lane of a simdgroup
  (`threadgroup_position_in_grid`, `threads_per_threadgroup`, `simdgroup_index_in_threadgroup`, ...);
- a template parameter of the function, a `constexpr` name of its body, or a function constant of the source
  (or a program-scope constant made from them), as the front end's `ConstantTable` lists them;
- a member named after `.` or `->` (its object decides), a type or a cast (`static_cast`, `int`, `uint3`), or a
  literal word (`true`).

Any other name (a local variable, a device-memory parameter, a call of a function) makes the expression
lane-varying, and the collective stays refused.
"""

from __future__ import annotations

import re

from metile.metal.msl_lex import Tok, Token

UNIFORM_ATTRIBUTES = frozenset({
    "threadgroup_position_in_grid", "threadgroups_per_grid", "threads_per_threadgroup", "threads_per_grid",
    "dispatch_threads_per_threadgroup", "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup", "threads_per_simdgroup", "grid_origin", "grid_size",
})
"""Attributes of kernel parameters whose value every lane of a simdgroup shares."""

_WORDS = frozenset({
    "static_cast", "reinterpret_cast", "const_cast", "as_type", "sizeof", "alignof", "true", "false", "nullptr",
    "const", "constant", "device", "threadgroup", "thread", "size_t", "ptrdiff_t", "metal", "std",
})
_SCALARS = ("bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "float", "bfloat")
_TYPE = re.compile(rf"(?:{'|'.join(_SCALARS)})[234]?|u?int(?:8|16|32|64)_t")


def is_uniform(tokens: list[Token], start: int, end: int, names: frozenset[str]) -> bool:
    """Whether tokens[start:end] is an expression with one value across a simdgroup: each name in it is one of
    `names` (`uniform_names`), a member, a type, a cast or a literal word."""
    for k in range(start, end):
        t = tokens[k]
        if t.kind is not Tok.IDENT or t.text in names or t.text in _WORDS or _TYPE.fullmatch(t.text):
            continue
        if k > start and tokens[k - 1].text in (".", "->"):
            continue   # a member: its object is checked where it stands
        return False   # a local, a device-memory parameter, a call: it may differ from lane to lane
    return True


def uniform_names(tokens: list[Token], params: tuple[int, int], lbrace: int, close: dict[int, int],
                  constants: frozenset[str]) -> frozenset[str]:
    """The names of the function whose parameter list is tokens[params[0]:params[1]] (the parentheses' indices)
    and whose body opens at tokens[lbrace] that hold one value across a simdgroup: see the module docstring."""
    names = set(constants)
    names |= _uniform_parameters(tokens, params[0] + 1, params[1])
    names |= _template_parameters(tokens, params[0] - 1)
    end = close[lbrace]
    for k in range(lbrace + 1, end):   # `constexpr T name = ...;`
        if tokens[k].text == "constexpr":
            j = k + 1
            while j < end and tokens[j].text not in ("=", ";", "{", "("):
                j += 1
            if j < end and tokens[j].text == "=" and tokens[j - 1].kind is Tok.IDENT:
                names.add(tokens[j - 1].text)
    return frozenset(names)


def _uniform_parameters(tokens: list[Token], start: int, end: int) -> set[str]:
    """Parameters in the `constant` address space or with a simdgroup-uniform attribute, from a parameter list."""
    out: set[str] = set()
    depth, first = 0, start
    for k in range(start, end + 1):
        x = tokens[k].text if k < end else ","
        if x in ("(", "[", "<", "[["):
            depth += 1
        elif x in (")", "]", ">", "]]"):
            depth -= 1
        elif x == "," and depth == 0:
            part = tokens[first:k]
            first = k + 1
            words = [t.text for t in part]
            name = _declared_name(part)
            if name is None:
                continue
            if "constant" in words or any(w in UNIFORM_ATTRIBUTES for w in words):
                out.add(name)
    return out


def _declared_name(part: list[Token]) -> str | None:
    """The name a parameter declares: the last identifier before its attributes (`uint3 tid [[...]]`)."""
    stop = next((i for i, t in enumerate(part) if t.text == "[["), len(part))
    names = [t.text for t in part[:stop] if t.kind is Tok.IDENT]
    return names[-1] if len(names) >= 2 else None


def _template_parameters(tokens: list[Token], k: int) -> set[str]:
    """The parameter names of the `template <...>` clause in front of the declaration whose name ends at
    tokens[k], if any: walks back over the return type and attributes to a `>` closing `template <`."""
    while k >= 0 and tokens[k].text not in (">", ";", "{", "}"):
        if tokens[k].text == "]]":   # [[kernel, max_total_threads_per_threadgroup(...)]]
            while k >= 0 and tokens[k].text != "[[":
                k -= 1
        k -= 1
    if k < 0 or tokens[k].text != ">":
        return set()
    depth, j = 0, k
    while j >= 0:
        x = tokens[j].text
        depth += 1 if x == ">" else -1 if x == "<" else 0
        if depth == 0:
            break
        j -= 1
    if j < 1 or tokens[j - 1].text != "template":
        return set()
    out = set()
    for i in range(j + 1, k):
        if tokens[i].kind is Tok.IDENT and tokens[i + 1].text in (",", ">", "=") and tokens[i - 1].text != "=":
            out.add(tokens[i].text)
    return out


__all__ = ["UNIFORM_ATTRIBUTES", "is_uniform", "uniform_names"]
