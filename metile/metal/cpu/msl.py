"""MSL front end of the CPU device: kernel signatures, rewrites, and the generated C++ translation unit.

The output C++ keeps the `.metal` text line for line (behind a `#line` directive), so compiler
messages, `__builtin_LINE()` in the compatibility header and debug line tables all name `.metal`
lines. The rewrites are the few places where MSL and C++ differ in meaning:

- `kernel` / `[[kernel]]` functions become `static` functions; a wrapper with C linkage per kernel
  binds `[[buffer(i)]]`, `[[threadgroup(i)]]` and thread-position parameters;
- `threadgroup T name[N];` in a function body becomes a reference to storage from the runtime
  (`mt_threadgroup_alloc`), shared by every thread of the threadgroup;
- `1.5h` becomes `half(1.5f)` and unsuffixed floating literals get an `f` (MSL has no double).
"""

from __future__ import annotations

import enum

import attrs

from metile.ir.errors import Loc
from metile.metal.cpu.msl_lex import (
    LexError,
    Tok,
    Token,
    match_paren,
    rewrite_float_literal,
    split_top_level,
    tokenize,
)
from metile.metal.errors import MSLCompileError, MSLUnsupportedError

FRONTEND_VERSION = "1"


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
_VECTOR_POSITION_TYPES = {f"{t}{n}": n for t in ("uint", "ushort") for n in (2, 3)}
_UNSUPPORTED_HEADERS = {
    "metal_tensor": "Metal 4 tensors (metal_tensor)",
    "MetalPerformancePrimitives": "Metal 4 tensor ops (MetalPerformancePrimitives: matmul2d, cooperative_tensor)",
    "metal_raytracing": "ray tracing",
}
_UNSUPPORTED_IDENTS = {
    "texture1d": "textures", "texture2d": "textures", "texture3d": "textures", "texture2d_array": "textures",
    "texturecube": "textures", "sampler": "samplers", "depth2d": "depth textures",
    "tensor": "Metal 4 tensors", "cooperative_tensor": "Metal 4 cooperative tensors",
    "visible_function_table": "function tables", "intersection_function_table": "ray tracing",
}


@attrs.frozen
class Param:
    name: str
    kind: ParamKind
    type_text: str          # declared type with address-space words, e.g. "device const float*"
    index: int = -1         # [[buffer(i)]] / [[threadgroup(i)]]
    attribute: str = ""     # position attribute name
    is_reference: bool = False
    line: int = 0

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


@attrs.frozen
class Translation:
    """The C++ translation unit for one MSL source, and what the device needs to launch its kernels."""

    cpp: str
    source: str
    kernels: tuple[KernelSignature, ...]
    metal_name: str
    threadgroup_slots: int

    def kernel(self, name: str) -> KernelSignature | None:
        return next((k for k in self.kernels if k.name == name), None)


def entry_symbol(kernel_name: str) -> str:
    return f"__mt_entry_{kernel_name}"


class _Errors:
    def __init__(self, src: str, metal_name: str):
        self.lines = src.splitlines()
        self.metal_name = metal_name

    def at(self, tok: Token, message: str, cls: type[MSLCompileError] = MSLCompileError) -> MSLCompileError:
        line = self.lines[tok.line - 1] if 0 < tok.line <= len(self.lines) else ""
        return cls(message, Loc(self.metal_name, tok.line, tok.col), source_line=line)


def _lex(src: str, errors: _Errors) -> list[Token]:
    try:
        return tokenize(src)
    except LexError as e:
        n = e.line
        raise MSLCompileError(str(e), Loc(errors.metal_name, n, e.col),
                              source_line=errors.lines[n - 1] if n <= len(errors.lines) else "") from None


def kernel_signatures(src: str, metal_name: str = "kernel.metal") -> tuple[KernelSignature, ...]:
    """The kernel functions of an MSL source and their parameters (for any device: nothing is refused)."""
    errors = _Errors(src, metal_name)
    tokens = _lex(src, errors)
    found, depth, i = [], 0, 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind is Tok.PUNCT and t.text in ("{", "}"):
            depth += 1 if t.text == "{" else -1
        elif depth == 0 and _starts_kernel(tokens, i):
            sig, _, i = _parse_kernel(tokens, i, errors)
            found.append(sig)
            continue
        i += 1
    return tuple(found)


def translate(src: str, metal_name: str = "kernel.metal", *, header: str = "metal_compat.h") -> Translation:
    """Turn MSL text into a C++ translation unit for the CPU runtime (see the module docstring)."""
    errors = _Errors(src, metal_name)
    tokens = _lex(src, errors)
    _refuse_unsupported(tokens, errors)
    edits: list[tuple[int, int, str]] = []
    kernels: list[KernelSignature] = []
    slot = 0
    depth = 0
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind is Tok.NUMBER:
            new = rewrite_float_literal(t.text)
            if new != t.text:
                edits.append((t.start, t.end, new))
        elif t.kind is Tok.DIRECTIVE:
            edits += _rewrite_directive(t)
        elif t.kind is Tok.PUNCT and t.text == "{":
            depth += 1
        elif t.kind is Tok.PUNCT and t.text == "}":
            depth -= 1
        elif depth == 0 and _starts_kernel(tokens, i):
            sig, kedits, i = _parse_kernel(tokens, i, errors)
            kernels.append(sig)
            edits += kedits
            continue
        elif (depth > 0 and t.kind is Tok.IDENT and t.text == "threadgroup"
              and (i == 0 or tokens[i - 1].text in (";", "{", "}"))):
            stmt_end = _statement_end(tokens, i)
            new_edits, slot = _rewrite_threadgroup_decl(src, tokens[i:stmt_end + 1], slot, errors)
            edits += new_edits
            if new_edits:
                i = stmt_end + 1
                continue
        i += 1
    if not kernels:
        raise MSLCompileError(f"{metal_name}: no kernel function found (expected `kernel void name(...)` "
                              "or `[[kernel]] void name(...)`)")
    body = _apply_edits(src, edits)
    cpp = _assemble(body, kernels, metal_name, header)
    return Translation(cpp=cpp, source=src, kernels=tuple(kernels), metal_name=metal_name, threadgroup_slots=slot)


def _refuse_unsupported(tokens: list[Token], errors: _Errors) -> None:
    for t in tokens:
        if t.kind is Tok.DIRECTIVE and t.text.lstrip("# \t").startswith("include"):
            for key, what in _UNSUPPORTED_HEADERS.items():
                if key in t.text:
                    raise errors.at(t, f"{what} are not supported by the CPU device yet", MSLUnsupportedError)
        elif t.kind is Tok.IDENT and t.text in _UNSUPPORTED_IDENTS:
            what = _UNSUPPORTED_IDENTS[t.text]
            raise errors.at(t, f"{what} ({t.text}) are not supported by the CPU device yet", MSLUnsupportedError)


def _rewrite_directive(t: Token) -> list[tuple[int, int, str]]:
    """Rewrite float literals in #define bodies (other directives are left alone)."""
    stripped = t.text.lstrip()
    if not stripped[1:].lstrip().startswith("define"):
        return []
    edits = []
    for sub in tokenize(t.text.replace("#", " ", 1)):
        if sub.kind is Tok.NUMBER:
            new = rewrite_float_literal(sub.text)
            if new != sub.text:
                edits.append((t.start + sub.start, t.start + sub.end, new))
    return edits


def _starts_kernel(tokens: list[Token], i: int) -> bool:
    t = tokens[i]
    if t.kind is Tok.IDENT and t.text == "kernel":
        return True
    if t.kind is Tok.PUNCT and t.text == "[[":
        j = match_paren(tokens, i)
        return any(x.kind is Tok.IDENT and x.text == "kernel" for x in tokens[i + 1:j])
    return False


def _parse_kernel(tokens: list[Token], i: int, errors: _Errors) -> tuple[KernelSignature, list, int]:
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


def _parse_param(run: list[Token], errors: _Errors, fn: Token, edits: list) -> Param:
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
        return Param(name, kind, type_text, index=index, is_reference=is_ref, line=decl[-1].line)
    if aname in POSITION_ATTRIBUTES:
        _, comps = POSITION_ATTRIBUTES[aname]
        base = type_text.split()[-1] if type_text else ""
        ok = base in _SCALAR_POSITION_TYPES or (base in _VECTOR_POSITION_TYPES and comps == 3)
        if not ok:
            raise errors.at(decl[0], f"[[{aname}]] parameter `{name}` has type `{type_text}`; "
                                     f"expected uint, ushort" + (", uint2/3 or ushort2/3" if comps == 3 else ""))
        return Param(name, ParamKind.POSITION, type_text, attribute=aname, line=decl[-1].line)
    raise errors.at(attr[0] if attr else run[a0], f"unsupported kernel parameter attribute [[{aname}]]",
                    MSLUnsupportedError)


def _check_params(params: list[Param], errors: _Errors, fn: Token) -> None:
    for kind in (ParamKind.BUFFER, ParamKind.THREADGROUP):
        seen: dict[int, str] = {}
        for p in params:
            if p.kind is kind:
                if p.index in seen:
                    raise errors.at(fn, f"kernel `{fn.text}`: [[{kind.value}({p.index})]] is bound twice "
                                        f"(`{seen[p.index]}` and `{p.name}`)")
                seen[p.index] = p.name


def _statement_end(tokens: list[Token], i: int) -> int:
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t.kind is Tok.PUNCT and t.text in ("(", "[", "{"):
            depth += 1
        elif t.kind is Tok.PUNCT and t.text in (")", "]", "}"):
            depth -= 1
        elif t.kind is Tok.PUNCT and t.text == "]]":
            depth -= 2
        elif t.kind is Tok.PUNCT and t.text == "[[":
            depth += 2
        elif depth == 0 and t.text == ";":
            return j
    return len(tokens) - 1


def _rewrite_threadgroup_decl(src: str, stmt: list[Token], slot: int, errors: _Errors):
    """`threadgroup T a[N], b;` -> references to runtime storage. Pointer declarations are left alone."""
    body = stmt[1:-1]  # without 'threadgroup' and ';'
    declarators = split_top_level(body)
    if not declarators:
        return [], slot
    first = declarators[0]
    # the type is everything before the first declarator's name
    name_at = next((n for n, t in enumerate(first) if t.kind is Tok.IDENT
                    and (n + 1 == len(first) or first[n + 1].text in ("[", "=", ")"))), None)
    if name_at is None or name_at == 0:
        return [], slot
    type_toks = first[:name_at]
    if type_toks[-1].text in ("*", "&") or any(t.text == "(" for t in type_toks):
        return [], slot  # a pointer or reference into threadgroup memory: nothing to allocate
    type_text = src[type_toks[0].start:type_toks[-1].end]
    pieces = []
    for n, decl in enumerate(declarators):
        toks = decl[name_at:] if n == 0 else decl
        if not toks or toks[0].kind is not Tok.IDENT:
            raise errors.at(stmt[0], "cannot read this threadgroup declaration")
        if any(t.text == "=" for t in toks):
            raise errors.at(toks[0], f"threadgroup variable `{toks[0].text}` cannot have an initializer")
        if any(t.text in ("*", "&") for t in toks[:1]):
            raise errors.at(toks[0], "mixing threadgroup storage and pointers in one declaration is not supported")
        name = toks[0].text
        dims = src[toks[1].start:toks[-1].end] if len(toks) > 1 else ""
        alias = f"__mt_tg_t{slot}"
        pieces.append(
            f"using {alias} = {type_text} {dims}; "
            f"{alias}& {name} = *reinterpret_cast<{alias}*>("
            f"mt_threadgroup_alloc({slot}u, sizeof({alias}), alignof({alias}), __LINE__));"
        )
        slot += 1
    start, end = stmt[0].start, stmt[-1].end
    newlines = src.count("\n", start, end)
    return [(start, end, " ".join(pieces) + "\n" * newlines)], slot


def _apply_edits(src: str, edits: list[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for start, end, text in sorted(edits):
        if start < pos:  # an edit inside a replaced span (e.g. a literal in a rewritten declaration)
            continue
        out.append(src[pos:start])
        keep = src.count("\n", start, end) - text.count("\n")
        out.append(text + "\n" * max(keep, 0))
        pos = end
    out.append(src[pos:])
    return "".join(out)


def _position_expr(p: Param) -> str:
    field, comps = POSITION_ATTRIBUTES[p.attribute]
    base = p.type_text.split()[-1]
    if p.attribute == "thread_execution_width":
        return f"{base}(MT_SIMD_WIDTH)"
    if comps == 1:
        return f"{base}(__p->{field})"
    want = _VECTOR_POSITION_TYPES.get(base, 1)
    if not field:
        return f"{base}(0)"
    parts = ", ".join(f"__p->{field}[{c}]" for c in range(want))
    return f"{base}({parts})"


def _wrapper(sig: KernelSignature) -> str:
    args = []
    for p in sig.params:
        if p.kind is ParamKind.BUFFER:
            if p.is_reference:
                args.append(f"*({p.type_text[:-1]}*)__b[{p.index}]")
            else:
                args.append(f"({p.type_text})__b[{p.index}]")
        elif p.kind is ParamKind.THREADGROUP:
            args.append(f"({p.type_text})mt_threadgroup_param({p.index}u)")
        else:
            args.append(_position_expr(p))
    joined = ",\n        ".join(args)
    return (
        f'extern "C" __attribute__((visibility("default"))) void {entry_symbol(sig.name)}'
        f"(void* const* __b, const mt_thread_pos* __p) {{\n"
        f"    (void)__b; (void)__p;\n    {sig.name}(\n        {joined});\n}}\n"
    )


def _assemble(body: str, kernels: list[KernelSignature], metal_name: str, header: str) -> str:
    wrappers = "\n".join(_wrapper(k) for k in kernels)
    quoted = metal_name.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'#include "{header}"\n'
        f'#line 1 "{quoted}"\n'
        f"{body}\n"
        f'#line 1 "{quoted}.entry.cpp"\n'
        f"{wrappers}"
    )
