"""Declarations of an MSL source by scope, as the address-space pass needs them (see `addrspace.py`).

This is not a C++ parser: it walks the token list once, reads the declarations of each namespace and class
body (and of `extern "C" { ... }` blocks), and jumps over function bodies and initializers with a bracket
table built in the same linear pass. For each declaration it records where its head (what overloading
compares: template heads, return type, name, parameters, qualifiers) ends and where its body (a function's
constructor initializers and braces, a class's braces and declarators) ends.

Text that went through the C preprocessor may carry `#line` / `# N "file"` markers anywhere; they are kept
out of every comparison and `logical_loc` maps a token back to the file and line they name. Text that did
not may still hold `#if` blocks: each declaration records the branch of `#if` directives it starts in, and
one that contains a conditional directive is marked `opaque` so that no rewrite touches it.
"""

from __future__ import annotations

import bisect
import re

import attrs

from metile.ir.errors import Loc
from metile.metal.errors import MSLCompileError
from metile.metal.msl_lex import Tok, Token
from metile.metal.msl_signature import SourceErrors

ADDRESS_SPACES = frozenset({
    "device", "constant", "threadgroup", "thread", "threadgroup_imageblock", "ray_data", "object_data",
})
_CLASS_KEYS = frozenset({"struct", "class", "union", "enum"})
_BRACKETS = frozenset({"(", ")", "{", "}"})
_ACCESS = frozenset({"public", "private", "protected"})
_CONDITIONAL = frozenset({"if", "ifdef", "ifndef", "elif", "else", "endif", "elifdef", "elifndef"})
_LINE_MARKER = re.compile(r'\s*#\s*(?:line\s+)?([0-9]+)(?:\s+"((?:[^"\\]|\\.)*)")?')
_DIRECTIVE_WORD = re.compile(r"\s*#\s*([A-Za-z_]*)")


@attrs.frozen
class Decl:
    """One declaration: tokens[start:head_end] is its head, tokens[head_end:end] its body (empty without one)."""

    scope: tuple
    branch: tuple        # the `#if` branches it starts in
    start: int
    head_end: int
    end: int
    has_body: bool
    is_kernel: bool
    is_class: bool       # a class or enum definition (its members are declarations of their own)
    templated: bool      # a template, or a member of a class template
    opaque: bool         # holds a conditional directive: left alone
    name_at: int = -1    # a class definition's name (a specialization's is followed by `<`)


@attrs.frozen
class Scan:
    tokens: list[Token]
    texts: list[str]
    decls: tuple[Decl, ...]
    line_markers: tuple[int, ...]   # indices of `#line` directive tokens
    close: list[int]                # close[k]: the index of the bracket closing `(` or `{` at k


def scan(tokens: list[Token], texts: list[str]) -> Scan | None:
    """The declarations of every namespace and class body; None if the brackets do not balance (the C++
    compiler then reports the source as it is)."""
    walker = _Walker(tokens, texts)
    if not walker.ok:
        return None
    walker.scope_body(0, len(tokens), (), False)
    return Scan(tokens, texts, tuple(walker.decls), tuple(walker.markers), walker.close)


def directive_word(tok: Token) -> str:
    m = _DIRECTIVE_WORD.match(tok.text)
    return m.group(1) if m else ""


def logical_loc(sc: Scan, index: int, errors: SourceErrors) -> Loc:
    """The file and line of tokens[index] as `#line` markers before it name them."""
    tok = sc.tokens[index]
    file, line = errors.metal_name, tok.line
    k = bisect.bisect_left(sc.line_markers, index) - 1
    if k >= 0:
        marker = sc.tokens[sc.line_markers[k]]
        m = _LINE_MARKER.match(marker.text)
        if m is not None:
            marker_end_line = marker.line + marker.text.count("\n")
            line = int(m.group(1)) + tok.line - marker_end_line - 1
            file = m.group(2) if m.group(2) is not None else _marker_file(sc, k, errors.metal_name)
    return Loc(file, line, tok.col)


def _marker_file(sc: Scan, k: int, default: str) -> str:
    for j in range(k - 1, -1, -1):
        m = _LINE_MARKER.match(sc.tokens[sc.line_markers[j]].text)
        if m is not None and m.group(2) is not None:
            return m.group(2)
    return default


def error_at(sc: Scan, index: int, errors: SourceErrors, message: str,
             cls: type[MSLCompileError] = MSLCompileError) -> MSLCompileError:
    tok = sc.tokens[index]
    source_line = errors.lines[tok.line - 1] if 0 < tok.line <= len(errors.lines) else ""
    return cls(message, logical_loc(sc, index, errors), source_line=source_line)


def head_text(sc: Scan, src: str, d: Decl, limit: int = 120) -> str:
    """The head of `d` as written, on one line, without directives."""
    toks = sc.tokens
    text = src[toks[d.start].start:toks[d.head_end - 1].end]
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    text = " ".join(" ".join(lines).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Walker:
    def __init__(self, tokens: list[Token], texts: list[str]):
        self.t = tokens
        self.x = texts
        self.close = [0] * len(tokens)
        self.decls: list[Decl] = []
        self.markers: list[int] = []
        self.conditionals: list[int] = []
        self.branch: list[int] = []
        self.next_cond = 0
        self.branch_ids = 0
        self.ok = self._match_brackets()

    def _match_brackets(self) -> bool:
        stacks: dict[str, list[int]] = {"(": [], "{": []}
        opener = {")": "(", "}": "{"}
        for k, x in [(k, x) for k, x in enumerate(self.x) if x in _BRACKETS]:
            if x in stacks:
                stacks[x].append(k)
                continue
            stack = stacks[opener[x]]
            if not stack:
                return False
            self.close[stack.pop()] = k
        for k in [k for k, x in enumerate(self.x) if x[0] == "#" and len(x) > 1]:
            tok = self.t[k]
            word = directive_word(tok)
            if word in _CONDITIONAL:
                self.conditionals.append(k)
            elif word == "line" or _LINE_MARKER.match(tok.text):
                self.markers.append(k)
        return not stacks["("] and not stacks["{"]

    def _branch_at(self, index: int) -> tuple:
        """The `#if` branches open at tokens[index] (directives are replayed in token order)."""
        conds = self.conditionals
        while self.next_cond < len(conds) and conds[self.next_cond] < index:
            word = directive_word(self.t[conds[self.next_cond]])
            if word in ("if", "ifdef", "ifndef"):
                self.branch_ids += 1
                self.branch.append(self.branch_ids)
            elif word == "endif":
                if self.branch:
                    self.branch.pop()
            elif self.branch:  # elif / else: a new branch of the same block
                self.branch_ids += 1
                self.branch[-1] = self.branch_ids
            self.next_cond += 1
        return tuple(self.branch)

    def _opaque(self, start: int, end: int) -> bool:
        k = bisect.bisect_left(self.conditionals, start)
        return k < len(self.conditionals) and self.conditionals[k] < end

    def _add(self, scope: tuple, branch: tuple, start: int, head_end: int, end: int, has_body: bool,
             is_kernel: bool, templated: bool) -> None:
        templated = templated or self.t[start].text == "template"
        self.decls.append(Decl(scope, branch, start, head_end, end, has_body, is_kernel, False, templated,
                               self._opaque(start, end)))

    def scope_body(self, i: int, end: int, scope: tuple, templated: bool) -> None:
        t = self.t
        while i < end:
            tok = t[i]
            if tok.kind is Tok.DIRECTIVE or tok.text == ";":
                i += 1
            elif tok.text in _ACCESS and i + 1 < end and t[i + 1].text == ":":
                i += 2
            else:
                i = self._declaration(i, end, scope, templated)

    def _after_template_heads(self, i: int, end: int) -> int:
        t = self.t
        while i + 1 < end and t[i].text == "template" and t[i + 1].text == "<":
            depth, k = 0, i + 1
            while k < end:
                x = t[k].text
                if x == "(":
                    k = self.close[k]
                elif x == "<":
                    depth += 1
                elif x in (">", ">>", ">=", ">>="):
                    depth -= 2 if x.startswith(">>") else 1
                    if depth <= 0:
                        break
                k += 1
            i = k + 1
        return i

    def _declaration(self, i: int, end: int, scope: tuple, templated: bool) -> int:
        """Read the declaration starting at tokens[i]; returns the index after it."""
        t = self.t
        branch = self._branch_at(i)
        if t[i].text == "namespace" or (t[i].text == "inline" and i + 1 < end and t[i + 1].text == "namespace"):
            return self._namespace(i, end, scope)
        if t[i].text == "extern" and i + 2 < end and t[i + 1].kind is Tok.STRING and t[i + 2].text == "{":
            close = self.close[i + 2]
            self.scope_body(i + 3, close, scope, templated)
            return close + 1
        j = self._after_template_heads(i, end)
        first_paren = -1
        class_key = assign = kernel = False
        key_at = -1
        init_at = -1
        while j < end:
            tok = t[j]
            x = tok.text
            if tok.kind is Tok.IDENT:
                if x in _CLASS_KEYS and first_paren < 0:
                    class_key = True
                    key_at = j if key_at < 0 else key_at
                elif x == "kernel":
                    kernel = True
                j += 1
                continue
            if tok.kind is not Tok.PUNCT:
                j += 1
                continue
            if x == "(":
                if first_paren < 0:
                    first_paren = j
                j = self.close[j] + 1
                continue
            if x == "[[":
                while j < end and t[j].text != "]]":
                    kernel = kernel or t[j].text == "kernel"
                    j += 1
                j += 1
                continue
            if x == ";":
                self._add(scope, branch, i, j, j + 1, False, kernel, templated)
                return j + 1
            if x == "=" and t[j - 1].text != "operator":
                assign = True
            elif x == ":" and first_paren >= 0 and not (assign or class_key) and init_at < 0:
                init_at = j  # a constructor's member initializers
            elif x == "{":
                close = self.close[j]
                if class_key and not assign:
                    return self._class(i, j, key_at, end, scope, branch, templated)
                if assign or first_paren < 0 or (init_at >= 0 and t[j - 1].kind is Tok.IDENT) \
                        or (init_at >= 0 and t[j - 1].text == ">"):
                    j = close + 1  # an initializer, or a braced member initializer
                    continue
                head_end = init_at if init_at >= 0 else j
                self._add(scope, branch, i, head_end, close + 1, True, kernel, templated)
                return close + 1
            j += 1
        return end

    def _namespace(self, i: int, end: int, scope: tuple) -> int:
        t = self.t
        j = i + (2 if t[i].text == "inline" else 1)
        name = []
        while j < end and t[j].text not in ("{", ";", "="):
            name.append(t[j].text)
            j += 1
        if j >= end or t[j].text != "{":  # a namespace alias
            while j < end and t[j].text != ";":
                j += 1
            return j + 1
        close = self.close[j]
        self.scope_body(j + 1, close, scope + ("".join(name),), False)
        return close + 1

    def _class(self, i: int, brace: int, key_at: int, end: int, scope: tuple, branch: tuple,
               templated: bool) -> int:
        """A class (or enum) definition: its body is a scope of its own; it ends at the `;` after it."""
        t = self.t
        close = self.close[brace]
        at = len(self.decls)
        self.decls.append(None)  # type: ignore[arg-type]  # the class comes before its members
        templated = templated or t[i].text == "template"
        is_enum = any(t[k].text == "enum" for k in range(i, brace))
        if not is_enum:
            self.scope_body(brace + 1, close, scope + (brace,), templated)
        j = close + 1
        while j < end and t[j].text != ";":
            j = self.close[j] + 1 if t[j].text in ("(", "{") else j + 1
        name_at = key_at + 1
        if name_at < brace and t[name_at].text == "[[":
            while name_at < brace and t[name_at].text != "]]":
                name_at += 1
            name_at += 1
        if is_enum or not (name_at < brace and t[name_at].kind is Tok.IDENT):
            name_at = -1
        self.decls[at] = Decl(scope, branch, i, brace, min(j + 1, end), True, False, True, templated,
                              self._opaque(i, min(j + 1, end)), name_at)
        return j + 1
