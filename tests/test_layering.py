"""Imports only point down: layout <- ir <- rewrite <- emit <- profile <- metal <- frontend (metile/*.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "metile"
RANK = {"layout": 0, "ir": 1, "rewrite": 2, "emit": 3, "profile": 4, "metal": 5}
TOP = 6


def rank_of_module(dotted: str) -> int:
    parts = dotted.split(".")
    if parts[0] != "metile":
        return -1
    if len(parts) == 1:
        return TOP
    return RANK.get(parts[1], TOP)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        match node:
            case ast.Import(names=names):
                found += [(a.name, node.lineno) for a in names]
            case ast.ImportFrom(module=mod, level=0):
                found.append((mod or "", node.lineno))
            case ast.ImportFrom(module=mod, level=level):
                base = package.split(".")
                base = base[: len(base) - (level - 1)]
                found.append((".".join(base + ([mod] if mod else [])), node.lineno))
    return found


SOURCES = sorted(ROOT.rglob("*.py"))


def test_sources_found():
    assert len(SOURCES) >= 6


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_imports_point_down(path: Path):
    own = rank_of_module(module_name(path))
    upward = [
        f"{path.name}:{line} imports {mod}"
        for mod, line in imported_modules(path)
        if rank_of_module(mod) > own
    ]
    assert not upward, "upward imports: " + "; ".join(upward)


def test_layout_is_a_leaf():
    for path in (ROOT / "layout").rglob("*.py"):
        bad = [m for m, _ in imported_modules(path) if m.startswith("metile") and not m.startswith("metile.layout")]
        assert not bad, f"{path} imports {bad}"


def test_rank_logic_catches_an_upward_import(tmp_path):
    assert rank_of_module("metile.metal.cpu") > rank_of_module("metile.ir.errors")
    assert rank_of_module("metile.kernel") == TOP
    assert rank_of_module("numpy") < 0


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_module_shape(path: Path):
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= 600, f"{path} has {lines} lines (hard cap 600)"
    tree = ast.parse(text)
    assert ast.get_docstring(tree), f"{path} lacks a module docstring"
    assert "from __future__ import annotations" in text, f"{path} lacks the __future__ import"
