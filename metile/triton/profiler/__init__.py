"""`triton.profiler` (Triton's profiler, proton) as metile serves it: named scopes timed on the host, a tree of them
written to `<name>.hatchet` by `finalize()` and read back and printed by `triton.profiler.viewer`.

- `start(name="proton", hook=None, ...)` opens a profile (session 0; one at a time) and starts recording;
  `activate(session)` and `deactivate(session)` resume and pause it; `finalize()` writes the file and closes it.
  `context`, `data`, `backend` and `mode` are accepted: metile records one kind of profile, a tree of scopes.
- `scope(name, metrics=None)` (a context manager, also a decorator) and `enter_scope`/`exit_scope` record, while a
  profile records, a node of the tree under the enclosing scopes: its count, its inclusive wall time in nanoseconds
  (`time.perf_counter_ns`, after `metile.synchronize()` on both sides, so that the kernels launched inside are done)
  and the sums of the metrics given (`{"flops16": ..., "bytes": ...}`).
- With `hook="triton"` every launch of a `@triton.jit` kernel is such a scope too, named and measured as the kernel's
  `launch_metadata(grid, kernel, args)` says (`name`, `flops*`, `bytes`), else by the kernel's name.
Times are the host's: on the CPU device the kernels run in the process, and on an Apple GPU the synchronisations
make a scope's time include its kernels (unlike proton, which reads the GPU's own timestamps, there is no separate
kernel node).

The profile is process state, as proton's is: the one open session of this module.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time

import attrs

import metile


@attrs.define
class Node:
    """A scope of the profile: how often it ran, its inclusive time (ns), its metrics' sums and its children."""

    name: str
    count: int = 0
    time_ns: int = 0
    metrics: dict = attrs.field(factory=dict)
    children: dict = attrs.field(factory=dict)

    def child(self, name: str) -> Node:
        found = self.children.get(name)
        if found is None:
            found = self.children[name] = Node(name)
        return found

    def to_json(self) -> dict:
        return {"frame": {"name": self.name, "type": "function"},
                "metrics": {"count": self.count, "time (ns)": self.time_ns, **self.metrics},
                "children": [c.to_json() for c in self.children.values()]}


@attrs.define
class Session:
    name: str
    hook: str | None
    active: bool = True
    root: Node = attrs.field(factory=lambda: Node("ROOT"))
    stack: list = attrs.field(factory=list)   # [(node, start time)] of the open scopes

    def current(self) -> Node:
        return self.stack[-1][0] if self.stack else self.root


_session: Session | None = None


def start(name: str | None = None, *, context: str = "shadow", data: str = "tree", backend: str | None = None,
          mode: str | None = None, hook: str | None = None) -> int:
    """Open a profile written to `<name>.hatchet` by `finalize()`, recording from now; returns its session id, 0."""
    global _session
    if _session is not None:
        raise RuntimeError("a profile is already open: finalize() it before starting another")
    if hook not in (None, "triton"):
        raise ValueError(f"hook must be None or 'triton', not {hook!r}")
    _session = Session(name or "proton", hook)
    return 0


def _check(session: int | None) -> Session | None:
    if session not in (None, 0):
        raise ValueError(f"no profile session {session}: metile has one, 0")
    return _session


def activate(session: int | None = None) -> None:
    """Resume recording (scopes and launches count again)."""
    s = _check(session)
    if s is not None:
        s.active = True


def deactivate(session: int | None = None) -> None:
    """Pause recording."""
    s = _check(session)
    if s is not None:
        s.active = False


def finalize(session: int | None = None, output_format: str = "hatchet") -> None:
    """Close the profile, writing its tree to `<name>.hatchet` (JSON: a list of the root node)."""
    global _session
    s = _check(session)
    if s is None:
        return
    if output_format != "hatchet":
        raise ValueError(f"metile writes profiles in the hatchet format only, not {output_format!r}")
    s.root.count = max(s.root.count, 1)
    s.root.time_ns = sum(c.time_ns for c in s.root.children.values())
    for c in s.root.children.values():
        for k, v in c.metrics.items():
            s.root.metrics[k] = s.root.metrics.get(k, 0) + v
    path = s.name if s.name.endswith(".hatchet") else f"{s.name}.hatchet"
    with open(path, "w") as f:
        json.dump([s.root.to_json()], f)
    _session = None


def _recording() -> Session | None:
    s = _session
    return s if s is not None and s.active else None


def enter_scope(name: str, *, triton_op: bool = False, metrics: dict | None = None) -> None:
    s = _recording()
    if s is None:
        return
    node = s.current().child(name)
    for k, v in (metrics or {}).items():
        node.metrics[k] = node.metrics.get(k, 0) + v
    metile.synchronize()
    s.stack.append((node, time.perf_counter_ns()))


def exit_scope(triton_op: bool = False, metrics: dict | None = None) -> None:
    s = _session
    if s is None or not s.stack:
        return
    metile.synchronize()
    node, began = s.stack.pop()
    node.count += 1
    node.time_ns += time.perf_counter_ns() - began
    for k, v in (metrics or {}).items():
        node.metrics[k] = node.metrics.get(k, 0) + v


class scope(contextlib.ContextDecorator):  # noqa: N801 - proton's name
    """`with proton.scope("name", {"flops16": ...}):` (or `@proton.scope("name")`): a timed scope of the profile."""

    def __init__(self, name: str, metrics: dict | None = None):
        self.name, self.metrics = name, metrics
        self._entered = False

    def __enter__(self):
        self._entered = _recording() is not None
        if self._entered:
            enter_scope(self.name, metrics=self.metrics)
        return self

    def __exit__(self, *exc):
        if self._entered:
            exit_scope()
        return False


def launch_scope(fn, grid, bound: dict):
    """The scope a launch of the `@triton.jit` function `fn` over `grid` runs in: none unless a profile records with
    `hook="triton"`, else named and measured by `fn.launch_metadata(grid, kernel, args)` (or named as `fn`)."""
    s = _recording()
    if s is None or s.hook != "triton":
        return contextlib.nullcontext()
    meta = fn.launch_metadata(grid, _KernelName(fn.__name__), dict(bound)) if fn.launch_metadata else {}
    meta = dict(meta or {})
    name = meta.pop("name", fn.__name__)
    return scope(name, {k: v for k, v in meta.items() if isinstance(v, (int, float))})


@attrs.frozen
class _KernelName:
    """What `launch_metadata` receives as the kernel: its `name`."""

    name: str


def profile(func=None, *, name: str | None = None, **kwargs):
    """`@proton.profile`: `func` run inside a profile of its own (started and finalized around each call)."""
    if func is None:
        return functools.partial(profile, name=name, **kwargs)

    @functools.wraps(func)
    def wrapper(*args, **kw):
        start(name or func.__name__, **kwargs)
        try:
            return func(*args, **kw)
        finally:
            finalize()
    return wrapper


__all__ = ["activate", "deactivate", "enter_scope", "exit_scope", "finalize", "launch_scope", "profile", "scope",
           "start"]
