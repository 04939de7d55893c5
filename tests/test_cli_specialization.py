"""`python -m metile compile` prints the kernel a launch would run: an integer argument given only its type is a
run-time value (the general kernel, not the one a launch with the value 1 compiles), and `--arg n=i32:VALUE`
compiles what a launch with that value compiles (the constant 1, a known multiple of 16, or the general kernel).
The README's excerpt of the command's output is checked against the command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from metile.__main__ import main
from metile.cli import GENERAL_INT, ArgSpec, parse_arg, stand_in
from metile.frontend.specialize import integer_facts
from metile.ir.types import DType, TileType

ROOT = Path(__file__).resolve().parent.parent
VEC_ADD = str(ROOT / "tests" / "cli_kernels" / "vector_add.py")
POINTERS = ["--arg", "A=f32*", "--arg", "B=f32*", "--arg", "C=f32*", "-D", "BLOCK=256", "--no-device"]


def compile_out(capsys, *extra: str) -> str:
    status = main(["compile", f"{VEC_ADD}:vec_add", *POINTERS, *extra])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def test_an_integer_given_its_type_only_is_read_at_run_time(capsys):
    out = compile_out(capsys, "--arg", "n=i32", "--tile-ir")
    assert "t2 < n;" in out and "< 1;" not in out
    assert re.search(r"%n: i32\)", out) and "multiple" not in out


@pytest.mark.parametrize("kind", ["i32", "u32", "i16", "u8"])
def test_every_integer_type_gets_the_general_kernel(capsys, kind):
    out = compile_out(capsys, "--arg", f"n={kind}")
    body = out[out.index("{"):]
    assert re.search(r"\bn\b", body) and "< 1;" not in out


def test_the_general_stand_in_is_not_specialised_on():
    for kind in ("i32", "u32", "i8", "u16"):
        value = stand_in(ArgSpec("n", kind, False))
        assert integer_facts([(ArgSpec("n", kind, False), value, TileType(DType(kind), ()))]) == ()
    assert GENERAL_INT != 1 and GENERAL_INT % 16


def test_the_value_one_compiles_the_constant(capsys):
    out = compile_out(capsys, "--arg", "n=i32:1")
    assert "t2 < 1;" in out and "t2 < n" not in out


def test_a_multiple_of_16_is_known_to_be_one(capsys):
    out = compile_out(capsys, "--arg", "n=i32:4096", "--tile-ir")
    assert "%n: i32 multiple 16" in out and re.search(r"\bt\d+ < n;", out)


def test_another_value_compiles_the_general_kernel(capsys):
    general = compile_out(capsys, "--arg", "n=i32")
    assert compile_out(capsys, "--arg", "n=i32:1000") == general
    assert compile_out(capsys, "--arg", "n=i32:0x3e9") == general


def test_a_pointer_may_be_given_an_element_count(capsys):
    status = main(["compile", f"{VEC_ADD}:vec_add", "--arg", "A=f32*:4096", *POINTERS[2:], "--arg", "n=i32"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "device const float* A" in out


@pytest.mark.parametrize(("text", "message"), [
    ("n=i32:", "expected a value after the colon, e.g. --arg n=i32:1"),
    ("x=f32:", "expected a value after the colon, e.g. --arg x=f32:1.0"),
    ("n=i32:ten", "a value of type i32 is a whole number"),
    ("n=u8:256", "a value of type u8 is a whole number in 0..255, not '256'"),
    ("b=bool:maybe", "a bool is True, False, 1 or 0"),
    ("A=f32*:0", "the element count must be a whole number >= 1"),
    ("A=f32*:many", "the element count must be a whole number >= 1"),
])
def test_bad_values_are_refused(capsys, text, message):
    status = main(["compile", f"{VEC_ADD}:vec_add", "--arg", text])
    _, err = capsys.readouterr()
    assert status == 2 and message in err and "Traceback" not in err


def test_values_are_read_with_their_types():
    assert parse_arg("n=i32:1000") == ArgSpec("n", "i32", False, 1000)
    assert parse_arg("x=f32:0.5") == ArgSpec("x", "f32", False, 0.5)
    assert parse_arg("A=f16*:64") == ArgSpec("A", "f16", True, 64)
    assert parse_arg("n=i32") == ArgSpec("n", "i32", False, None)
    assert stand_in(parse_arg("n=i32:7")) == 7 and type(stand_in(parse_arg("n=i32:7"))) is int
    assert stand_in(parse_arg("A=f32*:64")).shape == (64,)


def test_the_readme_shows_what_the_command_prints(capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Printing a kernel's MSL"):]
    command = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    excerpt = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    argv = command.replace("\\\n", " ").split()
    assert argv[:4] == ["python", "-m", "metile", "compile"]
    status = main([argv[3], str(ROOT / argv[4].split(":")[0]) + ":" + argv[4].split(":")[1], *argv[5:],
                   "--no-device"])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    at = 0
    for want in excerpt.splitlines():
        if want.strip() == "...":
            continue
        assert want in lines[at:], f"README line not printed (in order): {want!r}"
        at = lines.index(want, at) + 1
