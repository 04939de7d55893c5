"""Liger-Kernel's RMSNorm and cross-entropy beside Apple MLX's rms_norm and logsumexp, judged by the Apple GPU model.

Liger's ops run unchanged through `metile.triton` on the CPU device, their kernels profiled from Liger's own host code
(`metile.triton.launch_options(profile=...)`); MLX's kernels are dispatched as MLX's host code dispatches them (the
cases of `benchmarks/mlx_kernels`: logsumexp from the mlx-metal wheel, rms_norm from the MLX source checkout named
by METILE_MLX_SOURCE, else "unavailable"). For each dispatch: the profiler's counters and, per GPU, the model's
lower bound with its binding resource beside the ideal time (compulsory bytes over the GPU's memory bandwidth).

The two sides do not do the same work in the cross-entropy row: Liger's forward kernel computes the loss and writes
the gradient of the logits in place (it reads each row twice, the second time from cache, and writes it once: the
backward is then a scale), where MLX's logsumexp reads the logits once and writes one value per row. Each row's
ideal is its own compulsory traffic (cross-entropy: the logits read once and written once); compare the bounds with
that in mind.

Run: python benchmarks/liger_gpu_model.py [--rows 4096] [--cols 4096] [--vocab 32000] [--gpu M1 "M3 Max"]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks.*` from a checkout

SAMPLE = 32   # threadgroups counted per dispatch


@attrs.frozen
class RowProblem:
    """A row-wise workload: its name, the bytes it must move at least, and the unit of the per-work counters."""

    name: str
    compulsory_bytes: float

    @property
    def work(self) -> float:
        return self.compulsory_bytes

    def ideal_seconds(self, spec) -> float:
        return self.compulsory_bytes / spec.memory_bandwidth


def liger_rms_norm(rows: int, cols: int):
    import torch
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    import metile.triton

    torch.manual_seed(0)
    x, w = torch.randn(rows, cols), torch.rand(cols) + 0.5
    with metile.triton.launch_options(profile=SAMPLE) as launches:
        y = LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    err = (y - want).abs().max().item()
    return launches, f"max error {err:.2g} against torch"


def liger_cross_entropy(rows: int, vocab: int):
    import torch
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    import metile.triton

    torch.manual_seed(1)
    logits, target = torch.randn(rows, vocab) * 4, torch.randint(0, vocab, (rows,))
    want = torch.nn.functional.cross_entropy(logits, target)
    with metile.triton.launch_options(profile=SAMPLE) as launches:
        loss = LigerCrossEntropyFunction.apply(logits.clone().requires_grad_(), target, None)[0]
    return launches, f"loss error {abs(loss.item() - want.item()):.2g} against torch"


def mlx_row(run, *args):
    """The profile of MLX's kernel run by `run(device, *args)` on a device that profiles it, and a note."""
    import metile
    from benchmarks.gpu_model_runs import ProfilingDevice
    from benchmarks.mlx_kernels.common import CorpusUnavailable

    pdev = ProfilingDevice(metile.device("cpu"), SAMPLE, False)
    try:
        result = run(pdev, *args)
    except CorpusUnavailable as e:
        return None, f"unavailable: {e}"
    return pdev.profiles[-1], f"max error {result.max_error:.2g} against numpy"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096, help="RMSNorm's hidden size")
    parser.add_argument("--vocab", type=int, default=32000, help="cross-entropy's vocabulary (rows: --rows / 4)")
    parser.add_argument("--gpu", nargs="+", default=["M1", "M3 Max"])
    opts = parser.parse_args(argv)
    os.environ["METILE_DEVICE"] = "cpu"
    import metile.triton

    metile.triton.install()
    from benchmarks import gpu_model
    from benchmarks.mlx_kernels.cases_reduce import run_logsumexp
    from benchmarks.mlx_kernels.cases_source import run_rms_norm
    from metile.profile.gpus import gpu

    specs = [gpu(name) for name in opts.gpu]
    rows, cols, ce_rows, vocab = opts.rows, opts.cols, max(opts.rows // 4, 1), opts.vocab
    f32 = 4
    norm = RowProblem(f"rms_norm f32 {rows}x{cols}", f32 * (2 * rows * cols + cols))
    ce = RowProblem(f"cross_entropy f32 {ce_rows}x{vocab}", f32 * 2 * ce_rows * vocab)
    lse = RowProblem(f"logsumexp f32 {ce_rows}x{vocab}", f32 * (ce_rows * vocab + ce_rows))
    entries = []   # (problem, impl, kernel, profile or None, note, seconds)
    began = time.perf_counter()
    for problem, make, args in ((norm, liger_rms_norm, (rows, cols)), (ce, liger_cross_entropy, (ce_rows, vocab))):
        start = time.perf_counter()
        launches, note = make(*args)
        for name, profile in launches:
            entries.append((problem, "liger", name, profile, note, time.perf_counter() - start))
    for problem, kernel, run, args in (
            (norm, "rms" + ("_looped" if cols > 4096 else "") + "float32", run_rms_norm,
             ("float32", rows, cols, False, 1e-5, 1e-5)),
            (lse, ("looped_" if vocab > 4096 else "block_") + "logsumexp_float32", run_logsumexp, (ce_rows, vocab))):
        start = time.perf_counter()
        profile, note = mlx_row(run, *args)
        entries.append((problem, "mlx", kernel, profile, note, time.perf_counter() - start))

    head = ["problem", "impl", "kernel", "TGs x thr", "tgKB", "GFLOP", "dev/w", "dev/w", "coal", "ld", "tg/w",
            "cnf/ins", "bar/TG", "MMA", "ml/MMA"]
    lines = [["", "", "", "", "", "", "no reuse", "reuse", "", "", "", "", "", "", ""]]
    for problem, impl, kernel, profile, _, _ in entries:
        cells = gpu_model.counters_row(problem, _Run(profile)) if profile is not None else ["unavailable", *["-"] * 11]
        lines.append([problem.name, impl, kernel, *cells])
    print(gpu_model.COUNTERS_HEADER.replace("per FLOP for GEMM\nand attention, per compulsory byte (input read once, "
                                            "output written once) for softmax and layer norm",
                                            "per compulsory byte (the problem's own, above)"))
    print()
    print(gpu_model.table(head, lines))
    print("\nHow each ran (CPU wall time of the whole op):")
    for problem, impl, kernel, _, note, seconds in entries:
        print(f"  {problem.name:<30} {impl:<6} {kernel}: {note} [{seconds:.1f} s]")
    print("\n" + gpu_model.GPU_HEADER)
    for spec in specs:
        print(f"\n== {spec.name}: {spec.memory_bandwidth / 1e9:.4g} GB/s, "
              f"{spec.last_level_cache / 2**20:.0f} MiB last-level cache ==")
        grows = []
        for problem, impl, kernel, profile, _, _ in entries:
            cells = gpu_model.gpu_row(problem, _Run(profile), spec, 1e-6) if profile is not None else (
                ["unavailable", *["-"] * 5])
            grows.append([problem.name, impl, kernel, *cells])
        print(gpu_model.table(["problem", "impl", "kernel", "bound us", "by", "estimate us", "by", "ideal us",
                               "%peak"], grows))
    print(f"\n(this run took {time.perf_counter() - began:.0f} s on the CPU device)")
    return 0


@attrs.frozen
class _Run:
    profile: object


if __name__ == "__main__":
    raise SystemExit(main())
