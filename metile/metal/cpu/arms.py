"""Guards that let the CPU runtime run simd collectives in divergent control flow as an Apple GPU does.

A GPU runs the arms of a lane-divergent branch one after the other and the iterations of a loop in step, so a
collective runs over the lanes that reach it in the same arm, the same loop iteration and the same call. The
runtime (`runtime_sched.cpp`) sees only where each lane waits; this pass tells it the rest by putting guards from
`include/mt_diverge.h` into the translated text, for every construct whose text names a collective (directly, or
through the functions, lambdas and macros of the source and of the headers it includes, by a fixpoint on names):

- an `if`/`switch` statement with such arms: `{ stmt(start, end); if (...) { arm(ID, pos, line); ... } ... }`, each
  such arm (and `case`/`default` group) braced with an `arm` guard, so that the two arms of
  `if (lane < 16) r = f(x); else r = f(y);` are two collectives;
- a loop whose lanes may part ways inside (an arm or a nested loop with a collective, or `continue`):
  `{ loop __mt_lID(ID, start, end, line); for (...; __mt_lID.next() && (cond); __mt_lID.at(end), (inc)) ... }`
  (`while`: in the condition; `do` and range-for: at the body's start), so that lanes in different iterations
  never meet and an earlier iteration runs first; any other loop with a collective gets a `stmt` around it
  (its lanes run each iteration's collectives together; lanes that leave early wait after the loop, where the
  statement's end gives them all one position again, whatever calls each made in it);
- the body of a function or lambda: `{ fn(ID, line); ...`, ordered by its caller's position and call number
  (with an overloaded operator that runs a collective, of every function: guards in a body without a frame of
  its own would move its caller's position, and lanes returning early from it would then meet the caller's
  next collective at different positions).

Positions are token numbers (from 1), so no two points of the source tie; lines are only for messages. Guards are
inserted without adding or removing a newline, so the `.metal` lines of the text stay. A collective in an operand
of `?:`, `&&` or `||` that not every lane evaluates is refused: no guard can tell which lanes evaluated it; one
after a condition every lane of the simdgroup computes alike (uniform.py) runs, as all the lanes or none reach it. A
source without collectives gets no guards, nor does straight-line kernel code; an overloaded operator with a
collective puts guards on every construct, since its calls show no name. A source with `#include "..."` reaches
this pass preprocessed, its headers' text in it, so their control flow is marked like the source's; `headers` (the
files a source that was not preprocessed includes) only lend their functions' names.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from metile.metal.cpu.declarations import brackets, constexpr_tokens
from metile.metal.cpu.uniform import is_uniform, uniform_names
from metile.metal.errors import MSLUnsupportedError
from metile.metal.msl_lex import Tok, Token
from metile.metal.msl_signature import SourceErrors

_KINDS = (
    "shuffle", "shuffle_xor", "shuffle_up", "shuffle_down", "shuffle_rotate_up", "shuffle_rotate_down",
    "shuffle_and_fill_up", "shuffle_and_fill_down", "broadcast", "broadcast_first", "sum", "product", "min", "max",
    "and", "or", "xor", "prefix_inclusive_sum", "prefix_exclusive_sum", "prefix_inclusive_product",
    "prefix_exclusive_product", "all", "any", "ballot", "active_threads_mask", "is_first",
)
COLLECTIVES = frozenset(
    {f"{group}_{kind}" for group in ("simd", "quad") for kind in _KINDS}
    | {"simdgroup_barrier", "simdgroup_multiply_accumulate", "simdgroup_multiply"}
)
_NOT_FUNCTIONS = frozenset({
    "if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype", "static_assert",
    "alignas", "noexcept", "requires",
})
_QUALIFIERS = frozenset({
    "const", "noexcept", "override", "final", "volatile", "mutable", "thread", "device", "threadgroup",
    "constant", "&", "&&",
})
_STATEMENT_WORDS = frozenset({"if", "for", "while", "do", "switch", "return", "break", "continue"})
_ASSIGNMENTS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", "++", "--"})
_NS = "::metal::_mt::"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# Tensor ops that run over the lanes of a simdgroup (matmul2d::run exchanges cooperative operands: include/mt_mpp.h);
# collectives in sources that include <metal_tensor> or MetalPerformancePrimitives only, `run` being a common name.
TENSOR_COLLECTIVES = frozenset({"run", "reduce_rows", "reduce_columns"})


def is_collective(name: str, tensor_ops: bool = False) -> bool:
    """A call of this name runs over the lanes of a simdgroup (or quad); with `tensor_ops`, tensor ops count."""
    return (name[8:] if name.startswith("__metal_") else name) in COLLECTIVES or (
        tensor_ops and name in TENSOR_COLLECTIVES)


def arm_edits(tokens: list[Token], errors: SourceErrors, kernel_names: Iterable[str],
              headers: Iterable[tuple[str, list[Token]]] = (),
              directives: Iterable[Token] = (), tensor_ops: bool = False,
              constants: frozenset[str] = frozenset()) -> list[tuple[int, int, str]]:
    """Insertions (start, start, text) that put the guards of the module docstring into the source. `headers` are
    the (path, tokens) of the files it includes: calls of their functions with collectives get guards around them
    too (their own bodies are compiled as they are). `directives` are the source's preprocessor lines (not in
    `tokens`): a guard opening before a statement goes before those in front of it (`#pragma clang loop` must
    stay right before its loop). `constants`: the source's function constants and the program-scope constants
    made from them, the same for every thread (uniform.py)."""
    extra = _header_uses(headers, tensor_ops)
    if not any(t.kind is Tok.IDENT and is_collective(t.text, tensor_ops) for t in tokens) and not extra:
        return []
    close, open_of = brackets(tokens)
    if close is None:
        first = next(t for t in tokens if t.kind is Tok.IDENT and is_collective(t.text, tensor_ops))
        raise errors.at(first, "cannot read the control flow around this simd collective (brackets do not balance "
                        "outside preprocessor conditionals)", MSLUnsupportedError)
    bodies = _function_bodies(tokens, close, open_of)
    lambdas = _lambda_bodies(tokens, open_of)
    names = _collective_names(tokens, close, bodies + [(n, i) for i, n in lambdas.items() if n], extra, tensor_ops)
    if not any(t.kind is Tok.IDENT and t.text in names for t in tokens):
        return []
    guard = _Guards(tokens, close, names, errors, frozenset(lambdas), sorted(d.start for d in directives))
    kernels = set(kernel_names)
    done_until = -1
    for name, lbrace in bodies:
        if lbrace < done_until:
            continue  # a local class's member function: walked with its enclosing body
        done_until = close[lbrace]
        constexpr = constexpr_tokens(tokens, lbrace, open_of)
        if constexpr:
            if not any(t.kind is Tok.IDENT and is_collective(t.text, tensor_ops)
                       for t in tokens[lbrace + 1:close[lbrace]]):
                # guards are not literal types: they would take constexpr from a function that calls no collective
                # itself (names are matched across the source, so a `bits` or `load` elsewhere can mark any function)
                continue
            # a function that runs a collective is never a constant expression, and its guards are not literal types
            # (g++ lets them into a constexpr function; clang, as on a Mac, refuses it): it is compiled without
            guard.not_constexpr(constexpr)
        if (name in names or guard.everywhere) and name not in kernels:
            # with an operator that runs a collective any function may run one: each gets a frame of its own, so
            # that the guards of its body never move its caller's position (lanes that return early from it would
            # meet the caller's next collective at another position than the others)
            guard.function_body(lbrace)
        guard.uniform = uniform_names(tokens, _parameter_list(tokens, lbrace, open_of), lbrace, close, constants)
        guard.block(lbrace + 1, close[lbrace])
    return guard.edits()


def _function_bodies(tokens: list[Token], close: dict[int, int], open_of: dict[int, int]) -> list[tuple[str, int]]:
    """(name, index of `{`) of each function definition, in source order. Lambdas are part of their enclosing body;
    an operator's name is `operator`."""
    out = []
    for i, t in enumerate(tokens):
        if t.text != "{" or t.kind is not Tok.PUNCT:
            continue
        span = _parameter_list(tokens, i, open_of)
        if span is None:
            continue
        name = _callee_name(tokens, span[0] - 1, open_of)
        if name is not None:
            out.append((name, i))
    return out


def _parameter_list(tokens: list[Token], lbrace: int, open_of: dict[int, int]) -> tuple[int, int] | None:
    """The indices of the `(` and `)` around the parameters of the function whose body opens at tokens[lbrace]
    (None when no parameter list stands before it)."""
    k = lbrace - 1
    while k >= 0 and (tokens[k].text in _QUALIFIERS or tokens[k].text == "]]"):
        k = open_of.get(k, k + 1) - 1 if tokens[k].text == "]]" else k - 1
    if k < 1 or tokens[k].text != ")" or k not in open_of:
        return None
    return open_of[k], k


def _lambda_bodies(tokens: list[Token], open_of: dict[int, int]) -> dict[int, str]:
    """{index of `{`: the variable it initializes ("" for none)} of each lambda: `[...](...) {` or `[...] {`."""
    out = {}
    for i, t in enumerate(tokens):
        if t.text != "{" or t.kind is not Tok.PUNCT:
            continue
        k = i - 1
        while k >= 0 and tokens[k].text in _QUALIFIERS:
            k -= 1
        if k >= 1 and tokens[k].text == ")" and k in open_of:
            k = open_of[k] - 1
        if k < 1 or tokens[k].text != "]" or k not in open_of:
            continue
        cap = open_of[k]
        if cap >= 1 and tokens[cap - 1].text not in ("=", "(", ",", "return", "{", ";", "}"):
            continue  # `a[2] {...}`: an initializer, not a capture list
        named = cap >= 2 and tokens[cap - 1].text == "=" and tokens[cap - 2].kind is Tok.IDENT
        out[i] = tokens[cap - 2].text if named else ""
    return out


_CTOR_QUALIFIERS = frozenset({"thread", "device", "threadgroup", "constant", "const", "noexcept"})
"""Words that may stand between a constructor's parameter list and its member initializers (`Loader(...) thread :`:
MSL constructors name the address space of the object they make)."""


def _callee_name(tokens: list[Token], k: int, open_of: dict[int, int]) -> str | None:
    """The name of the function whose parameter list starts after tokens[k], or None for control statements and
    lambdas. Walks back over a constructor's member initializers (`: a(x), b{y}`)."""
    while k >= 0:
        t = tokens[k]
        if k >= 1 and tokens[k - 1].text == "operator" or k >= 2 and tokens[k - 2].text == "operator":
            return "operator"
        if t.text == ">":  # an explicit specialization: name<args>(...)
            depth = 0
            while k >= 0:
                depth += {">": 1, ">>": 2, "<": -1}.get(tokens[k].text, 0)
                k -= 1
                if depth <= 0:
                    break
            continue
        if t.kind is not Tok.IDENT or t.text in _NOT_FUNCTIONS:
            return None
        before = tokens[k - 1].text if k >= 1 else ""
        close = k - 2
        if before == ":":   # a constructor's qualifiers between its parameters and its initializers
            while close >= 0 and tokens[close].text in _CTOR_QUALIFIERS:
                close -= 1
        if before in (",", ":") and close >= 0 and tokens[close].text in (")", "}") and close in open_of:
            k = open_of[close] - 1  # a member initializer: go on to the one before, or to the parameters
            if before == ":":
                return _callee_name(tokens, k, open_of) if tokens[k + 1].text == "(" else None
            continue
        return t.text
    return None


def _header_uses(headers: Iterable[tuple[str, list[Token]]], tensor_ops: bool) -> dict[str, set[str]]:
    """The names each function and macro of the headers uses, for headers that name a collective."""
    uses: dict[str, set[str]] = {}
    for _, toks in headers:
        if not any(t.kind is Tok.IDENT and is_collective(t.text, tensor_ops) for t in toks):
            continue
        close, open_of = brackets(toks)
        bodies = _function_bodies(toks, close, open_of) if close is not None else []
        for name, used in _uses(toks, close or {}, bodies).items():
            uses.setdefault(name, set()).update(used)
    return uses


def _uses(tokens: list[Token], close: dict[int, int], bodies: list[tuple[str, int]]) -> dict[str, set[str]]:
    uses: dict[str, set[str]] = {}
    for name, lbrace in bodies:
        used = uses.setdefault(name, set())
        used.update(t.text for t in tokens[lbrace + 1:close[lbrace]] if t.kind is Tok.IDENT)
    for t in tokens:
        if t.kind is Tok.DIRECTIVE and t.text.lstrip("# \t").startswith("define"):
            words = _WORD.findall(t.text)  # `define`, the name, its text (words in strings count too)
            if len(words) >= 2:
                uses.setdefault(words[1], set()).update(words[2:])
    return uses


def _collective_names(tokens: list[Token], close: dict[int, int], bodies: list[tuple[str, int]],
                      extra: dict[str, set[str]], tensor_ops: bool) -> frozenset[str]:
    """Names whose call may run a collective: the collectives themselves, and by a fixpoint the functions and
    macros (of the source and its headers) whose text names one."""
    uses = _uses(tokens, close, bodies)
    for name, used in extra.items():
        uses.setdefault(name, set()).update(used)
    names = {w for used in uses.values() for w in used if is_collective(w, tensor_ops)}
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            if name not in names and not used.isdisjoint(names):
                names.add(name)
                changed = True
    return frozenset(names)


class _Guards:
    """Walks the statements of function bodies and collects the insertions."""

    def __init__(self, tokens: list[Token], close: dict[int, int], names: frozenset[str], errors: SourceErrors,
                 lambdas: frozenset[int], directive_starts: list[int]):
        self.t = tokens
        self.directive_starts = directive_starts
        self.close = close
        self.names = names
        self.lambdas = lambdas
        # an overloaded operator with a collective is called where no name shows: every construct gets guards
        self.everywhere = "operator" in names
        self.errors = errors
        self.uniform: frozenset[str] = frozenset()   # names of the function walked that lanes share (uniform.py)
        self.ids = 0
        self.before: dict[int, list[str]] = {}  # insertions at a token's start, in order
        self.after: dict[int, list[str]] = {}   # insertions at a token's end
        self.removed: list[tuple[int, int, str]] = []   # tokens taken out (`not_constexpr`)

    def edits(self) -> list[tuple[int, int, str]]:
        at: dict[int, list[str]] = {}
        for i, texts in self.after.items():
            at.setdefault(self.t[i].end, []).extend(texts)
        for i, texts in sorted(self.before.items()):
            at.setdefault(self._before_directives(i), []).extend(texts)
        return [(pos, pos, "".join(texts)) for pos, texts in at.items()] + self.removed

    def _before_directives(self, i: int) -> int:
        """Where text inserted before tokens[i] goes: its start, or the end of the token before it when preprocessor
        lines come between (the text stays on that token's line, so no line moves)."""
        start = self.t[i].start
        if i == 0:
            return start
        k = bisect.bisect_right(self.directive_starts, self.t[i - 1].end)
        return self.t[i - 1].end if k < len(self.directive_starts) and self.directive_starts[k] < start else start

    def _next_id(self) -> int:
        self.ids += 1
        return self.ids

    def _has(self, start: int, end: int) -> bool:
        t, names = self.t, self.names
        return self.everywhere or any(t[k].kind is Tok.IDENT and t[k].text in names for k in range(start, end))

    def _wrap(self, start: int, end: int, opener: str) -> None:
        """Brace tokens[start:end] with `opener` after the `{`."""
        self.before.setdefault(start, []).append("{ " + opener)
        self.after.setdefault(end - 1, []).append(" }")

    def not_constexpr(self, at: list[int]) -> None:
        """Take the `constexpr` (or `consteval`) tokens at the indices `at` out of the source."""
        self.removed += [(self.t[k].start, self.t[k].end, "") for k in at]

    def function_body(self, lbrace: int) -> None:
        self.after.setdefault(lbrace, []).append(f" {_NS}fn __mt_f({self._next_id()}u, {self.t[lbrace].line}u);")

    def _stmt(self, i: int, e: int) -> str:
        return f"{_NS}stmt __mt_s({i + 1}u, {e}u); "

    def _arm(self, start: int) -> str:
        return f"{_NS}arm __mt_a({self._next_id()}u, {start + 1}u, {self.t[start].line}u); "

    def block(self, i: int, end: int) -> None:
        while i < end:
            i = self.statement(i, end)

    def extent(self, i: int, end: int) -> int:
        """Index just past the statement starting at tokens[i]."""
        t = self.t
        if i >= end:
            return end
        word = t[i].text
        if word == "{":
            return self.close[i] + 1
        if word in ("if", "for", "while", "switch"):
            p = self._paren(i)
            e = self.extent(self.close[p] + 1, end)
            if word == "if" and e < end and t[e].text == "else":
                e = self.extent(e + 1, end)
            return e
        if word == "do":
            e = self.extent(i + 1, end)  # at `while`
            p = self._paren(e)
            return self.close[p] + 2
        if word in ("case", "default") or (t[i].kind is Tok.IDENT and i + 1 < end and t[i + 1].text == ":"):
            j = i
            while j < end and t[j].text != ":":
                j = self.close.get(j, j) + 1
            return self.extent(j + 1, end)
        if t[i].kind is Tok.DIRECTIVE:
            return i + 1
        j = i
        while j < end:
            if t[j].text == ";":
                return j + 1
            if t[j].text == "}" and j not in self.close:
                return j
            if j > i and (t[j].kind is Tok.DIRECTIVE or t[j].text in _STATEMENT_WORDS):
                return j  # `MLX_MTL_PRAGMA_UNROLL for (...)`: a macro before a statement of its own
            j = self.close.get(j, j) + 1
        return end

    def _paren(self, i: int) -> int:
        p = i + 1
        if self.t[p].text == "constexpr":
            p += 1
        if self.t[p].text != "(":
            raise self.errors.at(self.t[i], f"cannot read this `{self.t[i].text}` statement")
        return p

    def statement(self, i: int, end: int, sub: bool = False) -> int:
        """Walks tokens[i:] to the statement's end (returned) through its kind's hook (alu_counts overrides them)."""
        t = self.t
        e = self.extent(i, end)
        word = t[i].text
        if word == "{":
            self.block(i + 1, e - 1)
        elif word == "if":
            self._if(i, e, sub)
        elif word in ("for", "while", "do"):
            self._loop(i, e, sub)
        elif word == "switch":
            self._switch(i, e, sub)
        elif word in ("case", "default") or (t[i].kind is Tok.IDENT and i + 1 < end and t[i + 1].text == ":"):
            self._labelled(i, e, sub)
        else:
            self._simple(i, e, sub)
        return e

    def _simple(self, i: int, e: int, sub: bool) -> None:
        self._refuse_partial_operands(i, e)
        self._lambdas_in(i, e)

    _labelled = _simple   # outside the case groups `_switch` walks

    def _if_parts(self, i: int, e: int) -> tuple[int, int, int]:
        """The `(` of the if statement tokens[i:e], and where its then-arm starts and ends."""
        p = self._paren(i)
        return p, self.close[p] + 1, self.extent(self.close[p] + 1, e)

    def _loop_parts(self, i: int, e: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
        """The body of the loop tokens[i:e] and its header's parts (`_for_parts`; a while's or do's condition)."""
        if self.t[i].text == "do":
            p = self._paren(body_end := self.extent(i + 1, e))
            return (i + 1, body_end), [(p + 1, self.close[p])]
        p = self._paren(i)
        return (self.close[p] + 1, e), self._for_parts(p) if self.t[i].text == "for" else [(p + 1, self.close[p])]

    def _lambdas_in(self, i: int, e: int) -> None:
        """The bodies of the lambdas a simple statement defines: walked as function bodies."""
        j = i
        while j < e:
            if j in self.lambdas:
                if self._has(j + 1, self.close[j]):
                    self.function_body(j)
                self.block(j + 1, self.close[j])
                j = self.close[j] + 1
            else:
                j += 1

    def _if(self, i: int, e: int, sub: bool) -> None:
        p, then_start, then_end = self._if_parts(i, e)
        self._refuse_partial_operands(p + 1, self.close[p])
        arms = [(then_start, then_end)]
        if then_end < e:  # `else`
            arms.append((then_end + 1, e))
        guarded = [a for a in arms if self._has(*a)]
        if guarded:
            self._wrap(i, e, self._stmt(i, e))
            for start, stop in arms:
                if (start, stop) in guarded:
                    self._wrap(start, stop, self._arm(start))
        for start, stop in arms:
            self.statement(start, stop)

    def _loop(self, i: int, e: int, sub: bool) -> None:
        t = self.t
        word = t[i].text
        body, parts = self._loop_parts(i, e)
        for start, stop in parts:
            self._refuse_partial_operands(start, stop)
        if self._has(i, e) and not self._diverges(*body):
            # lanes that leave early wait after the loop; the statement resets the calls their caller counted in
            # it (lanes ran it different numbers of times), so that all meet the next collective at one position
            self._wrap(i, e, self._stmt(i, e))
        elif self._has(i, e):
            n = self._next_id()
            g = f"__mt_l{n}"
            self._wrap(i, e, f"{_NS}loop {g}({n}u, {i + 1}u, {e}u, {t[i].line}u); ")
            last = e
            if word == "do":
                self._wrap(body[0], body[1], f"{g}.next(); ")
                self._around(parts[0], f"{g}.at({last}u) && (", ")")
            elif len(parts) == 3:  # for (init; cond; inc)
                _, cond, inc = parts
                self._around(cond, f"{g}.next() && (", ")", empty=f"{g}.next()")
                self._around(inc, f"{g}.at({last}u), (", ")", empty=f"{g}.at({last}u)")
            elif word == "while":
                self._around(parts[0], f"{g}.next() && (", ")")
            else:  # a range-based for: count at the body's start
                self._wrap(body[0], body[1], f"{g}.next(); ")
        self.statement(*body)

    def _diverges(self, start: int, end: int) -> bool:
        """Whether lanes running the loop body tokens[start:end] together may part ways before its end and meet
        its collectives in different iterations: through an arm with a collective, a nested loop with one (whose
        lanes may leave at different iterations), or `continue`. Without any, the lanes that run an iteration
        reach its collectives together, and those that leave the loop early wait after it: no frame is needed."""
        t = self.t
        j = start
        while j < end:
            e = self.extent(j, end)
            word = t[j].text
            if word == "{":
                if self._diverges(j + 1, e - 1):
                    return True
            elif word == "for" and self._fixed_trips(j, e):
                if self._diverges(self.close[self._paren(j)] + 1, e):
                    return True
            elif word in ("if", "switch", "for", "while", "do"):
                if self._has(j, e) or any(t[k].text in ("continue", "goto") for k in range(j, e)):
                    return True
            elif any(t[k].text in ("continue", "goto") for k in range(j, e)):
                return True
            j = e
        return False

    def _fixed_trips(self, i: int, e: int) -> bool:
        """`for (T v = literal; ...; ...)` whose condition and increment name only `v`, whose body never assigns
        `v`, takes its address or leaves early: every lane runs it the same number of times."""
        t = self.t
        parts = self._for_parts(self._paren(i))
        if len(parts) != 3:
            return False
        (i0, i1), cond, inc = parts
        init = t[i0:i1]
        if len(init) < 3 or init[-2].text != "=" or init[-1].kind is not Tok.NUMBER or init[-3].kind is not Tok.IDENT:
            return False
        var = init[-3].text
        if any(t[k].kind is Tok.IDENT and t[k].text != var for part in (cond, inc) for k in range(*part)):
            return False
        for k in range(parts[2][1] + 1, e):
            if t[k].text in ("break", "return", "continue", "goto"):
                return False
            if t[k].text == var and (k + 1 < e and t[k + 1].text in _ASSIGNMENTS or t[k - 1].text in ("++", "--", "&")):
                return False
        return True

    def _around(self, span: tuple[int, int], left: str, right: str, empty: str = "") -> None:
        start, stop = span
        if start == stop:  # an empty part of a for header: insert before the `;` or `)` that ends it
            self.before.setdefault(stop, []).append(empty)
            return
        self.before.setdefault(start, []).append(left)
        self.after.setdefault(stop - 1, []).append(right)

    def _for_parts(self, p: int) -> list[tuple[int, int]]:
        """init, condition and increment of `for (...)` (one part for a range-based for)."""
        t = self.t
        semis = []
        j = p + 1
        while j < self.close[p]:
            if t[j].text == ";":
                semis.append(j)
            j = self.close.get(j, j) + 1
        if len(semis) != 2:
            return [(p + 1, self.close[p])]
        return [(p + 1, semis[0]), (semis[0] + 1, semis[1]), (semis[1] + 1, self.close[p])]

    def _switch(self, i: int, e: int, sub: bool) -> None:
        t = self.t
        p = self._paren(i)
        self._refuse_partial_operands(p + 1, self.close[p])
        lbrace = self.close[p] + 1
        if t[lbrace].text != "{":
            self.statement(lbrace, e)
            return
        rbrace = self.close[lbrace]
        groups = []  # (first statement, end) of each case group
        j = lbrace + 1
        while j < rbrace:
            if t[j].text in ("case", "default"):
                while j < rbrace and t[j].text != ":":
                    j = self.close.get(j, j) + 1
                j += 1
                if j < rbrace and t[j].text not in ("case", "default"):
                    groups.append([j, j])
                continue
            j = self.extent(j, rbrace)
            if groups:
                groups[-1][1] = j
        guarded = self._has(lbrace + 1, rbrace)
        if guarded:
            self._wrap(i, e, self._stmt(i, e))
        for start, stop in groups:
            if guarded and start < stop:
                self._wrap(start, stop, self._arm(start))
            self.block(start, stop)

    def _refuse_partial_operands(self, start: int, end: int) -> None:
        """A collective in an operand of ?:, && or || that only some lanes may evaluate."""
        t = self.t
        for k in range(start, end):
            op = t[k].text
            if t[k].kind is not Tok.PUNCT or op not in ("?", "&&", "||"):
                continue
            if op == "&&" and k + 2 < end and t[k + 1].kind is Tok.IDENT and t[k + 2].text in ("=", ",", ")", ";"):
                continue  # `T&& name = ...`: a reference, not a logical and
            if is_uniform(t, start, k, self.uniform):
                continue  # all that comes before it is the same for the simdgroup: every lane goes on, or none
            j = k + 1
            stops = (")", "]", "}", ";", ",") if op == "?" else (")", "]", "}", ";", ",", "?", ":")
            while j < end and t[j].text not in stops:
                stop = self.close.get(j, j) + 1
                hit = next((x for x in range(j, stop) if t[x].kind is Tok.IDENT and t[x].text in self.names), None)
                if hit is not None:
                    raise self.errors.at(
                        t[hit], f"`{t[hit].text}` runs a simd collective in an operand of "
                        f"`{'?:' if op == '?' else op}` that only some lanes may evaluate: the CPU device cannot "
                        "tell which lanes reach it; write it as an if/else", MSLUnsupportedError)
                j = stop
