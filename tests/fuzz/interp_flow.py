"""The control flow of the numpy model (`tests.fuzz.interp`): runtime `if` (both branches traced, the variables
they assign of the type that holds both, 7.2), `tile_range`/`range`/`while` loops with loop-carried values (their
types found by running the body in a sandbox; an inactive update keeps the old element, 5.3 rule 4), loops unrolled
while tracing (straight-line code), and `break`, `continue` and `return` (the statements after one taken do not
run; what ran before it is kept)."""

from __future__ import annotations

import numpy as np

from tests.fuzz import model as M
from tests.fuzz.dtypes import common, is_float
from tests.fuzz.interp_memory import ModelError, Undecidable
from tests.fuzz.interp_more import Signal
from tests.fuzz.prog import Assign, For, If, Num, Unpack, While


def assigned(body) -> list[str]:
    out: list[str] = []
    for st in body:
        match st:
            case Assign(n, _):
                out.append(n)
            case Unpack(ns, _):
                out += list(ns)
            case For(body=inner) | While(body=inner):
                out += assigned(inner)
            case If(_, a, b):
                out += assigned(a) + assigned(b)
    return list(dict.fromkeys(out))


class Flow:
    """Loops and branches of an `Interp` (which provides `ev`, `run`, `sub`, `as_traced`, `env`, `mem`, `relax`)."""

    def scalar_int(self, e) -> int:
        x = self.ev(e)
        if isinstance(x, Num):
            return int(x.value)
        if x.err.max(initial=0) > 0:
            raise Undecidable("a loop bound the model cannot decide")
        return int(x.i())

    def carried_start(self, x) -> M.MVal:
        if isinstance(x, Num):                  # a Python number carried by a loop is f32 or i32 (7.3)
            return M.literal(x.value, "f32" if isinstance(x.value, float) else "i32")
        return x

    def sandbox(self, body, env: dict) -> dict:
        saved = self.mem
        self.mem = self.mem.copy()
        try:
            return self.sub(True).run(body, dict(env))
        finally:
            self.mem = saved

    def carried(self, body, extra: dict) -> tuple[list[str], dict]:
        """The loop-carried values of a loop over `body` and their starts, of the types and shapes they widen to:
        their own, and everything the body assigns to them (7.3), found by running the body in a sandbox."""
        outer = self.env
        names = [n for n in assigned(body) if n in outer]
        cur = {n: self.carried_start(outer[n]) for n in names}
        for _ in range(8):
            got = self.sandbox(body, dict(outer) | cur | extra)
            wider = {}
            for n in names:
                g = self.as_traced(got[n])
                t = common(cur[n].t, g.t) if cur[n].t != g.t else g.t
                wider[n] = M.bcast(M.cast(cur[n], t), np.broadcast_shapes(cur[n].shape, g.shape))
            if all(wider[n].t == cur[n].t and wider[n].shape == cur[n].shape for n in names):
                break
            cur = wider
        return names, cur

    def iteration(self, body, env: dict, names: list[str], cur: dict) -> tuple[dict, str | None]:
        """One run of a loop's body: an update whose element is inactive keeps the old value (5.3 rule 4). With
        the `break` or `continue` that ended it early, if one did (a `return` propagates)."""
        it = self.sub()
        signal = None
        try:
            got = it.run(body, env)
        except Signal as e:
            if e.kind == "return":
                raise
            got, signal = it.env, e.kind
        out = dict(cur)
        for n in names:
            new = M.bcast(M.cast(self.as_traced(got[n]), cur[n].t), cur[n].shape)
            old = cur[n]
            err = np.where(new.act, new.err, old.err)
            if "loop_zero_sign" in self.relax and is_float(old.t):
                err = np.where(~new.act & (old.v == 0), np.maximum(err, M.LOOSE), err)
            out[n] = M.MVal(old.t, np.where(new.act, new.v, old.v), old.act | new.act, err)
        return out, signal

    def loop(self, st: For) -> None:
        start, stop, step = self.scalar_int(st.start), self.scalar_int(st.stop), self.scalar_int(st.step)
        if st.static or (st.python_range and all(isinstance(e, Num) for e in (st.start, st.stop, st.step))):
            return self.unrolled(st, range(start, stop, step))
        outer = self.env
        names, cur = self.carried(st.body, {st.var: M.mval("i32", start)})
        for i in range(start, stop, step) if step > 0 else ():
            cur, signal = self.iteration(st.body, dict(outer) | cur | {st.var: M.mval("i32", i)}, names, cur)
            if signal == "break":
                break
        self.env = dict(outer) | cur

    def unrolled(self, st: For, items: range) -> None:
        """A loop unrolled while tracing (7.1): its body once per item, as straight-line code (no carried values:
        an inactive update makes the element inactive, rule 2); an exit taken ends the iteration or the loop."""
        for i in items:
            self.env[st.var] = M.mval("i32", i)
            try:
                self.run(st.body, self.env)
            except Signal as e:
                if e.kind == "return":
                    raise
                if e.kind == "break":
                    break

    def while_loop(self, st: While) -> None:
        outer = self.env
        names, cur = self.carried(st.body, {})
        for _ in range(1000):
            it = self.sub()
            it.env = dict(outer) | cur
            c = self.as_traced(it.ev(st.cond))
            if c.err.max(initial=0) > 0:
                raise Undecidable("a while condition the model cannot decide")
            if not bool(c.v):
                break
            cur, signal = self.iteration(st.body, dict(outer) | cur, names, cur)
            if signal == "break":
                break
        else:
            raise ModelError("a while loop that does not end")
        self.env = dict(outer) | cur

    def branch(self, st: If) -> None:
        c = self.as_traced(self.ev(st.cond))
        if c.err.max(initial=0) > 0:
            raise Undecidable("a branch condition the model cannot decide")
        outer = self.env
        a = self.sandbox(st.body, outer)
        b = self.sandbox(st.orelse, outer)
        it = self.sub()
        signal = None
        try:
            taken = it.run(st.body if bool(c.v) else st.orelse, dict(outer))
        except Signal as e:                     # what the branch assigned before it is kept
            taken, signal = it.env, e
        out = dict(outer)
        for n in assigned(st.body) + assigned(st.orelse):
            if signal is not None and n not in taken:
                continue
            if n in a and n in b:
                ta, tb = self.as_traced(a[n]), self.as_traced(b[n])
                t = common(ta.t, tb.t)
                out[n] = M.bcast(M.cast(self.as_traced(taken[n]), t), np.broadcast_shapes(ta.shape, tb.shape))
            else:
                out.pop(n, None)
        self.env = out
        if signal is not None:
            raise signal
