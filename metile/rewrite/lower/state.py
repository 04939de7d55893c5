"""What the lowering of one kernel works with: its frozen facts, the per-thread representation of each tile, and
the builder of the region being lowered.

- `Facts` (frozen): the kernel and what the analyses of the run know of it (scan, uniformity, axis information,
  the layouts `assign_layouts` recorded, the launch plan).
- `KernelState`: the little the lowering keeps for the whole kernel: the names taken, the threadgroup arrays of
  channels and hoisted staging, the scratch use of the statement being lowered (`metile.ir.simt.Scratch`), the
  location it gives what it emits, and the keys the regions have memoised values under.
- `Block`: one region being lowered (the kernel's body, a loop's body, a branch, a role block, or a loop the
  lowering makes itself): the statements it emits, the representations of the names it binds, the values it has
  lowered (visible to the regions nested in it), and where it runs (its group of threads, the control flow
  around it that depends on the thread or on the lane, the pipelined loop whose body it is). `Block.nested()`
  opens a nested region, `Block.collecting()` gathers what a region emits into a list of its own (the body of a
  statement being built); the rule functions of the other modules take the block they emit into.

A Tile IR value is represented per thread by one of `Scalar`, `Regs`, `Mma`, `Lazy`, `Channel` (see each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import attrs

from metile.ir.errors import Loc
from metile.ir.layouts import TileLayout
from metile.ir.node import Node
from metile.ir.stmts import Kernel, LaunchPlan, Let
from metile.ir.target import AppleTarget
from metile.ir.tile import SimdgroupRole
from metile.ir.values import Stmt, Value, Var
from metile.rewrite.axis_info import AxisAnalysis
from metile.rewrite.distribute import Blocked, MmaGeometry
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.scan import Scan

if TYPE_CHECKING:
    from metile.rewrite.lower.mma import Ring


@attrs.frozen
class Group:
    """The threads running a region: `tid` is the index within the group, `first_sg` its first simdgroup."""

    tid: Value
    threads: int
    first_sg: int
    sgs: int
    role: SimdgroupRole | None = None


class Pt(NamedTuple):
    """Element `flat` (row-major, in range) of a tile of `shape`; `key` is `(layout, slot)` when this thread holds
    it in that slot; `at`, when known, its coordinates (`flat` split along `shape`). (A named tuple: the lowering
    makes one for every element it reads.)"""

    shape: tuple[int, ...]
    flat: Value
    key: tuple[object, int] | None = None
    at: tuple[Value, ...] | None = None


@attrs.frozen
class Scalar:
    """A per-thread scalar (program scalars are computed by every thread)."""

    value: Value


@attrs.frozen
class Regs:
    """The elements this thread holds of a tile laid out by `layout`, one value per slot."""

    layout: Blocked
    regs: tuple[Value, ...]


@attrs.frozen
class Lazy:
    """A pure tile expression, evaluated wherever one of its elements is needed."""

    expr: Value


@attrs.frozen
class Mma:
    """A `dot` result in the simdgroup matrices of `geom` (this simdgroup's pieces)."""

    geom: MmaGeometry
    mats: tuple[Value, ...]


@attrs.frozen
class Channel:
    """A role's result in threadgroup memory (row-major at `base`), readable after the role's barrier."""

    base: Value
    shape: tuple[int, ...]


@attrs.frozen
class Facts:
    """What the lowering knows of the kernel it lowers (read only)."""

    k: Kernel
    target: AppleTarget
    scan: Scan
    varying: frozenset[str]
    lane_varies: object            # a test: may this value differ between the lanes of a simdgroup?
    axes: AxisAnalysis
    layouts: dict[str, TileLayout]
    # what the lowering reads of the others, as fields set with them; the tile names found when first asked (fields,
    # not `functools.cached_property`s, which would give the class attrs' `__getattr__`: `distribute.Blocked` says why)
    plan: LaunchPlan = attrs.field(init=False, eq=False, repr=False)
    defs: dict[str, Value] = attrs.field(init=False, eq=False, repr=False)
    _tile_names: frozenset[str] | None = attrs.field(init=False, eq=False, repr=False, default=None)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "plan", self.k.plan)
        object.__setattr__(self, "defs", self.axes.defs)

    @property
    def tile_names(self) -> frozenset[str]:
        """The names of the kernel's tiles (variables of a shaped type), found once when first asked: a value whose
        scan facts read none of them and hold no reduction, scan, gather or product reads scalars only."""
        found = self._tile_names
        if found is None:
            found = frozenset(n.name for n in self.scan.of(Var) if n.type.shape)
            object.__setattr__(self, "_tile_names", found)
        return found


class KernelState:
    """The lowering's state for the whole kernel (see the module docstring)."""

    __slots__ = ("bound", "channels", "loc", "memoised", "parts", "published", "regions", "suffix",
                 "taken", "use", "uses")

    def __init__(self, taken: set[str]):
        self.taken = taken
        self.suffix: dict[str, int] = {}
        self.channels: list[Let] = []           # threadgroup arrays of role channels and hoisted staging
        self.bound: list[Let] = []              # the regions of scratch, each bound to a name at the kernel's start
        self.loc: Loc | None = None             # of the Tile IR statement being lowered
        self.uses = 0                           # scratch uses numbered so far
        self.use = 0                            # the scratch use of the statement being lowered
        self.parts = 0                          # regions it has taken so far
        self.regions = 0                        # symbolic regions of threadgroup memory made in the kernel
        self.published: dict[int, tuple[Value, object]] = {}   # tiles this statement put in scratch (`publish`)
        self.memoised: set[int] = set()         # the hashes of the keys any region has memoised (`Block.memo_put`)

    def fresh(self, base: str) -> str:
        """A name not used yet: `base`, else `base_<i>` with the next free `i` for that base."""
        taken, i = self.taken, self.suffix.get(base)
        if i is None:   # `base` itself, unless the kernel has it (it is taken once it has a suffix)
            if base not in taken:
                self.suffix[base] = 0
                taken.add(base)
                return base
            i = 0
        i += 1
        name = f"{base}_{i}"
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        self.suffix[base] = i
        taken.add(name)
        return name

    def fresh_names(self, base: str, n: int) -> list[str]:
        """The names `n` calls of `fresh(base)` would give, in one call (the variables a loop carries, one per
        register or matrix)."""
        if n <= 0:
            return []
        out = [self.fresh(base)]   # `base` itself where it is free; its suffix is counted from then on
        taken, i = self.taken, self.suffix[base]
        for _ in range(n - 1):
            i += 1
            name = f"{base}_{i}"
            while name in taken:
                i += 1
                name = f"{base}_{i}"
            taken.add(name)
            out.append(name)
        self.suffix[base] = i
        return out

    def publish(self, rep: object, base: Value) -> None:
        """`rep` (a tile's registers or matrices) is in scratch at `base` for the rest of the statement. Keyed by
        identity, with `rep` kept in the entry: a temporary tile published and dropped would otherwise free its id
        for another tile, which would then read the first one's scratch."""
        self.published[id(rep)] = (base, rep)

    def published_base(self, rep: object) -> Value | None:
        """Where `publish` put `rep` in this statement, or None."""
        found = self.published.get(id(rep))
        return None if found is None else found[0]

    def new_statement(self) -> None:
        """A new statement starts: a scratch use of its own, nothing of it published yet."""
        self.uses += 1
        self.use, self.parts, self.published = self.uses, 0, {}

    def next_part(self) -> int:
        """The number of a new region of the statement's scratch use (every `Scratch` and `RingBuffer` takes one)."""
        self.regions += 1
        self.parts += 1
        return self.parts - 1


class Block:
    """One region being lowered (see the module docstring)."""

    __slots__ = ("divergent", "env", "facts", "fresh", "group", "kernel", "lane_divergent", "memo", "out", "parent",
                 "preheader", "ring")

    def __init__(self, facts: Facts, kernel: KernelState, group: Group, parent: Block | None = None,
                 out: list[Stmt] | None = None):
        self.facts, self.kernel, self.group, self.parent = facts, kernel, group, parent
        self.fresh = kernel.fresh   # `fresh(base)`: a name not used yet in the kernel (`KernelState.fresh`)
        self.out: list[Stmt] = [] if out is None else out
        self.env: dict[str, object] = {}
        self.memo: dict[int, tuple[object, object]] = {}   # hash of a key -> (the key, its value)
        self.divergent: Node | None = None        # control flow depending on the thread: no barrier inside
        self.lane_divergent: Node | None = None   # control flow depending on the lane: no simdgroup collective
        self.ring: Ring | None = None             # the ring of the pipelined loop whose body this is
        self.preheader: list[Stmt] | None = None  # what runs before that loop

    def nested(self, *, divergent: Node | None = None, lane_divergent: Node | None = None,
               group: Group | None = None) -> Block:
        """A region nested in this one (names it binds and values it lowers are its own), emitting where this one
        does; under `divergent` / `lane_divergent` control flow, on `group`'s threads."""
        b = Block(self.facts, self.kernel, group or self.group, self, self.out)
        b.divergent = self.divergent or divergent
        b.lane_divergent = self.lane_divergent or lane_divergent
        return b

    def body(self, **region) -> Block:
        """A nested region (`nested`) emitting into a list of its own (`collecting`): the body of a statement the
        lowering builds (a loop over slots or over k, a branch)."""
        return self.nested(**region).collecting()

    def collecting(self) -> Block:
        """This region, emitting into a list of its own (a body to build a statement of)."""
        b = Block(self.facts, self.kernel, self.group, self.parent)
        b.env, b.memo = self.env, self.memo
        b.divergent, b.lane_divergent, b.ring, b.preheader = self.divergent, self.lane_divergent, self.ring, \
            self.preheader
        return b

    @property
    def loc(self) -> Loc | None:
        return self.kernel.loc

    def lookup(self, name: str):
        b = self
        while b is not None:
            found = b.env.get(name)
            if found is not None:
                return found
            b = b.parent
        return None

    def bind(self, var: Var, rep) -> None:
        self.env[var.name] = rep

    def memo_get(self, key):
        """The value memoised for `key` in this region or one it is nested in. The memos are keyed by the key's
        hash, computed once here rather than by each region's dict, and hold the key to compare (a hash met by
        another key is a miss)."""
        return self.memo_get_at(key, hash(key))

    def memo_put(self, key, value) -> None:
        self.memo_put_at(key, hash(key), value)

    def memo_put_at(self, key, h: int, value) -> None:
        """`memo_put(key, value)` for a key hashed `h` by its maker (as `memo_get_at` takes it)."""
        self.memo[h] = (key, value)
        self.kernel.memoised.add(h)

    def memo_get_at(self, key, h: int):
        """`memo_get(key)` for a key hashed `h` by its maker (every look-up and entry of such keys hashing them the
        same way), without hashing it again here. A hash no region has memoised is a miss found by one look-up, as
        most are (the regions a miss would walk are not asked)."""
        if h not in self.kernel.memoised:
            return None
        b = self
        while b is not None:
            found = b.memo.get(h)
            if found is not None and (found[0] is key or found[0] == key):
                return found[1]
            b = b.parent
        return None

    def emit(self, s: Stmt) -> None:
        self.out.append(s)

    def fresh_vars(self, base: str, like: list[Value]) -> list[Var]:
        """New variables of the types of `like`, named as successive `fresh(base)` calls would name them."""
        return [Var(name, x.type) for name, x in zip(self.kernel.fresh_names(base, len(like)), like)]

    def let(self, value: Value, base: str = "t", loc: Loc | None = None) -> Var:
        """A new variable bound to `value` by a `Let` located at `loc` (default: the statement being lowered)."""
        v = Var(self.fresh(base), value.type)
        self.out.append(Let(v, value, loc=loc or self.kernel.loc))
        return v

    def refuse(self, what: str, n: Node | None) -> UnsupportedConstructError:
        return UnsupportedConstructError(what, getattr(n, "loc", None))


__all__ = ["Block", "Channel", "Facts", "Group", "KernelState", "Lazy", "Mma", "Pt", "Regs", "Scalar"]
