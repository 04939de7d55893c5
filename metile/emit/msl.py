"""`emit_msl`: a Metal IR kernel to a complete `.metal` source, one `kernel void` function.

The text depends only on the kernel (equal kernels give equal text), so it is golden-testable:
- Parameters are `[[buffer(index)]]` arguments: pointers `device T*` (`device const T*` when nothing is
  stored or atomically added through them), scalars `constant T& name`; then one `uint`/`uint3`
  argument per thread-position attribute the body reads, named after the attribute.
- A `Let` is a `const` local named after its variable (a `SharedAlloc` a `threadgroup T name[size];`
  array, a matrix load or multiply-accumulate a matrix local filled by `simdgroup_load` or
  `simdgroup_multiply_accumulate`). Other values are inline expressions; a compound value that several
  parents share is named once, as `const T tN`, in the innermost open body at its first use.
- Loop-carried values are mutable locals declared before the loop (`If` results before the `if`) and
  assigned at the end of each body; a loop's results are its carried locals, and a carried value whose
  init is a mutable local read nowhere else is carried in that local (pointers excepted in both). When
  one yield reads a carried value that an earlier assignment would overwrite, every yield is first
  computed into a `next_` temporary.
- Masked loads are `m ? p[i] : other`; masked stores and atomics sit inside `if (m) { ... }`, with their operands
  computed there. Sub-32-bit integer arithmetic is converted back to its type (`uchar(a + b)`), since C promotes it
  to `int` first. Tensor operations (`matmul2d` and its held destinations) are `metile.emit.tensor_ops`'s.

`emit_located` also gives the kernel's signature (`metile.emit.signature`) and the location each body line comes from
(`metile.emit.artifact` makes them one `MslArtifact`): a named value's declaration, the value's `loc` (else that of
the innermost located value it is written for, the expansion of a `//` say); assignments of carried values, the
first located value assigned; any other line, the innermost located statement whose emission wrote it. The lowering
locates its statements and rebuilt values at their Tile IR origin, so a `.metal` line leads back to a Python line.
"""

from __future__ import annotations

from metile.emit import debug as D
from metile.emit.atomics import atomic_base, atomic_call, rmw_text
from metile.emit.control import for_loop, if_stmt, while_loop
from metile.emit.facts import LEAVES, Records, check_metal, pointer_roots, scan
from metile.emit.fp8 import by_helper, fp8_cast
from metile.emit.helpers import ALL_HELPERS
from metile.emit.line_owners import LineOwners
from metile.emit.signature import KernelSignature, ParamKind
from metile.emit.signature import Param as SignatureParam
from metile.emit.spell import (
    BINARY_FORMS,
    COMPARE_BY_VALUE,
    UNARY_FORMS,
    EmitError,
    binary_form,
    builtin_type,
    fence_flags,
    function_name,
    literal_texts,
    msl_bool,
    pointer_text,
    type_name,
    type_text,
    unary_form,
)
from metile.emit.tensor_ops import TENSOR_STMTS, tensor_lines
from metile.emit.wide import reduce_text, shuffle_text
from metile.ir import (
    AddPtr,
    AddressSpace,
    AtomicAdd,
    AtomicRMW,
    Barrier,
    Binary,
    Bitcast,
    Builtin,
    BuiltinKind,
    Cast,
    Compare,
    Const,
    DeviceAssert,
    DevicePrint,
    Extract,
    Fma,
    For,
    If,
    IntToPtr,
    Kernel,
    Let,
    Load,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixStore,
    MatrixType,
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
from metile.ir.errors import Loc, assert_never

HEADER = "#include <metal_stdlib>\n#include <metal_simdgroup_matrix>\nusing namespace metal;\n"
INDENT = "    "


def emit_msl(kernel: Kernel) -> str:
    """The MSL source of the Metal IR `kernel` (raises `EmitError` for any other stage)."""
    return _Unlocated(kernel, locate=False).run()


def emit_located(kernel: Kernel) -> tuple[str, KernelSignature, dict[int, Loc]]:
    """`emit_msl(kernel)`, the signature of its kernel function, and for each line of the text (numbered from 1)
    that a located node wrote, that location (see the module docstring)."""
    emitter = _Emitter(kernel)
    text = emitter.run()
    first = emitter.first_line
    return text, emitter.signature, {first + i: loc for i, loc in sorted(emitter.owners.owner.items())}


_LET_DECLARED = frozenset({SharedAlloc, MatrixLoad, MatrixMultiplyAccumulate})  # `Let` values declared apart
_NESTING = frozenset({For, If, While})  # the statements with statements inside
_BUILTIN_PARAMS = {kind._value_: (kind._value_, ParamKind.POSITION, builtin_type(kind), -1, kind._value_, False)
                   for kind in BuiltinKind}   # in order; the arguments of their `SignatureParam`s but the line
_BUILTIN_DECLS = {kind: SignatureParam(*p).declaration for kind, p in _BUILTIN_PARAMS.items()}
_BUILTIN_ORDER = {kind: i for i, kind in enumerate(_BUILTIN_PARAMS)}



class _Emitter:
    """`scan` first gathers the kernel's names, bindings, stores and builtins, and whether each structure has two
    or more distinct parents (its record's `shared`). One walk of the statements in program order then writes
    the text: a compound value that may be named is written at its first use in a body, as a `const` local if
    its structure is shared (named `tN` in the order of these declarations, skipping the kernel's own names) and
    inline otherwise. Its texts stay in its record while the body is open, so that it is found again (named or
    inline) there; an inline value written again would read the same.
    """

    def __init__(self, k: Kernel, *, locate: bool = True):
        self.k = k
        self.owners = LineOwners() if locate else None  # where each line comes from (`emit_msl`: not kept)
        self.records = Records()  # `scan`'s, once `run` has begun
        self.kinds: set[str] = set()  # the attributes the kernel reads, by `_value_`
        self.leaves: dict[int, tuple[str, str]] = {}  # the texts of each value without children, by id
        self.scope: list[list] = []  # the records whose texts the innermost open body set
        self.scopes: list[list[list]] = [self.scope]
        self.lines: list[str] = []
        self.count = 0  # the number of locals named `tN` or `next_..._N` so far
        self.depth = 0
        self.pad = ""  # INDENT * depth
        self.helpers: set[str] = set()  # the helper functions (`metile.emit.helpers`) the kernel calls
        self.within: Loc | None = None  # the location of the innermost located value being written
        self.signature: KernelSignature | None = None  # once `run` has returned
        self.first_line = 0  # the line number of the body's first line, once `run` has returned

    # ---- output

    def open_block(self, head: str) -> None:
        self.lines.append(f"{self.pad}{head} {{")
        self.depth += 1
        self.pad = INDENT * self.depth
        self.scope = []
        self.scopes.append(self.scope)

    def close_block(self, tail: str = "}") -> None:
        scopes = self.scopes
        for rec in scopes.pop():
            rec[2] = None
        self.scope = scopes[-1]
        self.depth -= 1
        self.pad = INDENT * self.depth
        self.lines.append(self.pad + tail)

    def else_block(self) -> None:
        """`} else {`: the open block closed and another opened in its place."""
        self.close_block("} else {")
        self.depth += 1
        self.pad = INDENT * self.depth
        self.scope = []
        self.scopes.append(self.scope)

    def local_name(self, prefix: str) -> str:
        """The next local name `<prefix>N` (N counts all locals named so far) that is not one of the kernel's."""
        count, taken = self.count, self.taken
        name = f"{prefix}{count}"
        while name in taken:  # a name `local_name` gave is not taken again: its number is past `count`
            count += 1
            name = f"{prefix}{count}"
        self.count = count + 1
        return name

    # ---- types

    def ptr_is_const(self, v: Value, t: PtrType) -> bool:
        """Whether nothing is written through the pointer `v` of type `t`."""
        if t.space is not AddressSpace.DEVICE:
            return False
        base, defs = v, self.defs
        for _ in range(len(defs) + 1):  # the common cases of `pointer_roots`: one parameter, offset, through `Let`s
            while base.__class__ is AddPtr:
                base = base.ptr
            if base.__class__ is Param:
                return base.name not in self.written
            if base.__class__ is not Var or len(found := defs.get(base.name, ())) != 1:
                break
            base = found[0]  # a name bound to one value points where that value does (a cycle ends the loop)
        return bool(pointer_roots((base,), defs) - self.written)

    def local_decl(self, name: str, v: Value) -> str:
        """`const float x` or `device const float* const p`."""
        t = v.type
        if t.__class__ is PtrType:
            return f"{pointer_text(t, self.ptr_is_const(v, t))} const {name}"
        return f"const {type_text(t)} {name}"

    # ---- kernel

    def run(self) -> str:
        k = self.k
        try:
            facts = scan(k)  # checks the stage first
            self.names, self.defs, self.written, self.kinds = facts.names, facts.defs, facts.written, facts.kinds
            self.records = records = facts.records
            self.reads = facts.reads
            self.mutable: set[str] = set()  # variables written as mutable locals (carried values, results)
            self.by_hash, self.twins = records.by_hash, records.twins
            self.taken = set(self.names.values())  # the local names `local_name` may not give
            params = []   # (name, kind, type text, index, attribute, is_reference) of each, in order
            decls = []    # the declaration of each (`SignatureParam.declaration`)
            for p in sorted(k.params, key=lambda q: q.index):
                t = p.type
                name = self.names[p.name]
                match t:
                    case PtrType():
                        param = (name, ParamKind.BUFFER, pointer_text(t, self.ptr_is_const(p, t)), p.index, "", False)
                    case _:
                        param = (name, ParamKind.BUFFER, f"constant {type_name(t)}&", p.index, "", True)
                params.append(param)
                decls.append(f"{param[2]} {name} [[buffer({p.index})]]")
            self.depth, self.pad = 1, INDENT
            self.body(k.body)
        except Exception:
            check_metal(k)  # a node Metal IR does not admit is reported first, wherever it is
            raise
        kinds = sorted(self.kinds, key=_BUILTIN_ORDER.__getitem__)
        decls += [_BUILTIN_DECLS[kind] for kind in kinds]
        fname = function_name(k.name)
        head = f"kernel void {fname}("
        sep = ",\n" + " " * len(head)
        helpers = "".join(f"\n{code}\n" for name, code in ALL_HELPERS.items() if name in self.helpers) \
            if self.helpers else ""
        prologue = f"{HEADER}{helpers}\n"
        line = prologue.count("\n") + 1  # of `kernel void`, and of its first parameter
        text = f"{prologue}{head}{sep.join(decls)}) {{\n"
        if self.owners is not None:   # `emit_located`: the signature too
            params += [_BUILTIN_PARAMS[kind] for kind in kinds]
            self.signature = KernelSignature(fname, tuple(SignatureParam(*p, line=line + i)
                                                          for i, p in enumerate(params)), line)
        self.first_line = text.count("\n") + 1
        body = "\n".join(self.lines)
        return f"{text}{body}\n}}\n" if body else f"{text}}}\n"

    # ---- values

    def expr(self, v: Value) -> tuple[str, ...]:
        """The texts of `v`: as a whole, and as an operand (in parentheses unless atomic); with the element it points
        to, for an `AddPtr`."""
        cls = v.__class__
        if cls in LEAVES:  # values with children are the most common, then variables
            if cls is Var:
                text = self.names[v.name]
                return text, text
            found = self.leaves.get(id(v))
            return found if found is not None else self.leaf(v)
        loc = v.loc
        rec = self.by_hash.get(v._h)
        if rec is None or rec[0] is not v:
            rec = self.twins.get(id(v)) or self.records.record(v, rec, None)
            v = rec[0]  # equal, so written alike: the node `scan` met the children of
        if rec[2] is not None:
            return rec[2]
        within = self.within
        if loc is None or loc is within:
            return self.compound(v, rec)
        self.within = loc
        texts = self.compound(v, rec)
        self.within = within
        return texts

    def unlocated_expr(self, v: Value) -> tuple[str, ...]:
        """`expr(v)` without keeping `within` (what `emit_msl`, which keeps no line owners, calls as `expr`)."""
        cls = v.__class__
        if cls in LEAVES:
            if cls is Var:
                text = self.names[v.name]
                return text, text
            found = self.leaves.get(id(v))
            return found if found is not None else self.leaf(v)
        rec = self.by_hash.get(v._h)
        if rec is None or rec[0] is not v:
            rec = self.twins.get(id(v)) or self.records.record(v, rec, None)
            v = rec[0]
        texts = rec[2]
        return texts if texts is not None else self.compound(v, rec)

    def compound(self, v: Value, rec: list) -> tuple[str, ...]:
        """The texts of the value with children `v`, whose record is `rec` (see `expr`)."""
        expr = self.expr
        match v:  # values that may be named set `text` and `atomic` and are declared below (an `AddPtr` returns)
            case Binary():
                lhs, rhs = v.lhs, v.rhs
                t = lhs.type
                word, infix, narrow = (BINARY_FORMS[v.op._value_].get(t.dtype._value_)
                                       or binary_form(v.op, t.dtype))
                if not infix:
                    text, atomic = f"{word}({expr(lhs)[0]}, {expr(rhs)[0]})", True
                elif narrow is not None and isinstance(t, TileType):
                    text, atomic = f"{narrow}({expr(lhs)[1]} {word} {expr(rhs)[1]})", True
                else:
                    text, atomic = f"{expr(lhs)[1]} {word} {expr(rhs)[1]}", False
            case AddPtr():  # with the element it points to
                base, offset = expr(v.ptr)[1], expr(v.offset)
                text = f"{base} + {offset[1]}"
                if not rec[3]:
                    return text, f"({text})", f"{base}[{offset[0]}]"
                name = self.shared(v, rec, text)
                texts = rec[2] = (name, name, name + "[0]")
                return texts
            case Compare():
                text, atomic = f"{expr(v.lhs)[1]} {COMPARE_BY_VALUE[v.op._value_]} {expr(v.rhs)[1]}", False
            case AtomicRMW():
                text, wrapped, helper = rmw_text(v, expr, atomic_base(v.ptr, self.defs, self.names, v.loc))
                self.helpers.add(helper)
                return text, wrapped
            case Load():
                ptr = v.ptr   # `element(ptr)` inline unless volatile
                element = (f"*(volatile {ptr.type.space._value_} {type_text(v.type)}*)({expr(ptr)[0]})" if v.volatile
                           else expr(ptr)[2] if ptr.__class__ is AddPtr else expr(ptr)[1] + "[0]")
                if v.mask is None:
                    return element, element
                cond = expr(v.mask)[1]
                alt = expr(v.other)[1] if v.other is not None else literal_texts(0, v.type.dtype)[0]
                text = f"{cond} ? {element} : {alt}"
                return text, f"({text})"
            case Cast():
                src, dst = v.x.type.dtype, v.type.dtype
                if by_helper(src, dst):
                    text, used = fp8_cast(expr(v.x)[0], src, dst)
                    self.helpers.update(used)
                    atomic = True
                else:
                    text, atomic = f"static_cast<{type_text(v.type)}>({expr(v.x)[0]})", True
            case Bitcast():
                text, atomic = f"as_type<{type_text(v.type)}>({expr(v.x)[0]})", True
            case IntToPtr():
                text, atomic = f"reinterpret_cast<{pointer_text(v.type, False)}>({expr(v.x)[0]})", True
            case Fma():
                text, atomic = f"fma({expr(v.a)[0]}, {expr(v.b)[0]}, {expr(v.c)[0]})", True
            case Where():
                if isinstance(v.cond.type, TileType):
                    text, atomic = f"{expr(v.cond)[1]} ? {expr(v.x)[1]} : {expr(v.y)[1]}", False
                else:
                    text, atomic = f"select({expr(v.y)[0]}, {expr(v.x)[0]}, {expr(v.cond)[0]})", True
            case Unary():
                x = v.x
                t = x.type
                word, prefix, narrow = UNARY_FORMS[v.op._value_].get(t.dtype._value_) or unary_form(v.op, t.dtype)
                if not prefix:
                    text, atomic = f"{word}({expr(x)[0]})", True
                elif narrow is not None and isinstance(t, TileType):
                    text, atomic = f"{narrow}({word}{expr(x)[1]})", True
                else:
                    text, atomic = f"{word}{expr(x)[1]}", False
            case Extract() if v.vec.type.__class__ is MatrixType:
                text, atomic = f"{expr(v.vec)[1]}.thread_elements()[{v.lane}]", True
            case Extract():
                text, atomic = f"{expr(v.vec)[1]}[{v.lane}]", True
                if v.vec.__class__ in (Var, Param):  # a lane of a named vector is never named
                    return text, text
            case VecLoad():
                text = f"*({v.ptr.type.space._value_} const {type_text(v.type)}*)({expr(v.ptr)[0]})"
                return text, f"({text})"
            case MakeVector():
                elems = ", ".join([expr(e)[0] for e in v.elems])
                text, atomic = f"{type_text(v.type)}({elems})", True
            case Splat():
                text, atomic = f"{type_text(v.type)}({expr(v.x)[0]})", True
            case MatrixOf():
                self.helpers.add("mt_matrix_of")
                text, atomic = f"mt_matrix_of({expr(v.x)[0]}, {expr(v.y)[0]})", True
            case MatrixFill():
                text, atomic = f"make_filled_{type_text(v.type)}({expr(v.value)[0]})", True
            case SimdShuffleXor():
                text = shuffle_text("simd_shuffle_xor", expr(v.x)[0], expr(v.mask)[0], v.x.type, v.loc)
                return text, text
            case SimdBroadcast():
                text = shuffle_text("simd_broadcast", expr(v.x)[0], expr(v.lane)[0], v.x.type, v.loc)
                return text, text
            case SimdReduce():
                text, helper = reduce_text(v.op, expr(v.x)[0], v.x.type, v.loc)
                if helper is not None:
                    self.helpers.add(helper)
                return text, text
            case SharedAlloc() | MatrixLoad() | MatrixMultiplyAccumulate():
                raise EmitError(f"{type(v).__name__} is only ever the value of a Let", v.loc)
            case _:
                assert_never(v)
        if not rec[3]:  # one parent: inline (met again only as a part of that parent, written anew)
            return (text, text) if atomic else (text, f"({text})")
        name = self.shared(v, rec, text)
        texts = rec[2] = (name, name)
        return texts

    def shared(self, v: Value, rec: list, text: str) -> str:
        """Declare the value `v` of two or more parents, whose record is `rec` and text `text`, as the next local
        `tN` (its texts, which the caller sets in `rec`, are then found again while the body is open)."""
        name = self.local_name("t")
        self.named(name, v, text)
        self.scope.append(rec)
        return name

    def named(self, name: str, v: Value, text: str) -> None:
        """Declare the shared compound value `v` as the local `name`."""
        if self.owners is not None and (loc := v.loc or self.within) is not None:
            self.owners.owner[len(self.lines)] = loc
        self.lines.append(f"{self.pad}{self.local_decl(name, v)} = {text};")

    def leaf(self, v: Value) -> tuple[str, str]:
        """The texts of a value without children (the same wherever it is), kept by id in `leaves`."""
        match v:
            case Const():
                found = literal_texts(v.value, v.dtype)
            case Var() | Param():
                text = self.names[v.name]
                found = text, text
            case Builtin():
                text = v.kind._value_ + ("." + "xyz"[v.axis] if v.kind.has_axes else "")
                found = text, text
            case _:
                assert_never(v)
        self.leaves[id(v)] = found
        return found

    def element(self, ptr: Value) -> str:
        """The element `ptr` points to: `base[offset]` for an inline `AddPtr`, else `ptr[0]`."""
        match ptr:
            case AddPtr():
                return self.expr(ptr)[2]
            case _:
                return self.expr(ptr)[1] + "[0]"

    # ---- statements

    def body(self, stmts) -> None:
        stmt, let, names, lines, owners = self.stmt, self.let, self.names, self.lines, self.owners
        for s in stmts:
            if s.__class__ is Let:   # the common statement, without `stmt`'s dispatch (its lines owned as it owns them)
                start = len(lines)
                let(names[s.var.name], s.var, s.value)
                if owners is not None and (loc := s.loc) is not None:
                    owners.own(start, len(lines), loc)
            else:
                stmt(s)

    def stmt(self, s: Stmt) -> None:
        expr, start = self.expr, len(self.lines)
        match s:  # the most common first
            case Let():
                self.let(self.names[s.var.name], s.var, s.value)
            case Store():
                if s.mask is not None:
                    self.open_block(f"if ({expr(s.mask)[0]})")
                self.lines.append(f"{self.pad}{self.element(s.ptr)} = {expr(s.value)[0]};")
                if s.mask is not None:
                    self.close_block()
            case VecStore():
                self.lines.append(f"{self.pad}*({s.ptr.type.space._value_} {type_text(s.value.type)}*)"
                                  f"({expr(s.ptr)[0]}) = {expr(s.value)[0]};")
            case MatrixStore():
                self.lines.append(f"{self.pad}simdgroup_store({expr(s.value)[0]}, {expr(s.ptr)[0]}, "
                                  f"{expr(s.stride)[0]}, 0, {msl_bool(s.transpose)});")
            case For():
                for_loop(self, s)
            case If():
                if_stmt(self, s)
            case AtomicAdd():
                ptr = s.ptr
                if s.mask is not None:
                    self.open_block(f"if ({expr(s.mask)[0]})")
                call, helper = atomic_call(s.op, ptr.type, expr(ptr)[0], expr(s.value)[0],
                                           base=atomic_base(ptr, self.defs, self.names, s.loc))
                self.helpers.add(helper)
                self.lines.append(f"{self.pad}{call};")
                if s.mask is not None:
                    self.close_block()
            case _ if isinstance(s, TENSOR_STMTS):
                self.lines += tensor_lines(s, self.pad, lambda v: expr(v)[0], self.helpers, self.names)
            case Barrier():
                self.lines.append(f"{self.pad}threadgroup_barrier({fence_flags(s.fence)});")
            case DevicePrint() | DeviceAssert():
                self.helpers.add("metile_debug")
                self.lines.append(self.pad + D.call(s, lambda v: expr(v)[0]))
            case While():
                while_loop(self, s)
            case _:
                assert_never(s)
        if (owners := self.owners) is not None and (loc := s.loc) is not None:   # after the inner statements
            if s.__class__ in _NESTING:
                owners.nest(start, len(self.lines), loc)
            else:   # no statement inside: no range kept
                owners.own(start, len(self.lines), loc)

    def let(self, name: str, var: Var, value: Value) -> None:
        pad = self.pad
        if value.__class__ not in _LET_DECLARED:  # the common case: `const T name = value;`
            decl = self.local_decl(name, var if var.type.__class__ is PtrType else value)
            self.lines.append(f"{pad}{decl} = {self.expr(value)[0]};")
            return
        match value:
            case SharedAlloc():
                self.lines.append(f"{pad}threadgroup {value.dtype.msl} {name}[{value.size}];")
            case MatrixLoad():
                ptr, stride = self.expr(value.ptr)[0], self.expr(value.stride)[0]
                self.lines += (f"{pad}{type_text(var.type)} {name};",
                               f"{pad}simdgroup_load({name}, {ptr}, {stride}, 0, {msl_bool(value.transpose)});")
            case MatrixMultiplyAccumulate():
                a, b, c = self.expr(value.a)[0], self.expr(value.b)[0], self.expr(value.c)[0]
                self.lines += (f"{pad}{type_text(var.type)} {name};",
                               f"{pad}simdgroup_multiply_accumulate({name}, {a}, {b}, {c});")
            case _:
                assert_never(value)


class _Unlocated(_Emitter):
    """The emitter of `emit_msl`, which keeps no line owners, so `within` is never read: `expr` is `unlocated_expr`.
    A class attribute, not one set on the instance: a bound method kept by its own instance would be a reference
    cycle, and the emitter with all it holds would then wait for the garbage collector instead of being freed
    when `emit_msl` returns."""

    expr = _Emitter.unlocated_expr


__all__ = ["EmitError", "emit_located", "emit_msl"]
