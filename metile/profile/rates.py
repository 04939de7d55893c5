"""What a kernel reaches on an Apple GPU, beside the peaks of `metile.profile.gpus`: the achieved fractions and
per-generation rates the model's `estimate` uses, the occupancy limits, and the constants fitted on the calibration
set (benchmarks/calibration). docs/performance.md ("The model") gives each figure with its sources.

The peaks in `gpus.py` make the model's `bound` (never above a measured time); the figures here make its
`estimate` (the best prediction). A figure marked FITTED was chosen on the calibration set's training entries only
(benchmarks/calibrate.py prints how the held-out entries fare).
"""

from __future__ import annotations

import attrs

from metile.profile.gpus import GpuSpec

# -- occupancy ------------------------------------------------------------------------------------------------------
# Threads one GPU core keeps resident: 1024 (a threadgroup of 1024 threads fills one core: run time steps once every
# cores x 1024 threads on an M1 Pro, measured on the macrumors forum, "Intel Alder Lake vs Apple M1" p.79; Metal's
# maxTotalThreadsPerThreadgroup is 1024 on every Apple-silicon GPU, metal-features).
THREADS_PER_CORE = 1024
# Threadgroup memory one core holds for its resident threadgroups: taken as the 32 KiB a threadgroup may allocate
# (metal-features); Apple documents no larger per-core figure, so a threadgroup of more than 16 KiB runs alone.
THREADGROUP_MEMORY_PER_CORE = 32 * 1024
# Simdgroups a core needs resident to keep issuing: one for each of the four 32-lane schedulers that make its 128
# ALUs (metal-benchmarks, "ALU Layout"). FITTED between that and two each (to cover a dependent FMA's ~4-cycle
# latency, metal-benchmarks: FFMA32 latency 3.5-3.9 cycles): meTile's GEMM keeps an M1 busy with one threadgroup of
# four simdgroups a core (2.34 ms, against a threadgroup-memory bound of 2.2 ms).
SIMDGROUPS_TO_HIDE_LATENCY = 4
# The schedulers of a core, each issuing the instructions of the simdgroups it holds (metal-benchmarks, "ALU Layout":
# four 32-lane schedulers make a core's 128 ALUs). One simdgroup a scheduler leaves nothing to issue while it waits;
# two issue in turn (model.fenced_alone).
SCHEDULERS_PER_CORE = 4
# Registers: a thread's registers come out of its core's register file, so the more a thread holds the fewer threads
# a core keeps (the profile's `registers`, estimated from the kernel's source: metile/metal/cpu/registers.py). Threads
# a core holds by the 16-bit registers a thread uses, as Metal's maxTotalThreadsPerThreadgroup reports them on an M1
# (Mesa's AGX compiler, src/asahi/compiler/agx_occupancy.c, a table "derived from studying the
# maxTotalThreadsPerThreadgroup property in Metal while varying the register usage"; Rosenzweig, "Dissecting the
# Apple M1 GPU, part III": up to 128 32-bit registers a thread, 1024 threads at the fewest and 384 at the most, so a
# register file of at least 208 KiB a core, the ~208 KB metal-benchmarks lists for Apple 7 and 8): 1024 threads up
# to 104 halves (52 registers), falling by 64 threads a step to 384 at 256 halves (128 registers). Beyond that the
# compiler spills to memory rather than run fewer threads (metal-benchmarks). M3 and later allocate registers as a
# thread uses them (Apple's Dynamic Caching: "only the exact amount of memory needed is used for each task", M3
# announcement; Apple's M3/A17 Pro GPU talk as AppleInsider reports it, 2023-11-10: no longer the peak for the
# whole run), so the peak count limits nothing there: the limit applies to REGISTER_LIMITED_FAMILIES only.
REGISTER_OCCUPANCY = ((104, 1024), (112, 896), (128, 832), (136, 768), (144, 704), (160, 640), (184, 576),
                      (208, 512), (232, 448), (256, 384))   # (most 16-bit registers a thread, threads a core)
REGISTER_LIMITED_FAMILIES = frozenset({"M1", "M2"})


def threads_for_registers(registers: int) -> int:
    """Threads a core holds when each holds `registers` 32-bit registers (REGISTER_OCCUPANCY)."""
    halves = 2 * registers
    return next((threads for most, threads in REGISTER_OCCUPANCY if halves <= most), REGISTER_OCCUPANCY[-1][1])


# -- per-generation achieved rates (the estimate) ----------------------------------------------------------------
@attrs.frozen
class Rates:
    """Achieved rates of one GPU generation, per core per clock unless named otherwise."""

    matrix_flops: float          # simdgroup_matrix FLOPs a core reaches (any input type)
    tg_bytes: float              # threadgroup-memory bytes a core moves
    tensor_fraction: float       # share of the tensor-op peak a matmul2d reaches
    dram_fraction: float         # share of the memory interface's peak a streaming kernel reaches
    cache_bytes: float           # bytes a core reads from the last-level cache (working sets that fit)


# Apple 7/8 (M1, M2): simdgroup_matrix measured at 101.7 FFMA32 and 102.5 FFMA16 per core per clock = ~205 FLOPs
# (metal-benchmarks "Operations per Second"; measurements.toml metalbench-matrix-ffma32/16). Threadgroup memory: 128 B
# per core per clock, FITTED (benchmarks/calibrate.py --fit, training entries only: the 26 it moves by more than 1%,
# MLX's GEMMs and attention on M1 to M3 and meTile's M1 GEMM, the one it binds; searched up to the table's 128 B peak,
# which it reaches); metal-benchmarks measured 64 B, but meTile's 1024^3 GEMM, bound by threadgroup memory, ran in
# 2.34 ms on an M1, which needs at least 120 B at its counted passes. Streaming copies reach 82-88% of the interface
# peak (chsasank/device-benchmarks: 56 of 68, 176 of 205 GB/s; MLX issue 3837: 680 of 819 GB/s on an M1 Ultra). The
# port from a core to the caches beyond its L1 (the cache term): 32 B per core per clock, the L2 rate Philip Turner
# gives the M1's GPU cores ("L2D 32 B" per core-cycle, forums.macrumors.com "What's the point of ARM?" page 9, read off
# Chips and Cheese's GPU cache measurements; metal-benchmarks README: a GPU core's I/O bus is 32 bytes wide, as a CPU
# core's), in place of the 128 B once set by hand on decode-attention entries some of which are held out. M3, M4: no
# separate figure; the same per-clock rates are kept (assumed).
# M5: an MLX bf16 GEMM without the Neural Accelerators reaches 15.3 TFLOP/s on an M5 Max (MLX pull 3838: 1.374e11
# FLOP in ~9 ms), 240 FLOPs per core per clock; threadgroup memory measured at 3361 GB/s on an M5 (meTile's probe: 213
# B per core per clock); STREAM copies reach 79% (michaelstinkerings m5 roofline: 122 of 153.6 GB/s) and meTile's
# read probe 120.6 GB/s; a 16 MiB working set reads at 2453 GB/s (155 B per core per clock, the M5's cache port).
# Tensor ops: 80% of the accelerators' peak, FITTED on the training entries (MLX's tensor-op GEMMs on an M5, an M5 Pro
# and an M5 Max: MLX issue 3196, pull requests 3295 and 3842); MLX pull 3838's 53-57 TFLOP/s on an M5 Max (80-86% of
# the table's peak) is held out.
_APPLE7 = Rates(matrix_flops=205.0, tg_bytes=128.0, tensor_fraction=0.8, dram_fraction=0.85, cache_bytes=32.0)
_M5 = Rates(matrix_flops=240.0, tg_bytes=200.0, tensor_fraction=0.8, dram_fraction=0.8, cache_bytes=155.0)
RATES = {"M1": _APPLE7, "M2": _APPLE7, "M3": _APPLE7, "M4": _APPLE7, "M5": _M5}


def rates(spec: GpuSpec) -> Rates:
    return RATES[spec.family]


# -- bounds beyond the peak table --------------------------------------------------------------------------------
# The last-level cache's bandwidth, for a working set a dispatch may find there: 256 B per core per clock, above the
# 155 B measured on an M5 (meTile's 16 MiB working-set read, 2453 GB/s); no figure for earlier chips was found, so
# the same (higher) figure keeps the bound a bound.
CACHE_BYTES_PER_CORE_CLOCK_BOUND = 256.0
# The shader ALUs (the ALU term): a core's four schedulers each issue one simdgroup instruction a clock, FP32 and
# integer adds, multiplies, FMAs, compares and selects alike (metal-benchmarks "Instruction Throughputs": FFMA32,
# FADD32, IADD32, ICMPSEL32 at 1 cycle on M1/A15; 4 FADD/FFMA/IADD32 mixed take 4.12 cycles, one pipeline): 128 lane
# operations per core per clock, the peak `gpus.py` gives as fp32_flops / 2. Special functions run beside them
# (Fast EXP2_32 + FMUL32 take 4.02 cycles) on a pipeline of their own: EXP2_32 and LOG2_32 at 4 cycles a simdgroup
# instruction, RECIP32 (a division's reciprocal) 6, RSQRT32 and SQRT32 8. The bound takes the fastest, 4 cycles (32
# lane operations per core per clock); the estimate the reciprocal's 6 (assumed for every generation: no later
# measurement was found). Integer operations issue on the same pipeline: the estimate times those outside subscripts,
# loop control and compile-time arithmetic at 1 cycle (IADD32, ICMPSEL32, BITWISE32), 4 for a multiply (IMUL32,
# IMAD32) and 8 for a division or remainder (IMULHI32) a simdgroup instruction (alu_counts.py; docs/performance.md).
ALU_LANES_PER_CORE_CLOCK = 128
SPECIAL_CYCLES_BOUND = 4.0
SPECIAL_CYCLES = 6.0


# -- fitted (benchmarks/calibrate.py, training entries only) -------------------------------------------------------
# `python benchmarks/calibrate.py --fit` chooses these with the two rates marked FITTED above and its own HOST_CALL_S,
# together, by coordinate descent on the mean squared log error of the training entries' estimates.
OVERLAP = 0.1                # FITTED: share of the non-binding terms that does not overlap the binding one
DISPATCH_S = 20e-6           # FITTED: a dispatch's fixed cost on the GPU (launch, first wave's ramp, drain)
