"""The checked build of a kernel: every device pointer checks its accesses (include/mt_checked.h).

The CPU device binds an array in place (no copy into guarded memory) when copying it would cost more than the kernel
(`metile.metal.cpu.dispatch`). Such an array has no guard page after it and no canary before it, so the kernel then
runs a build in which each `device T*` of the source is spelled `device_ptr<T>`: a pointer carrying the byte range of
the buffer it was bound to, which faults at the first access outside it, before reading or writing a byte. The
rewrite is of the spelling only: `device` becomes `device_ptr<` and the `*` that ends the pointer type becomes `>`,
so columns and lines stay where they were. References (`device T&`) stay, as do `constant` and `threadgroup`
pointers: the device binds in place only the arrays of `device T*` parameters of a checked build.

A spelling the rewrite does not follow (a `device` word without its `*` before the end of the declaration, as in
`T device* p` or a declaration that spans a macro) gives no checked build; so does a source that does not compile as
one (a pointer turned into an integer or back, a pointer into a buffer declared from an element's address), and one
that could make a plain pointer into a buffer the C++ compiler would take: the address of an element (`&p[i]`) or a
variable declared `auto`, whose type would be that plain pointer. The device then copies the arrays, as it does by
default.
"""

from __future__ import annotations

import functools

from metile.metal.msl_lex import Tok, Token

# the tokens that can end a type before its `*`: what follows `device` up to there is the pointee type
_STOPS = frozenset({";", "{", "}", "(", ")", ",", "=", "[", "]", "[[", "]]"})


def pointer_edits(tokens: list[Token]) -> list[tuple[int, int, str]] | None:
    """Edits spelling each `device T*` of `tokens` as `device_ptr<T>`; None when some `device` word is not followed by
    a pointer or reference type this rewrite can spell."""
    edits = []
    for i, t in enumerate(tokens):
        if t.text == "&" and _takes_an_elements_address(tokens, i):
            return None
        if t.kind is not Tok.IDENT or t.text not in ("device", "auto"):
            continue
        if t.text == "auto":
            return None
        end = _pointer_end(tokens, i)
        if end is None:
            return None
        if end < 0:   # a reference
            continue
        edits.append((t.start, t.end, "device_ptr<"))
        star = tokens[end]
        edits.append((star.start, star.end, ">"))
    return edits


def _takes_an_elements_address(tokens: list[Token], i: int) -> bool:
    """Whether the `&` at `i` is a unary one applied to an indexed name (`&p[i]`, `&(p[i])`)."""
    before = tokens[i - 1] if i else None
    if before is not None and (before.kind in (Tok.IDENT, Tok.NUMBER) or before.text in (")", "]")):
        return before.text == "return"   # a binary `&` (or a reference declarator), but `return &p[i]`
    j = i + 1
    while j < len(tokens) and tokens[j].text == "(":
        j += 1
    return j + 1 < len(tokens) and tokens[j].kind is Tok.IDENT and tokens[j + 1].text in ("[", "+", "-")


def _pointer_end(tokens: list[Token], i: int) -> int | None:
    """The index of the `*` ending the pointer type that starts with `device` at `i` (-1 for a reference type), or
    None when the type is not spelled `device <type> *` or `device <type> &`."""
    depth = 0
    for j in range(i + 1, len(tokens)):
        t = tokens[j]
        if t.kind is Tok.DIRECTIVE:
            return None
        text = t.text
        if text == "<":
            depth += 1
        elif text == ">":
            depth -= 1
        elif text == ">>":
            depth -= 2
        elif depth == 0 and text in ("*", "&", "&&"):
            return (j if text == "*" else -1) if j > i + 1 else None
        elif depth <= 0 and text in _STOPS:
            return None
    return None


def checked_type(type_text: str) -> str:
    """A parameter's declared type as a checked build spells it (`device const float*` -> `device_ptr<const float>`);
    the text itself when it is not a device pointer."""
    words = type_text.replace("*", " * ").split()
    after = []   # the pointer's own qualifiers (`device float* const`)
    while words and words[-1] in ("const", "volatile"):
        after.insert(0, words.pop())
    if "device" not in words or words[-1] != "*" or words.count("*") != 1:
        return type_text
    at = words.index("device")
    return " ".join([*words[:at], "device_ptr<" + " ".join(words[at + 1:-1]) + ">", *after])


@functools.lru_cache(maxsize=512)
def is_device_pointer(type_text: str) -> bool:
    """Whether a parameter of this declared type is a checked pointer in a checked build (asked per array argument of
    a dispatch left to the device: kept per text)."""
    return checked_type(type_text) != type_text
