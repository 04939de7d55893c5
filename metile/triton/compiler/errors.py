"""`triton.compiler.errors`: `CompilationError` (metile's `FrontendError`) and `CompileTimeAssertionFailure`
(metile's `CompileTimeAssertionError`, which a failed `tl.static_assert` raises)."""

from __future__ import annotations

from metile.frontend.errors import CompileTimeAssertionError as CompileTimeAssertionFailure
from metile.triton.errors import CompilationError

__all__ = ["CompilationError", "CompileTimeAssertionFailure"]
