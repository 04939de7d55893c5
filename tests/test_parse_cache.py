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
