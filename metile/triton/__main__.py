"""`python -m metile.triton script.py args...`, `python -m metile.triton -m module args...` (`-m pytest ...`) and
`python -m metile.triton -c code`: run a Python program with `import triton` served by metile (`install()`)."""

from __future__ import annotations

import os
import runpy
import sys

from metile.triton.install import install

USAGE = ("usage: python -m metile.triton script.py [args...]\n"
         "       python -m metile.triton -m module [args...]\n"
         "       python -m metile.triton -c code [args...]\n"
         "runs a Python program whose `import triton` is served by metile")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    install()
    if argv[0] in ("-m", "-c"):
        if len(argv) < 2:
            print(f"python -m metile.triton: {argv[0]} needs an argument\n{USAGE}", file=sys.stderr)
            return 2
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the user's program
            return 0
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.exists(script):
        print(f"python -m metile.triton: can't open file {script!r}: no such file", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
