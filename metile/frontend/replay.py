"""Tracing a runtime loop's body again, after its carried types widened, without redoing what did not change.

`metile.frontend.control.ControlFlow.trace_loop` traces a loop body until the types of its carried variables
settle; a Python `0.0` carried into a loop that adds tiles to it takes two attempts when the statement that widens
it cannot be traced again at once (`metile.frontend.widen`). The statements a body starts with often do not depend
on the widened variables (`cols = c0 + metile.arange(0, BLOCK)`, loads): a `BodyMemo` records what each attempt's
statements did, and the next attempt replays the leading ones whose inputs are unchanged, so they emit the same
statements, take the same fresh names and bind the same values as tracing them again would. The loop variables
whose name and type stay are kept from one attempt to the next (`same_var`), so that statements reading them can be
replayed.
"""

from __future__ import annotations

import ast
from itertools import repeat
from operator import attrgetter, is_

from metile.ir.values import Var


def holds_container(v) -> bool:
    """Whether `v` is a list or dict, or a tuple holding one (at any depth): a value whose items may change."""
    cls = v.__class__
    if cls is list or cls is dict:
        return True
    return cls is tuple and any(holds_container(x) for x in v)


_MAY_HOLD = frozenset({list, dict, tuple})
_CLASS = attrgetter("__class__")


def any_container(values) -> bool:
    """Whether one of `values` `holds_container`: looked into only when one of them is a list, dict or tuple (most are
    traced values and numbers, whose classes are compared in C)."""
    return not _MAY_HOLD.isdisjoint(map(_CLASS, values)) and any(map(holds_container, values))


def same_var(old: Var | None, name: str, t, loc) -> Var:
    """`Var(name, t, loc=loc)`, or `old` when it is that variable (a loop's `loc` is the same every attempt)."""
    if old is not None and old.name == name and old.type == t:
        return old
    return Var(name, t, loc=loc)


_UNSET = object()


class BodyMemo:
    """What the last attempt at tracing a runtime loop's body did, statement by statement, so that the next
    attempt (after the carried types widened) replays the statements it starts with whose inputs did not
    change instead of tracing them again.

    Replaying a statement is tracing it: the tracer's state it reads is the same (the same objects for the
    names it reads, the same reasons for those that are hidden, the same names taken before it, the same
    globals) and tracing is deterministic, so it would emit the same statements, take the same fresh names
    and bind the same values, which the record holds. Only assignments and expression statements are recorded
    (`SIMPLE`), and not those that read or assign a list or dict (`holds_container`): the items of a container can
    change while it stays the same object, so the same inputs would not mean the same state. Replaying stops at
    the first statement that cannot be replayed, since what follows may then see other fresh names.
    """

    __slots__ = ("names", "records", "widening")

    def __init__(self):
        self.names: set[str] | None = None   # the names taken when the body started
        self.records: list[tuple | None] = []  # per statement: (inputs, hidden, stmts, names, outputs) or None
        self.widening = None    # the attempt's `metile.frontend.widen.Widening`, when it may widen early


SIMPLE = (ast.Assign, ast.AugAssign, ast.Expr)


# Fields that hold no names: contexts, operators, strings and numbers.
_LEAVES = frozenset({"ctx", "op", "ops", "attr", "arg", "kind", "type_comment", "conversion", "level", "module"})
_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}   # per class, the fields a walk looks into


def _fields(cls: type) -> tuple[str, ...]:
    """The fields of the ast class `cls` that may hold names; none for what lists hold besides nodes (the
    strings of `global` statements, the `None` keys of `**` in dict displays)."""
    found = _FIELDS[cls] = tuple(f for f in getattr(cls, "_fields", ()) if f not in _LEAVES)
    return found


def statement_io(stmt: ast.stmt) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names `stmt` reads (an augmented assignment reads its target) and the names it assigns, each in
    order of first appearance in `ast.walk` order (a loop's carried variables come in that order). The variables
    of a comprehension are its own (Python 3's scoping), so they are not assignments of the statement."""
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    todo = [stmt]
    append = todo.append
    for n in todo:  # `ast.walk`: breadth first, without its generators or the nodes that hold no names
        cls = n.__class__
        if cls is _NAME:
            (writes if n.ctx.__class__ is _STORE else reads)[n.id] = None
        elif cls is _ATTRIBUTE:   # the commonest classes first, their fields in `ast.walk` order
            append(n.value)
        elif cls is _CALL:
            append(n.func)
            todo += n.args
            todo += n.keywords
        elif cls is _BINOP:
            append(n.left)
            append(n.right)
        elif cls is _KEYWORD:
            append(n.value)
        elif cls is _COMPREHENSION:  # its target lives in the comprehension's own scope: not an assignment here
            append(n.iter)
            todo += n.ifs
        elif cls is not _CONSTANT:
            _add_children(n, todo)
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        reads[stmt.target.id] = None
    return tuple(reads), tuple(writes)


_NAME, _ATTRIBUTE, _CALL, _BINOP, _KEYWORD, _COMPREHENSION, _CONSTANT, _STORE = (
    ast.Name, ast.Attribute, ast.Call, ast.BinOp, ast.keyword, ast.comprehension, ast.Constant, ast.Store)


def reads_any(node: ast.AST, names) -> bool:
    """Whether the tree `node` holds a name among `names` (as `statement_io` walks)."""
    todo = [node]
    for n in todo:
        cls = n.__class__
        if cls is ast.Name:
            if n.id in names:
                return True
            continue
        _add_children(n, todo)
    return False


def _add_children(n: ast.AST, todo: list) -> None:
    """Append to `todo` the nodes in the fields of `n` that may hold names, in `ast.walk` order."""
    fields = _FIELDS.get(n.__class__)
    for field in fields if fields is not None else _fields(n.__class__):
        v = getattr(n, field, None)
        if v.__class__ is list:
            todo += v
        elif isinstance(v, ast.AST):
            todo.append(v)


# The Python errors a statement's compile-time part may raise, which tracing reports at the statement
# (`metile.frontend.trace.Tracer.python_error`).
PYTHON_ERRORS = (TypeError, ValueError, ArithmeticError, LookupError)


def visit_loop_body(tr, body: list[ast.stmt], memo: BodyMemo) -> None:
    """`Tracer.visit_body` for a runtime loop's body, replaying what `memo` recorded when it applies (see
    `BodyMemo`) and recording what the statements do for the next attempt."""
    previous = memo.records
    replaying = memo.names is not None and memo.names == tr.names
    memo.names = set(tr.names)
    memo.records = records = []
    record_ = records.append
    env, hidden, prepared, statements = tr.env, tr.hidden, tr.prepared, tr.statements
    io = prepared.io
    widening = memo.widening
    read = None if widening is None else widening.read   # what the statements so far read (`Widening`)
    for i, stmt in enumerate(body):
        cls = stmt.__class__
        if cls not in SIMPLE:
            replaying = False
            record_(None)
            if read is not None:
                read.update((io.get(stmt) or prepared.statement_io(stmt))[0])
            tr.visit_stmt(stmt)
            if tr.exiting(body, i + 1):  # a `break`, `continue` or `return` taken (`metile.frontend.exits`)
                return
            env = tr.env
            continue
        reads, writes = io.get(stmt) or prepared.statement_io(stmt)
        inputs = tuple(map(env.get, reads, repeat(_UNSET)))
        if any_container(inputs):
            replaying = False
            record_(None)
            if read is not None:
                read.update(reads)
            tr.visit_stmt(stmt)
            env = tr.env
            continue
        why = tuple(map(hidden.get, reads))
        if replaying:
            record = previous[i] if i < len(previous) else None
            if record is not None and all(map(is_, inputs, record[0])) and why == record[1]:
                _, _, stmts, taken, outputs = record
                tr.stmts.extend(stmts)
                tr.names.update(taken)
                tr.taken.extend(taken)
                for name, value in outputs:
                    env[name] = value
                    hidden.pop(name, None)
                record_(record)
                if read is not None:
                    read.update(reads)
                continue
            replaying = False
        n_stmts, n_taken = len(tr.stmts), len(tr.taken)
        if read is None:
            try:   # `tr.visit_stmt(stmt)` inline: a simple statement takes no exit
                statements[cls](tr, stmt)
            except PYTHON_ERRORS as e:
                raise tr.python_error(e, stmt) from e
        else:
            widen = widening.candidates(writes)
            if widen and widening.visit(tr, stmt, reads, writes, widen):   # a carried variable widened
                inputs = tuple(map(env.get, reads, repeat(_UNSET)))
            elif not widen:
                tr.visit_stmt(stmt)
            read.update(reads)
        values = list(map(env.__getitem__, writes))
        if any_container(values):
            replaying = False
            record_(None)
            continue
        record_((inputs, why, tr.stmts[n_stmts:], tr.taken[n_taken:], list(zip(writes, values))))


__all__ = ["PYTHON_ERRORS", "SIMPLE", "BodyMemo", "holds_container", "reads_any", "same_var", "statement_io",
           "visit_loop_body"]
