"""The lexical layer of the IR text: tokens, types, locations, and `ParseError` pointing into the text.

`Scanner` works directly on the characters (no token list): each method skips whitespace and `//`
comments (so golden files can carry `// RUN:` headers), then matches at the current position.
`metile.ir.parser.Parser` builds on it.
"""

from __future__ import annotations

import json
import re

from metile.ir.errors import Loc, MetileError
from metile.ir.names import NAME, ir_name, is_ir_name
from metile.ir.types import AddressSpace, DType, MatrixType, PtrType, TileType, Type, VectorType


class ParseError(MetileError):
    """The IR text is malformed; the location is the line and column in that text."""


_WS = re.compile(r"(?:\s+|//[^\n]*)*")
_IDENT = re.compile(NAME)
_INT = re.compile(r"-?[0-9]+")
_LITERAL = re.compile(r"[-+]?(?:inf|nan|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)|true|false")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_DIMS = re.compile(r"((?:[0-9]+x)+)")
_DTYPES = {d.value: d for d in DType}
_SPACES = {s.value: s for s in AddressSpace}


class Scanner:
    def __init__(self, text: str, file: str):
        self.text = text
        self.file = file
        self.i = 0

    # ---- characters and tokens

    def skip(self) -> None:
        self.i = _WS.match(self.text, self.i).end()

    def peek(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        self.skip()
        return pattern.match(self.text, self.i)

    def at(self, word: str) -> bool:
        """True when the next token is `word` (a keyword or punctuation)."""
        self.skip()
        if not self.text.startswith(word, self.i):
            return False
        end = self.i + len(word)
        return not (word[-1].isalnum() and end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"))

    def accept(self, word: str) -> bool:
        if self.at(word):
            self.i += len(word)
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.accept(word):
            self.fail(f"expected '{word}'")

    def take(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        m = self.peek(pattern)
        if m is None:
            self.fail(f"expected {what}")
        self.i = m.end()
        return m

    def ident(self) -> str:
        return self.take(_IDENT, "a name").group(0)

    def int(self) -> int:
        return int(self.take(_INT, "an integer").group(0))

    def literal(self) -> str:
        return self.take(_LITERAL, "a literal").group(0)

    def where(self, at: int | None = None) -> tuple[Loc, str]:
        at = self.i if at is None else at
        line = self.text.count("\n", 0, at) + 1
        start = self.text.rfind("\n", 0, at) + 1
        end = self.text.find("\n", at)
        return Loc(self.file, line, at - start), self.text[start: len(self.text) if end < 0 else end]

    def fail(self, message: str, at: int | None = None):
        self.skip()
        loc, source = self.where(at)
        found = self.text[self.i: self.i + 20].split("\n")[0] or "end of text"
        raise ParseError(f"{message} (found '{found}')", loc, source_line=source)

    def end(self) -> None:
        self.skip()
        if self.i != len(self.text):
            self.fail("expected the end of the text")

    def opt_loc(self) -> Loc | None:
        if not self.accept("loc"):
            return None
        self.expect("(")
        file = json.loads(self.take(_STRING, "a quoted file name").group(0))
        self.expect(":")
        line = self.int()
        self.expect(":")
        col = self.int()
        self.expect(")")
        return Loc(file, line, col)


    # ---- types

    def type(self) -> Type:
        if self.accept("tile<"):
            dims = self.dims()
            t = self.ptr_type(dims) if self.at("ptr<") else TileType(self.dtype(), dims)
            self.expect(">")
            return t
        if self.at("ptr<"):
            return self.ptr_type(())
        if self.accept("vec<"):
            dims = self.dims()
            if len(dims) != 1:
                self.fail("a vector type has one width: vec<4xf32>")
            t = VectorType(self.dtype(), dims[0])
            self.expect(">")
            return t
        if self.accept("simdgroup_matrix<"):
            if self.dims() != (MatrixType.ROWS, MatrixType.COLS):
                self.fail("simdgroup matrices are 8x8: simdgroup_matrix<8x8xf32>")
            t = MatrixType(self.dtype())
            self.expect(">")
            return t
        return TileType(self.dtype())

    def dims(self) -> tuple[int, ...]:
        """`64x32x` (each dimension followed by `x`)."""
        return tuple(int(d) for d in self.take(_DIMS, "dimensions (64x32x...)").group(1).split("x")[:-1])

    def ptr_type(self, dims: tuple[int, ...]) -> PtrType:
        self.expect("ptr<")
        dtype = self.dtype()
        self.expect(",")
        at = self.i
        space = _SPACES.get(self.ident())
        if space is None:
            self.fail("expected an address space (device, threadgroup, constant)", at)
        self.expect(">")
        return PtrType(dtype, dims, space)

    def dtype(self) -> DType:
        at = self.i
        dt = _DTYPES.get(self.ident())
        if dt is None:
            self.fail("expected a type", at)
        return dt


__all__ = ["NAME", "ParseError", "Scanner", "ir_name", "is_ir_name"]
