"""The parsed source of a Python function that metile traces (a kernel or a `@metile.func` helper), and what
tracing learns about its nodes once (`Prepared`).

`parsed(fn)` reads the function's source (the block `inspect.getsourcelines` gives, found without tokenizing the
file when its indentation tells where it ends: `_def_block`), dedents and parses it once per code object (while that
object lives), and keeps what tracing needs with it: the file, the line and column offsets of the dedented text in
the file, the `def` node, and the per-node facts tracing finds (`Prepared`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import weakref

import attrs

from metile.frontend.errors import KernelSourceError
from metile.frontend.exits import body_exits, flag_names, statement_exits
from metile.frontend.replay import statement_io
from metile.ir.errors import Loc


class Prepared:
    """What tracing a function needs that only depends on its parsed source, kept with the parse and shared by
    all its traces: the `Loc` of each node (offset by the function's first line and indentation) and the names
    a simple statement reads and assigns (`metile.frontend.replay.statement_io`). Each is made the first time a
    trace needs it, so parsing stays cheap and a node nothing asks about costs nothing; the tables are keyed by
    the node itself (an ast node hashes by identity) and only ever grow by entries that depend on the node
    alone."""

    __slots__ = ("col_offset", "exits", "file", "io", "line_offset", "locs", "loops", "parted")

    def __init__(self, file: str, line_offset: int, col_offset: int):
        self.file, self.line_offset, self.col_offset = file, line_offset, col_offset
        self.locs: dict[ast.AST, Loc] = {}
        self.io: dict[ast.stmt, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self.exits: dict[ast.stmt, frozenset[str]] = {}
        # per (statement, names), the copy of the statement `metile.frontend.widen` traces
        self.parted: dict[tuple[ast.stmt, frozenset[str]], ast.stmt] = {}
        # per loop statement, the exits of its body and the names the body assigns (`loop_facts`)
        self.loops: dict[ast.stmt, tuple[frozenset[str], tuple[str, ...]]] = {}

    def loc(self, node: ast.AST) -> Loc:
        found = self.locs.get(node)
        if found is None:
            try:
                line, col = node.lineno, node.col_offset
            except AttributeError:  # a node without a position
                line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
            found = self.locs[node] = Loc(self.file, line + self.line_offset, col + self.col_offset)
        return found

    def statement_io(self, stmt: ast.stmt) -> tuple[tuple[str, ...], tuple[str, ...]]:
        found = self.io.get(stmt)
        if found is None:
            found = self.io[stmt] = statement_io(stmt)
        return found

    def loop_facts(self, loop: ast.For | ast.While) -> tuple[frozenset[str], tuple[str, ...]]:
        """The exits of the body of `loop` (`metile.frontend.exits.body_exits`) and the names the body assigns, in
        order of first appearance, then the flags of its exits (`ControlFlow.assigned_names`), kept per loop."""
        found = self.loops.get(loop)
        if found is None:
            words = body_exits(self, loop.body)
            seen: dict[str, None] = {}
            for stmt in loop.body:
                seen.update(dict.fromkeys(self.statement_io(stmt)[1]))
            found = self.loops[loop] = (words, (*seen, *flag_names(words)))
        return found

    def statement_exits(self, stmt: ast.stmt) -> frozenset[str]:
        """`metile.frontend.exits.statement_exits`, kept per statement."""
        found = self.exits.get(stmt)
        if found is None:
            found = self.exits[stmt] = statement_exits(stmt)
        return found


@attrs.frozen
class Parsed:
    """What a function's source gives once parsed: file, dedented text, offsets and the `def` (shared, never
    mutated: tracing only reads the `ast`), and what its traces find out about the nodes once (`Prepared`)."""

    file: str
    text: str
    col_offset: int
    line_offset: int
    fdef: ast.AST
    prepared: Prepared  # per node of `fdef`, made when a trace first needs it: its Loc, the names it reads and assigns


# Per code object alive: by its id, a weak reference to it and its parse. Code objects equal as values may come from
# different files (equality ignores the file name), so the key is the object's identity; the entry goes when the code
# object does (so its id, free for another object then, never finds a stale parse), and it holds no reference to it.
_PARSED: dict[int, tuple[weakref.ref, Parsed]] = {}


def parse(fn, what: str = "kernel") -> Parsed:
    """Read and parse the source of `fn` (a `what`, for the error when its source cannot be read)."""
    file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    try:
        target = inspect.unwrap(fn)   # what `inspect.getsourcelines` reads: the lines of `target`'s block, from `first`
        found, first = inspect.findsource(target)
        found = found[first:]
        first += 1
    except (OSError, TypeError) as e:
        raise KernelSourceError(
            f"cannot read the source of {what} {fn.__qualname__!r} (from {file}): metile traces it from its Python "
            "source, so define it in a .py file, not at an interactive prompt or with exec") from e
    block = _def_block(found, target.__code__.co_name)
    if block is not None:
        lines, text, tree = block
    else:
        lines = inspect.getblock(found)
        text = textwrap.dedent("".join(lines))
        tree = ast.parse(text)
    col_offset = len(lines[0]) - len(lines[0].lstrip())  # what textwrap.dedent removed
    fdef = tree.body[0]
    return Parsed(file, text, col_offset, first - 1, fdef, Prepared(file, first - 1, col_offset))


_MAX_CUTS = 8   # the places `_def_block` tries to end a block at, before leaving it to `inspect.getblock`


def _def_block(lines: list[str], name: str) -> tuple[list[str], str, ast.Module] | None:
    """`inspect.getblock(lines)` for the `def` of `name` that `lines` start with (its decorators first), its dedented
    text and its parse, found without tokenizing; None when this cannot tell, for `inspect.getblock` to find.

    The block ends before the first line after the `def` that holds code and is indented no deeper than the `def`
    (blank and comment lines end nothing). Such a line may still be inside a string or brackets (a docstring line
    at column 0, a signature's closing `):`), and then the text cut there does not parse: the next such line is
    tried, up to `_MAX_CUTS` of them. A text that parses as one function named `name` is the block, since a line
    that ends the block in Python's grammar ends it here too. As `inspect.getblock` has it, the block's last line
    is that of its last statement or of a later comment indented at least as deep as the body's first line (when
    the body starts on a line of its own). Indentation by tabs is left to `inspect.getblock`."""
    first = lines[0]
    indent = len(first) - len(first.lstrip())
    if "\t" in first[:indent]:
        return None
    n, start = len(lines), 0
    while start < n:   # the `def` line, after the decorators
        code = lines[start].lstrip()
        if code.startswith(("def ", "async def ")) and len(lines[start]) - len(code) == indent:
            break
        start += 1
    else:
        return None
    end = start + 1
    for _ in range(_MAX_CUTS):
        while end < n:   # the next line holding code indented no deeper than the `def`
            line = lines[end]
            code = line.lstrip()
            if code and code[0] != "#":
                depth = len(line) - len(code)
                if "\t" in line[:depth]:
                    return None
                if depth <= indent:
                    break
            end += 1
        last = end
        while last > start + 1 and _no_code(lines[last - 1]):
            last -= 1
        text = textwrap.dedent("".join(lines[:last]))
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
        if tree is not None and len(tree.body) == 1 and tree.body[0].__class__ in _DEFS and tree.body[0].name == name:
            body = tree.body[0].body[0]
            line = lines[body.lineno - 1]
            column = len(line) - len(line.lstrip())   # where the body's first line starts, if it starts the line
            if text.splitlines()[body.lineno - 1][:body.col_offset].isspace():
                comments = [i for i in range(last, end) if lines[i].lstrip()[:1] == "#"
                            and len(lines[i]) - len(lines[i].lstrip()) >= column]
                if comments:
                    last = comments[-1] + 1
                    text = textwrap.dedent("".join(lines[:last]))
            return lines[:last], text, tree
        if end >= n:
            return None
        end += 1
    return None


def _no_code(line: str) -> bool:
    """Whether `line` is blank or only a comment."""
    code = line.lstrip()
    return not code or code[0] == "#"


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def parsed(fn, what: str = "kernel") -> Parsed:
    """`parse(fn)`, cached per code object: decorating a function again (or another closure of the same `def`)
    does not read and parse its file again."""
    code = fn.__code__
    key = id(code)
    entry = _PARSED.get(key)
    if entry is not None and entry[0]() is code:
        return entry[1]
    found = parse(fn, what)
    _PARSED[key] = (weakref.ref(code, functools.partial(_forget, key)), found)
    return found


def _forget(key: int, ref: weakref.ref) -> None:
    """Drop the entry of a code object that is gone (unless the key holds a newer entry by then)."""
    entry = _PARSED.get(key)
    if entry is not None and entry[0] is ref:
        del _PARSED[key]


def visible_names(fn) -> dict:
    """The names a function's body and annotations can see: its module's globals and its closure's variables
    (so functions defined inside functions resolve `metile.constexpr` and helpers like module-level ones)."""
    if not fn.__closure__:
        return fn.__globals__  # read, never written: no copy needed
    names = dict(fn.__globals__)
    names.update({var: cell.cell_contents for var, cell in zip(fn.__code__.co_freevars, fn.__closure__)})
    return names


__all__ = ["Parsed", "Prepared", "parse", "parsed", "visible_names"]
