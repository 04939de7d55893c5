"""Compiler output is turned into an MSLCompileError on the user's .metal line."""

from __future__ import annotations

from metile.metal.diagnostics import first_error

SRC = "line one\nline two\n    float y = x * bad;\n"


def test_error_in_the_source_gets_line_column_and_caret():
    e = first_error("k.metal:3:19: error: 'bad' was not declared\n", source=SRC, metal_name="k.metal")
    assert (e.loc.line, e.loc.col) == (3, 18)
    assert str(e).splitlines() == ["k.metal:3:19: error: 'bad' was not declared",
                                   "        float y = x * bad;", "                      ^"]


def test_alias_names_map_to_the_metal_file():
    e = first_error("program_source:2:1: error: oops\n", source=SRC, metal_name="k.metal",
                    aliases=("program_source",))
    assert e.loc.file == "k.metal" and e.loc.line == 2


def test_error_in_a_header_is_placed_where_the_source_reached_it():
    out = "/inc/mt_simd.h:12:3: error: static assertion failed\nk.metal:3:15:   required from here\n"
    e = first_error(out, source=SRC, metal_name="k.metal")
    assert e.loc.line == 3 and "mt_simd.h:12" in e.message


def test_clang_places_an_error_in_a_header_at_the_instantiation_the_source_requested():
    """clang (the CPU device's compiler on a Mac, and Apple's Metal compiler) writes the instantiations that led to
    an error as notes after it, innermost first: the first note on the source, before the next error, is the site."""
    out = ("/inc/mt_mpp.h:313:9: error: static assertion failed due to requirement 'ok': not supported\n"
           "        static_assert(ok, \"not supported\");\n"
           "/inc/mt_mpp.h:363:18: note: in instantiation of function template specialization 'run<1>' requested here\n"
           "k.metal:2:4: note: in instantiation of function template specialization 'f<1>' requested here\n"
           "/inc/mt_mpp.h:313:9: error: static assertion failed due to requirement 'ok': not supported\n"
           "k.metal:3:11: note: in instantiation of function template specialization 'f<2>' requested here\n")
    e = first_error(out, source=SRC, metal_name="k.metal")
    assert (e.loc.line, e.loc.col) == (2, 3) and "mt_mpp.h:313" in e.message
    lone = first_error(out.split("k.metal:2")[0], source=SRC, metal_name="k.metal")   # no note on the source
    assert lone.loc is None and "mt_mpp.h:313" in str(lone)


def test_error_elsewhere_without_a_source_site_names_that_file():
    e = first_error("gen.cpp:4:1: error: bad cast\n", source=SRC, metal_name="k.metal",
                    elsewhere="generated for")
    assert e.loc is None and "gen.cpp:4" in str(e) and "generated for k.metal" in str(e)


def test_unparseable_output_is_quoted_whole():
    e = first_error("ld: cannot find -lfoo\n", source=SRC, metal_name="k.metal")
    assert "cannot find -lfoo" in str(e) and e.compiler_output.startswith("ld:")


def test_the_caret_counts_characters_not_bytes():
    """Python's `ast` columns count UTF-8 bytes: after `é` (two bytes) the caret used to land one column right."""
    from metile.ir.errors import Loc, render_diagnostic
    text = "    é = metile.load(A + offs)"
    col = len(text[:text.index("metile")].encode())  # as `ast` gives it
    out = render_diagnostic("bad", Loc("k.py", 3, col), source_line=text).splitlines()
    assert out[0] == f"k.py:3:{text.index('metile') + 1}: error: bad"
    assert out[2].index("^") == out[1].index("metile")
