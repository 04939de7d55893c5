"""metile's kernels against Apple MLX's, judged by the Apple GPU model: both run on metile's CPU device with
`profile=`, and the counts of each dispatch become lower bounds on its run time on each GPU asked for.

Rows: GEMM (f32, f16), softmax, layer norm and attention. The metile side runs Triton's tutorial kernels as metile
ports them (`benchmarks/metile_kernels.py`); the MLX side runs MLX's own Metal kernels from the mlx-metal wheel
(steel GEMM, softmax, steel attention; layer_norm from the MLX source checkout named by METILE_MLX_SOURCE),
dispatched as MLX's host code dispatches them (`benchmarks/mlx_kernels`); when they cannot be had the MLX column
says why. A final line sets the model's M1 estimate for the original meTile GEMM beside its measured time.

Per GPU it prints the model's bound and estimate for each kernel; the default GPUs (M1, M3 Max, M5) are one of each
kind of GEMM dispatch MLX makes (small-device tile, default tile, tensor-op kernel). metile's GEMM is compiled for the
M5 for the chips with Neural Accelerators (its products then run on Metal 4 tensor ops, as MLX's do there), else for
the CPU device's own target.

Run: python benchmarks/gpu_model.py [--quick] [--gpu M1 "M3 Max" M5 ...] [--kind gemm ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks.*` from a checkout

COUNTERS_HEADER = """\
Counters of each dispatch (scaled to the whole grid when a sample was counted). Per work unit: per FLOP for GEMM
and attention, per compulsory byte (input read once, output written once) for softmax and layer norm.
  TGs x thr   threadgroups x threads each; tgKB: threadgroup memory per threadgroup
  GFLOP       simdgroup_matrix and tensor-op (matmul2d) FLOPs counted (ideal: the problem's FLOPs); MLX's GEMM
              on M5 chips is its tensor-op kernel (steel_gemm_fused_nax), as MLX picks it there
  dev/w       device bytes moved (aligned 64-byte segments) per work unit: no reuse across threadgroups | perfect
              reuse (each segment of the dispatch once)
  coal        coalescing: bytes the device instructions ask for over the bytes of the segments they touch; ld:
              the same for the loads alone
  tg/w        threadgroup-memory bytes per work unit; cnf/ins: bank-conflict passes per threadgroup-memory
              simdgroup instruction; bar/TG: threadgroup barriers per threadgroup; MMA: simdgroup
              multiply-accumulates (8x8x8); ml/MMA: simdgroup_matrix loads per multiply-accumulate"""

GPU_HEADER = """\
Per GPU (in the unit the columns name): bound = the model's lower bound (every term at the table's peaks: compute =
FLOPs / peak, device = the footprint / bandwidth less what the last-level cache holds, tg mem = threadgroup-memory
passes x 128 B / its bandwidth) and the term that sets it; estimate = the model's prediction (achieved rates,
occupancy, reuse, overlap, a dispatch cost) and its binding term. ideal = problem FLOPs / peak FLOP/s (GEMM,
attention) or compulsory bytes / bandwidth (softmax, layer norm); %peak = ideal / estimate. The kernel column names
the MLX kernel each GPU runs: the GEMM tile depends on the chip tier (MLX's GEMM_TPARAM_MACRO: 'g' base chips a
small-device tile, Pro/Max the default, Ultra a large-device one) and on M5 chips MLX runs its tensor-op kernel
(steel_gemm_fused_nax) on the Neural Accelerators."""


def _n(v: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def _time(s: float, unit: float) -> str:
    return f"{s / unit:.3g}"


def counters_row(problem, run) -> list[str]:
    p = run.profile
    t = p.totals
    la = p.launch
    w = problem.work
    coal, load_coal = t.coalescing(p.model.segment_bytes), t.load_coalescing(p.model.segment_bytes)
    mma = sum(t.simdgroup_mma.values())
    return [f"{la.threadgroups_total}x{la.threads}", f"{la.threadgroup_memory / 1024:.3g}",
            f"{t.total_flops / 1e9:.4g}", f"{p.device_traffic_per_threadgroup / w:.3g}",
            f"{p.device_traffic / w:.3g}", _pct(coal), _pct(load_coal), f"{t.threadgroup_bytes / w:.3g}",
            f"{t.bank_conflicts / t.threadgroup_instructions:.3f}" if t.threadgroup_instructions else "-",
            f"{t.barriers / p.threadgroups_total:.3g}", _n(mma),
            f"{sum(t.simdgroup_loads.values()) / mma:.3g}" if mma else "-"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def gpu_row(problem, run, spec, unit: float) -> list[str]:
    e = run.profile.estimate(spec.name)
    ideal = problem.ideal_seconds(spec)
    short = {"device memory": "device", "threadgroup memory": "tg mem"}
    return [_time(e.bound_s, unit), short.get(e.bound_binding, e.bound_binding), _time(e.estimate_s, unit),
            short.get(e.binding, e.binding), _time(ideal, unit), f"{100 * ideal / e.estimate_s:.0f}%"]


def table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first three (names) to the left, the numbers to the right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.ljust(wd) if i < 3 else c.rjust(wd) for i, (c, wd) in enumerate(zip(row, widths)))

    return "\n".join([fmt(header), "  ".join("-" * wd for wd in widths), *(fmt(r).rstrip() for r in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--gpu", nargs="+", default=["M1", "M3 Max", "M5"],
                        help="Apple GPUs to estimate for (default: one of each kind of MLX GEMM dispatch)")
    parser.add_argument("--json", metavar="FILE", help="write every row's profile and estimates to FILE")
    parser.add_argument("--kind", nargs="+", choices=("gemm", "softmax", "layer_norm", "attention"),
                        help="only the problems of these kinds")
    opts = parser.parse_args(argv)

    os.environ["METILE_DEVICE"] = "cpu"            # the profile counts on the CPU device
    import metile
    from benchmarks import gpu_model_runs as runs
    from metile.profile.gpus import UnknownGpuError, gpu

    try:
        specs = [gpu(name) for name in opts.gpu]
    except UnknownGpuError as e:
        parser.error(e.message)
    began = time.perf_counter()
    dev = metile.device("cpu")
    rows = []          # (problem, {gpu name: metile Run}, {gpu name: mlx Run})
    mlx_done: dict = {}
    metile_done: dict = {}
    for problem in runs.problems(opts.quick):
        if opts.kind and problem.kind.value not in opts.kind:
            continue
        print(f"running {problem.name} ...", file=sys.stderr, flush=True)
        mine, theirs = {}, {}
        for spec in specs:
            target = runs.metile_target(problem, spec)
            if target not in metile_done:
                metile_done[target] = _guard("metile", runs.run_metile, problem, target)
            mine[spec.name] = metile_done[target]
            key = runs.mlx_key(problem, spec)
            if key not in mlx_done:
                mlx_done[key] = _guard("mlx", runs.run_mlx, dev, problem, key[1])
            theirs[spec.name] = mlx_done[key]
        metile_done.clear()
        rows.append((problem, mine, theirs))
    reference = _guard("meTile", runs.run_reference_gemm, dev, 1024, not opts.quick)

    print(report(rows, specs, reference, runs))
    print(f"\n(this run took {time.perf_counter() - began:.0f} s on the CPU device)")
    if opts.json:
        Path(opts.json).write_text(json.dumps(to_json(rows, specs, reference, runs), indent=1))
    runs_all = [r for _, m, t in rows for r in (*m.values(), *t.values())] + [reference]
    return 1 if any(r.failed for r in runs_all) else 0


def _guard(impl: str, fn, *args):
    """A run, or a failed Run naming the exception (one broken kernel does not hide the rest of the table)."""
    from benchmarks.gpu_model_runs import Run

    start = time.perf_counter()
    try:
        return fn(*args)
    except Exception as e:  # a compile error, a fault: the row says so and the exit code is 1
        text = (str(e).strip() or type(e).__name__).splitlines()[0]
        return Run(impl, "?", None, f"ERROR {type(e).__name__}: {text}", time.perf_counter() - start, failed=True)


def _missing(run, width: int) -> list[str]:
    """The cells of a run that has no profile: why, in one word (the notes below the table say more)."""
    return ["unavailable" if run.note.startswith("unavailable") else "FAILED", *["-"] * (width - 1)]


def _distinct(theirs: dict) -> list:
    out = []
    for run in theirs.values():
        if all(run is not o for o in out):
            out.append(run)
    return out


def report(rows, specs, reference, runs) -> str:
    out = [COUNTERS_HEADER, ""]
    head = ["problem", "impl", "kernel", "TGs x thr", "tgKB", "GFLOP", "dev/w", "dev/w", "coal", "ld", "tg/w",
            "cnf/ins", "bar/TG", "MMA", "ml/MMA"]
    lines, notes = [], []
    for problem, mine, theirs in rows:
        ideal = f"{problem.flops / 1e9:.4g}" if problem.flop_bound else "-"
        dev = f"{problem.compulsory_bytes / problem.work:.3g}"
        lines.append([problem.name, "ideal", "", "", "", ideal, dev, dev, "", "", "", "", "", "", ""])
        for run in (*_distinct(mine), *_distinct(theirs)):
            where = [s.name for s in specs if (mine if run.impl == "metile" else theirs).get(s.name) is run]
            label = run.kernel + (f" ({', '.join(where)})" if len(where) < len(specs) else "")
            cells = counters_row(problem, run) if run.profile is not None else _missing(run, 12)
            lines.append(["", run.impl, label, *cells])
            notes.append(f"  {problem.name:<28} {run.impl:<6} {label}: {run.note} [{run.seconds:.1f} s]")
    head2 = ["", "", "", "", "", "", "no reuse", "reuse", "", "", "", "", "", "", ""]
    out.append(table(head, [head2, *lines]))
    out += ["", "How each dispatch ran (CPU wall time):", *notes]
    out += ["", GPU_HEADER]
    for spec in specs:
        out += ["", f"== {spec.name}: {spec.gpu_cores} GPU cores, {spec.fp32_flops / 1e12:.3g} TFLOP/s f32, "
                f"{spec.fp16_matrix_flops / 1e12:.3g} TFLOP/s f16 matrix, "
                + (f"{spec.tensor_fp16_flops / 1e12:.3g} f16 / {spec.tensor_fp32_flops / 1e12:.3g} f32 tensor-op "
                   "(Neural Accelerators), " if spec.neural_accelerator else "")
                + f"{spec.memory_bandwidth / 1e9:.4g} GB/s, "
                f"{spec.last_level_cache / 2**20:.0f} MiB last-level cache =="]
        longest = max(p.ideal_seconds(spec) for p, _, _ in rows)
        unit, name = (1e-3, "ms") if longest >= 1e-4 else (1e-6, "us")
        grows = []
        for problem, mine, theirs in rows:
            for i, run in enumerate((mine[spec.name], theirs[spec.name])):
                cells = gpu_row(problem, run, spec, unit) if run.profile is not None else _missing(run, 6)
                grows.append([problem.name if i == 0 else "", run.impl, run.kernel, *cells])
        out.append(table(["problem", "impl", "kernel", f"bound {name}", "by", f"estimate {name}", "by",
                          f"ideal {name}", "%peak"], grows))
    out += ["", calibration(reference, runs)]
    return "\n".join(out)


def calibration(reference, runs) -> str:
    if reference.profile is None:
        return f"calibration: the original meTile GEMM did not run ({reference.note})"
    e = reference.profile.estimate("M1")
    measured = runs.MEASURED_REFERENCE_M1_S
    ms = 1e-3
    return (f"calibration: the original meTile GEMM (tests/data/reference_msl/gemm_f32_64x64x32, kernel "
            f"mtile_matmul,\n  16x16 threadgroups x 128 threads) at 1024^3 f32: measured {measured / ms:.3g} ms on "
            f"an M1 in meTile's CI;\n  the model on an M1: bound {e.bound_s / ms:.3g} ms (by {e.bound_binding}), "
            f"estimate {e.estimate_s / ms:.3g} ms = {100 * e.estimate_s / measured:.0f}% of it (by {e.binding})\n"
            f"  [{reference.note}]")


def to_json(rows, specs, reference, runs) -> dict:
    from metile.profile.gpus import gpu

    def run_dict(problem, run, gpus=tuple(s.name for s in specs)):
        d = {"impl": run.impl, "kernel": run.kernel, "note": run.note, "failed": run.failed,
             "cpu_seconds": run.seconds, "profile": None, "estimates": {}}
        if run.profile is not None:
            d["profile"] = run.profile.to_dict()
            for spec in (gpu(name) for name in gpus):
                est = run.profile.estimate(spec.name).to_dict()
                if problem is not None:
                    ideal = problem.ideal_seconds(spec)
                    est.update(ideal_s=ideal, fraction_of_peak=ideal / est["bound_s"],
                               estimate_fraction_of_peak=ideal / est["estimate_s"])
                d["estimates"][spec.name] = est
        return d

    return {
        "gpus": [s.name for s in specs],
        "rows": [{"problem": p.name, "kind": p.kind.value, "dtype": p.dtype, "shape": list(p.shape),
                  "flops": p.flops, "compulsory_bytes": p.compulsory_bytes, "whole": p.whole,
                  "metile": {g: run_dict(p, r) for g, r in mine.items()},
                  "mlx": {g: run_dict(p, r) for g, r in theirs.items()}}
                 for p, mine, theirs in rows],
        "calibration": {**run_dict(None, reference, ("M1",)), "measured_m1_s": runs.MEASURED_REFERENCE_M1_S},
    }


if __name__ == "__main__":
    sys.exit(main())
