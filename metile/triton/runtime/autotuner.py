"""`triton.runtime.autotuner`: `Autotuner`, `Config`, `Heuristics`, `autotune`, `heuristics`, and the errors a
configuration may raise while it is timed (`OutOfResources`, `PTXASError`), which Triton's module also names."""

from __future__ import annotations

from metile.triton.autotuner import Autotuner, Config, Heuristics, autotune, heuristics
from metile.triton.errors import OutOfResources, PTXASError

__all__ = ["Autotuner", "Config", "Heuristics", "OutOfResources", "PTXASError", "autotune", "heuristics"]
