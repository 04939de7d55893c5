"""Soak test of a device, for Macs (it runs on the CPU device too): many launches, work dropped in flight, two threads.

Cases, each printed with OK or FAIL, what it checked and its timings (exit status 1 when any failed):
- launches: LAUNCHES launches of an `@metile.kernel` that adds 1 to every element of a `metile.Buffer`, on the
  default device, with `metile.synchronize()` every SYNC_EVERY launches (the running count checked each time) and
  the final count checked;
- dropped work (the Metal device only: CPU-device launches complete before they return, so nothing is ever in
  flight there): ROUNDS times, a Metal device of its own takes DROPPED launches into numpy arrays (one copied, one
  page-aligned that Metal may wrap without a copy) and into Buffers, then the device, its function and its
  Buffers are dropped unsynchronized and collected; the arrays must hold every result (the stream's finalizer
  finishes the work and writes it back). Then launches on the process's device into temporary arrays and Buffers
  dropped before `synchronize()`, beside a kept array that must be right afterwards;
- two threads: two threads launching the kernel at once on the default device, each into its own numpy array (and
  then each into its own Buffer), synchronizing every SYNC_EVERY launches; both results are checked.

The default counts are for a Mac (100k launches); `--quick` runs small ones, a smoke test of the script and the
CPU device in seconds. `--device cpu|metal` soaks that device instead of the default one.
Run: python benchmarks/soak.py [--quick] [--device cpu|metal] [--launches N] [--sync-every N]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import metile  # noqa: E402
from metile.doctor import describe  # noqa: E402

N = 16384            # elements per array: 64 KB, whole pages of 4 and 16 KB
BLOCK = 1024
PAGE = 16384         # Apple silicon's page size; page-aligned arrays are aligned to it
INC_MSL = """#include <metal_stdlib>
using namespace metal;
kernel void soak_inc(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    if (i < n) x[i] += 1.0f;
}
"""


@metile.kernel
def inc(X, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(X + offs, metile.load(X + offs, mask=live) + 1.0, mask=live)


@attrs.frozen
class Counts:
    launches: int
    sync_every: int
    rounds: int
    dropped: int
    thread_launches: int


MAC = Counts(launches=100_000, sync_every=1000, rounds=8, dropped=500, thread_launches=20_000)
QUICK = Counts(launches=2000, sync_every=100, rounds=2, dropped=50, thread_launches=500)


@attrs.frozen
class Outcome:
    ok: bool | None      # None: skipped
    detail: str


def counted(values: np.ndarray, want: int) -> str | None:
    """None when every element equals `want`, else what differs."""
    bad = np.flatnonzero(values != want)
    if bad.size == 0:
        return None
    return f"{bad.size} of {values.size} elements wrong, e.g. [{bad[0]}] = {values[bad[0]]:g}, want {want}"


def page_aligned(n: int) -> np.ndarray:
    """Zeros starting on a PAGE boundary (so that Metal may bind the array's own pages)."""
    raw = np.zeros(n + PAGE // 4, np.float32)
    start = (-raw.ctypes.data % PAGE) // 4
    return raw[start:start + n]


def launch_inc(x) -> None:
    inc[(metile.cdiv(N, BLOCK),)](x, N, BLOCK=BLOCK)


def case_launches(counts: Counts) -> Outcome:
    buf = metile.Buffer(shape=N, dtype=np.float32)
    launch_inc(buf)               # compile outside the timing
    metile.synchronize()
    buf.numpy()[:] = 0
    start = time.perf_counter()
    syncs = 0
    for i in range(1, counts.launches + 1):
        launch_inc(buf)
        if i % counts.sync_every == 0 or i == counts.launches:
            metile.synchronize()
            syncs += 1
            wrong = counted(buf.numpy(), i)
            if wrong:
                return Outcome(False, f"after {i} launches: {wrong}")
    took = time.perf_counter() - start
    return Outcome(True, f"{counts.launches} launches, {syncs} synchronize() checked, {took:.2f} s, "
                         f"{took / counts.launches * 1e6:.1f} us per launch")


def case_dropped(counts: Counts) -> Outcome:
    dev = metile.device()
    if dev.name != "metal":
        return Outcome(None, f"launches on the {dev.name} device complete before they return, so no work is ever in "
                             "flight to drop; this case applies to the metal device")
    from metile.metal.gpu.device import MetalDevice

    def launch_and_drop(arrays: list[np.ndarray]) -> weakref.ref:
        """Launches on a Metal device of its own into `arrays` and two Buffers; everything but the arrays is
        dropped, unsynchronized, on return (launches still queued or running)."""
        own = MetalDevice(dev.options)
        fn = own.compile(INC_MSL, name="soak_inc.metal").function("soak_inc")
        targets = [*arrays, metile.Buffer(shape=N, device=own), metile.Buffer(shape=N, device=own)]
        for _ in range(counts.dropped):
            for x in targets:
                own.dispatch_threadgroups(fn, groups, (256, 1, 1), [x, np.uint32(x.size)])
        return weakref.ref(own)

    start = time.perf_counter()
    groups = (metile.cdiv(N, 256), 1, 1)
    for r in range(counts.rounds):
        arrays = [np.zeros(N + 1, np.float32)[1:], page_aligned(N)]   # a copied one and one Metal may wrap
        alive = launch_and_drop(arrays)
        gc.collect()
        if alive() is not None:
            return Outcome(False, f"round {r}: the dropped Metal device was not collected")
        for name, a in zip(("copied array", "page-aligned array"), arrays):
            wrong = counted(a, counts.dropped)
            if wrong:
                return Outcome(False, f"round {r}, {name} of a dropped device: {wrong}")
    fn = dev.compile(INC_MSL, name="soak_inc.metal").function("soak_inc")
    kept = np.zeros(N, np.float32)
    for _ in range(counts.dropped):
        dev.dispatch_threadgroups(fn, groups, (256, 1, 1), [np.zeros(N, np.float32), np.uint32(N)])
        dev.dispatch_threadgroups(fn, groups, (256, 1, 1), [metile.Buffer(shape=N), np.uint32(N)])
        dev.dispatch_threadgroups(fn, groups, (256, 1, 1), [kept, np.uint32(N)])
    gc.collect()
    metile.synchronize()
    wrong = counted(kept, counts.dropped)
    if wrong:
        return Outcome(False, f"kept array beside dropped temporaries: {wrong}")
    took = time.perf_counter() - start
    return Outcome(True, f"{counts.rounds} devices dropped with {counts.dropped * 4} launches each in flight, "
                         f"{counts.dropped * 2} temporaries dropped before synchronize(), {took:.2f} s")


def case_threads(counts: Counts, make: Callable[[], object], read: Callable[[object], np.ndarray]) -> Outcome:
    targets = [make(), make()]
    barrier = threading.Barrier(2)
    errors: list[str] = []

    def work(x) -> None:
        try:
            barrier.wait()
            for i in range(1, counts.thread_launches + 1):
                launch_inc(x)
                if i % counts.sync_every == 0:
                    metile.synchronize()
            metile.synchronize()
        except Exception as e:  # noqa: BLE001 - reported as the case's failure
            errors.append(describe(e))

    launch_inc(make())            # compile outside the timing
    metile.synchronize()
    threads = [threading.Thread(target=work, args=(x,)) for x in targets]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    if errors:
        return Outcome(False, "; ".join(errors))
    for k, x in enumerate(targets):
        wrong = counted(read(x), counts.thread_launches)
        if wrong:
            return Outcome(False, f"thread {k}: {wrong}")
    total = 2 * counts.thread_launches
    return Outcome(True, f"2 x {counts.thread_launches} launches, {took:.2f} s, {took / total * 1e6:.1f} us per launch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test, e.g. on the CPU device)")
    parser.add_argument("--device", choices=("cpu", "metal"), help="the device to soak (default: the default one)")
    parser.add_argument("--launches", type=int, help="launches of the first case")
    parser.add_argument("--sync-every", type=int, help="launches between synchronize() calls")
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else MAC
    counts = attrs.evolve(counts, launches=args.launches or counts.launches,
                          sync_every=args.sync_every or counts.sync_every)
    if args.device:
        os.environ["METILE_DEVICE"] = args.device
    try:
        dev = metile.device()
    except Exception as e:  # noqa: BLE001
        print(f"device: FAIL: {describe(e)}")
        return 1
    print(f"soak on {dev!r} ({'quick' if args.quick else 'full'} counts: {counts})")
    cases = (
        ("launches", lambda: case_launches(counts)),
        ("dropped work", lambda: case_dropped(counts)),
        ("two threads, numpy arrays", lambda: case_threads(counts, lambda: np.zeros(N, np.float32), np.asarray)),
        ("two threads, Buffers", lambda: case_threads(counts, lambda: metile.Buffer(shape=N),
                                                       lambda b: b.numpy())),
    )
    failed = 0
    for name, case in cases:
        try:
            outcome = case()
        except Exception as e:  # noqa: BLE001 - a case that raises fails, and the others still run
            outcome = Outcome(False, describe(e))
        status = "skipped" if outcome.ok is None else "OK" if outcome.ok else "FAIL"
        print(f"{name}: {status}: {outcome.detail}", flush=True)
        failed += outcome.ok is False
    print(f"result: {'OK' if not failed else f'{failed} case(s) failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
