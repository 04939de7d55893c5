"""Runs a fuzzed kernel on the CPU device and compares every output array with the model.

The kernel's source is written to a module in a scratch directory (metile reads a kernel's source from its
file) and imported. It is launched with the default pipeline, then with each optional pass removed (only where
that changes the Metal IR: otherwise it would compile to the same code), with all of them removed, and, when
asked, without `skip_inactive` (which must then be refused or still be right), some launches under the
sanitizer. Every launch is compared with the model, not with another launch.

A failure is a `Failure`: which launch, and either the first elements that differ (with the model's value, the
device's and the allowed error) or the exception raised. Exceeding a documented device limit (threadgroup
memory, threads) is not a failure.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import attrs
import numpy as np

import metile
from metile.frontend.errors import LoweringUnavailableError
from metile.metal.errors import LaunchError
from metile.rewrite.pipeline import DEFAULT_PIPELINE, OPTIONAL_PASSES, pass_name
from tests.fuzz.dtypes import TYPES, as_f64
from tests.fuzz.interp import ModelError, run_model
from tests.fuzz.prog import Kernel, kernel_src

FACTOR = 2.0          # a device result may lie within FACTOR * err of the model's
STATS = {"exact": 0, "tolerance": 0, "unchecked": 0,    # output elements compared, by strictness
         "refused": 0}                                   # kernels refused with LoweringUnavailableError


@attrs.frozen
class Failure:
    launch: str                       # "default", "no_<pass>", "none", "sanitize", "no_skip_inactive"
    kind: str                         # "mismatch" or "error"
    section: str = ""
    detail: str = ""

    def __str__(self) -> str:
        return f"[{self.launch}] {self.kind} {self.section}: {self.detail}"


def load_kernel(k: Kernel, folder: Path):
    """The `@metile.kernel` of `k`, from a module written to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{k.name}.py"
    path.write_text(kernel_src(k))
    name = f"fuzzmod_{k.name}_{abs(hash(path.read_text())) % 10 ** 8}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, k.name)


def launch_args(k: Kernel) -> list:
    return [p.argument() for p in k.params]


def expected(p, mem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An output's whole array after a launch (the base of a view), the model's values and error bounds: the
    elements of a view are written back, never the gaps between them (2.4)."""
    want, err = p.value.reshape(-1).copy(), np.zeros(p.value.size)
    off = p.offsets()
    want[off] = mem.arrays[p.name][off - off.min()]
    err[off] = mem.errs[p.name][off - off.min()]
    return want, err


def written(p, arg) -> np.ndarray:
    return (arg.base if p.view else arg).reshape(-1)


def type_name(a: np.ndarray) -> str:
    return next(n for n, d in TYPES.items() if d.np == a.dtype)


def agrees(got: np.ndarray, want: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Per element, whether a device result agrees with the model's value and error bound."""
    g = got.reshape(-1)
    if TYPES[type_name(g)].kind == "f":
        G, W = as_f64(g), as_f64(want)
        with np.errstate(all="ignore"):
            same = (G == W) & (np.signbit(G) == np.signbit(W)) | np.isnan(G) & np.isnan(W)
            close = (G == W) | np.isnan(G) & np.isnan(W) | (np.abs(G - W) <= FACTOR * err)
        return np.where(err == 0, same, close) | (err == np.inf)
    return (g == want) | (err > 0)


def compare(k: Kernel, args: list, mem, undecided: set[str], label: str) -> list[Failure]:
    out = []
    for p, got in zip(k.params, args):
        if p.role != "out" or p.name.split("_")[0] in undecided:
            continue
        want, err = expected(p, mem)
        g = written(p, got)
        ok = agrees(g, want, err)
        STATS["exact"] += int((err == 0).sum())
        STATS["unchecked"] += int((err == np.inf).sum())
        STATS["tolerance"] += int(((err > 0) & (err < np.inf)).sum())
        if not ok.all():
            bad = np.nonzero(~ok)[0]
            show = ", ".join(f"[{i}] want {want[i]!r} got {g[i]!r} (err {err[i]:.3g})" for i in bad[:4])
            out.append(Failure(label, "mismatch", p.name.split("_")[0],
                               f"{p.name}: {len(bad)} of {g.size} elements differ: {show}"))
    return out


def launch(jk, k: Kernel, label: str, mem, undecided, options: dict, sanitize: bool = False,
           refusal_ok: bool = False) -> list[Failure]:
    args = launch_args(k)
    options = dict(k.options) | options
    try:
        jk[k.grid](*args, **options, sanitize=sanitize)
    except LaunchError as e:
        if "threadgroup memory" in str(e) or "threads per threadgroup" in str(e):
            return []                 # a documented device limit (section 10)
        return [Failure(label, "error", "", f"{type(e).__name__}: {_first_line(e)}")]
    except LoweringUnavailableError as e:
        if refusal_ok:
            return []
        if label == "default":                   # documented for shapes it cannot lower (6.6); counted
            STATS["refused"] += 1
            return [Failure(label, "refused", "", f"{type(e).__name__}: {_first_line(e)}")]
        return [Failure(label, "error", "", f"{type(e).__name__}: {_first_line(e)}")]
    except metile.MetileError as e:
        if refusal_ok:
            return []
        return [Failure(label, "error", "", f"{type(e).__name__}: {_first_line(e)}")]
    except Exception as e:  # noqa: BLE001 - any other exception from metile is a crash, which is a finding
        return [Failure(label, "error", "", f"crash {type(e).__name__}: {_first_line(e)}")]
    return compare(k, args, mem, undecided, label)


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return " | ".join(text[:3])[:400]


def pipelines(jk, k: Kernel, options: dict) -> dict[str, list]:
    """The pipelines worth launching: each optional pass removed where the pass changed the kernel in the default
    pipeline (elsewhere removing it changes nothing), and all of them removed."""
    from metile.rewrite.pipeline import run
    changed: list[str] = []
    prev = None

    def note(name: str, out) -> None:
        nonlocal prev
        if prev is not None and out is not prev and out != prev:
            changed.append(name)
        prev = out

    try:
        prev = jk.trace(*launch_args(k), **(dict(k.options) | options))
        run(DEFAULT_PIPELINE, prev, on_pass=note)
    except Exception:  # noqa: BLE001 - the default launch reports it
        return {}
    out = {f"no_{pass_name(p)}": [q for q in DEFAULT_PIPELINE if q is not p]
           for p in OPTIONAL_PASSES if pass_name(p) in changed}
    if len(out) > 1:
        out["none"] = [q for q in DEFAULT_PIPELINE if q not in OPTIONAL_PASSES]
    return out


def check_kernel(k: Kernel, folder: Path, *, options: dict | None = None, variants: bool | int = True,
                 sanitize: bool = False, drop_skip_inactive: bool = False, relax: frozenset = frozenset(),
                 rotate: int = 0) -> tuple[list[Failure], int]:
    """Every failure of `k` (model vs device), and the number of launches made. `variants` is True (every
    pipeline that changes the code), False, or how many of them to launch, taken in turn from `rotate`."""
    options = options or {}
    try:
        mem, undecided = run_model(k, relax)
    except ModelError as e:
        return [Failure("model", "invalid", "", str(e))], 0
    jk = load_kernel(k, folder)
    fails = launch(jk, k, "default", mem, undecided, options)
    n = 1
    if fails:
        return [f for f in fails if f.kind != "refused"], n
    if variants:
        chosen = list(pipelines(jk, k, options).items())
        if variants is not True and len(chosen) > variants:
            start = rotate % len(chosen)
            chosen = (chosen[start:] + chosen[:start])[:variants]
        for label, pipe in chosen:
            fails += launch(jk.with_pipeline(pipe), k, label, mem, undecided, options)
            n += 1
    if sanitize:
        fails += launch(jk, k, "sanitize", mem, undecided, options, sanitize=True)
        n += 1
    if drop_skip_inactive:                      # a pass the meaning depends on: refused, or the kernel is right
        pipe = [q for q in DEFAULT_PIPELINE if pass_name(q) != "skip_inactive"]
        try:
            jk_without = jk.with_pipeline(pipe)
        except metile.MetileError:
            return fails, n
        fails += launch(jk_without, k, "no_skip_inactive", mem, undecided, options, refusal_ok=True)
        n += 1
    return fails, n


def pipeline_of(label: str) -> list | None:
    """The pipeline a launch label names (None for the kernel's own)."""
    if label in ("default", "sanitize"):
        return None
    if label == "none":
        return [q for q in DEFAULT_PIPELINE if q not in OPTIONAL_PASSES]
    return [q for q in DEFAULT_PIPELINE if pass_name(q) != label[3:]]


def check_launch(k: Kernel, folder: Path, label: str, options: dict | None = None,
                 relax: frozenset = frozenset(), pipeline: list | None = None) -> list[Failure]:
    """The failures of one launch of `k` (the model's verdict first: an invalid program raises ModelError), with
    the pipeline `label` names, or `pipeline`."""
    mem, undecided = run_model(k, relax)
    jk = load_kernel(k, folder)
    pipe = pipeline if pipeline is not None else pipeline_of(label)
    if pipe is not None:
        try:
            jk = jk.with_pipeline(pipe)
        except metile.MetileError as e:
            return [] if label == "no_skip_inactive" else [Failure(label, "error", "", f"{type(e).__name__}: {e}")]
    return launch(jk, k, label, mem, undecided, options or {}, sanitize=label == "sanitize",
                  refusal_ok=label == "no_skip_inactive")


def same_failure(f: Failure, g: Failure) -> bool:
    if f.kind != g.kind:
        return False
    if f.kind == "mismatch":
        return True
    return f.detail.split(":")[0] == g.detail.split(":")[0]


def still_fails(failure: Failure, folder: Path, options: dict | None = None, relax: frozenset = frozenset()):
    """A predicate: whether a kernel still fails as `failure` did, in the same launch."""
    def pred(k: Kernel) -> bool:
        return any(same_failure(failure, g) for g in check_launch(k, folder, failure.launch, options, relax))
    return pred
