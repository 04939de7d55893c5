"""The IR verifier: `verify(kernel, after=pass_name)` raises `VerifyError` on the first problem.

It checks, at the kernel's stage:
- the kernel: an identifier name, a `Stage`, parameters numbered 0..n-1 with distinct names and scalar
  or device/constant pointer types, integer `meta` under identifier keys;
- every node is admitted by the stage (`metile.ir.stages`: no Metal IR node in a Tile IR kernel and
  vice versa; Metal IR values are per-thread, never tiles) and follows its typing rule
  (`metile.ir.typecheck`: equal operand types, bool masks of the pointer's shape, `Dot` shapes, ...);
- loads, `SharedAlloc` and simdgroup collectives are only the direct value of a `Let`, and
  `SharedAlloc` only at kernel top level;
- names: bound once in the kernel (SSA), used only after their binding and inside its scope
  (see `metile.ir.stmts`), with the type they were bound with; a `Param` use matches a parameter;
- statements: a `Let`'s variable has its value's type; stores write the pointer's element type and
  shape and never to constant memory; atomics take the memory `ATOMIC_DTYPES` gives, in device or threadgroup
  memory (16-bit floats in device memory only);
  loop bounds have the index's type; `carried`, `inits`, `yields` and `results` agree in number and
  type; branch and loop conditions are scalar bools; simdgroup roles are in range.
The error names the pass (`after`) and carries the offending node's location (or its statement's).
"""

from __future__ import annotations

from collections.abc import Iterable

from metile.ir.errors import Loc, MetileError
from metile.ir.metal import MatrixStore, TensorHold, TensorMatmul, TensorRelease, VecStore
from metile.ir.names import is_ir_name
from metile.ir.node import Node, children, type_error
from metile.ir.ops import AtomicOp, Fence, Stage
from metile.ir.simt import RingBarrier
from metile.ir.stages import ADMITTED, LET_ONLY
from metile.ir.stmts import (
    AtomicAdd,
    Barrier,
    DeviceAssert,
    DevicePrint,
    For,
    If,
    Kernel,
    LaunchPlan,
    Let,
    Schedule,
    Store,
    While,
)
from metile.ir.tile import TILE_STMTS, TILE_VALUES, Dot, MmaPlan, SimdgroupRole
from metile.ir.typecheck import check_type, check_value
from metile.ir.types import ATOMIC_DTYPES, AddressSpace, DType, MatrixType, PtrType, TileType, Type, VectorType
from metile.ir.values import Param, SharedAlloc, Stmt, Value, Var
from metile.ir.verify_layouts import layout_problems

_NO_VARS: frozenset[Var] = frozenset()


class VerifyError(MetileError):
    """The IR breaks an invariant; `after` names the pass that produced it, `node` is the culprit."""

    def __init__(self, message: str, loc: Loc | None = None, *, after: str, node: Node | None = None):
        self.after = after
        self.node = node
        super().__init__(f"invalid IR after {after}: {message}", loc)


def verify(k: Kernel, *, after: str = "construction") -> Kernel:
    """Check `k` (see the module docstring) and return it unchanged."""
    _Verifier(k, after).kernel()
    return k


def _vars_of(root: Value) -> frozenset[Var]:
    """The Vars `root` uses, as a set built the way the verifier always built it (the union of its children's
    sets, into a new set), so that when several Vars are wrong the one reported first is the one it always was:
    `tree` builds cheaper sets of the same Vars, and `scope_error` comes here once it has found a wrong one."""
    done: dict[Node, frozenset[Var]] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if n in done:
            continue
        if not expanded:
            stack.append((n, True))
            stack.extend((c, False) for c in children(n) if c not in done)
            continue
        done[n] = frozenset((n,)) if isinstance(n, Var) else frozenset().union(*(done[c] for c in children(n)))
    return done[root]


def _level(cls: type) -> str:
    return "Tile IR" if cls in TILE_VALUES or cls in TILE_STMTS else "Metal IR"


Scope = dict[str, Var]


class _Verifier:
    def __init__(self, k: Kernel, after: str):
        self.k = k
        self.after = after
        self.stage = k.stage
        self.held: set[str] = set()   # the names of the cooperative destinations `TensorHold` declared so far
        # The Vars each checked value uses, by structure: under the node's cached hash (`Node._h`, read
        # directly, as `hash()` would call back into Python) the first such node and its Vars, and any other
        # structure with the same hash in `free_others`; `free_by_id` answers first for node objects met before.
        self.free_by_hash: dict[int, tuple[Node, frozenset[Var]]] = {}
        self.free_others: dict[Node, frozenset[Var]] = {}
        self.free_by_id: dict[int, frozenset[Var]] = {}
        self.admitted = ADMITTED[self.stage] if isinstance(self.stage, Stage) else frozenset()
        self.params: dict[str, Param] = {}
        self.bound: set[str] = set()
        self.good_types: set[object] = set()
        self.good_type_objects: dict[int, Type] = {}  # by id, holding each so that its id stays its own

    def fail(self, message: str, node: Node | None, stmt: Node | None = None):
        loc = getattr(node, "loc", None) or getattr(stmt, "loc", None)
        raise VerifyError(message, loc, after=self.after, node=node)

    # ---- kernel

    def kernel(self) -> None:
        k = self.k
        if not isinstance(k, Kernel):
            self.fail(f"expected a Kernel, not {type(k).__name__}", None)
        if not isinstance(k.stage, Stage):
            self.fail(f"the kernel's stage {k.stage!r} is not a Stage", k)
        if not is_ir_name(k.name):
            self.fail(f"the kernel name {k.name!r} is not an identifier", k)
        for i, p in enumerate(k.params):
            self.param(i, p)
        for key, value in k.meta.items():
            if not is_ir_name(key):
                self.fail(f"meta key {key!r} is not an identifier", k)
            if not isinstance(value, int) or isinstance(value, bool):
                self.fail(f"meta[{key!r}] = {value!r} is not an integer", k)
        for key, top in (("num_simdgroups", 32), ("num_stages", 8), ("group_programs", 1 << 20),
                         ("direct_operands", 1), ("num_threads", 1 << 16)):
            n = getattr(k.options, key)
            if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= top):
                self.fail(f"the compiler option {key} = {n!r} is not 1..{top}", k)
        if k.plan is not None:
            self.plan(k)
        self.schedule(k)
        self.body(k.body, {}, 0)

    def schedule(self, k: Kernel) -> None:
        """The optimisation passes' choices: an `MmaPlan` per `Dot` (paddings of 0 or more, two hoist flags, a
        positive split, a chunk of k that divides it, simdgroups that divide its 8x8 pieces), a positive buffer
        count per `For`, and a layout per named tile that can hold it (`metile.ir.verify_layouts`)."""
        sch = k.schedule
        if not isinstance(sch, Schedule):
            self.fail(f"the kernel's schedule must be a Schedule, not {type(sch).__name__}", k)
        for d, how in sch.dots.items():
            if not (isinstance(d, Dot) and isinstance(how, MmaPlan) and len(how.pad) == 2
                    and all(isinstance(x, int) and x >= 0 for x in how.pad) and len(how.hoist) == 2
                    and all(isinstance(x, bool) for x in how.hoist) and isinstance(how.split, int) and how.split >= 1
                    and len(how.direct) == 2 and all(isinstance(x, bool) for x in how.direct)):
                self.fail(f"schedule: {how!r} is not a valid MmaPlan of a dot", k)
            if how.chunk is not None and not _chunks(d, how.chunk):
                self.fail(f"schedule: chunk {how.chunk!r} of a dot over k = {d.a.type.shape[-1]} is not a multiple "
                          "of 8 dividing k and short of it", k)
            if how.simdgroups is not None and not _arranges(d, how.simdgroups):
                self.fail(f"schedule: simdgroups {how.simdgroups!r} do not divide the 8x8 pieces of a "
                          f"[{d.a.type.shape[0]}, {d.b.type.shape[1]}] product", k)
        for loop, n in sch.loops.items():
            if not (isinstance(loop, For) and isinstance(n, int) and not isinstance(n, bool) and n >= 1):
                self.fail(f"schedule: a loop's buffers must be a positive integer, not {n!r}", k)
        for message, node in layout_problems(k):
            self.fail(message, node)

    def plan(self, k: Kernel) -> None:
        """The launch plan: positive threads and vector width, roles on whole, disjoint simdgroups."""
        pl = k.plan
        if not isinstance(pl, LaunchPlan):
            self.fail(f"the kernel's plan is a {type(pl).__name__}, not a LaunchPlan", k)
        if pl.threads < 1 or pl.vector_width < 1 or pl.threadgroup_memory < 0:
            self.fail(f"launch plan {pl.threads} threads, vector width {pl.vector_width}, {pl.threadgroup_memory} "
                      "bytes of threadgroup memory: threads and width must be positive, memory not negative", k)
        end = 0
        for i, r in enumerate(pl.roles):
            if r.first != end or r.count < 1:
                self.fail(f"role {i} holds simdgroups {r.first}..{r.first + r.count - 1}: roles take consecutive, "
                          "non-empty runs of simdgroups from 0", k)
            end = r.first + r.count
        if end > pl.simdgroups:
            self.fail(f"the roles take {end} simdgroups of a plan with {pl.simdgroups}", k)

    def param(self, i: int, p: object) -> None:
        if not isinstance(p, Param):
            self.fail(f"parameter {i} is a {type(p).__name__}, not a Param", self.k)
        if p.index != i:
            self.fail(f"parameter %{p.name} has index {p.index} but is parameter {i}", p)
        self.name_ok(p.name, p, None)
        self.type_ok(p.type, p, None)
        t = p.type
        scalar = isinstance(t, TileType) and t.is_scalar
        buffer = isinstance(t, PtrType) and t.is_scalar and t.space in (AddressSpace.DEVICE, AddressSpace.CONSTANT)
        if not (scalar or buffer):
            self.fail(f"parameter %{p.name}: {t} is neither a scalar nor a device/constant pointer", p)
        m = p.multiple
        integer = scalar and t.dtype.is_int
        if not (isinstance(m, int) and not isinstance(m, bool) and m >= 1) or (m != 1 and not integer):
            self.fail(f"parameter %{p.name}: multiple {m!r} must be a positive int, and 1 unless it is an integer", p)
        if p.length_of is not None:
            of = p.length_of
            ok = isinstance(of, int) and 0 <= of < p.index and isinstance(self.k.params[of].type, PtrType)
            if not ok or not (scalar and t.dtype is DType.I32):
                self.fail(f"parameter %{p.name}: the length of parameter {of!r} must be an i32 and follow the "
                          "pointer parameter it measures", p)
        self.params[p.name] = p
        self.bound.add(p.name)

    def name_ok(self, name: object, node: Node, stmt: Node | None) -> None:
        if not is_ir_name(name):
            self.fail(f"{name!r} is not an identifier", node, stmt)
        if name in self.bound:
            self.fail(f"%{name} is bound twice (names are unique in a kernel)", node, stmt)

    def type_ok(self, t: object, node: Node, stmt: Node | None) -> None:
        if id(t) in self.good_type_objects:
            return
        if isinstance(t, Type) and t in self.good_types:
            self.good_type_objects[id(t)] = t
            return
        if (err := check_type(t, self.stage)) is not None:
            self.fail(err, node, stmt)
        self.good_types.add(t)
        if isinstance(t, Type):
            self.good_type_objects[id(t)] = t

    def bind(self, var: object, scope: Scope, stmt: Stmt) -> None:
        if not isinstance(var, Var):
            self.fail(f"{type(stmt).__name__} binds a {type(var).__name__}, not a Var", stmt)
        self.name_ok(var.name, var, stmt)
        self.type_ok(var.type, var, stmt)
        self.bound.add(var.name)
        scope[var.name] = var

    # ---- values

    def value(self, v: object, scope: Scope, stmt: Stmt, *, let: bool = False) -> Value:
        if not isinstance(v, Value):
            self.fail(f"{type(stmt).__name__}: expected a value, not {type(v).__name__}", stmt)
        if not let and type(v) in LET_ONLY:
            self.fail(f"{type(v).__name__} must be bound by a Let (its position among statements matters)", v, stmt)
        used = self.free_by_id.get(id(v))
        for var in self.tree(v, stmt) if used is None else used:
            seen = scope.get(var.name)
            if seen is not var and (seen is None or seen != var):
                self.scope_error(v, scope, stmt)
        return v

    def scope_error(self, v: Value, scope: Scope, stmt: Stmt) -> None:
        """Fail on the first Var of `v` out of scope or of another type, in the order of `_vars_of(v)`."""
        for var in _vars_of(v):
            seen = scope.get(var.name)
            if seen is None:
                where = "outside the body that binds it" if var.name in self.bound else "before it is defined"
                self.fail(f"%{var.name} is used {where}", var, stmt)
            if seen != var:
                self.fail(f"%{var.name} is used as {var.type} but bound as {seen.type}", var, stmt)

    def values(self, vs: Iterable[object], scope: Scope, stmt: Stmt) -> list[Value]:
        return [self.value(v, scope, stmt) for v in vs]

    def tree(self, root: Value, stmt: Stmt) -> frozenset[Var]:
        """Check every node of `root` not checked before (children first, no recursion); return its Vars.
        A node counts as checked when a structurally equal one was."""
        by_id, by_hash, others = self.free_by_id, self.free_by_hash, self.free_others
        stack: list[tuple[Node, list[Node] | None]] = [(root, None)]
        while stack:
            n, kids = stack.pop()
            if id(n) in by_id:
                continue
            if kids is None:
                if (e := by_hash.get(n._h)) is not None:
                    known = e[1] if e[0] == n else others.get(n)
                    if known is not None:
                        by_id[id(n)] = known
                        continue
                kids = children(n)
                waiting = False  # for a child to be checked: come back to `n` after its children
                for c in kids:
                    if not isinstance(c, Value):
                        self.fail(f"{type(n).__name__} has a {type(c).__name__} operand", n, stmt)
                    if id(c) not in by_id:
                        if not waiting:
                            stack.append((n, kids))
                            waiting = True
                        stack.append((c, None))
                if waiting:
                    continue
            self.node(n, kids, stmt)
            if isinstance(n, Var):
                used = frozenset((n,))
            else:
                used = _NO_VARS
                for c in kids:
                    if (more := by_id[id(c)]) and more is not used:
                        used = more if not used else used | more
            by_id[id(n)] = used
            if n._h in by_hash:
                others[n] = used
            else:
                by_hash[n._h] = (n, used)
        return by_id[id(root)]

    def node(self, n: Node, kids: list[Node], stmt: Stmt) -> None:
        cls = type(n)
        if cls not in self.admitted:
            self.fail(f"{cls.__name__} is a {_level(cls)} node, not allowed in a {self.stage.value} kernel", n, stmt)
        for c in kids:
            if type(c) in LET_ONLY:
                self.fail(f"{type(c).__name__} must be bound by a Let, not used inside {cls.__name__}", c, stmt)
        if isinstance(n, Param) and self.params.get(n.name) != n:
            self.fail(f"%{n.name} is not a parameter of this kernel (or differs from it)", n, stmt)
        try:
            err = check_value(n, self.stage)
            if err is None and id(t := n.type) not in self.good_type_objects:
                self.type_ok(t, n, stmt)
        except VerifyError:
            raise
        except Exception as e:  # a field of the wrong kind: report it, don't crash
            if isinstance(e, AttributeError) and (cause := type_error(n)) is not None:
                e = cause   # its type could not be computed: why, rather than that it is missing
            self.fail(f"malformed {cls.__name__}: {type(e).__name__}: {e}", n, stmt)
        if err is not None:
            self.fail(err, n, stmt)

    # ---- statements

    def body(self, stmts: Iterable[object], scope: Scope, depth: int) -> None:
        for s in stmts:
            if not isinstance(s, Stmt):
                self.fail(f"expected a statement, not {type(s).__name__}", s if isinstance(s, Node) else None)
            if type(s) not in self.admitted:
                self.fail(f"{type(s).__name__} is a {_level(type(s))} statement, not allowed in a "
                          f"{self.stage.value} kernel", s)
            self.stmt(s, scope, depth)

    def stmt(self, s: Stmt, scope: Scope, depth: int) -> None:
        match s:
            case Let(var, value):
                self.value(value, scope, s, let=True)
                if isinstance(value, SharedAlloc) and depth > 0:
                    self.fail("shared_alloc must be at kernel top level (threadgroup memory is static)", value, s)
                if isinstance(var, Var) and var.type != value.type:
                    self.fail(f"%{var.name} is declared {var.type} but its value is {value.type}", s)
                self.bind(var, scope, s)
            case Store(ptr, value, mask) | AtomicAdd(ptr, value, mask):
                self.store(s, ptr, value, mask, scope)
            case DevicePrint(prefix, values, _, index, mask):
                vs = self.values([*values, *index, *([mask] if mask is not None else [])], scope, s)
                if not isinstance(prefix, str) or any(isinstance(v.type, PtrType) for v in vs):
                    self.fail("device_print: needs a string prefix and values that are not pointers", s)
            case DeviceAssert(cond, msg, mask):
                ct = self.value(cond, scope, s).type
                if not isinstance(msg, str) or not isinstance(ct, TileType) or ct.dtype is not DType.BOOL:
                    self.fail(f"device_assert: needs a bool condition and a string message, not {ct}", s)
                if mask is not None:
                    self.value(mask, scope, s)
            case VecStore(ptr, value):
                pt, vt = self.value(ptr, scope, s).type, self.value(value, scope, s).type
                if not (isinstance(pt, PtrType) and pt.is_scalar and pt.space is not AddressSpace.CONSTANT):
                    self.fail(f"vstore: the address must be a writable scalar pointer, not {pt}", s)
                if not (isinstance(vt, VectorType) and vt.dtype == pt.dtype):
                    self.fail(f"vstore: cannot store {vt} through {pt}", s)
            case MatrixStore(value, ptr, stride, _):
                vt, pt = self.value(value, scope, s).type, self.value(ptr, scope, s).type
                st = self.value(stride, scope, s).type
                if not isinstance(vt, MatrixType):
                    self.fail(f"matrix_store: the value must be a simdgroup matrix, not {vt}", s)
                if not (isinstance(pt, PtrType) and pt.is_scalar and pt.dtype == vt.dtype
                        and pt.space in (AddressSpace.DEVICE, AddressSpace.THREADGROUP)):
                    self.fail(f"matrix_store: cannot store {vt} through {pt}", s)
                if not (isinstance(st, TileType) and st.is_scalar and st.dtype.is_int):
                    self.fail(f"matrix_store: the stride must be an integer scalar, not {st}", s)
            case TensorMatmul(a, lda, b, ldb, c, ldc, shape, held=held):
                if held and (c is not None or ldc is not None or not s.accumulate):
                    self.fail(f"matmul2d: a run into the held destination {held} has no destination in memory and "
                              "accumulates", s)
                if held and held not in self.held:
                    self.fail(f"matmul2d: {held} is not declared by an earlier tensor_hold", s)
                dst = () if held else (c, ldc)
                types = [self.value(v, scope, s).type for v in (a, lda, b, ldb, *dst)]
                types += [PtrType(DType.F32, (), AddressSpace.THREADGROUP), types[1]] if held else []
                ptrs, strides = types[0::2], types[1::2]
                if not all(isinstance(t, PtrType) and t.is_scalar and t.space is not AddressSpace.CONSTANT
                           for t in ptrs) or ptrs[0].dtype != ptrs[1].dtype or ptrs[2].dtype is not DType.F32:
                    self.fail(f"matmul2d: the operands must be pointers to one element type and the destination a "
                              f"pointer to f32, not {', '.join(map(str, ptrs))}", s)
                if not all(isinstance(t, TileType) and t.is_scalar and t.dtype.is_int for t in strides):
                    self.fail("matmul2d: the row strides must be integer scalars", s)
                if len(shape) != 3 or not all(isinstance(x, int) and x > 0 for x in shape):
                    self.fail(f"matmul2d: the shape must be three positive ints (m, n, k), not {shape}", s)
            case TensorHold(name, shape, dtype):
                if len(shape) != 3 or not all(isinstance(x, int) and x > 0 and x % 16 == 0 for x in shape):
                    self.fail(f"tensor_hold: the shape must be three positive multiples of 16, not {shape}", s)
                if dtype not in (DType.F16, DType.BF16, DType.F32):
                    self.fail(f"tensor_hold: matmul2d operands are f16, bf16 or f32, not {dtype}", s)
                self.held.add(name)
            case TensorRelease(name, ptr, ld, shape):
                pt, lt = self.value(ptr, scope, s).type, self.value(ld, scope, s).type
                if name not in self.held:
                    self.fail(f"tensor_release: {name} is not declared by an earlier tensor_hold", s)
                if not (isinstance(pt, PtrType) and pt.is_scalar and pt.dtype is DType.F32
                        and pt.space is not AddressSpace.CONSTANT):
                    self.fail(f"tensor_release: the destination must be a pointer to f32, not {pt}", s)
                if not (isinstance(lt, TileType) and lt.is_scalar and lt.dtype.is_int):
                    self.fail("tensor_release: the row stride must be an integer scalar", s)
            case Barrier(fence):
                if not isinstance(fence, Fence):
                    self.fail(f"barrier: {fence!r} is not a Fence", s)
            case RingBarrier(ring, kept):
                if not (is_ir_name(ring) and isinstance(kept, bool)):
                    self.fail("ring_barrier: the ring is named by its stage counter, and kept is a bool", s)
            case For():
                self.for_stmt(s, scope, depth)
            case If(cond, then, orelse, then_yields, else_yields, results):
                self.condition(self.value(cond, scope, s), s, "if")
                inner = dict(scope)
                self.body(then, inner, depth + 1)
                tys = [v.type for v in self.values(then_yields, inner, s)]
                inner = dict(scope)
                self.body(orelse, inner, depth + 1)
                eys = [v.type for v in self.values(else_yields, inner, s)]
                self.agree(s, [r.type for r in results], ("then-yields", tys), ("else-yields", eys))
                for r in results:
                    self.bind(r, scope, s)
            case While(carried, inits, cond_body, cond, body, yields, results):
                its = [v.type for v in self.values(inits, scope, s)]
                inner = dict(scope)
                for c in carried:
                    self.bind(c, inner, s)
                self.body(cond_body, inner, depth + 1)
                self.condition(self.value(cond, inner, s), s, "while")
                self.loop_body(s, carried, its, body, yields, results, inner, scope, depth)
            case SimdgroupRole(role, num_roles, num_sgs, body, yields, results):
                if not (isinstance(num_roles, int) and num_roles >= 1 and isinstance(role, int)
                        and 0 <= role < num_roles and isinstance(num_sgs, int) and num_sgs >= 0):
                    self.fail(f"simdgroup_role {role} of {num_roles}, sgs {num_sgs}: out of range", s)
                inner = dict(scope)
                self.body(body, inner, depth + 1)
                tys = [v.type for v in self.values(yields, inner, s)]
                self.agree(s, [r.type for r in results], ("yields", tys))
                for r in results:
                    self.bind(r, scope, s)
            case _:
                self.fail(f"{type(s).__name__} is not a well-formed statement", s)

    def store(self, s: Stmt, ptr: object, value: object, mask: object, scope: Scope) -> None:
        word = "store" if isinstance(s, Store) else "atomic_add"
        pt, vt = self.value(ptr, scope, s).type, self.value(value, scope, s).type
        if not isinstance(pt, PtrType):
            self.fail(f"{word}: the address must be a pointer, not {pt}", s)
        if pt.space is AddressSpace.CONSTANT:
            self.fail(f"{word}: cannot write to constant memory ({pt})", s)
        if vt != TileType(pt.dtype, pt.shape):
            self.fail(f"{word}: the value must be {TileType(pt.dtype, pt.shape)} to match {pt}, not {vt}", s)
        if mask is not None and (mt := self.value(mask, scope, s).type) != TileType(DType.BOOL, pt.shape):
            self.fail(f"{word}: the mask must be {TileType(DType.BOOL, pt.shape)} (the pointer's shape), not {mt}", s)
        if isinstance(s, AtomicAdd) and s.op is AtomicOp.CAS:
            self.fail("atomic_cas: a compare-and-swap is a value (atomic_rmw), not a statement", s)
        if isinstance(s, AtomicAdd) and (pt.dtype not in ATOMIC_DTYPES[s.op] or pt.space is not AddressSpace.DEVICE
                                         and pt.space is not AddressSpace.THREADGROUP):
            *most, last = (str(d) for d in ATOMIC_DTYPES[s.op])
            allowed = f"{', '.join(most)} or {last}"
            self.fail(f"atomic_{s.op.value}: needs {allowed} in device or threadgroup memory, not {pt}", s)
        if isinstance(s, AtomicAdd) and pt.dtype.bits == 16 and pt.space is not AddressSpace.DEVICE:
            self.fail(f"atomic_{s.op.value}: atomics on {pt.dtype} work on device memory only, not {pt}", s)

    def for_stmt(self, s: For, scope: Scope, depth: int) -> None:
        index, start, stop, step, carried, inits, body, yields, results, num_stages = (
            s.index, s.start, s.stop, s.step, s.carried, s.inits, s.body, s.yields, s.results, s.num_stages)
        bounds = self.values((start, stop, step), scope, s)
        its = [v.type for v in self.values(inits, scope, s)]
        inner = dict(scope)
        self.bind(index, inner, s)
        it = index.type
        if not (isinstance(it, TileType) and it.is_scalar and it.dtype.is_int):
            self.fail(f"for: the index must be an integer scalar, not {it}", index, s)
        for what, b in zip(("start", "stop", "step"), bounds):
            if b.type != it:
                self.fail(f"for: {what} is {b.type} but the index is {it}", b, s)
        if num_stages is not None and (not isinstance(num_stages, int) or num_stages < 1):
            self.fail(f"for: num_stages must be a positive integer, not {num_stages!r}", s)
        for c in carried:
            self.bind(c, inner, s)
        self.loop_body(s, carried, its, body, yields, results, inner, scope, depth)

    def loop_body(self, s: Stmt, carried, its: list, body, yields, results, inner: Scope, scope: Scope,
                  depth: int) -> None:
        """The part `For` and `While` share: the body, then carried/inits/yields/results agreeing, then the
        results bound in the enclosing scope."""
        self.body(body, inner, depth + 1)
        ys = [v.type for v in self.values(yields, inner, s)]
        self.agree(s, [c.type for c in carried], ("inits", its), ("yields", ys),
                   ("results", [r.type for r in results]))
        for r in results:
            self.bind(r, scope, s)

    def condition(self, cond: Value, s: Stmt, word: str) -> None:
        if cond.type != TileType(DType.BOOL):
            self.fail(f"{word}: the condition must be a scalar bool, not {cond.type}", cond, s)

    def agree(self, s: Stmt, expected: list, *others: tuple[str, list]) -> None:
        """Each list of types in `others` equals `expected` (the carried or result types)."""
        what = "carried values" if isinstance(s, (For, While)) else "results"
        for name, tys in others:
            if len(tys) != len(expected):
                self.fail(f"{type(s).__name__}: {len(expected)} {what} but {len(tys)} {name}", s)
            for i, (a, b) in enumerate(zip(expected, tys)):
                if a != b:
                    self.fail(f"{type(s).__name__}: {name}[{i}] is {b} but the {what}[{i}] is {a}", s)


def _chunks(d: Dot, chunk: object) -> bool:
    """Whether `chunk` is a chunk of k `d` can stage its operands by: a multiple of 8 dividing k, short of it."""
    k = d.a.type.shape[-1] if d.a.type.shape else 0
    return isinstance(chunk, int) and not isinstance(chunk, bool) and 8 <= chunk < k and chunk % 8 == 0 \
        and k % chunk == 0


def _arranges(d: Dot, sgs) -> bool:
    """True when `sgs` is `(sg_m, sg_n)`, positive, dividing the grid of 8x8 pieces of `d`'s result."""
    if not (isinstance(sgs, tuple) and len(sgs) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1
                                                              for x in sgs)):
        return False
    m, n = d.a.type.shape[0], d.b.type.shape[1]
    return m % (8 * sgs[0]) == 0 and n % (8 * sgs[1]) == 0


__all__ = ["VerifyError", "verify"]

