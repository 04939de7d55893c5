"""Compile-time debugging: which stages a kernel's compile shows (`METILE_DEBUG`) and where (`METILE_DEBUG_DIR`).

`METILE_DEBUG` is a comma-separated list of words:
- `tile_ir`: the traced Tile IR; `passes`: the IR after each pass of the pipeline; `metal_ir`: the
  Metal IR the pipeline ends with; `msl`: the MSL source handed to the device; `all`: every one of them;
- `verify` (or `1`): show nothing, only verify the IR after each pass.
Any non-empty value turns on verification after each pass (the debug mode of
`metile.rewrite.pipeline.run`). Stages go to stderr, each under a header naming the kernel, its
constexprs, the stage and a short hash of the compile's cache key. With `METILE_DEBUG_DIR=path` they
go instead to `<path>/<kernel>-<hash>.<stage>.txt` (`.metal` for MSL; `passNN-<pass>` for passes).
IR files start with the header as a `//` comment, which `metile.ir.parse` skips; MSL files hold exactly
the source the device compiled, so `.metal` line numbers in compiler errors and faults match them.

`metile.kernel` reads the environment when a kernel compiles and passes the strings here; this module
never reads the environment itself.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from pathlib import Path

import attrs

from metile.ir.errors import MetileError
from metile.ir.printer import pretty
from metile.ir.stmts import Kernel

STAGES = ("tile_ir", "passes", "metal_ir", "msl")
WORDS = (*STAGES, "all", "verify", "1")


class DebugSettingError(MetileError):
    """`METILE_DEBUG` holds a word that names no stage, or `METILE_DEBUG_DIR` names a directory that cannot be
    written."""


@attrs.frozen
class DebugSettings:
    """What one compile shows and checks: per-pass verification, the stages to show, the output directory."""

    verify_each: bool = False
    stages: frozenset[str] = frozenset()
    directory: str | None = None     # None: stderr


@functools.lru_cache(maxsize=64)
def debug_settings(spec: str | None, directory: str | None = None, *, verify_each: bool = False) -> DebugSettings:
    """The settings for `METILE_DEBUG=spec` and `METILE_DEBUG_DIR=directory` (see the module docstring);
    `verify_each` forces per-pass verification (`@metile.kernel(debug=True)`)."""
    words = [w.strip().lower() for w in (spec or "").split(",") if w.strip()]
    unknown = [w for w in words if w not in WORDS]
    if unknown:
        listed = ", ".join(repr(w) for w in unknown)
        raise DebugSettingError(f"METILE_DEBUG={spec!r}: unknown word{'s' if len(unknown) > 1 else ''} {listed}; "
                                f"use a comma-separated list of {', '.join(WORDS[:-1])} (or 1, same as verify)")
    stages = frozenset(STAGES) if "all" in words else frozenset(words) & frozenset(STAGES)
    return DebugSettings(verify_each or bool(spec and spec.strip()), stages, (directory or None) if stages else None)


def short_hash(key: object) -> str:
    """Ten hex digits identifying a compile; `key` must have a `repr` that is stable across processes."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:10]


def describe_constexprs(constexprs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(constexprs.items())) or "no constexprs"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Dump:
    """Shows the stages `settings` selects for one compile of one specialization."""

    def __init__(self, settings: DebugSettings, kernel: str, constexprs: dict, key_hash: str):
        self.settings = settings
        self.kernel = kernel
        self.constexprs = describe_constexprs(constexprs)
        self.key_hash = key_hash
        self._passes = 0

    def wants(self, stage: str) -> bool:
        return stage in self.settings.stages

    def header(self, stage: str) -> str:
        return f"// ===== metile kernel {self.kernel} [{self.constexprs}] stage {stage} (key {self.key_hash}) ====="

    def ir(self, stage: str, k: Kernel) -> None:
        if self.wants(stage):
            self._write(stage, stage, pretty(k), "txt")

    def after_pass(self, name: str, k: Kernel) -> None:
        """`on_pass` for `metile.rewrite.pipeline.run`: numbers the passes from 1."""
        self._passes += 1
        if self.wants("passes"):
            self._write(f"after pass {self._passes} {name}", f"pass{self._passes:02d}-{_UNSAFE.sub('_', name)}",
                        pretty(k), "txt")

    def msl(self, source: str) -> None:
        if self.wants("msl"):
            self._write("msl", "msl", source, "metal")

    def _write(self, stage: str, file_stage: str, text: str, suffix: str) -> None:
        text = text if text.endswith("\n") else text + "\n"
        if self.settings.directory is None:
            sys.stderr.write(f"{self.header(stage)}\n{text}")
            sys.stderr.flush()
            return
        folder = Path(self.settings.directory)
        path = folder / f"{self.kernel}-{self.key_hash}.{file_stage}.{suffix}"
        body = text if suffix == "metal" else f"{self.header(stage)}\n{text}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        except OSError as e:
            raise DebugSettingError(f"METILE_DEBUG_DIR={self.settings.directory!r}: cannot write {str(path)!r} "
                                    f"({e.strerror or e})") from None


__all__ = ["STAGES", "WORDS", "DebugSettingError", "DebugSettings", "Dump", "debug_settings", "short_hash"]
