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

from metile.emit.facts import LEAVES, Structures, check_metal, pointer_roots, reads_any, scan, value_children
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
    plain_type_name,
    type_name,
    unary_spelling,
)
from metile.ir import (
    AddPtr,
    AddressSpace,
    AtomicAdd,
    Barrier,
    Binary,
    Builtin,
    BuiltinKind,
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


# Sub-32-bit integer types by the id of their member (a lookup hashes an int, not an `Enum`): C promotes their
# arithmetic to `int`, so it is converted back.
_NARROW_INTS = {id(d): d.msl for d in DType if d.is_int and d.bits < 32}


class _Emitter:
    """One walk of the statements in program order writes the text, with each compound value that may be named
    (a *declaration*, `decl`) left as a reference, and counts the distinct parents of each structure (as
    `use_counts` does). `resolve` then writes each declaration as a `const` local where its structure has two or
    more parents and inline elsewhere, and fills in the references.

    Rendering does not depend on that choice: a value rendered in a body is found again (named or written out)
    wherever the body is open, as a named value would be, and an unnamed value, written out again, would read
    the same. References are `str.format` fields into three lists indexed by declaration: `{0[i]}` its text,
    `{1[i]}` its text as an operand, `{2[i]}` the element an `AddPtr` points to. MSL expressions hold no braces,
    so only text with a reference is formatted.
    """

    def __init__(self, k: Kernel):
        facts = scan(k)  # checks the stage first
        self.k, self.facts, self.names = k, facts, facts.names
        self.structures = Structures()
        self.reps = self.structures.reps
        self.first: dict[int, int] = {}  # structure key -> key of the first parent structure met
        self.shared: set[int] = set()  # the structures with two or more parents
        self.kinds: set[BuiltinKind] = set()  # the attributes the kernel reads
        self.consts: dict[int, tuple[str, str]] = {}  # the texts of each `Const` node, by id
        # The declarations in scope by structure key, with the keys each open body added.
        self.known: dict[int, tuple[str, ...]] = {}
        self.scopes: list[list[int]] = [[]]
        # Lines: a `str` is final; `(pad, text, tail)` is a line with references; a declaration is
        # `(index, key, text, atomic, value, pad, element)`; `(index, prefix)` names a temporary, which a
        # declaration with `key` None then holds.
        self.lines: list = []
        self.decls = 0
        self.depth = 0
        self.pad = ""  # INDENT * depth
        self.taken: set[str] = set()
        self.count = 0

    # ---- output

    def emit(self, text: str) -> None:
        self.lines.append((self.pad, text, "") if "{" in text else self.pad + text)

    def open_block(self, head: str) -> None:
        self.lines.append((self.pad, head, " {") if "{" in head else f"{self.pad}{head} {{")
        self.depth += 1
        self.pad = INDENT * self.depth
        self.scopes.append([])

    def close_block(self, tail: str = "}") -> None:
        for key in self.scopes.pop():
            del self.known[key]
        self.depth -= 1
        self.pad = INDENT * self.depth
        self.lines.append(self.pad + tail)

    def fresh(self, prefix: str) -> str:
        while True:
            name, self.count = f"{prefix}{self.count}", self.count + 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def declare_value(self, key: int, text: str, atomic: bool, v: Value, element: str | None = None) -> tuple[str, ...]:
        """A reference to `v`, declared here: its texts (with the element it points to, for an `AddPtr`)."""
        i = self.decls
        self.decls = i + 1
        self.lines.append((i, key, text, atomic, v, self.pad, element))
        ref = f"{{0[{i}]}}"
        texts = (ref, ref) if atomic else (ref, f"{{1[{i}]}}")
        if element is not None:
            texts += (f"{{2[{i}]}}",)
        self.known[key] = texts
        self.scopes[-1].append(key)
        return texts

    def resolve(self) -> list[str]:
        """The lines, each declaration named (`const T tN = ...;`) or written out."""
        self.taken = set(self.names.values())
        shared, n = self.shared, self.decls
        full, oper, elem = [""] * n, [""] * n, [""] * n
        out = []
        for e in self.lines:
            if e.__class__ is str:
                out.append(e)
            elif len(e) == 3:
                pad, text, tail = e
                out.append(pad + text.format(full, oper, elem) + tail)
            elif len(e) == 2:
                i, prefix = e
                full[i] = oper[i] = self.fresh(prefix)
            else:
                i, key, text, atomic, v, pad, element = e
                if "{" in text:
                    text = text.format(full, oper, elem)
                if key is None or key in shared:
                    name = full[i] if key is None else self.fresh("t")
                    out.append(f"{pad}{self.local_decl(name, v)} = {text};")
                    full[i] = oper[i] = name
                    if element is not None:
                        elem[i] = name + "[0]"
                else:
                    full[i] = text
                    oper[i] = text if atomic else f"({text})"
                    if element is not None:
                        elem[i] = element.format(full, oper, elem) if "{" in element else element
        return out

    # ---- types

    def ptr_is_const(self, v: Value) -> bool:
        t = v.type
        if not isinstance(t, PtrType) or t.space is not AddressSpace.DEVICE:
            return False
        return bool(pointer_roots((v,), self.facts.defs) - self.facts.written)

    def local_decl(self, name: str, v: Value, *, mutable: bool = False) -> str:
        """`const float x`, `device const float* const p`, or without `const` when `mutable`."""
        t = v.type
        if isinstance(t, PtrType):
            text = type_name(t, const=self.ptr_is_const(v))
            return f"{text} {name}" if mutable else f"{text} const {name}"
        return f"{plain_type_name(t)} {name}" if mutable else f"const {plain_type_name(t)} {name}"

    # ---- kernel

    def run(self) -> str:
        k = self.k
        try:
            args = []
            for p in sorted(k.params, key=lambda p: p.index):
                match p.type:
                    case PtrType():
                        args.append(f"{type_name(p.type, const=self.ptr_is_const(p))} {self.names[p.name]} "
                                    f"[[buffer({p.index})]]")
                    case _:
                        args.append(f"constant {type_name(p.type)}& {self.names[p.name]} [[buffer({p.index})]]")
            self.depth, self.pad = 1, INDENT
            self.body(k.body)
            lines = self.resolve()
        except Exception:
            check_metal(k)  # a node Metal IR does not admit is reported first, wherever it is
            raise
        args += [builtin_param(kind) for kind in BuiltinKind if kind in self.kinds]
        head = f"kernel void {c_identifier(k.name)}("
        sep = ",\n" + " " * len(head)
        return "\n".join([HEADER, head + sep.join(args) + ") {", *lines, "}\n"])

    # ---- values

    def expr(self, v: Value, parent: int) -> tuple[str, ...]:
        """The texts of `v`, a child of the structure keyed `parent`: as a whole, and as an operand (in
        parentheses unless atomic); with the element it points to, for an `AddPtr`."""
        match v:
            case Var() | Param():
                text = self.names[v.name]
                return text, text
            case Const():
                found = self.consts.get(id(v))
                if found is None:
                    text = literal(v.value, v.dtype)
                    found = (text, f"({text})") if text.startswith(("-", "(")) else (text, text)
                    self.consts[id(v)] = found
                return found
            case Builtin():
                self.kinds.add(v.kind)
                text = v.kind.value + ("." + "xyz"[v.axis] if v.kind.has_axes else "")
                return text, text
            case _:
                key = id(v) if self.reps.get(v._h) is v else self.structures.key(v)  # its common case inline
                if self.first.setdefault(key, parent) != parent:
                    self.shared.add(key)
                found = self.known.get(key)
                if found is not None:
                    return found
                return self.render(v, key)

    def count_only(self, values, parent: int) -> None:
        """Count the parents in values the text leaves out (a `Load`'s `other` without a mask, yields past the
        results), as `use_counts` does: their structures may be written elsewhere."""
        todo = [(parent, tuple(values))]
        seen: set[int] = set()
        while todo:
            p, kids = todo.pop()
            for c in kids:
                if c.__class__ in LEAVES:
                    if c.__class__ is Builtin:
                        self.kinds.add(c.kind)
                    continue
                key = self.structures.key(c)
                if self.first.setdefault(key, p) != p:
                    self.shared.add(key)
                if key not in seen:
                    seen.add(key)
                    todo.append((key, value_children(c)))

    def element(self, ptr: Value, parent: int) -> str:
        """The element `ptr` points to: `base[offset]` for an unnamed `AddPtr`, else `ptr[0]`."""
        match ptr:
            case AddPtr():
                return self.expr(ptr, parent)[2]
            case _:
                return self.expr(ptr, parent)[1] + "[0]"

    def render(self, v: Value, key: int) -> tuple[str, ...]:
        """The texts of the compound value `v` (keyed `key`), a reference when it may be named."""
        match v:
            case Binary():
                lhs, rhs = v.lhs, v.rhs
                t = lhs.type
                dtype = t.dtype
                word, infix = BINARY_BY_IDS.get((id(v.op), id(dtype))) or binary_spelling(v.op, dtype)
                if not infix:
                    return self.declare_value(key, f"{word}({self.expr(lhs, key)[0]}, {self.expr(rhs, key)[0]})",
                                              True, v)
                text = f"{self.expr(lhs, key)[1]} {word} {self.expr(rhs, key)[1]}"
                if isinstance(t, TileType) and (narrow := _NARROW_INTS.get(id(dtype))) is not None:
                    return self.declare_value(key, f"{narrow}({text})", True, v)
                return self.declare_value(key, text, False, v)
            case AddPtr():
                base, offset = self.expr(v.ptr, key)[1], self.expr(v.offset, key)
                return self.declare_value(key, f"{base} + {offset[1]}", False, v, f"{base}[{offset[0]}]")
            case Load():
                if v.mask is None:
                    if v.other is not None:
                        self.count_only((v.other,), key)
                    text = self.element(v.ptr, key)
                    return text, text
                cond = self.expr(v.mask, key)[1]
                alt = self.expr(v.other, key)[1] if v.other is not None else literal(0, v.type.dtype)
                text = f"{cond} ? {self.element(v.ptr, key)} : {alt}"
                return text, f"({text})"
            case Compare():
                return self.declare_value(
                    key, f"{self.expr(v.lhs, key)[1]} {COMPARE[v.op]} {self.expr(v.rhs, key)[1]}", False, v)
            case Cast():
                return self.declare_value(key, f"static_cast<{plain_type_name(v.type)}>({self.expr(v.x, key)[0]})",
                                          True, v)
            case Where():
                if isinstance(v.cond.type, TileType):
                    text = f"{self.expr(v.cond, key)[1]} ? {self.expr(v.x, key)[1]} : {self.expr(v.y, key)[1]}"
                    return self.declare_value(key, text, False, v)
                text = f"select({self.expr(v.y, key)[0]}, {self.expr(v.x, key)[0]}, {self.expr(v.cond, key)[0]})"
                return self.declare_value(key, text, True, v)
            case Unary():
                x = v.x
                t = x.type
                dtype = t.dtype
                word, prefix = UNARY_BY_IDS.get((id(v.op), id(dtype))) or unary_spelling(v.op, dtype)
                if not prefix:
                    return self.declare_value(key, f"{word}({self.expr(x, key)[0]})", True, v)
                text = f"{word}{self.expr(x, key)[1]}"
                if isinstance(t, TileType) and (narrow := _NARROW_INTS.get(id(dtype))) is not None:
                    return self.declare_value(key, f"{narrow}({text})", True, v)
                return self.declare_value(key, text, False, v)
            case Extract():
                text = f"{self.expr(v.vec, key)[1]}[{v.lane}]"
                if v.vec.__class__ in LEAVES:  # a lane of a named vector is never named
                    return text, text
                return self.declare_value(key, text, True, v)
            case VecLoad():
                space = v.ptr.type.space.value
                text = f"*({space} const {plain_type_name(v.type)}*)({self.expr(v.ptr, key)[0]})"
                return text, f"({text})"
            case MakeVector():
                elems = ", ".join([self.expr(e, key)[0] for e in v.elems])
                return self.declare_value(key, f"{plain_type_name(v.type)}({elems})", True, v)
            case Splat():
                return self.declare_value(key, f"{plain_type_name(v.type)}({self.expr(v.x, key)[0]})", True, v)
            case MatrixFill():
                return self.declare_value(
                    key, f"make_filled_{plain_type_name(v.type)}({self.expr(v.value, key)[0]})", True, v)
            case SimdShuffleXor():
                text = f"simd_shuffle_xor({self.expr(v.x, key)[0]}, {self.expr(v.mask, key)[0]})"
                return text, text
            case SimdBroadcast():
                text = f"simd_broadcast({self.expr(v.x, key)[0]}, {self.expr(v.lane, key)[0]})"
                return text, text
            case SimdReduce():
                text = f"{SIMD_REDUCE[v.op]}({self.expr(v.x, key)[0]})"
                return text, text
            case SharedAlloc() | MatrixLoad() | MatrixMultiplyAccumulate():
                raise EmitError(f"{type(v).__name__} is only ever the value of a Let", v.loc)
            case _:
                assert_never(v)

    # ---- statements

    def body(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        key = id(s) if self.reps.get(s._h) is s else self.structures.key(s)
        match s:
            case Let():
                self.let(self.names[s.var.name], s.var, s.value, key)
            case Store():
                if s.mask is not None:
                    self.open_block(f"if ({self.expr(s.mask, key)[0]})")
                self.emit(f"{self.element(s.ptr, key)} = {self.expr(s.value, key)[0]};")
                if s.mask is not None:
                    self.close_block()
            case For():
                self.for_loop(s, key)
            case If():
                self.if_stmt(s, key)
            case AtomicAdd():
                ptr = s.ptr
                if s.mask is not None:
                    self.open_block(f"if ({self.expr(s.mask, key)[0]})")
                target = f"({ptr.type.space.value} {atomic_type(ptr.type.dtype)}*)({self.expr(ptr, key)[0]})"
                self.emit(f"atomic_fetch_add_explicit({target}, {self.expr(s.value, key)[0]}, memory_order_relaxed);")
                if s.mask is not None:
                    self.close_block()
            case VecStore():
                space = s.ptr.type.space.value
                self.emit(f"*({space} {plain_type_name(s.value.type)}*)({self.expr(s.ptr, key)[0]}) = "
                          f"{self.expr(s.value, key)[0]};")
            case MatrixStore():
                self.emit(f"simdgroup_store({self.expr(s.value, key)[0]}, {self.expr(s.ptr, key)[0]}, "
                          f"{self.expr(s.stride, key)[0]}, 0, {msl_bool(s.transpose)});")
            case Barrier():
                self.emit(f"threadgroup_barrier({fence_flags(s.fence)});")
            case While():
                self.while_loop(s, key)
            case _:
                assert_never(s)

    def let(self, name: str, var: Var, value: Value, key: int) -> None:
        match value:
            case SharedAlloc():
                self.emit(f"threadgroup {value.dtype.msl} {name}[{value.size}];")
            case MatrixLoad():
                args = (f"{name}, {self.expr(value.ptr, key)[0]}, {self.expr(value.stride, key)[0]}, 0, "
                        f"{msl_bool(value.transpose)}")
                self.emit(f"{plain_type_name(var.type)} {name};")
                self.emit(f"simdgroup_load({args});")
            case MatrixMultiplyAccumulate():
                a, b, c = self.expr(value.a, key)[0], self.expr(value.b, key)[0], self.expr(value.c, key)[0]
                args = f"{name}, {a}, {b}, {c}"
                self.emit(f"{plain_type_name(var.type)} {name};")
                self.emit(f"simdgroup_multiply_accumulate({args});")
            case _:
                decl = self.local_decl(name, var if isinstance(var.type, PtrType) else value)
                self.emit(f"{decl} = {self.expr(value, key)[0]};")

    def declare(self, var: Var, init: Value | None, key: int) -> None:
        """A mutable local for a carried value or result (`float acc = 0.0f;`, `float lead;`)."""
        decl = self.local_decl(self.names[var.name], var, mutable=True)
        self.emit(f"{decl} = {self.expr(init, key)[0]};" if init is not None else f"{decl};")

    def assign(self, targets, values, key: int) -> None:
        """`target = value` for each pair, as a parallel assignment (a yield may read a carried value)."""
        if len(values) > len(targets):
            self.count_only(values[len(targets):], key)
        pairs = [(t, v) for t, v in zip(targets, values) if v != t]
        if len(pairs) > 1 and reads_any([v for _, v in pairs], {t.name for t, _ in pairs}):
            texts = [self.temporary(t, v, key) for t, v in pairs]
        else:
            texts = [self.expr(v, key)[0] for _, v in pairs]
        for (t, _), text in zip(pairs, texts):
            self.emit(f"{self.names[t.name]} = {text};")

    def temporary(self, t: Var, v: Value, key: int) -> str:
        """A reference to `next_<t>_N`, a `const` local holding `v` (named before `v` is written, as the
        temporaries `v` needs are named after it)."""
        i = self.decls
        self.decls = i + 1
        self.lines.append((i, f"next_{self.names[t.name]}_"))
        self.lines.append((i, None, self.expr(v, key)[0], True, t, self.pad, None))
        return f"{{0[{i}]}}"

    def loop_inits(self, carried, inits, key: int) -> None:
        if len(inits) > len(carried):
            self.count_only(inits[len(carried):], key)
        for c, init in zip(carried, inits):
            self.declare(c, init, key)

    def for_loop(self, s: For, key: int) -> None:
        self.loop_inits(s.carried, s.inits, key)
        i = self.names[s.index.name]
        start, stop, step = self.expr(s.start, key)[0], self.expr(s.stop, key)[1], self.expr(s.step, key)[1]
        down = isinstance(s.step, Const) and s.step.value < 0
        head = f"for ({type_name(s.index.type)} {i} = {start}; {i} {'>' if down else '<'} {stop}; {i} += {step})"
        self.open_block(head)
        self.body(s.body)
        self.assign(s.carried, s.yields, key)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c, key)

    def if_stmt(self, s: If, key: int) -> None:
        for r in s.results:
            self.declare(r, None, key)
        self.open_block(f"if ({self.expr(s.cond, key)[0]})")
        self.body(s.then)
        self.assign(s.results, s.then_yields, key)
        if s.orelse or s.else_yields:
            self.close_block("} else {")
            self.depth += 1
            self.pad = INDENT * self.depth
            self.scopes.append([])
            self.body(s.orelse)
            self.assign(s.results, s.else_yields, key)
        self.close_block()

    def while_loop(self, s: While, key: int) -> None:
        self.loop_inits(s.carried, s.inits, key)
        self.open_block("while (true)")
        self.body(s.cond_body)
        self.emit(f"if (!{self.expr(s.cond, key)[1]}) break;")
        self.body(s.body)
        self.assign(s.carried, s.yields, key)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c, key)


__all__ = ["EmitError", "emit_msl"]
