"""`triton.runtime.autotuner`: `Autotuner`, `Config`, `Heuristics`, `autotune`, `heuristics`."""

from __future__ import annotations

from metile.triton.autotuner import Autotuner, Config, Heuristics, autotune, heuristics

__all__ = ["Autotuner", "Config", "Heuristics", "autotune", "heuristics"]
