"""Finding the function constants of an MSL source (and of the headers it includes): their declarations, the
program-scope constants computed from them, and which constants each kernel uses (see
`metile.metal.function_constants`)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from metile.ir.errors import Loc
from metile.metal.args import element_type
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.function_constants import (
    CONST_PUNCT,
    DEFINED,
    EMPTY,
    ConstantTable,
    DerivedConstant,
    FunctionConstant,
)
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, tokenize
from metile.metal.msl_signature import KernelSignature, SourceErrors
from metile.metal.msl_templates import TemplateSyntaxError, match_angle


@attrs.frozen
class Item:
    """A program-scope declaration: the names it declares (empty: unknown, reached by every kernel), the identifiers
    it mentions and the names it passes to `is_function_constant_defined`."""

    names: frozenset[str]
    idents: frozenset[str]
    guarded: frozenset[str]
    is_kernel: bool = False


def scan(tokens: list[Token], errors: SourceErrors, kernels: tuple[KernelSignature, ...],
         headers: tuple[tuple[str, list[Token]], ...] = ()) -> ConstantTable:
    """The function constants declared in `tokens` (and in the included `headers`: (path, tokens) pairs) and what
    each of `kernels` uses."""
    files = [("", tokens), *headers]
    if not any(t.text in ("function_constant", DEFINED) for _, toks in files for t in toks):
        return EMPTY   # the common case, told by one pass
    constants: list[FunctionConstant] = []
    derived: list[DerivedConstant] = []
    calls: list[tuple[int, int, str]] = []
    for header, toks in files:
        for start, end in _statements(toks):
            stmt = toks[start:end + 1]
            fc = _declaration(stmt, errors, header)
            if fc is not None:
                _check_unique(fc, constants, errors, stmt[0])
                constants.append(fc)
    names = {c.name for c in constants}
    scalars = {c.name for c in constants if c.lanes == 1}   # vectors are not compile-time constants on the CPU
    for header, toks in files:
        for start, end in _statements(toks):
            d = _derived(toks[start:end + 1], scalars | {d.name for d in derived})
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


def _program_scope(tokens: list[Token]):
    """Walk program scope, looking into namespaces: yields ("directive", n, n) for a directive at tokens[n],
    (";", start, n) for a statement ending in `;` at tokens[n], and ("}", start, n) for a definition whose body
    closes at tokens[n]."""
    depth, start, ns = 0, 0, []
    for n, t in enumerate(tokens):
        if t.kind is Tok.DIRECTIVE:
            yield "directive", n, n
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
                yield "}", start, n
                start = n + 1
        elif t.text == ";" and depth == 0:
            if n > start:
                yield ";", start, n
            start = n + 1


def _statements(tokens: list[Token]):
    """(first, last) token indices of each program-scope statement ending in `;` (namespaces are looked into)."""
    for kind, start, end in _program_scope(tokens):
        if kind == ";":
            yield start, end


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
              or (t.kind is Tok.PUNCT and t.text in CONST_PUNCT))
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
        own = [it for it in by_name.get(k.defined_as, ()) if it.is_kernel]   # a host_name kernel: its template
        if not own:
            continue  # not found by name: every constant counts as used
        # a parameter named like a program-scope name hides it in the kernel's body (sdpa_vector_2pass_2's `blocks`)
        hidden = frozenset(p.name for p in k.params)
        own_ids = {id(it) for it in own}
        reached, seen_items, work = set(), set(), [*own, *always]
        while work:
            it = work.pop()
            if id(it) in seen_items:
                continue
            seen_items.add(id(it))
            for ident in (it.idents - hidden if id(it) in own_ids else it.idents) - reached:
                reached.add(ident)
                work += by_name.get(ident, ())
        used = frozenset(reached & names)
        uses[k.name] = used
        guarded[k.name] = frozenset(g for it in items if id(it) in seen_items for g in it.guarded)
    return uses, guarded


def _items(tokens: list[Token]) -> list[Item]:
    items = []
    for kind, start, end in _program_scope(tokens):
        if kind != "directive":
            items.append(_item(tokens[start:end + 1]))
            continue
        text = tokens[start].text
        m = _DEFINE.match(text)
        if m is not None:
            words = frozenset(_WORD.findall(text[m.end():]))
            guarded = frozenset(_GUARD.findall(text[m.end():]))
            items.append(Item(frozenset({m.group(1)}), words, guarded))
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
    """The name a program-scope declaration declares (a template's name; an explicit instantiation counts as
    declaring the template it instantiates), or None when unknown."""
    n = 0
    while n + 1 < len(toks) and toks[n].text == "template" and toks[n + 1].text == "<":
        try:
            n = match_angle(toks, n + 1) + 1   # a template header: its parameters are not the declared name
        except TemplateSyntaxError:
            return None
    instantiation = n == 0 and bool(toks) and toks[0].text == "template"
    top = []
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
    if instantiation:   # `template [[host_name("x")]] [[kernel]] decltype(f<A>) f<A>;`, `template void f<A>(...);`
        return next((w for w, nxt in zip(words, words[1:]) if nxt == "<" and w.isidentifier()
                     and w not in ("template", "decltype")), None)
    for kw in ("struct", "class", "union", "enum"):
        if kw in words and "(" not in words[:words.index(kw)]:
            rest = [w for w in words[words.index(kw) + 1:] if w not in ("class", "struct")]
            return rest[0] if rest and rest[0].isidentifier() else None
    at = next((n for n, w in enumerate(words) if w in ("(", "=", "[", ";", "{")), None)
    prev = top[at - 1] if at else None
    if prev is not None and prev.kind is Tok.IDENT and prev.text not in ("operator", "decltype"):
        return prev.text
    return None
