"""Arithmetic counts of the instrumented build: each executed statement tells the runtime its ALU operations.

A profiled dispatch runs the instrumented (sanitizer) build of a kernel. Its text is the translation's with one
call `::mt_prof_count(counter, n, 1, __LINE__);` per kind of operation before each statement of a function body
(kernels, helper functions and templates, member functions) that has some: the runtime adds `n` once per
simdgroup that runs it (the lanes of one call told apart by the calling instruction, so a branch some lanes skip
counts for the simdgroups whose lanes run it, and a helper inlined at two calls counts at each). The counters
(mt_runtime.h, appended to enum mt_prof_counter) are float ALU, integer ALU and special-function operations, each a
lane-wide operation on one component: a float4 addition is 4, as Apple's scalar ALUs issue it; and the issue cycles
of the integer operations the model times: those outside subscripts (address arithmetic), loop tests, steps and
`for` inits, and statements that read only loop counters and compile-time names (`constexpr` names and template value
parameters of the source, locals set from them only), which the compiler folds or strength-reduces; an add,
compare, select or bitwise operation issues 1 cycle, a multiply 4, a division or remainder 8 (`INT_ISSUE`).

What a statement counts is read from its tokens (docs/performance.md has the table):
- `+ - * / %` and comparisons, compound assignments, `++`/`--`: one operation of the operands' type and width;
  `&& || ! ~ & | ^ << >>`: one integer operation; `?:` one select besides both arms (both are counted); unary minus
  and conversions count nothing (Apple's ALUs negate and convert operands on the way);
- a float division is a reciprocal (special function) and a multiply; an integer one an integer operation;
- math functions by a table (`_FUNCTIONS`): fma 1, mix 2, clamp 2, dot n, exp 1 special + 1, pow 2 + 1, ...;
  a call of any other function counts its arguments only (its own statements count where they run);
- an operand's type comes from the declarations of the function (parameters, locals, `auto` from their
  initializer), vector swizzles and indexing; a template type parameter is the kind every explicit instantiation
  (or, without one, its default) gives it (`alu_types.template_types`); an operator whose operands are both of
  unknown type (a parameter bound to both kinds, a struct member) takes the statement's type: the declared type of
  what it initializes or assigns, else float when a float operand or literal appears in it, else integer.
- an `if`/`switch` condition counts before the statement; a loop's condition and step count at the start of each
  run of its body (the last, failing test is not counted), a `for` init once before the loop.
A braceless arm or loop body that gets a count is braced (the same scope in C++). A statement that defines a lambda
(and the lambda's body) and `constexpr` functions are not counted; a function whose statements cannot be read is
left as it is (no counts).
"""

from __future__ import annotations

import re

from metile.metal.cpu.alu_types import (
    INT_ISSUE,
    aliases,
    compile_time_names,
    instantiations,
    statement_default,
    template_types,
    type_of_name,
)
from metile.metal.cpu.alu_types import UNKNOWN as _UNKNOWN
from metile.metal.cpu.alu_types import Type as _Type
from metile.metal.cpu.alu_types import TypeName as _TypeName
from metile.metal.cpu.alu_types import named as _named
from metile.metal.cpu.arms import _function_bodies, _Guards, _lambda_bodies, _parameter_list
from metile.metal.cpu.declarations import brackets, is_constexpr
from metile.metal.msl_lex import Tok, Token
from metile.metal.msl_signature import SourceErrors

# counter numbers (enum mt_prof_counter in mt_runtime.h; RAW_COUNTERS in metile/profile/counts.py)
ALU_FLOAT, ALU_INT, ALU_SPECIAL, ALU_INT_ISSUE = "alu_float", "alu_int", "alu_special", "alu_int_issue"

_SKIP_WORDS = frozenset({"struct", "class", "union", "enum", "typedef", "using", "static_assert", "template",
                         "namespace", "break", "continue", "goto"})
_DECL_WORDS = frozenset({"const", "constexpr", "static", "thread", "device", "threadgroup", "constant", "volatile",
                         "register"})
_ASSIGN = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="})
_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
         "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_INT_ONLY = frozenset({"||", "&&", "|", "^", "&", "<<", ">>"})
_SWIZZLE = re.compile(r"[xyzw]{1,4}|[rgba]{1,4}")
# per lane component: (ALU operations, special-function operations, result: "arg" elementwise, "scalar", "same")
_FUNCTIONS = {
    "fma": (1, 0, "arg"), "mad": (1, 0, "arg"), "mix": (2, 0, "arg"), "clamp": (2, 0, "arg"),
    "min": (1, 0, "arg"), "max": (1, 0, "arg"), "fmin": (1, 0, "arg"), "fmax": (1, 0, "arg"),
    "abs": (1, 0, "arg"), "fabs": (1, 0, "arg"), "saturate": (1, 0, "arg"), "sign": (1, 0, "arg"),
    "step": (1, 0, "arg"), "floor": (1, 0, "arg"), "ceil": (1, 0, "arg"), "trunc": (1, 0, "arg"),
    "round": (1, 0, "arg"), "rint": (1, 0, "arg"), "fract": (2, 0, "arg"), "select": (1, 0, "arg"),
    "dot": (1, 0, "scalar"),
    "exp2": (0, 1, "arg"), "log2": (0, 1, "arg"), "sqrt": (0, 1, "arg"), "rsqrt": (0, 1, "arg"),
    "sin": (0, 1, "arg"), "cos": (0, 1, "arg"), "exp": (1, 1, "arg"), "log": (1, 1, "arg"),
    "exp10": (1, 1, "arg"), "log10": (1, 1, "arg"), "pow": (1, 2, "arg"), "powr": (1, 2, "arg"),
    "tan": (1, 3, "arg"), "tanh": (3, 2, "arg"), "divide": (1, 1, "arg"),
}
_ELEMENTWISE_INT = frozenset({"min", "max", "clamp", "abs", "select", "popcount", "clz", "ctz", "mad24", "mul24",
                              "extract_bits", "insert_bits", "reverse_bits", "rotate", "mulhi", "absdiff"})


class _Unreadable(Exception):
    """An expression the reader does not follow (the statement then counts its operators by the default type)."""


class _Expr:
    """Reads the expression tokens[a:b], adding its operations to `tally` ([float, int, special])."""

    def __init__(self, tokens: list[Token], a: int, b: int, env: dict[str, _Type], default: str, tally: list,
                 folded: bool = False):
        self.t, self.p, self.b, self.env, self.default, self.tally = tokens, a, b, env, default, tally
        self.folded = folded   # address or loop-control arithmetic: counted, not issued (tally[3])

    def peek(self, k: int = 0) -> str:
        return self.t[self.p + k].text if self.p + k < self.b else ""

    def take(self, want: str | None = None) -> Token:
        if self.p >= self.b or (want is not None and self.t[self.p].text != want):
            raise _Unreadable
        self.p += 1
        return self.t[self.p - 1]

    def count(self, kind: str | None, n: int, op: str = "") -> None:
        if (kind or self.default) == "f":
            self.tally[0] += n
        else:
            self.int_op(n, op)

    def int_op(self, n: int, op: str = "") -> None:
        """`n` integer operations `op`; outside subscripts and loop control also their issue cycles (tally[3])."""
        self.tally[1] += n
        if not self.folded:
            self.tally[3] += n * INT_ISSUE.get(op, 1)

    def join(self, x: _Type, y: _Type) -> _Type:
        kind = "f" if "f" in (x.kind, y.kind) else x.kind or y.kind
        return _Type(kind, max(x.width, y.width))

    def comma(self) -> _Type:
        ty = self.assign()
        while self.peek() == ",":
            self.take()
            ty = self.assign()
        return ty

    def assign(self) -> _Type:
        lhs = self.ternary()
        op = self.peek()
        if op in _ASSIGN:
            self.take()
            rhs = self.assign()
            if op != "=":
                self.binary_op(op[:-1], lhs, rhs)
        return lhs

    def ternary(self) -> _Type:
        c = self.binary(1)
        if self.peek() != "?":
            return c
        self.take()
        x = self.assign()
        self.take(":")
        y = self.assign()
        ty = self.join(x, y)
        self.count(ty.kind, ty.width)
        return ty

    def binary(self, least: int) -> _Type:
        lhs = self.unary()
        while (prec := _PREC.get(self.peek(), 0)) >= least:
            op = self.take().text
            rhs = self.binary(prec + 1)
            lhs = self.binary_op(op, lhs, rhs)
        return lhs

    def binary_op(self, op: str, x: _Type, y: _Type) -> _Type:
        if x.pointer or y.pointer:
            self.tally[1] += 1
            return x if x.pointer else y
        ty = self.join(x, y)
        kind = ty.kind or self.default
        if op in _INT_ONLY:
            self.int_op(ty.width, op)
        elif op == "/" and kind == "f":
            self.tally[0] += ty.width
            self.tally[2] += ty.width
        else:
            self.count(kind, ty.width, op)
        if _PREC[op] in (6, 7) or op in ("&&", "||"):
            return _Type("i", ty.width)
        return ty

    def unary(self) -> _Type:
        op = self.peek()
        if op in ("-", "+", "*", "&"):
            self.take()
            ty = self.unary()
            return _Type(ty.kind, ty.width) if op == "*" else ty
        if op in ("!", "~"):
            self.take()
            ty = self.unary()
            self.int_op(ty.width)
            return ty
        if op in ("++", "--"):
            self.take()
            ty = self.unary()
            self.count(ty.kind, ty.width)
            return ty
        if op == "(" and (cast := self.cast()) is not None:
            self.unary()
            return cast
        return self.postfix(self.primary())

    def cast(self) -> _Type | None:
        """`(float4)x`, `(device const float4*)p`: the type of a C cast at the `(` (None if it is not one)."""
        k = self.p + 1
        while k < self.b and self.t[k].text in _DECL_WORDS:
            k += 1
        ty = _named(self.t[k].text, self.env) if k < self.b else None
        if ty is None:
            return None
        k += 1
        pointer = False
        while k < self.b and self.t[k].text in ("*", "&", "const", "volatile"):
            pointer = pointer or self.t[k].text == "*"
            k += 1
        if k < self.b and self.t[k].text == ")":
            self.p = k + 1
            return _Type(ty.kind, ty.width, pointer)
        return None

    def postfix(self, ty: _Type) -> _Type:
        while True:
            op = self.peek()
            if op == "[":
                self.take()
                saved, folded = self.default, self.folded
                self.default, self.folded = "i", True   # an index is integer arithmetic of the address
                self.comma()
                self.default, self.folded = saved, folded
                self.take("]")
                ty = _Type(ty.kind, ty.width if ty.pointer else 1)   # an element, or a vector's component
            elif op in (".", "->"):
                self.take()
                name = self.take().text
                if op == "." and ty.kind is not None and ty.width > 1 and _SWIZZLE.fullmatch(name):
                    ty = _Type(ty.kind, len(name))
                else:
                    ty = _UNKNOWN
                if self.peek() == "(":
                    self.args()
            elif op in ("++", "--"):
                self.take()
                self.count(ty.kind, ty.width)
            else:
                return ty

    def args(self) -> list[_Type]:
        self.take("(")
        out = []
        while self.peek() != ")":
            out.append(self.assign())
            if self.peek() == ",":
                self.take()
            elif self.peek() != ")":
                raise _Unreadable
        self.take(")")
        return out

    def skip_angle(self) -> _Type:
        """Past `<...>` after a name: the first type argument's type (unknown if it names none)."""
        depth, first = 0, None
        while True:
            x = self.take().text
            if first is None and depth == 1:
                first = _named(x, self.env)
            depth += {"<": 1, ">": -1, ">>": -2}.get(x, 0)
            if depth <= 0:
                return first or _UNKNOWN

    def primary(self) -> _Type:
        tok = self.take()
        x = tok.text
        if tok.kind is Tok.NUMBER:
            low = x.lower()
            floating = not low.startswith("0x") and any(c in low for c in ".ef") or low.endswith("h")
            return _Type("f" if floating else "i")
        if x == "(":
            ty = self.comma()
            self.take(")")
            return ty
        if x == "{":
            while self.peek() != "}":
                self.assign()
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return _UNKNOWN
        if tok.kind is not Tok.IDENT:
            raise _Unreadable
        if x in ("true", "false"):
            return _Type("i")
        if x in ("sizeof", "alignof"):
            self.p = self._past(self.p)
            return _Type("i")
        while self.peek() == "::":   # metal::precise::exp: the last name
            self.take()
            x = self.take().text
        named = _named(x, self.env)
        if self.peek() == "<":
            targ = self.skip_angle()
            named = named or (targ if x in ("as_type", "static_cast", "vec", "reinterpret_cast") else None)
            if x == "vec" and self.peek() == "(":
                named = _UNKNOWN
        if self.peek() in ("(", "{"):
            if self.peek() == "{":
                self.primary()
                return named or _UNKNOWN
            args = self.args()
            if named is not None:
                return named   # a constructor or conversion: nothing counted
            return self.call(x, args)
        if named is not None:
            return named
        return self.env.get(x, _UNKNOWN)

    def _past(self, k: int) -> int:
        if k < self.b and self.t[k].text == "(":
            depth = 0
            while k < self.b:
                depth += {"(": 1, ")": -1}.get(self.t[k].text, 0)
                k += 1
                if depth == 0:
                    return k
        return k + 1

    def call(self, name: str, args: list[_Type]) -> _Type:
        ty = _UNKNOWN
        for a in args:
            ty = self.join(ty, a)
        entry = _FUNCTIONS.get(name)
        if ty.kind == "i" or (ty.kind is None and self.default == "i" and name in _ELEMENTWISE_INT):
            if name in _ELEMENTWISE_INT:
                self.int_op((2 if name == "clamp" else 1) * ty.width)
                return ty
            if entry is None:
                return _UNKNOWN
        if entry is None:
            return _UNKNOWN
        alu, special, result = entry
        self.tally[0] += alu * ty.width
        self.tally[2] += special * ty.width
        return _Type("f", 1) if result == "scalar" else _Type("f", ty.width)


def count_expression(tokens: list[Token], a: int, b: int, env: dict[str, _Type], default: str,
                     folded: bool = False) -> list[int]:
    """[float, int, special, integer issue cycles] operations of the expression tokens[a:b] (operators by `default`
    when unreadable); `folded`: loop control, whose integer operations issue nothing."""
    tally = [0, 0, 0, 0]
    reader = _Expr(tokens, a, b, env, default, tally, folded)
    try:
        reader.comma()
        if reader.p != b:
            raise _Unreadable
    except (_Unreadable, IndexError, RecursionError):
        tally = [0, 0, 0, 0]
        depth = 0
        for t in tokens[a:b]:
            depth += {"[": 1, "]": -1}.get(t.text, 0)
            if t.text in _PREC or t.text in ("++", "--") or t.text in _ASSIGN and t.text != "=":
                integer = depth or t.text in _INT_ONLY or default == "i"
                tally[1 if integer else 0] += 1
                if integer and not depth and not folded:
                    tally[3] += INT_ISSUE.get(t.text[:-1] if t.text in _ASSIGN else t.text, 1)
    return tally


class _Counts(_Guards):
    """Walks the statements of function bodies (as the arm guards do) and collects the count calls."""

    def __init__(self, tokens: list[Token], close: dict[int, int], errors: SourceErrors, directive_starts: list[int],
                 counters: dict[str, int], lambdas: frozenset[int]):
        super().__init__(tokens, close, frozenset(), errors, lambdas, directive_starts)
        self.counters = counters
        self.env: dict[str, _Type] = {}
        self.template_types: dict[str, _TypeName] = {}
        self.constants: frozenset[str] = frozenset()   # compile-time names of the source (compile_time_names)
        self.fixed: set[str] = set()                   # the function's loop counters and locals of constants
        self.returns: _Type | None = None

    def calls(self, tally: list[int]) -> str:
        names = (ALU_FLOAT, ALU_INT, ALU_SPECIAL, ALU_INT_ISSUE)
        return "".join(f"::mt_prof_count({self.counters[n]}u, {k}u, 1, __LINE__); "
                       for n, k in zip(names, tally) if k)

    def put(self, i: int, e: int, tally: list[int], sub: bool) -> None:
        """Counts before the statement tokens[i:e] (braced with it when it is an arm or a loop body)."""
        text = self.calls(tally)
        if not text:
            return
        if sub:
            self._wrap(i, e, text)
        else:
            self.before.setdefault(i, []).append(text)

    def at_body(self, body: tuple[int, int], tally: list[int]) -> None:
        text = self.calls(tally)
        if not text:
            return
        if self.t[body[0]].text == "{":
            self.after.setdefault(body[0], []).append(" " + text)
        else:
            self._wrap(body[0], body[1], text)

    def tally(self, a: int, b: int, declared: _Type | None = None, folded: bool = False) -> list[int]:
        default = statement_default(self.t, a, b, self.env, declared)
        folded = folded or self.compile_time(a, b) or (declared is not None and declared.pointer)
        return count_expression(self.t, a, b, self.env, default, folded) if a < b else [0, 0, 0, 0]

    def compile_time(self, a: int, b: int) -> bool:
        """Whether every name tokens[a:b] reads is a compile-time value or a loop counter (`compile_time_names`,
        `self.fixed`): its integer arithmetic is folded in an unrolled loop, or strength-reduced, not issued."""
        t = self.t
        for k in range(a, b):
            x = t[k]
            if x.kind is not Tok.IDENT or x.text in self.fixed or x.text in self.constants:
                continue
            nxt = t[k + 1].text if k + 1 < b else ""
            if (x.text in ("true", "false", "sizeof", "alignof") or _named(x.text, self.env) is not None
                    or nxt in ("(", "::") or (nxt == "<" and x.text not in self.env)
                    or (k > a and t[k - 1].text in (".", "->", "::"))):
                continue
            return False
        return True

    def function(self, lbrace: int, params: tuple[int, int] | None) -> None:
        self.fixed = set()
        self.env = dict(self.template_types)
        if params is not None:
            for a, b in _split(self.t, params[0] + 1, params[1], self.close):
                self.declare(a, b)
        self.block(lbrace + 1, self.close[lbrace])

    def declare(self, a: int, b: int) -> list[tuple[int, int, _Type]]:
        """Registers the names a declaration tokens[a:b] declares; returns (start, end, type) of its initializers
        (an empty list when it is not a declaration of a known type)."""
        t = self.t
        k = a
        while k < b and t[k].text in _DECL_WORDS:
            k += 1
        if k >= b:
            return []
        auto = t[k].text == "auto"
        base = _named(t[k].text, self.env)
        if base is None and not auto:
            return []
        out = []
        for s, e in _split(self.t, k + 1, b, self.close):
            j, pointer = s, False
            while j < e and t[j].text in ("*", "&", "&&", "const", "thread", "device", "threadgroup", "constant"):
                pointer = pointer or t[j].text == "*"
                j += 1
            if j >= e or t[j].kind is not Tok.IDENT:
                return out
            name = t[j].text
            array = j + 1 < e and t[j + 1].text == "["
            init = next((m for m in range(j + 1, e) if t[m].text in ("=", "(", "{")), None)
            ty = base
            if init is not None:
                start = init + 1 if t[init].text == "=" else init
                if auto:
                    probe = [0, 0, 0, 0]
                    try:
                        ty = _Expr(t, start, e, self.env, "i", probe).comma()
                    except (_Unreadable, IndexError, RecursionError):
                        ty = _UNKNOWN
                out.append((start, e, _Type((ty or _UNKNOWN).kind, 1, True) if pointer else ty or _UNKNOWN))
            if init is not None and not pointer and not array and self.compile_time(init + 1, e):
                self.fixed.add(name)
            else:
                self.fixed.discard(name)
            ty = ty or _UNKNOWN
            self.env[name] = _Type(ty.kind, ty.width, pointer or array or ty.pointer)
        return out

    # the statements, walked as the arm guards walk them (arms._Guards.statement), each counting before itself
    def _if(self, i: int, e: int, sub: bool) -> None:
        p, then_start, then_end = self._if_parts(i, e)
        if self.t[i + 1].text != "constexpr":
            self.put(i, e, self.tally(p + 1, self.close[p]), sub)
        self.statement(then_start, then_end, sub=True)
        if then_end < e:
            self.statement(then_end + 1, e, sub=True)

    def _loop(self, i: int, e: int, sub: bool) -> None:
        t = self.t
        body, parts = self._loop_parts(i, e)
        if t[i].text == "do":
            self.at_body(body, self.tally(*parts[0], folded=True))
        elif len(parts) == 3:
            (a, b), cond, inc = parts
            inits = self.declare(a, b)
            self.fixed.update(t[k].text for k in range(a, b - 1) if t[k + 1].text == "=" and t[k].kind is Tok.IDENT)
            tally = [0, 0, 0, 0]
            for s, x, ty in inits or [(a, b, None)]:
                tally = [u + v for u, v in zip(tally, self.tally(s, x, ty, folded=True))]
            self.put(i, e, tally, sub)
            self.at_body(body, [u + v for u, v in zip(self.tally(*cond, folded=True), self.tally(*inc, folded=True))])
        elif t[i].text == "while":
            self.at_body(body, self.tally(*parts[0], folded=True))
        self.statement(*body, sub=True)

    def _switch(self, i: int, e: int, sub: bool) -> None:
        p = self._paren(i)
        self.put(i, e, self.tally(p + 1, self.close[p]), sub)
        self.statement(self.close[p] + 1, e, sub=True)

    def _labelled(self, i: int, e: int, sub: bool) -> None:
        j = i
        while j < e and self.t[j].text != ":":
            j = self.close.get(j, j) + 1
        if j + 1 < e:
            self.statement(j + 1, e, sub)

    def _simple(self, i: int, e: int, sub: bool) -> None:
        t = self.t
        word = t[i].text
        if word in _SKIP_WORDS or t[i].kind is Tok.DIRECTIVE:
            return
        stop = e - 1 if t[e - 1].text == ";" else e
        if any(k in self.lambdas for k in range(i, stop)):
            return   # a statement that defines a lambda counts nothing (nor does the lambda's body)
        if word == "return":
            self.put(i, e, self.tally(i + 1, stop, self.returns), sub)
            return
        inits = self.declare(i, stop)
        if inits:
            tally = [0, 0, 0, 0]
            for s, x, ty in inits:
                tally = [u + v for u, v in zip(tally, self.tally(s, x, ty))]
        elif t[i].text in _DECL_WORDS or _named(t[i].text, self.env) is not None or word == "auto":
            tally = [0, 0, 0, 0]   # a declaration without initializers
        else:
            target = self.env.get(t[i].text) if t[i].kind is Tok.IDENT else None
            moved = target is not None and target.pointer and i + 1 < stop and t[i + 1].text in _ASSIGN
            if target is not None and target.pointer:
                target = _Type(target.kind, 1, moved)   # `p += n` moves a pointer: address arithmetic
            tally = self.tally(i, stop, target)
        self.put(i, e, tally, sub)


def _split(tokens: list[Token], a: int, b: int, close: dict[int, int]) -> list[tuple[int, int]]:
    """tokens[a:b] split at its top-level commas (template arguments `<T, 2>` kept whole)."""
    out, start, j, angle = [], a, a, 0
    while j < b:
        x = tokens[j].text
        if x == "<" and j > a and type_of_name(tokens[j - 1].text) is None and tokens[j - 1].text in ("vec", "array"):
            angle += 1
        elif x in (">", ">>") and angle:
            angle -= len(x)
        elif x == "," and not angle:
            out.append((start, j))
            start = j + 1
        j = close.get(j, j) + 1
    out.append((start, b))
    return [(s, e) for s, e in out if s < e]


def _return_type(tokens: list[Token], params: tuple[int, int]) -> _Type | None:
    k = params[0] - 2
    while k >= 0 and tokens[k].text not in (";", "{", "}", ">", "]]"):
        ty = type_of_name(tokens[k].text)
        if ty is not None:
            return ty
        k -= 1
    return None


def count_edits(tokens: list[Token], errors: SourceErrors, directives: list[Token],
                counters: dict[str, int]) -> list[tuple[int, int, str]]:
    """Insertions (pos, pos, text) that make each statement of the source's function bodies count its ALU,
    integer and special-function operations (see the module docstring). `counters`: counter numbers by name."""
    close, open_of = brackets(tokens)
    if close is None:
        return []   # brackets that do not balance outside preprocessor conditionals: nothing counted
    walker = _Counts(tokens, close, errors, sorted(d.start for d in directives), counters,
                     frozenset(_lambda_bodies(tokens, open_of)))
    instances, names = instantiations(tokens), aliases(tokens)
    typedefs = {n: _TypeName(ty.kind, ty.width) for n, b in names.items() if (ty := type_of_name(b)) is not None}
    walker.constants = compile_time_names(tokens)
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    done_until = -1
    for _, lbrace in _function_bodies(tokens, close, open_of):
        if lbrace < done_until or is_constexpr(tokens, lbrace, open_of):
            continue
        done_until = close[lbrace]
        params = _parameter_list(tokens, lbrace, open_of)
        walker.returns = _return_type(tokens, params) if params else None
        walker.before, walker.after = {}, {}
        try:
            found = template_types(tokens, params[0], instances, names) if params else {}
            walker.template_types = {**typedefs, **found}
            walker.function(lbrace, params)
        except Exception:   # noqa: BLE001 - a body the walker cannot read keeps no counts (never a wrong text)
            continue
        for mine, theirs in ((before, walker.before), (after, walker.after)):
            for k, texts in theirs.items():
                mine.setdefault(k, []).extend(texts)
    walker.before, walker.after = before, after
    return walker.edits()
