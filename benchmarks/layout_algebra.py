"""Time the layout algebra on the layouts of a 64x64 GEMM tile (a script, not a test).

For each case it prints the median microseconds per call twice: *cached* (the steady state: the pure
functions are memoised, as a compiler calls them over and over with the same layouts) and *uncached*
(every cache emptied before each call, i.e. the first time a layout is seen), with the target beside them.

    python benchmarks/layout_algebra.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metile.layout import (  # noqa: E402
    Layout,
    Swizzle,
    compose,
    composition,
    divide,
    inverse,
    logical_divide,
    products,
    row_major,
    zipped_divide,
)

TARGET_US = 50.0

CACHED_FUNCTIONS = (
    compose._compose,
    compose.composition,
    inverse.complement,
    inverse.right_inverse,
    inverse.left_inverse,
    divide.logical_divide,
    divide.zipped_divide,
    divide.tiled_divide,
    divide.flat_divide,
    products.logical_product,
    products.zipped_product,
    products.tiled_product,
    products.flat_product,
    products.blocked_product,
    products.raked_product,
)


def clear_caches() -> None:
    for fn in CACHED_FUNCTIONS:
        fn.cache_clear()


def cases() -> list[tuple[str, Callable[[], object]]]:
    tile = row_major((64, 64))  # a 64x64 threadgroup tile, row-major
    tv = Layout((32, 2), (2, 1))  # 32 lanes x 2 values: lane t owns elements 2t, 2t+1
    tile8 = row_major((8, 8))
    sw_tile = composition(Swizzle(3, 2, 3), row_major((64, 32)))  # swizzled 64x32 threadgroup buffer
    return [
        ("logical_divide(64x64 row-major, (8,8))", lambda: logical_divide(tile, (8, 8))),
        ("zipped_divide(64x64 row-major, (8,8))", lambda: zipped_divide(tile, (8, 8))),
        ("zipped_divide(64x64 row-major, (32,32)) simdgroup", lambda: zipped_divide(tile, (32, 32))),
        ("composition(8x8 tile, 32 lanes x 2 values)", lambda: composition(tile8, tv)),
        ("composition(64x64 tile, (32,2):(64,1) TV)", lambda: composition(tile, Layout((32, 2), (64, 1)))),
        ("make a swizzled 64x32 layout", lambda: composition(Swizzle(3, 2, 3), row_major((64, 32)))),
        ("logical_divide(swizzled 64x32, (8,8))", lambda: logical_divide(sw_tile, (8, 8))),
        ("zipped_divide(swizzled 64x32, (32,32))", lambda: zipped_divide(sw_tile, (32, 32))),
    ]


def median_cached_us(fn: Callable[[], object], repeat: int, batch: int = 200) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter_ns() - t0) / batch)
    return statistics.median(samples) / 1000


def median_uncached_us(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat * 20):
        clear_caches()
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="samples per case (default 50)")
    args = parser.parse_args()
    rows = [
        (name, median_cached_us(fn, args.repeat), median_uncached_us(fn, args.repeat)) for name, fn in cases()
    ]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'case':<{width}}  {'cached us':>10}  {'uncached us':>12}  {'target us':>10}")
    for name, warm, cold in rows:
        flag = "ok" if max(warm, cold) < TARGET_US else "SLOW"
        print(f"{name:<{width}}  {warm:>10.2f}  {cold:>12.2f}  {TARGET_US:>10.0f}  {flag}")


if __name__ == "__main__":
    main()
