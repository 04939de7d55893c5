"""What importing metile loads: no device module (`metile.metal`, cffi, ctypes, the CPU device's toolchain) until a
device is used, no numpy for the compiler, and every public name of `metile` and `metile.rewrite` still there.

Each import runs in a fresh interpreter, as a user's program would start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import metile
import metile.rewrite

ROOT = Path(__file__).resolve().parents[1]
DEVICE_MODULES = ("metile.metal", "cffi", "_cffi_backend", "ctypes", "metile.devices", "metile.launch")


def loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def device_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m in DEVICE_MODULES or m.startswith(tuple(f"{d}." for d in DEVICE_MODULES))]


@pytest.mark.parametrize("code", [
    "import metile",
    "import metile.ir",
    "import metile.layout",
    "import metile.rewrite",
    "import metile.emit",
    "import metile.ir, metile.rewrite, metile.emit, metile.layout",
    "from metile.rewrite import DEFAULT_PIPELINE, run, parse_pipeline\nfrom metile.emit import compile_to_msl",
    "import metile\nmetile.arange, metile.MetileError, metile.DEFAULT_PIPELINE, metile.compile_to_msl",
])
def test_importing_the_compiler_loads_no_device_module(code):
    modules = loaded_after(code)
    assert device_modules(modules) == []
    assert "numpy" not in modules


def test_import_metile_alone_loads_only_the_package():
    assert [m for m in loaded_after("import metile") if m.startswith("metile")] == ["metile"]


def test_a_device_name_loads_the_devices_on_first_use():
    modules = loaded_after("import metile\nmetile.device")
    assert "metile.devices" in modules and "metile.metal.cpu.device" in modules


def test_every_public_name_of_metile_resolves():
    for name in metile.__all__:
        assert getattr(metile, name) is not None, name
    assert set(metile.__all__) <= set(dir(metile))
    assert callable(metile.kernel) and callable(metile.autotune)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        metile.no_such_name  # noqa: B018


def test_importing_a_submodule_named_like_a_function_keeps_the_function():
    """`metile.kernel` and `metile.autotune` are functions although `metile/kernel.py` and `metile/autotune.py` are
    modules: importing the module first (as `metile.autotune` itself does with `metile.kernel`) keeps them."""
    code = ("import metile.autotune, metile.kernel, metile\n"
            "import json\n"
            "print(json.dumps([type(metile.kernel).__name__, type(metile.autotune).__name__]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == ["function", "function"]


def test_a_submodule_is_an_attribute_of_metile():
    out = subprocess.run([sys.executable, "-c", "import metile; print(metile.cache.__name__)"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "metile.cache"


def test_metile_rewrite_exports_its_passes_and_drivers():
    from metile.rewrite.pipeline import DEFAULT_PIPELINE

    for p in DEFAULT_PIPELINE:
        assert getattr(metile.rewrite, p.name) is p
    for name in ("run", "parse_pipeline", "check_pipeline", "Pass", "Fact", "PassContext", "Analyses",
                 "bottom_up", "first_of", "by_class", "substitute", "define_pass", "PipelineError", "RewriteError",
                 "UnsupportedConstructError", "OPTIONAL_PASSES", "DEFAULT_PIPELINE"):
        assert name in metile.rewrite.__all__ and getattr(metile.rewrite, name) is not None
    assert set(metile.rewrite.__all__) <= set(dir(metile.rewrite))
    assert metile.rewrite.parse_pipeline("fold_constants,split_k") == [metile.rewrite.fold_constants,
                                                                        metile.rewrite.split_k]


def test_the_compiler_loads_no_ir_text_form_until_it_is_read():
    """Compiling neither prints nor parses IR: `metile.ir` loads its printer, parser and scanner (and json) when
    `pretty`, `parse`, `parse_type` or `ParseError` is first read; layout pictures load html, exact rounding of
    constants fractions."""
    lazy = ("metile.ir.printer", "metile.ir.parser", "metile.ir.scanner", "html", "fractions")
    modules = loaded_after("import metile.ir, metile.rewrite, metile.emit, metile.layout")
    assert [m for m in lazy if m in modules] == []
    modules = loaded_after("import metile.ir\nmetile.ir.pretty, metile.ir.ParseError")
    assert "metile.ir.printer" in modules and "metile.ir.scanner" in modules


def test_metile_ir_names_its_text_form_before_loading_it():
    import metile.ir
    from metile.ir.parser import parse, parse_type
    from metile.ir.printer import pretty
    from metile.ir.scanner import ParseError

    assert {"pretty", "parse", "parse_type", "ParseError"} <= set(dir(metile.ir)) >= set(metile.ir.__all__)
    assert (metile.ir.pretty, metile.ir.parse, metile.ir.parse_type, metile.ir.ParseError) == (
        pretty, parse, parse_type, ParseError)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        metile.ir.no_such_name  # noqa: B018


def test_decorating_and_tracing_a_kernel_loads_no_device(tmp_path):
    """The devices load when a kernel first compiles (`metile.device()`), not when one is defined or traced."""
    code = ("import metile\n"
            "@metile.kernel\n"
            "def copy(X, Y, BLOCK: metile.constexpr):\n"
            "    offs = metile.arange(0, BLOCK)\n"
            "    metile.store(Y + offs, metile.load(X + offs))\n"
            "import numpy as np\n"
            "copy.trace(np.zeros(8, np.float32), np.zeros(8, np.float32), BLOCK=8)\n"
            "copy.lower(np.zeros(8, np.float32), np.zeros(8, np.float32), BLOCK=8)\n")
    path = tmp_path / "decorate_only.py"
    path.write_text(code)   # from a file: metile traces a kernel from its source
    modules = loaded_after(f"exec(compile(open({str(path)!r}).read(), {str(path)!r}, 'exec'))")
    assert "metile.devices" not in modules and not any(m.startswith("metile.metal.cpu") for m in modules)
    assert "cffi" not in modules
