"""cffi out-of-line API-mode build of the Metal shim (and, for the tests, of any C file implementing shim.h).

The cffi declarations are not written twice: they are the text of `shim.h` between its `CDEF BEGIN` and
`CDEF END` lines. `python -m metile.metal.gpu._build` builds the shim into the cache ahead of first use
(macOS only).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
HEADER = HERE / "shim.h"
OBJC_SOURCE = HERE / "shim.m"
MODULE_NAME = "_metile_metal_shim"
OBJC_FLAGS = ["-fno-objc-arc", "-fobjc-exceptions", "-Wno-unused-command-line-argument"]
FRAMEWORKS = ["-framework", "Metal", "-framework", "Foundation"]
_CDEF = re.compile(r"/\* CDEF BEGIN \*/\n(?P<body>.*?)/\* CDEF END \*/", re.S)


def cdef_of(header_text: str) -> str:
    """The declarations between the CDEF markers of a header (raises if the markers are missing)."""
    m = _CDEF.search(header_text)
    if m is None:
        raise ValueError("header has no /* CDEF BEGIN */ ... /* CDEF END */ region")
    return m.group("body")


def make_builder(module_name: str, sources: Sequence[Path], *, extra_headers: Sequence[Path] = (),
                 include_dirs: Sequence[Path] = (), extra_compile_args: Sequence[str] = (),
                 extra_link_args: Sequence[str] = ()) -> cffi.FFI:
    """An FFI builder for a module implementing shim.h with `sources` (plus declarations of `extra_headers`)."""
    builder = cffi.FFI()
    builder.cdef(cdef_of(HEADER.read_text()))
    includes = ['#include "shim.h"']
    for h in extra_headers:
        builder.cdef(cdef_of(h.read_text()))
        includes.append(f'#include "{h.name}"')
    dirs = [HERE, *(Path(h).parent for h in extra_headers), *include_dirs]
    builder.set_source(
        module_name, "\n".join(includes) + "\n",
        sources=[str(s) for s in sources],
        include_dirs=sorted({str(d) for d in dirs}),
        extra_compile_args=list(extra_compile_args),
        extra_link_args=list(extra_link_args),
    )
    return builder


def metal_builder() -> cffi.FFI:
    """The builder of the real shim: shim.m linked against Metal and Foundation."""
    return make_builder(MODULE_NAME, [OBJC_SOURCE], extra_compile_args=OBJC_FLAGS, extra_link_args=FRAMEWORKS)


def compile_module(builder: cffi.FFI, target: Path) -> Path:
    """Compile `builder` into the extension module `target`, in a scratch folder beside it."""
    target = target.resolve()
    workdir = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".build", dir=target.parent))
    try:
        return Path(builder.compile(tmpdir=str(workdir), target=str(target), verbose=False))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    import os

    from metile.metal.cpu.toolchain import default_cache_dir
    from metile.metal.gpu.binding import build_shim

    print(build_shim(default_cache_dir(os.environ)))
