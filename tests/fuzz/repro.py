"""A failing fuzzed kernel as a standalone script: the kernel's source, its arguments spelled exactly (floats by
their bits), the launch, and what the model expects of each output array that differed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.fuzz.dtypes import TYPES
from tests.fuzz.interp import run_model
from tests.fuzz.prog import Kernel, kernel_src, value_src
from tests.fuzz.runner import agrees, check_launch, expected, launch_args, load_kernel, pipeline_of, written


def repro_src(k: Kernel, label: str, folder: Path, options: dict | None = None) -> str:
    """The script, with the model's and the device's values of each output that differs."""
    mem, _ = run_model(k)
    args = launch_args(k)
    jk = load_kernel(k, folder)
    pipe = pipeline_of(label)
    got_error = None
    try:
        (jk.with_pipeline(pipe) if pipe else jk)[k.grid](*args, **dict(k.options), **(options or {}),
                                                     sanitize=label == "sanitize")
    except Exception as e:  # noqa: BLE001 - shown in the repro
        got_error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    src = kernel_src(k).replace("import metile\n", "")
    lines = ["import ml_dtypes", "import numpy as np", "", "import metile", src.rstrip(), ""]
    for p in k.params:
        view = f"[{', '.join(f'{a}:{b}:{c}' for a, b, c in p.view)}]" if p.view else ""
        lines.append(f"{p.name} = {value_src(p.value)}{view}")
    opts = "".join(f", {a}={b!r}" for a, b in (dict(k.options) | (options or {})).items())
    if label == "sanitize":
        opts += ", sanitize=True"
    if label != "default":
        lines.append(f"# launch: {label}")
    lines.append(f"{k.name}[{k.grid!r}]({', '.join(p.name for p in k.params)}{opts})")
    if got_error:
        lines.append(f"# raises {got_error}")
    for p, got in zip(k.params, args):
        if p.role != "out":
            continue
        want, err = expected(p, mem)
        got = written(p, got)
        ok = agrees(got, want, err) if got_error is None else np.zeros(want.size, bool)
        if ok.all():
            continue
        if want.size <= 16:
            lines.append(f"# expected {p.name} = {_values(want)}")
            if (err > 0).any():
                lines.append(f"#   within {_values(err)}")
        bad = np.nonzero(~ok)[0]
        if got_error is None:
            lines.append(f"# {len(bad)} elements of {p.name} differ, e.g.:")
            for i in bad[:6]:
                within = f" (within {err[i]:.3g})" if err[i] else ""
                lines.append(f"#   {p.name}[{i}]: expected {_one(want[i])}{within}, got {_one(got.reshape(-1)[i])}")
    return "\n".join(lines) + "\n"


def _one(x) -> str:
    v = float(x) if np.asarray(x).dtype.kind in "fV" or np.asarray(x).dtype == TYPES["bf16"].np else x
    return repr(v) if not isinstance(v, (np.integer, np.bool_)) else repr(v.item())


def _values(a: np.ndarray) -> str:
    return "[" + ", ".join(_one(x) for x in np.asarray(a).reshape(-1)) + "]"


__all__ = ["repro_src", "check_launch"]
