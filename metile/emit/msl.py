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

import functools

from metile.emit.facts import (
    ADMITTED_METAL,
    LEAVES,
    Records,
    check_metal,
    pointer_roots,
    reads_any,
    scan,
    value_children,
)
from metile.emit.spell import (
    BINARY_FORMS,
    COMPARE_BY_VALUE,
    SIMD_REDUCE_BY_VALUE,
    UNARY_FORMS,
    EmitError,
    atomic_type,
    binary_form,
    builtin_param,
    c_identifier,
    fence_flags,
    literal,
    msl_bool,
    type_name,
    type_text,
    unary_form,
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


_LET_DECLARED = frozenset({SharedAlloc, MatrixLoad, MatrixMultiplyAccumulate})  # `Let` values declared apart


@functools.cache
def _references(i: int) -> tuple[tuple[str, str], tuple[str, str], tuple[str, str, str]]:
    """The texts referring to declaration `i`: of an atomic value, of another value, of an `AddPtr`."""
    full, operand, element = f"{{0[{i}]}}", f"{{1[{i}]}}", f"{{2[{i}]}}"
    return (full, full), (full, operand), (full, operand, element)


class _Emitter:
    """One walk of the statements in program order writes the text and counts the distinct parents of each
    structure (as `use_counts` does, in `Records`). Each compound value that may be named is written as a
    reference to a *declaration* at its first use in a body; `resolve` then writes a declaration as a `const`
    local where its structure has two or more parents and inline elsewhere, and fills in the references.

    Writing does not depend on that choice: a value declared in a body is found again (named or inline) while
    the body is open, as a named value would be, and an inline value written again would read the same.
    References are `str.format` fields into three lists indexed by declaration: `{0[i]}` its text, `{1[i]}` its
    text as an operand, `{2[i]}` the element an `AddPtr` points to. MSL expressions hold no braces, so a
    declaration's text is formatted only when it holds a reference, and the lines (their block braces doubled)
    are formatted once, as a whole.
    """

    def __init__(self, k: Kernel):
        facts = scan(k)  # checks the stage first
        self.k, self.facts, self.names = k, facts, facts.names
        self.records = Records()
        self.by_hash = self.records.by_hash
        self.kinds: set[str] = set()  # the attributes the kernel reads, by `_value_`
        self.consts: dict[int, tuple[str, str]] = {}  # the texts of each `Const` and `Builtin` node, by id
        self.scopes: list[list[list]] = [[]]  # the records whose texts each open body set
        # Declaration i: `(record, text, atomic, value, pad, element)`, the record None for a temporary (named
        # with its prefix in `prefixes`); `element` is the text of the element an `AddPtr` points to.
        self.decls: list[tuple] = []
        self.prefixes: dict[int, str] = {}
        # Lines: a `str` is a line (braces doubled, as `str.format` reads text); an int is a declaration.
        self.lines: list = []
        self.depth = 0
        self.pad = ""  # INDENT * depth

    # ---- output

    def emit(self, text: str) -> None:
        self.lines.append(self.pad + text)

    def open_block(self, head: str) -> None:
        self.lines.append(f"{self.pad}{head} {{{{")  # a brace, as `str.format` reads it
        self.depth += 1
        self.pad = INDENT * self.depth
        self.scopes.append([])

    def close_block(self, tail: str = "}}") -> None:
        for rec in self.scopes.pop():
            rec[2] = None
        self.depth -= 1
        self.pad = INDENT * self.depth
        self.lines.append(self.pad + tail)

    def resolve(self) -> str:
        """The body's text, each declaration named (`const T tN = ...;`) or written inline. Names are given in the
        order of the declarations (a value's after those of its operands, a temporary's before them), skipping
        the kernel's own names; an inline value refers to earlier declarations only."""
        decls, prefixes, taken, count = self.decls, self.prefixes, set(self.names.values()), 0
        full = [""] * len(decls)
        oper, elem, lines = full[:], full[:], full[:]  # `lines`: the line declaring each named value
        for i, (rec, text, atomic, v, pad, element) in enumerate(decls):
            if rec is None or rec[3]:  # a temporary, or a value with two or more parents: named
                prefix = prefixes[i] if rec is None else "t"
                name, count = f"{prefix}{count}", count + 1
                while name in taken:
                    name, count = f"{prefix}{count}", count + 1
                taken.add(name)
                full[i] = oper[i] = name
                lines[i] = f"{pad}{self.local_decl(name, v)} = {text};"
                if element is not None:
                    elem[i] = name + "[0]"
            else:
                if "{" in text:
                    text = text.format(full, oper, elem)
                full[i] = text
                oper[i] = text if atomic else f"({text})"
                if element is not None:
                    elem[i] = element.format(full, oper, elem) if "{" in element else element
        body = [e if e.__class__ is str else lines[e] for e in self.lines]
        return "\n".join(filter(None, body)).format(full, oper, elem)  # an inline value has no line

    # ---- types

    def ptr_is_const(self, v: Value) -> bool:
        t = v.type
        if not isinstance(t, PtrType) or t.space is not AddressSpace.DEVICE:
            return False
        base = v
        while base.__class__ is AddPtr:
            base = base.ptr
        if base.__class__ is Param:  # the common case of `pointer_roots`: one parameter
            return base.name not in self.facts.written
        return bool(pointer_roots((v,), self.facts.defs) - self.facts.written)

    def local_decl(self, name: str, v: Value, *, mutable: bool = False) -> str:
        """`const float x`, `device const float* const p`, or without `const` when `mutable`."""
        t = v.type
        if t.__class__ is PtrType:
            text = type_name(t, const=self.ptr_is_const(v))
            return f"{text} {name}" if mutable else f"{text} const {name}"
        text = type_text(t)
        return f"{text} {name}" if mutable else f"const {text} {name}"

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
            body = self.resolve()
        except Exception:
            check_metal(k)  # a node Metal IR does not admit is reported first, wherever it is
            raise
        args += [builtin_param(kind) for kind in BuiltinKind if kind._value_ in self.kinds]
        head = f"kernel void {c_identifier(k.name)}("
        sep = ",\n" + " " * len(head)
        text = f"{HEADER}\n{head}{sep.join(args)}) {{\n"
        return f"{text}{body}\n}}\n" if body else f"{text}}}\n"

    # ---- values

    def expr(self, v: Value, parent: list) -> tuple[str, ...]:
        """The texts of `v`, a child of the structure whose record is `parent`: as a whole, and as an operand (in
        parentheses unless atomic); with the element it points to, for an `AddPtr`."""
        if v.__class__ in LEAVES:
            match v:
                case Var():
                    text = self.names[v.name]
                    return text, text
                case Const():
                    found = self.consts.get(id(v))
                    if found is None:
                        text = literal(v.value, v.dtype)
                        found = (text, f"({text})") if text.startswith(("-", "(")) else (text, text)
                        self.consts[id(v)] = found
                    return found
                case Param():
                    text = self.names[v.name]
                    return text, text
                case Builtin():
                    found = self.consts.get(id(v))
                    if found is None:
                        self.kinds.add(v.kind._value_)
                        text = v.kind._value_ + ("." + "xyz"[v.axis] if v.kind.has_axes else "")
                        found = self.consts[id(v)] = text, text
                    return found
                case _:
                    assert_never(v)
        rec = self.by_hash.get(v._h)
        if rec is None and v.__class__ in ADMITTED_METAL:  # the first node of its structure
            rec = self.by_hash[v._h] = [v, parent, None, False]
        elif rec is None or rec[0] is not v:
            rec = self.records.record(v, rec, parent)
        if rec[1] is not parent:
            rec[3] = True
        if rec[2] is not None:
            return rec[2]
        expr, element = self.expr, None
        match v:  # values that may be named set `text`, `atomic` (and `element`) and are declared below
            case Binary():
                lhs, rhs = v.lhs, v.rhs
                t = lhs.type
                word, infix, narrow = (BINARY_FORMS[v.op._value_].get(t.dtype._value_)
                                       or binary_form(v.op, t.dtype))
                if not infix:
                    text, atomic = f"{word}({expr(lhs, rec)[0]}, {expr(rhs, rec)[0]})", True
                elif narrow is not None and isinstance(t, TileType):
                    text, atomic = f"{narrow}({expr(lhs, rec)[1]} {word} {expr(rhs, rec)[1]})", True
                else:
                    text, atomic = f"{expr(lhs, rec)[1]} {word} {expr(rhs, rec)[1]}", False
            case AddPtr():
                base, offset = expr(v.ptr, rec)[1], expr(v.offset, rec)
                text, atomic, element = f"{base} + {offset[1]}", False, f"{base}[{offset[0]}]"
            case Load():
                if v.mask is None:
                    if v.other is not None:
                        self.count_only((v.other,), rec)
                    text = self.element(v.ptr, rec)
                    return text, text
                cond = expr(v.mask, rec)[1]
                alt = expr(v.other, rec)[1] if v.other is not None else literal(0, v.type.dtype)
                text = f"{cond} ? {self.element(v.ptr, rec)} : {alt}"
                return text, f"({text})"
            case Compare():
                text, atomic = f"{expr(v.lhs, rec)[1]} {COMPARE_BY_VALUE[v.op._value_]} {expr(v.rhs, rec)[1]}", False
            case Cast():
                text, atomic = f"static_cast<{type_text(v.type)}>({expr(v.x, rec)[0]})", True
            case Where():
                if isinstance(v.cond.type, TileType):
                    text, atomic = f"{expr(v.cond, rec)[1]} ? {expr(v.x, rec)[1]} : {expr(v.y, rec)[1]}", False
                else:
                    text, atomic = f"select({expr(v.y, rec)[0]}, {expr(v.x, rec)[0]}, {expr(v.cond, rec)[0]})", True
            case Unary():
                x = v.x
                t = x.type
                word, prefix, narrow = UNARY_FORMS[v.op._value_].get(t.dtype._value_) or unary_form(v.op, t.dtype)
                if not prefix:
                    text, atomic = f"{word}({expr(x, rec)[0]})", True
                elif narrow is not None and isinstance(t, TileType):
                    text, atomic = f"{narrow}({word}{expr(x, rec)[1]})", True
                else:
                    text, atomic = f"{word}{expr(x, rec)[1]}", False
            case Extract():
                text, atomic = f"{expr(v.vec, rec)[1]}[{v.lane}]", True
                if v.vec.__class__ in (Var, Param):  # a lane of a named vector is never named
                    return text, text
            case VecLoad():
                text = f"*({v.ptr.type.space._value_} const {type_text(v.type)}*)({expr(v.ptr, rec)[0]})"
                return text, f"({text})"
            case MakeVector():
                elems = ", ".join([expr(e, rec)[0] for e in v.elems])
                text, atomic = f"{type_text(v.type)}({elems})", True
            case Splat():
                text, atomic = f"{type_text(v.type)}({expr(v.x, rec)[0]})", True
            case MatrixFill():
                text, atomic = f"make_filled_{type_text(v.type)}({expr(v.value, rec)[0]})", True
            case SimdShuffleXor():
                text = f"simd_shuffle_xor({expr(v.x, rec)[0]}, {expr(v.mask, rec)[0]})"
                return text, text
            case SimdBroadcast():
                text = f"simd_broadcast({expr(v.x, rec)[0]}, {expr(v.lane, rec)[0]})"
                return text, text
            case SimdReduce():
                text = f"{SIMD_REDUCE_BY_VALUE[v.op._value_]}({expr(v.x, rec)[0]})"
                return text, text
            case SharedAlloc() | MatrixLoad() | MatrixMultiplyAccumulate():
                raise EmitError(f"{type(v).__name__} is only ever the value of a Let", v.loc)
            case _:
                assert_never(v)
        i = len(self.decls)
        self.decls.append((rec, text, atomic, v, self.pad, element))
        self.lines.append(i)
        refs = _references(i)
        texts = rec[2] = refs[2] if element is not None else refs[0] if atomic else refs[1]
        self.scopes[-1].append(rec)
        return texts

    def element(self, ptr: Value, parent: list) -> str:
        """The element `ptr` points to: `base[offset]` for an inline `AddPtr`, else `ptr[0]`."""
        match ptr:
            case AddPtr():
                return self.expr(ptr, parent)[2]
            case _:
                return self.expr(ptr, parent)[1] + "[0]"

    def count_only(self, values, parent: list) -> None:
        """Count the parents in values the text leaves out (a `Load`'s `other` without a mask, yields past the
        results), as `use_counts` does: their structures may be written elsewhere."""
        todo = [(parent, tuple(values))]
        seen: set[int] = set()
        while todo:
            p, kids = todo.pop()
            for c in kids:
                if c.__class__ in LEAVES:
                    if c.__class__ is Builtin:
                        self.kinds.add(c.kind._value_)
                    continue
                rec = self.by_hash.get(c._h)
                if rec is None or rec[0] is not c:
                    rec = self.records.record(c, rec, p)
                if rec[1] is not p:
                    rec[3] = True
                if id(rec) not in seen:
                    seen.add(id(rec))
                    todo.append((rec, value_children(c)))

    # ---- statements

    def body(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        rec = self.by_hash.get(s._h)
        if rec is None and s.__class__ in ADMITTED_METAL:
            rec = self.by_hash[s._h] = [s, None, None, False]
        elif rec is None or rec[0] is not s:
            rec = self.records.record(s, rec, None)
        expr = self.expr
        match s:
            case Let():
                self.let(self.names[s.var.name], s.var, s.value, rec)
            case Store():
                if s.mask is not None:
                    self.open_block(f"if ({expr(s.mask, rec)[0]})")
                self.emit(f"{self.element(s.ptr, rec)} = {expr(s.value, rec)[0]};")
                if s.mask is not None:
                    self.close_block()
            case For():
                self.for_loop(s, rec)
            case If():
                self.if_stmt(s, rec)
            case AtomicAdd():
                ptr = s.ptr
                if s.mask is not None:
                    self.open_block(f"if ({expr(s.mask, rec)[0]})")
                target = f"({ptr.type.space._value_} {atomic_type(ptr.type.dtype)}*)({expr(ptr, rec)[0]})"
                self.emit(f"atomic_fetch_add_explicit({target}, {expr(s.value, rec)[0]}, memory_order_relaxed);")
                if s.mask is not None:
                    self.close_block()
            case VecStore():
                space = s.ptr.type.space._value_
                self.emit(f"*({space} {type_text(s.value.type)}*)({expr(s.ptr, rec)[0]}) = "
                          f"{expr(s.value, rec)[0]};")
            case MatrixStore():
                self.emit(f"simdgroup_store({expr(s.value, rec)[0]}, {expr(s.ptr, rec)[0]}, "
                          f"{expr(s.stride, rec)[0]}, 0, {msl_bool(s.transpose)});")
            case Barrier():
                self.emit(f"threadgroup_barrier({fence_flags(s.fence)});")
            case While():
                self.while_loop(s, rec)
            case _:
                assert_never(s)

    def let(self, name: str, var: Var, value: Value, rec: list) -> None:
        match value:
            case _ if value.__class__ not in _LET_DECLARED:  # the common case: `const T name = value;`
                decl = self.local_decl(name, var if isinstance(var.type, PtrType) else value)
                self.emit(f"{decl} = {self.expr(value, rec)[0]};")
            case SharedAlloc():
                self.emit(f"threadgroup {value.dtype.msl} {name}[{value.size}];")
            case MatrixLoad():
                ptr, stride = self.expr(value.ptr, rec)[0], self.expr(value.stride, rec)[0]
                self.emit(f"{type_text(var.type)} {name};")
                self.emit(f"simdgroup_load({name}, {ptr}, {stride}, 0, {msl_bool(value.transpose)});")
            case MatrixMultiplyAccumulate():
                a, b, c = self.expr(value.a, rec)[0], self.expr(value.b, rec)[0], self.expr(value.c, rec)[0]
                self.emit(f"{type_text(var.type)} {name};")
                self.emit(f"simdgroup_multiply_accumulate({name}, {a}, {b}, {c});")
            case _:
                assert_never(value)

    def declare(self, var: Var, init: Value | None, rec: list) -> None:
        """A mutable local for a carried value or result (`float acc = 0.0f;`, `float lead;`)."""
        decl = self.local_decl(self.names[var.name], var, mutable=True)
        self.emit(f"{decl} = {self.expr(init, rec)[0]};" if init is not None else f"{decl};")

    def assign(self, targets, values, rec: list) -> None:
        """`target = value` for each pair, as a parallel assignment (a yield may read a carried value)."""
        if len(values) > len(targets):
            self.count_only(values[len(targets):], rec)
        pairs = [(t, v) for t, v in zip(targets, values) if not (v.__class__ is t.__class__ and v == t)]
        if len(pairs) > 1 and reads_any([v for _, v in pairs], {t.name for t, _ in pairs}):
            texts = [self.temporary(t, v, rec) for t, v in pairs]
        else:
            texts = [self.expr(v, rec)[0] for _, v in pairs]
        for (t, _), text in zip(pairs, texts):
            self.emit(f"{self.names[t.name]} = {text};")

    def temporary(self, t: Var, v: Value, rec: list) -> str:
        """A reference to `next_<t>_N`, a `const` local holding `v` (named before the temporaries `v` needs)."""
        i = len(self.decls)
        self.prefixes[i] = f"next_{self.names[t.name]}_"
        self.decls.append(None)
        self.decls[i] = (None, self.expr(v, rec)[0], True, t, self.pad, None)
        self.lines.append(i)
        return _references(i)[0][0]

    def loop_inits(self, carried, inits, rec: list) -> None:
        if len(inits) > len(carried):
            self.count_only(inits[len(carried):], rec)
        for c, init in zip(carried, inits):
            self.declare(c, init, rec)

    def for_loop(self, s: For, rec: list) -> None:
        self.loop_inits(s.carried, s.inits, rec)
        i = self.names[s.index.name]
        start, stop, step = self.expr(s.start, rec)[0], self.expr(s.stop, rec)[1], self.expr(s.step, rec)[1]
        down = isinstance(s.step, Const) and s.step.value < 0
        head = f"for ({type_name(s.index.type)} {i} = {start}; {i} {'>' if down else '<'} {stop}; {i} += {step})"
        self.open_block(head)
        self.body(s.body)
        self.assign(s.carried, s.yields, rec)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c, rec)

    def if_stmt(self, s: If, rec: list) -> None:
        for r in s.results:
            self.declare(r, None, rec)
        self.open_block(f"if ({self.expr(s.cond, rec)[0]})")
        self.body(s.then)
        self.assign(s.results, s.then_yields, rec)
        if s.orelse or s.else_yields:
            self.close_block("}} else {{")
            self.depth += 1
            self.pad = INDENT * self.depth
            self.scopes.append([])
            self.body(s.orelse)
            self.assign(s.results, s.else_yields, rec)
        self.close_block()

    def while_loop(self, s: While, rec: list) -> None:
        self.loop_inits(s.carried, s.inits, rec)
        self.open_block("while (true)")
        self.body(s.cond_body)
        self.emit(f"if (!{self.expr(s.cond, rec)[1]}) break;")
        self.body(s.body)
        self.assign(s.carried, s.yields, rec)
        self.close_block()
        for r, c in zip(s.results, s.carried):
            self.declare(r, c, rec)


__all__ = ["EmitError", "emit_msl"]
