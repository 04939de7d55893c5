"""`tl.reduce` and `tl.associative_scan` with `@triton.jit` combine functions (tuples of tensors, any axis,
`keep_dims`, `axis=None`, `reverse`), `tl.xor_sum`, `tl.reduce_or` and `tl.gather` on metile give what Triton's own
interpreter gives (`TRITON_INTERPRET=1`, in a process of its own without metile), and their misuses are refused as
Triton refuses them."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metile.triton as triton
from metile.frontend.errors import KernelTypeError

pytestmark = pytest.mark.usefixtures("on_cpu")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def combine():
    was = triton.installed()
    triton.install()
    try:
        sys.modules.pop("tests.triton_kernels.combine", None)
        return importlib.import_module("tests.triton_kernels.combine")
    finally:
        if not was:
            triton.uninstall()


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    env.pop("METILE_DEVICE", None)
    done = subprocess.run([sys.executable, "-m", "tests.triton_kernels.combine"], cwd=ROOT, env=env,
                          capture_output=True, timeout=600)
    if done.returncode != 0 and b"No module named 'triton'" in done.stderr:
        pytest.skip("Triton is not installed")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return pickle.loads(done.stdout)


def test_combine_functions_match_triton_s_interpreter(combine, interpreted):
    mine = combine.run("cpu")
    assert mine.keys() == interpreted.keys()
    for name, want in interpreted.items():
        if want.dtype.kind == "f":    # the interpreter folds in index order, metile in a tree: rounding differs
            np.testing.assert_allclose(mine[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(mine[name], want, err_msg=name)


def _module(tmp_path, body: str):
    path = tmp_path / "combine_refused.py"
    path.write_text("import metile.triton as triton\nimport metile.triton.language as tl\n\n\n"
                    "@triton.jit\ndef to_f32(a, b):\n    return (a + b).to(tl.float32)\n\n\n"
                    "@triton.jit\ndef two(a, b):\n    return a, b\n\n\n"
                    "@triton.jit\ndef kernel(X):\n    x = tl.load(X + tl.arange(0, 8))\n" + body)
    spec = importlib.util.spec_from_file_location("combine_refused", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


@pytest.mark.parametrize("body, match", [
    ("    y = tl.reduce(x.to(tl.int32), 0, to_f32)\n", "returns fp32|returns f32"),
    ("    y = tl.reduce(x, 0, two)\n", "returns 2 values for 1 tiles"),
    ("    y = tl.reduce(x, 0, max)\n", "combine function must be"),
    ("    y = tl.xor_sum(x, 0)\n", "xor_sum only supported for integers"),
    ("    y = tl.associative_scan(x, 1, two)\n", "axis 1 is out of range"),
    ("    y = tl.gather(x, tl.arange(0, 8).to(tl.float32), 0)\n", "integer"),
])
def test_misuses_are_refused_at_the_line(tmp_path, body, match):
    kernel = _module(tmp_path, body)
    with pytest.raises(KernelTypeError, match=match) as e:
        kernel.kernel.trace(np.zeros(8, np.float32))
    assert e.value.loc.line == 18
