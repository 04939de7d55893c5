"""The CPU device reproduces MSL that ran on real Apple GPUs (tests/data/reference_msl, see its README)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import metile

DATA = Path(__file__).parent / "data" / "reference_msl"
FOLDERS = sorted(p for p in DATA.iterdir() if (p / "launch.json").exists())


def load_case(folder: Path):
    launch = json.loads((folder / "launch.json").read_text())
    spec = importlib.util.spec_from_file_location(f"ref_{folder.name}", folder / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return launch, mod.reference


def make_args(launch: dict):
    rng = np.random.default_rng(1234)
    values = {}
    for a in launch["args"]:
        if a["kind"] == "buffer":
            values[a["name"]] = np.asarray(eval(a["init"], {"np": np, "rng": rng}), dtype=a["numpy_dtype"])
        else:
            values[a["name"]] = a["value"]
    return values


def bind(launch: dict, values: dict):
    out = []
    for a in sorted(launch["args"], key=lambda a: a["index"]):
        v = values[a["name"]]
        out.append(v if a["kind"] == "buffer" else np.dtype(_SCALAR[a["dtype"]]).type(v))
    return out


_SCALAR = {"i32": np.int32, "u32": np.uint32, "f32": np.float32, "f16": np.float16}


def run_case(dev, folder: Path):
    launch, reference = load_case(folder)
    values = make_args(launch)
    initial = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in values.items()}
    lib = dev.compile((folder / "kernel.metal").read_text(), name=f"{folder.name}.metal")
    fn = lib.function(launch["entry_point"])
    d = launch["dispatch"]
    args = bind(launch, values)
    if d["api"] == "dispatchThreadgroups":
        dev.dispatch_threadgroups(fn, d["threadgroups_per_grid"], d["threads_per_threadgroup"], args)
    else:
        dev.dispatch_threads(fn, d["threads_per_grid"], d["threads_per_threadgroup"], args)
    return launch, reference(initial), values


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def _ok(folder: Path) -> bool:
    return json.loads((folder / "launch.json").read_text())["status"] == "ok"


RUNNABLE = [f for f in FOLDERS if _ok(f)]


def test_reference_folders_present():
    assert len(FOLDERS) == 37 and len(RUNNABLE) == 36


@pytest.mark.parametrize("folder", RUNNABLE, ids=lambda f: f.name)
def test_reference_kernel_matches_numpy(cpu, folder):
    launch, expected, values = run_case(cpu, folder)
    tol = launch["tolerance"]
    for name in launch["outputs"]:
        got = values[name].astype(np.float64)
        want = np.asarray(expected[name]).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"], err_msg=name)


def test_persistent_gemm_is_rejected_with_the_undeclared_identifier(cpu):
    folder = DATA / "gemm_persistent_f32_64x64x16"
    src = (folder / "kernel.metal").read_text()
    with pytest.raises(metile.MSLCompileError) as info:
        cpu.compile(src, name="persistent.metal")
    err = info.value
    assert "tgp_id" in str(err)
    assert err.loc is not None and err.loc.file == "persistent.metal"
    assert "tgp_id" in src.splitlines()[err.loc.line - 1]
    assert "persistent.metal:" in str(err) and "^" in str(err)


def test_tensor_ops_gemm_is_the_product_of_its_inputs_cut_to_tf32(cpu):
    """The Metal 4 tensor-ops GEMM (relaxed precision, float inputs) matches numpy at the folder's tolerance above;
    here, more closely, the product of its inputs cut to 10 mantissa bits (metile/metal/cpu/include/mt_mpp.h)."""
    launch, _, values = run_case(cpu, DATA / "gemm_tensor_ops_f32_64x64x32")
    p = launch["problem"]
    a, b = make_args(launch)["A"].reshape(p["M"], p["K"]), make_args(launch)["B"].reshape(p["K"], p["N"])
    cut = [(x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64) for x in (a, b)]
    np.testing.assert_allclose(values["C"].reshape(p["M"], p["N"]), cut[0] @ cut[1], rtol=1e-5, atol=1e-4)
