"""Address spaces on the CPU device, which has one flat address space.

In MSL `device`, `threadgroup`, `constant` and `thread` take part in overloading: a member function or a
constructor may be defined once per address space of its object (`operator vec<T, 2>() const thread` and
`... const device`), a class template may be partially specialized per pointer address space
(`S<thread T*>`, `S<device T*>`), and a free function may be overloaded on the address space of a reference
or pointer (`f(thread T&)`, `f(device T&)`). The compatibility header defines those words as nothing, so
such overloads would become redefinitions. With one address space they are one function when their bodies
are the same once the words are erased from them too: `merge_overloads` keeps one and blanks the others
(line breaks and directives stay, so `#line` mapping holds). Overloads whose bodies differ are
refused: keeping either would run the wrong code for the callers of the other.

Collisions are looked for among the declarations of one namespace (namespaces reopen) or one class body,
in one branch of `#if` directives, comparing heads token by token: a template head is part of a head, and
`integral_constant` or `thread_position_in_grid` are other words than `constant` and `thread`. The
variant kept is the one declared first among those defined in the group (so that uses between a prototype
and the definitions still see a declaration); declarations without a body (prototypes, in-class
declarations of members defined out of class, which group with the out-of-class definitions of their own
scope) follow that choice. Definitions that differ in address space and in `const` (`T get() thread` and
`T get() const device`) stay overloads, chosen by const alone on the CPU: they are refused when their
bodies differ. A class template specialized on some address spaces but not all (`is_dev<device T*>`) whose
primary definition is not empty is refused too: erased, the specialization would take every pointer.

The same scan catches the commonest address-space mistake that the single address space would otherwise
run: a pointer declared in one address space and initialized from a parameter (or a local) that points
to another (`threadgroup float* t = src;` with `device float* src`), which MSL refuses. It looks only at
functions that are not templates, where Metal checks such initializations when it reads the function.
"""

from __future__ import annotations

import bisect
import re

from metile.metal.cpu.addrspace_scan import (
    ADDRESS_SPACES,
    Decl,
    Scan,
    error_at,
    head_text,
    logical_loc,
    scan,
)
from metile.metal.cpu.constant_space import (
    const_chooses_the_space,
    constant_edits,
    constant_spellings,
    spelled_texts,
)
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, split_top_level
from metile.metal.msl_signature import SourceErrors

Edit = tuple[int, int, str]

_POINTER_SPACES = frozenset({"device", "constant", "threadgroup", "thread"})
_WORDS = ADDRESS_SPACES | {"kernel"}
_NOT_A_TYPE = frozenset({"return", "case", "else", "do", "throw", "new", "delete", "sizeof", "goto",
                         "co_return", "co_yield", "alignof", "decltype", "const_cast", "static_cast"})
_NOT_A_NAME = frozenset({"decltype", "noexcept", "alignas", "__attribute__", "sizeof", "alignof"})
_DEFINE = re.compile(r"\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)")
_BLANK = re.compile(r"[^\n]")


def address_space_edits(src: str, tokens: list[Token], errors: SourceErrors) -> tuple[list[Edit], list[Edit]]:
    """The edits that make address-space overloads one function (and refusals of what cannot be run), and those
    that spell `constant` as `const` (`constant_space.py`; they yield to any other edit of the same text)."""
    texts = [t.text for t in tokens]
    spellings = constant_spellings(tokens) if "constant" in texts else {}
    const_edits = constant_edits(tokens, spellings)
    words = [k for k, x in enumerate(texts) if x in _WORDS]
    if not _outside_kernel_parameters(tokens, words):
        return [], const_edits
    sc = scan(tokens, texts)
    if sc is None:
        return [], const_edits
    edits, dropped = merge_overloads(sc, src, errors, spellings)
    refuse_pointer_mismatches(sc, dropped, errors, [k for k in words if texts[k] in _POINTER_SPACES])
    return edits, const_edits


def _outside_kernel_parameters(tokens: list[Token], words: list[int]) -> bool:
    """Whether an address-space word appears anywhere but in a kernel's parameter list (where every kernel
    has them, and where they neither overload nor initialize anything): the pass has nothing to do if not."""
    params_end = -1
    for k in words:
        if tokens[k].text != "kernel":
            if k > params_end:
                return True
            continue
        j = k + 1
        if tokens[k - 1].text in ("[[", ","):  # [[kernel, ...]]: the parameters come after the attribute
            while j < len(tokens) and tokens[j].text != "]]":
                j += 1
        while j < len(tokens) and tokens[j].text != "(":
            j += 1
        try:
            params_end = match_paren(tokens, j) if j < len(tokens) else params_end
        except LexError:
            return True
    return False


def merge_overloads(sc: Scan, src: str, errors: SourceErrors,
                    spellings: dict[int, str]) -> tuple[list[Edit], set[Decl]]:
    """Blank every declaration that differs only in address-space words from the one kept (see the module
    docstring; `constant` counts as the `const` it is spelled as); returns the edits and the declarations blanked."""
    toks = sc.tokens
    groups: dict[tuple, list[tuple[Decl, tuple[str, ...]]]] = {}
    spelled: dict[Decl, tuple[str, ...]] = {}
    for d in sc.decls:
        if d.opaque or d.is_kernel:
            continue
        raw = tuple(t.text for t in toks[d.start:d.head_end] if t.kind is not Tok.DIRECTIVE)
        spelled[d] = spelled_texts(toks, d.start, d.head_end, spellings) if "constant" in raw else raw
        erased = tuple(x for x in spelled[d] if x not in ADDRESS_SPACES)
        groups.setdefault((d.scope, d.branch, erased), []).append((d, raw))
    edits: list[Edit] = []
    dropped: set[Decl] = set()
    for members in groups.values():
        if len(members) < 2 or len({raw for _, raw in members}) < 2:
            continue
        definitions = [(d, raw) for d, raw in members if d.has_body]
        # keep the variant declared first among those defined here, so that earlier uses still see a declaration
        defined = {raw for _, raw in definitions}
        keep_raw = next((raw for _, raw in members if raw in defined), members[0][1])
        keep = next((d for d, raw in definitions if raw == keep_raw), members[0][0])
        for d, raw in definitions:
            if raw != keep_raw and _erased_body(sc, d) != _erased_body(sc, keep):
                raise _differing_bodies(sc, src, errors, keep, d)
        for d, raw in members:
            if raw != keep_raw:
                dropped.add(d)
                edits += _blank(sc, src, d)
    _refuse_choice_by_const(sc, src, errors, [m for ms in groups.values() for m in ms], spelled)
    _refuse_widened_specializations(sc, src, errors, groups)
    return edits, dropped


def _refuse_widened_specializations(sc: Scan, src: str, errors: SourceErrors, groups: dict) -> None:
    """Refuse specializations on some address spaces only (`is_dev<device T*>`) of a template whose primary
    definition says something: with the words erased they would also take the other spaces' pointers,
    which get the primary on Metal."""
    toks = sc.tokens
    primaries: dict[tuple, Decl] = {}
    for d in sc.decls:
        if d.is_class and d.name_at >= 0 and toks[d.name_at + 1].text != "<":
            primaries.setdefault((d.scope, toks[d.name_at].text), d)
    for members in groups.values():
        d = members[0][0]
        if not d.is_class or d.name_at < 0 or toks[d.name_at + 1].text != "<":
            continue
        spaces = {x for m, _ in members for x in _argument_words(sc, m, upto=":") if x in _POINTER_SPACES}
        primary = primaries.get((d.scope, toks[d.name_at].text))
        if not spaces or spaces >= _POINTER_SPACES or primary is None or primary.opaque:
            continue
        if toks[primary.head_end + 1].text == "}" and ":" not in _argument_words(sc, primary):
            continue  # an empty primary: Metal would refuse the other spaces' uses, which cannot run wrong here
        at = logical_loc(sc, primary.start, errors)
        others = ", ".join(sorted(_POINTER_SPACES - spaces))
        raise error_at(
            sc, d.start, errors,
            f"`{head_text(sc, src, d)}` specializes on the {' and '.join(sorted(spaces))} address space but not "
            f"on {others}; the CPU device has a single address space, so it would also take the {others} "
            f"pointers that get `{head_text(sc, src, primary)}` (at {at.file}:{at.line}) on Metal",
            MSLUnsupportedError)


def _argument_words(sc: Scan, d: Decl, upto: str = "") -> list[str]:
    """The words of a class head after its name: specialization arguments, then base classes (not with
    upto=":")."""
    words = sc.texts[d.name_at + 1:d.head_end]
    return words[:words.index(upto)] if upto in words else words


def _refuse_choice_by_const(sc: Scan, src: str, errors: SourceErrors,
                            members: list[tuple[Decl, tuple[str, ...]]], spelled: dict) -> None:
    """Refuse definitions that differ in `const` and are not defined in the same address spaces
    (`T get() thread` and `T get() const device`, or `T get() constant`) when their bodies differ: with one
    address space, calls choose between them by const alone (a non-const device object would run the thread
    body), while on Metal the object's space chooses. Overloads on const defined alike in every space choose
    alike."""
    groups: dict[tuple, dict[tuple[str, ...], list]] = {}
    for d, raw in members:
        if d.has_body:
            erased = tuple(x for x in spelled[d] if x not in ADDRESS_SPACES)
            loose = tuple(x for x in erased if x not in ("const", "volatile"))
            variants = groups.setdefault((d.scope, d.branch, loose), {})
            variants.setdefault(erased, []).append((d, tuple(x for x in raw if x in ADDRESS_SPACES)))
    for variants in groups.values():
        if len(variants) < 2 or len({frozenset(sp for _, sp in ds) for ds in variants.values()}) < 2:
            continue
        if const_chooses_the_space(variants):
            continue
        first = [ds[0][0] for ds in variants.values()]
        for second in first[1:]:
            if _erased_body(sc, first[0]) != _erased_body(sc, second):
                raise _differing_bodies(sc, src, errors, first[0], second, " and const")


def _erased_body(sc: Scan, d: Decl) -> tuple[str, ...]:
    return tuple(t.text for t in sc.tokens[d.head_end:d.end]
                 if t.kind is not Tok.DIRECTIVE and not (t.kind is Tok.IDENT and t.text in ADDRESS_SPACES))


def _differing_bodies(sc: Scan, src: str, errors: SourceErrors, first: Decl, second: Decl,
                      also: str = "") -> MSLCompileError:
    at = logical_loc(sc, first.start, errors)
    then = ("calls would choose between them by const alone" if also
            else "they would be one function there, and it cannot run both")
    return error_at(
        sc, second.start, errors,
        f"`{head_text(sc, src, second)}` and `{head_text(sc, src, first)}` (at {at.file}:{at.line}) differ "
        f"only in address space{also}, and their bodies differ; the CPU device has a single address space, "
        f"so {then}",
        MSLUnsupportedError)


def _blank(sc: Scan, src: str, d: Decl) -> list[Edit]:
    """White space for the declaration's text, keeping its line breaks and any directives inside it."""
    edits: list[Edit] = []
    pos = sc.tokens[d.start].start
    for t in sc.tokens[d.start:d.end]:
        if t.kind is Tok.DIRECTIVE:
            if t.start > pos:
                edits.append((pos, t.start, _BLANK.sub(" ", src[pos:t.start])))
            pos = t.end
    end = sc.tokens[d.end - 1].end
    if end > pos:
        edits.append((pos, end, _BLANK.sub(" ", src[pos:end])))
    return edits


def refuse_pointer_mismatches(sc: Scan, dropped: set[Decl], errors: SourceErrors, spaces: list[int]) -> None:
    """Refuse `S T* p = q;` (or `= q + n`, `= &q[i]`, `= &r`) where q points (r refers) to another space;
    `spaces` are the indices of the tokens `device`, `constant`, `threadgroup` and `thread`."""
    for d in sc.decls:
        if d.has_body and not (d.is_class or d.templated or d.opaque) and d not in dropped:
            lo, hi = bisect.bisect_left(spaces, d.head_end), bisect.bisect_left(spaces, d.end)
            if lo < hi:
                _check_function(sc, d, spaces[lo:hi], errors)


def _check_function(sc: Scan, d: Decl, spaces: list[int], errors: SourceErrors) -> None:
    """`spaces`: the indices of the address-space words in the body of `d`."""
    toks = sc.tokens
    locals_: list[tuple[int, int, str, int]] = []   # (statement start, name index, space, initializer start)
    for k in spaces:
        stmt = k - 1 if toks[k - 1].text in ("const", "volatile") else k
        if toks[stmt - 1].text in (";", "{", "}"):
            found = _local_pointer(toks, stmt, d.end)
            if found is not None:
                locals_.append((stmt, *found))
    if not locals_:
        return
    known: dict[str, tuple[str, str, int]] = {}   # name -> (address space, "*" or "&", token index)
    params = _parameter_list(sc, d)
    if params is not None:
        for run in split_top_level(toks[params[0] + 1:params[1]]):
            found = _pointer_declarator(run)
            if found is not None:
                space, kind, name = found
                known[name.text] = (space, kind, toks.index(name, params[0], params[1]))
    redeclared: set[str] = set()
    for _, name_at, space, _ in locals_:
        name = toks[name_at].text
        if name in known and known[name][2] != name_at:
            redeclared.add(name)
        known[name] = (space, "*", name_at)
    for stmt, name_at, space, init in locals_:
        source = _pointer_source(toks, init, d.end)
        if source is None:
            continue
        src_at, kind = source
        name = toks[src_at].text
        if name in redeclared or name not in known or known[name][1] != kind or known[name][2] > stmt:
            continue
        src_space = known[name][0]
        if src_space != space and not _maybe_other(sc, d, name, {n for _, n, _, _ in locals_}):
            what = "refers" if kind == "&" else "points"
            at = logical_loc(sc, known[name][2], errors)
            raise error_at(
                sc, stmt, errors,
                f"`{toks[name_at].text}` is a {space} pointer, but `{name}` (declared at {at.file}:{at.line}) "
                f"{what} to {src_space} memory; MSL does not convert pointers between address spaces")


def _maybe_other(sc: Scan, d: Decl, name: str, declared_at: set[int]) -> bool:
    """Whether `name` may mean something else than the declaration the check found: a macro, or a name
    declared again in the body (`T name`, `T* name`, `T& name`) that the check did not read."""
    toks = sc.tokens
    if any(t.kind is Tok.DIRECTIVE and (m := _DEFINE.match(t.text)) and m.group(1) == name for t in toks):
        return True
    return any(toks[k].text == name and k not in declared_at and _may_declare(toks, k)
               for k in range(d.head_end, d.end))


def _parameter_list(sc: Scan, d: Decl) -> tuple[int, int] | None:
    toks, found, k = sc.tokens, None, d.start
    while k < d.head_end:
        if toks[k].text == "(":
            if k == d.start or toks[k - 1].text not in _NOT_A_NAME:
                found = (k, sc.close[k])
            k = sc.close[k] + 1
        elif toks[k].text == "[[":
            while k < d.head_end and toks[k].text != "]]":
                k += 1
            k += 1
        else:
            k += 1
    return found


def _pointer_declarator(run: list[Token]) -> tuple[str, str, Token] | None:
    """(space, "*" or "&", name) of a parameter `[const] S [const] T [const]* name` (or `& name`)."""
    cut = next((n for n, t in enumerate(run) if t.text in ("[[", "=")), len(run))
    run = run[:cut]
    spaces = [t.text for t in run if t.kind is Tok.IDENT and t.text in _POINTER_SPACES]
    marks = [t.text for t in run if t.text in ("*", "&", "&&")]
    if len(spaces) != 1 or len(marks) != 1 or marks[0] == "&&" or len(run) < 3:
        return None
    name = run[-1]
    if name.kind is not Tok.IDENT or name.text in ADDRESS_SPACES or run[-2].text not in ("*", "&", "const"):
        return None
    if any(t.text in ("(", "[", "<", ">", ",", "::") for t in run):  # keep to plain types
        return None
    return spaces[0], "&" if marks[0] == "&" else "*", name


def _local_pointer(toks: list[Token], k: int, end: int) -> tuple[int, str, int] | None:
    """(name index, space, initializer start) of a statement `[const] S [const] T* name = ...` at k."""
    j = k
    while j < end and toks[j].text in ("const", "volatile"):
        j += 1
    if j >= end or toks[j].text not in _POINTER_SPACES:
        return None
    space = toks[j].text
    stars = angle = 0
    j += 1
    while j < end:
        t = toks[j]
        x = t.text
        if x == "=" and angle == 0:
            break
        if x == "*":
            stars += 1
        elif x == "<":
            angle += 1
        elif x in (">", ">>"):
            angle -= len(x)
        elif not (t.kind in (Tok.IDENT, Tok.NUMBER) or x == "::" or (x == "," and angle > 0)):
            return None
        j += 1
    name_at = j - 1
    if j >= end or stars != 1 or angle != 0 or toks[name_at].kind is not Tok.IDENT or toks[name_at - 1].text != "*":
        return None
    return name_at, space, j + 1


def _pointer_source(toks: list[Token], init: int, end: int) -> tuple[int, str] | None:
    """The parameter or local an initializer takes its pointer from: `q`, `q + e`, `q - e`, `&q[e]` or `&r`."""
    stop = init
    try:
        while stop < end and toks[stop].text not in (";", ","):
            stop = match_paren(toks, stop) + 1 if toks[stop].text in ("(", "[") else stop + 1
        bracket_end = match_paren(toks, init + 2) if stop - init > 3 and toks[init + 2].text == "[" else -1
    except LexError:
        return None
    expr = toks[init:stop]
    if not expr or stop >= end:
        return None
    if expr[0].kind is Tok.IDENT:
        rest = expr[1:]
        if not rest or (rest[0].text in ("+", "-") and not any(
                t.text in ("?", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "=") for t in rest)):
            return init, "*"
        return None
    if expr[0].text == "&" and len(expr) >= 2 and expr[1].kind is Tok.IDENT:
        if len(expr) == 2:
            return init + 1, "&"
        if bracket_end == stop - 1:
            return init + 1, "*"
    return None


def _may_declare(toks: list[Token], k: int) -> bool:
    """Whether the name at k may be declared there (`T name`, `T* name`, `T& name`): a shadowing name is
    not the parameter, so the check leaves it alone."""
    prev = toks[k - 1]
    if prev.text in ("*", "&", "&&"):
        prev = toks[k - 2]
        if prev.text in ("*", "&", "const", "volatile"):
            return True
    if prev.kind is Tok.IDENT:
        return prev.text not in _NOT_A_TYPE
    return prev.text in (">", ">>")
