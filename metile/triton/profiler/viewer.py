"""`triton.profiler.viewer`: a `.hatchet` profile of `triton.profiler` read back (`parse`) and printed as a tree
(`print_tree`), with the derived metrics proton's viewer names.

Derived metrics: `time/s`, `time/ms`, `time/us`, `time/ns` (inclusive time), `avg_time/...` (per run), `flop/s`,
`gflop/s`, `tflop/s` (the sum of every `flops*` metric per second), `flop8/s`, `tflop16/s`... (one width's flops),
`byte/s`, `gbyte/s`, `tbyte/s` (the `bytes` metric per second); any metric recorded in the profile by its name.
"""

from __future__ import annotations

import json
import math
import re

_TIME = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_SCALE = {"": 1.0, "g": 1e9, "t": 1e12}


def _value(metric: str, m: dict) -> float:
    """The metric `metric` of a node's recorded metrics `m` (see the module docstring)."""
    ns, count = m.get("time (ns)", 0), max(m.get("count", 0), 1)
    if found := re.fullmatch(r"(avg_)?time/(s|ms|us|ns)", metric):
        t = ns / _TIME[found[2]]
        return t / count if found[1] else t
    if found := re.fullmatch(r"([gt]?)flop(\d*)/s", metric):
        wanted = f"flops{found[2]}"
        flops = sum(v for k, v in m.items() if k.startswith("flops") and (not found[2] or k == wanted))
        return flops / _SCALE[found[1]] / (ns / 1e9) if ns else math.nan
    if found := re.fullmatch(r"([gt]?)byte/s", metric):
        return m.get("bytes", 0) / _SCALE[found[1]] / (ns / 1e9) if ns else math.nan
    if metric in m:
        return m[metric]
    raise ValueError(f"unknown metric {metric!r}: metile's profiles have time/s|ms|us|ns, avg_time/..., "
                     f"[g|t]flop[N]/s, [g|t]byte/s and the recorded {sorted(m)}")


def parse(metrics: list[str], filename: str, include=None, exclude=None, threshold=None):
    """`(tree, metrics)`: the profile in `filename` as nested dicts (`name`, `metrics` with the derived ones added,
    `children`), and the metric names. `include`/`exclude` (regular expressions) keep or drop nodes by name."""
    with open(filename) as f:
        roots = json.load(f)
    names = list(metrics)

    def build(node: dict) -> dict:
        recorded = node["metrics"]
        values = {name: _value(name, recorded) for name in names}
        kids = [build(c) for c in node["children"]
                if (include is None or re.search(include, c["frame"]["name"]))
                and (exclude is None or not re.search(exclude, c["frame"]["name"]))]
        return {"name": node["frame"]["name"], "metrics": values, "children": kids}

    return build(roots[0]), names


def print_tree(tree: dict, metrics: list[str], depth: int = 100, format: str | None = None,  # noqa: A002
               print_sorted: bool = False) -> None:
    """Print `tree` (from `parse`) a line per node: its metrics, then its name under its parents'."""
    print("  ".join(f"{m:>12}" for m in metrics) + "  name")

    def walk(node: dict, level: int, prefix: str) -> None:
        cells = "  ".join(f"{node['metrics'][m]:>12.4g}" for m in metrics)
        print(f"{cells}  {prefix}{node['name']}")
        if level >= depth:
            return
        kids = node["children"]
        if print_sorted and metrics:
            kids = sorted(kids, key=lambda c: -c["metrics"][metrics[0]])
        for i, c in enumerate(kids):
            walk(c, level + 1, ("   " * level) + ("└─ " if i == len(kids) - 1 else "├─ "))

    walk(tree, 0, "")


__all__ = ["parse", "print_tree"]
