"""`emit_msl`: a Metal IR kernel to a complete `.metal` source, one `kernel void` function.

The text depends only on the kernel (equal kernels give equal text), so it is golden-testable:
- Parameters are `[[buffer(index)]]` arguments: pointers `device T*` (`device const T*` when nothing is
  stored or atomically added through them), scalars `constant T& name`; then one `uint`/`uint3`
  argument per thread-position attribute the body reads, named after the attribute.
- A `Let` is a `const` local named after its variable (a `SharedAlloc` a `threadgroup T name[size];`
  array, a matrix load or multiply-accumulate a matrix local filled by `simdgroup_load` or
  `simdgroup_multiply_accumulate`). Other values are inline expressions; a compound value that several
  parents share is named once, as `const T tN`, in the innermost open body at its first use.
- Loop-carried values and results are mutable locals declared before the loop (`If` results before
  the `if`) and assigned at the end of each body. When one yield reads a carried value that an
  earlier assignment would overwrite, every yield is first computed into a `next_` temporary.
- Masked loads are `m ? p[i] : other`; masked stores and atomics sit inside `if (m) { ... }`, with
  their operands computed there.
- Sub-32-bit integer arithmetic is converted back to its type (`uchar(a + b)`), since C promotes it to
  `int` first.
"""

from __future__ import annotations

from metile.emit.facts import bindings, c_names, pointer_roots, reads_any, scan, written_params
from metile.emit.spell import (
    BINARY_BY_IDS,
    COMPARE,
    SIMD_REDUCE,
    UNARY_BY_IDS,
    EmitError,
    atomic_type,
    binary_spelling,
    builtin_param,
    c_identifier,
    fence_flags,
    literal,
    msl_bool,
    type_name,
    unary_spelling,
)
from metile.ir import (
    LET_ONLY,
    AddPtr,
    AddressSpace,
    AtomicAdd,
    Barrier,
    Binary,
    Builtin,
    Cast,
    Compare,
    Const,
    DType,
    Extract,
    For,
    If,
    Kernel,
    Let,
    Load,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixStore,
    Param,
    PtrType,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Splat,
    Stmt,
    Store,
    TileType,
    Unary,
    Value,
    Var,
    VecLoad,
    VecStore,
    Where,
    While,
)
from metile.ir.errors import assert_never

HEADER = "#include <metal_stdlib>\n#include <metal_simdgroup_matrix>\nusing namespace metal;\n"
INDENT = "    "


def emit_msl(kernel: Kernel) -> str:
    """The MSL source of the Metal IR `kernel` (raises `EmitError` for any other stage)."""
    return _Emitter(kernel).run()


_NARROW_INTS = tuple(d for d in DType if d.is_int and d.bits < 32)
_LEAVES = frozenset({Const, Param, Var, Builtin})  # `_inline` values whose text is the same everywhere


def _narrow_int(t) -> bool:
    return isinstance(t, TileType) and t.dtype in _NARROW_INTS


class _Emitter:
    def __init__(self, k: Kernel):
        self.sharing, self.builtins = scan(k)  # checks the kernel first
        self.k = k
        self.defs = bindings(k)
        self.written = written_params(k, self.defs)
        self.names = c_names(k)
        self.taken = set(self.names.values())
        self.count = 0
        self.lines: list[str] = []
        self.depth = 0
        self.key, self.counts, self.reps = self.sharing.key, self.sharing.counts, self.sharing.reps
        # By `Sharing.key` (equal values share one): the text of the temporaries in scope, with the keys each
        # open body added (a value is named at most once at a time, since a name in scope is always found
        # first), and the text of leaves (constants, names, builtins), which reads the same everywhere.
        self.known: dict[int, tuple[str, bool]] = {}
        self.scopes: list[list[int]] = [[]]
        self.const_ptrs: dict[int, bool] = {}  # `ptr_is_const` by key

    # ---- output

    def emit(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text)

    def fresh(self, prefix: str) -> str:
        while True:
            name, self.count = f"{prefix}{self.count}", self.count + 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def open_block(self, head: str) -> None:
        self.emit(head + " {")
        self.depth += 1
        self.scopes.append([])

    def close_block(self, tail: str = "}") -> None:
        for key in self.scopes.pop():
            del self.known[key]
        self.depth -= 1
        self.emit(tail)

    # ---- types

    def ptr_is_const(self, v: Value) -> bool:
        t = v.type
        if not isinstance(t, PtrType) or t.space is not AddressSpace.DEVICE:
            return False
        key = self.key(v)
        found = self.const_ptrs.get(key)
        if found is None:
            found = self.const_ptrs[key] = bool(pointer_roots(v, self.defs) - self.written)
        return found

    def type_of(self, v: Value) -> str:
        return type_name(v.type, const=self.ptr_is_const(v))

    def local_decl(self, name: str, v: Value, *, mutable: bool = False) -> str:
        """`const float x`, `device const float* const p`, or without `const` when `mutable`."""
        t = self.type_of(v)
        if mutable:
            return f"{t} {name}"
        return f"{t} const {name}" if isinstance(v.type, PtrType) else f"const {t} {name}"

    # ---- kernel

    def run(self) -> str:
        k = self.k
        args = []
        for p in sorted(k.params, key=lambda p: p.index):
            match p.type:
                case PtrType():
                    args.append(f"{self.type_of(p)} {self.names[p.name]} [[buffer({p.index})]]")
                case _:
                    args.append(f"constant {type_name(p.type)}& {self.names[p.name]} [[buffer({p.index})]]")
        args += [builtin_param(kind) for kind in self.builtins]
        head = f"kernel void {c_identifier(k.name)}("
        sep = ",\n" + " " * len(head)
        self.open_block(head + sep.join(args) + ")")
        self.body(k.body)
        self.close_block()
        return HEADER + "\n" + "\n".join(self.lines) + "\n"

    # ---- values

    def expr(self, v: Value) -> tuple[str, bool]:
        """The text of `v` and whether it needs no parentheses as an operand; a shared compound value is
        named once in the current body."""
        key = id(v) if self.reps.get(v._h) is v else self.key(v)  # `Sharing.key`, its common case inline
        if (found := self.known.get(key)) is not None:
            return found
        out = self.render(v)
        if v.__class__ in _LEAVES:
            self.known[key] = out
            return out
        if self.counts.get(key, 0) < 2 or _inline(v):
            return out
        name = self.fresh("t")
        self.emit(f"{self.local_decl(name, v)} = {out[0]};")
        self.known[key] = (name, True)
        self.scopes[-1].append(key)
        return name, True

    def full(self, v: Value) -> str:
        return self.expr(v)[0]

    def operand(self, v: Value) -> str:
        text, atomic = self.expr(v)
        return text if atomic else f"({text})"

    def element(self, ptr: Value) -> str:
        """The element `ptr` points to: `base[offset]` for an unnamed `AddPtr`, else `ptr[0]`."""
        match ptr:
            case AddPtr(base, offset) if self.unnamed_single_use(ptr):
                return f"{self.operand(base)}[{self.full(offset)}]"
            case _:
                return f"{self.operand(ptr)}[0]"

    def unnamed_single_use(self, v: Value) -> bool:
        key = self.key(v)
        return key not in self.known and self.counts.get(key, 0) < 2

    def render(self, v: Value) -> tuple[str, bool]:
        match v:
            case Const(value, dtype):
                text = literal(value, dtype)
                return text, not text.startswith(("-", "("))
            case Param(name) | Var(name):
                return self.names[name], True
            case Builtin(kind, axis):
                return kind.value + ("." + "xyz"[axis] if kind.has_axes else ""), True
            case Binary(op, lhs, rhs):
                dtype = lhs.type.dtype
                word, infix = BINARY_BY_IDS.get((id(op), id(dtype))) or binary_spelling(op, dtype)
                if not infix:
                    return f"{word}({self.full(lhs)}, {self.full(rhs)})", True
                text = f"{self.operand(lhs)} {word} {self.operand(rhs)}"
                return (f"{v.type.dtype.msl}({text})", True) if _narrow_int(v.type) else (text, False)
            case Unary(op, x):
                dtype = x.type.dtype
                word, prefix = UNARY_BY_IDS.get((id(op), id(dtype))) or unary_spelling(op, dtype)
                if not prefix:
                    return f"{word}({self.full(x)})", True
                text = f"{word}{self.operand(x)}"
                return (f"{v.type.dtype.msl}({text})", True) if _narrow_int(v.type) else (text, False)
            case Compare(op, lhs, rhs):
                return f"{self.operand(lhs)} {COMPARE[op]} {self.operand(rhs)}", False
            case Where(cond, x, y):
                if isinstance(cond.type, TileType):
                    return f"{self.operand(cond)} ? {self.operand(x)} : {self.operand(y)}", False
                return f"select({self.full(y)}, {self.full(x)}, {self.full(cond)})", True
            case Cast(x, _):
                return f"static_cast<{type_name(v.type)}>({self.full(x)})", True
            case AddPtr(ptr, offset):
                return f"{self.operand(ptr)} + {self.operand(offset)}", False
            case Load(ptr, mask, other):
                if mask is None:
                    return self.element(ptr), True
                cond = self.operand(mask)
                alt = self.operand(other) if other is not None else literal(0, v.type.dtype)
                return f"{cond} ? {self.element(ptr)} : {alt}", False
            case SimdShuffleXor(x, mask):
                return f"simd_shuffle_xor({self.full(x)}, {self.full(mask)})", True
            case SimdBroadcast(x, lane):
                return f"simd_broadcast({self.full(x)}, {self.full(lane)})", True
            case SimdReduce(op, x):
                return f"{SIMD_REDUCE[op]}({self.full(x)})", True
            case VecLoad(ptr, _):
                space = ptr.type.space.value
                return f"*({space} const {type_name(v.type)}*)({self.full(ptr)})", False
            case Extract(vec, lane):
                return f"{self.operand(vec)}[{lane}]", True
            case MakeVector(elems):
                return f"{type_name(v.type)}({', '.join(self.full(e) for e in elems)})", True
            case Splat(x, _):
                return f"{type_name(v.type)}({self.full(x)})", True
            case MatrixFill(value):
                return f"make_filled_{type_name(v.type)}({self.full(value)})", True
            case SharedAlloc() | MatrixLoad() | MatrixMultiplyAccumulate():
                raise EmitError(f"{type(v).__name__} is only ever the value of a Let", v.loc)
            case _:
                assert_never(v)

    # ---- statements

    def body(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        match s:
            case Let(var, value):
                self.let(self.names[var.name], var, value)
            case Store(ptr, value, mask):
                self.open_mask(mask)
                self.emit(f"{self.element(ptr)} = {self.full(value)};")
                self.close_mask(mask)
            case AtomicAdd(ptr, value, mask):
                self.open_mask(mask)
                target = f"({ptr.type.space.value} {atomic_type(ptr.type.dtype)}*)({self.full(ptr)})"
                self.emit(f"atomic_fetch_add_explicit({target}, {self.full(value)}, memory_order_relaxed);")
                self.close_mask(mask)
            case VecStore(ptr, value):
                space = ptr.type.space.value
                self.emit(f"*({space} {type_name(value.type)}*)({self.full(ptr)}) = {self.full(value)};")
            case MatrixStore(value, ptr, stride, transpose):
                args = f"{self.full(value)}, {self.full(ptr)}, {self.full(stride)}, 0, {msl_bool(transpose)}"
                self.emit(f"simdgroup_store({args});")
            case Barrier(fence):
                self.emit(f"threadgroup_barrier({fence_flags(fence)});")
            case For():
                self.for_loop(s)
            case If():
                self.if_stmt(s)
            case While():
                self.while_loop(s)
            case _:
                assert_never(s)

    def let(self, name: str, var: Var, value: Value) -> None:
        match value:
            case SharedAlloc(_, dtype):
                self.emit(f"threadgroup {dtype.msl} {name}[{value.size}];")
            case MatrixLoad(ptr, stride, transpose):
                args = f"{name}, {self.full(ptr)}, {self.full(stride)}, 0, {msl_bool(transpose)}"
                self.emit(f"{type_name(var.type)} {name};")
                self.emit(f"simdgroup_load({args});")
            case MatrixMultiplyAccumulate(a, b, c):
                args = f"{name}, {self.full(a)}, {self.full(b)}, {self.full(c)}"
                self.emit(f"{type_name(var.type)} {name};")
                self.emit(f"simdgroup_multiply_accumulate({args});")
            case _:
                self.emit(f"{self.local_decl(name, var if isinstance(var.type, PtrType) else value)} = "
                          f"{self.full(value)};")

    def open_mask(self, mask: Value | None) -> None:
        if mask is not None:
            self.open_block(f"if ({self.full(mask)})")

    def close_mask(self, mask: Value | None) -> None:
        if mask is not None:
            self.close_block()

    def declare(self, var: Var, init: Value | None) -> None:
        """A mutable local for a carried value or result (`float acc = 0.0f;`, `float lead;`)."""
        decl = self.local_decl(self.names[var.name], var, mutable=True)
        self.emit(f"{decl} = {self.full(init)};" if init is not None else f"{decl};")

    def assign(self, targets, values) -> None:
        """`target = value` for each pair, as a parallel assignment (a yield may read a carried value)."""
        pairs = [(t, v) for t, v in zip(targets, values) if v != t]
        names = {t.name for t, _ in pairs}
        reads = any(reads_any(v, names) for _, v in pairs)
        if len(pairs) > 1 and reads:
            temps = []
            for t, v in pairs:
                tmp = self.fresh(f"next_{self.names[t.name]}_")
                self.emit(f"{self.local_decl(tmp, t)} = {self.full(v)};")
                temps.append(tmp)
            texts = temps
        else:
            texts = [self.full(v) for _, v in pairs]
        for (t, _), text in zip(pairs, texts):
            self.emit(f"{self.names[t.name]} = {text};")

    def for_loop(self, s: For) -> None:
        for c, init in zip(s.carried, s.inits):
            self.declare(c, init)
        i = self.names[s.index.name]
        start, stop, step = self.full(s.start), self.operand(s.stop), self.operand(s.step)
        down = isinstance(s.step, Const) and s.step.value < 0
        head = f"for ({type_name(s.index.type)} {i} = {start}; {i} {'>' if down else '<'} {stop}; {i} += {step})"
        self.open_block(head)
        self.body(s.body)
        self.assign(s.carried, s.yields)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c)

    def if_stmt(self, s: If) -> None:
        for r in s.results:
            self.declare(r, None)
        self.open_block(f"if ({self.full(s.cond)})")
        self.body(s.then)
        self.assign(s.results, s.then_yields)
        if s.orelse or s.else_yields:
            self.close_block("} else {")
            self.depth += 1
            self.scopes.append([])
            self.body(s.orelse)
            self.assign(s.results, s.else_yields)
        self.close_block()

    def while_loop(self, s: While) -> None:
        for c, init in zip(s.carried, s.inits):
            self.declare(c, init)
        self.open_block("while (true)")
        self.body(s.cond_body)
        self.emit(f"if (!{self.operand(s.cond)}) break;")
        self.body(s.body)
        self.assign(s.carried, s.yields)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c)


def _inline(v: Value) -> bool:
    """Values never named as temporaries: leaves, lanes of a named vector, and the `Let`-only values."""
    match v:
        case Const() | Param() | Var() | Builtin() | Extract(Var() | Param(), _):
            return True
        case _:
            return type(v) in LET_ONLY


__all__ = ["EmitError", "emit_msl"]
