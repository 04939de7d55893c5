"""Run MLX's Metal kernels, compiled as shipped, on metile's CPU device and compare them with numpy.

Each case compiles a kernel from the mlx-metal wheel's headers (fetched once into metile's cache) or from the
MLX source checkout named by METILE_MLX_SOURCE, dispatches it as MLX's host code does and checks the output.
Prints one line per case (name, pass/FAIL/skip, max error, compile+run seconds) and finally `N/M MLX kernels
pass` (N passing of M run); the exit code is 1 when a case ran and failed.
Run: python benchmarks/mlx_corpus.py [-k SUBSTRING ...] [-v]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks.mlx_kernels` from a checkout


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    line = text.splitlines()[0]
    return f"{type(e).__name__}: {line}" if not isinstance(e, AssertionError) else line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", action="append", default=[], help="run only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print the whole error of a failing case")
    opts = parser.parse_args(argv)

    import metile
    from benchmarks.mlx_kernels import CASES, CorpusUnavailable

    dev = metile.device("cpu")
    cases = [c for c in CASES if not opts.k or any(k in c.name for k in opts.k)]
    width = max((len(c.name) for c in cases), default=10)
    passed = ran = 0
    for case in cases:
        t = time.perf_counter()
        try:
            result = case.run(dev)
        except CorpusUnavailable as e:
            print(f"{case.name:<{width}}  skip  {e}", flush=True)
            continue
        except Exception as e:  # a compile error, a fault, a mismatch: the case failed, the run goes on
            ran += 1
            print(f"{case.name:<{width}}  FAIL  {time.perf_counter() - t:6.2f} s  {_first_line(e)}", flush=True)
            if opts.v:
                traceback.print_exc()
            continue
        ran += 1
        passed += 1
        print(f"{case.name:<{width}}  pass  {time.perf_counter() - t:6.2f} s  max error {result.max_error:.3g} "
              f"(tolerance {result.tolerance:.3g})", flush=True)
    print(f"{passed}/{ran} MLX kernels pass")
    return 0 if passed == ran else 1


if __name__ == "__main__":
    sys.exit(main())
