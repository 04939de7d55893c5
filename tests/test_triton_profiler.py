"""`triton.profiler` (proton) as metile serves it: scopes timed on the host into a tree, launches of `@triton.jit`
kernels recorded under the names and metrics of their `launch_metadata` with `hook="triton"`, `activate` and
`deactivate` pausing the recording, `finalize` writing `<name>.hatchet`, and `triton.profiler.viewer` reading it back
with derived metrics (time/ms, tflop16/s) and printing it, as Triton's tutorial 09 uses them. Also
`triton.tools.experimental_descriptor`, importable, whose CUDA tensor maps are refused when made."""

from __future__ import annotations

import time

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
import metile.triton.profiler as proton
import metile.triton.profiler.viewer as viewer
from metile.triton.errors import NotSupportedYetError

pytestmark = pytest.mark.usefixtures("on_cpu")


def _metadata(grid, kernel, args):
    return {"name": f"{kernel.name} [n={args['n']}]", "flops32": 2.0 * args["n"], "bytes": 8 * args["n"]}


@triton.jit(launch_metadata=_metadata)
def axpy(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, 2 * tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)


def _nodes(tree: dict) -> dict:
    out = {tree["name"]: tree}
    for c in tree["children"]:
        out |= _nodes(c)
    return out


def test_scopes_and_launches_make_a_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    x, y = torch.ones(1000), torch.zeros(1000)
    axpy[(8,)](x, y, 1000, BLOCK=128)                       # no profile open: nothing is recorded
    assert proton.start("prof", hook="triton") == 0
    with proton.scope("outer", {"flops16": 1e9}):
        time.sleep(0.02)
        for _ in range(3):
            axpy[(8,)](x, y, 1000, BLOCK=128)
    proton.deactivate(0)
    with proton.scope("paused"):
        axpy[(8,)](x, y, 1000, BLOCK=128)
    proton.activate(0)
    axpy[(8,)](x, y, 1000, BLOCK=128)
    proton.finalize()
    assert torch.equal(y, torch.full((1000,), 12.0))       # every launch ran, recorded or not
    tree, metrics = viewer.parse(["time/ms", "tflop16/s", "gflop32/s", "count"], "prof.hatchet")
    assert metrics == ["time/ms", "tflop16/s", "gflop32/s", "count"]
    nodes = _nodes(tree)
    assert "paused" not in nodes
    outer, inner = nodes["outer"], nodes["axpy [n=1000]"]
    assert [c["name"] for c in tree["children"]] == ["outer", "axpy [n=1000]"]
    assert [c["name"] for c in outer["children"]] == ["axpy [n=1000]"]
    assert outer["metrics"]["count"] == 1 and outer["children"][0]["metrics"]["count"] == 3 and \
        inner["metrics"]["count"] == 1
    assert outer["metrics"]["time/ms"] >= 20 > outer["children"][0]["metrics"]["time/ms"] > 0
    assert outer["metrics"]["tflop16/s"] == pytest.approx(1e9 / 1e12 / (outer["metrics"]["time/ms"] / 1e3))
    launches = outer["children"][0]["metrics"]
    assert launches["gflop32/s"] == pytest.approx(3 * 2000 / 1e9 / (launches["time/ms"] / 1e3))
    viewer.print_tree(tree, metrics)
    printed = capsys.readouterr().out
    assert "time/ms" in printed and "ROOT" in printed and "└─ axpy [n=1000]" in printed


def test_misuse_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proton.start("again")
    try:
        with pytest.raises(RuntimeError, match="already open"):
            proton.start("other")
        with pytest.raises(ValueError, match="one, 0"):
            proton.activate(1)
    finally:
        proton.finalize()
    with pytest.raises(ValueError, match="unknown metric"):
        viewer.parse(["watts"], "again.hatchet")


def test_experimental_descriptors_import_and_are_refused():
    from metile.triton.tools import experimental_descriptor

    with pytest.raises(NotSupportedYetError, match="CUDA tensor maps"):
        experimental_descriptor.create_2d_tma_descriptor(0, 64, 64, 16, 16, 2)
