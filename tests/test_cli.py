"""`python -m metile`: `demo` runs a kernel end to end and checks it against numpy; `compile` prints a kernel's
MSL (and IR) for argument types and constexprs given on the command line, and reports every mistake in one
message with exit status 2 (1 when the kernel does not compile), never with a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from metile.__main__ import main
from metile.cli import parse_value

KERNELS = Path(__file__).resolve().parent / "cli_kernels"
VEC_ADD = str(KERNELS / "vector_add.py")
REFUSED = str(KERNELS / "refused.py")
VEC_ARGS = ["--arg", "A=f32*", "--arg", "B=f32*", "--arg", "C=f32*", "--arg", "n=i32"]
ENTRY = re.compile(r"kernel void (mtile_)?vec_add\(")


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metile", *argv], capture_output=True, text=True)


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_demo_runs_and_matches_numpy():
    out = cli("demo")
    assert out.returncode == 0, out.stderr
    assert "-> OK" in out.stdout and "device: " in out.stdout


def test_unknown_command_is_rejected():
    out = cli("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_help_describes_the_commands():
    top = cli("--help")
    assert top.returncode == 0 and "compile" in top.stdout and "demo" in top.stdout
    sub = cli("compile", "--help")
    assert sub.returncode == 0
    for word in ("FILE.py[:KERNEL]", "--arg NAME=TYPE", "-D NAME=VALUE", "--tile-ir", "--metal-ir", "--no-device",
                 "f32*", "exit status"):
        assert word in sub.stdout


def test_compile_prints_the_msl():
    out = cli("compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=256")
    assert out.returncode == 0, out.stderr
    assert ENTRY.search(out.stdout) and "* 256" in out.stdout
    assert out.stdout.startswith("#include <metal_stdlib>") and not out.stderr


def test_compile_in_process_prints_the_msl(capsys):
    status, out, err = run_main(capsys, "compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=128")
    assert status == 0, err
    assert ENTRY.search(out) and "* 128" in out and "device float* C" in out


def test_stages_and_output_file(capsys, tmp_path):
    target = tmp_path / "vec_add.metal"
    status, out, err = run_main(capsys, "compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=64", "--tile-ir",
                                "--metal-ir", "--no-device", "-o", str(target))
    assert status == 0, err
    assert out.index("// Tile IR of vec_add") < out.index("// Metal IR of vec_add")
    assert "stage tile" in out and "stage metal" in out and "kernel void" not in out
    assert ENTRY.search(target.read_text())


def test_stages_before_the_msl_on_stdout(capsys):
    status, out, _ = run_main(capsys, "compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=64", "--metal-ir",
                              "--no-device")
    assert status == 0
    assert out.index("// Metal IR of vec_add") < out.index("// MSL of vec_add") < ENTRY.search(out).start()


def test_argument_types_reach_the_msl(capsys):
    status, out, err = run_main(capsys, "compile", f"{VEC_ADD}:vec_add", "--arg", "A=f16*", "--arg", "B=f16*",
                                "--arg", "C=f16*", "--arg", "n=u32", "-D", "BLOCK=32", "--no-device")
    assert status == 0, err
    assert "device half* C" in out and "constant uint& n" in out


def test_defaults_and_runtime_floats(capsys):
    status, out, err = run_main(capsys, "compile", f"{VEC_ADD}:scale", "--arg", "X=f32*", "--arg", "Out=f32*",
                                "--arg", "n=i32", "--arg", "alpha=f32", "--no-device")
    assert status == 0, err
    assert "constant float& alpha" in out and "* 128" in out


def test_the_only_kernel_of_a_file_needs_no_name(capsys, tmp_path):
    src = (KERNELS / "vector_add.py").read_text().split("@metile.kernel\ndef scale")[0]
    (tmp_path / "one.py").write_text(src)
    status, out, err = run_main(capsys, "compile", str(tmp_path / "one.py"), *VEC_ARGS, "-D", "BLOCK=32",
                                "--no-device")
    assert status == 0, err
    assert ENTRY.search(out)


def test_the_module_is_forgotten_afterwards(capsys):
    modules, path = set(sys.modules), list(sys.path)
    assert main(["compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=32", "--no-device"]) == 0
    capsys.readouterr()
    added = set(sys.modules) - modules
    assert not [m for m in added if not m.startswith("metile.")] and sys.path == path


def test_siblings_of_the_file_are_importable(capsys, tmp_path):
    (tmp_path / "helpers_for_cli.py").write_text((KERNELS / "vector_add.py").read_text())
    (tmp_path / "main_file.py").write_text("from helpers_for_cli import vec_add\n")
    status, out, err = run_main(capsys, "compile", f"{tmp_path / 'main_file.py'}:vec_add", *VEC_ARGS,
                                "-D", "BLOCK=32", "--no-device")
    assert status == 0, err
    sys.modules.pop("helpers_for_cli", None)


@pytest.mark.parametrize(("raw", "value"), [("256", 256), ("-3", -3), ("0x100", 256), ("1e-5", 1e-5), ("0.5", 0.5),
                                             ("True", True), ("False", False), ("None", None), ("relu", "relu"),
                                             ('"relu"', "relu"), ("'64'", "64")])
def test_define_values(raw, value):
    assert parse_value(raw) == value and type(parse_value(raw)) is type(value)


MISTAKES = [
    (["nope/missing.py:vec_add"], "no such file: nope/missing.py"),
    ([str(KERNELS)], "not a file"),
    ([f"{VEC_ADD}:"], "expected FILE.py:KERNEL"),
    ([f"{VEC_ADD}:vec_ad", *VEC_ARGS], "has no kernel named 'vec_ad'; did you mean 'vec_add'?"),
    ([f"{VEC_ADD}:vec_add_reference"], "'vec_add_reference' in"),
    ([f"{VEC_ADD}:STEP"], "is not a @metile.kernel (a value of type int)"),
    ([VEC_ADD, *VEC_ARGS], "name the kernel as"),
    ([f"{VEC_ADD}:vec_add", "--arg", "A"], "--arg 'A': expected NAME=TYPE"),
    ([f"{VEC_ADD}:vec_add", "--arg", "A=float"], "--arg A: unknown type 'float'"),
    ([f"{VEC_ADD}:vec_add", "--arg", "A=f64*"], "Metal has no 64-bit floats"),
    ([f"{VEC_ADD}:vec_add", "--arg", "A=f32*", "-D", "BLOCK=8"], "missing --arg for B, C, n"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS], "missing -D for the constexpr BLOCK of vec_add"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS, "--arg", "Z=i32", "-D", "BLOCK=8"], "vec_add has no runtime parameter 'Z'"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS, "--arg", "BLOCK=i32"], "'BLOCK' is a constexpr parameter"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "n=4", "-D", "BLOCK=8"], "'n' is a runtime parameter"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK"], "-D 'BLOCK': expected NAME=VALUE"),
    ([f"{VEC_ADD}:vec_add", *VEC_ARGS, "--arg", "n=i32", "-D", "BLOCK=8"], "--arg n is given twice"),
]


@pytest.mark.parametrize(("argv", "message"), MISTAKES, ids=[m for _, m in MISTAKES])
def test_command_line_mistakes(capsys, argv, message):
    status, out, err = run_main(capsys, "compile", *argv)
    assert status == 2 and not out
    assert err.startswith("python -m metile compile: error: ") and err.count("\n") == 1
    assert message in err


def test_mistakes_in_a_subprocess_print_no_traceback():
    out = cli("compile", f"{VEC_ADD}:vec_add", "--arg", "A=f32")
    assert out.returncode == 2 and "missing --arg for B, C, n" in out.stderr and "Traceback" not in out.stderr


def test_a_kernel_error_is_located(capsys):
    status, out, err = run_main(capsys, "compile", REFUSED, "--arg", "X=f32*", "--arg", "Out=f32*", "--arg", "n=i32",
                                "-D", "BLOCK=64")
    assert status == 1 and not out
    head, line, caret = err.splitlines()
    assert head.startswith(f"{REFUSED}:11:5: error: ") and "try" in head
    assert line.strip() == "try:" and caret.strip() == "^"


def test_a_kernel_error_in_a_subprocess():
    out = cli("compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=wide")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert re.match(rf"{re.escape(VEC_ADD)}:\d+:\d+: error: ", out.stderr)


def test_a_lowering_refusal_is_located(capsys, monkeypatch):
    import metile.rewrite.pipeline as pipeline
    from metile.rewrite.errors import UnsupportedConstructError

    def refuse_everything(passes, k, **options):
        raise UnsupportedConstructError("not lowered in this test", k.body[0].loc)

    monkeypatch.setattr(pipeline, "run", refuse_everything)
    status, out, err = run_main(capsys, "compile", f"{VEC_ADD}:vec_add", *VEC_ARGS, "-D", "BLOCK=64", "--no-device")
    assert status == 1 and not out
    assert re.match(rf"{re.escape(VEC_ADD)}:\d+:\d+: error: cannot compile vec_add: not lowered in this test", err)
    assert err.rstrip().endswith("^")


@pytest.mark.parametrize(("source", "where", "message"), [
    ("import metile\n\nraise RuntimeError('boom')\n", ":3:1: error: ", "raised RuntimeError: boom"),
    ("def f(:\n    pass\n", ":1:7: error: ", "invalid syntax"),
    ("import metile\nmetile.program_id(0)\n", ":2:1: error: ", "can only be used inside a @metile.kernel"),
    ("import sys\nsys.exit(3)\n", ":2:1: error: ", "raised SystemExit: 3"),
])
def test_a_file_that_fails_to_import(capsys, tmp_path, source, where, message):
    path = tmp_path / "broken.py"
    path.write_text(source)
    status, out, err = run_main(capsys, "compile", f"{path}:k")
    assert status == 2 and not out
    assert err.startswith(f"{path}{where}") and message in err and "Traceback" not in err
