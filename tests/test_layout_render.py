"""``print_layout``'s CuTe table and ``layout_svg``'s pictures of layouts and thread-value layouts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from metile.layout import (
    DEFAULT_PALETTE,
    Layout,
    Swizzle,
    composition,
    format_layout,
    layout_svg,
    print_layout,
    row_major,
)

SVG = "{http://www.w3.org/2000/svg}"


def test_print_layout_matches_cute(capsys):
    # 01_layout.md: print_layout(s2xh4); CuTe's printf leaves a space after each column index
    expected = (
        "(2,(2,2)):(4,(2,1))\n"
        "      0   1   2   3 \n"
        "    +---+---+---+---+\n"
        " 0  | 0 | 2 | 1 | 3 |\n"
        "    +---+---+---+---+\n"
        " 1  | 4 | 6 | 5 | 7 |\n"
        "    +---+---+---+---+\n"
    )
    layout = Layout((2, (2, 2)), (4, (2, 1)))
    assert format_layout(layout) == expected
    assert print_layout(layout) is None
    assert capsys.readouterr().out == expected


def test_print_layout_widens_cells_with_the_cosize():
    text = format_layout(row_major((2, 6)))
    assert text.splitlines() == [
        "(2,6):(6,1)",
        "       0    1    2    3    4    5 ",
        "    +----+----+----+----+----+----+",
        " 0  |  0 |  1 |  2 |  3 |  4 |  5 |",
        "    +----+----+----+----+----+----+",
        " 1  |  6 |  7 |  8 |  9 | 10 | 11 |",
        "    +----+----+----+----+----+----+",
    ]


def test_print_layout_of_a_swizzled_tile():
    tile = composition(Swizzle(1, 0, 1), row_major((2, 2)))
    assert format_layout(tile).splitlines()[0] == "Sw<1,0,1> o 0 o (2,2):(2,1)"
    assert " 1  | 3 | 2 |" in format_layout(tile)


def cells(svg_text):
    root = ET.fromstring(svg_text)
    assert root.tag == SVG + "svg"
    return [r for r in root.iter(SVG + "rect") if r.get("class") == "cell"], root


def test_svg_by_offset(tmp_path):
    layout = Layout((4, (2, 2)), (1, (8, 4)))
    path = tmp_path / "layout.svg"
    text = layout_svg(layout, path)
    assert path.read_text() == text
    rects, root = cells(text)
    assert len(rects) == 4 * 4
    labels = [t.text for t in root.iter(SVG + "text") if t.get("class") != "index"]
    assert labels == [str(layout(m, n)) for m in range(4) for n in range(4)]
    fills = [r.get("fill") for r in rects]
    assert fills[1] == DEFAULT_PALETTE[layout(0, 1) % len(DEFAULT_PALETTE)]
    assert root.find(SVG + "title").text == "(4,(2,2)):(1,(8,4))"


def test_svg_by_thread_places_each_value_in_the_tile():
    # 4 threads x 2 values over a 2x4 row-major tile: thread t owns offsets 2t and 2t+1
    tv = Layout((4, 2), (2, 1))
    text = layout_svg(tv, color_by="thread", tile=row_major((2, 4)))
    rects, root = cells(text)
    assert len(rects) == 8
    labels = [t.text for t in root.iter(SVG + "text") if t.get("class") != "index"]
    assert labels == ["T0V0", "T0V1", "T1V0", "T1V1", "T2V0", "T2V1", "T3V0", "T3V1"]
    assert rects[2].get("fill") == DEFAULT_PALETTE[1] == rects[3].get("fill")


def test_svg_by_thread_with_a_shape_tile_and_an_uncovered_cell():
    tv = Layout((3, 1), (1, 0))  # three threads cover offsets 0..2 of a column-major 2x2 tile
    text = layout_svg(tv, color_by="thread", tile=(2, 2))
    rects, root = cells(text)
    assert len(rects) == 4
    assert [r.get("fill") for r in rects][3] == "#ffffff"
    labels = [t.text for t in root.iter(SVG + "text") if t.get("class") != "index"]
    assert labels == ["T0V0", "T2V0", "T1V0"]
