"""`python -m metile profile FILE.py:KERNEL`: launch one `@metile.kernel` with `profile=` on the CPU device and
print what it counted (`Profile.format_summary`) with the Apple GPU estimate, or the same as JSON.

The arguments are those of `compile` (`metile.cli`, whose parsing this module shares), each runtime argument with
what a launch needs after a colon: `--arg X=f32*:1048576` is an array of that many float32 elements and
`--arg n=i32:1000` a scalar of that value. Arrays hold seeded random values (floating point in [-1, 1), integers
0 or 1, bools True or False), the same for the same `--seed` and name, so results repeat. `--grid` gives the
threadgroups (programs) of the launch. The launch always runs on `metile.device("cpu")`: `METILE_DEVICE` is set
to `cpu` while the command runs and restored afterwards.

Exit status: 0 on success, 2 for a mistake on the command line (those of `compile`, plus a missing or malformed
`--grid`, an array without an element count, a scalar without a value, an unknown GPU name), 1 when the kernel
does not compile or its launch fails (a fault such as an out-of-bounds access, reported at the kernel's line).
Every such failure prints one message to stderr and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib

import numpy as np

from metile.cli import (
    ArgSpec,
    CommandError,
    bind,
    find_kernel,
    imported,
    parse_arg,
    parse_define,
    parse_target,
    stand_in,
)

PROG = "python -m metile profile"
DEFAULT_GPU = "M1"

EPILOG = """\
arguments (--arg NAME=TYPE:VALUE; the types are those of `python -m metile compile --help`):
  X=f32*:1048576   a pointer: a numpy array of 1048576 float32 elements
  n=i32:1000       a runtime scalar of type i32 and value 1000 (f32: a float, bool: True/False/1/0)
  Arrays are filled with seeded random values: floating point in [-1, 1), integers 0 or 1, bools True or
  False (--seed N changes them). A kernel that computes indices or loop bounds from array data is safe only
  when the sizes given fit those values; an access outside an array is reported as a fault (exit status 1).

GPUs (--gpu NAME, repeatable): M1, M1 Pro, M1 Max, M1 Ultra, M2 ... M5 Max (metile.profile.gpus.GPUS); case
and spaces are ignored (--gpu m3max).

examples:
  python -m metile profile kernels.py:vec_add --grid 4096 --arg A=f32*:1048576 --arg B=f32*:1048576 \\
      --arg C=f32*:1048576 --arg n=i32:1048576 -D BLOCK=256
  python -m metile profile kernels.py:matmul --grid 32,32 ... --gpu M1 --gpu "M3 Max" --sample 8 --only-sampled
  python -m metile profile kernels.py:vec_add ... --json

The kernel runs on the CPU device (whatever METILE_DEVICE says): counts are exact for the threadgroups
counted (--sample N, default the device's 32 spread over the grid) and scaled to the whole grid.

exit status: 0 profiled; 1 the kernel does not compile or its launch fails; 2 a mistake on the command line."""


def add_parser(sub) -> argparse.ArgumentParser:
    """Register `profile` on the subcommand table of `python -m metile`."""
    p = sub.add_parser(
        "profile", prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        help="launch a @metile.kernel on the CPU device with profile= and print its counts and GPU estimate",
        description="Import FILE.py, launch its @metile.kernel KERNEL on the CPU device over --grid with arrays\n"
                    "and scalars given by --arg and constexprs given by -D, counting its memory traffic,\n"
                    "coalescing, bank conflicts and matrix work, and print the counts with a run-time estimate\n"
                    "for each --gpu. KERNEL may be left out when the file defines exactly one kernel.")
    p.add_argument("target", metavar="FILE.py[:KERNEL]", help="the Python file and the kernel's name in it")
    p.add_argument("--grid", required=True, metavar="G|GX,GY[,GZ]",
                   help="the launch's threadgroups (programs), e.g. 4096 or 32,32")
    p.add_argument("--arg", dest="args", action="append", default=[], metavar="NAME=TYPE:VALUE",
                   help="a runtime argument: X=f32*:N is an array of N elements, n=i32:1000 a scalar; repeatable")
    p.add_argument("-D", "--define", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="a constexpr value (or compiler option), e.g. -D BLOCK=256; repeatable")
    p.add_argument("--gpu", dest="gpus", action="append", default=[], metavar="NAME",
                   help=f"an Apple GPU to estimate the run time on (default {DEFAULT_GPU}); repeatable")
    p.add_argument("--sample", type=_positive, metavar="N",
                   help="threadgroups to count, spread over the grid (default: the device's, 32)")
    p.add_argument("--only-sampled", action="store_true",
                   help="run only the counted threadgroups (profile_only=True): for grids too large to run whole; "
                        "the outputs are incomplete")
    p.add_argument("--lines", type=_positive, default=12, metavar="N", help="busiest lines to show (default 12)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the arrays' random values (default 0)")
    p.add_argument("--json", action="store_true",
                   help="print Profile.to_dict() with an 'estimates' list (Estimate.to_dict() per GPU) as JSON")
    p.error = _one_line_error
    return p


def _one_line_error(message: str):
    """argparse's report of a malformed command line, as one line (the usage is in --help)."""
    print(f"{PROG}: error: {message} (see {PROG} --help)", file=sys.stderr)
    sys.exit(2)


def _positive(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return n


def run(args: argparse.Namespace) -> int:
    """Carry out `profile`; returns the exit status after printing any failure to stderr."""
    from metile.frontend.errors import GridError, KernelArgumentError
    from metile.ir.errors import MetileError

    try:
        path, name = parse_target(args.target)
        grid = parse_grid(args.grid)
        specs = [parse_launch_arg(a) for a in args.args]
        defines = [parse_define(d) for d in args.defines]
        gpus = parse_gpus(args.gpus or [DEFAULT_GPU])
        with imported(path) as module:
            kernel = find_kernel(module, name, path)
            taken = [s.name for s in kernel.source.specs if s.name in ("profile", "profile_only")]
            if taken:
                raise CommandError(f"{kernel.__name__} has a parameter named '{taken[0]}', the launch option this "
                                   f"command profiles with: rename the parameter to profile the kernel")
            call_args, consts = bind(kernel, specs, defines, lambda s: launch_value(s, args.seed))
            from metile.devices import default_device_named

            with default_device_named("cpu"):
                profile = kernel[grid](*call_args, **consts, profile=args.sample or True,
                                       profile_only=args.only_sampled)
        if not _is_profile(profile):
            raise CommandError(f"the launch of {kernel.__name__} returned no profile", status=1)
        sys.stdout.write(report(profile, gpus, args.lines, as_json=args.json) + "\n")
    except CommandError as e:
        print(e.render(PROG), file=sys.stderr)
        return e.status
    except MetileError as e:
        print(e if e.loc is not None else f"{PROG}: {e}", file=sys.stderr)
        return 2 if isinstance(e, (KernelArgumentError, GridError)) else 1
    return 0


def parse_grid(text: str) -> tuple[int, ...]:
    """`G` or `GX,GY[,GZ]`: each a whole number >= 1."""
    parts = [s.strip() for s in text.split(",")]
    dims = []
    for part in parts:
        try:
            dims.append(int(part, 0))
        except ValueError:
            dims.append(0)
    if not 1 <= len(parts) <= 3 or min(dims) < 1:
        raise CommandError(f"--grid '{text}': expected G or GX,GY[,GZ] with each a whole number >= 1, "
                           f"e.g. --grid 4096 or --grid 32,32")
    return tuple(dims)


def parse_launch_arg(text: str) -> ArgSpec:
    """`NAME=TYPE:VALUE`: `compile`'s `--arg`, whose value a launch needs: a pointer's element count or a scalar's
    value."""
    spec = parse_arg(text)
    if spec.value is not None:
        return spec
    if spec.pointer:
        raise CommandError(f"--arg {spec.name}: give the array's element count after a colon, e.g. "
                           f"--arg {spec.name}={spec.dtype}*:1048576")
    raise CommandError(f"--arg {spec.name}: give the scalar's value after a colon, e.g. "
                       f"--arg {spec.name}={spec.dtype}:{'1.0' if spec.dtype.startswith(('f', 'bf')) else '1'}")


def parse_gpus(names: list[str]) -> list[str]:
    """The GPUs' table names, each once, in the order given; an unknown name is a command-line mistake."""
    from metile.profile.gpus import UnknownGpuError, gpu

    out: list[str] = []
    for n in names:
        try:
            row = gpu(n)
        except UnknownGpuError as e:
            raise CommandError(f"--gpu: {e.message}") from None
        if row.name not in out:
            out.append(row.name)
    return out


def launch_value(spec: ArgSpec, seed: int):
    """The launch's argument for `spec`: a seeded random array of its element count, or its scalar value typed
    as `stand_in` types it (a Python int for i32, a float for f32, a numpy scalar otherwise)."""
    kind = stand_in(ArgSpec(spec.name, spec.dtype, spec.pointer))  # for its type (and bf16's check)
    if not spec.pointer:
        return type(kind)(spec.value)
    np_dtype = kind.dtype
    rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(spec.name.encode())])
    try:
        if np_dtype == np.bool_:
            return rng.integers(0, 2, spec.value, dtype=np.uint8).astype(np.bool_)
        if np.issubdtype(np_dtype, np.integer):
            return rng.integers(0, 2, spec.value, dtype=np.int64).astype(np_dtype)
        return rng.uniform(-1.0, 1.0, spec.value).astype(np.float32).astype(np_dtype)
    except (MemoryError, ValueError) as e:
        raise CommandError(f"--arg {spec.name}: cannot allocate {spec.value} elements of {spec.dtype} "
                           f"({type(e).__name__})") from None


def _is_profile(value) -> bool:
    from metile.profile.counts import Profile

    return isinstance(value, Profile)


def report(profile, gpus: list[str], lines: int, *, as_json: bool) -> str:
    """The summary for the first GPU with the estimate line of each other GPU after its own, or the JSON."""
    if as_json:
        out = profile.to_dict()
        out["estimates"] = [profile.estimate(g).to_dict() for g in gpus]
        return json.dumps(out, indent=1)
    base = profile.format_summary(gpus[0], lines).splitlines()
    if len(gpus) == 1:
        return "\n".join(base)
    others = [profile.format_summary(g, 0).splitlines() for g in gpus[1:]]
    # the GPU's estimate (its "on GPU" line and the terms line after it) is the only part that depends on the GPU
    at = next(i for i, line in enumerate(base) if line.startswith("  on ")) + 2
    added = [line for other in others for line in other[at - 2:at]]
    return "\n".join(base[:at] + added + base[at:])


__all__ = ["add_parser", "launch_value", "parse_gpus", "parse_grid", "parse_launch_arg", "report", "run"]
