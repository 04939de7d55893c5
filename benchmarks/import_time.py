"""Import time: how long `import X` takes in a fresh interpreter, for metile and each part of its compiler.

Each figure is the best of REPEATS fresh subprocesses timing `import X` with `time.perf_counter` inside the
process (interpreter start-up excluded), and beside it the best CPU time of the process over the same import
(`time.process_time`, which waiting for a core on a busy machine does not inflate). Bytecode caches are warm: the
subprocesses write and read `.pyc` files under a temporary PYTHONPYCACHEPREFIX (even when PYTHONDONTWRITEBYTECODE
is set here), after one unmeasured run that fills it, so the figures are those of an installed package and not of
compiling its source. The best run is metile's own cost; slower ones measure other load on the machine.

Beside each time: how many `metile` modules the import loaded, and whether any device module (`metile.metal`
and below) or numpy came in. Target: the compiler alone (`metile.ir`, `metile.rewrite`, `metile.emit`,
`metile.layout` together) under 0.15 s, without any device module; `import metile` loads no device module either
(its device names load on first use, the last line).

`--root OTHER_CHECKOUT` measures another checkout of metile the same way (to compare two versions in one run).

Run: python benchmarks/import_time.py [--repeats 7] [--root OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 7
COMPILER_TARGET_S = 0.15
COMPILER = ("metile.ir", "metile.rewrite", "metile.emit", "metile.layout")
TARGETS: dict[str, tuple[tuple[str, ...], bool]] = {   # label -> (modules imported, then read device names)
    "metile": (("metile",), False),
    "metile.layout": (("metile.layout",), False),
    "metile.ir": (("metile.ir",), False),
    "metile.rewrite": (("metile.rewrite",), False),
    "metile.emit": (("metile.emit",), False),
    "compiler (ir + rewrite + emit + layout)": (COMPILER, False),
    "metile, then metile.device and Buffer": (("metile",), True),
}
PROBE = """
import importlib, json, sys, time
t, c = time.perf_counter(), time.process_time()
for name in {names!r}:
    importlib.import_module(name)
if {devices!r}:
    import metile
    metile.device, metile.Buffer
took, cpu = time.perf_counter() - t, time.process_time() - c
mods = [m for m in sys.modules if m == "metile" or m.startswith("metile.")]
device = any(m.startswith("metile.metal") for m in mods)
print(json.dumps({{"s": took, "cpu": cpu, "modules": len(mods), "device": device, "numpy": "numpy" in sys.modules}}))
"""


def measure(names: tuple[str, ...], devices: bool, env: dict[str, str], root: Path) -> dict:
    """One fresh interpreter importing `names`: its times, module count and whether devices or numpy loaded."""
    code = PROBE.format(names=names, devices=devices)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="metile-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        measure(("metile", *COMPILER), True, env, root)   # fills the bytecode cache
        print(f"import time of {root}, best of {args.repeats} fresh interpreters (bytecode cached):")
        missed = False
        for label, (names, devices) in TARGETS.items():
            runs = [measure(names, devices, env, root) for _ in range(args.repeats)]
            best, cpu, last = min(r["s"] for r in runs), min(r["cpu"] for r in runs), runs[-1]
            loaded = ", ".join(n for n, key in (("devices", "device"), ("numpy", "numpy")) if last[key]) or "neither"
            line = (f"  {label:40s} {best * 1e3:7.1f} ms ({cpu * 1e3:6.1f} ms CPU)  "
                    f"{last['modules']:4d} metile modules; devices, numpy loaded: {loaded}")
            if names == COMPILER:
                ok = best < COMPILER_TARGET_S and not last["device"]
                missed |= not ok
                line += f"  (target < {COMPILER_TARGET_S * 1e3:.0f} ms, no device: {'OK' if ok else 'MISSED'})"
            print(line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
