"""Command line: `python -m metile demo` runs example kernels end to end on the default device: a tile-language
kernel (`@metile.kernel`, a fused GELU) and a hand-written MSL kernel (row softmax), each checked against numpy.
`python -m metile compile FILE.py:KERNEL ...` prints the MSL of a kernel (see `metile.cli`), and
`python -m metile profile FILE.py:KERNEL --grid G ...` launches it with `profile=` on the CPU device and prints its
counts and an Apple GPU estimate (see `metile.cli_profile`), `python -m metile opt FILE.mtir --passes=...` runs passes
on IR text and prints the result (see `metile.cli_opt`), and `python -m metile cache info|clear` shows or
empties metile's caches (compiled kernels and autotuning choices, `metile.cache`), and `python -m metile doctor`
prints what metile finds on this machine (versions, compilers, devices, caches) and runs a tiny kernel on each
device (see `metile.doctor`)."""

from __future__ import annotations

import argparse
import sys
import time

DEMO_MSL = """
#include <metal_stdlib>
using namespace metal;

kernel void softmax_rows(device const float* x [[buffer(0)]],
                         device float* y [[buffer(1)]],
                         constant uint& cols [[buffer(2)]],
                         uint row [[threadgroup_position_in_grid]],
                         uint lid [[thread_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[8];
    device const float* xr = x + row * cols;
    float m = -INFINITY;
    for (uint c = lid; c < cols; c += 256) m = max(m, xr[c]);
    m = simd_max(m);
    if (lane == 0) partial[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = partial[0];
    for (uint i = 1; i < 8; ++i) m = max(m, partial[i]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0.0f;
    for (uint c = lid; c < cols; c += 256) s += exp(xr[c] - m);
    s = simd_sum(s);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = 0.0f;
    for (uint i = 0; i < 8; ++i) s += partial[i];
    for (uint c = lid; c < cols; c += 256) y[row * cols + c] = exp(xr[c] - m) / s;
}
"""


def gelu_demo() -> bool:
    import numpy as np

    import metile

    @metile.kernel
    def add_gelu(X, Y, Out, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        live = offs < n
        x = metile.load(X + offs, mask=live) + metile.load(Y + offs, mask=live)
        inner = 0.7978845608 * (x + 0.044715 * x * x * x)
        metile.store(Out + offs, 0.5 * x * (1.0 + metile.tanh(inner)), mask=live)

    n = 100_000
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    t = time.perf_counter()
    add_gelu[(metile.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    metile.synchronize()
    took = time.perf_counter() - t
    s = (x + y).astype(np.float64)
    want = 0.5 * s * (1 + np.tanh(0.7978845608 * (s + 0.044715 * s**3)))
    err = float(np.abs(out - want).max())
    ok = err < 1e-5
    print(f"@metile.kernel add+gelu, n={n}: first launch (trace, lower, compile, run) {took:.2f} s; "
          f"max |metile - numpy| = {err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    return ok


def demo() -> int:
    import numpy as np

    import metile

    dev = metile.device()
    print(f"device: {dev.name}")
    kernel_ok = gelu_demo()
    rows, cols = 512, 1000
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros_like(x)
    t = time.perf_counter()
    fn = dev.compile(DEMO_MSL, name="softmax_rows.metal").function("softmax_rows")
    compiled = time.perf_counter() - t
    t = time.perf_counter()
    dev.dispatch_threadgroups(fn, (rows, 1, 1), (256, 1, 1), [x, y, np.uint32(cols)])
    metile.synchronize()
    ran = time.perf_counter() - t
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    err = float(np.abs(y - want).max())
    ok = err < 1e-5
    print(f"hand-written MSL row softmax {rows}x{cols}: compile {compiled:.2f} s, run {ran * 1e3:.1f} ms; "
          f"max |metile - numpy| = {err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok and kernel_ok else 1


def cache_command(action: str) -> int:
    """`cache info`: the cache directory and what each part holds; `cache clear`: remove every part."""
    from metile import cache

    root = cache.cache_root()
    if action == "clear":
        removed = cache.cache_clear(root)
        print(f"cleared {', '.join(removed) if removed else 'nothing (the cache was empty)'} in {root}")
        return 0
    print(f"metile cache: {root}")
    for part in cache.cache_info(root):
        count = f"{part.files} {'choices' if part.name == 'autotune' else 'files'}"
        print(f"  {part.name + '/':11s} {count:>13s} {part.bytes / 1e6:9.1f} MB  {part.what}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit status (argparse's own exits, `--help` included, become returns)."""
    from metile import cli, cli_opt, cli_profile

    parser = argparse.ArgumentParser(
        prog="python -m metile", description="metile: tile-language GPU kernels compiled to Metal Shading Language.",
        epilog="`python -m metile COMMAND --help` describes each command.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="run an example kernel on the default device and check it against numpy",
                   description="Run a tile-language kernel and a hand-written MSL kernel on the default device "
                               "and compare them with numpy.")
    cli.add_parser(sub)
    cli_profile.add_parser(sub)
    cli_opt.add_parser(sub)
    caches = sub.add_parser("cache", help="show or empty metile's caches (compiled kernels, autotuning choices)",
                            description="Show (info) or empty (clear) the cache directory: METILE_CACHE_DIR, else "
                                        "the platform's user cache directory for metile.")
    caches.add_argument("action", choices=("info", "clear"))
    sub.add_parser("doctor", help="print what metile finds on this machine and run a tiny kernel on each device",
                   description="Print versions, the C++ compiler, the caches and each device's properties as "
                               "`name: value` lines, then run a tile-language and a hand-written MSL kernel on "
                               "each available device and compare them with numpy. Paste the output into a bug "
                               "report. Exit status 0 when every available device passed, 1 otherwise.")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if args.command == "demo":
        return demo()
    if args.command == "profile":
        return cli_profile.run(args)
    if args.command == "opt":
        return cli_opt.run(args)
    if args.command == "cache":
        return cache_command(args.action)
    if args.command == "doctor":
        from metile import doctor

        return doctor.main()
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
