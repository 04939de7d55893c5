"""`triton.runtime.errors`: the errors Triton programs catch."""

from __future__ import annotations

from metile.triton.errors import InterpreterError, OutOfResources, PTXASError

__all__ = ["InterpreterError", "OutOfResources", "PTXASError"]
