"""Read the text `metile.ir.printer.pretty` writes back into IR: `parse(pretty(k)) == k`.

A recursive-descent parser over `metile.ir.scanner.Scanner`; value operations are read by
`metile.ir.parse_ops`. Names are resolved in nested scopes as the printer writes them, and a value
line's printed type must equal the type its operands give, so a hand-written text with a wrong type
fails here with the line and column. Everything else (scoping of bound names, operand types) is the
verifier's job: `parse` does not call it.
"""

from __future__ import annotations

import json
import re

import attrs

from metile.ir.errors import Loc
from metile.ir.layouts import Blocked, Channel, Fragments, InDevice, Recomputed, Shared, TileLayout
from metile.ir.metal import MatrixStore, TensorHold, TensorMatmul, TensorRelease, VecStore
from metile.ir.node import Node
from metile.ir.ops import AtomicOp, Fence, Stage
from metile.ir.parse_ops import parse_op
from metile.ir.scanner import _STRING, NAME, ParseError, Scanner
from metile.ir.simt import RingBarrier
from metile.ir.stmts import (
    AtomicAdd,
    Barrier,
    CompileOptions,
    DeviceAssert,
    DevicePrint,
    For,
    If,
    Kernel,
    LaunchPlan,
    Let,
    RoleSpan,
    Schedule,
    Store,
    While,
)
from metile.ir.tile import SimdgroupRole
from metile.ir.types import Type
from metile.ir.values import Param, Stmt, Value, Var

_NAME = re.compile(rf"%({NAME}|[0-9]+)")
_ARRANGEMENT = re.compile(r"([0-9]+)x([0-9]+)")
_ATOMIC_OPS = {op.value: op for op in AtomicOp}


def parse(text: str, *, file: str = "<ir>") -> Kernel:
    """The kernel written in `text` (locations in errors refer to `file`)."""
    p = Parser(text, file)
    k = p.kernel()
    p.end()
    return k


def parse_type(text: str) -> Type:
    p = Scanner(text, "<type>")
    t = p.type()
    p.end()
    return t


class Parser(Scanner):
    """Reads a kernel; see `parse`."""

    def __init__(self, text: str, file: str):
        super().__init__(text, file)
        self.scopes: list[dict[str, Value]] = [{}]
        self.dot_plans: dict = {}     # the kernel's schedule, read beside its dots and loops
        self.loop_buffers: dict = {}
        self.layouts: dict = {}       # per named tile, its layout

    # ---- names and scopes

    def ref(self) -> Value:
        at = self.i
        name = "%" + self.take(_NAME, "a value (%name)").group(1)
        for scope in reversed(self.scopes):
            if (v := scope.get(name)) is not None:
                return v
        self.fail(f"{name} is not defined here", at)

    def refs(self) -> list[Value]:
        out = [self.ref()]
        while self.accept(","):
            out.append(self.ref())
        return out

    def define(self, name: str, v: Value, at: int) -> None:
        if name[1:].isdigit() and name in self.scopes[-1]:
            self.fail(f"{name} is defined twice", at)
        self.scopes[-1][name] = v

    def binder(self) -> Var:
        """`%name: type`."""
        name = self.take(_NAME, "a name (%name)").group(1)
        self.expect(":")
        return Var(name, self.type())

    # ---- kernel and statements

    def kernel(self) -> Kernel:
        self.expect("kernel")
        self.expect("@")
        name = self.ident()
        self.expect("(")
        params: list[Param] = []
        while not self.accept(")"):
            if params:
                self.expect(",")
            at = self.i
            var = self.binder()
            multiple = self.int() if self.accept("multiple") else 1
            length_of = None
            if self.accept("length"):
                array = self.ref()
                if not isinstance(array, Param):
                    self.fail(f"%{array.name} is not a parameter", at)
                length_of = array.index
            p = Param(var.name, len(params), var.type, multiple, length_of, loc=self.opt_loc())
            self.define(f"%{p.name}", p, at)
            params.append(p)
        self.expect("stage")
        at = self.i
        try:
            stage = Stage(self.ident())
        except ValueError:
            self.fail("expected a stage (tile, simt, metal)", at)
        meta = {}
        if self.accept("meta"):
            self.expect("{")
            while not self.accept("}"):
                if meta:
                    self.expect(",")
                key = self.ident()
                self.expect("=")
                meta[key] = self.int()
        options = CompileOptions()
        if self.accept("options"):
            self.expect("{")
            given: dict[str, int] = {}
            while not self.accept("}"):
                if given:
                    self.expect(",")
                at = self.i
                key = self.ident()
                if key not in CompileOptions.FIELDS or key in given:
                    self.fail(f"expected one of {', '.join(CompileOptions.FIELDS)} in the compiler options", at)
                self.expect("=")
                given[key] = self.int()
            options = CompileOptions(**given)
        plan = self.plan() if self.accept("plan") else None
        loc = self.opt_loc()
        self.expect("{")
        body = self.body()
        self.expect("}")
        return Kernel(name, stage, params, body, meta, plan, options, Schedule(self.dot_plans, self.loop_buffers,
                                                                                    self.layouts),
                      loc=loc)

    def plan(self) -> LaunchPlan:
        """`{threads = N, vector_width = V, threadgroup_memory = B, roles = [F+C, ...]}` after `plan`."""
        self.expect("{")
        fields: dict[str, object] = {}
        for key in ("threads", "vector_width", "threadgroup_memory"):
            at = self.i
            if self.ident() != key:
                self.fail(f"expected `{key}` in the launch plan", at)
            self.expect("=")
            fields[key] = self.int()
            self.expect(",")
        at = self.i
        if self.ident() != "roles":
            self.fail("expected `roles` in the launch plan", at)
        self.expect("=")
        self.expect("[")
        roles = []
        while not self.accept("]"):
            if roles:
                self.expect(",")
            first = self.int()
            self.expect("+")
            roles.append(RoleSpan(first, self.int()))
        self.expect("}")
        return LaunchPlan(roles=tuple(roles), **fields)

    def body(self) -> list[Stmt]:
        """Statements up to a closing `}`, `yield` or `condition` (not consumed)."""
        out: list[Stmt] = []
        while not (self.at("}") or self.at("yield") or self.at("condition")):
            if self.peek(_NAME):
                s = self.value_line()
                if s is not None:
                    out.append(s)
                continue
            out.append(self.stmt())
        return out

    def yields(self, keyword: str = "yield") -> tuple[Value, ...]:
        return tuple(self.refs()) if self.accept(keyword) else ()

    def region(self, binders=()) -> tuple[list[Stmt], tuple[Value, ...]]:
        """`{ body [yield ...] }` in a new scope holding `binders`."""
        self.expect("{")
        self.scopes.append({f"%{v.name}": v for v in binders})
        body = self.body()
        ys = self.yields()
        self.expect("}")
        self.scopes.pop()
        return body, ys

    def value_line(self) -> Let | None:
        """`%N = op ... : T` (a numbered value, no statement) or `%x [: T] = ...` (a `Let`)."""
        at = self.i
        name = "%" + self.take(_NAME, "a name").group(1)
        declared = self.type() if self.accept(":") else None
        self.expect("=")
        if self.peek(_NAME):
            value = self.ref()
            self.expect(":")
            ty_at = self.i
            if value.type != self.type():
                self.fail(f"type mismatch: {value.type} is the type of this value", ty_at)
        else:
            value = parse_op(self)
        layout = self.layout() if self.accept("#") else None
        loc = self.opt_loc()
        if name[1:].isdigit():
            if layout is not None:
                self.fail("a numbered value has no layout", at)
            if declared is not None:
                self.fail("a numbered value has no declared type", at)
            self.define(name, _with_loc(value, loc), at)
            return None
        var = Var(name[1:], declared if declared is not None else value.type, loc=loc)
        if layout is not None:
            self.layouts[var.name] = layout
        if not isinstance(value, (Var, Param)):
            value = _with_loc(value, loc)
        self.define(name, var, at)
        return Let(var, value, loc=loc)

    def stmt(self) -> Stmt:
        at = self.i
        word = self.ident()
        match word:
            case "store":
                ptr, value = self.refs_n(2, more=("mask",))
                mask = self.ref() if self.accept("mask") else None
                return Store(ptr, value, mask, loc=self.opt_loc())
            case _ if word.startswith("atomic_") and word[7:] in _ATOMIC_OPS:
                ptr, value = self.refs_n(2, more=("mask",))
                mask = self.ref() if self.accept("mask") else None
                return AtomicAdd(ptr, value, mask, _ATOMIC_OPS[word[7:]], loc=self.opt_loc())
            case "device_print":
                prefix = json.loads(self.take(_STRING, "a quoted prefix").group(0))
                values = []
                while self.accept(","):
                    values.append(self.ref())
                hex_ = self.accept("hex")
                index = []
                if self.accept("index"):
                    self.expect("(")
                    index = self.refs()
                    self.expect(")")
                mask = self.ref() if self.accept("mask") else None
                return DevicePrint(prefix, values, hex_, index, mask, loc=self.opt_loc())
            case "device_assert":
                cond = self.ref()
                self.expect(",")
                msg = json.loads(self.take(_STRING, "a quoted message").group(0))
                mask = self.ref() if self.accept("mask") else None
                return DeviceAssert(cond, msg, mask, loc=self.opt_loc())
            case "vstore":
                ptr, value = self.refs_n(2)
                return VecStore(ptr, value, loc=self.opt_loc())
            case "matrix_store":
                value, ptr, stride = self.refs_n(3, more=("transpose",))
                transpose = self.accept("transpose")
                return MatrixStore(value, ptr, stride, transpose, loc=self.opt_loc())
            case "matmul2d":
                a, lda, b, ldb = self.refs_n(4)
                self.expect(",")
                held = self.ident() if self.accept("held") else ""
                c, ldc = (None, None) if held else self.refs_n(2)
                self.expect(",")
                m, n, k = self.shape_n(3)
                accumulate, relaxed, simdgroups = self.accept_flags(("accumulate", "relaxed", "simdgroups"))
                return TensorMatmul(a, lda, b, ldb, c, ldc, (m, n, k), accumulate, relaxed, simdgroups, held,
                                    loc=self.opt_loc())
            case "tensor_hold":
                name = self.ident()
                self.expect(",")
                m, n, k = self.shape_n(3)
                self.expect(",")
                dtype = self.dtype()
                _, relaxed, simdgroups = self.accept_flags(("relaxed", "simdgroups"))
                return TensorHold(name, (m, n, k), dtype, relaxed, simdgroups, loc=self.opt_loc())
            case "tensor_release":
                name = self.ident()
                self.expect(",")
                ptr, ld = self.refs_n(2)
                self.expect(",")
                m, n = self.shape_n(2)
                _, _, simdgroups = self.accept_flags(("simdgroups",))
                return TensorRelease(name, ptr, ld, (m, n), simdgroups, loc=self.opt_loc())
            case "barrier":
                fence_at = self.i
                try:
                    fence = Fence(self.ident())
                except ValueError:
                    self.fail("expected a fence (none, device, threadgroup, device_and_threadgroup)", fence_at)
                return Barrier(fence, loc=self.opt_loc())
            case "ring_barrier":
                stage = self.ident()
                kept_at = self.i
                word = self.ident()
                if word not in ("kept", "dropped"):
                    self.fail("expected `kept` or `dropped` after a ring_barrier's stage", kept_at)
                return RingBarrier(stage, word == "kept", loc=self.opt_loc())
            case "for":
                return self.for_stmt()
            case "if":
                return self.if_stmt()
            case "while":
                return self.while_stmt()
            case "simdgroup_role":
                role = self.int()
                self.expect("of")
                num_roles = self.int()
                self.expect(",")
                self.expect("sgs")
                num_sgs = self.int()
                results = self.results()
                loc = self.opt_loc()
                body, ys = self.region()
                self.bind_results(results)
                return SimdgroupRole(role, num_roles, num_sgs, body, ys, results, loc=loc)
        self.fail(f"expected a statement, not '{word}'", at)

    def shape_n(self, n: int) -> list[int]:
        """`shape [a, b, ...]` of `n` integers."""
        self.expect("shape")
        self.expect("[")
        out = [self.int()]
        while len(out) < n:
            self.expect(",")
            out.append(self.int())
        self.expect("]")
        return out

    def accept_flags(self, words: tuple[str, ...]) -> tuple[bool, bool, int]:
        """The optional `, accumulate`, `, relaxed` and `, simdgroups N` that follow a tensor statement (those of
        `words`), in any order."""
        accumulate = relaxed = False
        simdgroups = 0
        while self.at(","):
            back = self.i
            self.expect(",")
            if "accumulate" in words and self.accept("accumulate"):
                accumulate = True
            elif "relaxed" in words and self.accept("relaxed"):
                relaxed = True
            elif "simdgroups" in words and self.accept("simdgroups"):
                simdgroups = self.int()
            else:
                self.i = back
                break
        return accumulate, relaxed, simdgroups

    def refs_n(self, n: int, *, more: tuple[str, ...] = ()) -> list[Value]:
        """`n` comma-separated operands, then (after one more comma) one of the keywords `more`."""
        out = [self.ref()]
        while len(out) < n:
            self.expect(",")
            out.append(self.ref())
        if more and self.at(","):
            self.expect(",")
            if not any(self.at(word) for word in more):
                self.fail("expected " + " or ".join(f"'{w}'" for w in more))
        return out

    def iter_args(self) -> tuple[list[Var], list[Value]]:
        carried, inits = [], []
        if self.accept("iter_args"):
            self.expect("(")
            while not self.accept(")"):
                if carried:
                    self.expect(",")
                carried.append(self.laid_out(self.binder()))
                self.expect("=")
                inits.append(self.ref())
        return carried, inits

    def results(self) -> list[Var]:
        out: list[Var] = []
        if self.accept("->"):
            self.expect("(")
            while not self.accept(")"):
                if out:
                    self.expect(",")
                out.append(self.laid_out(self.binder()))
        return out

    def laid_out(self, var: Var) -> Var:
        """`var`, with the layout written after it (`#blocked<128, 4>`) recorded for the schedule."""
        if self.accept("#"):
            self.layouts[var.name] = self.layout()
        return var

    def layout(self) -> TileLayout:
        """A layout's text (`metile.ir.layouts`), after its `#`."""
        at = self.i
        word = self.ident()
        if word in ("recomputed", "in_device", "channel", "shared"):
            return {"recomputed": Recomputed, "in_device": InDevice, "channel": Channel, "shared": Shared}[word]()
        if word == "blocked":
            self.expect("<")
            threads = self.int()
            self.expect(",")
            vec = self.int()
            self.expect(">")
            return Blocked(threads, vec, self.first_sg())
        if word == "fragments":
            self.expect("<")
            dims = self.take(_ARRANGEMENT, "an arrangement of simdgroups (2x2)")
            extra = {}
            while self.accept(","):
                key = self.ident()
                if key not in ("split", "replicas") or key in extra:
                    self.fail("expected `split N` or `replicas N`")
                extra[key] = self.int()
            self.expect(">")
            return Fragments(int(dims.group(1)), int(dims.group(2)), self.first_sg(), **extra)
        self.fail("expected a layout: blocked, fragments, recomputed, in_device, channel or shared", at)

    def first_sg(self) -> int:
        if self.accept("@"):
            self.expect("sg")
            return self.int()
        return 0

    def bind_results(self, results: list[Var]) -> None:
        for r in results:
            self.scopes[-1][f"%{r.name}"] = r

    def for_stmt(self) -> For:
        index = self.binder()
        self.expect("=")
        start = self.ref()
        self.expect("to")
        stop = self.ref()
        self.expect("step")
        step = self.ref()
        carried, inits = self.iter_args()
        results = self.results()
        num_stages = self.int() if self.accept("stages") else None
        buffers = self.int() if self.accept("buffers") else 1
        loc = self.opt_loc()
        body, ys = self.region([index, *carried])
        self.bind_results(results)
        loop = For(index, start, stop, step, carried, inits, body, ys, results, num_stages, loc=loc)
        if buffers != 1:
            self.loop_buffers[loop] = buffers
        return loop

    def if_stmt(self) -> If:
        cond = self.ref()
        results = self.results()
        loc = self.opt_loc()
        then, then_yields = self.region()
        orelse, else_yields = self.region() if self.accept("else") else ([], ())
        self.bind_results(results)
        return If(cond, then, orelse, then_yields, else_yields, results, loc=loc)

    def while_stmt(self) -> While:
        carried, inits = self.iter_args()
        results = self.results()
        loc = self.opt_loc()
        self.expect("{")
        self.scopes.append({f"%{v.name}": v for v in carried})
        cond_body = self.body()
        if not self.accept("condition"):
            self.fail("expected 'condition %c' at the end of a while's first block")
        cond = self.ref()
        self.expect("}")
        self.expect("do")
        self.expect("{")
        body = self.body()
        ys = self.yields()
        self.expect("}")
        self.scopes.pop()
        self.bind_results(results)
        return While(carried, inits, cond_body, cond, body, ys, results, loc=loc)


def _with_loc(n: Node, loc: Loc | None) -> Node:
    return n if loc is None or isinstance(n, (Var, Param)) else attrs.evolve(n, loc=loc)


__all__ = ["ParseError", "Parser", "parse", "parse_type"]
