"""Launch overhead: the Python-side cost of one kernel launch, per launch path.

Metal device paths run through the cffi binding against the C stand-in for the shim (tests/metal_stub),
so they measure metile's own work (argument binding, batching, the cffi call) and not the GPU driver.
Target: <= 5 microseconds per launch with prebound arguments (the same Buffers and scalars again).
Run: python benchmarks/launch_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

LAUNCHES = 20_000
REPEATS = 5


def per_launch(launch: Callable[[], None], finish: Callable[[], None], n: int = LAUNCHES) -> float:
    """Seconds per launch, best of REPEATS runs of `n` launches (`finish` is not timed).

    The best run is the cost of metile's own work; slower runs measure other load on the machine.
    """
    launch()
    finish()
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(n):
            launch()
        times.append((time.perf_counter() - t) / n)
        finish()
    return min(times)


def stub_device(workdir: Path, **options):
    """A Metal device on the C stand-in of the shim (no call log, no replay: only the Python side runs)."""
    from metal_stub import FakeXcrun, build_stub

    from metile.metal.gpu.device import MetalDevice, MetalOptions

    stub = build_stub(workdir / "stub")
    stub.set_logging(False)
    stub.execute_with(None)
    dev = MetalDevice(MetalOptions(cache_dir=workdir / "cache", **options), shim=stub.shim,
                      runner=FakeXcrun(present=False))
    return dev


def metal_prebound(dev) -> float:
    """dispatch_threadgroups with the same Buffers and scalar every time (the binding table is reused)."""
    from metal_stub import KERNELS

    import metile

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    bufs = [metile.Buffer.zeros(4096, device=dev) for _ in range(3)]
    args = [*bufs, np.uint32(4096)]
    return per_launch(lambda: dev.dispatch_threadgroups(fn, (16, 1, 1), (256, 1, 1), args), dev.synchronize)


def metal_new_list(dev) -> float:
    """dispatch_threads with the same objects in a new list each time (still reuses the binding table)."""
    from metal_stub import KERNELS

    import metile

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    bufs = [metile.Buffer.zeros(4096, device=dev) for _ in range(3)]
    n = np.uint32(4096)
    return per_launch(lambda: dev.dispatch_threads(fn, 4096, 256, [*bufs, n]), dev.synchronize)


def metal_checked_arguments(dev) -> float:
    """dispatch_threads with a new scalar object each time: arguments checked against the signature anew."""
    from metal_stub import KERNELS

    import metile

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    bufs = [metile.Buffer.zeros(4096, device=dev) for _ in range(3)]
    return per_launch(lambda: dev.dispatch_threads(fn, 4096, 256, [*bufs, np.uint32(4096)]), dev.synchronize,
                      n=LAUNCHES // 4)


def metal_numpy_arguments(dev) -> float:
    """dispatch_threads with numpy arrays (staged once per synchronize, written back at synchronize)."""
    from metal_stub import KERNELS

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b, out = (np.zeros(4096, np.float32) for _ in range(3))
    return per_launch(lambda: dev.dispatch_threads(fn, 4096, 256, [a, b, out, 4096]), dev.synchronize,
                      n=LAUNCHES // 4)


def metal_synchronize(dev) -> float:
    """One synchronize() after 64 prebound launches (commit, wait, release on the stand-in)."""
    from metal_stub import KERNELS

    import metile

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    args = [*(metile.Buffer.zeros(4096, device=dev) for _ in range(3)), np.uint32(4096)]
    times = []
    for _ in range(200):
        for _ in range(64):
            dev.dispatch_threadgroups(fn, (16, 1, 1), (256, 1, 1), args)
        t = time.perf_counter()
        dev.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = stub_device(Path(tmp), max_batch=64)
        figures = [
            ("prebound Buffers + scalar (same list)", metal_prebound(dev), "us/launch   (target <= 5 us)"),
            ("same objects in a new list", metal_new_list(dev), "us/launch"),
            ("new scalar each launch (full check)", metal_checked_arguments(dev), "us/launch"),
            ("numpy arrays (staged, written back)", metal_numpy_arguments(dev), "us/launch"),
            ("synchronize after 64 launches", metal_synchronize(dev), "us"),
        ]
        for label, seconds, unit in figures:
            print(f"metal (stub shim), {label:40s} {seconds * 1e6:7.2f} {unit}")
        dev.close()


if __name__ == "__main__":
    main()
