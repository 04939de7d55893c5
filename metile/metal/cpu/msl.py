"""MSL front end of the CPU device: rewrites, and the generated C++ translation unit.

The output C++ keeps the `.metal` text line for line (behind a `#line` directive), so compiler
messages, `__builtin_LINE()` in the compatibility header and debug line tables all name `.metal`
lines. The rewrites are the few places where MSL and C++ differ in meaning:

- `kernel` / `[[kernel]]` functions become `static` functions; a wrapper with C linkage per kernel
  binds `[[buffer(i)]]`, `[[threadgroup(i)]]` and thread-position parameters (for an instantiation of
  a kernel template named by `[[host_name]]`, it calls the specialization, with parameter types taken
  from `decltype(&f<A>)`);
- parameter attributes of other functions (`threadgroup T* buf [[threadgroup(0)]]` in a helper) go;
- an explicit specialization of a member function template at class scope (which Metal's compiler and
  clang accept, g++ does not) becomes a plain member overload with the same parameters: calls that
  would pick the specialization pick the overload, which has the same body;
- `threadgroup T name[N];` in a function body becomes a reference to storage from the runtime
  (`mt_threadgroup_alloc`), shared by every thread of the threadgroup;
- `constant` becomes `const` where it qualifies a type or a member function (`metile.metal.cpu.constant_space`):
  the constant address space is read-only everywhere, not only in kernel parameters;
- `1.5h` becomes `half(1.5f)` and unsuffixed floating literals get an `f` (MSL has no double);
- `#include <metal_tensor>` and `#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>` become
  `include/mt_tensor.h` after the compatibility header, and the unit is then C++20 (`Translation.cxx_standard`);
  a kernel parameter of tensor type (an MTLTensor binding) is refused.

Sources with macros, conditionals or quoted includes are preprocessed first (`metile.metal.msl_preprocess`);
the output's `#line` directives keep naming the user's files and lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import attrs

from metile.metal import function_constant_scan, function_constants
from metile.metal.cpu import function_constants as cpu_function_constants
from metile.metal.cpu.addrspace import address_space_edits
from metile.metal.cpu.alu_counts import count_edits
from metile.metal.cpu.arms import arm_edits
from metile.metal.cpu.checked import checked_type, pointer_edits
from metile.metal.cpu.constant_space import clear_of
from metile.metal.cpu.runtime_api import PROFILE_COUNTERS
from metile.metal.cpu.toolchain import INCLUDE_DIR
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, rewrite_float_literal, split_top_level, tokenize
from metile.metal.msl_preprocess import TENSOR_HEADERS, LineMap, Preprocessed
from metile.metal.msl_signature import (
    METAL_PARAM_ATTRIBUTES,
    POSITION_ATTRIBUTES,
    VECTOR_POSITION_TYPES,
    KernelSignature,
    KernelTemplate,
    Param,
    ParamKind,
    SourceErrors,
    add_kernels,
    kernel_at,
    lex,
    starts_kernel,
)
from metile.metal.msl_templates import TemplateSyntaxError, match_angle

FRONTEND_VERSION = "2"
COUNTERS = {name: n for n, name in enumerate(PROFILE_COUNTERS)}   # counter numbers for the instrumented text


_UNSUPPORTED_HEADERS = {
    "metal_raytracing": "ray tracing",
}
_UNSUPPORTED_IDENTS = {
    "texture1d": "textures", "texture2d": "textures", "texture3d": "textures", "texture2d_array": "textures",
    "texturecube": "textures", "sampler": "samplers", "depth2d": "depth textures",
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
    line_map: LineMap | None = None   # where the lines of preprocessed text came from (None: `cpp` has `source`)
    cxx_standard: str = "c++17"       # c++20 for Metal 4 tensor ops (matmul2d takes a descriptor argument)
    # the sanitizer build's text, made when first asked for (None: `cpp`)
    instrument: Callable[[], str] | None = attrs.field(default=None, eq=False, repr=False)
    # the checked build's text (metile.metal.cpu.checked), made when first asked for; it gives None when the source
    # has no checked build (None here: neither)
    check: Callable[[], str | None] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def instrumented_cpp(self) -> str:
        """The instrumented build's text: `cpp` with each statement counting its arithmetic (alu_counts.py)."""
        return self.instrument() if self.instrument is not None else self.cpp

    @property
    def checked_cpp(self) -> str | None:
        """The checked build's text (metile.metal.cpu.checked), or None when the source has none."""
        return self.check() if self.check is not None else None

    def cpp_for(self, sanitize: bool, checked: bool = False) -> str:
        """The text a build compiles: the instrumented one for the sanitizer's (and profiling's) build, the checked one
        for a checked build."""
        if checked:
            text = self.checked_cpp
            assert text is not None, "a checked build of a source that has none"
            return text
        return self.instrumented_cpp if sanitize else self.cpp

    def kernel(self, name: str) -> KernelSignature | None:
        return next((k for k in self.kernels if k.name == name), None)


def entry_symbol(kernel_name: str) -> str:
    """The C symbol of a kernel's wrapper (characters a host_name may have and C names may not are spelled out)."""
    return "__mt_entry_" + re.sub(r"[^A-Za-z0-9_]", lambda m: f"_{ord(m.group()):x}_", kernel_name)


def translate(src: str, metal_name: str = "kernel.metal", *, header: str = "metal_compat.h",
              include_dirs: tuple = (), preprocessed: Preprocessed | None = None,
              signatures: tuple[KernelSignature, ...] = ()) -> Translation:
    """Turn MSL text into a C++ translation unit for the CPU runtime (see the module docstring).

    `preprocessed` is `src` after the preprocessor, when it needed one; `include_dirs` are where the C++ compiler
    looks for the `#include "..."` files of a source that did not need it. `signatures` are the kernels of a source
    whose writer knows them (metile's emitter, `metile.emit.artifact.MslArtifact`): each kernel is bound as its
    signature says, once it is checked to bind as the declaration the C++ compiler reads."""
    text = preprocessed.text if preprocessed is not None else src
    line_map = preprocessed.line_map if preprocessed is not None else None
    errors = SourceErrors(src, metal_name, line_map)
    tokens = lex(text, errors)
    _refuse_unsupported(tokens, errors)
    edits, const_edits = address_space_edits(text, tokens, errors)
    for t in tokens:
        if t.kind is Tok.DIRECTIVE and _includes_tensor_header(t):
            edits.append((t.start, t.end, ""))   # mt_tensor.h, included by the translation, stands for it
        elif t.kind is Tok.DIRECTIVE:
            edits += _rewrite_directive(t)
    directives = [t for t in tokens if t.kind is Tok.DIRECTIVE]
    tensors = _uses_tensors(directives, line_map)
    tokens = [t for t in tokens if t.kind is not Tok.DIRECTIVE]
    kernels: list[KernelSignature] = []
    templates: dict[str, KernelTemplate] = {}
    braces: list[str] = []   # "class" for a class body, "" for any other brace
    slot = 0
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind is Tok.NUMBER:
            new = rewrite_float_literal(t.text)
            if new != t.text:
                edits.append((t.start, t.end, new))
        elif t.kind is Tok.PUNCT and t.text == "{":
            braces.append(_brace_kind(tokens, i))
        elif t.kind is Tok.PUNCT and t.text == "}":
            if braces:
                braces.pop()
        elif not braces and (hit := _kernel_at(tokens, i, errors, templates, tensors)) is not None:
            sigs, kedits, i = hit
            add_kernels(kernels, sigs, errors)
            edits += kedits
            continue
        elif t.kind is Tok.PUNCT and t.text == "[[":
            edits += _strip_metal_attributes(tokens, i, errors)
        elif (braces and braces[-1] == "class" and t.text == "template" and i + 2 < len(tokens)
              and tokens[i + 1].text == "<" and tokens[i + 2].text == ">"):
            edits += _member_specialization(tokens, i, errors)
        elif (braces and t.kind is Tok.IDENT and t.text == "threadgroup"
              and (i == 0 or tokens[i - 1].text in (";", "{", "}"))):
            stmt_end = _statement_end(tokens, i, errors)
            new_edits, slot = _rewrite_threadgroup_decl(text, tokens[i:stmt_end + 1], slot, errors)
            edits += new_edits
            if new_edits:
                i = stmt_end + 1
                continue
        i += 1
    if not kernels:
        raise MSLCompileError(f"{metal_name}: no kernel function found (expected `kernel void name(...)` "
                              "or `[[kernel]] void name(...)`)")
    kernels = _as_given(kernels, signatures, metal_name)
    # function constants (metile/metal/function_constants.py, cpu/function_constants.py)
    headers = function_constant_scan.included_headers(directives, include_dirs, (INCLUDE_DIR,))
    constants = function_constant_scan.scan(tokens, errors, tuple(kernels), headers)
    edits += cpu_function_constants.edits(constants)
    fixed = frozenset(c.name for c in (*constants.constants, *constants.derived))   # one value for every thread
    edits += arm_edits(tokens, errors, (k.name for k in kernels), headers, directives, tensor_ops=tensors,
                       constants=fixed)

    def unit(more: list[tuple[int, int, str]], checked: bool = False) -> str:   # a build's text, with `more` edits
        body = _apply_edits(text, edits + more + clear_of(const_edits, edits))
        return cpu_function_constants.with_prelude(_assemble(body, kernels, metal_name, header, tensors, checked),
                                                   constants, {})
    cpp = unit([])

    @functools.cache
    def instrument() -> str:   # the instrumented build's text (alu_counts.py), made once, when a build asks for it
        return unit(count_edits(tokens, errors, directives, COUNTERS))

    @functools.cache
    def check() -> str | None:   # the checked build's text (metile.metal.cpu.checked), made when a launch asks for it
        pointers = None if tensors else pointer_edits(tokens)
        return None if pointers is None else unit(clear_of(pointers, edits), checked=True)
    return Translation(cpp=cpp, source=src, kernels=tuple(kernels), metal_name=metal_name, threadgroup_slots=slot,
                       function_constants=constants, line_map=line_map, cxx_standard="c++20" if tensors else "c++17",
                       instrument=instrument, check=check)


def _uses_tensors(directives: list[Token], line_map: LineMap | None) -> bool:
    """Whether the source includes <metal_tensor> or MetalPerformancePrimitives (itself, or before the preprocessor
    took the include away: the line map names the stand-in headers it read)."""
    if line_map is not None and any(h in TENSOR_HEADERS for h in line_map.metal_headers()):
        return True
    return any(_includes_tensor_header(t) for t in directives)


def _includes_tensor_header(t: Token) -> bool:
    return t.text.lstrip("# \t").startswith("include") and any(f"<{h}>" in t.text for h in TENSOR_HEADERS)


def _kernel_at(tokens: list[Token], i: int, errors: SourceErrors, templates: dict, tensors: bool):
    """`kernel_at`, except that a kernel parameter of tensor type, which binds an MTLTensor (tensor_handle) the CPU
    device has no way to make, is refused as such at the parameter."""
    if tensors and starts_kernel(tokens, i):
        close = next((j for j in range(i, len(tokens)) if tokens[j].text in ("{", ";")), len(tokens))
        for j in range(i, close - 1):
            if tokens[j].text == "tensor" and tokens[j + 1].text == "<":
                raise errors.at(tokens[j], "a kernel parameter of tensor type (an MTLTensor binding) is not supported "
                                "by the CPU device: bind a buffer and make the tensor in the kernel "
                                "(tensor<device T, dextents<int32_t, 2>, tensor_inline>(pointer, extents))",
                                MSLUnsupportedError)
    return kernel_at(tokens, i, errors, templates)


def _as_given(read: list[KernelSignature], given: tuple[KernelSignature, ...], metal_name: str) -> list:
    """The kernels `read` from a source, each replaced by its signature in `given` (an `MSLCompileError` if one of
    `given` is missing or binds its arguments otherwise than the declaration read: a compiler error)."""
    if not given:
        return read
    by_name = {k.name: k for k in given}
    out = []
    for k in read:
        sig = by_name.pop(k.name, k)
        theirs, ours = _binding(sig), _binding(k)
        if theirs != ours:
            i = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise MSLCompileError(f"{metal_name}: the signature given for kernel `{k.name}` binds parameter {i} as "
                                  f"{theirs[i][0] if i < len(theirs) else 'nothing'}, its declaration as "
                                  f"{ours[i][0] if i < len(ours) else 'nothing'}")
        out.append(sig)
    if by_name:
        raise MSLCompileError(f"{metal_name}: no kernel function `{next(iter(by_name))}`, whose signature is given")
    return out


def _binding(k: KernelSignature) -> list[tuple]:
    """How a kernel's arguments bind, parameter by parameter: a description, then its name, kind, index, attribute,
    and whether it is a reference and `const`."""
    return [(f"`{p.name}` at [[{p.attribute or f'{p.kind.value}({p.index})'}]]{', by reference' * p.is_reference}"
             f"{', const' * p.is_const}", p.name, p.kind, p.index, p.attribute, p.is_reference, p.is_const)
            for p in k.params]


def _brace_kind(tokens: list[Token], i: int) -> str:
    """"class" if the `{` at tokens[i] opens a class body (after its template headers), else ""."""
    j = i
    while j > 0 and tokens[j - 1].text not in (";", "{", "}"):
        j -= 1
    while j < i and tokens[j].text == "template" and j + 1 < i and tokens[j + 1].text == "<":
        try:
            j = match_angle(tokens, j + 1) + 1
        except TemplateSyntaxError:
            return ""
    for t in tokens[j:i]:
        if t.text == "(":
            return ""
        if t.kind is Tok.IDENT and t.text in ("struct", "class", "union"):
            return "class"
    return ""


def _strip_metal_attributes(tokens: list[Token], i: int, errors: SourceErrors) -> list[tuple[int, int, str]]:
    """`[[threadgroup(0)]]` and the like on a parameter of a function that is not a kernel bind nothing: drop them
    (`threadgroup` is an empty macro in C++, which would leave `[[(0)]]`)."""
    close = _match(tokens, i, errors)
    items = [x for x in split_top_level(tokens[i + 1:close]) if x]
    if items and all(x[0].text in METAL_PARAM_ATTRIBUTES for x in items):
        return [(tokens[i].start, tokens[close].end, " ")]
    return []


def _match(tokens: list[Token], i: int, errors: SourceErrors) -> int:
    try:
        return match_paren(tokens, i)
    except LexError as e:
        raise errors.at(tokens[i], str(e)) from None


def _member_specialization(tokens: list[Token], i: int, errors: SourceErrors) -> list[tuple[int, int, str]]:
    """`template <> R f(params)` (or `f<A>(params)`) in a class body -> `R f(params)` (see the module docstring)."""
    edits = [(tokens[i].start, tokens[i + 2].end, " ")]
    k = i + 3
    while k < len(tokens) and tokens[k].text not in ("(", ";", "{", "}"):
        k += 1
    if k >= len(tokens) or tokens[k].text != "(":
        return edits   # a class specialization: left for the C++ compiler to judge
    if tokens[k - 1].text in (">", ">>"):
        depth = 0
        for j in range(k - 1, i + 2, -1):
            depth += {">": 1, ">>": 2, "<": -1}.get(tokens[j].text, 0)
            if depth == 0:
                if tokens[j - 1].kind is Tok.IDENT and tokens[j - 1].text != "operator":
                    edits.append((tokens[j].start, tokens[k - 1].end, " "))
                break
    return edits


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
    try:
        subs = tokenize(t.text.replace("#", " ", 1))
    except LexError:
        return []   # left to the C++ compiler to judge
    for sub in subs:
        if sub.kind is Tok.NUMBER:
            new = rewrite_float_literal(sub.text)
            if new != sub.text:
                edits.append((t.start + sub.start, t.start + sub.end, new))
    return edits


def _statement_end(tokens: list[Token], i: int, errors: SourceErrors) -> int:
    """The index of the `;` ending the declaration statement at tokens[i]. Its brackets must pair up before that
    `;`: skipping past an unpaired one would swallow the enclosing block's `}` and what follows it."""
    pairs = {")": "(", "]": "[", "}": "{"}
    opened: list[str] = []
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t.kind is not Tok.PUNCT:
            continue
        for ch in (t.text if t.text in ("[[", "]]") else (t.text,)):
            if ch in ("(", "[", "{"):
                opened.append(ch)
            elif ch in pairs:
                if not opened or opened[-1] != pairs[ch]:
                    raise errors.at(t, f"unbalanced {t.text!r}: it closes nothing this declaration opened")
                opened.pop()
        if t.text == ";":
            if opened:
                raise errors.at(t, f"this declaration ends before its {opened[-1]!r} is closed")
            return j
    raise errors.at(tokens[i], "this declaration has no ending `;`")


def _rewrite_threadgroup_decl(src: str, stmt: list[Token], slot: int, errors: SourceErrors):
    """`threadgroup T a[N], b;` -> references to runtime storage. Pointer declarations are left alone."""
    body = stmt[1:-1]  # without 'threadgroup' and ';'
    declarators = _declarators(body)
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
        eq = next((k for k, t in enumerate(toks) if t.text == "="), None)
        if eq is not None:
            # Metal compiles an initializer on a threadgroup variable (MLX's layer_norm had `= {0}`) and documents no
            # run of it: threadgroup memory starts uninitialised, so the initializer is dropped and the memory keeps
            # the device's fill bytes until written (sanitize=True reports reads before writes).
            toks = toks[:eq]
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


def _declarators(tokens: list[Token]) -> list[list[Token]]:
    """Split a declaration at its top-level commas (not those of template arguments: `vec<T, 2> a, b`)."""
    parts: list[list[Token]] = [[]]
    paren = angle = 0
    for t in tokens:
        if t.kind is Tok.PUNCT:
            if t.text in ("(", "[", "{", "[["):
                paren += 1
            elif t.text in (")", "]", "}", "]]"):
                paren -= 1
            elif paren == 0 and t.text == "<":
                angle += 1
            elif paren == 0 and t.text in (">", ">>"):
                angle = max(angle - len(t.text), 0)
            elif paren == 0 and angle == 0 and t.text == ",":
                parts.append([])
                continue
        parts[-1].append(t)
    return parts if parts != [[]] else []


def _apply_edits(src: str, edits: list[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for start, end, text in sorted(edits):
        if start < pos:  # an edit inside a replaced span (e.g. a literal in a rewritten declaration)
            continue
        out.append(src[pos:start])
        keep = src.count("\n", start, end) - text.count("\n")
        if keep == 0 and "\n" not in text and len(text) < end - start:
            text = text.ljust(end - start)   # keep the columns of what follows on the line
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


def _wrapper(sig: KernelSignature, checked: bool = False) -> str:
    """The C entry of a kernel; in a checked build (metile.metal.cpu.checked) it binds each pointer parameter with the
    range of its buffer (first byte, length in bytes), two words per buffer in an array whose address the launch puts
    in the slot before the first buffer's (`__b[-1]`)."""
    templated = "<" in sig.call_name
    args = []
    for n, p in enumerate(sig.params):
        ptype = f"__mt_param_t<{n}, __F>" if templated else p.type_text
        if p.kind is ParamKind.BUFFER:
            if p.is_reference:
                pointer = f"__mt_pointer_t<{ptype}>" if templated else f"{ptype[:-1]}*"
                args.append(f"*({pointer})__b[{p.index}]")
            elif checked:
                bound = ptype if templated else checked_type(ptype)
                args.append(f"bind_param<{bound}>::at(__b[{p.index}], (const uintptr_t*)__b[-1] + {2 * p.index})")
            else:
                args.append(f"({ptype})__b[{p.index}]")
        elif p.kind is ParamKind.THREADGROUP:
            args.append(f"({ptype})mt_threadgroup_param({p.index}u)")
        else:
            args.append(_position_expr(p))
    joined = ",\n        ".join(args)
    alias = f"    using __F = decltype(&{sig.call_name});\n" if templated else ""
    return (
        f'extern "C" __attribute__((visibility("default"))) void {entry_symbol(sig.name)}'
        f"(void* const* __b, const mt_thread_pos* __p) {{\n"
        f"    (void)__b; (void)__p;\n{alias}    {sig.call_name}(\n        {joined});\n}}\n"
    )


# parameter types of a function pointer type, for the wrappers of template instantiations
_PARAM_TYPES = """\
template <unsigned I, class... A> struct __mt_nth;
template <class H, class... T> struct __mt_nth<0, H, T...> { using type = H; };
template <unsigned I, class H, class... T> struct __mt_nth<I, H, T...> {
    using type = typename __mt_nth<I - 1, T...>::type; };
template <unsigned I, class F> struct __mt_param;
template <unsigned I, class R, class... A> struct __mt_param<I, R (*)(A...)> {
    using type = typename __mt_nth<I, A...>::type; };
template <unsigned I, class F> using __mt_param_t = typename __mt_param<I, F>::type;
template <class T> struct __mt_pointer { using type = T*; };
template <class T> struct __mt_pointer<T&> { using type = T*; };
template <class T> using __mt_pointer_t = typename __mt_pointer<T>::type;
"""


def _assemble(body: str, kernels: list[KernelSignature], metal_name: str, header: str, tensors: bool = False,
              checked: bool = False) -> str:
    wrappers = "\n".join(_wrapper(k, checked) for k in kernels)
    if any("<" in k.call_name for k in kernels):
        wrappers = _PARAM_TYPES + wrappers
    quoted = metal_name.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'#include "{header}"\n'
        + ('#include "mt_tensor.h"\n' if tensors else "")
        + f'#line 1 "{quoted}"\n'
        f"{body}\n"
        f'#line 1 "{quoted}.entry.cpp"\n'
        f"{wrappers}"
    )
