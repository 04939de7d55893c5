"""Performance counters of the CPU device and a model of Apple GPUs that turns them into run-time lower bounds.

`Profile` is what a profiled dispatch returns (`metile.profile.counts`), `Estimate` its bounds on one GPU
(`metile.profile.model`), `GPUS` / `gpu()` the table of Apple GPUs (`metile.profile.gpus`).
"""

from __future__ import annotations

from metile.profile.counts import Counts, LineCounts, Profile
from metile.profile.gpus import GPUS, GpuSpec, UnknownGpuError, gpu
from metile.profile.model import Estimate, estimate

__all__ = ["GPUS", "Counts", "Estimate", "GpuSpec", "LineCounts", "Profile", "UnknownGpuError", "estimate", "gpu"]
