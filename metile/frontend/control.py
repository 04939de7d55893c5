"""Control flow of the tracer: compile-time `if`/`for`/`while` and their runtime IR forms.

- `if` on a compile-time value takes one branch while tracing; on a traced scalar it becomes an `If`
  whose results are the variables either branch assigns (a variable assigned in only one branch
  keeps its old value in the other; one that did not exist before and is assigned in only one
  branch is not visible after). A tile condition is an error suggesting `metile.where`.
- `for x in <Python iterable>` (a `range` of compile-time ints, a tuple...) is unrolled.
- `for i in metile.tile_range(start, stop, step, num_stages=...)` becomes a `For`; `while` on a
  traced condition becomes a `While`; a `while` on compile-time values runs while tracing.
  Loop-carried variables are the variables assigned in the body that exist before the loop. Their
  type is widened until it holds every value the body assigns (a Python `0.0` combined with a tile
  becomes a tile: the statement that widens it is traced again with the wider type, `metile.frontend.widen`, or
  the body is when that cannot be done). Variables first assigned inside a runtime loop are not visible after it.
- `with metile.simdgroup_role(...)` becomes a `SimdgroupRole`; the traced values it assigns are its results.
- `return`, `break` and `continue` are flags merged and carried like variables (`metile.frontend.exits`); `and` and
  `or` on traced scalars short-circuit through an `If` (`lazy_bool`, `metile.frontend.logic`).
"""

from __future__ import annotations

import ast

from metile.frontend import semantic as sem
from metile.frontend.binding import bind_args
from metile.frontend.builtins import static_int
from metile.frontend.composites import CarriedParts, is_composite
from metile.frontend.containers import Entered, restore
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelTypeError,
    RuntimeConditionError,
    UnsupportedSyntaxError,
)
from metile.frontend.exits import Exits, any_set, body_exits, dead_value, flag_names
from metile.frontend.matmul import active_everywhere
from metile.frontend.regions import LoopSlots, hand_off, hand_off_items, leave_branch, merge_containers, merge_value
from metile.frontend.replay import BodyMemo, same_var
from metile.frontend.widen import Widening
from metile.ir.ops import CmpOp
from metile.ir.stmts import For, If, While
from metile.ir.tile import SimdgroupRole
from metile.ir.types import DType, PtrType
from metile.ir.values import Compare, Value, Var
from metile.language import simdgroup_role

_MAX_WIDEN = 4
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_MAX_UNROLL = 100_000


class Block:
    """The context of `ControlFlow.block` (a class: cheaper to enter than a generator-based context manager)."""

    __slots__ = ("saved", "tracer")

    def __init__(self, tracer):
        self.tracer = tracer

    def __enter__(self) -> list:
        tr = self.tracer
        self.saved, tr.stmts = tr.stmts, []
        tr.depth += 1
        return tr.stmts

    def __exit__(self, *exc) -> None:
        tr = self.tracer
        tr.stmts = self.saved
        tr.depth -= 1


class ControlFlow(Exits):
    """Mixin of `Tracer`: the control-flow statements."""

    def assigned_names(self, body: list[ast.stmt]) -> list[str]:
        """Names a statement list assigns, in order of first appearance, then the flags of the `return`, `break`
        and `continue` statements that leave it (`metile.frontend.exits`)."""
        seen: dict[str, None] = {}
        for stmt in body:
            for name in self.prepared.statement_io(stmt)[1]:
                seen.setdefault(name, None)
        return [*seen, *flag_names(body_exits(self.prepared, body))]


    def block(self) -> Block:
        """`with self.block() as stmts:` collects the statements traced inside into `stmts`, one level deeper."""
        return Block(self)

    def truth(self, value, node: ast.AST, what: str):
        """A compile-time bool, or a traced scalar bool for a runtime construct."""
        if not isinstance(value, Value):
            return bool(value)
        loc = self.loc(node)
        t = value.type
        if isinstance(t, PtrType) or t.shape:
            raise RuntimeConditionError(
                f"the condition of `{what}` is a {t}, not a scalar: use metile.where(cond, a, b) to choose per "
                "element, or reduce it first (metile.max(mask) is true when any element is, metile.min(mask) when "
                "all are)", loc)
        if t.dtype is not DType.BOOL:
            value = Compare(CmpOp.NE, value, sem.const(0, t.dtype, loc), loc=loc)
        return value

    def hide(self, names, why: str) -> None:
        for n in names:
            if n not in self.env:
                self.hidden[n] = why

    # ---- if

    def stmt_If(self, node: ast.If) -> None:
        cond = self.truth(self.eval(node.test), node.test, "if")
        if not isinstance(cond, Value):
            self.visit_body(node.body if cond else node.orelse)
            return
        loc = self.loc(node)
        self.branch(cond, node.body, node.orelse, loc, f"the runtime `if` at line {loc.line}")

    def branch(self, cond: Value, body: list[ast.stmt], orelse: list[ast.stmt], loc, what: str, *,
               inside: dict | None = None, dead: bool = False) -> None:
        """A runtime `if` on `cond` whose branches trace `body` and `orelse`; `inside` holds what the names are in
        the first branch at its start (the flags of a guard), and `dead` says the second branch (empty) leaves the
        body, so a variable first assigned in the first one has a zero there (`metile.frontend.exits`)."""
        before = self.env
        envs, blocks, ends, entry = [], [], [], {}
        for stmts_ in (body, orelse):
            self.env = dict(before)
            if inside is not None and stmts_ is body:
                self.env.update(inside)
            with Entered(self, what) as region, self.block() as stmts:
                self.visit_body(stmts_)
            envs.append(self.env)
            blocks.append(stmts)
            ends.append(leave_branch(region, entry))  # and the containers it changed go back as they were
        self.env = before
        names = self.assigned_names(body + orelse)
        if inside is not None:
            names += [n for n in inside if n not in names]
        if dead:
            for name in names:
                if name in envs[0] and name not in before and name not in envs[1]:
                    v = dead_value(envs[0][name], loc)
                    if v is not None:
                        envs[1][name] = v
        acc: tuple[list, list, list] = ([], [], [])
        for name in names:
            if name not in envs[0] or name not in envs[1]:
                continue
            before[name] = merge_value(self, name, f"variable '{name}'", envs[0][name], envs[1][name], loc, acc)
        merge_containers(self, entry, ends, loc, acc)
        self.hide([n for n in names if n not in before], f"it is only assigned in one branch of the runtime `if` "
                  f"at line {loc.line}")
        then_ys, else_ys, results = acc
        self.emit(If(cond, blocks[0], blocks[1], then_ys, else_ys, results, loc=loc))

    def coerce_to(self, v, t, loc):
        if isinstance(t, PtrType):
            return sem.broadcast_to(v, t.shape, loc)
        return sem.coerce(v, t.dtype, t.shape, loc)

    # ---- loops

    def carried_names(self, assigned: list[str], node: ast.AST, exclude=()) -> list[str]:
        """The names among `assigned` (those a loop's body assigns) that a runtime loop carries."""
        names = []
        for name in assigned:
            if name in exclude or name not in self.env:
                continue
            v = self.env[name]
            if not (sem.is_ir(v) or sem.is_number(v) or is_composite(v)):
                raise KernelTypeError(f"variable '{name}' holds a compile-time {type(v).__name__} and is reassigned "
                                      "in a runtime loop; only numbers and traced values can change across "
                                      "iterations", self.loc(node))
            names.append(name)
        return names

    def trace_loop(self, names: list[str], node: ast.AST, trace_body, what: str, memo: BodyMemo | None = None,
                   test: ast.expr | None = None):
        """Trace a runtime loop body (in a region of its own, `what`) until the carried variables, the container
        items it assigns (`LoopSlots`) and their types are stable; returns
        `(carried vars, coerced inits, coerced yields, results, trace_body's result)`. With the body's `memo`, an
        attempt may widen a carried variable where the body assigns it (`metile.frontend.widen`); `test` is the
        condition traced before the body."""
        before = self.env
        loc = self.loc(node)
        parts = CarriedParts(before, names, loc)   # a composite value (a block pointer) is carried part by part
        names = parts.names
        inits_given = parts.flat(before)
        types = {n: sem.type_of(v, loc) for n, v in zip(names, inits_given)}
        # the carried variables whose initial value is active everywhere, so that they are (`self.active`): where an
        # update is inactive `skip_inactive` keeps the old value, so they are in every iteration, and after the loop
        active = [i for i, v in enumerate(inits_given) if active_everywhere(self, v)]
        slots = LoopSlots(self, what, loc)
        plain = {n for n in parts.given if n not in parts.templates and n.isidentifier()}
        early = memo is not None and bool(plain)
        carried: list[Var] = []
        attempt = 0
        while True:
            used = set(self.names)
            # The variables of the previous attempt whose name and type stay are kept, so that the statements
            # the body starts with can be replayed (`visit_loop_body`).
            prev, carried = carried, [same_var(carried[i] if carried else None, self.fresh(n), types[n], loc)
                                      for i, n in enumerate(names)]
            slot_vars = slots.place()
            for i in active:
                self.active[carried[i].name] = carried[i]
            widening = Widening(names, plain, carried, types, loc, test) if early and attempt < _MAX_WIDEN - 1 \
                and any(not types[n].shape for n in plain) else None
            if memo is not None:
                memo.widening = widening
            self.env = dict(before)
            self.env.update(parts.rebuilt(carried))
            with Entered(self, what) as region:
                out = trace_body()
            ys = parts.flat(self.env)
            self.env = before
            if widening is not None and widening.retyped and not widening.exact:
                for c, state in region.writes.values():   # the attempt at the same types, without widening early
                    restore(c, state)
                self.names, carried, early = used, prev, False
                continue
            grew = slots.leave(region)
            new = {n: sem.join_type(types[n], y, f"loop-carried variable '{n}'", loc) for n, y in zip(names, ys)}
            if widening is not None and widening.retyped:
                wide = widening.types
                if not grew and new == wide and all(sem.join_type(wide[n], y, f"loop-carried variable '{n}'", loc)
                                                    == wide[n] for n, y in zip(names, ys)):
                    types = wide   # the attempt at the types of the next one, which is the last
                    break
                early = False   # widening early did not find the last types: the next attempts do not try
                if new == types and not grew:   # the attempt at these types is the last: trace it
                    self.names, carried = used, prev
                    continue
            elif new == types and not grew:
                break
            attempt += 1
            if attempt == _MAX_WIDEN:
                raise KernelTypeError("the types of loop-carried variables do not settle", loc)
            self.names, types = used, new
        slot_inits, slot_yields = slots.carried()
        inits = [self.coerce_to(v, types[n], loc) for n, v in zip(names, inits_given)] + slot_inits
        yields = [self.coerce_to(y, types[n], loc) for n, y in zip(names, ys)] + slot_yields
        results = [Var(self.fresh(n), types[n], loc=loc) for n in names]
        for i in active:
            self.active[results[i].name] = results[i]
        before.update(parts.rebuilt(results))
        return carried + slot_vars, inits, yields, results + slots.finish(), out

    def stmt_For(self, node: ast.For) -> None:
        loc = self.loc(node)
        if node.orelse:
            raise UnsupportedSyntaxError("`for ... else` is not supported inside a kernel", loc)
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.eval(it.func)
            loop = self.dialect.loops.get(fn)
            if loop is not None:   # a runtime loop of the language (metile.tile_range)
                bounds = loop(self, self.loc(it), [self.eval(x) for x in it.args],
                              {k.arg: self.eval(k.value) for k in it.keywords})
                return self.runtime_for(node, *bounds)
            if fn is range and not it.keywords:
                args = [self.eval(x) for x in it.args]
                if self.dialect.runtime_range or any(isinstance(x, Value) for x in args):
                    # a traced bound (or a language whose `range` always is): a runtime loop, as Triton's `range`
                    if not 1 <= len(args) <= 3:
                        raise KernelTypeError(f"range() takes 1 to 3 arguments, not {len(args)}", self.loc(it))
                    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
                    return self.runtime_for(node, start, stop, step, None)
                seq = range(*args)
            else:
                seq = self.eval(it)
        else:
            seq = self.eval(it)
        if isinstance(seq, Value):
            raise ConstexprRequiredError("a Python `for` loop needs a compile-time iterable; use "
                                         "metile.tile_range(start, stop, step) for a runtime loop", self.loc(it))
        try:
            items = iter(seq)
        except TypeError:
            raise KernelTypeError(f"cannot iterate over {type(seq).__name__}", self.loc(it)) from None
        words = self.prepared.loop_facts(node)[0]
        saved = self.enter_loop(words)
        for count, item in enumerate(items):
            if count >= _MAX_UNROLL:
                raise ConstexprRequiredError(f"a Python `for` loop unrolls to more than {_MAX_UNROLL} iterations", loc)
            self.assign(node.target, item)
            self.start_iteration(words)
            self.visit_iteration(node.body)
            if self.loop_over():
                break
        self.leave_loop(saved)

    def runtime_for(self, node: ast.For, start, stop, step, num_stages) -> None:
        """A `for` over `tile_range(start, stop, step, num_stages)` (or a `range` with a traced bound): a `For`."""
        loc = self.loc(node)
        call = node.iter
        call_loc = self.loc(call)
        # the index is an i32, or an i64 when a bound is a 64-bit integer (a value of 64 bits, or a number beyond i32)
        index_dtype = DType.I32
        for b in (start, stop, step):
            if b.__class__ is int and _I32_MIN <= b <= _I32_MAX:   # the common case, which `_is_wide` refuses
                continue
            if _is_wide(b):
                index_dtype = DType.I64
                break
        start = self.loop_bound(start, "start", call, index_dtype)
        stop = self.loop_bound(stop, "stop", call, index_dtype)
        stages = None if num_stages is None else static_int(num_stages, "num_stages", call_loc)
        if isinstance(step, Value):  # a runtime step, which must be positive when the loop runs
            step = self.loop_bound(step, "step", call, index_dtype)
        elif static_int(step, "the step of the loop", call_loc) <= 0:
            raise KernelTypeError("a runtime loop needs step > 0", call_loc)
        else:
            step = sem.const(step, index_dtype, loc)
        if stages is not None and stages < 1:
            raise KernelTypeError("metile.tile_range needs num_stages >= 1", call_loc)
        if not isinstance(node.target, ast.Name):
            raise UnsupportedSyntaxError("the target of a tile_range loop must be one name", self.loc(node.target))
        index_name = node.target.id
        words, assigned = self.prepared.loop_facts(node)
        saved = self.enter_loop(words)
        names = self.carried_names(assigned, node, exclude=(index_name,))
        holder = {"index": None}
        memo = BodyMemo()

        def body():
            holder["index"] = index = same_var(holder["index"], self.fresh(index_name), start.type,
                                                self.loc(node.target))
            self.env[index_name] = index
            self.start_iteration(words)
            with self.block() as stmts:
                # with nothing carried, no type widens: one attempt, with nothing to replay
                self.visit_iteration(node.body, memo if names else None)
            return stmts

        carried, inits, yields, results, stmts = self.trace_loop(
            names, node, body, f"the tile_range loop at line {loc.line}", memo)
        self.hide([index_name, *assigned],
                  f"it is only assigned inside the tile_range loop at line {loc.line}")
        self.emit(For(holder["index"], start, stop, step, carried, inits, stmts, yields, results, num_stages=stages,
                      loc=loc))
        self.leave_loop(saved)

    def loop_bound(self, v, what: str, node: ast.AST, dtype: DType) -> Value:
        loc = self.loc(node)
        if v.__class__ is int or (sem.is_number(v) and not isinstance(v, (bool, float))):
            return sem.const(v, dtype, loc)
        if isinstance(v, Value) and not isinstance(v.type, PtrType) and v.type.shape == () and v.type.dtype.is_int:
            return sem.cast(v, dtype, loc)
        raise KernelTypeError(f"the {what} of metile.tile_range must be an integer scalar, not "
                              f"{getattr(v, 'type', type(v).__name__)}", loc)

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise UnsupportedSyntaxError("`while ... else` is not supported inside a kernel", self.loc(node))
        with self.block() as probe:   # the condition is traced again where the loop evaluates it, so a traced one's
            first = self.eval(node.test)   # statements (an atomic's, say) are dropped here: they would run once more
        if not isinstance(first, Value):
            self.stmts.extend(probe)
        words = self.prepared.loop_facts(node)[0]
        saved = self.enter_loop(words)
        try:
            self.while_loop(node, first, words)
        finally:
            self.leave_loop(saved)

    def while_loop(self, node: ast.While, first, words: frozenset[str]) -> None:
        loc = self.loc(node)
        if not isinstance(first, Value) and not (words & {"break", "return"} and self.truth(first, node.test, "while")):
            count = 0
            while self.truth(first, node.test, "while"):
                count += 1
                if count > _MAX_UNROLL:
                    raise ConstexprRequiredError("a compile-time `while` loop ran too long", loc)
                self.start_iteration(words)
                self.visit_iteration(node.body)
                first = self.eval(node.test)
                if isinstance(first, Value):
                    raise RuntimeConditionError("the condition of this `while` became a traced value inside the "
                                                "loop; start it from a traced value to make a runtime loop", loc)
            return
        self.truth(first, node.test, "while")
        assigned = self.prepared.loop_facts(node)[1]
        names = self.carried_names(assigned, node)
        memo = BodyMemo()

        def test():
            return self.truth(self.eval(node.test), node.test, "while")

        def body():
            with self.block() as cond_stmts:
                flags = self.leave_test(names)
                # once a `break` or `return` is taken, the loop ends without evaluating its condition again
                cond = self.lazy_bool(any_set(flags, loc), lambda: False, test, loc) if flags else test()
            if not isinstance(cond, Value):
                raise RuntimeConditionError("the condition of a runtime `while` must stay a traced value", loc)
            self.start_iteration(words)
            with self.block() as stmts:
                # with nothing carried, no type widens: one attempt, with nothing to replay
                self.visit_iteration(node.body, memo if names else None)
            return cond_stmts, cond, stmts

        carried, inits, yields, results, (cond_stmts, cond, stmts) = self.trace_loop(
            names, node, body, f"the `while` loop at line {loc.line}", memo, node.test)
        self.hide(assigned, f"it is only assigned inside the `while` loop at line {loc.line}")
        self.emit(While(carried, inits, cond_stmts, cond, stmts, yields, results, loc=loc))

    # ---- with

    def stmt_With(self, node: ast.With) -> None:
        loc = self.loc(node)
        call = node.items[0].context_expr if len(node.items) == 1 else None
        if not (isinstance(call, ast.Call) and self.eval(call.func) is simdgroup_role) or node.items[0].optional_vars:
            raise UnsupportedSyntaxError("with statements are not supported inside a @metile.kernel, except "
                                         "`with metile.simdgroup_role(...):`", loc)
        if body_exits(self.prepared, node.body):
            raise UnsupportedSyntaxError("`return`, `break` and `continue` cannot leave a simdgroup_role block", loc)
        args = [self.eval(a) for a in call.args]
        a = bind_args(simdgroup_role, args, {k.arg: self.eval(k.value) for k in call.keywords}, self.loc(call))
        role, n_roles, n_sgs = (static_int(a[k], k, self.loc(call)) for k in ("role", "num_roles", "num_sgs"))
        if not (0 <= role < n_roles) or n_sgs < 0:
            raise KernelTypeError(f"simdgroup_role needs 0 <= role < num_roles and num_sgs >= 0 (got role={role}, "
                                  f"num_roles={n_roles}, num_sgs={n_sgs})", self.loc(call))
        before = self.env
        self.env = dict(before)
        with Entered(self, f"the simdgroup_role block at line {loc.line}") as region, self.block() as stmts:
            self.visit_body(node.body)
        inside, self.env = self.env, before
        yields, results = [], []
        for name in self.assigned_names(node.body):
            v = inside.get(name)
            if v is None or v is before.get(name):
                continue
            # a traced value (or one inside a container) is handed to the other simdgroups; a compile-time value
            # is the same for every role
            before[name] = hand_off(self, name, v, loc, yields, results)
        hand_off_items(self, region, loc, yields, results)
        self.emit(SimdgroupRole(role, n_roles, n_sgs, stmts, yields, results, loc=loc))


def _is_wide(v) -> bool:
    """Whether the loop bound `v` is a 64-bit integer: a scalar of 64 bits, or a Python int that i32 cannot hold."""
    if isinstance(v, Value):
        return not isinstance(v.type, PtrType) and v.type.dtype.is_int and v.type.dtype.bits == 64
    return isinstance(v, int) and not isinstance(v, bool) and not -(1 << 31) <= v < (1 << 31)
