"""A table of Apple-silicon GPUs (M1 to M5) for the performance model, each figure with its public source.

The model's bound turns counts from the CPU device into lower bounds on run time: compute-bound (FLOPs over peak
FLOP/s), device-memory-bound (bytes over peak bandwidth) and threadgroup-memory-bound. A lower bound stays a
lower bound when a peak is overstated and becomes wrong when a peak is understated, so where sources disagree
or a figure is unknown this table leans towards the higher peak and says so. Every figure taken on weaker
evidence than a vendor statement or a public measurement is named in the row's ``assumed`` field.

Units are SI: hertz, FLOP/s, bytes and bytes/s (1 GB/s = 1e9 bytes/s; cache and threadgroup-memory sizes are
binary, 1 MiB = 2**20 bytes, as their vendors mean them).

Sources (the ``source`` field of a row names them by these keys):

- ``apple``: Apple's newsroom announcements of each chip (M1 Nov 2020; M1 Pro/Max Oct 2021; M1 Ultra Mar 2022;
  M2 Jun 2022; M2 Pro/Max Jan 2023; M2 Ultra Jun 2023; M3/M3 Pro/M3 Max Oct 2023; M4 May 2024; M4 Pro/Max
  Oct 2024; M3 Ultra Mar 2025; M5 Oct 2025; M5 Pro/Max Mar 2026): GPU core counts and unified-memory
  bandwidth. When asked why the 2025 Mac Studio got an M3 Ultra rather than an M4 Ultra, Apple said not every
  generation gets an Ultra (as reported in Mar 2025); no M4 Ultra or M5 Ultra has been announced.
- ``metal-features``: Apple, "Metal Feature Set Tables" (developer.apple.com/metal/Metal-Feature-Set-Tables.pdf):
  32 KB maximum total threadgroup memory allocation and a SIMD-group (thread execution width) of 32 on every
  Apple-silicon GPU family (Apple7 and later).
- ``metal-benchmarks``: Philip Turner, github.com/philipturner/metal-benchmarks, README "Overview" table (GPU
  clock, cores, GOPS, L2 and L3/SLC sizes for M1, M1 Pro/Max/Ultra, M2, M2 Pro/Max) and "On-Chip Memory" table
  (per-core threadgroup-memory banks, bank size and bandwidth for Apple 7/8), "Operations per Second" table
  (256 FP32 and 256 FP16 FLOPs per core per clock from M1/A15 on; simdgroup_matrix FFMA16 measured at 102.5
  per core per clock).
- ``applegpuinfo``: Philip Turner, github.com/philipturner/applegpuinfo, Sources/AppleGPUInfo/AppleGPUInfo.swift
  (the same M1/M2 clocks; SLC 8/24/48/96 MB by tier; FLOPS = cores x 128 x 2 x clock).
- ``wikipedia``: Wikipedia, "Apple M1", "Apple M2", "Apple M3", "Apple M4", "Apple M5": memory type, transfer
  rate and bus width (M3: 8, 12 and 32 16-bit memory controllers for M3, M3 Pro and M3 Max; M4: LPDDR5X-7500,
  M4 Pro/Max LPDDR5X-8533), SLC sizes of the M1 family, binned core counts, and the FP32 peaks Apple gave
  for the M1 (2.6 TFLOPS), M1 Max (10.4) and M1 Ultra (21).
- ``eclecticlight``: Howard Oakley, The Eclectic Light Company, "M4 Pro full on: when CPU and GPU draw over
  50 W..." (22 Jan 2025): powermetrics shows the M4 Pro GPU at its maximum frequency of 1,578 MHz.
- ``m5-roofline``: "Apple M5 GPU Roofline Analysis", michaelstinkerings.org (2026): an M5 (10-core GPU,
  LPDDR5X-9600) measured at 3,760 GFLOPS FP32 with the GPU at 1,578 MHz (93% of the peak this table gives).
- ``m5-tensor``: the Neural Accelerators of the M5 family through Metal 4 tensor ops, from published GEMM times
  (benchmarks/calibration/measurements.toml): an M5 Max bf16 4096^3 GEMM with MLX's NAX kernels in 2.4-2.6 ms
  (53-57 TFLOP/s; about 9 ms with them gated out), github.com/ml-explore/mlx pull 3838; an M5 bf16 1280^3 GEMM at
  7.6 TFLOP/s through MPS, github.com/ml-explore/mlx issue 3196; meTile's fp16 tensor_ops GEMM on an M5 at 13.3
  TFLOP/s, 5.2x its simdgroup_matrix GEMM.
- ``hmc-tech``: hmc-tech.com GPU spec database (M3 and M3 Max at 1,398 MHz; M4 listed at 1,470 and at
  1,578 MHz, M4 Max at 1,678 MHz, M5 at 1,740 MHz; M5 FP16 at twice FP32). A spec aggregator, not a
  measurement: used only where nothing better was found, and every use is marked ``assumed``.
- ``m3-clock``: two spec aggregators that give the M3 family's GPU 1.6 GHz where hmc-tech gives 1.398 GHz:
  radargit.com ("Apple M3 Max GPU 40-core benchmark and specs", Mar 2025: boost 1,600 MHz, 16.4 TFLOPS FP32) and
  the hardware table of github.com/huggingface/huggingface.js (pull 1044, packages/tasks/src/hardware.ts: 4.1
  TFLOPS FP32 for the 10-core M3, which is 1.60 GHz at 256 FLOPs per core per clock). Neither is a measurement;
  benchmarks/calibration/chips.toml records the disagreement.
- ``powermetrics``: the top GPU state macOS's powermetrics lists, a measurement on the machine: 1,380 MHz on an
  M3 Max (github.com/philipturner/applegpuinfo issue 4; German Wikipedia's "Apple M3 Max" gives 1.38 GHz) and on
  an M3 Pro, 1,338 MHz on fanless M3 MacBook Airs (applegpuinfo issue 15), 1,578 MHz on an M4 Max Mac Studio
  (the swift-soc-metrics library's notes on validating against powermetrics: "GPU freq exact (1578 = 1578 MHz
  loaded)") and at the top of the 15 states in github.com/BinSquare/powermetrics-go's sample output, 1,470 MHz on
  an M4 MacBook Air, 1,620 MHz held under load on an M5 Max (github.com/feedback-assistant/reports issue 830;
  techolam.com's M5 Pro and M5 Max launch coverage gives both 1.62 GHz).
- ``tg-banks``: threadgroup-memory banking. metal-benchmarks' README (the revision with the "On-Chip Memory"
  table) gives Apple 7/8 16 banks of 4 bytes and 64 B/clock per core; a later revision, as quoted by others, shows
  those cells as "TBD". A microbenchmark by the user "leman" on techboards.net ("The mystery of Apple M3 on-chip
  shared memory", Dec 2023, known here only from quotations) found M1 to behave as 32 independent 4-byte banks and
  M3 not to follow a simple bank model. No Apple document found gives a bank layout. This table counts conflicts over 32
  banks of 4 bytes (the measurement, and the usual GPU layout) and takes 128 B/clock per core (one 4-byte word per
  bank per clock), which is twice metal-benchmarks' 64 B/clock: an assumption, chosen because the higher figure
  keeps the threadgroup-memory bound a lower bound under either reading; with 64 B/clock that bound doubles.
  From M3 on (Apple 9 and later) the table takes 256 B/clock per core (assumed): meTile's probe measured 3361 GB/s
  of threadgroup-memory reads on a 10-core M5 (193 B per core per clock at 1.74 GHz, more than 128 B), and no
  figure for M3 or M4 was found, so they take the same higher figure.
- ``slc``: the System Level Cache (last-level cache) sizes. M1 and M2 families: 8, 24, 48 and 96 MB by tier in
  metal-benchmarks' L3 column and applegpuinfo (which states them for generations 1 and 2), the M1 family's 8-96 MB
  in The Eclectic Light Company's "Apple silicon: 5 Memory and internal storage" (2024-03-06), the M2's 8 MB in
  Wikipedia's "Apple M2" and the M2 Max's 48 MB (printed "49 MB") on notebookcheck; the Ultras are two Max dies.
  After M2 Apple states no size and no review or die-shot analysis found gives one, except German Wikipedia's "Apple
  M3 Max" (48 MB, the table's value; a spec aggregator, versusmars, lists 32 MB as "L3", the size of that chip's
  performance-core L2) and the same aggregator's 24 MB for the M4 Pro. applegpuinfo gives every later chip the
  M1/M2 tier sizes through a fallback, not as a figure for it. So the M3, M4 and M5 rows carry the tier sizes over
  and mark ``last_level_cache`` assumed. meTile's working-set sweep on an M5 reads 16 MiB at 2453 GB/s and 32 MiB at
  1795 GB/s (DRAM streams at 120.6), so the level serving its GPU holds more than the 8 MiB taken here; a larger
  cache only lowers the device bound, so the smaller figure keeps it a bound. benchmarks/calibration/chips.toml
  lists each address and ``python benchmarks/calibrate.py --cache`` measures how much the calibration rests on the
  figures no two sources give (docs/performance.md).

Derivations (checked by tests/test_gpu_table.py):

- ``fp32_flops = gpu_cores * 128 ALUs * 2 (an FMA counts two FLOPs) * clock`` (Apple: 128 ALUs per GPU core;
  metal-benchmarks: 256 FP32 FLOPs per core per clock). They match metal-benchmarks' GOPS32 column and, within
  2.1%, the M1, M1 Max and M1 Ultra peaks quoted by wikipedia.
- ``fp16_flops``: the same 256 per core per clock through M4 (metal-benchmarks: FP16 is no faster than FP32 on
  the shader ALUs from M1/A15 on); M5 512 per core per clock (hmc-tech; assumed, higher peak kept).
- ``fp16_matrix_flops``: the peak of the fastest matrix path. Through M4 simdgroup_matrix runs on the shader
  ALUs, so it equals ``fp16_flops`` (metal-benchmarks measured 102.5 FFMA16 = 205 FLOPs per core per clock
  achieved, 80% of 256). M5 adds a Neural Accelerator to every GPU core, which Apple says gives over 4x the M4's
  peak GPU compute for AI: taken as 4 x 256 = 1024 FLOPs per core per clock (assumed).
- Tensor ops (Metal 4 ``matmul2d``): ``tensor_fp16_flops`` (half and bfloat inputs) and ``tensor_fp32_flops``
  (float inputs, relaxed to TF32 or not) are the peaks of a ``matmul2d`` run by a simdgroup or simdgroups.
  M5 (``neural_accelerator``): the Neural Accelerators' 1024 FLOPs per core per clock for half and bfloat, the
  figure above (``m5-tensor``: measured bf16 GEMM reaches 80-86% of it on an M5 Max, and MLX's bf16 GEMM is 3.6x faster
  on them than on simdgroup_matrix); float inputs assumed at the same rate (no published float or TF32 rate was
  found: the higher peak is kept). Before M5 there is no accelerator, and a tensor op is assumed to run at the
  simdgroup_matrix rate of its inputs: ``fp16_matrix_flops`` for half, ``fp32_flops`` for bfloat and float (the
  rates the model gives simdgroup_matrix). A ``matmul2d`` at ``execution_thread`` is assumed to run on the shader
  ALUs on every chip (``fp16_flops`` for half, ``fp32_flops`` otherwise): Apple documents no accelerator use for
  one thread.
- ``memory_bandwidth = memory_bus_bits / 8 * memory_mts * 1e6``, the interface peak. Apple states the same
  figures rounded down (68.25, 100, 150, 200, 273, 400, 546, 614, 800, 819 GB/s): the interface peak is
  used because it is the true upper limit and is at most 2.4% above Apple's numbers.
- ``threadgroup_memory_bandwidth = gpu_cores * tg_bytes_per_clock_per_core * clock`` with 128 B/clock (see
  ``tg-banks``).
"""

from __future__ import annotations

import attrs

from metile.ir.errors import MetileError

KIB = 1024
MIB = 1024 * 1024

ALUS_PER_CORE = 128            # Apple: each GPU core has 128 ALUs (M1 launch; metal-benchmarks "ALU Layout")
FP32_FLOPS_PER_CORE_CLOCK = 2 * ALUS_PER_CORE     # one FMA (two FLOPs) per ALU per clock: 256
THREADGROUP_MEMORY = 32 * KIB  # metal-features: maximum total threadgroup memory allocation, every Apple7+ GPU
SIMD_WIDTH = 32                # metal-features: SIMD-group size / threadExecutionWidth on Apple GPUs
TG_BANKS = 32                  # tg-banks: conflicts counted over 32 banks ...
TG_BANK_BYTES = 4              # ... of 4 bytes each
TG_BYTES_PER_CLOCK_PER_CORE = TG_BANKS * TG_BANK_BYTES   # 128 B per core per clock, assumed (see tg-banks)
TG_BYTES_PER_CLOCK_APPLE9 = 2 * TG_BYTES_PER_CLOCK_PER_CORE   # M3 on: 256 B, assumed (see tg-banks)

FAMILIES = ("M1", "M2", "M3", "M4", "M5")
TIERS = ("base", "Pro", "Max", "Ultra")


class UnknownGpuError(MetileError):
    """A GPU name that is not in `GPUS`; the message lists the known names."""


@attrs.frozen
class GpuSpec:
    """One Apple-silicon GPU, in its largest configuration sold. ``assumed`` names the fields taken on weaker
    evidence than a vendor statement or a public measurement (see the module docstring for why each is)."""

    name: str                     # "M1", "M1 Pro", ..., "M5 Max"
    family: str                   # "M1".."M5"
    tier: str                     # "base", "Pro", "Max", "Ultra"
    gpu_cores: int                # largest configuration sold; the smaller bins are in `bins`
    bins: tuple[int, ...]         # smaller GPU-core configurations sold (empty when none is confirmed)
    clock_ghz: float              # GPU maximum clock, GHz
    fp32_flops: float             # peak FP32 FLOP/s, an FMA counted as 2 FLOPs
    fp16_flops: float             # peak FP16 FLOP/s on the shader ALUs
    fp16_matrix_flops: float      # peak FP16 FLOP/s of the fastest matrix path (simdgroup_matrix / accelerators)
    neural_accelerator: bool      # Metal 4 tensor ops run on Neural Accelerators in the GPU cores (M5 on)
    tensor_fp16_flops: float      # peak FLOP/s of a matmul2d of half or bfloat inputs (simdgroup scopes)
    tensor_fp32_flops: float      # the same for float inputs (TF32 when relaxed)
    memory_bus_bits: int          # unified-memory interface width, bits
    memory_mts: int               # memory transfer rate, MT/s
    memory_bandwidth: float       # peak device-memory bandwidth, bytes/s
    threadgroup_memory: int       # bytes one threadgroup may allocate
    simd_width: int               # threads per SIMD-group
    last_level_cache: int         # System Level Cache, bytes
    tg_bytes_per_clock_per_core: int       # threadgroup-memory bytes one GPU core serves per clock
    threadgroup_memory_bandwidth: float    # bytes/s for the whole GPU
    tg_banks: int                 # threadgroup-memory banks, for bank-conflict counting
    tg_bank_bytes: int            # width of one bank, bytes
    source: str                   # the keys of the sources of this row (module docstring)
    assumed: tuple[str, ...] = ()  # fields of this row that are assumptions, not sourced figures

    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * 1e9


# the sources most rows share (keys of the module docstring)
MEASURED_M1_M2 = "apple; metal-benchmarks; applegpuinfo; wikipedia; metal-features; tg-banks; slc"
SPEC_DATABASE = "apple; hmc-tech; m3-clock; powermetrics; wikipedia; metal-features; tg-banks; slc"
M5_FAMILY = "apple; m5-roofline; m5-tensor; hmc-tech; powermetrics; metal-features; tg-banks; slc"


def _spec(name: str, *, cores: int, bins: tuple[int, ...], clock_ghz: float, bus_bits: int, mts: int,
          slc_mib: int, source: str, fp16_per_core_clock: int = FP32_FLOPS_PER_CORE_CLOCK,
          matrix_per_core_clock: int = FP32_FLOPS_PER_CORE_CLOCK, accelerator: bool = False,
          assumed: tuple[str, ...] = ()) -> GpuSpec:
    """A row, its derived fields computed by the formulas of the module docstring."""
    family, _, tier = name.partition(" ")
    hz = clock_ghz * 1e9
    tg_per_clock = TG_BYTES_PER_CLOCK_PER_CORE if family in ("M1", "M2") else TG_BYTES_PER_CLOCK_APPLE9
    # tensor ops: on the accelerators at the matrix peak (float assumed alike), else at the simdgroup_matrix rates
    tensor_fp32 = matrix_per_core_clock if accelerator else FP32_FLOPS_PER_CORE_CLOCK
    if accelerator:
        assumed = (*assumed, "tensor_fp32_flops")
    return GpuSpec(
        name=name, family=family, tier=tier or "base", gpu_cores=cores, bins=bins, clock_ghz=clock_ghz,
        fp32_flops=cores * FP32_FLOPS_PER_CORE_CLOCK * hz,
        fp16_flops=cores * fp16_per_core_clock * hz,
        fp16_matrix_flops=cores * matrix_per_core_clock * hz,
        neural_accelerator=accelerator, tensor_fp16_flops=cores * matrix_per_core_clock * hz,
        tensor_fp32_flops=cores * tensor_fp32 * hz,
        memory_bus_bits=bus_bits, memory_mts=mts, memory_bandwidth=bus_bits / 8 * mts * 1e6,
        threadgroup_memory=THREADGROUP_MEMORY, simd_width=SIMD_WIDTH, last_level_cache=slc_mib * MIB,
        tg_bytes_per_clock_per_core=tg_per_clock,
        threadgroup_memory_bandwidth=cores * tg_per_clock * hz,
        tg_banks=TG_BANKS, tg_bank_bytes=TG_BANK_BYTES, source=source,
        assumed=("tg_bytes_per_clock_per_core", "threadgroup_memory_bandwidth", *assumed))


_M5_ASSUMED = ("fp16_flops", "fp16_matrix_flops")
_ROWS = (
    # --- M1 family (Apple 7 GPU, G13). Clocks: metal-benchmarks Overview and applegpuinfo (1.278 GHz for the
    # M1, 1.296 GHz for Pro/Max/Ultra); the 2.6/10.4/21 TFLOPS of M1/M1 Max/M1 Ultra agree within 2.1%.
    # Memory: LPDDR4X-4266 on 128 bits for the M1 (Apple: 68.25 GB/s), LPDDR5-6400 on 256/512/1024 bits for
    # Pro/Max/Ultra (Apple: 200/400/800 GB/s; wikipedia). SLC 8/24/48/96 MB (metal-benchmarks L3 column,
    # applegpuinfo, The Eclectic Light Company; slc). Bins (apple, wikipedia): 7, 14, 24 and 48 cores.
    _spec("M1", cores=8, bins=(7,), clock_ghz=1.278, bus_bits=128, mts=4266, slc_mib=8,
          source=MEASURED_M1_M2),
    _spec("M1 Pro", cores=16, bins=(14,), clock_ghz=1.296, bus_bits=256, mts=6400, slc_mib=24,
          source=MEASURED_M1_M2),
    _spec("M1 Max", cores=32, bins=(24,), clock_ghz=1.296, bus_bits=512, mts=6400, slc_mib=48,
          source=MEASURED_M1_M2),
    _spec("M1 Ultra", cores=64, bins=(48,), clock_ghz=1.296, bus_bits=1024, mts=6400, slc_mib=96,
          source=MEASURED_M1_M2),
    # --- M2 family (Apple 8 GPU, G14). Clock 1.398 GHz for M2, M2 Pro and M2 Max (metal-benchmarks Overview);
    # the M2 Ultra is two M2 Max dies and is taken to run at the same clock (no separate figure found, so
    # marked assumed). LPDDR5-6400 on 128/256/512/1024 bits (Apple:
    # 100/200/400/800 GB/s). SLC 8/24/48 MB (metal-benchmarks, applegpuinfo; the M2's 8 MB also
    # Wikipedia, the M2 Max's 48 MB notebookcheck), 96 MB for two Max dies (applegpuinfo; slc).
    # Bins (apple): 8, 16, 30 and 60 cores.
    _spec("M2", cores=10, bins=(8,), clock_ghz=1.398, bus_bits=128, mts=6400, slc_mib=8,
          source=MEASURED_M1_M2),
    _spec("M2 Pro", cores=19, bins=(16,), clock_ghz=1.398, bus_bits=256, mts=6400, slc_mib=24,
          source=MEASURED_M1_M2),
    _spec("M2 Max", cores=38, bins=(30,), clock_ghz=1.398, bus_bits=512, mts=6400, slc_mib=48,
          source=MEASURED_M1_M2),
    _spec("M2 Ultra", cores=76, bins=(60,), clock_ghz=1.398, bus_bits=1024, mts=6400, slc_mib=96,
          source=MEASURED_M1_M2,
          assumed=("clock_ghz",)),
    # --- M3 family (Apple 9 GPU, G15, Dynamic Caching). Apple publishes no clock or TFLOPS, and the aggregators
    # disagree: hmc-tech gives the M3 and the M3 Max 1.398 GHz, radargit the M3 Max 1.6 GHz and huggingface.js the
    # 10-core M3 4.1 TFLOPS (1.60 GHz) (m3-clock). As for every disagreement here, the higher figure is taken, for
    # the whole family (assumed): a lower bound stays one when a peak is overstated. LPDDR5-6400 on 8, 12
    # and 32 16-bit controllers (wikipedia): 128/192/512 bits (Apple: 100/150/400 GB/s); the M3 Ultra is two
    # M3 Max dies, 1024 bits (Apple: 819 GB/s). SLC: only the M3 Max's 48 MB has a public statement (German
    # Wikipedia; slc); the M1/M2 tier sizes are carried over for all four (8/24/48/96 MB, assumed; the M3 Pro's
    # narrower bus may come with less SLC, the larger size is kept as the model's safer side). Bins (apple): 8,
    # 14, 30 (with a 384-bit, 300 GB/s bus) and 60 cores.
    # powermetrics puts the top GPU state lower (powermetrics): 1.380 GHz on the M3 Pro and M3 Max, 1.338 GHz on
    # fanless M3 MacBook Airs. 1.6 GHz is kept: at 1.380 GHz MLX's measured 18.9 TFLOP/s bf16 GEMM on the
    # 60-core M3 Ultra (mlx issue 3196) would be 89% of the ALU peak, above the 80% simdgroup_matrix reached on
    # M1 (metal-benchmarks), and a lower bound stays one when a peak is overstated.
    _spec("M3", cores=10, bins=(8,), clock_ghz=1.6, bus_bits=128, mts=6400, slc_mib=8,
          source=SPEC_DATABASE,
          assumed=("clock_ghz", "last_level_cache")),
    _spec("M3 Pro", cores=18, bins=(14,), clock_ghz=1.6, bus_bits=192, mts=6400, slc_mib=24,
          source=SPEC_DATABASE,
          assumed=("clock_ghz", "last_level_cache")),
    _spec("M3 Max", cores=40, bins=(30,), clock_ghz=1.6, bus_bits=512, mts=6400, slc_mib=48,
          source=SPEC_DATABASE,
          assumed=("clock_ghz", "last_level_cache")),
    _spec("M3 Ultra", cores=80, bins=(60,), clock_ghz=1.6, bus_bits=1024, mts=6400, slc_mib=96,
          source=SPEC_DATABASE,
          assumed=("clock_ghz", "last_level_cache")),
    # --- M4 family (G16). Clock: 1.578 GHz measured with powermetrics on an M4 Pro (eclecticlight) and on an M4
    # Max (powermetrics). hmc-tech's 1.678 GHz for the M4 Max has no measurement behind it. A fanless M4
    # MacBook Air tops at 1.470 GHz; the higher 1.578 GHz is taken for the M4 (assumed). Memory (wikipedia, apple):
    # LPDDR5X-7500 on 128 bits (120 GB/s), LPDDR5X-8533 on 256/512 bits (273/546 GB/s). SLC: no public figure
    # beyond an aggregator's 24 MB for the M4 Pro (slc); tier sizes carried over (assumed). Bins (apple,
    # wikipedia): 8, 16 and 32 cores (the 32-core Max on a 384-bit, 410 GB/s bus). No M4 Ultra exists (apple).
    _spec("M4", cores=10, bins=(8,), clock_ghz=1.578, bus_bits=128, mts=7500, slc_mib=8,
          source="apple; eclecticlight; hmc-tech; powermetrics; wikipedia; metal-features; tg-banks; slc",
          assumed=("clock_ghz", "last_level_cache")),
    _spec("M4 Pro", cores=20, bins=(16,), clock_ghz=1.578, bus_bits=256, mts=8533, slc_mib=24,
          source="apple; eclecticlight; wikipedia; metal-features; tg-banks; slc",
          assumed=("last_level_cache",)),
    _spec("M4 Max", cores=40, bins=(32,), clock_ghz=1.578, bus_bits=512, mts=8533, slc_mib=48,
          source="apple; eclecticlight; hmc-tech; powermetrics; wikipedia; metal-features; tg-banks; slc",
          assumed=("last_level_cache",)),
    # --- M5 family (G17, a Neural Accelerator in every GPU core). Clock: 1.740 GHz (hmc-tech). An M5 measured
    # 3.76 TFLOPS FP32 with powermetrics showing 1.578 GHz (m5-roofline), but meTile's probe measured 4.1 TFLOPS
    # FP32 on an M5 (benchmarks/calibration, metile-m5-scalar-f32-peak), which needs at least 1.60 GHz at 256 FLOPs
    # per core per clock: 1.578 GHz would put the peak below a measurement, so hmc-tech's 1.740 GHz is taken
    # (assumed). Memory LPDDR5X-9600 (m5-roofline) on 128 bits for the M5 (Apple: 153 GB/s);
    # the Pro and Max bus widths are derived from Apple's 307 and 614 GB/s at 9600 MT/s (256 and 512 bits).
    # The Pro and Max run at 1.620 GHz (powermetrics on an M5 Max; launch coverage for both); the Pro's clock
    # rests on the launch coverage alone and is marked assumed. SLC: no public figure found; tier sizes carried
    # over (assumed), though meTile's working-set sweep shows more than 8 MiB serving the M5's GPU (slc). Bins: an
    # 8-core M5 is listed (hmc-tech); Pro/Max bins not confirmed. No M5 Ultra exists.
    _spec("M5", cores=10, bins=(8,), clock_ghz=1.74, bus_bits=128, mts=9600, slc_mib=8,
          source=M5_FAMILY,
          fp16_per_core_clock=512, matrix_per_core_clock=1024, accelerator=True,
          assumed=("clock_ghz", "last_level_cache", *_M5_ASSUMED)),
    _spec("M5 Pro", cores=20, bins=(), clock_ghz=1.62, bus_bits=256, mts=9600, slc_mib=24,
          source=M5_FAMILY,
          fp16_per_core_clock=512, matrix_per_core_clock=1024, accelerator=True,
          assumed=("clock_ghz", "memory_bus_bits", "last_level_cache", *_M5_ASSUMED)),
    _spec("M5 Max", cores=40, bins=(), clock_ghz=1.62, bus_bits=512, mts=9600, slc_mib=48,
          source=M5_FAMILY,
          fp16_per_core_clock=512, matrix_per_core_clock=1024, accelerator=True,
          assumed=("memory_bus_bits", "last_level_cache", *_M5_ASSUMED)),
)

GPUS: dict[str, GpuSpec] = {row.name: row for row in _ROWS}


def _key(name: str) -> str:
    return "".join(name.split()).replace("-", "").replace("_", "").lower()


_BY_KEY: dict[str, GpuSpec] = {_key(name): row for name, row in GPUS.items()}


def gpu(name: str) -> GpuSpec:
    """The row of `name`, matched case-insensitively with or without spaces ("m3max", "M3 Max"); an
    `UnknownGpuError` listing the known names for any other name."""
    row = _BY_KEY.get(_key(name)) if isinstance(name, str) else None
    if row is None:
        raise UnknownGpuError(f"unknown Apple GPU {name!r}; known GPUs: {', '.join(GPUS)}")
    return row


def binned(spec: GpuSpec, cores: int) -> GpuSpec:
    """`spec` with `cores` GPU cores (a binned part): the compute and threadgroup-memory peaks scale with the cores;
    the memory bandwidth and cache are kept (some bins have a narrower bus: the larger figure keeps bounds bounds)."""
    if not 0 < cores <= spec.gpu_cores:
        raise UnknownGpuError(f"{spec.name} has at most {spec.gpu_cores} GPU cores, not {cores}")
    f = cores / spec.gpu_cores
    return attrs.evolve(spec, name=f"{spec.name} ({cores}-core)", gpu_cores=cores, bins=(),
                        fp32_flops=spec.fp32_flops * f, fp16_flops=spec.fp16_flops * f,
                        fp16_matrix_flops=spec.fp16_matrix_flops * f, tensor_fp16_flops=spec.tensor_fp16_flops * f,
                        tensor_fp32_flops=spec.tensor_fp32_flops * f,
                        threadgroup_memory_bandwidth=spec.threadgroup_memory_bandwidth * f)
