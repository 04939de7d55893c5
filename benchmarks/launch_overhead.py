"""Launch overhead: the Python-side cost of one kernel launch, per launch path.

Metal device paths run through the cffi binding against the C stand-in for the shim (tests/metal_stub),
so they measure metile's own work (argument binding, batching, the cffi call) and not the GPU driver.
Target: <= 5 microseconds per launch with prebound arguments (the same Buffers and scalars again).

Compiler paths time `kernel[grid](...)` of an `@metile.kernel` vector add whose compiled entry is cached: the
argument specialization, the cache lookup and the binding of scalars, with a device that does nothing. The
entry is compiled normally on the default device, then its `device` field is replaced in the kernel's
compile cache by a stand-in whose `dispatch_threadgroups` only counts calls (`attrs.evolve` on the cached
`CompiledKernel`; nothing in metile is patched). The count is checked, so a change in how launches reach
their device cannot go unnoticed. Target: <= 5 microseconds per launch. Beside them, the call of a prepared
launch (`kernel[grid].prepare(...)`, whose call dispatches without any checks) on the same device (target <= 1.5
microseconds), with Buffers and with torch tensors (whose call checks that their memory has not moved), and the
same launches of the kernel autotuned over one configuration once it is chosen (target: at most 1 microsecond over
the plain launch).

CPU device paths launch the same vector add for real on the CPU device (a tiny grid, so that the runtime's own
work dominates): `kernel[grid](...)` against a prepared launch, with numpy arrays, with Buffers and with torch tensors
(a new output each launch as a library's host code makes them), copied (the default) and bound in place.
Run: python benchmarks/launch_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

LAUNCHES = 20_000
REPEATS = 5
BATCH = 100
BATCHES = 300
LAUNCH_TARGET_US = 5.0       # a cache-hit kernel[grid](...)
PREPARED_TARGET_US = 1.5     # a prepared launch's call
AUTOTUNE_EXTRA_US = 1.0      # an autotuned launch over a plain one, once its configuration is chosen


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


def metal_prepared(dev) -> float:
    """A prepared dispatch (prepare_threadgroups) of Buffers and a scalar, called again and again."""
    from metal_stub import KERNELS

    import metile

    fn = dev.compile(KERNELS, name="kernels.metal").function("add")
    bufs = [metile.Buffer.zeros(4096, device=dev) for _ in range(3)]
    run = dev.prepare_threadgroups(fn, (16, 1, 1), (256, 1, 1), [*bufs, np.uint32(4096)])
    return per_launch(run, dev.synchronize)


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


def per_launch_spread(launch: Callable[[], None], batch: int = BATCH, batches: int = BATCHES) -> tuple[float, float]:
    """(median, min) seconds per launch over `batches` timed batches of `batch` launches each."""
    for _ in range(batch):
        launch()
    times = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(batch):
            launch()
        times.append((time.perf_counter() - t) / batch)
    return statistics.median(times), min(times)


class NullDevice:
    """A device that dispatches nothing: it only counts the dispatches it is given."""

    name = "null"

    def __init__(self) -> None:
        self.dispatches = 0

    def dispatch_threadgroups(self, function, threadgroups, threads_per_threadgroup, args) -> None:
        self.dispatches += 1

    def prepare_threadgroups(self, function, threadgroups, threads_per_threadgroup, args):
        return self.count

    def count(self) -> None:
        self.dispatches += 1


def cached_vec_add(null: NullDevice, n: int):
    """An `@metile.kernel` vector add, compiled on the default device for f32 arrays, an int and BLOCK=256, whose
    cached entries then dispatch to `null`."""
    import metile

    @metile.kernel
    def vec_add(A, B, C, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        live = offs < n
        a = metile.load(A + offs, mask=live)
        b = metile.load(B + offs, mask=live)
        metile.store(C + offs, a + b, mask=live)

    vec_add.compile(*(np.zeros(n, np.float32) for _ in range(3)), n, BLOCK=256)
    for key, compiled in list(vec_add._compiled.items()):
        vec_add._compiled[key] = attrs.evolve(compiled, device=null)
    return vec_add


def compiler_launches() -> list[tuple[str, float, float]]:
    """(label, median, min) seconds per cache-hit `kernel[grid](...)` with numpy and with Buffer arguments, and,
    for reference, the full argument specialization (`kernel.cache_key`) that a first launch or `compile` does."""
    import metile

    n = 4096
    null = NullDevice()
    kernel = cached_vec_add(null, n)
    grid = (metile.cdiv(n, 256),)
    arrays = [np.zeros(n, np.float32) for _ in range(3)]
    buffers = [metile.Buffer(data=a) for a in arrays]
    launcher = kernel[grid]
    tuned = metile.autotune(configs=[metile.Config(BLOCK=256)], key=["n"])(kernel)
    tuned[grid](*arrays, n)   # chosen once (METILE_AUTOTUNE=off in main: no timing on the do-nothing device)
    tuned[grid](*buffers, n)
    cases = [
        ("kernel[grid](numpy arrays, int)", lambda: kernel[grid](*arrays, n, BLOCK=256)),
        ("kernel[grid](Buffers, int)", lambda: kernel[grid](*buffers, n, BLOCK=256)),
        ("same launcher object, Buffers, int", lambda: launcher(*buffers, n, BLOCK=256)),
        ("prepared = kernel[grid].prepare(Buffers, int); prepared()", kernel[grid].prepare(*buffers, n, BLOCK=256)),
        ("autotuned[grid](numpy arrays, int), once chosen", lambda: tuned[grid](*arrays, n)),
        ("autotuned[grid](Buffers, int), once chosen", lambda: tuned[grid](*buffers, n)),
        ("autotuned[grid].prepare(Buffers, int); prepared()", tuned[grid].prepare(*buffers, n)),
        ("for reference: kernel.cache_key(Buffers, int)", lambda: kernel.cache_key(*buffers, n, BLOCK=256)),
    ]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:   # a prepared call checks that its tensors' memory has not moved
        tensors = [torch.zeros(n) for _ in range(3)]
        cases.insert(4, ("prepared = kernel[grid].prepare(torch tensors, int); prepared()",
                         kernel[grid].prepare(*tensors, n, BLOCK=256)))
    out = []
    for label, launch in cases:
        before = null.dispatches
        med, best = per_launch_spread(launch)
        if "cache_key" not in label and null.dispatches - before != BATCH * (BATCHES + 1):
            raise RuntimeError("the launches did not reach the stand-in device: kernel.py no longer dispatches "
                               "through the cached CompiledKernel.device; update cached_vec_add")
        out.append((label, med, best))
    return out


def cpu_device_launches() -> list[tuple[str, float, float]]:
    """(label, median, min) seconds per launch of a vector add of 1024 floats run for real on the CPU device: as a
    launch and as a prepared launch, with numpy arrays and with Buffers."""
    import metile

    @metile.kernel
    def vec_add(A, B, C, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        live = offs < n
        metile.store(C + offs, metile.load(A + offs, mask=live) + metile.load(B + offs, mask=live), mask=live)

    n = 1024
    arrays = [np.ones(n, np.float32) for _ in range(3)]
    buffers = [metile.Buffer(data=a) for a in arrays]
    cases = [
        ("kernel[grid](numpy arrays, int)", lambda: vec_add[(4,)](*arrays, n, BLOCK=256)),
        ("prepared launch, numpy arrays", vec_add[(4,)].prepare(*arrays, n, BLOCK=256)),
        ("kernel[grid](Buffers, int)", lambda: vec_add[(4,)](*buffers, n, BLOCK=256)),
        ("prepared launch, Buffers", vec_add[(4,)].prepare(*buffers, n, BLOCK=256)),
    ]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        a, b = torch.ones(n), torch.ones(n)
        cases += [
            ("kernel[grid](torch tensors, new output, int)",   # copied into guarded memory (the default)
             lambda: vec_add[(4,)](a, b, torch.empty(n), n, BLOCK=256)),
            ("kernel[grid](torch tensors, new output, int, in_place=True)",
             lambda: vec_add[(4,)](a, b, torch.empty(n), n, BLOCK=256, in_place=True)),
        ]
    return [(label, *per_launch_spread(launch, batch=20, batches=100)) for label, launch in cases]


def main() -> None:
    import os

    os.environ["METILE_AUTOTUNE"] = "off"   # the do-nothing device cannot be timed: the first configuration
    with tempfile.TemporaryDirectory() as tmp:
        dev = stub_device(Path(tmp), max_batch=64)
        figures = [
            ("prebound Buffers + scalar (same list)", metal_prebound(dev), "us/launch   (target <= 5 us)"),
            ("same objects in a new list", metal_new_list(dev), "us/launch"),
            ("new scalar each launch (full check)", metal_checked_arguments(dev), "us/launch"),
            ("numpy arrays (staged, written back)", metal_numpy_arguments(dev), "us/launch"),
            ("prepared dispatch, Buffers + scalar", metal_prepared(dev), "us/launch"),
            ("synchronize after 64 launches", metal_synchronize(dev), "us"),
        ]
        for label, seconds, unit in figures:
            print(f"metal (stub shim), {label:40s} {seconds * 1e6:7.2f} {unit}")
        dev.close()
    print(f"\ncompiler, cache-hit launch of an @metile.kernel vector add on a do-nothing device "
          f"(median / min over {BATCHES} x {BATCH} launches; targets: a launch <= {LAUNCH_TARGET_US:.0f} us, a "
          f"prepared call <= {PREPARED_TARGET_US} us):")
    rows = compiler_launches()
    for label, med, best in rows:
        target = PREPARED_TARGET_US if "prepared()" in label else LAUNCH_TARGET_US
        verdict = "" if "cache_key" in label else ("OK" if med * 1e6 <= target else "OVER")
        print(f"compiler, {label:60s} {med * 1e6:7.2f} / {best * 1e6:5.2f} us/launch  {verdict}")
    by = {label: med for label, med, _ in rows}
    for kind in ("numpy arrays", "Buffers"):
        extra = by[f"autotuned[grid]({kind}, int), once chosen"] - by[f"kernel[grid]({kind}, int)"]
        print(f"compiler, autotuned minus plain launch, {kind:21s} {extra * 1e6:+7.2f} us/launch  "
              f"{'OK' if extra * 1e6 <= AUTOTUNE_EXTRA_US else 'OVER'} (target <= {AUTOTUNE_EXTRA_US:.0f} us)")
    print("\nCPU device, a vector add of 1024 floats run for real (median / min over 100 x 20 launches):")
    for label, med, best in cpu_device_launches():
        print(f"cpu, {label:47s} {med * 1e6:7.2f} / {best * 1e6:5.2f} us/launch")


if __name__ == "__main__":
    main()
