"""The C preprocessor for MSL sources that need one (macros, conditionals, quoted includes).

Sources with no directive beyond `#include <metal_...>` (all that metile emits) skip it. The others go
through the system C++ compiler's preprocessor (`-E`) with Metal's predefined macros, the user's
include directories and EMPTY stand-ins for Metal's own headers (their contents come with the
compatibility header later, so macros they define, such as `METAL_FUNC`, stay unexpanded here).
The output keeps the preprocessor's line markers as `#line` directives, and a `LineMap` leads each
of its lines back to the file and line it came from, for the front end's messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import attrs

from metile.ir.errors import Loc
from metile.metal.errors import MSLCompileError, MSLUnsupportedError

METAL_VERSION = 310   # the MSL version the CPU device implements (3.1)
METAL_MACROS = {"__METAL_VERSION__": str(METAL_VERSION), "__METAL__": "1", "__METAL_MACOS__": "1",
                "__HAVE_BFLOAT__": "1"}
# Metal 4 tensors and tensor ops: the CPU device runs them as include/mt_tensor.h describes
TENSOR_HEADERS = ("metal_tensor", "MetalPerformancePrimitives/MetalPerformancePrimitives.h")
_SUPPORTED_HEADERS = (
    "metal_stdlib", "metal_atomic", "metal_common", "metal_compute", "metal_geometric", "metal_integer",
    "metal_math", "metal_numeric", "metal_relational", "metal_simdgroup", "metal_simdgroup_matrix",
    "metal_types", "metal_matrix", "metal_pack", "metal_quadgroup", "metal_uniform", "metal_config",
    *TENSOR_HEADERS,
)
UNSUPPORTED_HEADERS = {
    "metal_raytracing": "ray tracing",
    "metal_texture": "textures", "metal_graphics": "graphics functions", "metal_imageblocks": "imageblocks",
}
_UNSUPPORTED_MARK = "metile-unsupported:"
STUB_VERSION = "2"

# directives that need no preprocessor: Metal's own headers (the compatibility header stands in for them)
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w*)(.*)$", re.M)
_METAL_INCLUDE = re.compile(r"^\s*<metal_\w+>\s*(//.*)?$")
_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')
_INCLUDED_FROM = re.compile(r"^(?:In file included from|\s+from) (.+?):(\d+)[:,]", re.M)


def has_quoted_include(src: str) -> bool:
    """Whether `src` includes a file of its own (`#include "x.h"`), which Metal's runtime compiler cannot find."""
    return any(m.group(1) == "include" and m.group(2).lstrip().startswith('"') for m in _DIRECTIVE.finditer(src))


def metal_version_code(language_version: str | None) -> int:
    """`__METAL_VERSION__` for an MSL version such as "3.2" (320); the CPU device's 3.1 when None."""
    if not language_version:
        return METAL_VERSION
    major, minor = (int(x) for x in language_version.split("."))
    return major * 100 + minor * 10


def read_msl_file(path: Path) -> str:
    """The text of an MSL file given by path (a file that cannot be read is an `MSLCompileError`)."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise MSLCompileError(f"cannot read the MSL file {str(path)!r}: {e}") from None


def include_directories(dirs) -> tuple[Path, ...]:
    """`include_dirs=` as absolute paths (one path alone is taken as a list of one); a missing one is an error."""
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    out = []
    for d in dirs:
        if not isinstance(d, (str, os.PathLike)):
            raise MSLCompileError(f"include_dirs holds paths, not {d!r}")
        path = Path(d).resolve()
        if not path.is_dir():
            raise MSLCompileError(f"include directory {str(d)!r} does not exist")
        out.append(path)
    return tuple(out)


def needs_preprocessing(src: str) -> bool:
    """Whether `src` has a directive other than `#include <metal_...>` and `#pragma` (which the compiler reads
    itself: metile's kernels carry `#pragma clang loop unroll(full)`), or a line continuation in one."""
    if "#" not in src:
        return False
    for m in _DIRECTIVE.finditer(src):
        word, rest = m.group(1), m.group(2)
        if rest.endswith("\\"):
            return True
        if word == "pragma" and not rest.split()[:1] == ["once"]:
            continue
        if word != "include" or not _METAL_INCLUDE.match(rest):
            return True
    return False


@attrs.frozen
class LineMap:
    """Where each line of preprocessed text came from: `origins[k]` is the (file, line) of line k + 1."""

    origins: tuple[tuple[str, int], ...]
    main_name: str
    main_source: str

    def locate(self, line: int) -> tuple[str, int]:
        if 0 < line <= len(self.origins):
            return self.origins[line - 1]
        return self.main_name, line

    def metal_headers(self) -> tuple[str, ...]:
        """Metal's own headers the source included (by the stand-ins the preprocessor took), in order."""
        names: list[str] = []
        for file, _ in self.origins:
            head, sep, rest = file.partition("/msl-stubs/")
            name = rest.partition("/")[2] if sep else ""
            if name and name not in names:
                names.append(name)
        return tuple(names)

    @property
    def several_files(self) -> bool:
        """Whether the text came from more than the source itself (Metal's stand-in headers are empty)."""
        return any(f != self.main_name and "/msl-stubs/" not in f for f, _ in self.origins)

    def user_file(self, file: str) -> str | None:
        """The text of `file` if the source or its includes are it (not a header of Metal's or the CPU device's)."""
        if not any(f == file for f, _ in self.origins):
            return None
        return read_source(file, self.main_name, self.main_source)

    def source_line(self, file: str, line: int) -> str:
        text = read_source(file, self.main_name, self.main_source)
        lines = text.splitlines() if text is not None else []
        return lines[line - 1] if 0 < line <= len(lines) else ""


def read_source(file: str, main_name: str, main_source: str) -> str | None:
    """The text of `file` as the preprocessor saw it (the main source, or a header on disk)."""
    if file == main_name:
        return main_source
    try:
        return Path(file).read_text(errors="replace")
    except OSError:
        return None


@attrs.frozen
class Preprocessed:
    text: str          # with `#line N "file"` directives where the preprocessor put line markers
    line_map: LineMap


def stub_headers(cache_dir: Path, *, refuse: bool = True) -> Path:
    """A folder of empty stand-ins for Metal's headers; with `refuse`, those of features the CPU device lacks
    stop the preprocessor with a message saying so (the Apple GPU has them all)."""
    folder = Path(cache_dir) / "msl-stubs" / (STUB_VERSION + ("" if refuse else "-all"))
    marker = folder / ".complete"
    if marker.exists():
        return folder
    for name in _SUPPORTED_HEADERS:
        _write_once(folder / name, "")
    for name, what in UNSUPPORTED_HEADERS.items():
        _write_once(folder / name, f"#error {_UNSUPPORTED_MARK} {what} are not supported by the CPU device yet\n"
                    if refuse else "")
    marker.write_text("ok\n")
    return folder


def _write_once(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")   # processes may race here
    tmp.write_text(text)
    tmp.replace(path)


def preprocess(src: str, metal_name: str, *, compiler: str, stub_dir: Path, include_dirs: Sequence[Path] = (),
               source_dir: Path | None = None, metal_version: int = METAL_VERSION) -> Preprocessed:
    """Run the C preprocessor on `src` (see the module docstring); errors become `MSLCompileError`.

    `metal_version` is `__METAL_VERSION__` (310 for MSL 3.1)."""
    quoted = metal_name.replace("\\", "\\\\").replace('"', '\\"')
    defines = [f"-D{k}={v}" for k, v in {**METAL_MACROS, "__METAL_VERSION__": str(metal_version)}.items()]
    quote_dirs = [f"-iquote{source_dir}"] if source_dir is not None else []
    cmd = [compiler, "-E", "-x", "c++", "-std=c++17", "-nostdinc", *defines, *quote_dirs,
           *(f"-I{d}" for d in include_dirs), f"-I{stub_dir}", "-"]
    try:
        proc = subprocess.run(cmd, input=f'#line 1 "{quoted}"\n{src}', capture_output=True, text=True,
                              errors="replace", cwd=stub_dir, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise MSLCompileError(f"{metal_name}: cannot run the C preprocessor ({compiler}): {e}") from None
    if proc.returncode != 0:
        raise preprocessor_error(proc.stderr, src, metal_name)
    return _with_line_map(proc.stdout, src, metal_name)


def preprocessor_error(output: str, src: str, metal_name: str) -> MSLCompileError:
    from metile.metal.diagnostics import DIAGNOSTIC

    m = DIAGNOSTIC.search(output)
    if m is None:
        return MSLCompileError(f"the C preprocessor rejected {metal_name}:\n{output.strip()}", compiler_output=output)
    file, line, col, msg = m.group("file"), int(m.group("line")), int(m.group("col")), m.group("msg").strip()
    cls = MSLCompileError
    if _UNSUPPORTED_MARK in msg:   # a stand-in header refusing: report the line that included it
        cls = MSLUnsupportedError
        msg = msg.split(_UNSUPPORTED_MARK, 1)[1].strip()
        site = _innermost_include(output[:m.start()])
        if site is not None:
            file, line, col = site.group(1), int(site.group(2)), 1
    msg = msg.removeprefix("#error ").strip()
    text = read_source(file, metal_name, src)
    lines = text.splitlines() if text is not None else []
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    return cls(msg, Loc(file, line, max(col - 1, 0)), source_line=source_line, compiler_output=output)


def _innermost_include(output: str) -> re.Match | None:
    """The innermost `#include` of an include stack: g++ lists it first ("In file included from a.h:1,\n from
    k.metal:3:"), clang last (one "In file included from" line each, outermost first)."""
    block = []   # the include stack printed right before the error (not those of earlier warnings)
    for line in reversed(output.rstrip("\n").split("\n")):
        if _INCLUDED_FROM.match(line) is None:
            break
        block.append(line)
    sites = [m for line in reversed(block) if (m := _INCLUDED_FROM.match(line)) is not None]
    if not sites:
        return None
    clang = sum(s.group(0).startswith("In file included from") for s in sites) > 1
    return sites[-1] if clang else sites[0]


def _with_line_map(out: str, src: str, metal_name: str) -> Preprocessed:
    lines = out.split("\n")
    origins: list[tuple[str, int]] = []
    file, line = metal_name, 1
    for k, text in enumerate(lines):
        m = _MARKER.match(text) if text.startswith("# ") else None
        if m is not None:
            file = re.sub(r"\\(.)", r"\1", m.group(2))
            line = int(m.group(1))
            lines[k] = f'#line {line} "{m.group(2)}"' if line > 0 and not file.startswith("<") else ""
            origins.append((file, line - 1))
            continue
        origins.append((file, line))
        line += 1
    return Preprocessed("\n".join(lines), LineMap(tuple(origins), metal_name, src))
