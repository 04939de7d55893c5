"""Widening a runtime loop's carried variable at the statement that widens it, so that the body is traced once.

`metile.frontend.control.ControlFlow.trace_loop` traces a loop body until the types of its carried variables
settle: attempt k traces the body with the types T_k, and T_{k+1} is each T_k joined with the type the body leaves
in the variable (`join_type`). A Python `0.0` carried into a body that adds tiles to it is a scalar in the first
attempt and a tile in the second, so the body would be traced twice. `Widening` makes the common case one attempt:
when a simple statement of the body assigns a carried variable a value of a wider type, and no statement before it
read the variable, the statement is traced again at once with the variable of the joined type, and the body goes
on. The statements before it did not read the variable, so they trace as they would with the wider type from the
start: the attempt is the attempt at the wider types T'. Tracing the statement again replays its parts that do not
read the variable (`_Part`: `metile.load(...)` in `acc = acc + metile.load(...)`): the same state makes them do the
same, as `metile.frontend.replay.BodyMemo` replays statements.

`trace_loop` keeps such an attempt only when it is exactly the attempt the loop without this would end with:
- it is exact: every statement traced again left its names holding values of the same classes and types as its
  first trace did. Tracing follows types and compile-time values, so every other statement then behaves as in
  the attempt at T_k, and T_{k+1} is each T_k joined with what this attempt leaves in the variable;
- T' is that T_{k+1}, the container items the body assigns did not change (`LoopSlots.leave`), and the attempt
  at T' leaves every carried variable a value its type holds: the attempt at T_{k+1} is the last one.
When it is exact but not the last, the next attempt is at T_{k+1} as before; when it is not exact (or a statement
traced again raised), the attempt at T_k is traced again without widening early. No widening happens in the
last attempt the loop allows, which ends in an error when the types do not settle. So the loop's IR, and its
errors, are those of tracing attempt after attempt.
"""

from __future__ import annotations

import ast
import operator

from metile.frontend import semantic as sem
from metile.frontend.exprs import EVAL
from metile.frontend.replay import holds_container, reads_any
from metile.ir.errors import MetileError
from metile.ir.values import Value, Var

_UNSET = object()


class Widening:
    """The carried variables one attempt at a loop body may widen early (`eligible`: plain names, not the parts of
    a composite or the flags of `return`, `break` and `continue`), and what it did: `types` holds the types the
    attempt is at, `carried` (the loop's list of carried variables) the variables of those types. `test` is the
    condition of a `while` loop, traced before the body."""

    __slots__ = ("carried", "exact", "index", "loc", "off", "read", "retyped", "types")

    def __init__(self, names: list[str], eligible, carried: list[Var], types: dict, loc, test: ast.expr | None):
        self.index = {n: i for i, n in enumerate(names) if n in eligible}
        self.carried, self.types, self.loc = carried, dict(types), loc
        # the names read by the statements traced so far, and by the condition of a `while` traced before them
        self.read: set[str] = set() if test is None else {n.id for n in ast.walk(test) if n.__class__ is ast.Name}
        self.retyped = False    # a carried variable was widened
        self.exact = True       # every statement traced again left values of the types of its first trace
        self.off = False        # no more widening in this attempt

    def candidates(self, writes: tuple[str, ...]) -> list[str]:
        """The carried variables a statement assigning `writes` may widen: those no statement before it read, and
        that are scalars (a tile rarely widens: the next attempt handles it, and the others do not pay for it)."""
        if self.off:
            return []
        index, read, types = self.index, self.read, self.types
        return [w for w in writes if w in index and w not in read and not types[w].shape]

    def visit(self, tr, stmt: ast.stmt, reads: tuple[str, ...], writes: tuple[str, ...], names: list[str]) -> bool:
        """Trace `stmt`, a simple statement reading `reads` and assigning `writes`, among them the carried `names`;
        when it widened one of them, widen the carried variable and trace `stmt` again if it reads it. True when
        it widened one."""
        env, hidden, types = tr.env, tr.hidden, self.types
        olds = [(w, env.get(w, _UNSET), hidden.get(w)) for w in writes]
        n_stmts, n_taken = len(tr.stmts), len(tr.taken)
        key = (stmt, frozenset(names))
        copy = tr.prepared.parted.get(key)
        if copy is None:
            copy = tr.prepared.parted[key] = _parted(stmt, key[1])
        parts: dict = {}
        _trace(tr, copy, (parts, True, n_taken))
        wider = {}
        for name in names:
            try:
                t = sem.join_type(types[name], env[name], f"loop-carried variable '{name}'", self.loc)
            except MetileError:  # the attempt goes on, and the loop reports it where it always did
                continue
            if t != types[name]:
                wider[name] = t
        if not wider:
            return False
        self.retyped = True
        if wider.keys().isdisjoint(reads):   # the statement does not read them: it traces the same
            for name, t in wider.items():
                i = self.index[name]
                self.carried[i], types[name] = Var(self.carried[i].name, t, loc=self.carried[i].loc), t
            return True
        first = (tr.stmts[n_stmts:], tr.taken[n_taken:], [(w, env.get(w, _UNSET)) for w in writes])
        _undo(tr, olds, n_stmts, n_taken)
        previous = {}
        for name, t in wider.items():
            i = self.index[name]
            var = self.carried[i]
            previous[name] = (var, types[name])
            self.carried[i] = wide = Var(var.name, t, loc=var.loc)
            types[name] = t
            if env.get(name) is var:
                env[name] = wide
        try:
            _trace(tr, copy, (parts, False, n_taken))
        except MetileError:   # the loop traces this attempt again without widening early, and meets it in order
            _undo(tr, olds, n_stmts, n_taken)
            tr.hint = None
            for name, (var, t) in previous.items():
                self.carried[self.index[name]], types[name] = var, t
            _redo(tr, *first)
            self.exact, self.off = False, True
            return False
        for w, a in first[2]:
            if not _alike(a, env.get(w, _UNSET)):
                self.exact, self.off = False, True
                break
        return True


def _trace(tr, stmt: ast.stmt, subs: tuple) -> None:
    """Trace `stmt` (a `_parted` copy) with its parts recorded or replayed (`subs`, see `_part`)."""
    saved, tr.subs = tr.subs, subs
    try:
        tr.visit_stmt(stmt)
    finally:
        tr.subs = saved


def _alike(a, b) -> bool:
    """Whether values `a` and `b` trace alike: the same object, or traced values of one class and type."""
    return a is b or (isinstance(a, Value) and a.__class__ is b.__class__ and a.type == b.type)


def _undo(tr, olds: list, n_stmts: int, n_taken: int) -> None:
    """Take back what a statement's trace did: its IR statements, fresh names and assignments."""
    del tr.stmts[n_stmts:]
    tr.names.difference_update(tr.taken[n_taken:])
    del tr.taken[n_taken:]
    env, hidden = tr.env, tr.hidden
    for name, value, why in olds:
        if value is _UNSET:
            env.pop(name, None)
        else:
            env[name] = value
        if why is not None:
            hidden[name] = why


def _redo(tr, stmts: list, taken: list, outputs: list) -> None:
    """Put back what a statement's trace did (`_undo`'s inverse)."""
    tr.stmts.extend(stmts)
    tr.names.update(taken)
    tr.taken.extend(taken)
    for name, value in outputs:
        if value is not _UNSET:
            tr.env[name] = value
            tr.hidden.pop(name, None)


# ---- the parts of a statement that do not read the widened variables

class _Part(ast.expr):
    """In a `_parted` copy of a statement: a subexpression `node` that reads none of the variables being widened.
    The first trace records what evaluating it did; the trace after the widening replays that."""

    _fields = ()

    def __init__(self, node: ast.expr):
        super().__init__()
        self.node = node
        _at(self, node)


def _part(tr, part: _Part):
    """Evaluate a `_Part`. `tr.subs` is `(records, recording, n_taken)`: recording, the part is evaluated and what it
    did recorded; replaying, the record is replayed when the state is the one it was recorded in (the same fresh
    names taken since the statement started, `n_taken`, and the same name hint), else the part is evaluated."""
    node = part.node
    subs = tr.subs
    if subs is None:
        return EVAL[node.__class__](tr, node)
    records, recording, n_taken = subs
    taken, hint = tr.taken, tr.hint
    if recording:
        before, stmts = taken[n_taken:], tr.stmts
        n, t = len(stmts), len(taken)
        value = EVAL[node.__class__](tr, node)
        records[part] = (before, hint, stmts[n:], taken[t:], value)
        return value
    record = records.get(part)
    if record is None or record[1] != hint or taken[n_taken:] != record[0] or holds_container(record[4]):
        return EVAL[node.__class__](tr, node)
    tr.stmts.extend(record[2])
    tr.names.update(record[3])
    taken.extend(record[3])
    return record[4]


EVAL[_Part] = _part

_PARTED = (ast.Call, ast.BinOp, ast.Compare, ast.UnaryOp, ast.Subscript)   # worth replaying


def _part_of(node: ast.expr, names: frozenset[str]) -> ast.expr:
    """`node` as an operand of a statement's value: a `_Part` when it is worth replaying and reads none of `names`."""
    return _Part(node) if node.__class__ in _PARTED and not reads_any(node, names) else node


def _parted(stmt: ast.stmt, names: frozenset[str]) -> ast.stmt:
    """A copy of the simple statement `stmt` in which the operands of its value (a binary operation or a call: `v +
    E`, `f(v, E)`) that read none of `names`, or the value of an augmented assignment (`v += E`), are `_Part`s;
    the statement itself when none is."""
    cls, value = stmt.__class__, stmt.value
    if cls is ast.AugAssign:
        new = _part_of(value, names)
        if new is value:
            return stmt
        return _at(ast.AugAssign(target=stmt.target, op=stmt.op, value=new), stmt)
    if cls is not ast.Assign:
        return stmt
    vcls = value.__class__
    if vcls is ast.BinOp:
        left, right = _part_of(value.left, names), _part_of(value.right, names)
        if left is value.left and right is value.right:
            return stmt
        new = ast.BinOp(left=left, op=value.op, right=right)
    elif vcls is ast.Call:
        args = [_part_of(a, names) for a in value.args]
        kws = [_part_of(k.value, names) for k in value.keywords]
        if all(map(operator.is_, args, value.args)) and all(n is k.value for n, k in zip(kws, value.keywords)):
            return stmt
        new = ast.Call(func=value.func, args=args,
                       keywords=[_at(ast.keyword(arg=k.arg, value=v), k) for k, v in zip(value.keywords, kws)])
    else:
        return stmt
    return _at(ast.Assign(targets=stmt.targets, value=_at(new, value)), stmt)


def _at(new: ast.AST, old: ast.AST) -> ast.AST:
    """`new`, at the position of `old` (so that it has the same `Loc`)."""
    new.lineno, new.col_offset = old.lineno, old.col_offset
    new.end_lineno, new.end_col_offset = old.end_lineno, old.end_col_offset
    return new


__all__ = ["Widening"]
