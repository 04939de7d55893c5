"""`python -m metile opt FILE.mtir --passes=fold_constants,skip_inactive,...`: run passes on IR text and print the
result, as MLIR's `mlir-opt` does.

The file (`-` reads stdin) holds one kernel as the printer writes it (`metile.ir.pretty`; `//` starts a comment, so
the `// RUN:` lines of the goldens are read past). `--passes` is a textual pipeline of the passes of
`DEFAULT_PIPELINE`, each with its options in braces, `name{key=value,...}`
(`metile.rewrite.pipeline.parse_pipeline`), its order checked against the passes' contracts as a kernel's pipeline
is: a pass that needs a fact (the launch plan, say) runs after the pass providing it in the same pipeline. Without
`--passes` the kernel is parsed and printed again. `--verify` verifies the kernel read and the result of every pass,
naming the first pass that breaks it; `--msl` prints the MSL of the result (which must then be Metal IR) instead of
its IR; `-o FILE` writes to FILE.

Exit status: 0 on success, 2 for a mistake on the command line (a file that cannot be read, an unknown pass or
option, a pipeline whose order breaks a contract), 1 when the IR is wrong (it does not parse, fails the verifier,
a pass refuses it). Every failure prints one message to stderr, an IR error at its file and line with the line and
a caret, and no traceback.
"""

from __future__ import annotations

import argparse
import sys

PROG = "python -m metile opt"
EPILOG = """\
examples:
  python -m metile opt kernel.mtir --passes=fold_constants,skip_inactive
  python -m metile opt kernel.mtir --passes="fold_constants,skip_inactive,split_k,plan_launch" --verify
  python -m metile compile kernels.py:vec_add ... --tile-ir --no-device | python -m metile opt - --passes=...

passes (each with its options in braces, name=value, separated by commas):
  fold_constants skip_inactive group_programs split_k plan_launch vectorize_memory assign_layouts pad_staging
  serpentine_mma preload_fragments hoist_staging direct_operands multi_buffer lower_tiles
  (metile.rewrite.DEFAULT_PIPELINE, in that order; python -m metile opt FILE --passes=NAME names the others)

exit status: 0 done; 1 the IR does not parse, verify or lower; 2 a mistake on the command line."""


def add_parser(sub) -> argparse.ArgumentParser:
    """Register `opt` on the subcommand table of `python -m metile`."""
    p = sub.add_parser(
        "opt", prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        help="run passes on a kernel's IR text and print the result",
        description="Read a kernel's IR (the text metile.ir.pretty prints) from FILE (- for stdin), run the\n"
                    "passes --passes names on it and print the resulting IR (or its MSL with --msl).")
    p.add_argument("file", metavar="FILE.mtir", help="the IR text to read, - for stdin")
    p.add_argument("--passes", default="", metavar="PIPELINE",
                   help="the passes to run, e.g. fold_constants,skip_inactive; options in braces, pass{name=value} "
                        "(none: parse and print)")
    p.add_argument("--verify", action="store_true", help="verify the IR read and after every pass")
    p.add_argument("--msl", action="store_true", help="print the MSL of the result instead of its IR")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    return p


def run(args: argparse.Namespace) -> int:
    """Carry out `opt`; returns the exit status after printing any failure to stderr."""
    from metile.emit.artifact import emit_artifact
    from metile.ir.errors import MetileError
    from metile.ir.parser import parse
    from metile.ir.printer import pretty
    from metile.ir.verify import verify
    from metile.rewrite.passes import PipelineError
    from metile.rewrite.pipeline import parse_pipeline
    from metile.rewrite.pipeline import run as run_pipeline

    try:
        passes = parse_pipeline(args.passes)
    except PipelineError as e:
        return _fail(e.message, 2)
    name = "<stdin>" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()  # noqa: SIM115
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {name}: {getattr(e, 'strerror', None) or e}", 2)
    try:
        kernel = parse(text, file=name)
        if args.verify:
            verify(kernel, after="reading " + name)
        kernel = run_pipeline(passes, kernel, verify_each=args.verify)
        out = emit_artifact(kernel).msl if args.msl else pretty(kernel)
    except MetileError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
        else:
            sys.stdout.write(out)
    except OSError as e:
        return _fail(f"cannot write {args.output}: {e.strerror or e}", 2)
    return 0


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


__all__ = ["add_parser", "run"]
