"""Rewrite drivers: apply a rule (`Node -> Node | None`) bottom-up until nothing matches.

`bottom_up_reference` is the reference semantics, written recursively for clarity; `bottom_up` is
what passes use: the same algorithm with an explicit stack, because unrolled accumulator chains
are deeper than Python's recursion limit. A property test checks that the two agree.

A rule returns a new node, or None for "no match" (never "delete"). Each rule must reduce some
measure so that rewriting terminates; the driver still stops a rule that rewrites one node more
than `max_steps` times, with a `RewriteError` naming the rule and the location.
"""

from __future__ import annotations

from collections.abc import Callable

from metile.ir.errors import MetileError
from metile.ir.node import Node, children, map_children
from metile.ir.values import Stmt

Rule = Callable[[Node], "Node | None"]


def _key(n: Node):
    """What the drivers memoise `n` under: the node, as equality sees it, and for a statement its location too. A
    location is not part of equality, and statements equal but at different source lines (two barriers, two
    identical stores) must keep their own: profiles and fault reports name a statement's line."""
    return (n, n.loc) if isinstance(n, Stmt) else n


class RewriteError(MetileError):
    """A rule did not converge, or raised: names the rule and the node's source location."""


def first_of(*rules: Rule) -> Rule:
    """One rule trying `rules` in order; the first match wins."""

    def first(n: Node) -> Node | None:
        for r in rules:
            out = r(n)
            if out is not None:
                return out
        return None

    first.__name__ = "first_of(" + ", ".join(r.__name__ for r in rules) + ")"
    return first


def by_class(table: dict[type, Rule]) -> Rule:
    """One rule running `table[type(n)]` on `n` (no match for a class not in the table): a dispatch on the
    node's class before any `match`, for rule sets that each concern a few node kinds."""
    get = table.get

    def dispatch(n: Node) -> Node | None:
        r = get(n.__class__)
        return None if r is None else r(n)

    dispatch.__name__ = "by_class(" + ", ".join(f"{c.__name__}: {r.__name__}" for c, r in table.items()) + ")"
    return dispatch


def matches(rule: Rule, n: Node) -> bool:
    """Whether `rule` rewrites `n` (a rule that raises is reported as the drivers report it)."""
    return _apply(rule, n) is not None


def _apply(rule: Rule, n: Node) -> Node | None:
    try:
        return rule(n)
    except RewriteError:
        raise
    except Exception as e:  # wrapped once, innermost, with the rule and the location
        raise RewriteError(f"rule {rule.__name__} failed on {type(n).__name__}: {type(e).__name__}: {e}",
                           n.loc) from e


def bottom_up_reference(rule: Rule, root: Node, *, max_steps: int = 10_000) -> Node:
    memo: dict[object, Node | None] = {}  # None: unchanged (so an equal node elsewhere keeps its identity)

    def go(n: Node) -> Node:
        if _key(n) in memo:
            return _result(memo, n)
        cur, steps = map_children(go, n), 0
        while (nxt := _apply(rule, cur)) is not None:
            steps += 1
            if steps > max_steps:
                raise RewriteError(f"rule {rule.__name__} did not converge", cur.loc)
            cur = map_children(go, nxt)
        memo[_key(n)] = None if cur is n else cur
        return cur

    return go(root)


def _result(memo: dict[object, Node | None], n: Node) -> Node:
    done = memo[_key(n)]
    return n if done is None else done


def substitute(root: Node, table: dict[Node, Node]) -> Node:
    """`root` with every node equal to a key of `table` replaced by its value, which is not searched again (so a
    replacement may contain the node it replaces). Iterative, like `bottom_up`; shared nodes are rebuilt once.

    Only nodes of the classes of the keys are looked up in `table` (hashing and comparing every node of a large
    kernel would cost more than the walk), and only the nodes containing a replaced one are rebuilt."""
    if not table:
        return root
    classes = frozenset(key.__class__ for key in table)
    replaced: dict[int, Node] = {}
    seen: set[int] = set()
    stack: list[tuple[Node, list[Node] | None]] = [(root, None)]
    pop, push = stack.pop, stack.append

    def new(c: Node) -> Node:
        return replaced.get(id(c), c)

    while stack:
        n, kids = pop()
        if kids is None:
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.__class__ in classes and n in table:
                replaced[id(n)] = table[n]
                continue
            kids = children(n)
            if kids:
                push((n, kids))
                for c in kids:
                    if id(c) not in seen:
                        push((c, None))
            continue
        for c in kids:
            if id(c) in replaced:
                replaced[id(n)] = map_children(new, n)
                break
    return replaced.get(id(root), root)


def replace(root: Node, new: dict[int, Node], holding: set[int]) -> Node:
    """`root` with each node whose id is a key of `new` replaced by its value (not searched again), where
    `holding` has the ids of the nodes that contain one of them (found by a walk of the caller's): only those
    are visited and rebuilt. Nodes met twice are rebuilt once."""
    done = dict(new)
    stack: list[tuple[Node, bool]] = [(root, False)]
    pop, push = stack.pop, stack.append

    def get(c: Node) -> Node:
        return done.get(id(c), c)

    while stack:
        n, ready = pop()
        if id(n) in done:
            continue
        if ready:
            done[id(n)] = map_children(get, n)
            continue
        push((n, True))
        for c in children(n):
            if id(c) in holding and id(c) not in done:
                push((c, False))
    return done.get(id(root), root)


def bottom_up(rule: Rule, root: Node, *, max_steps: int = 10_000,
              inert: Callable[[Node], bool] | None = None) -> Node:
    """Rewrite children first, then the parent until `rule` stops matching; shared nodes are rewritten once.

    Same result as `bottom_up_reference`, with an explicit stack of frames
    `[original, current, children (None until pushed), steps]` instead of recursion. `inert(n)`, when given, is
    true of a child `n` that `rule` matches neither at nor under (known to the caller without a walk, such as a
    value with no reduction in it): it is kept as it is without being visited or hashed.
    """
    memo: dict[object, Node | None] = {}
    get = memo.get
    active: set[object] = set()
    stack: list[list] = [[root, root, None, 0]]
    while stack:
        frame = stack[-1]
        orig, cur, kids, steps = frame
        if kids is None:
            if cur is orig and _key(orig) in memo:
                stack.pop()
                continue
            active.add(_key(orig))
            frame[2] = kids = children(cur)
            for c in kids:
                if inert is not None and inert(c):   # a node of the input: it cannot contain one being rewritten
                    continue
                key = _key(c)
                if key in active:
                    raise RewriteError(f"rule {rule.__name__} built a node that contains itself", cur.loc)
                if key not in memo:
                    stack.append([c, c, None, 0])
            continue
        if any(get(_key(c)) is not None for c in kids):  # rebuild only when a child was rewritten
            cur = map_children(lambda c: c if (d := get(_key(c))) is None else d, cur)
        nxt = _apply(rule, cur)
        if nxt is None:
            memo[_key(orig)] = None if cur is orig else cur
            active.discard(_key(orig))
            stack.pop()
            continue
        if steps + 1 > max_steps:
            raise RewriteError(f"rule {rule.__name__} did not converge", cur.loc)
        frame[1], frame[2], frame[3] = nxt, None, steps + 1
    return _result(memo, root)
