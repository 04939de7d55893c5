"""The cache of parsed kernel sources (`metile.frontend.source.parsed`): one parse per code object while it lives,
keyed by the object's identity (code objects of the same text in different files compare equal), holding no
reference to it, and forgetting it when it goes."""

from __future__ import annotations

import gc
import importlib.util
import sys
import weakref

from metile.frontend.source import _PARSED, parsed

KERNEL = '''
import metile


@metile.kernel
def copy(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs))
'''


def load(path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_parse_is_kept_while_its_code_lives_and_forgotten_with_it(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNEL)
    module = load(path, "_parse_cache_kernels")
    fn = module.copy.fn
    first = parsed(fn)
    assert parsed(fn) is first and module.copy.source.fdef is first.fdef
    code, key = weakref.ref(fn.__code__), id(fn.__code__)
    assert key in _PARSED
    del module, fn, first
    sys.modules.pop("_parse_cache_kernels", None)
    gc.collect()
    assert code() is None, "the parse cache keeps the kernel's code object alive"
    assert key not in _PARSED


def test_equal_code_objects_of_two_files_have_their_own_parse(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "k.py").write_text(KERNEL)
    (tmp_path / "b" / "k.py").write_text(KERNEL)
    a, b = load(tmp_path / "a" / "k.py", "_parse_cache_a"), load(tmp_path / "b" / "k.py", "_parse_cache_b")
    assert a.copy.fn.__code__ == b.copy.fn.__code__ and a.copy.fn.__code__ is not b.copy.fn.__code__
    assert parsed(a.copy.fn).file.endswith("a/k.py") and parsed(b.copy.fn).file.endswith("b/k.py")


AWKWARD = '''
import metile


@metile.kernel
def signature_closed_at_the_def(
    X, Y,
    BLOCK: metile.constexpr,
):
    """A docstring
with a line at column 0
"""
    offs = metile.arange(0, BLOCK)
# a comment at column 0 inside the body
    x = metile.load(X + offs)
    y = (x +
x)
    metile.store(Y + offs, y)
    # a trailing comment

# a comment after the kernel


class Holder:
    @staticmethod
    def method(X, Y, BLOCK: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        metile.store(Y + offs, metile.load(X + offs))


def tabbed(X):
\treturn X


def last_in_file(X):
    return X'''


def test_a_block_found_from_its_indentation_is_the_one_inspect_finds(tmp_path):
    """`parse` finds a function's block without tokenizing its file when its indentation tells where it ends: lines
    at the `def`'s indentation inside strings, brackets or comments do not end it early, and what it gives is what
    `inspect.getsourcelines` gives (the text, its offsets and the parse, positions included)."""
    import ast
    import inspect
    import textwrap

    from metile.frontend.source import _def_block, parse

    path = tmp_path / "awkward.py"
    path.write_text(AWKWARD)
    module = load(path, "_parse_cache_awkward")
    fns = [module.signature_closed_at_the_def.fn, module.Holder.method, module.tabbed, module.last_in_file]
    for fn in fns:
        lines, first = inspect.getsourcelines(fn)
        text = textwrap.dedent("".join(lines))
        p = parse(fn)
        assert (p.text, p.line_offset, p.col_offset) == (text, first - 1, len(lines[0]) - len(lines[0].lstrip()))
        assert ast.dump(p.fdef, include_attributes=True) == ast.dump(ast.parse(text).body[0], include_attributes=True)
    all_lines, start = inspect.findsource(fns[0])
    assert _def_block(all_lines[start:], "signature_closed_at_the_def")[0] == inspect.getblock(all_lines[start:])
    all_lines, start = inspect.findsource(module.tabbed)
    assert _def_block(all_lines[start:], "tabbed") is None   # tabs: left to inspect
