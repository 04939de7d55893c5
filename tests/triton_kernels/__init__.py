"""Triton kernels that run both on metile (with `metile.triton.install()`) and on Triton's own interpreter
(`TRITON_INTERPRET=1`, in a process without metile), so that tests compare the two."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def on_metile(name: str) -> ModuleType:
    """`tests.triton_kernels.<name>` imported fresh with `import triton` served by metile (switched back off after
    unless it was on)."""
    import metile.triton as triton  # here: the kernels' own processes import this package without metile

    was = triton.installed()
    triton.install()
    try:
        sys.modules.pop(f"tests.triton_kernels.{name}", None)
        return importlib.import_module(f"tests.triton_kernels.{name}")
    finally:
        if not was:
            triton.uninstall()


def interpreted(name: str) -> dict:
    """The outputs of `tests.triton_kernels.<name>` run under Triton's interpreter in a process of its own (skipped
    when Triton is not installed)."""
    import pytest

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    env.pop("METILE_DEVICE", None)
    done = subprocess.run([sys.executable, "-m", f"tests.triton_kernels.{name}"], cwd=ROOT, env=env,
                          capture_output=True, timeout=600)
    if done.returncode != 0 and b"No module named 'triton'" in done.stderr:
        pytest.skip("Triton is not installed")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return pickle.loads(done.stdout)


def kernel_from_source(tmp_path: Path, name: str, source: str):
    """The `kernel` of a module whose source is `source`, written to `tmp_path/<name>.py` and imported (so that
    errors point at its lines)."""
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel
