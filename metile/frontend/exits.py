"""`return`, `break` and `continue` in kernels, made structured: flags the tracer carries like variables.

The Tile IR has no jumps: every `If`, `For` and `While` runs to its end. The tracer turns the three statements into
flags held in the environment under names no Python variable can have (`RETURN`, `BREAK`, `CONTINUE`):

- The statement sets its flag to True. A flag that is a Python True stops the tracing of the statements after it
  (the rest of the body, of the enclosing bodies up to the loop or the kernel): a `return` in a compile-time `if`
  costs nothing at run time.
- A runtime `if` merges the flags as it merges variables, so after an `if` whose branch returned the flag is a
  traced bool. The statements after a statement that may have set a flag on a runtime path (the rest of the body)
  are then traced inside a runtime `if` on "no flag is set" (`guard`); inside it the flags are False, so later
  statements need no second guard.
- A loop whose body may `break` carries its flag (False before the loop); each iteration starts with a guard on it
  (and on the `return` flag), so the iterations after a `break` do nothing, and a `while` stops at the next test
  of its condition, which is not evaluated once the flag is set. `continue` is a flag that each iteration starts
  with at False. The flags of an enclosing loop are put aside while an inner loop is traced.
- Variables first assigned after the guard have no value on the path that left; that path never reads them (it
  leaves every body up to its loop or the kernel, each guarded the same way), so the `If` gives them a zero there.

Barriers inside the rest of a body stay correct: the guard is an `If` on the flag, so when the condition of the
`return` is the same on every thread the guard is too, and when it differs between threads the lowering refuses a
barrier inside it, as it refuses one under any divergent `if`.
"""

from __future__ import annotations

import ast

from metile.frontend import semantic as sem
from metile.frontend.containers import Entered
from metile.frontend.errors import KernelTypeError, UnsupportedSyntaxError
from metile.frontend.replay import BodyMemo, visit_loop_body
from metile.ir.ops import BinOp, CmpOp
from metile.ir.stmts import If
from metile.ir.types import DType, PtrType, TileType
from metile.ir.values import Binary, Compare, Value, Var

RETURN = "return!"
BREAK = "break!"
CONTINUE = "continue!"
FLAGS = (RETURN, BREAK, CONTINUE)

_WORDS = {ast.Return: "return", ast.Break: "break", ast.Continue: "continue"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
EXITS = frozenset({ast.Return, ast.Break, ast.Continue, ast.If, ast.For, ast.While, ast.With, ast.Match, ast.Try})
"""The statement classes after which a flag may be set (the others hold no statements that set one)."""


def statement_exits(stmt: ast.stmt) -> frozenset[str]:
    """The words among "return", "break", "continue" whose statements inside `stmt` leave it: a `break` or
    `continue` inside a loop within `stmt` belongs to that loop, a `return` always leaves."""
    found: set[str] = set()
    todo: list[tuple[ast.AST, bool]] = [(stmt, False)]
    for n, nested in todo:
        cls = n.__class__
        word = _WORDS.get(cls)
        if word is not None:
            if word == "return" or not nested:
                found.add(word)
            continue
        fields = _BODY_FIELDS.get(cls)
        if fields is None:
            fields = _body_fields(cls)
        if fields:
            inner = nested or isinstance(n, _LOOPS)
            for field in fields:
                items = getattr(n, field, None)
                if items:
                    todo += [(x, inner) for x in items]
    return frozenset(found)


_BODY_FIELDS: dict[type, tuple[str, ...]] = {}   # per ast class, its fields among `_BODIES` (none for a scope)


def _body_fields(cls: type) -> tuple[str, ...]:
    own = getattr(cls, "_fields", ())
    found = _BODY_FIELDS[cls] = () if issubclass(cls, _SCOPES) else tuple(f for f in _BODIES if f in own)
    return found


def body_exits(prepared, body: list[ast.stmt]) -> frozenset[str]:
    """The exits of the statements of `body` (each statement's found once and kept with the parse)."""
    found: frozenset[str] = frozenset()
    for stmt in body:
        if stmt.__class__ in EXITS:
            found |= prepared.statement_exits(stmt)
    return found


def flag_names(words: frozenset[str]) -> list[str]:
    if not words:   # the common case: a body nothing leaves
        return []
    return [f for f, w in zip(FLAGS, ("return", "break", "continue")) if w in words]


def any_set(flags: list[Value], loc) -> Value:
    """The traced bool: one of `flags` (traced bools) is set."""
    out = flags[0]
    for f in flags[1:]:
        out = Binary(BinOp.OR, out, f, loc=loc)
    return out


def none_set(flags: list[Value], loc) -> Value:
    return Compare(CmpOp.EQ, any_set(flags, loc), sem.const(False, sem.BOOL, loc), loc=loc)


def dead_value(v, loc):
    """What a variable first assigned after a guard holds on the path that left (never read there): a zero of its
    type, or None when it is not a number or traced value (it is then not visible after the guard)."""
    if sem.is_number(v):
        return v.__class__(0)
    if isinstance(v, Value):
        t = v.type
        if isinstance(t, PtrType):
            return None
        zero = False if t.dtype is sem.BOOL else 0
        return sem.coerce(sem.const(zero, t.dtype, loc), t.dtype, t.shape, loc)
    return None


_MISSING = object()
_BOOL = TileType(DType.BOOL)


class Exits:
    """Mixin of `Tracer`: the statements that leave a body, and the guards after them."""

    def set_flag(self, flag: str, node: ast.stmt, what: str) -> None:
        if flag not in self.env:
            raise UnsupportedSyntaxError(f"`{what}` outside a loop", self.loc(node))
        self.env[flag] = True

    def stmt_Break(self, node: ast.Break) -> None:
        self.set_flag(BREAK, node, "break")

    def stmt_Continue(self, node: ast.Continue) -> None:
        self.set_flag(CONTINUE, node, "continue")

    def exiting(self, body: list[ast.stmt], start: int) -> bool:
        """Whether the statements `body[start:]` are done with: a flag is True (they are skipped), or one is a
        traced bool (they are traced under a guard, `guard`)."""
        env = self.env
        if RETURN not in env and BREAK not in env and CONTINUE not in env:   # the common case: no flag at all
            return False
        traced = []
        for flag in FLAGS:
            v = env.get(flag, False)
            if v is True:
                return True
            if isinstance(v, Value):
                traced.append(flag)
        if not traced:
            return False
        rest = body[start:]
        if rest:
            # the guard is at the statement that may have set a flag (or the start of the loop's body)
            loc = self.loc(body[start - 1] if start else rest[0])
            self.branch(none_set([env[f] for f in traced], loc), rest, [], loc,
                        f"the statements after line {loc.line}, run when no `return`, `break` or `continue` was "
                        "taken before them", inside=dict.fromkeys(traced, False), dead=True)
        return True

    def enter_loop(self, words: frozenset[str]) -> dict:
        """Before a loop whose body has the exits `words`: the flags of an enclosing loop (put aside); the `break`
        flag is False before the loop."""
        env = self.env
        # the common case, outside any loop that may break or continue: nothing to put aside
        saved = {f: env.pop(f, _MISSING) for f in (BREAK, CONTINUE)} if BREAK in env or CONTINUE in env else {}
        if "break" in words:
            env[BREAK] = False
        return saved

    def start_iteration(self, words: frozenset[str]) -> None:
        if "continue" in words:
            self.env[CONTINUE] = False

    def leave_loop(self, saved: dict) -> None:
        if not saved:   # nothing was put aside: only the loop's own flags go
            self.env.pop(BREAK, None)
            self.env.pop(CONTINUE, None)
            return
        for f, v in saved.items():
            self.env.pop(f, None)
            if v is not _MISSING:
                self.env[f] = v

    def loop_over(self) -> bool:
        """After an iteration of a loop unrolled while tracing: whether it is over (a `break` or `return` taken)."""
        env = self.env
        return env.get(BREAK) is True or env.get(RETURN) is True

    def leave_test(self, names: list[str]) -> list[Value]:
        """For a runtime `while` whose body may `break` or `return`: the traced flags its condition must test
        first (the condition is not evaluated once one is set)."""
        return [self.env[f] for f in (RETURN, BREAK) if f in names]

    def lazy_bool(self, cond: Value, then, orelse, loc) -> Value:
        """A traced bool: `then()` where `cond` holds, else `orelse()`, each evaluated in its own branch of an `If`
        (so only the one taken runs); each gives a bool, traced or compile-time."""
        values, blocks = [], []
        for fn in (then, orelse):
            with Entered(self, f"the condition at line {loc.line}") as region, self.block() as stmts:
                v = fn()
            if region.writes:
                raise KernelTypeError("an operand of `and` or `or` evaluated only on one path changes a list or "
                                      "dict; change it in a statement of its own", loc)
            values.append(self.coerce_to(v, _BOOL, loc))
            blocks.append(stmts)
        result = Var(self.fresh("cond"), _BOOL, loc=loc)
        self.emit(If(cond, blocks[0], blocks[1], values[:1], values[1:], [result], loc=loc))
        return result

    def visit_iteration(self, body: list[ast.stmt], memo: BodyMemo | None = None) -> None:
        """One iteration of a loop's body: guarded when a `break` or `return` may have been taken before it; a
        runtime loop's body with carried variables replays what it can (`memo`)."""
        if self.exiting(body, 0):
            return
        if memo is not None:
            visit_loop_body(self, body, memo)
        else:
            self.visit_body(body)


__all__ = ["BREAK", "CONTINUE", "EXITS", "FLAGS", "RETURN", "Exits", "any_set", "body_exits", "dead_value",
           "flag_names", "none_set", "statement_exits"]
