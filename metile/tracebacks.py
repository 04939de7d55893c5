"""Tracebacks users read: a `MetileError` leaves metile's entry points with the user's frames, not metile's.

`for_user(error, name)` gives `error` a new traceback, to be raised by a public entry point (`kernel[grid](...)`,
`prepare`, `compile`, `trace`) with `raise for_user(e, name) from None`: the frames metile went through are dropped
(the entry point's own frame is the one left, as raising adds it), and when the error is located at a line of a
Python file (a kernel's line, where trace and compile errors and faults led back to Python are), a last frame at
that line is added, raised from a code object compiled with that file name and line number, named after the kernel.
So the traceback ends at the kernel's line, shown as Python shows any line of source. `from None` drops the
internal exceptions the error was raised from. `metile.kernel` reads `METILE_TRACEBACK` (`full` keeps the traceback
and the chain as raised; see `traceback_setting`).
"""

from __future__ import annotations

import functools
import linecache
import sys
from pathlib import Path

from metile.debug import DebugSettingError
from metile.ir.errors import MetileError

_PACKAGE = str(Path(__file__).resolve().parent)
_NAME = "metile_error"        # the name the raising code reads the error from
_RAISE = f"raise({_NAME})"    # its statement, padded inside the parentheses to the width of the user's line


def traceback_setting(value: str | None) -> bool:
    """Whether `METILE_TRACEBACK=value` keeps full tracebacks: `full` does; unset, empty or `short` does not."""
    text = (value or "").strip().lower()
    if text in ("", "short"):
        return False
    if text == "full":
        return True
    raise DebugSettingError(f"METILE_TRACEBACK={value!r} is not a setting: use full (metile's own frames and the "
                            "exceptions an error came from are kept) or short (the default)")


def for_user(error: MetileError, name: str) -> MetileError:
    """`error` with a traceback that holds only a frame at its location, if that is a line of a Python file outside
    metile (see the module docstring), named `name`."""
    error = error.with_traceback(None)
    loc = error.loc
    if loc is None or not loc.file.endswith(".py") or loc.file.startswith(_PACKAGE):
        return error
    text = linecache.getline(loc.file, loc.line)
    if not text.strip():
        return error
    stripped = text.strip()
    code = _raiser(loc.file, loc.line, name, text[: len(text) - len(text.lstrip())], len(stripped))
    try:
        exec(code, {_NAME: error})  # noqa: S102 - raises `error` from the kernel's line
    except MetileError as raised:
        return raised.with_traceback(raised.__traceback__.tb_next)   # the frame of `code`, without this one's
    return error


@functools.lru_cache(maxsize=256)
def _raiser(file: str, line: int, name: str, indent: str, width: int):
    """Code that raises `metile_error` at `line` of `file`, in a function named `name`: the statement starts where the
    line's text does (so an indented line sits in an `if` on the line above) and spans at least as far as it does,
    which tells Python's traceback printer that the whole line raised (it draws no carets under a part of it)."""
    statement = _RAISE[:-1] + " " * max(width - len(_RAISE), 0) + ")"
    if line > 1 and indent:
        source = "\n" * (line - 2) + "if 1:\n" + indent + statement + "\n"
    else:
        source = "\n" * (line - 1) + statement + "\n"
    code = compile(source, file, "exec")
    return code.replace(co_name=name, co_qualname=name) if sys.version_info >= (3, 11) else code.replace(co_name=name)


__all__ = ["for_user", "traceback_setting"]
