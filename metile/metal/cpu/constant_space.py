"""The `constant` address space is read-only: the CPU device spells it `const` wherever it qualifies a type.

In MSL, memory in the `constant` address space cannot be written, in any function: `constant T*` and `constant T&`
point and refer to read-only objects (kernel parameters, parameters and locals of helper functions, casts, template
arguments alike), a program-scope `constant` variable is a constant, and a member function qualified `constant`
runs on an object it cannot change. The compatibility header defines `constant` as nothing (C++ has one address
space), so without this pass `constant int& n` would be a plain `int&`: a helper taking `constant int& n` could not
be passed a `const constant int&` ("binding reference of type int& to const int"), and a write through a
`constant` pointer would compile.

`constant_spellings` decides, for each `constant` word, what C++ sees:

- in a type (`constant T*`, `constant T&`, `constant float x = 1;`, `(constant uint*)p`, `S<constant T*>`), `const`,
  unless its decl-specifier sequence already says `const` (`const constant int&`, `constant const T*`), where the
  word stays empty rather than make a duplicate `const`;
- after a member function's parameters (`float norm() constant`), `const` too, unless that qualifier sequence says
  `const` already, or the function is a constructor or destructor (which C++ cannot qualify).

The address-space pass (`addrspace.py`) compares declarations with these spellings, so `f(thread float&)` and
`f(constant float&)` stay two C++ overloads (`float&` and `const float&`) while `f(const thread float&)` and
`f(constant float&)` are one function.
"""

from __future__ import annotations

import bisect

from metile.metal.cpu.addrspace_scan import ADDRESS_SPACES
from metile.metal.msl_lex import Tok, Token
from metile.metal.msl_templates import TemplateSyntaxError, match_angle

Edit = tuple[int, int, str]

_CV_AND_SPACES = ADDRESS_SPACES | {"const", "volatile"}
_CLASS_KEYS = frozenset({"struct", "class", "union"})


def constant_spellings(tokens: list[Token]) -> dict[int, str]:
    """For the index of each `constant` word of `tokens`: "const" where it adds const, "" where it adds nothing
    (see the module docstring)."""
    out: dict[int, str] = {}
    for k, t in enumerate(tokens):
        if t.kind is Tok.IDENT and t.text == "constant":
            out[k] = _spelling(tokens, k)
    return out


def constant_edits(tokens: list[Token], spellings: dict[int, str]) -> list[Edit]:
    """The edits that write `const` for the `constant` words that add it."""
    return [(tokens[k].start, tokens[k].end, s) for k, s in spellings.items() if s]


def spelled_texts(tokens: list[Token], start: int, end: int, spellings: dict[int, str]) -> tuple[str, ...]:
    """The texts of tokens[start:end] as C++ reads them (directives left out): a `constant` word becomes `const`
    or goes, as spelled."""
    out = []
    for k in range(start, end):
        t = tokens[k]
        if t.kind is Tok.DIRECTIVE:
            continue
        if t.text == "constant" and t.kind is Tok.IDENT:
            if spellings.get(k):
                out.append(spellings[k])
        else:
            out.append(t.text)
    return tuple(out)


def const_chooses_the_space(variants: dict[tuple[str, ...], list]) -> bool:
    """Whether choosing between a const and a non-const variant by const alone picks, for every call Metal
    accepts, the variant of the object's (or argument's) address space: when no space but `constant`, whose objects
    are always const here, has only the const variant (`T get() thread` and `T get() constant`).
    A declaration without an address-space word is a thread one."""
    if len(variants) != 2:
        return False
    (a, da), (b, db) = sorted(variants.items(), key=lambda kv: kv[0].count("const"))
    if a.count("const") == b.count("const"):
        return False

    def spaces(ds: list) -> set[str]:
        return {sp for _, sps in ds for sp in (sps or ("thread",))}

    return not spaces(db) - spaces(da) - {"constant"}


def clear_of(mine: list[Edit], others: list[Edit]) -> list[Edit]:
    """The edits of `mine` whose span no edit of `others` replaces (a blanked declaration, a rewritten function
    constant): the wider edit decides that text."""
    spans = sorted((s, e) for s, e, _ in others if e > s)
    starts = [s for s, _ in spans]
    reach: list[int] = []   # reach[n]: the furthest end among spans[:n + 1]
    for _, e in spans:
        reach.append(max(e, reach[-1]) if reach else e)
    kept = []
    for s, e, text in mine:
        n = bisect.bisect_left(starts, e) - 1   # the spans starting before this edit ends
        if n < 0 or reach[n] <= s:
            kept.append((s, e, text))
    return kept


def _spelling(tokens: list[Token], k: int) -> str:
    j = _skip_back(tokens, k - 1)
    while j >= 0 and tokens[j].text in _CV_AND_SPACES:
        j = _skip_back(tokens, j - 1)
    if j >= 0 and tokens[j].text == ")":
        return _qualifier_spelling(tokens, k, j)
    # a type: its decl-specifier sequence runs over words and `::` (and template arguments after the word)
    n = _skip_back(tokens, k - 1)
    while n >= 0 and (tokens[n].kind is Tok.IDENT or tokens[n].text == "::"):
        if tokens[n].text == "const":
            return ""
        n = _skip_back(tokens, n - 1)
    n = k + 1
    while n < len(tokens):
        t = tokens[n]
        if t.text == "const":
            return ""
        if t.text == "<" and n > k + 1:
            try:
                n = match_angle(tokens, n) + 1
            except TemplateSyntaxError:
                return "const"
            continue
        if not (t.kind in (Tok.IDENT, Tok.DIRECTIVE) or t.text == "::"):
            break
        n += 1
    return "const"


def _qualifier_spelling(tokens: list[Token], k: int, close: int) -> str:
    """The spelling of `constant` among the qualifiers after the `)` at `close`."""
    n = close + 1
    while n < len(tokens) and (tokens[n].text in _CV_AND_SPACES or tokens[n].kind is Tok.DIRECTIVE):
        if tokens[n].text == "const":
            return ""
        n += 1
    name = _skip_back(tokens, _open_paren(tokens, close) - 1)
    if name < 0 or tokens[name].kind is not Tok.IDENT:
        return "const"   # an operator: never a constructor
    before = _skip_back(tokens, name - 1)
    if before >= 0 and tokens[before].text == "~":
        return ""        # a destructor
    if before >= 0 and tokens[before].text == "::":
        owner = _skip_back(tokens, before - 1)
        if owner >= 0 and tokens[owner].text in (">", ">>"):
            owner = _open_angle(tokens, owner)
        return "" if owner >= 0 and tokens[owner].text == tokens[name].text else "const"   # `X::X(...)`
    return "" if _enclosing_class(tokens, k) == tokens[name].text else "const"


def _skip_back(tokens: list[Token], j: int) -> int:
    while j >= 0 and tokens[j].kind is Tok.DIRECTIVE:
        j -= 1
    return j


def _open_paren(tokens: list[Token], close: int) -> int:
    depth = 0
    for j in range(close, -1, -1):
        x = tokens[j].text
        if x == ")":
            depth += 1
        elif x == "(":
            depth -= 1
            if depth == 0:
                return j
    return 0


def _open_angle(tokens: list[Token], close: int) -> int:
    """The name before the template arguments closed at `close` (`X` of `X<T>::`), or -1."""
    depth = 0
    for j in range(close, -1, -1):
        x = tokens[j].text
        if x in (">", ">>"):
            depth += len(x)
        elif x == "<":
            depth -= 1
            if depth <= 0:
                return _skip_back(tokens, j - 1)
        elif x in (";", "{", "}"):
            break
    return -1


def _enclosing_class(tokens: list[Token], k: int) -> str:
    """The name of the class whose body holds tokens[k] directly, or ""."""
    depth = 0
    for j in range(k - 1, -1, -1):
        x = tokens[j].text
        if x == "}":
            depth += 1
        elif x == "{":
            if depth == 0:
                return _class_name(tokens, j)
            depth -= 1
    return ""


def _class_name(tokens: list[Token], brace: int) -> str:
    """The name of the class whose body the `{` at `brace` opens, or "" if it opens no class body."""
    j = brace
    while j > 0 and tokens[j - 1].text not in (";", "{", "}"):
        j -= 1
    while j < brace and tokens[j].text == "template" and tokens[j + 1].text == "<":
        try:
            j = match_angle(tokens, j + 1) + 1
        except TemplateSyntaxError:
            return ""
    while j < brace:
        t = tokens[j]
        if t.text == "(":
            return ""
        if t.kind is Tok.IDENT and t.text in _CLASS_KEYS:
            j += 1
            while j < brace and tokens[j].text in ("[[", "alignas"):   # attributes before the name
                j = _after_bracket(tokens, j)
            return tokens[j].text if j < brace and tokens[j].kind is Tok.IDENT else ""
        j += 1
    return ""


def _after_bracket(tokens: list[Token], j: int) -> int:
    """The index after `[[...]]` or `alignas(...)` starting at j."""
    opener = {"[[": "]]", "alignas": ")"}[tokens[j].text]
    while j < len(tokens) and tokens[j].text != opener:
        j += 1
    return j + 1
