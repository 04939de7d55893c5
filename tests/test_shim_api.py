"""The Objective-C shim uses only selectors and names that Apple's Metal and Foundation APIs define.

metile/metal/gpu/shim.m is compiled only on macOS, so on Linux a misspelt selector or enumeration constant
passes every other test. (On a Mac an unknown selector is only a compiler warning, and an exception when the
message is sent.) These tests read shim.m, take out every message send, @selector, dot-syntax property and
identifier that starts with MTL or NS, and look each one up in facts transcribed from Apple's metal-cpp
headers. The facts are in tests/data/metal_api, and each file there names its source.

The reader is a tokenizer plus bracket matching, not a regular expression over lines. A `[` starts a
message send when it stands where an operand is expected, and a subscript when it follows a finished
expression: a name, a literal, a `]`, or a `)` that closes neither a cast nor the condition of an if, while
or for. The selector is read from the send's top-level tokens: each `name:` whose colon does not belong to
a `?:` is a keyword part, and a send without keyword parts ends in its one-word selector.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[1] / "metile" / "metal" / "gpu" / "shim.m"
FACTS = Path(__file__).resolve().parent / "data" / "metal_api"

# -- facts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiFacts:
    """Known selectors, and known names with their kind and, for enumeration members, their value."""

    selectors: frozenset[str]
    kinds: dict[str, str]
    values: dict[str, int]


def data_rows(path: Path) -> list[list[str]]:
    """The whitespace-separated fields of each line of a facts file, without `#` comments and blank lines."""
    rows = (line.split("#", 1)[0].split() for line in path.read_text().splitlines())
    return [row for row in rows if row]


@cache
def api_facts() -> ApiFacts:
    """The facts of tests/data/metal_api: both selector lists, both name lists and the allow-list."""
    selectors: set[str] = set()
    for name in ("selectors_metal.txt", "selectors_foundation.txt"):
        selectors.update(row[0] for row in data_rows(FACTS / name))
    kinds: dict[str, str] = {}
    values: dict[str, int] = {}
    for name in ("names_metal.txt", "names_foundation.txt", "allowlist.txt"):
        for kind, ident, *value in data_rows(FACTS / name):
            if kind == "selector":
                selectors.add(ident)
                continue
            kinds[ident] = kind
            if value:
                values[ident] = int(value[0])
    return ApiFacts(frozenset(selectors), kinds, values)


# -- tokens -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str  # "id", "num", "str" or "op"
    text: str
    line: int
    pos: int  # offset of the token in the source text


_TOKEN = re.compile(
    r"""(?P<space>[^\S\n]+|\\\n)
      | (?P<newline>\n)
      | (?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<str>@?"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
      | (?P<num>\.?\d(?:[eEpP][+-]|[\w.])*)
      | (?P<id>[A-Za-z_$]\w*)
      | (?P<op>->|\+\+|--|<<=?|>>=?|[<>=!+\-*/%&|^]=|&&|\|\||\.\.\.|\S)""",
    re.VERBOSE | re.DOTALL,
)
_LOGICAL_LINE = re.compile(r"(?:\\\n|[^\n])*")
_DEFINE = re.compile(r"#\s*define\s+\w+(?:\([^)]*\))?")  # the directive, the name and any parameters


def tokenize(text: str) -> list[Token]:
    """Objective-C tokens with their lines. Comments go; string and character literals are single tokens.
    A `#define` keeps its body, ended by a `;` token; every other preprocessor line goes."""
    tokens: list[Token] = []
    line, pos, line_start, in_define = 1, 0, True, False
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        kind, lexeme = m.lastgroup, m.group()
        if kind == "op" and lexeme == "#" and line_start:
            if d := _DEFINE.match(text, pos):
                in_define, line_start, pos = True, False, d.end()
                continue
            end = _LOGICAL_LINE.match(text, pos).end()
            line += text.count("\n", pos, end)
            pos = end
            continue
        if kind == "newline":
            if in_define:
                tokens.append(Token("op", ";", line, pos))
                in_define = False
            line_start = True
        elif kind not in ("space", "comment"):
            tokens.append(Token(kind, lexeme, line, pos))
            line_start = False
        line += lexeme.count("\n") if kind != "newline" else 1
        pos = m.end()
    return tokens


# -- the reader -------------------------------------------------------------------------------------------------

_CLOSE = {"(": ")", "[": "]", "{": "}"}
# Words after which an expression has not ended (so a `[` after them starts a message send).
_NOT_OPERANDS = frozenset(
    "return case else do sizeof if while for switch goto in throw typeof __typeof__ alignof _Alignof "
    "const volatile static extern register auto signed unsigned char short int long float double void "
    "struct union enum inline restrict".split()
)
_CONTROL = frozenset({"if", "while", "for", "switch", "catch", "synchronized"})
_TYPE_OPS = frozenset({"*", "<", ">", ">>", ",", "^"})
_QUALIFIERS = frozenset({"const", "_Nullable", "_Nonnull", "__strong", "__weak", "__autoreleasing", "nullable"})
_DECLARATION_END = frozenset({"=", ";", ",", ")"})


@dataclass(frozen=True)
class Use:
    """One use of the API: kind is "send", "@selector", "property" or "identifier"; pos is the offset of the
    name (for a send, of its first selector part) in the source text."""

    kind: str
    name: str
    line: int
    pos: int


class Reader:
    """The uses of Metal and Foundation in one Objective-C source text."""

    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.close: dict[int, int] = {}
        self.open: dict[int, int] = {}
        stack: list[int] = []
        for i, t in enumerate(self.tokens):
            if t.kind != "op":
                continue
            if t.text in _CLOSE:
                stack.append(i)
            elif t.text in _CLOSE.values():
                if not stack or _CLOSE[self.tokens[stack[-1]].text] != t.text:
                    raise ValueError(f"line {t.line}: unbalanced {t.text!r}")
                j = stack.pop()
                self.close[j], self.open[i] = i, j
        if stack:
            raise ValueError(f"line {self.tokens[stack[-1]].line}: {self.tokens[stack[-1]].text!r} is never closed")

    def is_op(self, i: int, *texts: str) -> bool:
        return 0 <= i < len(self.tokens) and self.tokens[i].kind == "op" and self.tokens[i].text in texts

    def is_id(self, i: int) -> bool:
        return 0 <= i < len(self.tokens) and self.tokens[i].kind == "id"

    def is_cast(self, i: int) -> bool:
        """Whether the `(` at i opens a cast: type words, `*` and `<...>` inside, and no finished expression
        (such as a function's name) before it."""
        inner = self.tokens[i + 1 : self.close[i]]
        return (
            bool(inner)
            and inner[0].kind == "id"
            and all(t.kind == "id" or t.text in _TYPE_OPS for t in inner)
            and not self.ends_expression(i - 1)
        )

    def ends_expression(self, i: int) -> bool:
        """Whether the token at i ends an expression, so that a `[` after it is a subscript."""
        if i < 0:
            return False
        t = self.tokens[i]
        if t.kind in ("num", "str"):
            return True
        if t.kind == "id":
            return t.text not in _NOT_OPERANDS
        if t.text == ")":
            j = self.open[i]
            control = self.is_id(j - 1) and self.tokens[j - 1].text in _CONTROL
            return not control and not self.is_cast(j)
        return t.text == "]"  # after `}` a statement starts

    def atoms(self, i: int) -> list[int]:
        """The tokens directly inside the group opened at i; a nested group counts as its opening token."""
        found, j, end = [], i + 1, self.close[i]
        while j < end:
            found.append(j)
            j = self.close.get(j, j) + 1
        return found

    def send(self, i: int) -> tuple[str, list[int]] | None:
        """The selector of the message send opened by the `[` at i and the indices of its parts, or None when
        the bracket is a subscript, an array literal or a designator."""
        if self.is_op(i - 1, "@") or self.ends_expression(i - 1):
            return None
        atoms = self.atoms(i)
        parts: list[int] = []
        open_conditionals = 0
        for k, a in enumerate(atoms):
            if self.is_op(a, "?"):
                open_conditionals += 1
            elif self.is_op(a, ":"):
                if open_conditionals:
                    open_conditionals -= 1
                else:
                    parts.append(atoms[k - 1] if k > 0 and self.is_id(atoms[k - 1]) else a)  # `[x a:1 :2]`
        if parts:
            return "".join(f"{self.tokens[p].text}:" if self.is_id(p) else ":" for p in parts), parts
        if len(atoms) >= 2 and self.is_id(atoms[-1]):
            return self.tokens[atoms[-1]].text, [atoms[-1]]
        return None

    def object_names(self) -> set[str]:
        """Names declared as objects (`id<P> x`, `id x`, `MTLX* x`, `NSX<T>* x`): dot syntax on them is a
        property access."""
        names, toks = set(), self.tokens
        for i, t in enumerate(toks):
            if t.kind != "id" or not (t.text == "id" or re.match(r"(MTL|NS)[A-Z0-9]", t.text)):
                continue
            j, depth = i + 1, 0
            while self.is_op(j, "<", ">", ">>") or (depth > 0 and j < len(toks)):
                if toks[j].kind == "op":
                    depth += toks[j].text.count("<") - toks[j].text.count(">")
                j += 1
                if depth <= 0:
                    break
            pointer = self.is_op(j, "*")
            j += pointer
            while self.is_id(j) and toks[j].text in _QUALIFIERS:
                j += 1
            ends = self.is_op(j + 1, *_DECLARATION_END) or (self.is_id(j + 1) and toks[j + 1].text == "in")
            declared = self.is_id(j) and ends
            if (t.text == "id" or pointer) and declared and toks[j].text not in _QUALIFIERS:
                names.add(toks[j].text)
        return names

    def uses(self) -> list[Use]:
        """Every send, @selector, dot-syntax property and MTL/NS identifier, sends in the order of their `[`."""
        toks, uses, quiet = self.tokens, [], set()  # quiet: ids that are not API names (selector parts, members)
        for i, t in enumerate(toks):
            if self.is_op(i, "[") and (found := self.send(i)) is not None:
                name, parts = found
                uses.append(Use("send", name, toks[parts[0]].line, toks[parts[0]].pos))
                quiet.update(parts)
            elif t.kind == "id" and t.text in ("selector", "available") and self.is_op(i - 1, "@"):
                if self.is_op(i + 1, "("):
                    inner = range(i + 2, self.close[i + 1])
                    quiet.update(inner)
                    if t.text == "selector":
                        name = "".join(toks[j].text for j in inner)
                        uses.append(Use("@selector", name, t.line, toks[i + 2].pos))
            elif t.kind == "id" and t.text == "__builtin_available" and self.is_op(i + 1, "("):
                quiet.update(range(i + 2, self.close[i + 1]))
        objects = self.object_names()
        for i, t in enumerate(toks):
            if self.is_op(i, ".") and self.is_id(i - 1) and toks[i - 1].text in objects and self.is_id(i + 1):
                prop = toks[i + 1].text
                setter = self.is_op(i + 2, "=")
                name = f"set{prop[0].upper()}{prop[1:]}:" if setter else prop
                uses.append(Use("property", name, toks[i + 1].line, toks[i + 1].pos))
            if t.kind == "id" and re.match(r"MTL|NS", t.text) and i not in quiet and not self.is_op(i - 1, ".", "->"):
                uses.append(Use("identifier", t.text, t.line, t.pos))
        return uses


def api_uses(text: str) -> list[Use]:
    """The uses of Metal and Foundation in an Objective-C source text (see Reader.uses)."""
    return Reader(text).uses()


def unknown_uses(text: str, facts: ApiFacts) -> list[Use]:
    """The uses of `text` that the facts do not know, in source order."""
    bad = []
    for use in api_uses(text):
        match use.kind:
            case "send" | "@selector":
                known = use.name in facts.selectors
            case "property":  # a getter may be spelled isX (getter=isX in the header)
                known = use.name in facts.selectors or f"is{use.name[:1].upper()}{use.name[1:]}" in facts.selectors
            case _:
                known = use.name in facts.kinds
        if not known:
            bad.append(use)
    return sorted(bad, key=lambda u: u.pos)


def describe(uses: list[Use]) -> str:
    """One line per use, `shim.m:LINE: KIND 'NAME'`."""
    return "\n".join(f"  shim.m:{u.line}: {u.kind} {u.name!r}" for u in uses)


# -- numeric stand-ins --------------------------------------------------------------------------------------------

# The shim spells some enumeration members as numbers, so that it builds with SDKs that predate the names:
# `static const NSInteger kFamilyApple7 = 1007;` stands for MTLGPUFamilyApple7.
_STAND_IN = re.compile(r"static\s+const\s+\w+\s+k(Family|LanguageVersion)(\w+)\s*=\s*([^;]+);")
_STAND_IN_PREFIX = {"Family": "MTLGPUFamily", "LanguageVersion": "MTLLanguageVersion"}
_OPERATORS = {ast.LShift: operator.lshift, ast.BitOr: operator.or_, ast.Add: operator.add, ast.Mult: operator.mul}


def _evaluate(node: ast.AST) -> int:
    """The value of an expression tree of integer literals joined by <<, |, + and *."""
    match node:
        case ast.Expression(body):
            return _evaluate(body)
        case ast.Constant(value=int() as value):
            return value
        case ast.BinOp(left, op, right) if type(op) in _OPERATORS:
            return _OPERATORS[type(op)](_evaluate(left), _evaluate(right))
    raise ValueError(f"not a plain integer expression: {ast.unparse(node)}")


def c_integer(expr: str) -> int:
    """The value of a C integer constant expression made of literals, casts, <<, |, + and *."""
    expr = re.sub(r"\(\s*[A-Za-z_]\w*\s*\)", "", expr)  # casts
    expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr)
    return _evaluate(ast.parse(expr.strip(), mode="eval"))


def numeric_stand_ins(text: str) -> list[tuple[int, str, int]]:
    """(line, Objective-C name, value) for each numeric stand-in constant of the shim."""
    return [
        (text.count("\n", 0, m.start()) + 1, _STAND_IN_PREFIX[m.group(1)] + m.group(2), c_integer(m.group(3)))
        for m in _STAND_IN.finditer(text)
    ]


# -- tests ------------------------------------------------------------------------------------------------------


def test_facts_cover_the_metal4_api_the_shim_uses():
    facts = api_facts()
    assert len(facts.selectors) > 1500
    for sel in ("newLibraryWithSource:options:error:", "commandBufferWithDescriptor:", "setErrorOptions:",
                "setLabel:", "label", "length", "errorState", "setMathMode:", "setMathFloatingPointFunctions:",
                "setFastMathEnabled:", "supportsFamily:", "waitUntilCompleted", "status", "GPUStartTime",
                "GPUEndTime", "newMTL4CommandQueue", "release", "retain", "autorelease", "alloc", "init",
                "respondsToSelector:", "UTF8String", "localizedDescription", "userInfo", "objectForKey:",
                "count", "objectAtIndex:", "bytes"):
        assert sel in facts.selectors, sel
    expected = {"MTLGPUFamilyApple7": 1007, "MTLGPUFamilyApple10": 1010, "MTLGPUFamilyMetal4": 5002,
                "MTLLanguageVersion3_2": 196610, "MTLLanguageVersion4_0": 262144, "MTLMathModeFast": 2,
                "MTLMathFloatingPointFunctionsPrecise": 1, "MTLCommandBufferErrorOptionEncoderExecutionStatus": 1,
                "MTLCommandBufferStatusError": 5, "MTLCommandEncoderErrorStateFaulted": 4,
                "MTLResourceStorageModeShared": 0, "MTLDataTypeFloat": 3}
    assert {name: facts.values.get(name) for name in expected} == expected
    for name in ("MTLDevice", "MTLCommandBufferDescriptor", "MTLCompileOptions", "MTLCommandBufferEncoderInfo",
                 "MTLCommandBufferEncoderInfoErrorKey", "MTLCreateSystemDefaultDevice", "MTLCopyAllDevices",
                 "NSError", "NSString", "NSDictionary", "NSArray", "NSURL", "NSUInteger"):
        assert name in facts.kinds, name


def test_shim_uses_only_known_api():
    bad = unknown_uses(SHIM.read_text(), api_facts())
    assert not bad, (
        "shim.m uses names that Apple's Metal and Foundation APIs (tests/data/metal_api) do not define; fix "
        "the spelling, or add the name to allowlist.txt with the header it comes from:\n" + describe(bad)
    )


def test_reader_finds_the_shims_sends():
    sends = {u.name for u in api_uses(SHIM.read_text()) if u.kind == "send"}
    assert len(sends) >= 30, sorted(sends)
    assert {"newLibraryWithSource:options:error:", "dispatchThreadgroups:threadsPerThreadgroup:",
            "newBufferWithBytesNoCopy:length:options:deallocator:", "newComputePipelineStateWithFunction:error:",
            "setBuffer:offset:atIndex:", "alloc", "init", "autorelease", "localizedDescription",
            "waitUntilCompleted", "commit"} <= sends


def _misspelt(part: str) -> str:
    """`part` with its last two letters swapped (Length -> Lenght), or with an x added if they are alike."""
    return part[:-2] + part[-1] + part[-2] if part[-1] != part[-2] else part + "x"


def test_a_misspelt_selector_is_reported():
    text, facts = SHIM.read_text(), api_facts()
    sends = [u for u in api_uses(text) if u.kind == "send" and u.name.endswith(":")]
    target = next((u for u in sends if u.name == "newBufferWithLength:options:"), sends[0])
    part = target.name.split(":")[0]
    assert text[target.pos : target.pos + len(part)] == part
    typo = _misspelt(part)
    planted = text[: target.pos] + typo + text[target.pos + len(part) :]
    bad = unknown_uses(planted, facts)
    assert [(u.kind, u.name, u.line) for u in bad] == [("send", typo + target.name[len(part) :], target.line)]
    # the last part of the longest send (the shim spreads such sends over lines) is read as well
    longest = max(sends, key=lambda u: u.name.count(":"))
    *head, last, _ = longest.name.split(":")
    at = text.index(last + ":", longest.pos + len(head[0]))
    planted = text[:at] + _misspelt(last) + text[at + len(last) :]
    bad = unknown_uses(planted, facts)
    assert [(u.name, u.line) for u in bad] == [(":".join([*head, _misspelt(last), ""]), longest.line)]


def test_a_misspelt_enumeration_constant_is_reported():
    text, facts = SHIM.read_text(), api_facts()
    planted = text + "static const NSInteger kPlanted = MTLGPUFamilyApple77;\n"
    bad = unknown_uses(planted, facts)
    assert [(u.kind, u.name, u.line) for u in bad] == [("identifier", "MTLGPUFamilyApple77", text.count("\n") + 1)]
    constant = next(u for u in api_uses(text) if u.kind == "identifier" and u.name in facts.values)
    typo = _misspelt(constant.name)
    planted = text[: constant.pos] + typo + text[constant.pos + len(constant.name) :]
    assert [(u.name, u.line) for u in unknown_uses(planted, facts)] == [(typo, constant.line)]


SAMPLE = r"""
#import <Metal/Metal.h>   /* [not sendMe] */
#define AS_BUFFER(h) ((id<MTLBuffer>)(void*)(h))
#define LENGTH_OF(h) [AS_BUFFER(h) length]
static void f(id<MTLDevice> device, MTLCompileOptions* opts, NSArray<id<MTLDevice>>* all, char** out) {
    char text[256];                                   // [notASend either]
    const char* s = "[[nor this]]";
    text[0] = '[';
    id<MTLLibrary> lib = [device newLibraryWithSource:[NSString stringWithFormat:@"%s", s]
                                              options:opts
                                                error:NULL];
    [opts setFastMathEnabled:out != NULL ? YES : NO];
    size_t n = (size_t)[[all objectAtIndex:0] maxBufferLength] + LENGTH_OF(out[1]);
    if (lib != nil) [lib release];
    for (id<MTLDevice> d in [all reverseObjectEnumerator]) {
        [d newBufferWithLength:n options:(MTLResourceOptions)(MTLResourceStorageModeShared | 0)];
    }
    [device newLibraryWithSource:@"" options:opts completionHandler:^(id<MTLLibrary> l, NSError* e) {
        SEL s2 = @selector(newFunctionWithName:constantValues:error:);
        if (@available(macOS 26.0, *)) { opts.mathMode = MTLMathModeFast; }
        NSUInteger v = opts.languageVersion;
    }];
}
"""


def test_reader_reads_objective_c_forms():
    uses = api_uses(SAMPLE)
    assert [(u.name, u.line) for u in uses if u.kind == "send"] == [
        ("length", 4),
        ("newLibraryWithSource:options:error:", 9),
        ("stringWithFormat:", 9),
        ("setFastMathEnabled:", 12),
        ("maxBufferLength", 13),
        ("objectAtIndex:", 13),
        ("release", 14),
        ("reverseObjectEnumerator", 15),
        ("newBufferWithLength:options:", 16),
        ("newLibraryWithSource:options:completionHandler:", 18),
    ]
    assert [u.name for u in uses if u.kind == "@selector"] == ["newFunctionWithName:constantValues:error:"]
    assert [u.name for u in uses if u.kind == "property"] == ["setMathMode:", "languageVersion"]
    assert sorted({u.name for u in uses if u.kind == "identifier"}) == [
        "MTLBuffer", "MTLCompileOptions", "MTLDevice", "MTLLibrary", "MTLMathModeFast", "MTLResourceOptions",
        "MTLResourceStorageModeShared", "NSArray", "NSError", "NSString", "NSUInteger",
    ]
    # reverseObjectEnumerator is not among metal-cpp's Foundation selectors, and macOS in @available is no name
    assert [(u.kind, u.name) for u in unknown_uses(SAMPLE, api_facts())] == [("send", "reverseObjectEnumerator")]


def test_numeric_stand_ins_match_the_enumerations():
    stand_ins = numeric_stand_ins(SHIM.read_text())
    if not stand_ins:
        pytest.skip("shim.m spells no enumeration member as a number")
    values = api_facts().values
    wrong = [(line, name, value, values.get(name)) for line, name, value in stand_ins if values.get(name) != value]
    assert not wrong, "\n".join(f"  shim.m:{ln}: {n} is {v} here but {want} in the API" for ln, n, v, want in wrong)


def test_c_integer_reads_the_stand_in_forms():
    assert c_integer("1007") == 1007
    assert c_integer("(NSUInteger)4 << 16") == 262144
    assert c_integer("(3u << 16) | 2") == 196610
    with pytest.raises(ValueError):
        c_integer("__import__('os')")
