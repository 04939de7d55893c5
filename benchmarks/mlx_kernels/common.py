"""Shared pieces of the MLX kernel corpus: where MLX's kernels come from, what a case is, how results are checked.

The shipped headers come from the `mlx-metal` wheel, fetched once with pip into metile's cache directory and
unpacked (only the kernels directory) atomically. Kernels that MLX defines only in its `.metal` files come from
an MLX source checkout named by `METILE_MLX_SOURCE`. When either is out of reach a case raises
`CorpusUnavailable` with the reason, and the runner and the tests skip it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

MLX_VERSION = "0.32.4"
KERNELS = "mlx/backend/metal/kernels"          # the kernels directory below an include root
_WHEEL_PREFIX = "mlx/include/"                  # where the include root sits inside the wheel
SOURCE_ENV = "METILE_MLX_SOURCE"


class CorpusUnavailable(Exception):
    """MLX's kernels cannot be had here (offline, or no source checkout); the text says why."""


class Mismatch(AssertionError):
    """A kernel ran but its output differs from numpy's beyond the tolerance."""


@attrs.frozen
class Result:
    """What a passing case measured: the largest error, the tolerance it was held to, and a short note."""

    max_error: float
    tolerance: float
    detail: str = ""


@attrs.frozen
class Case:
    """One corpus case: `run(dev)` compiles, dispatches and checks, returning a Result or raising."""

    name: str
    family: str
    run: Callable[[object], Result]
    needs_source: bool = False


# -- where the kernels come from -------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """metile's cache directory (`METILE_CACHE_DIR`, else the XDG default), as the CPU device uses it."""
    from metile.metal.cpu.toolchain import default_cache_dir

    return default_cache_dir(os.environ)


_fetch_failure: CorpusUnavailable | None = None   # a failed fetch is not retried by every case of a run


def kernels_root() -> Path:
    """The include root of the shipped MLX headers (`<root>/mlx/backend/metal/kernels/*.h`), fetched once."""
    global _fetch_failure
    root = cache_dir() / f"mlx-metal-{MLX_VERSION}"
    if (root / KERNELS / "utils.h").is_file():
        return root
    if _fetch_failure is not None:
        raise _fetch_failure
    try:
        return _fetch(root)
    except CorpusUnavailable as e:
        _fetch_failure = e
        raise


def _fetch(root: Path) -> Path:
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".mlx-metal-") as tmp:
        wheel = _download_wheel(Path(tmp) / "wheel")
        staged = Path(tmp) / "root"
        _unpack_kernels(wheel, staged)
        try:
            os.replace(staged, root)               # atomic: a reader sees no root or a whole one
        except OSError:
            if not (root / KERNELS / "utils.h").is_file():   # not a concurrent fetch that won the race
                raise
    return root


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--retries", "1", "--timeout", "20", "--platform", "macosx_14_0_arm64", f"mlx-metal=={MLX_VERSION}",
           "-d", str(dest)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CorpusUnavailable(f"cannot fetch the mlx-metal {MLX_VERSION} wheel with pip: {e}") from None
    wheels = sorted(dest.glob("mlx_metal-*.whl")) if dest.is_dir() else []
    if out.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        why = " / ".join((errors or lines)[-2:]) or f"pip exited with {out.returncode}"
        raise CorpusUnavailable(f"cannot fetch the mlx-metal {MLX_VERSION} wheel with pip (offline?): {why}")
    return wheels[0]


def _unpack_kernels(wheel: Path, staged: Path) -> None:
    prefix = _WHEEL_PREFIX + KERNELS + "/"
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.infolist() if m.filename.startswith(prefix) and not m.is_dir()]
        if not any(m.filename.endswith("/utils.h") for m in members):
            raise CorpusUnavailable(f"the mlx-metal wheel {wheel.name} holds no {KERNELS}/utils.h")
        for m in members:
            rel = m.filename[len(_WHEEL_PREFIX):]
            if ".." in Path(rel).parts:
                continue
            target = staged / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def source_root() -> Path:
    """The MLX source checkout named by METILE_MLX_SOURCE (for kernels defined only in `.metal` files)."""
    text = os.environ.get(SOURCE_ENV, "").strip()
    if not text:
        raise CorpusUnavailable(f"{SOURCE_ENV} is not set (this kernel is defined only in MLX's .metal "
                                "files: point it at an MLX source checkout)")
    root = Path(text).expanduser()
    if not (root / KERNELS).is_dir():
        raise CorpusUnavailable(f"{SOURCE_ENV}={text!r} holds no {KERNELS} directory")
    return root


def source_file(name: str) -> Path:
    """`$METILE_MLX_SOURCE/mlx/backend/metal/kernels/<name>`, which must exist."""
    path = source_root() / KERNELS / name
    if not path.is_file():
        raise CorpusUnavailable(f"the MLX source checkout has no {KERNELS}/{name}")
    return path


# -- compiling -------------------------------------------------------------------------------------------------------
def instantiation(headers: list[str] | tuple[str, ...], lines: list[str] | tuple[str, ...]) -> str:
    """Our own instantiation source: metal_stdlib, MLX's utils.h and `headers` (names in the kernels
    directory), then the `instantiate_kernel(...)` lines."""
    includes = ["#include <metal_stdlib>", f'#include "{KERNELS}/utils.h"']
    includes += [f'#include "{KERNELS}/{h}"' for h in headers]
    return "\n".join(includes + ["", *lines, ""])


def compile_mlx(dev, source_text: str, name: str, *, needs_source: bool = False):
    """Compile our instantiation source against the shipped headers (and the source checkout if needed)."""
    roots = [str(kernels_root())]
    if needs_source:
        roots.append(str(source_root()))
    return dev.compile(source_text, name=name, include_dirs=roots)


def compile_source_file(dev, name: str):
    """Compile one of MLX's `.metal` files as shipped in the source checkout (include root: the checkout)."""
    path = source_file(name)
    return dev.compile(path.read_text(), path=path, include_dirs=[str(source_root())])


# -- checking --------------------------------------------------------------------------------------------------------
def check_close(got, want, rtol: float, atol: float) -> Result:
    """Result when `|got - want| <= atol + rtol * |want|` everywhere (NaN matches NaN, inf matches the same inf);
    else Mismatch naming the largest error and the worst index."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"shape {got.shape} where numpy gives {want.shape}")
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
        bound = atol + rtol * np.abs(np.where(np.isfinite(w), w, 0.0))
        excess = err - bound
    max_error = float(err.max()) if err.size else 0.0
    tolerance = float(bound.max()) if bound.size else atol
    if err.size and (excess > 0).any():
        worst = np.unravel_index(int(np.argmax(excess)), err.shape)
        idx = tuple(int(i) for i in worst)
        n_bad = int((excess > 0).sum())
        raise Mismatch(f"max error {max_error:.3g}; {n_bad}/{err.size} elements beyond atol={atol:g} "
                       f"rtol={rtol:g}; worst at {idx}: got {g[worst]!r}, want {w[worst]!r}")
    return Result(max_error, tolerance, f"{err.size} elements, rtol={rtol:g} atol={atol:g}")


def check_equal(got, want) -> Result:
    """Result when the arrays are identical (integers, indices, exact conversions); else Mismatch."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"shape {got.shape} where numpy gives {want.shape}")
    bad = got != want
    if want.dtype.kind == "f":
        bad &= ~(np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))
    if bad.any():
        worst = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise Mismatch(f"{int(bad.sum())}/{bad.size} elements differ; first at {tuple(int(i) for i in worst)}: "
                       f"got {got[worst]!r}, want {want[worst]!r}")
    return Result(0.0, 0.0, f"{bad.size} elements, exact")


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
