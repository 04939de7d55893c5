"""Build kernel libraries for the CPU device: translated MSL -> shared object, with a precompiled header.

Compile errors are reported against the `.metal` text: the translation keeps the MSL line for line
behind a `#line` directive, so the compiler already names `.metal` lines and this module only picks
the first error and quotes the source line with a caret.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from pathlib import Path

from metile.metal.cpu.msl import FRONTEND_VERSION, Translation
from metile.metal.cpu.symbolize import DEBUG_SUFFIX, gather_debug_info
from metile.metal.cpu.toolchain import (
    HERE,
    BuildFailed,
    Compiler,
    cached_build,
    header_files,
    run_compiler,
    sha256_hex,
    shared_library,
    tree_digest,
)
from metile.metal.diagnostics import first_error
from metile.metal.errors import MSLCompileError, MSLUnsupportedError

HEADER = "metal_compat.h"
UNSUPPORTED_MARK = "metile-unsupported:"   # begins the message of a header's static_assert refusing a construct
# Checks compiled into every kernel as traps. On x86-64 the hardware already traps integer division by
# zero (SIGFPE), so an undefined-behaviour trap (SIGILL) there can only be a misaligned access.
TRAP_CHECKS = "alignment" if platform.machine() in ("x86_64", "AMD64") else "alignment,integer-divide-by-zero"
TRAP_MEANS = "misaligned" if TRAP_CHECKS == "alignment" else "misaligned-or-division"
COMMON_FLAGS = [
    "-std=c++17", "-O2", "-fPIC", "-fwrapv", "-fno-strict-aliasing", "-fvisibility=hidden",
    "-fvisibility-inlines-hidden", "-U_FORTIFY_SOURCE", "-g1", "-fno-omit-frame-pointer",
    "-fstack-clash-protection", "-fsigned-char", "-fno-exceptions",
    "-Wno-attributes", "-Wno-unknown-pragmas", "-Wno-ignored-attributes",
    f"-fsanitize={TRAP_CHECKS}",
]
# Flags clang takes but ignores (with a warning) on macOS: Apple's ABI probes every stack frame larger than a page
# itself (___chkstk_darwin), which is what -fstack-clash-protection asks for on Linux.
NOT_ON_DARWIN = frozenset({"-fstack-clash-protection"})
# clang's DWARF 5 line tables, read by binutils' addr2line (the symbolizer on Linux), lose the inlined frames of an
# instruction: a fault inside a header's helper (a checked access, an atomic) then names the header's line and no
# kernel line. DWARF 4 keeps them (macOS reads lines from dsymutil's output, which needs no such help).
CLANG_LINUX_DEBUG = ["-gdwarf-4"]
SANITIZE_FLAGS = ["-fsanitize=thread", "-fsanitize=bounds"]
# A kernel library needs the C and math libraries and the compiler's support library, never the C++ library: its
# code includes no std header and has no exceptions (MSL has none: -fno-exceptions), and whatever C++ runtime symbol
# it might still name resolves when it is loaded, from the runtime library (loaded RTLD_GLOBAL, itself linked with
# the C++ library). Leaving the C++ library out of the link saves the linker reading it: about a tenth of a small
# kernel's build. A link that fails so is done again the usual way (another C library or toolchain).
LEAN_LINK = ["-nodefaultlibs", "-lm", "-lc", "-lgcc_s", "-lgcc"] if platform.system() == "Linux" else []


def kernel_flags(compiler: Compiler, sanitize: bool, system: str | None = None) -> list[str]:
    darwin = (system or platform.system()) == "Darwin"
    flags = [f for f in COMMON_FLAGS if not (darwin and f in NOT_ON_DARWIN)]
    if compiler.is_gcc:
        flags += ["-fno-gnu-unique", "-fsanitize-undefined-trap-on-error"]
    else:
        flags += [f"-fsanitize-trap={TRAP_CHECKS},bounds", "-Wno-unknown-attributes"]
        if not darwin:
            flags += CLANG_LINUX_DEBUG
    if sanitize:
        flags += SANITIZE_FLAGS
    return flags


class KernelBuilder:
    """Builds (and caches) the shared object for a translated MSL source."""

    def __init__(self, compiler: Compiler, cache_dir: Path):
        self.compiler = compiler
        self.cache_dir = cache_dir
        self.header_digest = tree_digest(header_files())
        self._pch: dict[bool, Path | None] = {}

    def include_dir(self, sanitize: bool) -> Path:
        """A private copy of the headers, with a precompiled header beside them when the compiler can make one.

        The folder is keyed by everything the precompiled header depends on (front-end version, headers, compiler,
        flags). It appears whole: the headers are copied into a temporary folder renamed into place, so a compiler
        of another process never reads a header half rewritten; the precompiled header is then a `cached_build`
        entry (locked, written atomically) in it."""
        if sanitize in self._pch and self._pch[sanitize] is not None:
            return self._pch[sanitize]
        flags = kernel_flags(self.compiler, sanitize)
        key = sha256_hex("pch", FRONTEND_VERSION, self.header_digest, self.compiler.version_text, " ".join(flags))
        folder = self.cache_dir / "include" / key[:24]
        marker = folder / ".complete"
        if not marker.exists():
            if not folder.exists():
                _publish_headers(folder)
            pch = folder / (HEADER + (".gch" if self.compiler.is_gcc else ".pch"))

            def build(out: Path) -> None:
                run_compiler([self.compiler.path, *flags, "-x", "c++-header", str(folder / HEADER), "-o", str(out)])

            try:
                cached_build(pch, build)
            except BuildFailed:
                pass  # no precompiled header: slower compiles, same results
            marker.write_text("ok\n")
        self._pch[sanitize] = folder
        return folder

    def build(self, tr: Translation, *, sanitize: bool = False, source_dir: Path | None = None,
              checked: bool = False) -> Path:
        """The shared library of `tr`: its sanitizer (and profiling) build when `sanitize`, its checked build
        (metile.metal.cpu.checked) when `checked`, else its plain build."""
        text = tr.cpp_for(sanitize, checked)
        flags = kernel_flags(self.compiler, sanitize)
        if tr.cxx_standard != "c++17":   # the precompiled header (C++17) then goes unused: the headers are parsed
            flags = [f"-std={tr.cxx_standard}" if f == "-std=c++17" else f for f in flags]
        if tr.line_map is not None and tr.line_map.several_files:
            # text from several files: in DWARF 5 line tables addr2line names the lines of `#line "header.h"`
            # regions after the unit itself, so a fault in a header would be reported at a line of the `.metal`
            # file. DWARF 4 costs about a quarter more compile time, so one-file sources keep the default.
            flags.append("-gdwarf-4")
        inc = self.include_dir(sanitize)
        key = sha256_hex("kernel", FRONTEND_VERSION, self.header_digest, self.compiler.version_text,
                         " ".join(flags), text, str(source_dir or ""))
        out_dir = self.cache_dir / "kernels" / key[:2]
        out_dir.mkdir(parents=True, exist_ok=True)
        so = out_dir / f"{key[2:26]}{'-san' if sanitize else ''}{shared_library()[0]}"
        cpp = out_dir / f"{key[2:26]}.cpp"
        if not cpp.exists():
            cpp.write_text(text)
        pch_use = []
        if not self.compiler.is_gcc and (inc / (HEADER + ".pch")).exists():
            pch_use = ["-include-pch", str(inc / (HEADER + ".pch"))]
        extra_inc = [f"-I{source_dir}"] if source_dir else []

        def build(out: Path) -> None:
            base = [self.compiler.path, *flags, f"-I{inc}", *extra_inc, *pch_use]
            obj = out.with_suffix(".o")
            hooks = out.with_suffix(".hooks.o")
            try:
                try:
                    run_compiler([*base, "-pipe", "-c", str(cpp), "-o", str(obj)])
                except BuildFailed:
                    if not pch_use:
                        raise
                    # clang refuses a precompiled header another build of it made: the headers themselves then
                    run_compiler([*base[:len(base) - len(pch_use)], "-pipe", "-c", str(cpp), "-o", str(obj)])
                objects = [obj]
                if sanitize:
                    run_compiler([self.compiler.path, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden",
                                  f"-I{HERE}", "-c", str(HERE / "mt_sanitizer_hooks.cpp"), "-o", str(hooks)])
                    objects.append(hooks)
                link_shared(self.compiler, objects, out, lean=not sanitize)
                if platform.system() == "Darwin":   # the DWARF stays in the objects: gathered before they go
                    dwarf = out.with_name(out.name + DEBUG_SUFFIX)
                    if gather_debug_info(out, dwarf, run_compiler):
                        os.replace(dwarf, so.with_name(so.name + DEBUG_SUFFIX))
            finally:
                for f in (obj, hooks):
                    f.unlink(missing_ok=True)

        try:
            return cached_build(so, build)
        except BuildFailed as e:
            raise compile_error(e.output, tr) from None


def _publish_headers(folder: Path) -> None:
    """Make `folder` a copy of the headers, all at once: copied into a temporary folder beside it, renamed into
    place; when another process made it first, its copy is kept and ours dropped."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        for f in header_files():
            shutil.copyfile(f, tmp / f.name)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def link_shared(compiler: Compiler, objects: list[Path], out: Path, *, lean: bool, system: str | None = None) -> None:
    """Link `objects` into the shared object `out`, its references to the runtime's services left to resolve when it
    is loaded: without the C++ library (`LEAN_LINK`) when `lean` and the platform allows, the compiler's usual way
    otherwise or when that fails."""
    command = [compiler.path, *shared_library(system)[1], *map(str, objects), "-o", str(out)]
    if lean and LEAN_LINK and (system or platform.system()) == "Linux":
        try:
            run_compiler([*command, *LEAN_LINK])
            return
        except BuildFailed:
            pass
    run_compiler(command)


def compile_error(output: str, tr: Translation) -> MSLCompileError:
    """The first compiler error, located on the `.metal` line when it lies there (or on a header's line)."""
    headers = tr.line_map.user_file if tr.line_map is not None else None
    err = first_error(output, source=tr.source, metal_name=tr.metal_name, read_other=headers,
                      elsewhere="generated for the kernel signature of", compiler="the C++ compiler")
    text = err.message
    if UNSUPPORTED_MARK in text:   # a construct the compatibility headers refuse (a static_assert saying so)
        what = text.split(UNSUPPORTED_MARK, 1)[1].split("(in ", 1)[0].strip().rstrip("\"'").strip()
        return MSLUnsupportedError(f"{what} are not supported by the CPU device", err.loc,
                                   source_line=err.source_line, compiler_output=output)
    return err

