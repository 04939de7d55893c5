"""metile's on-disk caches, under one directory (`METILE_CACHE_DIR`, else the platform's user cache directory):
compiled kernels and what builds them (per device), and the autotuner's choices. `python -m metile cache info`
shows them (counting what is there while other processes add and remove files) and `python -m metile cache clear`
empties them.

The autotuner's choices live in one JSON file, `autotune/choices.json`, a map from a digest of what decides a
choice (`metile.autotune`) to the choice. Every reader and writer holds the file's lock (`filelock`), and a
writer replaces the file whole, so that processes tuning at the same time never lose or tear each other's
entries.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import attrs
import filelock

from metile.ir.errors import MetileError
from metile.metal.cpu.toolchain import default_cache_dir

PARTS = {   # what each subdirectory holds
    "kernels": "compiled kernels (CPU device)",
    "metallib": "compiled Metal libraries (Apple GPU device)",
    "metal": "the Apple GPU device's shim, built per macOS and Python",
    "include": "the CPU device's MSL headers, built per compiler",
    "runtime": "the CPU device's runtime library",
    "msl-stubs": "the CPU device's MSL front-end stubs",
    "autotune": "autotuning choices",
}
TUNING_FILE = Path("autotune") / "choices.json"
LOCK_TIMEOUT_S = 60.0


class CacheError(MetileError):
    """The cache directory or the tuning file cannot be read or written."""


def cache_root() -> Path:
    """The cache directory, as the environment gives it now."""
    return default_cache_dir(os.environ)


@attrs.frozen
class Part:
    name: str
    what: str
    files: int
    bytes: int


def cache_info(root: Path | None = None) -> list[Part]:
    """Files and bytes in each part of the cache (`PARTS`), the autotuner's choices counted as entries."""
    root = cache_root() if root is None else root
    out = []
    for name, what in PARTS.items():
        files, size = _files(root / name)
        count = len(read_choices(root)) if name == "autotune" else files
        out.append(Part(name, what, count, size))
    return out


def _files(folder: Path) -> tuple[int, int]:
    """The regular files under `folder` (symbolic links to files included) and their bytes. Other processes write
    and remove files there while this lists them (a compile's temporary files, a `cache clear`): a file or folder
    gone before it is looked at is not counted, and a missing `folder` holds nothing."""
    count = size = 0
    for path, _, names in os.walk(folder):   # a folder that cannot be listed (gone) is skipped
        for name in names:
            try:
                st = os.stat(os.path.join(path, name))
            except OSError:   # gone since the listing, or a broken link
                continue
            if stat.S_ISREG(st.st_mode):
                count += 1
                size += st.st_size
    return count, size


def cache_clear(root: Path | None = None) -> list[str]:
    """Remove every part of the cache (`PARTS`); the names of the parts that were there."""
    root = cache_root() if root is None else root
    removed = []
    for name in PARTS:
        folder = root / name
        if folder.exists():
            if name == "autotune":
                with _lock(root):
                    (root / TUNING_FILE).unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(name)
    return removed


def read_choices(root: Path | None = None) -> dict:
    """The autotuner's choices, digest -> entry (empty when there are none)."""
    root = cache_root() if root is None else root
    path = root / TUNING_FILE
    if not path.exists():
        return {}
    with _lock(root):
        return _read(path)


def read_choice(digest: str, root: Path | None = None) -> dict | None:
    """The autotuner's choice stored under `digest`, or None."""
    found = read_choices(root).get(digest)
    return found if isinstance(found, dict) else None


def store_choice(digest: str, entry: dict, root: Path | None = None) -> None:
    """Store the autotuner's choice `entry` (JSON data) under `digest`, keeping every other entry."""
    root = cache_root() if root is None else root
    path = root / TUNING_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock(root):
            choices = _read(path)
            choices[digest] = entry
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".choices-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(choices, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError as e:
        raise CacheError(f"metile cannot write its autotuning choices to {str(path)!r}: {e.strerror or e}; set "
                         "METILE_CACHE_DIR to a writable directory") from e


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}   # an unreadable or damaged file: its choices are made again
    return data if isinstance(data, dict) else {}


def _lock(root: Path) -> filelock.FileLock:
    (root / TUNING_FILE).parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(root / TUNING_FILE) + ".lock", timeout=LOCK_TIMEOUT_S)


__all__ = ["PARTS", "CacheError", "Part", "cache_clear", "cache_info", "cache_root", "read_choice", "read_choices",
           "store_choice"]
