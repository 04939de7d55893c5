"""Passes as values: a `Pass` is a named, frozen function `Kernel -> Kernel` with options and a contract.

A pass's function takes the kernel and the run's `metile.rewrite.context.PassContext` (the target and the
analyses shared by the passes of one run), and its options as keywords. A pass's contract names the facts about
the kernel it needs (`requires`), the facts it establishes (`provides`) and the facts that must not be
established yet when it runs (`precedes`: it must come before the pass providing them, whose decisions it feeds).
`check_order` refuses a pipeline that breaks a contract, naming both passes, so a pass the meaning of a kernel
depends on cannot be dropped or misplaced silently. A plain function is a pass too, with no contract: it is taken
to keep every fact it is given.

Options are keyword arguments of the pass's function, given with `Pass.with_options(factor=4)` or in a textual
pipeline, `"fold_constants,my_pass{factor=4},lower_tiles"` (`parse_pipeline`), as MLIR and xDSL spell them. An option
the function does not take is refused.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable, Iterable, Sequence

import attrs

from metile.ir.errors import MetileError
from metile.ir.stmts import Kernel
from metile.rewrite.context import PassContext


class PipelineError(MetileError):
    """A pipeline that is not a list of passes, whose order breaks a pass's contract, or a pass that failed (raised
    an exception that is not a `MetileError`) or did not return a `Kernel`."""


class Fact(enum.Enum):
    """What a pass can establish about a kernel, for the passes after it."""

    ACTIVITY = "the meaning of masked-off elements made explicit"
    LAUNCH_PLAN = "the launch plan (threads, vector width, simdgroups of each role)"
    MMA_LAYOUTS = "the layout of every named tile"
    CONVERSIONS = "every move of a register tile between threads made explicit (convert_layout)"
    STAGING = "the chunk of k each product stages its operands by, planned against threadgroup memory"
    SIMT_IR = "per-thread code (SIMT IR)"
    METAL_IR = "Metal IR"


_BIT = {fact: 1 << i for i, fact in enumerate(Fact)}


def fact_bits(facts: Iterable[Fact]) -> int:
    """`facts` as a bit set: one bit per `Fact`."""
    bits = 0
    for fact in facts:
        bits |= _BIT[fact]
    return bits


@attrs.frozen(cache_hash=True)
class Pass:
    """A named pass: `run(kernel, **options)`, with its contract (see the module docstring) and whether it only
    makes kernels faster (`optional`: a pipeline without it still compiles every kernel correctly)."""

    name: str
    run: Callable[..., Kernel] = attrs.field(repr=False)
    requires: frozenset[Fact] = attrs.field(default=frozenset(), converter=frozenset, repr=False)
    provides: frozenset[Fact] = attrs.field(default=frozenset(), converter=frozenset, repr=False)
    precedes: frozenset[Fact] = attrs.field(default=frozenset(), converter=frozenset, repr=False)
    optional: bool = attrs.field(default=False, repr=False)
    options: tuple[tuple[str, object], ...] = ()
    masks: tuple[int, int, int] = attrs.field(init=False, eq=False, repr=False)
    """`requires`, `provides` and `precedes` as bit sets (`fact_bits`), for `check_order`."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "masks", (fact_bits(self.requires), fact_bits(self.provides),
                                           fact_bits(self.precedes)))

    def __call__(self, k: Kernel, ctx: PassContext | None = None) -> Kernel:
        """The pass applied to `k`, with the context of the run it is part of (a new one when not given)."""
        if ctx is None:
            ctx = PassContext()
        return self.run(k, ctx, **dict(self.options)) if self.options else self.run(k, ctx)

    @property
    def __name__(self) -> str:   # noqa: PLW3201 - what dumps and errors name a pass by, as for a function
        return self.name

    @property
    def key(self) -> str:
        """A name for the pass that is the same in every process (its function's qualified name, and options)."""
        base = f"{self.run.__module__}.{self.run.__qualname__}"
        return base + spec_options(self.options)

    def with_options(self, **options) -> Pass:
        """The pass with these options (keyword arguments of its function) set; a `PipelineError` names an option
        its function does not take."""
        taken = _option_names(self.run)
        unknown = sorted(set(options) - taken) if taken is not None else []
        if unknown:
            offer = f"its options are {', '.join(sorted(taken))}" if taken else "it takes none"
            raise PipelineError(f"pass {self.name} has no option {unknown[0]!r}: {offer}")
        merged = dict(self.options)
        merged.update(options)
        return attrs.evolve(self, options=tuple(sorted(merged.items())))


def _option_names(fn: Callable) -> frozenset[str] | None:
    """The keyword arguments `fn(kernel, ctx, ...)` takes after the kernel and the context (None: any, `**kw`)."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def define_pass(*, requires: Iterable[Fact] = (), provides: Iterable[Fact] = (), precedes: Iterable[Fact] = (),
                optional: bool = False) -> Callable[[Callable[..., Kernel]], Pass]:
    """A decorator making a function `Kernel -> Kernel` a `Pass` named after it, with this contract."""
    def make(fn: Callable[..., Kernel]) -> Pass:
        p = Pass(fn.__name__, fn, requires, provides, precedes, optional)
        return p
    return make


def pass_name(p) -> str:
    """The name dumps and errors use for `p` (its `__name__`, else its repr)."""
    return getattr(p, "__name__", None) or repr(p)


def pass_key(p) -> str:
    """A name for `p` that is the same in every process, for keys kept on disk."""
    if isinstance(p, Pass):
        return p.key
    return f"{getattr(p, '__module__', '')}.{getattr(p, '__qualname__', None) or pass_name(p)}"


def check_order(passes: Sequence, known: Sequence = ()) -> None:
    """Refuse (`PipelineError`) a pipeline in which a pass runs without a fact it requires, or after the pass
    providing a fact it must precede; the message names both passes (a missing provider is looked up in
    `known`, the passes of the default pipeline)."""
    provided_bits = 0
    for p in passes:   # the usual case, a pipeline keeping every contract, on bit sets without building messages
        if isinstance(p, Pass):
            requires, provides, precedes = p.masks
            if requires & ~provided_bits or precedes & provided_bits:
                break
            provided_bits |= provides
    else:
        return
    provided: dict[Fact, str] = {}
    for i, p in enumerate(passes):
        if not isinstance(p, Pass):
            continue
        missing = p.requires - provided.keys()
        clash = p.precedes & provided.keys()
        if not missing and not clash:   # the usual case, checked without building messages
            for fact in p.provides:
                provided.setdefault(fact, p.name)
            continue
        for fact in sorted(missing, key=lambda f: f.name):
            later = next((q.name for q in passes[i + 1:] if isinstance(q, Pass) and fact in q.provides), None)
            if later:
                where = f"{later} provides it, but runs after {p.name}: move {later} before it"
            else:
                maker = next((q.name for q in known if isinstance(q, Pass) and fact in q.provides),
                             "the pass that does")
                where = f"no pass before it provides it: add {maker} before {p.name}"
            raise PipelineError(f"pass {p.name} needs {fact.value}; {where}")
        for fact in sorted(clash, key=lambda f: f.name):
            raise PipelineError(f"pass {p.name} must run before {provided[fact]}, which fixes {fact.value} from the "
                                f"decisions {p.name} makes: move {p.name} before {provided[fact]}")
        for fact in p.provides:
            provided.setdefault(fact, p.name)


def spec_options(options: tuple[tuple[str, object], ...]) -> str:
    """`options` as a textual pipeline writes them: `{factor=4,name=x}` (nothing without options)."""
    if not options:
        return ""
    return "{" + ",".join(f"{k}={_spell(v)}" for k, v in options) + "}"


def _spell(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


_SPEC_ITEM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\{([^{}]*)\})?\s*(?:,|$)")


def parse_pipeline(text: str, passes: Iterable) -> list:
    """The pipeline `text` names (`"fold_constants,my_pass{factor=4},lower_tiles"`), taking each pass by name from
    `passes` (functions or `Pass`es); options are ints, floats, `true`/`false` or words. A `PipelineError` names
    an unknown pass, a malformed item, or options given to a plain function."""
    by_name = {pass_name(p): p for p in passes}
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _SPEC_ITEM.match(text, pos)
        if m is None or m.end() == pos:
            raise PipelineError(f"cannot read the pipeline {text!r} at {text[pos:]!r}: write pass names separated by "
                                "commas, each with options in braces if any (my_pass{factor=4})")
        name, opts = m.group(1), m.group(2)
        if name not in by_name:
            raise PipelineError(f"the pipeline names an unknown pass {name!r}; known: {', '.join(sorted(by_name))}")
        p = by_name[name]
        if opts is not None and opts.strip():
            if not isinstance(p, Pass):
                raise PipelineError(f"pass {name} takes no options")
            p = p.with_options(**_parse_options(name, opts))
        out.append(p)
        pos = m.end()
    return out


def _parse_options(name: str, text: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key.isidentifier() or not value:
            raise PipelineError(f"pass {name}: cannot read the option {item.strip()!r}; write name=value")
        out[key] = _option_value(value)
    return out


def _option_value(text: str) -> object:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


__all__ = ["Fact", "Pass", "PipelineError", "check_order", "define_pass", "parse_pipeline", "pass_key", "pass_name",
           "spec_options"]
