"""Reduces a failing fuzzed kernel to a small repro, by trying smaller programs while `still_fails(k)` holds:
one section only, fewer stores, an assignment replaced by one of its operands, unused code and parameters
removed, a runtime `if` replaced by one branch, a loop's trip count cut, input data set to simple values."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from tests.fuzz.prog import Assign, Bin, Call, Effect, For, If, Kernel, Name, Section, While, subexprs, used


def dce(body, keep: set[str]) -> tuple:
    """`body` without assignments nobody reads (loop-carried values read after or inside their loop stay)."""
    changed = True
    body = tuple(body)
    while changed:
        changed = False
        live = used(body) | keep
        out = []
        for st in body:
            match st:
                case Assign(n, _) if n not in live:
                    changed = True
                    continue
                case For(body=inner) | While(body=inner):
                    st = attrs.evolve(st, body=dce(inner, live))
                case If(c, a, b):
                    st = If(c, dce(a, live), dce(b, live))
            out.append(st)
        body = tuple(out)
    return body


def prune_params(s: Section) -> Section:
    live = used(s.body)
    return attrs.evolve(s, params=[p for p in s.params if p.name in live])


def _paths(body, prefix=()):
    """Every statement's path: indices through loop and branch bodies ((i,), (i, 'body', j), ...)."""
    for i, st in enumerate(body):
        yield prefix + (i,)
        match st:
            case For(body=inner) | While(body=inner):
                yield from _paths(inner, prefix + (i, "body"))
            case If(_, a, b):
                yield from _paths(a, prefix + (i, "body"))
                yield from _paths(b, prefix + (i, "orelse"))


def _edit(body, path, fn):
    """`body` with the statement at `path` replaced by the statements `fn(st)` returns."""
    body = list(body)
    i = path[0]
    if len(path) == 1:
        body[i:i + 1] = fn(body[i])
        return tuple(body)
    st = body[i]
    field = path[1]
    body[i] = attrs.evolve(st, **{field: _edit(getattr(st, field), path[2:], fn)})
    return tuple(body)


def _get(body, path):
    st = body[path[0]]
    return st if len(path) == 1 else _get(getattr(st, path[1]), path[2:])


def candidates(s: Section):
    """Smaller versions of section `s`, most promising first."""
    body = s.body
    paths = list(_paths(body))
    for path in reversed(paths):                   # drop a store, a loop, a branch, an update inside either
        st = _get(body, path)
        if isinstance(st, (Effect, For, If, While)) or (len(path) > 1 and isinstance(st, Assign)):
            yield attrs.evolve(s, body=_edit(body, path, lambda st: []))
    for path in paths:                                              # an if becomes one branch, a loop its body
        st = _get(body, path)
        if isinstance(st, If):
            yield attrs.evolve(s, body=_edit(body, path, lambda st: list(st.body)))
            yield attrs.evolve(s, body=_edit(body, path, lambda st: list(st.orelse)))
    for path in reversed(paths):                                    # x = f(a, b) becomes x = a
        st = _get(body, path)
        if isinstance(st, Assign):
            for sub in subexprs(st.value):
                if isinstance(sub, Name) or (isinstance(sub, Bin) and sub.op in "+-*"):
                    yield attrs.evolve(s, body=_edit(body, path, lambda st, sub=sub: [Assign(st.name, sub)]))
            if isinstance(st.value, Call) and st.value.kwargs:         # drop keywords (mask=, other=, axis=)
                for j in range(len(st.value.kwargs)):
                    kw = st.value.kwargs[:j] + st.value.kwargs[j + 1:]
                    yield attrs.evolve(s, body=_edit(body, path, lambda st, kw=kw: [
                        Assign(st.name, attrs.evolve(st.value, kwargs=kw))]))


def simpler_data(s: Section):
    """The section with one input array or scalar made simpler (fewer distinct values)."""
    for j, p in enumerate(s.params):
        if p.role in ("in", "out") and p.value.size > 1:
            v = p.value
            for fill in ("first", "zero_half", "ones_half"):
                w = v.copy()
                if fill == "first":
                    w[:] = v.reshape(-1)[0]
                elif fill == "zero_half":
                    w[: w.size // 2] = 0
                else:
                    w[w.size // 2:] = 1 if v.dtype != np.bool_ else True
                if not np.array_equal(w.view(np.uint8), v.view(np.uint8)):
                    yield attrs.evolve(s, params=s.params[:j] + (attrs.evolve(p, value=w),) + s.params[j + 1:])


def shrink(k: Kernel, still_fails: Callable[[Kernel], bool], tag: str | None = None, budget: int = 300) -> Kernel:
    """A smaller kernel for which `still_fails` holds (`k` itself when nothing smaller does)."""
    tries = 0

    def attempt(cand: Kernel) -> bool:
        nonlocal tries
        tries += 1
        try:
            return still_fails(cand)
        except Exception:  # noqa: BLE001 - a candidate the model or the generator cannot take
            return False

    secs = [s for s in k.sections if s.tag == tag] if tag else []
    for s in secs + list(k.sections):
        cand = attrs.evolve(k, sections=[prune_params(s)])
        if len(k.sections) > 1 and attempt(cand):
            k = cand
            break
    progress = True
    while progress and tries < budget:
        progress = False
        for cand in _smaller(k):
            if attempt(cand):
                k, progress = cand, True
                break
            if tries >= budget:
                break
    return k


def _smaller(k: Kernel):
    """Kernels one step smaller than `k`: a section reduced, one program only, one launch option fewer."""
    for si, s in enumerate(k.sections):
        for gen in (candidates, simpler_data):
            for cs in gen(s):
                cs = prune_params(attrs.evolve(cs, body=dce(cs.body, set())))
                if cs == s and gen is candidates:
                    continue
                yield attrs.evolve(k, sections=k.sections[:si] + (cs,) + k.sections[si + 1:])
    if k.programs > 1:
        yield attrs.evolve(k, grid=(1,))
    for j in range(len(k.options)):
        yield attrs.evolve(k, options=k.options[:j] + k.options[j + 1:])
