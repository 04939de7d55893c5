"""A small lexer for Metal Shading Language text, enough for the CPU device's front end.

It keeps every token's byte span so that rewrites can be applied to the original text while
preserving line numbers (compiler messages and faults must name `.metal` lines).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple


class Tok(Enum):
    IDENT = "ident"
    NUMBER = "number"
    STRING = "string"
    PUNCT = "punct"
    DIRECTIVE = "directive"  # a whole preprocessor line (with continuations)


class Token(NamedTuple):
    """One token (a named tuple rather than an attrs class: a source has thousands, made on every compile)."""

    kind: Tok
    text: str
    start: int
    end: int
    line: int  # 1-based
    col: int   # 0-based


_PATTERNS = [
    ("ws", r"[ \t\r\f\v]+|\n"),
    ("comment", r"//[^\n]*|/\*[\s\S]*?\*/"),
    ("directive", r"#(?:[^\n\\]|\\[\s\S])*"),  # only first on its line (tokenize): indented too
    ("string", r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''),
    ("number", r"\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*"),
    ("ident", r"[A-Za-z_][A-Za-z0-9_]*"),
    ("punct", r"\[\[|\]\]|::|->|\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^!=<>]="
              r"|[{}()\[\];,.<>?:~!+\-*/%&|^=#]"),
]
_MASTER = re.compile("|".join(f"(?P<{name}>{pat})" for name, pat in _PATTERNS))
_PUNCT = re.compile(_PATTERNS[-1][1])
_ONE_LINE = frozenset(("ident", "number", "punct"))
_KINDS = {"directive": Tok.DIRECTIVE, "string": Tok.STRING, "number": Tok.NUMBER,
          "ident": Tok.IDENT, "punct": Tok.PUNCT}


class LexError(Exception):
    def __init__(self, message: str, line: int, col: int):
        super().__init__(message)
        self.line = line
        self.col = col


def tokenize(src: str) -> list[Token]:
    """Split MSL text into tokens (comments and white space dropped)."""
    tokens: list[Token] = []
    append, match = tokens.append, _MASTER.match
    pos, line, line_start, size = 0, 1, 0, len(src)
    at_line_start = True
    while pos < size:
        m = match(src, pos)
        if m is None:
            raise LexError(f"unexpected character {src[pos]!r}", line, pos - line_start)
        kind = m.lastgroup
        end = m.end()
        if kind in _ONE_LINE:   # no newline inside
            append(Token(_KINDS[kind], m.group(), pos, end, line, pos - line_start))
            at_line_start = False
            pos = end
            continue
        text = m.group()
        if kind == "directive" and not at_line_start:
            # '#' inside a line (e.g. in a macro body) is punctuation
            text = _PUNCT.match(src, pos).group()
            kind, end = "punct", pos + len(text)
        if kind not in ("ws", "comment"):
            append(Token(_KINDS[kind], text, pos, end, line, pos - line_start))
            at_line_start = kind == "directive"
        nl = text.count("\n")
        if nl:
            line += nl
            line_start = pos + text.rfind("\n") + 1
            at_line_start = True
        pos = end
    return tokens


_FLOAT = re.compile(
    r"(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)([fFhHlL]?)$"
)


def float_literal(text: str) -> tuple[str, str] | None:
    """(digits, suffix) if `text` is a floating-point literal, else None."""
    m = _FLOAT.match(text)
    if m is None:
        return None
    suffix = m.group(1)
    return text[: len(text) - len(suffix)], suffix


def rewrite_float_literal(text: str) -> str:
    """MSL literal -> C++ literal with the same type: `1.5h` -> `half(1.5f)`, `2.0` -> `2.0f`."""
    parsed = float_literal(text)
    if parsed is None:
        return text
    digits, suffix = parsed
    if suffix in ("h", "H"):
        return f"half({digits}f)"
    if suffix == "":
        return digits + "f"
    return text


def match_paren(tokens: list[Token], i: int) -> int:
    """Index of the token closing the bracket opened at tokens[i]."""
    pairs = {"(": ")", "[": "]", "{": "}", "[[": "]]"}
    opener = tokens[i].text
    closer = pairs[opener]
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j].text
        if tokens[j].kind is not Tok.PUNCT:
            continue
        if t == opener:
            depth += 1
        elif t == closer:
            depth -= 1
            if depth == 0:
                return j
        elif opener == "[" and t == "[[":
            depth += 2
        elif opener == "[" and t == "]]":
            depth -= 2
            if depth <= 0:
                return j
    raise LexError(f"unbalanced {opener!r}", tokens[i].line, tokens[i].col)


def split_top_level(tokens: list[Token], sep: str = ",") -> list[list[Token]]:
    """Split a token run at top-level separators (outside (), [], {}, <> is not tracked)."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.kind is Tok.PUNCT and t.text in ("(", "[", "{", "[["):
            depth += 2 if t.text == "[[" else 1
        elif t.kind is Tok.PUNCT and t.text in (")", "]", "}", "]]"):
            depth -= 2 if t.text == "]]" else 1
        if depth == 0 and t.kind is Tok.PUNCT and t.text == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts if parts != [[]] else []
