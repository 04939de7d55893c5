"""Kernel templates in MSL: template headers, explicit instantiations, argument substitution, and integer
constant expressions (attribute arguments such as `max_total_threads_per_threadgroup(8 * 32)`).

Metal names the instantiation `template [[host_name("f_float")]] [[kernel]] decltype(f<float>) f<float>;`
`f_float`; its parameter types are the template's with the arguments substituted (defaults filling
the missing ones), which is what host-side argument checking needs.
"""

from __future__ import annotations

import ast
import re

import attrs

from metile.metal.msl_lex import Tok, Token


@attrs.frozen
class TemplateParam:
    name: str
    is_type: bool
    default: tuple[str, ...] = ()   # token texts of the default argument, () if none
    variadic: bool = False


class TemplateSyntaxError(Exception):
    """Malformed template syntax at `token` (callers turn it into an MSLCompileError)."""

    def __init__(self, message: str, token: Token):
        super().__init__(message)
        self.token = token


def match_angle(tokens: list[Token], i: int) -> int:
    """Index of the `>` closing the `<` at tokens[i] (a `>>` closes two; `<`/`>` inside parentheses compare)."""
    depth, paren = 0, 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t.kind is not Tok.PUNCT:
            continue
        if t.text in ("(", "["):
            paren += 1
        elif t.text in (")", "]"):
            paren -= 1
        elif t.text in (";", "{", "}") and paren == 0:
            break
        elif paren == 0 and t.text == "<":
            depth += 1
        elif paren == 0 and t.text in (">", ">>"):
            depth -= len(t.text)
            if depth <= 0:
                return j
    raise TemplateSyntaxError("unbalanced '<' in a template argument list", tokens[i])


def split_args(tokens: list[Token]) -> list[list[Token]]:
    """Split a template argument (or parameter) list at top-level commas."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.kind is Tok.PUNCT:
            if t.text in ("(", "[", "{", "<"):
                depth += 1
            elif t.text in (")", "]", "}", ">"):
                depth -= 1
            elif t.text == ">>":
                depth -= 2
            elif t.text == "," and depth == 0:
                parts.append([])
                continue
        parts[-1].append(t)
    return parts if parts != [[]] else []


def parse_header(tokens: list[Token], i: int) -> tuple[list[TemplateParam], int]:
    """`template < ... >` at tokens[i]: the parameters, and the index after the closing `>`."""
    close = match_angle(tokens, i + 1)
    params = []
    for run in split_args(tokens[i + 2:close]):
        eq = next((n for n, t in enumerate(run) if t.text == "="), len(run))
        decl, default = run[:eq], tuple(t.text for t in run[eq + 1:])
        names = [t for t in decl if t.kind is Tok.IDENT]
        if not names:
            raise TemplateSyntaxError("cannot read this template parameter", run[0] if run else tokens[i])
        is_type = decl[0].text in ("typename", "class") and not any(t.text == "<" for t in decl)
        variadic = any(t.text in ("...", ".") for t in decl)
        params.append(TemplateParam(names[-1].text if len(names) > 1 else "", is_type, default, variadic))
    return params, close + 1


def bind(params: list[TemplateParam], args: list[str], where: Token, what: str) -> dict[str, str]:
    """Template parameter name -> argument text, defaults filling the missing arguments."""
    if any(p.variadic for p in params):
        raise TemplateSyntaxError(f"{what}: variadic kernel templates are not supported", where)
    if len(args) > len(params):
        raise TemplateSyntaxError(f"{what}: {len(args)} template arguments for {len(params)} parameters", where)
    mapping: dict[str, str] = {}
    for k, p in enumerate(params):
        if k < len(args):
            value = args[k]
        elif p.default:
            value = substitute(list(p.default), mapping)
        else:
            raise TemplateSyntaxError(f"{what}: no argument for template parameter `{p.name}` (and no default)",
                                      where)
        if p.name:
            mapping[p.name] = value if p.is_type or _is_simple(value) else f"({value})"
    return mapping


def _is_simple(text: str) -> bool:
    return re.fullmatch(r"[\w.]+", text) is not None


def substitute(texts: list[str], mapping: dict[str, str]) -> str:
    """Token texts joined back into C++ text, template parameter names replaced by their arguments."""
    out: list[str] = []
    for n, t in enumerate(texts):
        prev = texts[n - 1] if n else ""
        word = mapping.get(t) if prev not in (".", "->", "::") else None
        out.append(word if word is not None else t)
    return join(out)


def join(texts: list[str]) -> str:
    """Token texts as readable C++ (`device const float*`, `vec<float, 4>`)."""
    s = " ".join(texts)
    s = re.sub(r"\s+(?=[*&,)\]>;]|::|<|\(|\[)", "", s)
    return re.sub(r"([(\[<~!]|::)\s+", r"\1", s).strip()


def string_literal(tokens: list[Token]) -> str | None:
    """The value of adjacent string literals (`"a" "b"` is "ab"), None if `tokens` is anything else."""
    if not tokens or any(t.kind is not Tok.STRING or not t.text.startswith('"') for t in tokens):
        return None
    try:
        return "".join(ast.literal_eval(t.text) for t in tokens)
    except (ValueError, SyntaxError):
        return None


_INT = re.compile(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)[uUlL]*$")
_OPS = {"+", "-", "*", "/", "%", "<<", ">>", "(", ")", "&", "|", "^", "~"}


def const_int(texts: list[str]) -> int | None:
    """The value of an integer constant expression of literals and + - * / % << >> & | ^ ~ ( ), else None.

    Division and remainder truncate toward zero as in C++."""
    py = []
    for t in texts:
        m = _INT.match(t)
        if m is not None:
            digits = m.group(1)
            if digits[:2] in ("0b", "0B"):
                py.append(str(int(digits, 2)))
            elif len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
                py.append(str(int(digits, 8)))
            else:
                py.append(str(int(digits, 0)))
        elif t in _OPS:
            py.append(t)
        else:
            return None
    try:
        tree = ast.parse(" ".join(py), mode="eval")
        return _eval(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, OverflowError):
        return None


def _eval(n: ast.AST) -> int:
    match n:
        case ast.Constant(value=int() as v):
            return v
        case ast.UnaryOp(op=ast.USub(), operand=x):
            return -_eval(x)
        case ast.UnaryOp(op=ast.UAdd(), operand=x):
            return _eval(x)
        case ast.UnaryOp(op=ast.Invert(), operand=x):
            return ~_eval(x)
        case ast.BinOp(left=a, op=op, right=b):
            x, y = _eval(a), _eval(b)
            match op:
                case ast.Add():
                    return x + y
                case ast.Sub():
                    return x - y
                case ast.Mult():
                    return x * y
                case ast.Div() | ast.FloorDiv():
                    q = abs(x) // abs(y)
                    return q if (x >= 0) == (y >= 0) else -q
                case ast.Mod():
                    r = abs(x) % abs(y)
                    return r if x >= 0 else -r
                case ast.LShift() if 0 <= y < 64:
                    return x << y
                case ast.RShift() if 0 <= y < 64:
                    return x >> y
                case ast.BitAnd():
                    return x & y
                case ast.BitOr():
                    return x | y
                case ast.BitXor():
                    return x ^ y
    raise ValueError("not an integer constant expression")
