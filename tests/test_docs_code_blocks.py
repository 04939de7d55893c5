"""Every ```python block of README.md and docs/*.md runs as written, on the CPU device, so the docs cannot drift
from what metile does.

The convention, for whoever writes a page (an HTML comment, invisible once rendered, on the last non-blank line
before a block's opening fence):

- no comment: the block is a program of its own, with its own imports and data; it runs alone, in a fresh
  namespace.
- `<!-- continue -->`: the block goes on with the program of the page's previous python block: it runs after
  it, in the same namespace (for a page that builds one example over several blocks).
- `<!-- skip: reason -->`: the block is compiled (so its syntax is checked) but not run, and the test reports it
  as skipped with the reason; for blocks that only make sense on an Apple GPU. A block continuing a skipped
  block is skipped with it.

Any other HTML comment right before a python block is a mistake, and so is a `continue` on the first python block
of a page. Blocks fenced with another language (```sh, ```text) are not run. A block should check what it computes
(`assert np.allclose(...)`), so that a block that runs but computes the wrong thing fails too.

Each block is written to a file of its own before it runs (kernels are traced from their source, which must be in
a file), padded so that its lines keep their line numbers in the page: a traceback's line numbers are the page's.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
COMMENT = re.compile(r"^\s*<!--(?P<text>.*?)-->\s*$")
SKIP = re.compile(r"^skip:\s*(?P<reason>\S.*)$")


@attrs.frozen
class Block:
    page: Path
    line: int           # the line of the page the block's code starts at (the one after the opening fence)
    code: str
    marker: str | None  # None, "continue" or "skip"
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"


def shown(page: Path) -> str:
    """The page's path as the messages show it: relative to the repository when it is inside it."""
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def blocks_of(page: Path) -> list[Block]:
    """The python blocks of `page`, each with the marker before it; a `ValueError` for a malformed marker."""
    text = page.read_text()
    lines = text.splitlines()
    out = []
    for m in FENCE.finditer(text):
        if m["lang"] != "python":
            continue
        fence_line = text.count("\n", 0, m.start()) + 1
        indent = m["indent"]
        code = "".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                       for line in m["body"].splitlines(keepends=True))
        before = next((lines[i] for i in range(fence_line - 2, -1, -1) if lines[i].strip()), "")
        marker, reason = None, ""
        comment = COMMENT.match(before)
        if comment is not None:
            word = comment["text"].strip()
            skip = SKIP.match(word)
            if word == "continue":
                marker = "continue"
            elif skip is not None:
                marker, reason = "skip", skip["reason"].strip()
            else:
                raise ValueError(f"{shown(page)}:{fence_line}: the comment before this python block is "
                                 f"not a marker of tests/test_docs_code_blocks.py: <!--{comment['text']}-->")
        out.append(Block(page, fence_line + 1, code, marker, reason))
    if out and out[0].marker == "continue":
        raise ValueError(f"{out[0].where}: the first python block of a page has no block to continue")
    return out


def programs_of(page: Path) -> list[list[Block]]:
    """The page's blocks grouped into programs: a block and the blocks that continue it."""
    programs: list[list[Block]] = []
    for block in blocks_of(page):
        if block.marker == "continue":
            programs[-1].append(block)
        else:
            programs.append([block])
    return programs


PROGRAMS = [program for page in PAGES for program in programs_of(page)]


def test_every_page_has_python_blocks():
    for page in (ROOT / "README.md", ROOT / "docs" / "language.md", ROOT / "docs" / "compiling.md"):
        assert blocks_of(page), f"{page} has no python block"


def test_markers_are_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n<!-- continue -->\n\n```python\nassert x == 1\n```\n"
                    "<!-- skip: needs an Apple GPU -->\n```python\ny = 2\n```\n"
                    "- a list item:\n\n  ```python\n  z = 3\n  ```\n```sh\nls\n```\n")
    blocks = blocks_of(page)
    assert [(b.line, b.code, b.marker, b.reason) for b in blocks] == [
        (2, "x = 1\n", None, ""), (8, "assert x == 1\n", "continue", ""),
        (12, "y = 2\n", "skip", "needs an Apple GPU"), (17, "z = 3\n", None, "")]
    page.write_text("<!-- continue -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="has no block to continue"):
        blocks_of(page)
    page.write_text("<!-- skip -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="not a marker"):
        blocks_of(page)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p[0].where)
def test_the_block_runs_as_written(program, tmp_path, monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"docs_block_{program[0].page.stem}_{program[0].line}".replace("-", "_")}
    skipped = None
    for block in program:
        path = tmp_path / f"{block.page.stem}_md_line{block.line}.py"
        path.write_text("\n" * (block.line - 1) + block.code)
        code = compile(path.read_text(), str(path), "exec")
        if block.marker == "skip" or skipped is not None:
            skipped = skipped or block.reason
            continue
        try:
            exec(code, namespace)
        except Exception as e:
            note = f"in the python block of {block.where} (a traceback's line numbers are the page's)"
            if hasattr(e, "add_note"):
                e.add_note(note)
            raise
    if skipped is not None:
        pytest.skip(skipped)
