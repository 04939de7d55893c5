"""Performance counters of the CPU device and a model of Apple GPUs that turns them into run times.

`Profile` is what a profiled dispatch returns (`metile.profile.counts`), `Estimate` its bound and estimate on one
GPU (`metile.profile.model`, with the achieved rates of `metile.profile.rates`), `GPUS` / `gpu()` the table of Apple
GPUs (`metile.profile.gpus`). The model loads on first use, so a dispatch without `profile=` never pays for it.
"""

from __future__ import annotations

import importlib

from metile.profile.counts import Counts, LineCounts, Profile

_LAZY = {"GPUS": "gpus", "GpuSpec": "gpus", "UnknownGpuError": "gpus", "gpu": "gpus", "binned": "gpus",
         "Estimate": "model", "Term": "model", "estimate": "model"}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'metile.profile' has no attribute {name!r}")
    return getattr(importlib.import_module(f"metile.profile.{where}"), name)


__all__ = ["GPUS", "Counts", "Estimate", "GpuSpec", "LineCounts", "Profile", "Term", "UnknownGpuError", "binned",
           "estimate", "gpu"]
