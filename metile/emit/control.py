"""The statements of `emit_msl` that carry values (`For`, `While`, `If`): their mutable locals, declared before them,
and the parallel assignment of their yields (see `metile.emit.msl`'s docstring), written through the emitter `em`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from metile.emit.facts import reads_any
from metile.emit.spell import loop_step, pointer_text, type_name, type_text
from metile.ir import Const, Extract, For, If, MatrixType, Param, PtrType, Value, Var, While

if TYPE_CHECKING:
    from metile.emit.msl import _Emitter as Emitter


def declare(em: Emitter, var: Var, init: Value | None) -> None:
    """A mutable local for a carried value or result (`float acc = 0.0f;`, `float lead;`)."""
    em.mutable.add(var.name)
    t = var.type
    decl = pointer_text(t, em.ptr_is_const(var, t)) if t.__class__ is PtrType else type_text(t)
    decl = f"{em.pad}{decl} {em.names[var.name]}"
    em.lines.append(f"{decl} = {em.expr(init)[0]};" if init is not None else f"{decl};")


def assign(em: Emitter, targets, values, *, fresh: bool = False) -> None:
    """`target = value` for each pair, as a parallel assignment (a yield may read a carried value); a value
    written as its own target is left out. `fresh` targets (an `If`'s results, declared just before it) are
    read by no value inside the `If` and share no local: each is assigned its value in turn."""
    names, start = em.names, len(em.lines)
    if fresh:
        pairs = list(zip(targets, values))
    else:
        pairs = [(t, v) for t, v in zip(targets, values)   # an equal `Var` has the same name
                 if not (v.__class__ is Var and names[v.name] == names[t.name])]
    if not fresh and len(pairs) > 1 and reads_any([v for _, v in pairs], {names[t.name] for t, _ in pairs}, names):
        texts = [temporary(em, t, v) for t, v in pairs]
        pad = em.pad
        em.lines += [f"{pad}{names[t.name]} = {text};" for (t, _), text in zip(pairs, texts)]
    else:   # each value's locals are declared before the first assignment: the list is built before it is added
        pad, expr = em.pad, em.expr
        em.lines += [f"{pad}{names[t.name]} = {lane(em, v) if v.__class__ is Extract else expr(v)[0]};"
                     for t, v in pairs]
    if em.owners is not None and (loc := next((v.loc for v in values if v.loc is not None), None)) is not None:
        em.owners.nest(start, len(em.lines), loc)


def lane(em: Emitter, v: Extract) -> str:
    """`expr(v)[0]` of a lane: of a named vector, never named (see `compound`), written without its record."""
    vec = v.vec
    if (vec.__class__ is Var or vec.__class__ is Param) and vec.type.__class__ is not MatrixType:
        return f"{em.names[vec.name]}[{v.lane}]"
    return em.expr(v)[0]


def same_local(em: Emitter, var: Var, other: Var) -> None:
    """Write `var` as `other`'s local from here on (a yield reading either is then found by the local's C name)."""
    names = em.names
    names[var.name] = names[other.name]
    if other.name in em.mutable:
        em.mutable.add(var.name)


def temporary(em: Emitter, t: Var, v: Value) -> str:
    """`next_<t>_N`, a `const` local holding `v` (named before the locals `v` needs)."""
    name = em.local_name(f"next_{em.names[t.name]}_")
    text = em.expr(v)[0]
    em.lines.append(f"{em.pad}{em.local_decl(name, t)} = {text};")
    return name


def carry(em: Emitter, carried, inits) -> None:
    """Declare a loop's carried locals. A carried value whose init is a mutable local read nowhere else (say
    an enclosing loop's accumulator, handed to an inner loop) is carried in that local, in place: nothing
    can observe the old value any more. A pointer keeps a local of its own (its const-ness is decided
    apart)."""
    reads, mutable = em.reads, em.mutable
    for c, init in zip(carried, inits):
        if (init.__class__ is Var and init.name in mutable and reads.get(init.name) == 1
                and c.type.__class__ is not PtrType):
            same_local(em, c, init)
        else:
            declare(em, c, init)


def for_loop(em: Emitter, s: For) -> None:
    carry(em, s.carried, s.inits)
    i = em.names[s.index.name]
    start, stop, step = em.expr(s.start)[0], em.expr(s.stop)[1], em.expr(s.step)[1]
    down = isinstance(s.step, Const) and s.step.value < 0
    test = f"{i} {'>' if down else '<'} {stop}"
    if not isinstance(s.step, Const):  # a run-time step below 1 runs no iteration
        test = f"{step} > 0 && {test}"
    em.open_block(f"for ({type_name(s.index.type)} {i} = {start}; {test}; {loop_step(s, i, stop, step)})")
    em.body(s.body)
    assign(em, s.carried, s.yields)
    em.close_block()
    results_of(em, s.results, s.carried)


def results_of(em: Emitter, results, carried) -> None:
    """A loop's results: after the loop nothing assigns its carried locals again, so a result is written
    as the carried local itself; a pointer gets its own local, since it may be declared `const` apart."""
    for r, c in zip(results, carried):
        if r.type.__class__ is PtrType:
            declare(em, r, c)
        else:
            same_local(em, r, c)


def if_stmt(em: Emitter, s: If) -> None:
    for r in s.results:
        declare(em, r, None)
    em.open_block(f"if ({em.expr(s.cond)[0]})")
    em.body(s.then)
    assign(em, s.results, s.then_yields, fresh=True)
    if s.orelse or s.else_yields:
        em.else_block()
        em.body(s.orelse)
        assign(em, s.results, s.else_yields, fresh=True)
    em.close_block()


def while_loop(em: Emitter, s: While) -> None:
    carry(em, s.carried, s.inits)
    em.open_block("while (true)")
    em.body(s.cond_body)
    em.lines.append(f"{em.pad}if (!{em.expr(s.cond)[1]}) break;")
    em.body(s.body)
    assign(em, s.carried, s.yields)
    em.close_block()
    results_of(em, s.results, s.carried)
