"""The Python examples in README.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert BLOCKS


@pytest.mark.parametrize("code", BLOCKS, ids=lambda c: c.splitlines()[-1][:40])
def test_readme_example_runs(code):
    if "device(\"metal\")" in code or "device('metal')" in code:
        pytest.skip("needs an Apple GPU")
    exec(compile(code, str(README), "exec"), {})
