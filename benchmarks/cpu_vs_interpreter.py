"""The CPU device against Triton's CPU interpreter on the same Triton kernels, side by side in one run.

GEMM 512^3 (64x64x32 tiles) and row softmax 4096^2, written once in `benchmarks/triton_kernels_bench.py` against
`triton.language`, each run in a fresh process by metile (`metile.triton`, CPU device) and by Triton's interpreter
(`TRITON_INTERPRET=1`, the `triton` wheel), alternating. Prints the first call (metile's includes its compile) and
the median of the steady-state calls of each, and their ratio. Targets: the CPU device at least 10x faster than
the interpreter on GEMM and 25x on softmax.

Run: python benchmarks/cpu_vs_interpreter.py [--reps 3] [--gemm 512] [--softmax 4096]
(needs torch and the triton wheel; the interpreter takes about a minute per softmax call on two cores)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("triton_kernels_bench.py")
ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"gemm": 10.0, "softmax": 25.0}


def run(which: str, n: int, reps: int, metile: bool) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if not metile:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = [sys.executable, str(SCRIPT), which, str(n), str(reps), *(["--metile"] if metile else [])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{'metile' if metile else 'interpreter'} {which} failed:\n{out.stderr[-2000:]}")
    words = out.stdout.split()
    return {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="steady-state calls per side (default 3)")
    parser.add_argument("--gemm", type=int, default=512, help="GEMM size n (n x n x n; default 512)")
    parser.add_argument("--softmax", type=int, default=4096, help="softmax size n (n x n; default 4096)")
    opts = parser.parse_args(argv)
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: needs {' and '.join(missing)} installed (pip install torch triton)")
        return 0
    print(f"{'kernel':8s} {'size':>6s} {'metile first':>13s} {'median':>8s} {'interpreter first':>18s} {'median':>8s} "
          f"{'speed-up':>9s} {'target':>7s}  max error (metile, interpreter)")
    for which, n in (("gemm", opts.gemm), ("softmax", opts.softmax)):
        ours = run(which, n, opts.reps, True)
        theirs = run(which, n, opts.reps, False)
        ratio = theirs["median"] / ours["median"]
        verdict = "ok" if ratio >= TARGETS[which] else "UNDER"
        print(f"{which:8s} {n:6d} {ours['first']:12.3f}s {ours['median']:7.3f}s {theirs['first']:17.3f}s "
              f"{theirs['median']:7.3f}s {ratio:8.1f}x {TARGETS[which]:5.0f}x {verdict}  "
              f"({ours['error']:.2g}, {theirs['error']:.2g})")
    print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
