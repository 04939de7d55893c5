"""CPU runtime micro-benchmarks: fiber switch cost and simd-exchange throughput (a 512^3 GEMM's worth of
8x8x8 multiply-accumulates), from the native test driver. Run: python benchmarks/cpu_runtime.py"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native" / "runtime"))
from build_driver import build_driver  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_driver(Path(tmp))
        res = subprocess.run([str(exe), "--bench"], capture_output=True, text=True, check=True)
        print("\n".join(line for line in res.stdout.splitlines() if line.startswith("BENCH")))


if __name__ == "__main__":
    main()
