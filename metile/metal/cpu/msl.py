"""MSL front end of the CPU device: rewrites, and the generated C++ translation unit.

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

import attrs

from metile.metal import function_constant_scan, function_constants
from metile.metal.cpu import function_constants as cpu_function_constants
from metile.metal.cpu.addrspace import address_space_edits
from metile.metal.cpu.arms import arm_edits
from metile.metal.cpu.toolchain import INCLUDE_DIR
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import Tok, Token, rewrite_float_literal, split_top_level, tokenize
from metile.metal.msl_signature import (
    POSITION_ATTRIBUTES,
    VECTOR_POSITION_TYPES,
    KernelSignature,
    Param,
    ParamKind,
    SourceErrors,
    lex,
    parse_kernel,
    starts_kernel,
)

FRONTEND_VERSION = "1"


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
class Translation:
    """The C++ translation unit for one MSL source, and what the device needs to launch its kernels."""

    cpp: str
    source: str
    kernels: tuple[KernelSignature, ...]
    metal_name: str
    threadgroup_slots: int
    function_constants: function_constants.ConstantTable = function_constants.EMPTY

    def kernel(self, name: str) -> KernelSignature | None:
        return next((k for k in self.kernels if k.name == name), None)


def entry_symbol(kernel_name: str) -> str:
    return f"__mt_entry_{kernel_name}"


def translate(src: str, metal_name: str = "kernel.metal", *, header: str = "metal_compat.h",
              include_dirs: tuple = ()) -> Translation:
    """Turn MSL text into a C++ translation unit for the CPU runtime (see the module docstring). `include_dirs` are
    where the C++ compiler looks for the source's `#include "..."` files."""
    errors = SourceErrors(src, metal_name)
    tokens = lex(src, errors)
    _refuse_unsupported(tokens, errors)
    edits: list[tuple[int, int, str]] = address_space_edits(src, tokens, errors)
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
        elif depth == 0 and starts_kernel(tokens, i):
            sig, kedits, i = parse_kernel(tokens, i, errors)
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
    # function constants (metile/metal/function_constants.py, cpu/function_constants.py)
    headers = function_constant_scan.included_headers(tokens, include_dirs, (INCLUDE_DIR,))
    constants = function_constant_scan.scan(tokens, errors, tuple(kernels), headers)
    edits += cpu_function_constants.edits(constants)
    edits += arm_edits(tokens, errors, (k.name for k in kernels), headers)
    body = _apply_edits(src, edits)
    cpp = cpu_function_constants.with_prelude(_assemble(body, kernels, metal_name, header), constants, {})
    return Translation(cpp=cpp, source=src, kernels=tuple(kernels), metal_name=metal_name, threadgroup_slots=slot,
                       function_constants=constants)


def _refuse_unsupported(tokens: list[Token], errors: SourceErrors) -> None:
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


def _rewrite_threadgroup_decl(src: str, stmt: list[Token], slot: int, errors: SourceErrors):
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
    if any(t.text in ("*", "&", "(") for t in type_toks):
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
    want = VECTOR_POSITION_TYPES.get(base, 1)
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
