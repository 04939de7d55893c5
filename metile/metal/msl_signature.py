"""Kernel signatures of MSL sources: the `[[buffer(i)]]`, `[[threadgroup(i)]]` and thread-position
parameters of each `kernel` function, as every device needs them to bind arguments.

Parsing also records the source edits the CPU device's front end makes to a kernel's declaration
(`kernel` becomes `static`, parameter attributes are dropped); other devices ignore them.
"""

from __future__ import annotations

import enum

import attrs

from metile.ir.errors import Loc
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, split_top_level, tokenize


class ParamKind(enum.Enum):
    BUFFER = "buffer"
    THREADGROUP = "threadgroup"
    POSITION = "position"


# attribute -> (mt_thread_pos field, components held by the field)
POSITION_ATTRIBUTES: dict[str, tuple[str, int]] = {
    "thread_position_in_grid": ("thread_position_in_grid", 3),
    "threadgroup_position_in_grid": ("threadgroup_position_in_grid", 3),
    "thread_position_in_threadgroup": ("thread_position_in_threadgroup", 3),
    "threads_per_threadgroup": ("threads_per_threadgroup", 3),
    "dispatch_threads_per_threadgroup": ("dispatch_threads_per_threadgroup", 3),
    "threadgroups_per_grid": ("threadgroups_per_grid", 3),
    "threads_per_grid": ("threads_per_grid", 3),
    "grid_size": ("threads_per_grid", 3),
    "grid_origin": ("", 3),
    "thread_index_in_threadgroup": ("thread_index_in_threadgroup", 1),
    "thread_index_in_simdgroup": ("thread_index_in_simdgroup", 1),
    "simdgroup_index_in_threadgroup": ("simdgroup_index_in_threadgroup", 1),
    "simdgroups_per_threadgroup": ("simdgroups_per_threadgroup", 1),
    "dispatch_simdgroups_per_threadgroup": ("simdgroups_per_threadgroup", 1),
    "threads_per_simdgroup": ("threads_per_simdgroup", 1),
    "thread_execution_width": ("", 1),
    "thread_index_in_quadgroup": ("thread_index_in_quadgroup", 1),
    "quadgroup_index_in_threadgroup": ("quadgroup_index_in_threadgroup", 1),
    "quadgroups_per_threadgroup": ("quadgroups_per_threadgroup", 1),
    "dispatch_quadgroups_per_threadgroup": ("quadgroups_per_threadgroup", 1),
}
_SCALAR_POSITION_TYPES = {"uint", "ushort", "int", "short", "uint32_t", "uint16_t"}
VECTOR_POSITION_TYPES = {f"{t}{n}": n for t in ("uint", "ushort") for n in (2, 3)}
@attrs.frozen
class Param:
    name: str
    kind: ParamKind
    type_text: str          # declared type with address-space words, e.g. "device const float*"
    index: int = -1         # [[buffer(i)]] / [[threadgroup(i)]]
    attribute: str = ""     # position attribute name
    is_reference: bool = False
    line: int = 0
    function_constant: str = ""   # [[buffer(i), function_constant(b)]]: present only when the bool b is true

    @property
    def address_space(self) -> str:
        for word in ("device", "constant", "threadgroup"):
            if word in self.type_text.split():
                return word
        return ""

    @property
    def element_type(self) -> str:
        """The pointee/referee type without address-space or cv words, e.g. "float"."""
        words = [w for w in self.type_text.replace("*", " ").replace("&", " ").split()
                 if w not in ("device", "constant", "threadgroup", "const", "volatile", "restrict")]
        return " ".join(words)

    @property
    def is_const(self) -> bool:
        return self.address_space == "constant" or "const" in self.type_text.split()


@attrs.frozen
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    line: int
    max_total_threads: int = 0  # [[max_total_threads_per_threadgroup(n)]], 0 if absent

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(sorted((p for p in self.params if p.kind is ParamKind.BUFFER), key=lambda p: p.index))

    @property
    def threadgroup_params(self) -> tuple[Param, ...]:
        return tuple(sorted((p for p in self.params if p.kind is ParamKind.THREADGROUP), key=lambda p: p.index))


class SourceErrors:
    def __init__(self, src: str, metal_name: str):
        self.lines = src.splitlines()
        self.metal_name = metal_name

    def at(self, tok: Token, message: str, cls: type[MSLCompileError] = MSLCompileError) -> MSLCompileError:
        line = self.lines[tok.line - 1] if 0 < tok.line <= len(self.lines) else ""
        return cls(message, Loc(self.metal_name, tok.line, tok.col), source_line=line)


def lex(src: str, errors: SourceErrors) -> list[Token]:
    try:
        return tokenize(src)
    except LexError as e:
        n = e.line
        raise MSLCompileError(str(e), Loc(errors.metal_name, n, e.col),
                              source_line=errors.lines[n - 1] if n <= len(errors.lines) else "") from None


def kernel_signatures(src: str, metal_name: str = "kernel.metal") -> tuple[KernelSignature, ...]:
    """The kernel functions of an MSL source and their parameters (for any device: nothing is refused)."""
    errors = SourceErrors(src, metal_name)
    tokens = lex(src, errors)
    found, depth, i = [], 0, 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind is Tok.PUNCT and t.text in ("{", "}"):
            depth += 1 if t.text == "{" else -1
        elif depth == 0 and starts_kernel(tokens, i):
            sig, _, i = parse_kernel(tokens, i, errors)
            found.append(sig)
            continue
        i += 1
    return tuple(found)


def starts_kernel(tokens: list[Token], i: int) -> bool:
    t = tokens[i]
    if t.kind is Tok.IDENT and t.text == "kernel":
        return True
    if t.kind is Tok.PUNCT and t.text == "[[":
        j = match_paren(tokens, i)
        return any(x.kind is Tok.IDENT and x.text == "kernel" for x in tokens[i + 1:j])
    return False


def parse_kernel(tokens: list[Token], i: int, errors: SourceErrors) -> tuple[KernelSignature, list, int]:
    """Parse `[[kernel]] void name(params) {` starting at tokens[i]; returns the signature and edits."""
    edits: list[tuple[int, int, str]] = []
    max_threads = 0
    if tokens[i].text == "[[":
        close = match_paren(tokens, i)
        for a, attr in enumerate(tokens[i + 1:close]):
            if attr.text == "max_total_threads_per_threadgroup":
                arg = tokens[i + 1 + a + 2]
                max_threads = int(arg.text.rstrip("uU"), 0)
        edits.append((tokens[i].start, tokens[close].end, "static"))
        j = close + 1
    else:
        edits.append((tokens[i].start, tokens[i].end, "static"))
        j = i + 1
    # return type ... name (
    k = j
    while k < len(tokens) and not (tokens[k].text == "(" and tokens[k - 1].kind is Tok.IDENT):
        k += 1
    if k >= len(tokens):
        raise errors.at(tokens[i], "kernel function has no parameter list")
    name_tok = tokens[k - 1]
    ret = " ".join(t.text for t in tokens[j:k - 1])
    if ret != "void":
        raise errors.at(tokens[j], f"kernel function `{name_tok.text}` must return void, not `{ret}`")
    close = match_paren(tokens, k)
    params = [
        _parse_param(run, errors, name_tok, edits)
        for run in split_top_level(tokens[k + 1:close])
    ]
    _check_params(params, errors, name_tok)
    sig = KernelSignature(name=name_tok.text, params=tuple(params), line=name_tok.line,
                          max_total_threads=max_threads)
    return sig, edits, close + 1


def _parse_param(run: list[Token], errors: SourceErrors, fn: Token, edits: list) -> Param:
    attrs_at = [n for n, t in enumerate(run) if t.text == "[["]
    if not attrs_at:
        raise errors.at(run[0], f"parameter `{' '.join(t.text for t in run)}` of kernel `{fn.text}` "
                                "needs an attribute such as [[buffer(0)]]")
    a0 = attrs_at[0]
    a1 = match_paren(run, a0)
    decl, attr = run[:a0], run[a0 + 1:a1]
    edits.append((run[a0].start, run[a1].end, " "))
    if len(decl) < 2 or decl[-1].kind is not Tok.IDENT:
        raise errors.at(run[0], "cannot read this kernel parameter (expected `type name [[attribute]]`)")
    name = decl[-1].text
    type_text = " ".join(t.text for t in decl[:-1]).replace(" *", "*").replace(" &", "&")
    aname = attr[0].text if attr else ""
    if aname in ("buffer", "threadgroup"):
        if len(attr) < 4 or attr[1].text != "(" or attr[2].kind is not Tok.NUMBER:
            raise errors.at(attr[0], f"[[{aname}(...)]] needs an integer index")
        index = int(attr[2].text.rstrip("uU"), 0)
        is_ref = type_text.endswith("&")
        if not (type_text.endswith("*") or is_ref):
            raise errors.at(decl[0], f"[[{aname}({index})]] parameter `{name}` must be a pointer or reference")
        if aname == "threadgroup" and "threadgroup" not in type_text.split():
            raise errors.at(decl[0], f"[[threadgroup({index})]] parameter `{name}` must be a threadgroup pointer")
        kind = ParamKind.BUFFER if aname == "buffer" else ParamKind.THREADGROUP
        return Param(name, kind, type_text, index=index, is_reference=is_ref, line=decl[-1].line,
                     function_constant=_function_constant_attribute(attr, errors))
    if aname in POSITION_ATTRIBUTES:
        _, comps = POSITION_ATTRIBUTES[aname]
        base = type_text.split()[-1] if type_text else ""
        ok = base in _SCALAR_POSITION_TYPES or (base in VECTOR_POSITION_TYPES and comps == 3)
        if not ok:
            raise errors.at(decl[0], f"[[{aname}]] parameter `{name}` has type `{type_text}`; "
                                     f"expected uint, ushort" + (", uint2/3 or ushort2/3" if comps == 3 else ""))
        return Param(name, ParamKind.POSITION, type_text, attribute=aname, line=decl[-1].line)
    raise errors.at(attr[0] if attr else run[a0], f"unsupported kernel parameter attribute [[{aname}]]",
                    MSLUnsupportedError)


def _function_constant_attribute(attr: list[Token], errors: SourceErrors) -> str:
    """The `b` of a `function_constant(b)` in a parameter's attribute list, or ""."""
    for n, t in enumerate(attr):
        if t.kind is Tok.IDENT and t.text == "function_constant":
            if n + 3 >= len(attr) or attr[n + 1].text != "(" or attr[n + 2].kind is not Tok.IDENT \
                    or attr[n + 3].text != ")":
                raise errors.at(t, "expected function_constant(name) with the name of a bool constant")
            return attr[n + 2].text
    return ""


def _check_params(params: list[Param], errors: SourceErrors, fn: Token) -> None:
    for kind in (ParamKind.BUFFER, ParamKind.THREADGROUP):
        seen: dict[int, str] = {}
        for p in params:
            if p.kind is kind:
                if p.index in seen:
                    raise errors.at(fn, f"kernel `{fn.text}`: [[{kind.value}({p.index})]] is bound twice "
                                        f"(`{seen[p.index]}` and `{p.name}`)")
                seen[p.index] = p.name
