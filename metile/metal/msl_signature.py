"""Kernel signatures of MSL sources: the `[[buffer(i)]]`, `[[threadgroup(i)]]` and thread-position
parameters of each `kernel` function, as every device needs them to bind arguments.

Kernels are `kernel`/`[[kernel]]` functions, and explicit instantiations of kernel templates named
with `[[host_name("name")]]` (their parameter types with the template arguments substituted).
Parameters without `[[buffer(i)]]` take buffer indices in order, as Metal assigns them; an array
parameter (`constant int s[2]`) is a buffer holding the array.

Parsing also records the source edits the CPU device's front end makes to a kernel's declaration
(`kernel` becomes `static`, parameter attributes are dropped); other devices ignore them.

The values read (`KernelSignature`, `Param`, `ParamKind`) are defined in `metile.emit.signature`, where the emitter
writes them for the kernels metile compiles: devices read signatures from MSL text only for hand-written MSL.
"""

from __future__ import annotations

import attrs

from metile.emit.signature import KernelSignature, Param, ParamKind
from metile.ir.errors import Loc
from metile.metal.errors import MSLCompileError, MSLUnsupportedError
from metile.metal.msl_lex import LexError, Tok, Token, match_paren, split_top_level, tokenize
from metile.metal.msl_preprocess import LineMap
from metile.metal.msl_templates import (
    TemplateParam,
    TemplateSyntaxError,
    bind,
    const_int,
    join,
    match_angle,
    parse_header,
    split_args,
    string_literal,
    substitute,
)

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
# attributes of kernel parameters that are only recorded (the `fconst` work reads them)
_RECORDED_ATTRIBUTES = {"function_constant"}
# the address spaces a kernel's pointer and reference parameters may be declared in
_KERNEL_SPACES = frozenset({"device", "constant", "threadgroup"})
METAL_PARAM_ATTRIBUTES = {"buffer", "threadgroup", "id", "stage_in", "texture", "sampler", *POSITION_ATTRIBUTES}


class SourceErrors:
    """Errors located on the user's file and line (through the preprocessor's line map when there is one)."""

    def __init__(self, src: str, metal_name: str, line_map: LineMap | None = None):
        self.lines = src.splitlines()
        self.metal_name = metal_name
        self.line_map = line_map

    def origin(self, line: int) -> tuple[str, int]:
        return self.line_map.locate(line) if self.line_map is not None else (self.metal_name, line)

    def at_line(self, line: int, col: int, message: str, cls: type[MSLCompileError] = MSLCompileError, *,
                word: str = "") -> MSLCompileError:
        file, n = self.origin(line)
        if self.line_map is not None:   # columns of preprocessed text are not the file's: find the word
            text = self.line_map.source_line(file, n)
            col = text.find(word) if word and word in text else len(text) - len(text.lstrip())
        else:
            text = self.lines[n - 1] if 0 < n <= len(self.lines) else ""
        return cls(message, Loc(file, n, col), source_line=text)

    def at(self, tok: Token, message: str, cls: type[MSLCompileError] = MSLCompileError) -> MSLCompileError:
        return self.at_line(tok.line, tok.col, message, cls, word=tok.text)


def lex(src: str, errors: SourceErrors) -> list[Token]:
    try:
        return tokenize(src)
    except LexError as e:
        raise errors.at_line(e.line, e.col, str(e)) from None


@attrs.frozen
class KernelDecl:
    """A kernel function's declaration as written: attribute items, name and parameter token runs."""

    items: tuple[tuple[Token, ...], ...]
    name_tok: Token
    runs: tuple[tuple[Token, ...], ...]


@attrs.frozen
class KernelTemplate:
    params: tuple[TemplateParam, ...]
    decl: KernelDecl


def kernel_signatures(src: str, metal_name: str = "kernel.metal", *, text: str | None = None,
                      line_map: LineMap | None = None) -> tuple[KernelSignature, ...]:
    """The kernel functions of an MSL source and their parameters (for any device: nothing is refused).

    `text` and `line_map` are the preprocessed source when it needed the preprocessor."""
    errors = SourceErrors(src, metal_name, line_map)
    tokens = [t for t in lex(src if text is None else text, errors) if t.kind is not Tok.DIRECTIVE]
    found: list[KernelSignature] = []
    templates: dict[str, KernelTemplate] = {}
    depth, i = 0, 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind is Tok.PUNCT and t.text in ("{", "}"):
            depth = depth + 1 if t.text == "{" else max(depth - 1, 0)   # as translate() counts them
        elif depth == 0 and (hit := kernel_at(tokens, i, errors, templates)) is not None:
            sigs, _, i = hit
            add_kernels(found, sigs, errors)
            continue
        i += 1
    return tuple(found)


def add_kernels(found: list[KernelSignature], sigs: list[KernelSignature], errors: SourceErrors) -> None:
    for sig in sigs:
        if any(k.name == sig.name for k in found):
            raise errors.at_line(sig.line, 0, f"two kernel functions are named `{sig.name}`")
        found.append(sig)


def kernel_at(tokens: list[Token], i: int, errors: SourceErrors, templates: dict[str, KernelTemplate]):
    """If a kernel, a kernel template or an instantiation of one starts at tokens[i]: (signatures, edits,
    index after it); else None. Kernel templates found are added to `templates`."""
    t = tokens[i]
    try:
        if t.kind is Tok.IDENT and t.text == "template" and i + 1 < len(tokens):
            if tokens[i + 1].text == "<":
                params, j = parse_header(tokens, i)
                if j < len(tokens) and starts_kernel(tokens, j):
                    decl, edits, end = parse_kernel(tokens, j, errors)
                    templates[decl.name_tok.text] = KernelTemplate(tuple(params), decl)
                    return [], edits, end
                return None
            if starts_kernel(tokens, i + 1):
                return _instantiation(tokens, i, errors, templates)
            return None
        if starts_kernel(tokens, i):
            decl, edits, end = parse_kernel(tokens, i, errors)
            return [signature(decl, errors, {})], edits, end
    except TemplateSyntaxError as e:
        raise errors.at(e.token, str(e)) from None
    except LexError as e:
        raise errors.at_line(e.line, e.col, str(e)) from None
    return None


def starts_kernel(tokens: list[Token], i: int) -> bool:
    """Whether the attributes and `kernel` words starting at tokens[i] declare a kernel."""
    j = i
    while j < len(tokens):
        t = tokens[j]
        if t.kind is Tok.IDENT and t.text == "kernel":
            return True
        if not (t.kind is Tok.PUNCT and t.text == "[["):
            return False
        close = match_paren(tokens, j)
        if any(item and item[0].text == "kernel" for item in split_top_level(tokens[j + 1:close])):
            return True
        j = close + 1
    return False


def _head(tokens: list[Token], i: int) -> tuple[list[list[Token]], list[tuple[int, int, str]], int]:
    """The attribute items and `kernel` words from tokens[i] on, the edits that blank them, and the index after."""
    items: list[list[Token]] = []
    edits: list[tuple[int, int, str]] = []
    j = i
    while j < len(tokens):
        t = tokens[j]
        if t.kind is Tok.PUNCT and t.text == "[[":
            close = match_paren(tokens, j)
            items += [x for x in split_top_level(tokens[j + 1:close]) if x]
            edits.append((t.start, tokens[close].end, " "))
            j = close + 1
        elif t.kind is Tok.IDENT and t.text == "kernel":
            items.append([t])
            edits.append((t.start, t.end, " "))
            j += 1
        else:
            break
    return items, edits, j


def parse_kernel(tokens: list[Token], i: int, errors: SourceErrors) -> tuple[KernelDecl, list, int]:
    """Parse `[[kernel]] void name(params) {` starting at tokens[i]; returns the declaration and edits."""
    items, edits, j = _head(tokens, i)
    edits[0] = (edits[0][0], edits[0][1], "static")
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
    runs = split_top_level(tokens[k + 1:close])
    for run in runs:
        edits += [(run[a].start, run[match_paren(run, a)].end, " ") for a, t in enumerate(run) if t.text == "[["]
    decl = KernelDecl(tuple(tuple(x) for x in items), name_tok, tuple(tuple(r) for r in runs))
    return decl, edits, close + 1


def _instantiation(tokens: list[Token], i: int, errors: SourceErrors, templates: dict[str, KernelTemplate]):
    """`template [[host_name("n")]] [[kernel]] decltype(f<A>) f<A>;` (or `... void f<A>(...);`) at tokens[i]."""
    items, _, j = _head(tokens, i + 1)
    end = j
    paren, found = 0, None
    while end < len(tokens) and not (paren == 0 and tokens[end].text == ";"):
        t = tokens[end]
        if t.kind is Tok.PUNCT and t.text in ("(", "[", "{"):
            paren += 1
        elif t.kind is Tok.PUNCT and t.text in (")", "]", "}"):
            paren -= 1
        elif paren == 0 and t.kind is Tok.IDENT and end + 1 < len(tokens) and tokens[end + 1].text == "<":
            found = end   # the template's name; its arguments (`f<Sum<float>, 4>`) may name templates too
            end = match_angle(tokens, end + 1)
        end += 1
    if found is None or end >= len(tokens):
        raise errors.at(tokens[i], "cannot read this kernel instantiation (expected "
                                   "`template [[host_name(\"name\")]] [[kernel]] decltype(f<T>) f<T>;`)")
    name = tokens[found].text
    tmpl = templates.get(name)
    if tmpl is None:
        raise errors.at(tokens[found], f"`{name}` is not a kernel template defined before this instantiation")
    close = match_angle(tokens, found + 1)
    args = [join([t.text for t in run]) for run in split_args(tokens[found + 2:close])]
    mapping = bind(list(tmpl.params), args, tokens[found], f"kernel template `{name}`")
    host = _host_name(items, errors)
    if host is None:
        raise errors.at(tokens[i], f"an instantiation of kernel template `{name}` needs [[host_name(\"name\")]] "
                                   "to be callable")
    callee = f"{name}<{', '.join(args)}>"
    sig = signature(tmpl.decl, errors, mapping, extra=items, callee=callee, line=tokens[i].line)
    cpp = f"template decltype({callee}) {callee};"
    return [sig], [(tokens[i].start, tokens[end].end, cpp)], end + 1


def _host_name(items, errors: SourceErrors) -> str | None:
    for item in items:
        if item[0].text == "host_name":
            value = string_literal(list(item[2:-1])) if len(item) > 3 and item[1].text == "(" else None
            if value is None:
                raise errors.at(item[0], "[[host_name(...)]] needs a string literal")
            return value
    return None


def signature(decl: KernelDecl, errors: SourceErrors, mapping: dict[str, str], *, extra=(), callee: str = "",
              line: int = 0) -> KernelSignature:
    """The signature of a kernel declaration, with template parameters replaced as `mapping` says."""
    fn = decl.name_tok
    max_threads = 0
    for item in (*decl.items, *extra):
        aname = item[0].text
        if aname == "max_total_threads_per_threadgroup":
            max_threads = _int_argument(item, errors, mapping)
            if max_threads <= 0:
                raise errors.at(item[0], f"[[max_total_threads_per_threadgroup]] must be positive, not {max_threads}")
        elif aname not in ("kernel", "host_name"):
            raise errors.at(item[0], f"unsupported kernel function attribute [[{aname}]]", MSLUnsupportedError)
    host = _host_name(decl.items, errors)
    params = _assign_indices([_parse_param(list(run), errors, fn, mapping) for run in decl.runs], errors, fn)
    _check_params(params, errors, fn)
    name = _host_name(extra, errors) or host or fn.text
    if not callee and name != fn.text:
        callee = fn.text
    return KernelSignature(name=name, params=tuple(params), line=errors.origin(line or fn.line)[1],
                           max_total_threads=max_threads, callee=callee,
                           function=fn.text if fn.text != name else "")


def _int_argument(item, errors: SourceErrors, mapping: dict[str, str]) -> int:
    """The integer constant expression in `name(expr)`."""
    if len(item) < 4 or item[1].text != "(" or item[-1].text != ")":
        raise errors.at(item[0], f"[[{item[0].text}(...)]] needs an integer argument")
    texts = [t.text for t in tokenize(substitute([t.text for t in item[2:-1]], mapping))]
    value = const_int(texts)
    if value is None:
        raise errors.at(item[0], f"[[{item[0].text}({join([t.text for t in item[2:-1]])})]]: the CPU device "
                                 "reads only integer constant expressions of literals here", MSLUnsupportedError)
    return value


def _parse_param(run: list[Token], errors: SourceErrors, fn: Token, mapping: dict[str, str]) -> Param:
    a0 = next((n for n, t in enumerate(run) if t.text == "[["), None)
    decl, items = run, []
    if a0 is not None:
        a1 = match_paren(run, a0)
        decl, items = run[:a0], [x for x in split_top_level(run[a0 + 1:a1]) if x]
    if not run:
        raise errors.at(fn, f"kernel `{fn.text}` has an empty parameter")
    dims: list[str] = []
    while len(decl) > 2 and decl[-1].text == "]" and any(t.text == "[" for t in decl):
        opener = max(n for n, t in enumerate(decl) if t.text == "[")
        dims.insert(0, "[" + substitute([t.text for t in decl[opener + 1:-1]], mapping) + "]")
        decl = decl[:opener]
    if len(decl) < 2 or decl[-1].kind is not Tok.IDENT:
        raise errors.at(run[0], "cannot read this kernel parameter (expected `type name [[attribute]]`)")
    name = decl[-1].text
    type_text = substitute([t.text for t in decl[:-1]], mapping)
    line = errors.origin(decl[-1].line)[1]
    index, bound_as, position, fconst = -1, "", "", ""
    for item in items:
        aname = item[0].text
        if aname in ("buffer", "threadgroup"):
            index, bound_as = _int_argument(item, errors, mapping), aname
            if index < 0:
                raise errors.at(item[0], f"[[{aname}({index})]] of `{name}` is negative")
        elif aname in POSITION_ATTRIBUTES:
            position = aname
        elif aname in _RECORDED_ATTRIBUTES:
            fconst = _function_constant_attribute(item, errors)
        else:
            raise errors.at(item[0], f"unsupported kernel parameter attribute [[{aname}]]", MSLUnsupportedError)
    if position:
        _, comps = POSITION_ATTRIBUTES[position]
        base = type_text.split()[-1] if type_text else ""
        ok = base in _SCALAR_POSITION_TYPES or (base in VECTOR_POSITION_TYPES and comps == 3)
        if not ok:
            raise errors.at(decl[0], f"[[{position}]] parameter `{name}` has type `{type_text}`; "
                                     f"expected uint, ushort" + (", uint2/3 or ushort2/3" if comps == 3 else ""))
        return Param(name, ParamKind.POSITION, type_text, attribute=position, line=line, function_constant=fconst)
    if dims:
        type_text += "*"
    is_ref = type_text.endswith("&")
    if not (type_text.endswith("*") or is_ref):
        if bound_as:
            raise errors.at(decl[0], f"[[{bound_as}({index})]] parameter `{name}` must be a pointer or reference")
        raise errors.at(run[0], f"parameter `{join([t.text for t in run])}` of kernel `{fn.text}` "
                                "needs an attribute such as [[buffer(0)]], or a pointer or reference type")
    words = type_text.replace("*", " ").replace("&", " ").split()
    if not _KERNEL_SPACES & set(words):
        what = "reference" if is_ref else "pointer"
        has = "is in the thread address space" if "thread" in words else "has no address space"
        raise errors.at(decl[0], f"{what} parameter `{name}` of kernel `{fn.text}` {has}: a kernel's pointer and "
                                 "reference parameters must be declared `device`, `constant` or `threadgroup` "
                                 "(as in `device float* x`)")
    if bound_as == "threadgroup" and "threadgroup" not in words:
        raise errors.at(decl[0], f"[[threadgroup({index})]] parameter `{name}` must be a threadgroup pointer")
    kind = ParamKind.THREADGROUP if bound_as == "threadgroup" or (not bound_as and "threadgroup" in words) \
        else ParamKind.BUFFER
    return Param(name, kind, type_text, index=index, is_reference=is_ref, line=line, function_constant=fconst,
                 array="".join(dims))


def _assign_indices(params: list[Param], errors: SourceErrors, fn: Token) -> list[Param]:
    """Parameters without an index take indices in order (per kind), as Metal assigns them: the lowest index no
    parameter has, which is also the one after the previous parameter's whenever a kernel gives the indexed
    parameters first (`in [[buffer(0)]], out [[buffer(1)]], constant int& n` binds n at 2). A kernel where those two
    readings differ is refused rather than bound one way."""
    for kind in (ParamKind.BUFFER, ParamKind.THREADGROUP):
        mine = [p for p in params if p.kind is kind]
        if all(p.index >= 0 for p in mine):
            continue
        used = {p.index for p in mine if p.index >= 0}
        previous = -1
        for p in mine:
            if p.index >= 0:
                previous = p.index
                continue
            lowest = next(n for n in range(len(mine) + max(used, default=0) + 1) if n not in used)
            if used and lowest != previous + 1:
                raise errors.at(fn, f"kernel `{fn.text}`: `{p.name}` has no [[{kind.value}(i)]] index and comes "
                                    f"after parameters indexed out of order; the CPU device cannot tell whether "
                                    f"Metal binds it at {lowest} or {previous + 1}: give it an index",
                                MSLUnsupportedError)
            used.add(lowest)
            previous = lowest
            params[params.index(p)] = attrs.evolve(p, index=lowest)
    return params


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
