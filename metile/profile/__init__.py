"""Performance counters of the CPU device and a model of Apple GPUs that turns them into run-time lower bounds."""

from __future__ import annotations
