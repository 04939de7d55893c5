"""`python -m metile opt FILE.mtir --passes=...`: passes run on IR text, the result printed; stdin, `--verify`,
`--msl`, `-o`, and the errors (an unknown pass or option, a pipeline in the wrong order, a file that cannot be read,
IR that does not parse or verify) with their exit statuses."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_ir_examples import gemm

import metile
from metile.__main__ import main
from metile.emit import emit_msl
from metile.ir import parse, pretty
from metile.rewrite import DEFAULT_PIPELINE, fold_constants, parse_pipeline, plan_launch, run, skip_inactive

ROOT = Path(__file__).resolve().parents[1]
ALL = ",".join(p.name for p in DEFAULT_PIPELINE)


@metile.kernel
def offset_copy(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs, mask=offs < n) + 2 * 3, mask=offs < n)


@pytest.fixture
def ir_file(tmp_path) -> Path:
    x = np.zeros(100, np.float32)
    path = tmp_path / "offset_copy.mtir"
    path.write_text("// RUN: fold_constants\n" + pretty(offset_copy.trace(x, x, 100, BLOCK=64)))
    return path


def opt(capsys, *args) -> tuple[int, str, str]:
    status = main(["opt", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_without_passes_the_kernel_is_printed_again(capsys, ir_file):
    status, out, err = opt(capsys, ir_file)
    assert (status, err) == (0, "")
    assert out == pretty(parse(ir_file.read_text()))


def test_the_passes_given_run_in_order(capsys, ir_file):
    status, out, err = opt(capsys, ir_file, "--passes=fold_constants,skip_inactive,plan_launch", "--verify")
    assert (status, err) == (0, "")
    kernel = parse(ir_file.read_text())
    assert parse(out) == run([fold_constants, skip_inactive, plan_launch], kernel) != kernel
    assert out == pretty(run(parse_pipeline("fold_constants,skip_inactive,plan_launch"), kernel))


def test_the_whole_pipeline_on_a_gemm_and_its_msl(capsys, tmp_path):
    path = tmp_path / "gemm.mtir"
    path.write_text(pretty(gemm()))
    status, out, err = opt(capsys, path, f"--passes={ALL}", "--verify")
    assert (status, err) == (0, "")
    lowered = run(DEFAULT_PIPELINE, gemm())
    assert parse(out) == lowered
    status, out, err = opt(capsys, path, f"--passes={ALL}", "--msl", "-o", tmp_path / "gemm.metal")
    assert (status, out, err) == (0, "", "")
    assert (tmp_path / "gemm.metal").read_text() == emit_msl(lowered)


def test_stdin_is_read_for_a_dash(capsys, ir_file, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(ir_file.read_text()))
    status, out, _ = opt(capsys, "-", "--passes=fold_constants")
    assert status == 0 and parse(out) == run([fold_constants], parse(ir_file.read_text()))


def test_an_unknown_pass_or_option_is_a_command_line_error(capsys, ir_file):
    status, out, err = opt(capsys, ir_file, "--passes=fold_constants,skip_inactiv")
    assert (status, out) == (2, "")
    assert err.startswith("python -m metile opt: error: the pipeline names an unknown pass 'skip_inactiv'; known: ")
    status, _, err = opt(capsys, ir_file, "--passes=split_k{parts=4}")
    assert status == 2 and "pass split_k has no option 'parts': it takes none" in err
    status, _, err = opt(capsys, ir_file, "--passes=lower_tiles")
    assert status == 2 and "pass lower_tiles needs" in err and "add skip_inactive before lower_tiles" in err


def test_a_file_that_cannot_be_read_is_a_command_line_error(capsys, tmp_path):
    status, out, err = opt(capsys, tmp_path / "missing.mtir")
    assert (status, out) == (2, "")
    assert err == f"python -m metile opt: error: cannot read {tmp_path / 'missing.mtir'}: No such file or directory\n"


def test_a_parse_error_is_reported_at_its_line(capsys, ir_file):
    lines = ir_file.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "arange 0, 64" in line)
    lines[at] = lines[at].replace("arange 0, 64", "arange 0 64")
    ir_file.write_text("".join(lines))
    status, out, err = opt(capsys, ir_file, "--passes=fold_constants")
    assert (status, out) == (1, "")
    first, source, caret = err.splitlines()[:3]
    assert first.startswith(f"{ir_file}:{at + 1}:") and "error: expected ','" in first
    assert source.strip() == lines[at].strip() and caret.strip() == "^"


def test_ir_that_parses_but_does_not_verify_is_refused_with_verify(capsys, ir_file):
    text = ir_file.read_text()
    broken = text.replace("stage tile", "stage metal", 1)   # Tile IR nodes in a kernel that says it is Metal IR
    ir_file.write_text(broken)
    status, out, err = opt(capsys, ir_file, "--verify")
    assert (status, out) == (1, "") and "invalid IR after reading" in err
    assert opt(capsys, ir_file)[0] == 0   # read and printed again as it is, unverified


def test_the_command_runs_as_a_module(tmp_path, ir_file):
    done = subprocess.run([sys.executable, "-m", "metile", "opt", str(ir_file), "--passes=fold_constants"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert parse(done.stdout) == run([fold_constants], parse(ir_file.read_text()))
    modules = subprocess.run([sys.executable, "-c", "import sys; from metile.__main__ import main; "
                              f"main(['opt', {str(ir_file)!r}]); print(sorted(sys.modules))"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "metile.metal" not in modules   # reading and printing IR loads no device
