"""The system C++ compiler behind the CPU device, and the on-disk cache of what it builds.

Compiled artefacts (the runtime library, precompiled headers, kernel libraries) live under one
cache directory, keyed by SHA-256 of everything that determines their bytes: front-end version,
header and runtime sources, the compiler's `--version`, flags and source. Entries are written
atomically under a file lock, so concurrent processes never see a half-written file; each entry has
a `.sha256` sidecar, and an entry whose bytes do not match it is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs
import platformdirs

from metile.metal.errors import CompilerNotFoundError

HERE = Path(__file__).resolve().parent
INCLUDE_DIR = HERE / "include"
# Oldest major version of each compiler family. Apple numbers its clang apart from LLVM (Apple clang 15, of Xcode 15,
# is LLVM 16): "apple-clang" counts Apple's numbers.
MIN_VERSIONS = {"gcc": 12, "clang": 15, "apple-clang": 15}
# Where to look, in order, when CXX is unset. On macOS `clang++` (Apple's, from Xcode or the Command Line Tools)
# comes first; there `g++` is the same Apple clang under another name.
CANDIDATES = {"Darwin": ("clang++", "c++", "g++")}
DEFAULT_CANDIDATES = ("g++", "clang++", "c++")


@attrs.frozen
class Compiler:
    path: str
    family: str   # "gcc" or "clang"
    major: int    # the version's major number as the compiler prints it (Apple's own for Apple clang)
    version_text: str
    apple: bool = False   # Apple clang (Xcode or the Command Line Tools)

    @property
    def is_gcc(self) -> bool:
        return self.family == "gcc"

    @property
    def kind(self) -> str:
        """The family for MIN_VERSIONS and messages: "gcc", "clang" or "apple-clang"."""
        return "apple-clang" if self.apple else self.family


def parse_version(path: str, out: str) -> Compiler | None:
    """The compiler `path` is, read from what its `--version` printed (None when it is neither gcc nor clang)."""
    first = out.splitlines()[0] if out else ""
    family = "clang" if "clang" in out.lower() else "gcc" if ("g++" in first or "GCC" in out or "gcc" in first) else ""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", first)
    if not family or not m:
        return None
    apple = family == "clang" and first.startswith("Apple ")
    return Compiler(path=path, family=family, major=int(m.group(1)), version_text=out.strip(), apple=apple)


def _probe(path: str) -> Compiler | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(path, out)


def requirement(system: str) -> str:
    """The compilers the CPU device accepts on `system` (platform.system()), as a phrase."""
    if system == "Darwin":
        return "Apple clang >= 15 (Xcode 15 or later, or its Command Line Tools), clang++ >= 15 or g++ >= 12"
    return "g++ >= 12 or clang++ >= 15"


def find_compiler(preferred: str | None = None, *, system: str | None = None) -> Compiler:
    """The C++ compiler to use: `preferred` if given (e.g. from $CXX), else the first of CANDIDATES on PATH (g++,
    clang++, c++; clang++ first on macOS) that is new enough."""
    system = system or platform.system()
    candidates = [preferred] if preferred else list(CANDIDATES.get(system, DEFAULT_CANDIDATES))
    seen = []
    for name in candidates:
        path = shutil.which(name) if name else None
        if not path:
            continue
        comp = _probe(path)
        if comp is None:
            continue
        if comp.major >= MIN_VERSIONS[comp.kind]:
            return comp
        seen.append(f"{path} ({comp.kind} {comp.major})")
    found = f"; found only {', '.join(seen)}" if seen else ""
    where = f"the compiler named by CXX ({preferred})" if preferred else f"{', '.join(candidates)} on PATH"
    install = ("`xcode-select --install` installs the Command Line Tools" if system == "Darwin"
               else "e.g. `apt-get install g++`")
    raise CompilerNotFoundError(
        f"the CPU device compiles MSL with a C++ compiler and needs {requirement(system)}; looked for {where}{found}. "
        f"Install one ({install}) or set CXX."
    )


def shared_library(system: str | None = None) -> tuple[str, list[str]]:
    """The file suffix of a shared library on `system` and the link flags that make one whose undefined symbols (the
    runtime's services, for a kernel library) are left to the process it is loaded into: ELF allows that by default,
    Mach-O only with `-undefined dynamic_lookup`."""
    if (system or platform.system()) == "Darwin":
        return ".dylib", ["-dynamiclib", "-Wl,-undefined,dynamic_lookup"]
    return ".so", ["-shared"]


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """`$METILE_CACHE_DIR`, else the platform's user cache directory for metile (`platformdirs`:
    `$XDG_CACHE_HOME/metile` or `~/.cache/metile` on Linux, `~/Library/Caches/metile` on macOS)."""
    if environ.get("METILE_CACHE_DIR"):
        return Path(environ["METILE_CACHE_DIR"])
    return platformdirs.user_cache_path("metile", appauthor=False)


def sha256_hex(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        data = p.encode() if isinstance(p, str) else p
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def tree_digest(paths: list[Path]) -> str:
    return sha256_hex(*[p.name.encode() + b"\0" + p.read_bytes() for p in sorted(paths)])


def header_files() -> list[Path]:
    files = [p for p in INCLUDE_DIR.iterdir() if p.is_file()] if INCLUDE_DIR.is_dir() else []
    return files + [HERE / "mt_runtime.h"]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _valid(path: Path) -> bool:
    side = path.with_name(path.name + ".sha256")
    try:
        return side.read_text().strip() == hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return False


def cached_build(path: Path, build: Callable[[Path], None]) -> Path:
    """Return `path`, building it with `build(tmp_path)` first unless a valid entry is already there.

    Safe under concurrent processes (file lock, atomic rename) and self-healing: an entry whose bytes
    do not match its `.sha256` sidecar (truncated, corrupted) is rebuilt.
    """
    if _valid(path):
        return path
    with file_lock(path.with_name(path.name + ".lock")):
        if _valid(path):
            return path
        fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            build(tmp)
            digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
            side_tmp = tmp.with_name(tmp.name + ".sha256")
            side_tmp.write_text(digest + "\n")
            os.replace(tmp, path)
            os.replace(side_tmp, path.with_name(path.name + ".sha256"))
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".sha256")):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
    return path


class BuildFailed(Exception):
    def __init__(self, command: list[str], output: str):
        super().__init__(output)
        self.command = command
        self.output = output


def run_compiler(command: list[str], *, cwd: Path | None = None) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise BuildFailed(command, proc.stderr + proc.stdout)
