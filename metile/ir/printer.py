"""The canonical text of Tile IR and Metal IR (`pretty`); `metile.ir.parser` reads it back.

```
kernel @add(%X: ptr<f32, device>, %Out: ptr<f32, device>, %N: i32) stage tile meta {BLOCK = 1024} {
  %0 = program_id 0 : i32
  %1 = const 1024 : i32
  %2 = mul %0, %1 : i32
  %offs = add %3, %4 : tile<1024xi32>
  %x = load %7, mask %6 : tile<1024xf32>
  store %8, %x, mask %6
  %acc = ...
  for %i: i32 = %0 to %N step %1 iter_args(%a: f32 = %2) -> (%sum: f32) {
    ...
    yield %9
  }
}
```
- Each value line is `%name = <op> <operands> : <type>`, the type being the node's own type. A `Let`
  binds a named value `%x`; any other value is numbered `%0, %1, ...` in definition order, printed
  once, just before the first statement that needs it, and reused while the body holding that
  definition is open (a body's numbered values are not visible after it). Kernel parameters and
  bound names are referenced by name.
- A `Let` whose variable's type differs from its value's (only in ill-typed IR) spells it: `%x: T = ...`.
- Binders carry their types (`%i: i32`, `iter_args(%a: f32 = %2)`, `-> (%sum: f32)`).
- `meta` keys are sorted; `stages N` only when N != 1; `else {...}` only when that branch has
  statements or yields.
- With `locs=True` each line ends with `loc("file":line:col)` (before `{` on block headers), col as
  stored (0-based). Without it the text never depends on locations, so goldens do not churn.
"""

from __future__ import annotations

import json

from metile.ir.errors import Loc, assert_never
from metile.ir.metal import (
    Builtin,
    Extract,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixStore,
    Splat,
    TensorHold,
    TensorMatmul,
    TensorRelease,
    VecLoad,
    VecStore,
)
from metile.ir.node import Node, children
from metile.ir.simt import RingBarrier, RingBuffer, Scratch
from metile.ir.stmts import (
    AtomicAdd,
    Barrier,
    CompileOptions,
    DeviceAssert,
    DevicePrint,
    For,
    If,
    Kernel,
    Let,
    Schedule,
    Store,
    While,
)
from metile.ir.tile import (
    AllActive,
    Arange,
    ArgReduce,
    Broadcast,
    ConvertLayout,
    Dot,
    ExpandDims,
    Full,
    Gather,
    Join,
    MmaEngine,
    MmaPlan,
    NumPrograms,
    Permute,
    ProgramId,
    Reduce,
    Reshape,
    Scan,
    SimdgroupId,
    SimdgroupRole,
    SimdLaneId,
    Take,
    ThreadId,
    Transpose,
)
from metile.ir.types import DType
from metile.ir.values import (
    AddPtr,
    AtomicRMW,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
    IntToPtr,
    Load,
    Param,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Stmt,
    Unary,
    Value,
    Var,
    Where,
)


def pretty(n: Node, *, locs: bool = False) -> str:
    """The text of a kernel, a statement or a value (a value prints the lines defining it)."""
    p = _Printer(locs)
    match n:
        case Kernel():
            p.kernel(n)
        case Stmt():
            p.stmt(n)
        case Value():
            name = p.ref(n)
            if isinstance(n, (Var, Param)):
                p.emit(name)
        case _:
            raise TypeError(f"pretty: not an IR node: {n!r}")
    return "\n".join(p.lines) + "\n"


def literal(value: object, dtype: DType) -> str:
    """How a constant of `dtype` is spelled (`1.0`, `-3`, `true`, `inf`, `nan`)."""
    if dtype is DType.BOOL and isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def format_loc(loc: Loc) -> str:
    return f"loc({json.dumps(loc.file)}:{loc.line}:{loc.col})"


def _type_of(n: Node) -> str:
    try:
        return str(n.type)
    except Exception:  # ill-typed IR still prints, for error dumps
        return "<ill-typed>"



def _mma_plan(how: MmaPlan | None) -> str:
    """A `Dot`'s `MmaPlan` as the parser reads it: nothing for the plain way."""
    if how is None:
        return ""
    text = f", pad [{how.pad[0]}, {how.pad[1]}]" if how.pad != (0, 0) else ""
    text += (", serpentine" if how.serpentine else "") + (", preload" if how.preload else "")
    text += f", hoist [{int(how.hoist[0])}, {int(how.hoist[1])}]" if any(how.hoist) else ""
    text += f", split {how.split}" if how.split != 1 else ""
    text += f", direct [{int(how.direct[0])}, {int(how.direct[1])}]" if any(how.direct) else ""
    text += f", chunk {how.chunk}" if how.chunk is not None else ""
    text += f", simdgroups [{how.simdgroups[0]}, {how.simdgroups[1]}]" if how.simdgroups else ""
    return text + (f", engine {how.engine.value}" if how.engine is not MmaEngine.SIMDGROUP_MATRIX else "")

class _Printer:
    def __init__(self, locs: bool):
        self.locs = locs
        self.schedule = Schedule()   # the kernel's, while one is printed
        self.lines: list[str] = []
        self.depth = 0
        self.scopes: list[dict[Node, str]] = [{}]
        self.count = 0

    def emit(self, text: str, loc: Loc | None = None, *, block: bool = False) -> None:
        if self.locs and loc is not None:
            text += " " + format_loc(loc)
        self.lines.append("  " * self.depth + text + (" {" if block else ""))

    # ---- values

    def _known(self, n: Node) -> str | None:
        if isinstance(n, (Var, Param)):
            return f"%{n.name}"
        for scope in reversed(self.scopes):
            if (name := scope.get(n)) is not None:
                return name
        return None

    def ref(self, v: Node) -> str:
        """The name of `v`, printing the definitions of it and its undefined subtrees first."""
        stack: list[tuple[Node, bool]] = [(v, False)]
        while stack:
            n, expanded = stack.pop()
            if self._known(n) is not None:
                continue
            if expanded:
                name = f"%{self.count}"
                self.count += 1
                self.emit(f"{name} = {self.op(n)}", n.loc)
                self.scopes[-1][n] = name
                continue
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(list(children(n))) if self._known(c) is None)
        return self._known(v)

    def refs(self, vs) -> list[str]:
        return [self.ref(v) for v in vs]

    def op(self, n: Node) -> str:
        """`<op> <operands> : <type>` for a value whose children are defined."""
        r = self._known
        match n:
            case Const(value, dtype):
                body = f"const {literal(value, dtype)}"
            case ProgramId(axis):
                body = f"program_id {axis}"
            case NumPrograms(axis):
                body = f"num_programs {axis}"
            case Arange(start, stop):
                body = f"arange {start}, {stop}"
            case Full(_, value):
                body = f"full {r(value)}"
            case Broadcast(x, _):
                body = f"broadcast {r(x)}"
            case ExpandDims(x, axis):
                body = f"expand_dims {r(x)}, {axis}"
            case Reshape(x, _):
                body = f"reshape {r(x)}"
            case Transpose(x):
                body = f"transpose {r(x)}"
            case AllActive(x):
                body = f"all_active {r(x)}"
            case ConvertLayout(x, src, dst):
                body = f"convert_layout {r(x)} #{src.text()} -> #{dst.text()}"
            case Permute(x, order):
                body = f"permute {r(x)}, [{', '.join(map(str, order))}]"
            case Join(a, b):
                body = f"join {r(a)}, {r(b)}"
            case Take(x, axis, index):
                body = f"take {r(x)}, {axis}, {index}"
            case Gather(x, index, axis):
                body = f"gather {r(x)}, {r(index)}, {axis}"
            case Binary(op, lhs, rhs) | Compare(op, lhs, rhs):
                body = f"{op.value} {r(lhs)}, {r(rhs)}"
            case Unary(op, x):
                body = f"{op.value} {r(x)}"
            case Where(cond, x, y):
                body = f"where {r(cond)}, {r(x)}, {r(y)}"
            case Cast(x, _):
                body = f"cast {r(x)}"
            case Bitcast(x, _):
                body = f"bitcast {r(x)}"
            case IntToPtr(x, _):
                body = f"inttoptr {r(x)}"
            case Fma(a, b, c):
                body = f"fma {r(a)}, {r(b)}, {r(c)}"
            case AddPtr(ptr, offset):
                body = f"addptr {r(ptr)}, {r(offset)}"
            case AtomicRMW(op, ptr, value, mask, compare):
                body = f"atomic_rmw {op.value} {r(ptr)}, {r(value)}"
                body += f", mask {r(mask)}" if mask is not None else ""
                body += f", compare {r(compare)}" if compare is not None else ""
            case Load(ptr, mask, other):
                body = f"load {r(ptr)}"
                body += f", mask {r(mask)}" if mask is not None else ""
                body += f", other {r(other)}" if other is not None else ""
                body += ", volatile" if n.volatile else ""
            case SharedAlloc(shape, _):
                body = f"shared_alloc [{', '.join(str(d) for d in shape)}]"
            case Scratch(use, part, _, size):
                body = f"scratch {use}.{part} [{size}]"
            case RingBuffer(stage, use, part, _, size, buffers):
                body = f"ring {r(stage)} {use}.{part} [{size}] x {buffers}"
            case Reduce(op, x, axis):
                body = f"reduce {op.value} {r(x)}, {axis}"
            case ArgReduce(op, x, axis, valid):
                body = f"argreduce {op.value} {r(x)}, {axis}" + (f", valid {r(valid)}" if valid is not None else "")
            case Scan(op, x, axis, reverse):
                body = f"scan {op.value} {r(x)}, {axis}" + (", reverse" if reverse else "")
            case Dot(a, b):
                body = f"dot {r(a)}, {r(b)}" + (", tf32" if n.tf32 else "") + _mma_plan(self.schedule.dots.get(n))
            case ThreadId():
                body = "thread_id"
            case SimdLaneId():
                body = "simd_lane_id"
            case SimdgroupId():
                body = "simdgroup_id"
            case SimdShuffleXor(x, mask):
                body = f"simd_shuffle_xor {r(x)}, {r(mask)}"
            case SimdBroadcast(x, lane):
                body = f"simd_broadcast {r(x)}, {r(lane)}"
            case SimdReduce(op, x):
                body = f"simd_reduce {op.value} {r(x)}"
            case Builtin(kind, axis):
                body = f"builtin {kind.value}, {axis}"
            case VecLoad(ptr, _):
                body = f"vload {r(ptr)}"
            case Extract(vec, lane):
                body = f"extract {r(vec)}, {lane}"
            case MakeVector(elems):
                body = "vector " + ", ".join(r(e) for e in elems)
            case Splat(x, _):
                body = f"splat {r(x)}"
            case MatrixOf(x, y):
                body = f"matrix_of {r(x)}, {r(y)}"
            case MatrixFill(value):
                body = f"matrix_fill {r(value)}"
            case MatrixLoad(ptr, stride, transpose):
                body = f"matrix_load {r(ptr)}, {r(stride)}" + (", transpose" if transpose else "")
            case MatrixMultiplyAccumulate(a, b, c):
                body = f"matrix_mac {r(a)}, {r(b)}, {r(c)}"
            case Var() | Param():
                body = r(n)
            case _:
                assert_never(n)
        return f"{body} : {_type_of(n)}"

    # ---- statements

    def kernel(self, k: Kernel) -> None:
        self.schedule = k.schedule
        params = ", ".join(
            f"%{p.name}: {p.type}" + (f" multiple {p.multiple}" if p.multiple != 1 else "")
            + (f" length %{k.params[p.length_of].name}" if p.length_of is not None else "")
            + (" " + format_loc(p.loc) if self.locs and p.loc else "") for p in k.params
        )
        head = f"kernel @{k.name}({params}) stage {k.stage.value}"
        if k.meta:
            head += " meta {" + ", ".join(f"{key} = {k.meta[key]}" for key in sorted(k.meta)) + "}"
        given = [f"{f} = {getattr(k.options, f)}" for f in CompileOptions.FIELDS if getattr(k.options, f) is not None]
        if given:
            head += f" options {{{', '.join(given)}}}"
        if k.plan is not None:
            pl = k.plan
            roles = ", ".join(f"{r.first}+{r.count}" for r in pl.roles)
            head += (f" plan {{threads = {pl.threads}, vector_width = {pl.vector_width}, threadgroup_memory = "
                     f"{pl.threadgroup_memory}, roles = [{roles}]}}")
        self.emit(head, k.loc, block=True)
        self.block(k.body)
        self.emit("}")

    def block(self, body, yields=(), *, keyword: str = "yield", scoped: bool = True) -> None:
        self.depth += 1
        if scoped:
            self.scopes.append({})
        for s in body:
            self.stmt(s)
        if yields:
            self.emit(f"{keyword} " + ", ".join(self.refs(yields)))
        if scoped:
            self.scopes.pop()
        self.depth -= 1

    def stmt(self, s: Stmt) -> None:
        match s:
            case Let(var, value):
                if isinstance(value, (Var, Param)):
                    rhs = f"{self.ref(value)} : {_type_of(value)}"
                else:
                    self.refs(children(value))
                    rhs = self.op(value)
                explicit = "" if _type_of(value) == str(var.type) else f": {var.type}"
                self.emit(f"%{var.name}{explicit} = {rhs}{self._layout(var)}", s.loc or value.loc)
            case Store(ptr, value, mask) | AtomicAdd(ptr, value, mask):
                args = self.refs([ptr, value])
                mask_text = f", mask {self.ref(mask)}" if mask is not None else ""
                word = "store" if isinstance(s, Store) else f"atomic_{s.op.value}"
                self.emit(f"{word} {args[0]}, {args[1]}{mask_text}", s.loc)
            case VecStore(ptr, value):
                self.emit("vstore " + ", ".join(self.refs([ptr, value])), s.loc)
            case MatrixStore(value, ptr, stride, transpose):
                text = "matrix_store " + ", ".join(self.refs([value, ptr, stride]))
                self.emit(text + (", transpose" if transpose else ""), s.loc)
            case TensorMatmul(a, lda, b, ldb, c, ldc, shape, accumulate, relaxed, simdgroups, held):
                dst = [f"held {held}"] if held else self.refs([c, ldc])
                text = "matmul2d " + ", ".join([*self.refs([a, lda, b, ldb]), *dst])
                text += f", shape [{shape[0]}, {shape[1]}, {shape[2]}]" + (", accumulate" if accumulate else "")
                text += (", relaxed" if relaxed else "") + (f", simdgroups {simdgroups}" if simdgroups else "")
                self.emit(text, s.loc)
            case TensorHold(name, shape, dtype, relaxed, simdgroups):
                text = f"tensor_hold {name}, shape [{shape[0]}, {shape[1]}, {shape[2]}], {dtype}"
                text += (", relaxed" if relaxed else "") + (f", simdgroups {simdgroups}" if simdgroups else "")
                self.emit(text, s.loc)
            case TensorRelease(name, ptr, ld, shape, simdgroups):
                text = f"tensor_release {name}, {', '.join(self.refs([ptr, ld]))}, shape [{shape[0]}, {shape[1]}]"
                self.emit(text + (f", simdgroups {simdgroups}" if simdgroups else ""), s.loc)
            case Barrier(fence):
                self.emit(f"barrier {fence.value}", s.loc)
            case DevicePrint(prefix, values, hex_, index, mask):
                text = f"device_print {json.dumps(prefix)}" + "".join(f", {r}" for r in self.refs(values))
                text += " hex" if hex_ else ""
                text += f" index ({', '.join(self.refs(index))})" if index else ""
                self.emit(text + (f" mask {self.ref(mask)}" if mask is not None else ""), s.loc)
            case DeviceAssert(cond, msg, mask):
                text = f"device_assert {self.ref(cond)}, {json.dumps(msg)}"
                self.emit(text + (f" mask {self.ref(mask)}" if mask is not None else ""), s.loc)
            case RingBarrier(ring, kept):
                self.emit(f"ring_barrier {ring} {'kept' if kept else 'dropped'}", s.loc)
            case For(index, start, stop, step, carried, inits, body, yields, results, num_stages):
                buffers = self.schedule.loops.get(s, 1)
                bounds = self.refs([start, stop, step])
                head = f"for %{index.name}: {index.type} = {bounds[0]} to {bounds[1]} step {bounds[2]}"
                head += self._iter_args(carried, inits) + self._results(results)
                head += f" stages {num_stages}" if num_stages is not None else ""
                head += f" buffers {buffers}" if buffers != 1 else ""
                self.emit(head, s.loc, block=True)
                self.block(body, yields)
                self.emit("}")
            case If(cond, then, orelse, then_yields, else_yields, results):
                self.emit(f"if {self.ref(cond)}{self._results(results)}", s.loc, block=True)
                self.block(then, then_yields)
                if orelse or else_yields:
                    self.emit("} else {")
                    self.block(orelse, else_yields)
                self.emit("}")
            case While(carried, inits, cond_body, cond, body, yields, results):
                head = "while" + self._iter_args(carried, inits) + self._results(results)
                self.emit(head, s.loc, block=True)
                self.scopes.append({})  # the condition's definitions stay visible in the body
                self.block(cond_body, (cond,), keyword="condition", scoped=False)
                self.emit("} do {")
                self.block(body, yields, scoped=False)
                self.scopes.pop()
                self.emit("}")
            case SimdgroupRole(role, num_roles, num_sgs, body, yields, results):
                head = f"simdgroup_role {role} of {num_roles}, sgs {num_sgs}{self._results(results)}"
                self.emit(head, s.loc, block=True)
                self.block(body, yields)
                self.emit("}")
            case _:
                assert_never(s)

    def _iter_args(self, carried, inits) -> str:
        if not carried and not inits:
            return ""
        pairs = zip(carried, self.refs(inits))
        return " iter_args(" + ", ".join(f"%{c.name}: {c.type}{self._layout(c)} = {i}" for c, i in pairs) + ")"

    def _results(self, results) -> str:
        if not results:
            return ""
        return " -> (" + ", ".join(f"%{r.name}: {r.type}{self._layout(r)}" for r in results) + ")"

    def _layout(self, var: Var) -> str:
        """` #<layout>` after a named tile with a layout in the schedule (`metile.ir.layouts`)."""
        found = self.schedule.layouts.get(var.name) if self.schedule.layouts else None
        return "" if found is None else f" #{found.text()}"


__all__ = ["format_loc", "literal", "pretty"]
