"""Pictures of rank-2 layouts: CuTe's ``print_layout`` table and an SVG grid coloured by offset or thread."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

from .layout import Layout, cosize, rank, size

# Soft, distinguishable fills; entry k colours offsets (or threads) congruent to k modulo the length.
DEFAULT_PALETTE: tuple[str, ...] = (
    "#afafff", "#afffaf", "#ffffaf", "#ffafaf", "#d2d2ff", "#d2ffd2", "#ffffd2", "#ffd2d2",
)  # fmt: skip


def _require_rank2(layout: Any, what: str) -> tuple[int, int]:
    if rank(layout) != 2:
        raise ValueError(f"{what} needs a rank-2 layout, got {layout} of rank {rank(layout)}")
    return size(layout, 0), size(layout, 1)


def format_layout(layout: Any) -> str:
    """CuTe's ``print_layout`` table of a rank-2 layout: row ``m``, column ``n`` holds ``layout(m, n)``.

    The first line is ``str(layout)``; each cell is ``num_digits(cosize(layout))`` characters wide, with
    CuTe's ``+---+`` rules and row/column indices, so the text matches CuTe's output character for character.
    """
    rows, cols = _require_rank2(layout, "format_layout")
    width = len(str(cosize(layout)))
    rule = "    " + ("+" + "-" * (width + 2)) * cols + "+"
    lines = [str(layout), "    " + "".join(f"  {n:>{width}} " for n in range(cols))]
    for m in range(rows):
        lines.append(rule)
        lines.append(f"{m:>2}  " + "".join(f"| {layout(m, n):>{width}} " for n in range(cols)) + "|")
    lines.append(rule)
    return "\n".join(lines) + "\n"


def print_layout(layout: Any, file: IO[str] | None = None) -> None:
    """Print ``format_layout(layout)`` (to ``file``, default stdout)."""
    (file or sys.stdout).write(format_layout(layout))


def _tile_cells(tile: Any) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """Where each offset of a tile lives: a shape ``(M, N)`` is column-major; a Layout gives its offsets."""
    tile_layout = tile if isinstance(tile, Layout) else Layout(tile)
    rows, cols = _require_rank2(tile_layout, "layout_svg(tile=...)")
    where: dict[int, tuple[int, int]] = {}
    for m in range(rows):
        for n in range(cols):
            where.setdefault(tile_layout(m, n), (m, n))
    return rows, cols, where


def layout_svg(
    layout: Any,
    path: str | Path | None = None,
    *,
    color_by: str = "offset",
    tile: Any = None,
    cell: int = 40,
    palette: tuple[str, ...] = DEFAULT_PALETTE,
) -> str:
    """SVG text of a rank-2 layout as a grid of cells; written to ``path`` too when one is given.

    ``color_by="offset"``: cell ``(m, n)`` shows ``layout(m, n)`` and is filled with
    ``palette[offset % len(palette)]``. ``color_by="thread"``: ``layout`` is a thread-value layout mapping
    ``(thread, value)`` to an offset inside ``tile`` (a shape ``(M, N)``, read column-major, or a rank-2
    Layout from ``(m, n)`` to offsets); the grid is the tile, each cell labelled ``T<t>V<v>`` by the first
    ``(t, v)`` that writes it and filled by thread. Every cell is one ``<rect class="cell">``.
    """
    if color_by not in ("offset", "thread"):
        raise ValueError(f"layout_svg: color_by must be 'offset' or 'thread', got {color_by!r}")
    cells: dict[tuple[int, int], tuple[str, str]] = {}
    if color_by == "offset":
        rows, cols = _require_rank2(layout, "layout_svg")
        for m in range(rows):
            for n in range(cols):
                v = layout(m, n)
                cells[(m, n)] = (str(v), palette[v % len(palette)])
    else:
        if tile is None:
            raise ValueError(
                "layout_svg(color_by='thread') needs tile=(M, N) or a tile Layout to place offsets"
            )
        threads, values = _require_rank2(layout, "layout_svg(color_by='thread')")
        rows, cols, where = _tile_cells(tile)
        for v in range(values):
            for t in range(threads):
                off = layout(t, v)
                if off not in where:
                    raise ValueError(
                        f"layout_svg: thread-value layout {layout} maps (T{t},V{v}) to offset {off}, "
                        f"which is not an offset of the tile {tile}"
                    )
                cells.setdefault(where[off], (f"T{t}V{v}", palette[t % len(palette)]))
    import html  # here: the compiler imports this module, and only pictures need it

    margin = cell
    width, height = margin + cols * cell + 2, margin + rows * cell + 2
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="{max(8, cell // 4)}">',
        f"<title>{html.escape(str(layout))}</title>",
    ]
    for n in range(cols):
        x = margin + n * cell + cell / 2
        out.append(f'<text class="index" x="{x}" y="{margin / 2}" text-anchor="middle">{n}</text>')
    for m in range(rows):
        y = margin + m * cell + cell / 2
        out.append(f'<text class="index" x="{margin / 2}" y="{y}" text-anchor="middle" '
                   f'dominant-baseline="central">{m}</text>')  # fmt: skip
    for m in range(rows):
        for n in range(cols):
            x, y = margin + n * cell, margin + m * cell
            label, fill = cells.get((m, n), ("", "#ffffff"))
            out.append(
                f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" '
                'stroke="black"/>'
            )
            if label:
                out.append(
                    f'<text x="{x + cell / 2}" y="{y + cell / 2}" text-anchor="middle" '
                    f'dominant-baseline="central">{label}</text>'
                )
    out.append("</svg>")
    text = "\n".join(out) + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text
