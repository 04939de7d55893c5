"""`python -m metile compile FILE.py:KERNEL`: print the MSL (and optionally the IR) of one `@metile.kernel`.

The file is imported as a module from its path (registered in `sys.modules` under a private name, and its
folder put first on `sys.path`, only while the command runs). The kernel is compiled for stand-in arguments
built from the command line: `--arg X=f32*` is a small numpy array of float32 (a pointer parameter),
`--arg n=i32` a runtime scalar of that type, and `-D BLOCK=256` a constexpr (or, for a name that is not a
parameter, a compiler option). The kernel is compiled, never launched. An integer scalar given only its type
compiles the general kernel, the one a launch uses for any value but 1 and the multiples of 16; with a value
(`--arg n=i32:1`, `--arg n=i32:4096`) it compiles what a launch with that value compiles (see
`metile.frontend.specialize.integer_facts`).

Exit status: 0 on success, 2 for a mistake on the command line (file, kernel name, `--arg`/`-D` syntax,
unknown type, missing or unknown argument, a file that fails to import), 1 when the kernel does not compile
(a kernel error, a construct the lowering refuses, MSL the device rejects). Every such failure prints one
message to stderr, located at the kernel's line with a caret where there is one, and no traceback.

`python -m metile profile` (`metile.cli_profile`) shares this module's parsing and launches the kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

PROG = "python -m metile compile"
STAND_IN_ELEMENTS = 16
_NAME = re.compile(r"[A-Za-z_]\w*\Z")
_MODULE_PREFIX = "_metile_cli_"

EPILOG = """\
types (--arg NAME=TYPE or NAME=TYPE:VALUE):
  f32 f16 bf16 i8 u8 i16 u16 i32 u32 bool   a runtime scalar of that type (i32 is a Python int, f32 a float)
  f32* f16* bf16* i32* u8* ...             a pointer: a small numpy array of that element type
  (bf16 needs numpy's bfloat16 dtype from the ml_dtypes package)
  n=i32            the general kernel, for any value of n (what a launch compiles for values other than 1
                   and the multiples of 16)
  n=i32:1000       the kernel a launch with n == 1000 compiles: n=i32:1 makes n the constant 1, and a
                   multiple of 16 (n=i32:4096) is known to be one; other values give the general kernel
  X=f32*:4096      a pointer to an array of 4096 elements

values (-D NAME=VALUE): an int if VALUE reads as one (256, 0x100), else a float (1e-5), else
True / False / None, else a string (quotes around it are removed: -D ACT=relu or -D ACT='"relu"').
A -D name that is not a parameter of the kernel is passed as a compiler option.

examples:
  python -m metile compile kernels.py:vec_add --arg A=f32* --arg B=f32* --arg C=f32* --arg n=i32 -D BLOCK=256
  python -m metile compile kernels.py:vec_add ... --tile-ir --metal-ir --no-device -o vec_add.metal
  python -m metile compile kernels.py:vec_add ... --arg n=i32:4096 --no-device   (n known a multiple of 16)

exit status: 0 compiled; 1 the kernel does not compile; 2 a mistake on the command line.

`python -m metile profile --help`: launch the kernel on the CPU device and count its memory traffic."""


class CommandError(Exception):
    """A failure reported as a message and an exit status; `located` messages are already rendered
    (`file:line:col: error: ...` with the source line), the others get the command's name in front."""

    def __init__(self, message: str, status: int = 2, *, located: bool = False):
        super().__init__(message)
        self.message = message
        self.status = status
        self.located = located

    def render(self, prog: str = PROG) -> str:
        return self.message if self.located else f"{prog}: error: {self.message}"


@attrs.frozen
class ArgSpec:
    """`--arg NAME=TYPE[:VALUE]`: a runtime argument's name, element type (a `DType` value) and pointer-ness, and
    the value after the colon (`X=f32*:4096`, `n=i32:1000`), a pointer's element count or a scalar's value, None
    when there is none (`compile` then builds a stand-in; `profile` needs it)."""

    name: str
    dtype: str
    pointer: bool
    value: int | float | bool | None = None


@attrs.frozen
class Stages:
    """What the command prints: the Tile IR, the Metal IR and the MSL of one specialization."""

    tile_ir: object
    metal_ir: object
    msl: str


def add_parser(sub) -> argparse.ArgumentParser:
    """Register `compile` on the subcommand table of `python -m metile`."""
    p = sub.add_parser(
        "compile", prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        help="print the MSL of a @metile.kernel for the given argument types and constexprs",
        description="Import FILE.py, compile its @metile.kernel KERNEL for the argument types given by --arg\n"
                    "and the constexprs given by -D, and print the generated MSL (the kernel is not launched).\n"
                    "KERNEL may be left out when the file defines exactly one kernel.")
    p.add_argument("target", metavar="FILE.py[:KERNEL]", help="the Python file and the kernel's name in it")
    p.add_argument("--arg", dest="args", action="append", default=[], metavar="NAME=TYPE",
                   help="the type of a runtime parameter, e.g. X=f32* (pointer) or n=i32 (scalar), optionally with "
                        "a value to specialise on as a launch would (n=i32:1); repeatable")
    p.add_argument("-D", "--define", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="a constexpr value (or compiler option), e.g. -D BLOCK=256; repeatable")
    p.add_argument("--tile-ir", action="store_true", help="also print the traced Tile IR")
    p.add_argument("--metal-ir", action="store_true", help="also print the Metal IR after the lowering pipeline")
    p.add_argument("-o", "--output", metavar="FILE", help="write the MSL to FILE instead of stdout")
    p.add_argument("--no-device", action="store_true",
                   help="stop after emitting MSL: do not compile it on the device (no C++ or Metal compiler needed)")
    return p


def run(args: argparse.Namespace) -> int:
    """Carry out `compile`; returns the exit status after printing any failure to stderr."""
    from metile.frontend.errors import KernelArgumentError
    from metile.ir.errors import MetileError
    from metile.metal.errors import DeviceError

    try:
        path, name = parse_target(args.target)
        specs = [parse_arg(a) for a in args.args]
        defines = [parse_define(d) for d in args.defines]
        with imported(path) as module:
            kernel = find_kernel(module, name, path)
            call_args, consts = bind(kernel, specs, defines)
            stages = compile_stages(kernel, call_args, consts, on_device=not args.no_device)
        write(stages, kernel.__name__, args)
    except CommandError as e:
        print(e.render(), file=sys.stderr)
        return e.status
    except KernelArgumentError as e:
        print(e, file=sys.stderr)
        return 2
    except DeviceError as e:
        print(f"{e}\n(--no-device prints the MSL without compiling it on a device)", file=sys.stderr)
        return 1
    except MetileError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


def parse_target(text: str) -> tuple[Path, str | None]:
    """`FILE.py:KERNEL` -> (path, kernel name); the name is None when left out."""
    file, sep, name = text.rpartition(":")
    if not sep or "/" in name or "\\" in name:
        file, name = text, ""
    elif not name:
        raise CommandError(f"'{text}': expected FILE.py:KERNEL (the kernel's name after the colon)")
    if name and not all(_NAME.match(part) for part in name.split(".")):
        raise CommandError(f"'{name}' is not a Python name: expected FILE.py:KERNEL")
    path = Path(file)
    if not path.exists():
        raise CommandError(f"no such file: {file}")
    if not path.is_file():
        raise CommandError(f"not a file: {file}")
    return path, name or None


def parse_arg(text: str) -> ArgSpec:
    """`NAME=TYPE` with TYPE a dtype (`i32`) or a pointer to one (`f32*`), optionally followed by `:VALUE`: a
    pointer's element count or a scalar's value (checked against the type)."""
    from metile.ir.types import DType

    head, sep, raw = text.rpartition(":")
    if not sep:
        head, raw = text, None
    name, sep, kind = (s.strip() for s in head.partition("="))
    if not sep or not _NAME.match(name) or not kind:
        raise CommandError(f"--arg '{text}': expected NAME=TYPE, e.g. --arg X=f32* or --arg n=i32")
    pointer = kind.endswith("*")
    dtype = kind.rstrip("*").strip()
    known = [d.value for d in DType]
    if dtype not in known or kind.count("*") > 1:
        hint = " (Metal has no 64-bit floats)" if dtype in ("f64", "float64", "double") else ""
        raise CommandError(f"--arg {name}: unknown type '{kind}'{hint}; types are {' '.join(known)}, "
                           f"with a trailing * for a pointer")
    spec = ArgSpec(name, dtype, pointer)
    if raw is None:
        return spec
    raw = raw.strip()
    if not raw:
        raise CommandError(f"--arg '{text}': expected a value after the colon, e.g. --arg {name}={kind}:"
                           f"{'4096' if pointer else '1.0' if dtype.startswith(('f', 'bf')) else '1'}")
    if pointer:
        count = _integer(raw)
        if count is None or count < 1:
            raise CommandError(f"--arg {name}: the element count must be a whole number >= 1, not '{raw}'")
        return ArgSpec(name, dtype, True, count)
    return ArgSpec(name, dtype, False, scalar_value(spec, raw))


def _integer(raw: str) -> int | None:
    for base in (10, 0):  # 0 also reads 0x100, 0o17 and 0b101
        with contextlib.suppress(ValueError):
            return int(raw, base)
    return None


def scalar_value(spec: ArgSpec, raw: str) -> int | float | bool:
    """`raw` read as a value of the scalar's type, refused when it is not one (or out of the type's range)."""
    from metile.ir.types import DType

    dtype = DType(spec.dtype)
    if dtype is DType.BOOL:
        words = {"true": True, "false": False, "1": True, "0": False}
        if raw.lower() not in words:
            raise CommandError(f"--arg {spec.name}: a bool is True, False, 1 or 0, not '{raw}'")
        return words[raw.lower()]
    if np.issubdtype(dtype.numpy, np.integer):
        value = _integer(raw)
        info = np.iinfo(dtype.numpy)
        if value is None or not info.min <= value <= info.max:
            raise CommandError(f"--arg {spec.name}: a value of type {spec.dtype} is a whole number in "
                               f"{info.min}..{info.max}, not '{raw}'")
        return value
    try:
        return float(raw)
    except ValueError:
        raise CommandError(f"--arg {spec.name}: a value of type {spec.dtype} is a number, not '{raw}'") from None


def parse_define(text: str) -> tuple[str, object]:
    """`NAME=VALUE` with VALUE an int, else a float, else True/False/None, else a string (quotes removed)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise CommandError(f"-D '{text}': expected NAME=VALUE, e.g. -D BLOCK=256")
    return name, parse_value(raw.strip())


def parse_value(raw: str) -> object:
    for base in (10, 0):  # 0 also reads 0x100, 0o17 and 0b101
        with contextlib.suppress(ValueError):
            return int(raw, base)
    with contextlib.suppress(ValueError):
        return float(raw)
    words = {"True": True, "False": False, "None": None}
    if raw in words:
        return words[raw]
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


GENERAL_INT = 3
"""The value of an integer scalar given only its type: neither 1 nor a multiple of 16, so the kernel compiles as
a launch with any such value compiles it, with the argument a run-time value that nothing is known about
(`metile.frontend.specialize.integer_facts`)."""


def stand_in(spec: ArgSpec):
    """A value of the requested type: a numpy array for a pointer (of `spec.value` elements when given), a Python
    or numpy scalar otherwise (`spec.value` when given; else 1.0 for floats, True for bools and `GENERAL_INT` for
    integers)."""
    from metile.ir.types import DType

    dtype = DType(spec.dtype)
    np_dtype = dtype.numpy
    if dtype is DType.BF16:
        try:
            import ml_dtypes
        except ImportError:
            raise CommandError(f"--arg {spec.name}: bf16 needs numpy's bfloat16 dtype, from the ml_dtypes package "
                               f"(pip install ml_dtypes)") from None
        np_dtype = np.dtype(ml_dtypes.bfloat16)
    if spec.pointer:
        count = STAND_IN_ELEMENTS if spec.value is None else spec.value
        try:
            return np.zeros(count, np_dtype)
        except (MemoryError, ValueError) as e:
            raise CommandError(f"--arg {spec.name}: cannot allocate {count} elements of {spec.dtype} "
                               f"({type(e).__name__})") from None
    value = spec.value
    if value is None:
        value = GENERAL_INT if np.issubdtype(np_dtype, np.integer) else 1
    if dtype is DType.I32:
        return int(value)
    if dtype is DType.F32:
        return float(value)
    return np_dtype.type(value)


@contextlib.contextmanager
def imported(path: Path) -> Iterator[object]:
    """The module of `path`, importable by its siblings while the block runs and forgotten afterwards."""
    name = _MODULE_PREFIX + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CommandError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # any failure of the user's module is reported, not raised
            raise import_failure(path, e) from None
        yield module
    finally:
        if sys.modules.get(name) is module:
            del sys.modules[name]
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def import_failure(path: Path, e: Exception) -> CommandError:
    """What went wrong while importing `path`, at the innermost line of that file when there is one."""
    from metile.ir.errors import Loc, MetileError, render_diagnostic

    if isinstance(e, MetileError) and e.loc is not None:
        return CommandError(str(e), located=True)
    if isinstance(e, SyntaxError) and e.lineno:
        loc = Loc(e.filename or str(path), e.lineno, max((e.offset or 1) - 1, 0))
        return CommandError(render_diagnostic(f"cannot import {path}: {e.msg}", loc), located=True)
    what = f"importing {path}: {e.message}" if isinstance(e, MetileError) else (
        f"importing {path} raised {type(e).__name__}: {e}")
    here = path.resolve()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename and Path(f.filename).resolve() == here]
    if not frames:
        return CommandError(what)
    f = frames[-1]
    loc = Loc(f.filename, f.lineno or 1, getattr(f, "colno", None) or 0)
    return CommandError(render_diagnostic(what, loc), located=True)


def find_kernel(module, name: str | None, path: Path):
    """The `@metile.kernel` named `name` (dotted names reach into attributes), or the file's only kernel."""
    from metile.kernel import JITKernel

    kernels = sorted(k for k, v in vars(module).items() if isinstance(v, JITKernel))
    if name is None:
        if len(kernels) == 1:
            return getattr(module, kernels[0])
        found = f"it defines {', '.join(kernels)}" if kernels else "it defines no @metile.kernel"
        raise CommandError(f"{path}: name the kernel as {path}:KERNEL ({found})")
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            close = difflib.get_close_matches(name, kernels, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else (
                f" (kernels: {', '.join(kernels)})" if kernels else " (it defines no @metile.kernel)")
            raise CommandError(f"{path} has no kernel named '{name}'{hint}")
        obj = getattr(obj, part)
    if not isinstance(obj, JITKernel):
        kind = "a plain function: decorate it with @metile.kernel" if inspect.isfunction(obj) else (
            f"a value of type {type(obj).__name__}")
        raise CommandError(f"'{name}' in {path} is not a @metile.kernel ({kind})")
    return obj


def bind(kernel, specs: list[ArgSpec], defines: list[tuple[str, object]], make=None) -> tuple[list, dict]:
    """The positional arguments (in parameter order) and the keyword constexprs and options; `make(spec)` builds
    each runtime argument (`stand_in` unless given)."""
    make = make or stand_in
    params = kernel.source.specs  # parsing the source may raise a located kernel error
    runtime = [p.name for p in params if not p.constexpr]
    consts = {p.name for p in params if p.constexpr}
    defaults = {n for n, p in inspect.signature(kernel.fn).parameters.items() if p.default is not p.empty}
    kname = kernel.__name__
    given: dict[str, ArgSpec] = {}
    for s in specs:
        if s.name in given:
            raise CommandError(f"--arg {s.name} is given twice")
        if s.name in consts:
            raise CommandError(f"'{s.name}' is a constexpr parameter of {kname}: give its value with -D {s.name}=VALUE")
        if s.name not in runtime:
            raise CommandError(f"{kname} has no runtime parameter '{s.name}' (runtime parameters: "
                               f"{', '.join(runtime) or 'none'})")
        given[s.name] = s
    keywords: dict[str, object] = {}
    for n, v in defines:
        if n in keywords:
            raise CommandError(f"-D {n} is given twice")
        if n in runtime:
            raise CommandError(f"'{n}' is a runtime parameter of {kname}: give its type with --arg {n}=TYPE")
        keywords[n] = v
    missing = [n for n in runtime if n not in given and n not in defaults]
    if missing:
        raise CommandError(f"missing --arg for {', '.join(missing)} (runtime parameters of {kname}: "
                           f"{', '.join(runtime)}), e.g. --arg {missing[0]}=f32* or --arg {missing[0]}=i32")
    missing = [n for n in sorted(consts) if n not in keywords and n not in defaults]
    if missing:
        raise CommandError(f"missing -D for the constexpr {', '.join(missing)} of {kname}, "
                           f"e.g. -D {missing[0]}=256")
    args = []
    for n in runtime:
        if n not in given:  # a runtime parameter with a default: the rest go by keyword
            break
        args.append(make(given[n]))
    keywords.update({n: make(s) for n, s in given.items() if runtime.index(n) >= len(args)})
    return args, keywords


def compile_stages(kernel, args: list, keywords: dict, *, on_device: bool) -> Stages:
    """Trace, lower and emit; with `on_device`, through `kernel.compile` (which also compiles the MSL on the
    default device), else through the same public steps it takes: `trace`, the kernel's pipeline
    (`DEFAULT_PIPELINE` unless the kernel names another), `emit_msl`."""
    if on_device:
        c = kernel.compile(*args, **keywords)
        return Stages(c.tile_ir, c.metal_ir, c.msl)
    from metile.emit.msl import emit_msl
    from metile.frontend.errors import LoweringUnavailableError
    from metile.rewrite.errors import UnsupportedConstructError
    from metile.rewrite.pipeline import DEFAULT_PIPELINE
    from metile.rewrite.pipeline import run as run_pipeline

    tile_ir = kernel.trace(*args, **keywords)
    try:
        metal_ir = run_pipeline(getattr(kernel, "pipeline", DEFAULT_PIPELINE), tile_ir)
    except UnsupportedConstructError as e:
        raise LoweringUnavailableError(f"cannot compile {kernel.__name__}: {e.message}", e.loc) from e
    return Stages(tile_ir, metal_ir, emit_msl(metal_ir))


def write(stages: Stages, name: str, args: argparse.Namespace) -> None:
    """The requested stages to stdout, each under a `//` header, and the MSL to stdout or `-o FILE`."""
    from metile.ir.printer import pretty

    parts = []
    if args.tile_ir:
        parts.append(f"// Tile IR of {name} (traced)\n{pretty(stages.tile_ir).rstrip()}\n")
    if args.metal_ir:
        parts.append(f"// Metal IR of {name} (after the lowering pipeline)\n{pretty(stages.metal_ir).rstrip()}\n")
    msl = stages.msl if stages.msl.endswith("\n") else stages.msl + "\n"
    if args.output:
        try:
            Path(args.output).write_text(msl)
        except OSError as e:
            raise CommandError(f"cannot write {args.output}: {e.strerror or e}") from None
    else:
        parts.append(f"// MSL of {name}\n{msl}" if parts else msl)
    sys.stdout.write("\n".join(parts))


__all__ = ["GENERAL_INT", "ArgSpec", "CommandError", "Stages", "add_parser", "bind", "compile_stages", "find_kernel",
           "imported", "parse_arg", "parse_define", "parse_target", "parse_value", "run", "scalar_value", "stand_in"]
