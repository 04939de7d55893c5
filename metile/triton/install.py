"""Serving `import triton` with metile: `install()` puts a finder first on `sys.meta_path` that gives every
`triton` and `triton.X` import the module `metile.triton` and `metile.triton.X`, whether or not the Triton wheel is
installed (the wheel is never imported while the finder is there: a `triton.X` that metile lacks is a
`ModuleNotFoundError` naming it). `uninstall()` removes the finder and metile's `triton` modules from `sys.modules`.

A `triton` imported before `install()` (the wheel's) is dropped from `sys.modules`, so that later imports get
metile's; modules that imported the wheel's keep their references to it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

PREFIX = "metile.triton"


def _served(fullname: str) -> bool:
    return fullname == "triton" or fullname.startswith("triton.")


class _Alias(importlib.abc.Loader):
    """Loads `triton.X` as the already importable `metile.triton.X` (the same module object)."""

    def __init__(self, real: str):
        self.real = real
        self.spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.real)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        if self.spec is not None:   # the import system set the alias's spec on the module: give its own back
            module.__spec__ = self.spec


class _Missing(importlib.abc.Loader):
    """Refuses a `triton.X` that metile does not serve, naming it."""

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}: `triton` is served by metile (metile.triton), "
                                  f"which has no {spec.name[len('triton.'):]!r}", name=spec.name)

    def exec_module(self, module) -> None:   # pragma: no cover - create_module raises
        return None


class TritonFinder(importlib.abc.MetaPathFinder):
    """The finder `install()` puts first on `sys.meta_path`."""

    def find_spec(self, fullname, path=None, target=None):
        if not _served(fullname):
            return None
        real = PREFIX + fullname[len("triton"):]
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return importlib.machinery.ModuleSpec(fullname, _Missing())
        return importlib.machinery.ModuleSpec(fullname, _Alias(real), is_package=found.submodule_search_locations
                                              is not None)

    def __repr__(self) -> str:
        return "<metile TritonFinder>"


def _finder() -> TritonFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, TritonFinder)), None)


def installed() -> bool:
    """Whether `import triton` gives metile's."""
    return _finder() is not None


def _drop_triton_modules(ours: bool) -> None:
    for name in [n for n in sys.modules if _served(n)]:
        module = sys.modules[name]
        if (getattr(module, "__name__", "") or "").startswith(PREFIX) == ours:
            del sys.modules[name]


def install() -> None:
    """Serve `import triton` (and every `triton.X`) with metile's, in this process (see the module docstring)."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, finder or TritonFinder())
    _drop_triton_modules(ours=False)


def uninstall() -> None:
    """Stop serving `import triton`: the finder is removed and metile's modules leave `sys.modules["triton..."]`."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)
    _drop_triton_modules(ours=True)


__all__ = ["TritonFinder", "install", "installed", "uninstall"]
