"""cffi out-of-line API-mode build of the Metal shim (and, for the tests, of any C file implementing shim.h).

The cffi declarations are not written twice: they are the text of `shim.h` between its `CDEF BEGIN` and
`CDEF END` lines. cffi writes the module's C source; the system C compiler (clang on macOS) compiles it
together with the implementation into an extension module, without needing setuptools at run time.
`python -m metile.metal.gpu._build` builds the shim into the cache ahead of first use (macOS only).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import attrs
import cffi

from metile.metal.cpu.toolchain import run_compiler

HERE = Path(__file__).resolve().parent
HEADER = HERE / "shim.h"
OBJC_SOURCE = HERE / "shim.m"
LOGIC_HEADER = HERE / "shim_logic.h"   # the shim's decisions, which the tests' stand-in makes with the same code
MODULE_NAME = "_metile_metal_shim"
OBJC_FLAGS = ("-fno-objc-arc", "-fobjc-exceptions", "-Wno-unused-command-line-argument", "-mmacosx-version-min=14.0")
# CoreGraphics: Apple documents that a command-line process gets no default Metal device unless it is linked
FRAMEWORKS = ("-framework", "Metal", "-framework", "Foundation", "-framework", "CoreGraphics")
EXTRA_FLAGS_ENV = "METILE_SHIM_CFLAGS"   # more compiler flags for the shim (CI: warnings as errors)
_CDEF = re.compile(r"/\* CDEF BEGIN \*/\n(?P<body>.*?)/\* CDEF END \*/", re.S)


def cdef_of(header_text: str) -> str:
    """The declarations between the CDEF markers of a header (raises if the markers are missing)."""
    m = _CDEF.search(header_text)
    if m is None:
        raise ValueError("header has no /* CDEF BEGIN */ ... /* CDEF END */ region")
    return m.group("body")


@attrs.frozen
class ModuleSpec:
    """An extension module implementing shim.h: its name, C/Objective-C sources and extra flags."""

    name: str
    sources: tuple[Path, ...]
    extra_headers: tuple[Path, ...] = ()      # more CDEF-marked headers the module declares
    compile_args: tuple[str, ...] = ()
    link_args: tuple[str, ...] = ()

    def builder(self) -> cffi.FFI:
        builder = cffi.FFI()
        builder.cdef(cdef_of(HEADER.read_text()))
        includes = ['#include "shim.h"']
        for h in self.extra_headers:
            builder.cdef(cdef_of(h.read_text()))
            includes.append(f'#include "{h.name}"')
        builder.set_source(self.name, "\n".join(includes) + "\n")
        return builder

    @property
    def include_dirs(self) -> list[Path]:
        return list(dict.fromkeys([HERE, *(h.parent for h in self.extra_headers)]))


METAL_SHIM = ModuleSpec(MODULE_NAME, (OBJC_SOURCE,), compile_args=OBJC_FLAGS, link_args=FRAMEWORKS)


def extra_flags() -> tuple[str, ...]:
    """`METILE_SHIM_CFLAGS`, split like a shell's words (the macOS CI adds -Werror and the availability checks)."""
    import os
    import shlex

    return tuple(shlex.split(os.environ.get(EXTRA_FLAGS_ENV, "")))


def metal_shim_spec() -> ModuleSpec:
    """The Metal shim's module, with `extra_flags()` after its own."""
    return attrs.evolve(METAL_SHIM, compile_args=METAL_SHIM.compile_args + extra_flags())


def compile_module(spec: ModuleSpec, target: Path) -> Path:
    """Compile `spec` into the extension module `target`, in a scratch folder beside it."""
    target = target.resolve()
    workdir = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".build", dir=target.parent))
    try:
        c_file = workdir / f"{spec.name}.c"
        with contextlib.redirect_stdout(io.StringIO()):   # cffi announces the file it writes
            spec.builder().emit_c_code(str(c_file))
        darwin = sys.platform == "darwin"
        link = ["-bundle", "-undefined", "dynamic_lookup"] if darwin else ["-shared"]
        run_compiler(["clang" if darwin else "cc", "-O2", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                      *(f"-I{d}" for d in spec.include_dirs), *spec.compile_args, str(c_file),
                      *(str(s) for s in spec.sources), *link, *spec.link_args, "-o", str(target)])
        return target
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    import os

    from metile.metal.cpu.toolchain import default_cache_dir
    from metile.metal.gpu.binding import build_shim

    print(build_shim(default_cache_dir(os.environ)))
