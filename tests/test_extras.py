"""The extras of pyproject.toml cover what metile imports for each library's arrays: a subprocess reads and writes
torch tensors, MLX and JAX arrays (float32, bfloat16, 8-bit floats) through kernels on the CPU device while recording
every import metile's own modules make, and each imported package, and each file loaded from its directory (MLX's
CPU back end lives in `mlx/` but ships in `mlx-cpu`), must come from a distribution that `pip install metile[extra]`
installs (the extra's and metile's requirements and theirs, markers evaluated here). Without ml_dtypes, a bfloat16
array is refused naming the extra to install."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
requirements = pytest.importorskip("packaging.requirements", reason="packaging reads requirement strings")
from packaging.utils import canonicalize_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def names(reqs: list[str]) -> set[str]:
    """The distributions a list of requirements installs here (markers evaluated on this machine)."""
    out = set()
    for text in reqs:
        req = requirements.Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.add(canonicalize_name(req.name))
    return out


@pytest.mark.parametrize("extra", ["torch", "mlx", "jax"])
def test_each_library_extra_installs_ml_dtypes(extra):
    assert "ml-dtypes" in names(project()["optional-dependencies"][extra])


def test_the_mlx_extra_installs_a_back_end_on_linux():
    reqs = [requirements.Requirement(r) for r in project()["optional-dependencies"]["mlx"]]
    linux = [r for r in reqs if r.marker is None or r.marker.evaluate({"sys_platform": "linux", "extra": ""})]
    assert any(canonicalize_name(r.name) == "mlx" and "cpu" in r.extras for r in linux)


def closure(reqs: list[str]) -> set[str]:
    """Every distribution `reqs` install, with their own requirements (and their extras'), as far as installed."""
    seen: set[tuple[str, str]] = set()
    found: set[str] = set()
    todo = [(text, "") for text in reqs]
    while todo:
        text, extra = todo.pop()
        req = requirements.Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        found.add(name)
        for ex in ("", *req.extras):
            if (name, ex) in seen:
                continue
            seen.add((name, ex))
            try:
                todo += [(r, ex) for r in md.requires(name) or []]
            except md.PackageNotFoundError:
                pass
    return found


WORK = {
    "torch": """
import torch
x, y, out = torch.randn(N), torch.randn(N, requires_grad=True), torch.zeros(N)
launch(x, y, out)
launch(x.bfloat16(), y.detach().to(torch.float8_e4m3fn), out.bfloat16())
z = torch.randn(N, dtype=torch.complex64)
launch(z.conj().imag, x.bfloat16(), out)
run = copy[(1,)].prepare(x.bfloat16(), out, N, BLOCK=N)
run()
""",
    "mlx": """
import mlx.core as mx
launch(mx.ones((N,)), mx.ones((N,)).astype(mx.bfloat16), np.zeros(N, np.float32))
""",
    "jax": """
import jax.numpy as jnp
launch(jnp.ones(N), jnp.ones(N, dtype=jnp.bfloat16), np.zeros(N, np.float32))
""",
}

SPY = """
import builtins, json, os, sys
sys.path.insert(0, {root!r})
os.environ["METILE_DEVICE"] = "cpu"
imported = set()
real_import = builtins.__import__

def spy(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and globals and str(globals.get("__name__", "")).split(".")[0] == "metile":
        imported.add(name.split(".")[0])
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = spy
import numpy as np
import metile

@metile.kernel
def axpy(X, Y, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n).to(metile.float32)
    metile.store(Out + offs, 2.0 * x + metile.load(Y + offs, mask=offs < n).to(metile.float32), mask=offs < n)

@metile.kernel
def copy(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n).to(metile.float32), mask=offs < n)

N = 64
def launch(x, y, out):
    axpy[(1,)](x, y, out, N, BLOCK=N)
{work}
files = [m.__file__ for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)]
if os.path.exists("/proc/self/maps"):
    with open("/proc/self/maps") as maps:
        files += [line.split()[-1] for line in maps if "/" in line and ".so" in line]
print(json.dumps({{"imported": sorted(imported), "files": sorted(set(files))}}))
"""


def owners() -> dict[str, str]:
    """The distribution that installed each file here, by real path."""
    out = {}
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        for f in dist.files or ():
            out[os.path.realpath(dist.locate_file(f))] = name
    return out


def package_dirs(name: str) -> list[str]:
    """The directories of the package `name` (a namespace package, as `mlx` is, has no `__file__`)."""
    module = sys.modules.get(name) or __import__(name)
    found = list(getattr(module, "__path__", ()))
    return found or [os.path.dirname(module.__file__)]


@pytest.mark.parametrize("extra", ["torch", "mlx", "jax"])
def test_what_metile_imports_for_a_library_comes_with_its_extra(extra, tmp_path):
    lib = {"torch": "torch", "mlx": "mlx.core", "jax": "jax"}[extra]
    pytest.importorskip(lib, reason=f"{lib} is not installed")
    script = tmp_path / f"uses_{extra}.py"       # kernels are traced from their source file
    script.write_text(SPY.format(root=str(ROOT), work=WORK[extra]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    meta = project()
    installs = closure(meta["dependencies"] + meta["optional-dependencies"][extra])
    by_module = md.packages_distributions()
    imported = [m for m in seen["imported"] if m not in sys.stdlib_module_names and m != "metile"]
    if extra != "jax":   # metile reads their bfloat16 arrays as ml_dtypes' type (JAX's dtypes are ml_dtypes' already)
        assert "ml_dtypes" in imported
    missing = {m: by_module.get(m) for m in imported
               if not {canonicalize_name(d) for d in by_module.get(m, ())} & installs}
    assert not missing, f"metile imports {missing} for {extra} arrays, which metile[{extra}] does not install"
    # the files loaded from those packages' directories (compiled libraries too) come with the extra
    owner = owners()
    dirs = [os.path.realpath(d) + os.sep for m in imported for d in package_dirs(m)]
    stray = {f: owner.get(os.path.realpath(f)) for f in seen["files"]
             if any(os.path.realpath(f).startswith(d) for d in dirs) and owner.get(os.path.realpath(f)) not in installs}
    assert not stray, f"files loaded for {extra} arrays come from distributions metile[{extra}] lacks: {stray}"


@metile.kernel
def widen(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n).to(metile.float32), mask=offs < n)


def test_a_bfloat16_tensor_without_ml_dtypes_is_refused_naming_the_extra(monkeypatch, on_cpu):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)    # `import ml_dtypes` raises ImportError
    with pytest.raises(KernelArgumentError, match=r"argument 'X' is a bfloat16 array.*pip install 'metile\[torch\]'"):
        widen[(1,)](torch.ones(8, dtype=torch.bfloat16), np.zeros(8, np.float32), 8, BLOCK=8)
