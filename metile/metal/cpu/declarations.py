"""Reading the declarations of MSL (C++) tokens: matching brackets, and the `constexpr` of a function declaration
(shared by the guards of simd collectives, `arms`, the instrumented build's counts, `alu_counts`, and the register
estimate, `registers`)."""

from __future__ import annotations

from metile.metal.msl_lex import Tok, Token


def brackets(tokens: list[Token]) -> tuple[dict[int, int] | None, dict[int, int]]:
    """close[i] for each (, [, {, [[ at i and open_of[j] for its closer; (None, {}) if they do not balance."""
    close: dict[int, int] = {}
    open_of: dict[int, int] = {}
    stack: list[int] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for j, t in enumerate(tokens):
        if t.kind is not Tok.PUNCT:
            continue
        x = t.text
        if x in ("(", "[", "{", "[["):
            stack.append(j)
        elif x in pairs or x == "]]":
            want = "[[" if x == "]]" and stack and tokens[stack[-1]].text == "[[" else pairs.get(x, "[")
            for _ in range(2 if x == "]]" and want == "[" else 1):
                if not stack or tokens[stack[-1]].text != want:
                    return None, {}
                i = stack.pop()
                close[i] = j
                open_of[j] = i
    return (close, open_of) if not stack else (None, {})


def is_constexpr(tokens: list[Token], lbrace: int, open_of: dict[int, int]) -> bool:
    """Whether the function whose body opens at tokens[lbrace] is declared `constexpr` (or `consteval`)."""
    return bool(constexpr_tokens(tokens, lbrace, open_of))


def constexpr_tokens(tokens: list[Token], lbrace: int, open_of: dict[int, int]) -> list[int]:
    """The indices of the `constexpr` and `consteval` of the declaration of the function whose body opens at
    tokens[lbrace]: back to the `;`, `{` or `}` before it, its parameter list passed over whole (a default argument
    such as `Int<0>{}` holds braces)."""
    found = []
    k = lbrace - 1
    while k >= 0 and tokens[k].text not in (";", "{", "}"):
        if tokens[k].text == ")" and k in open_of:
            k = open_of[k] - 1
            continue
        if tokens[k].text in ("constexpr", "consteval"):
            found.append(k)
        k -= 1
    return found
