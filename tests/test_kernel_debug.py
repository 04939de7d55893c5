"""`METILE_DEBUG` and `METILE_DEBUG_DIR`: the stages a compile shows (Tile IR, the IR after each pass, Metal IR,
MSL), their headers, the files they go to, and the errors for words that name no stage."""

from __future__ import annotations

import re

import numpy as np
import pytest

import metile
from metile.debug import STAGES, DebugSettingError, DebugSettings, debug_settings
from metile.ir import parse
from metile.ir.stmts import Kernel
from metile.rewrite.pipeline import DEFAULT_PIPELINE, pass_name


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.delenv("METILE_DEBUG", raising=False)
    monkeypatch.delenv("METILE_DEBUG_DIR", raising=False)


def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(C + offs, metile.load(A + offs, mask=live) + metile.load(B + offs, mask=live), mask=live)


def mark(k: Kernel) -> Kernel:
    return k


def fresh(pipeline=None):
    """A new kernel object, so that nothing is cached yet."""
    return metile.kernel(vec_add, pipeline=pipeline)


def launch(k, n=64, block=64):
    a, b, c = (np.full(n, v, np.float32) for v in (1.0, 2.0, 0.0))
    k[(-(-n // block),)](a, b, c, n, BLOCK=block)
    np.testing.assert_array_equal(c, 3.0)


HEADER = re.compile(r"^// ===== metile kernel (\w+) \[(.*)\] stage (.+) \(key ([0-9a-f]{10})\) =====$", re.M)


def headers(text: str) -> list[tuple[str, str, str, str]]:
    return HEADER.findall(text)


def test_nothing_is_shown_without_metile_debug(capsys):
    launch(fresh())
    assert capsys.readouterr().err == ""


def test_tile_ir_is_shown_under_a_header_naming_kernel_stage_and_constexprs(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", "tile_ir")
    k = fresh()
    launch(k)
    err = capsys.readouterr().err
    [(kernel, consts, stage, _)] = headers(err)
    assert (kernel, consts, stage) == ("vec_add", "BLOCK=64", "tile_ir")
    assert "kernel @vec_add(" in err and " stage tile " in err and " stage metal " not in err


def test_all_shows_every_stage_in_order(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", "all")
    k = fresh([mark, *DEFAULT_PIPELINE])
    launch(k, block=32)
    err = capsys.readouterr().err
    x = np.zeros(64, np.float32)
    compiled = k.compile(x, x, x, 64, BLOCK=32)
    found = headers(err)
    passes = [f"after pass {i} {pass_name(p)}" for i, p in enumerate(k.pipeline, 1)]
    assert [s for _, _, s, _ in found] == ["tile_ir", *passes, "metal_ir", "msl"]
    assert {(name, consts) for name, consts, _, _ in found} == {("vec_add", "BLOCK=32")}
    assert len({key for *_, key in found}) == 1
    assert compiled.msl in err and "after pass 1 mark" in err


def test_words_combine_and_ignore_case_and_spaces(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", " MSL , metal_ir ")
    launch(fresh())
    assert [s for _, _, s, _ in headers(capsys.readouterr().err)] == ["metal_ir", "msl"]


def test_passes_shows_the_ir_after_each_pass(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", "passes")
    launch(fresh([mark, *DEFAULT_PIPELINE, mark]))
    shown = [s for _, _, s, _ in headers(capsys.readouterr().err)]
    assert shown[0] == "after pass 1 mark" and shown[-1] == f"after pass {len(DEFAULT_PIPELINE) + 2} mark"
    assert len(shown) == len(DEFAULT_PIPELINE) + 2


def test_a_cached_launch_shows_nothing_again(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", "msl")
    k = fresh()
    launch(k)
    launch(k, n=128)   # another multiple of 16: the same specialization
    assert len(headers(capsys.readouterr().err)) == 1


def test_the_environment_is_read_when_a_kernel_compiles(capsys, monkeypatch):
    k = fresh()
    launch(k)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("METILE_DEBUG", "metal_ir")
    launch(k)                                             # a new setting: compiled (and shown) again
    assert [s for _, _, s, _ in headers(capsys.readouterr().err)] == ["metal_ir"]


def test_constexprs_that_are_not_ints_appear_in_the_header(capsys, monkeypatch):
    monkeypatch.setenv("METILE_DEBUG", "tile_ir")

    @metile.kernel
    def scaled(X, n, MODE: metile.constexpr, BLOCK: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        x = metile.load(X + offs, mask=offs < n)
        if MODE == "double":
            x = x * 2.0
        metile.store(X + offs, x, mask=offs < n)

    x = np.ones(8, np.float32)
    scaled[(1,)](x, 8, MODE="double", BLOCK=8)
    np.testing.assert_array_equal(x, 2.0)
    [(_, consts, _, _)] = headers(capsys.readouterr().err)
    assert consts == "BLOCK=8, MODE='double'"


@pytest.mark.parametrize("value", ["tile_ir,bogus", "everything", "msl;tile_ir"])
def test_unknown_words_are_refused_with_the_valid_ones(monkeypatch, value):
    monkeypatch.setenv("METILE_DEBUG", value)
    with pytest.raises(DebugSettingError) as info:
        launch(fresh())
    assert isinstance(info.value, metile.MetileError)
    msg = info.value.message
    assert msg.startswith(f"METILE_DEBUG={value!r}: unknown word")
    for word in (*STAGES, "all", "verify"):
        assert word in msg.split(": ", 2)[-1]


def test_settings_parse():
    assert debug_settings(None) == DebugSettings() == debug_settings("")
    assert debug_settings("verify") == DebugSettings(verify_each=True) == debug_settings("1")
    assert debug_settings("all").stages == frozenset(STAGES)
    assert debug_settings("msl", "/tmp/x") == DebugSettings(True, frozenset({"msl"}), "/tmp/x")
    assert debug_settings("verify", "/tmp/x").directory is None
    assert debug_settings(None, verify_each=True) == DebugSettings(verify_each=True)


def test_debug_dir_writes_files_instead(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("METILE_DEBUG", "all")
    monkeypatch.setenv("METILE_DEBUG_DIR", str(tmp_path / "dumps"))
    k = fresh([mark, *DEFAULT_PIPELINE])
    launch(k)
    assert capsys.readouterr().err == ""
    x = np.zeros(64, np.float32)
    compiled = k.compile(x, x, x, 64, BLOCK=64)
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    (digest,) = {re.fullmatch(r"vec_add-([0-9a-f]{10})\..*", f).group(1) for f in files}
    passes = [f"vec_add-{digest}.pass{i:02d}-{pass_name(p)}.txt" for i, p in enumerate(k.pipeline, 1)]
    assert files == sorted([f"vec_add-{digest}.tile_ir.txt", f"vec_add-{digest}.metal_ir.txt",
                            f"vec_add-{digest}.msl.metal", *passes])
    folder = tmp_path / "dumps"
    assert (folder / f"vec_add-{digest}.msl.metal").read_text() == compiled.msl   # the exact source compiled
    tile_text = (folder / f"vec_add-{digest}.tile_ir.txt").read_text()
    assert headers(tile_text) == [("vec_add", "BLOCK=64", "tile_ir", digest)]
    assert parse(tile_text) == compiled.tile_ir
    assert parse((folder / f"vec_add-{digest}.metal_ir.txt").read_text()) == compiled.metal_ir


def test_file_names_follow_the_specialization_and_are_stable(monkeypatch, tmp_path):
    monkeypatch.setenv("METILE_DEBUG", "msl")
    monkeypatch.setenv("METILE_DEBUG_DIR", str(tmp_path))
    launch(fresh(), block=64)
    launch(fresh(), block=64)                              # another kernel object, the same compile: same file
    launch(fresh(), block=32)
    launch(fresh([mark, *DEFAULT_PIPELINE]), block=64)     # another pipeline: another file
    assert len(list(tmp_path.iterdir())) == 3


def test_debug_dir_alone_writes_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("METILE_DEBUG_DIR", str(tmp_path))
    launch(fresh())
    monkeypatch.setenv("METILE_DEBUG", "verify")
    launch(fresh())
    assert not list(tmp_path.iterdir()) and capsys.readouterr().err == ""
