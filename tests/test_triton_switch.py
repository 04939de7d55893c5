"""Switching `import triton` to metile, each in a fresh Python process: `metile.triton.install()` (also over a
`triton` package found on the path, imported before or not), `uninstall()`, and the runner `python -m
metile.triton script.py` / `-m module` / `-c code`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], tmp_path: Path, fake_wheel: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """`python args...` from `tmp_path`, importing metile from this checkout; with `fake_wheel`, a package named
    `triton` is on the path too (standing in for the installed Triton wheel)."""
    paths = [str(ROOT)]
    if fake_wheel:
        wheel = tmp_path / "site"
        (wheel / "triton" / "language").mkdir(parents=True, exist_ok=True)
        (wheel / "triton" / "__init__.py").write_text("__version__ = 'wheel'\nWHEEL = True\n")
        (wheel / "triton" / "language" / "__init__.py").write_text("WHEEL = True\n")
        (wheel / "triton" / "experimental.py").write_text("WHEEL = True\n")
        paths.append(str(wheel))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "METILE_DEVICE": "cpu"}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, **kwargs)


KERNEL = textwrap.dedent("""
    import numpy as np
    import triton
    import triton.language as tl

    @triton.jit
    def add(X, Y, Out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Out + offs, tl.load(X + offs, mask=offs < n) + tl.load(Y + offs, mask=offs < n), mask=offs < n)

    x = np.arange(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    add[(triton.cdiv(100, 64),)](x, x, out, 100, BLOCK=64)
    assert (out == 2 * x).all()
    print("served by", triton.__name__ if triton.__name__ != "triton" else triton.__spec__.name, triton.__version__)
""")


def test_install_serves_import_triton_over_a_triton_on_the_path(tmp_path):
    program = textwrap.dedent("""
        import triton as before
        assert before.WHEEL                       # the stand-in wheel, imported before install()
        import metile.triton
        metile.triton.install()
        import triton
        import triton.language as tl
        from triton.language.extra.libdevice import tanh
        from triton.language.extra.cuda.libdevice import tanh as cuda_tanh
        from triton.runtime import driver
        import triton.runtime.driver
        assert triton is metile.triton and tl is metile.triton.language and tanh is cuda_tanh
        assert not hasattr(triton, "WHEEL") and triton.language.constexpr is metile.constexpr
        assert driver.active.get_current_target().backend == "metal"
        try:
            import triton.experimental
        except ModuleNotFoundError as e:
            assert "served by metile" in str(e) and e.name == "triton.experimental", e
        else:
            raise AssertionError("the stand-in wheel's triton.experimental was imported")
        import triton.profiler
        assert triton.profiler.__name__ == "metile.triton.profiler"
        import sys
        from metile.triton.install import TritonFinder
        metile.triton.install()                   # twice is once
        assert sum(isinstance(f, TritonFinder) for f in sys.meta_path) == 1
    """)
    after = textwrap.dedent("""
        metile.triton.uninstall()
        import triton as after
        assert after.WHEEL                        # the path's triton again
    """)
    (tmp_path / "prog.py").write_text(program + KERNEL + after)
    done = _run(["prog.py"], tmp_path, fake_wheel=True)
    assert done.returncode == 0, done.stderr
    assert "served by metile.triton 3.4.0" in done.stdout


def test_runner_runs_a_script_with_its_arguments(tmp_path):
    (tmp_path / "script.py").write_text("import sys\nprint('argv', sys.argv[1:])\n" + KERNEL)
    done = _run(["-m", "metile.triton", "script.py", "a", "--b"], tmp_path, fake_wheel=True)
    assert done.returncode == 0, done.stderr
    assert "argv ['a', '--b']" in done.stdout and "served by metile.triton 3.4.0" in done.stdout


def test_runner_runs_pytest_and_code(tmp_path):
    (tmp_path / "test_kernel.py").write_text("def test_add():\n" + textwrap.indent(KERNEL, "    "))
    done = _run(["-m", "metile.triton", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kernel.py"], tmp_path,
                fake_wheel=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    done = _run(["-m", "metile.triton", "-c", "import triton, sys; print(triton.__version__, sys.argv[1:])", "x"],
                tmp_path, fake_wheel=True)
    assert done.returncode == 0 and done.stdout.strip() == "3.4.0 ['x']", done.stderr


@pytest.mark.parametrize("args, message", [([], "usage"), (["missing.py"], "can't open file"), (["-m"], "needs")])
def test_runner_usage_errors(tmp_path, args, message):
    done = _run(["-m", "metile.triton", *args], tmp_path)
    assert done.returncode == 2 and message in done.stderr


def test_without_install_import_triton_is_untouched(tmp_path):
    done = _run(["-c", "import metile.triton, triton; print(triton.WHEEL)"], tmp_path, fake_wheel=True)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_torch_imports_its_compiler_over_metiles_triton_and_does_not_take_it_for_a_cpu_backend(tmp_path):
    """torch's compiler (torch._dynamo, torch._inductor, which programs such as Liger-Kernel import through
    `torch.compiler.disable`) imports `triton.backends.compiler`, `triton.compiler.compiler` and more when a `triton`
    package is present: they import from metile's, torch finds no Triton backend for the CPU (so TorchInductor keeps
    its C++ code on CPU tensors and torch.compile works), and what it would compile through refuses loudly."""
    pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    program = textwrap.dedent("""
        import metile, metile.triton
        metile.triton.install()
        import torch
        import torch._dynamo, torch._inductor.utils, torch._inductor.runtime.triton_compat as compat
        from torch.utils._triton import has_triton, has_triton_package
        import triton, triton.backends, triton.backends.compiler, triton.compiler.compiler, triton.runtime.cache
        assert has_triton_package() and not has_triton() and compat.HAS_TRITON
        assert triton.backends.backends == {} and compat.Config is triton.Config
        target = triton.runtime.driver.active.get_current_target()
        assert isinstance(target, triton.backends.compiler.GPUTarget) and target.backend == "metal"
        assert triton.runtime.cache.triton_key() == compat.triton_key() == "metile-%s-triton-3.4.0" % metile.__version__
        for call in (lambda: triton.compiler.compiler.make_backend(target),
                     lambda: triton.compiler.compiler.ASTSource(None, {})):
            try:
                call()
            except metile.MetileError as e:
                assert "not supported by metile" in str(e) or "no Triton compiler backend" in str(e), e
            else:
                raise AssertionError("Triton's staged compile was served")
        f = torch.compile(lambda x: (x * 2).sin().sum())
        x = torch.linspace(0, 1, 10)
        assert torch.allclose(f(x), (x * 2).sin().sum())
        print("torch ok")
    """)
    done = _run(["-c", program], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torch ok" in done.stdout
