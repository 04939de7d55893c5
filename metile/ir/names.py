"""IR names: what may name a kernel, parameter or variable in the IR text (`is_ir_name`), and a Python name made
one (`ir_name`).

Apart from `metile.ir.scanner` (which reads them in the text), so that the verifier and the frontend check names
without loading the scanner's patterns: an ASCII name is checked without a regular expression, and the pattern
for other names is compiled by the first one.
"""

from __future__ import annotations

import functools
import re

NAME = r"[^\W\d]\w*"  # an IR name: word characters (Unicode ones too), not starting with a digit


@functools.cache
def _whole_name() -> re.Pattern[str]:
    return re.compile(NAME + r"\Z")


def is_ir_name(name: object) -> bool:
    """Whether `name` can name a kernel, parameter or variable in the IR (and be read back from its text)."""
    if name.__class__ is str and name.isascii():   # `NAME` on ASCII: a letter or `_`, then letters, digits or `_`
        return name.isidentifier()
    return isinstance(name, str) and _whole_name().match(name) is not None


def ir_name(name: str) -> str:
    """`name` as an IR name: a Python identifier is one unless it holds a combining mark or a connector (which
    Python allows in identifiers and regular expressions do not count as word characters); those become `_`."""
    if name.isascii() or is_ir_name(name):
        return name
    text = re.sub(r"\W", "_", name)
    return text if is_ir_name(text) else "_" + text


__all__ = ["NAME", "ir_name", "is_ir_name"]
