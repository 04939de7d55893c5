"""The Apple GPU model: a `Profile`'s counts over a GPU's rates give two answers, `bound` (a true lower bound on the
run time: every term at the table's peaks, `metile.profile.gpus`) and `estimate` (the best prediction: achieved
rates, `metile.profile.rates`, occupancy, reuse and overlap), each with the terms behind it and the one that binds.
docs/performance.md ("The model") documents each term and its sources.

Terms (seconds; `Term.bound_s` at the peaks, `Term.estimate_s` at achieved rates):
- matrix: simdgroup_matrix FLOPs by input type; tensor: Metal 4 matmul2d FLOPs by input type and scope.
- device memory: the bound moves the dispatch's footprint (each aligned segment once), less what the last-level
  cache may already hold, at the memory interface's peak, and no faster than the cache's peak; the estimate moves
  what a replay of the threadgroups' segment traces through an LRU of the last-level cache misses, in dispatch
  order (`device_traffic`, `metile.profile.reuse`).
- cache (estimate only): every segment the device instructions touch, re-reads included, through the cores' ports
  to the cache at its measured rate.
- ALU: the shader ALUs' float simdgroup instructions (one per lane component) and, for the estimate, the issue
  cycles of the integer operations outside subscripts and loop control (an add 1, a multiply 4, a division 8; the
  address and loop arithmetic Apple's compiler folds is counted, not timed) at 128 lane operations per core per
  clock, and special functions on their own pipeline (4 cycles a simdgroup instruction for the bound, 6 for the
  estimate); the term is the slower of the two.
- threadgroup memory: the passes of threadgroup-memory instructions (a pass serves one word per bank) x 128 B.
- dispatch: a fixed cost per dispatch (estimate only).
Occupancy (threadgroups resident per core, waves, latency hiding) scales the estimate's throughput terms; where a
scheduler holds a single simdgroup whose memory and arithmetic simdgroup barriers fence apart (`fenced_alone`), the
terms add instead of overlapping.
"""

from __future__ import annotations

import math

import attrs

from metile.profile import rates as R
from metile.profile.gpus import GpuSpec
from metile.profile.gpus import gpu as find_gpu
from metile.profile.reuse import replay

SEGMENT_PASS_BYTES = 128      # a threadgroup-memory pass moves one 4-byte word per bank, 32 banks


@attrs.frozen
class Term:
    """One resource: its lower bound and its estimate (seconds), and how they were made."""

    name: str
    bound_s: float
    estimate_s: float
    detail: str = ""


@attrs.frozen
class Occupancy:
    """How the dispatch fills the GPU: threadgroups resident per core (and what limits them), the threadgroups that
    run at once on the whole GPU, the waves they take, the share of the last wave's slots used, and the share of
    a core's issue rate its resident simdgroups keep busy (latency hiding)."""

    per_core: int
    limited_by: str
    concurrent: int
    waves: int
    wave_efficiency: float
    latency_hiding: float
    registers: int = 0      # the profile's estimated 32-bit registers a thread (0: unknown)
    register_threads: int = 0   # threads a core holds by them (0: no register limit on this GPU)
    serial: float = 0.0     # share of the non-binding terms that cannot overlap the binding one beyond OVERLAP's

    @property
    def efficiency(self) -> float:
        return self.wave_efficiency * self.latency_hiding


def occupancy(profile, spec: GpuSpec) -> Occupancy:
    """Resident threadgroups per core from its threads, threadgroup memory and registers (`metile.profile.rates`),
    then waves of cores x resident threadgroups in dispatch order."""
    la = profile.launch
    limits = {"threads": R.THREADS_PER_CORE // max(1, la.threads)}
    if la.threadgroup_memory:
        limits["threadgroup memory"] = R.THREADGROUP_MEMORY_PER_CORE // la.threadgroup_memory
    registers = profile.registers
    reg_threads = R.threads_for_registers(registers) if registers and spec.family in R.REGISTER_LIMITED_FAMILIES else 0
    if reg_threads:
        limits["registers"] = reg_threads // max(1, la.threads)
    limited_by = min(limits, key=limits.get)
    per_core = max(1, limits[limited_by])
    total = max(1, la.threadgroups_total)
    concurrent = spec.gpu_cores * per_core
    waves = math.ceil(total / concurrent)
    wave_eff = total / (waves * concurrent) if waves > 1 else 1.0
    active = min(per_core, total / spec.gpu_cores)     # threadgroups a core holds on average
    hiding = min(1.0, active * la.simdgroups_per_threadgroup / R.SIMDGROUPS_TO_HIDE_LATENCY)
    serial = fenced_alone(profile.totals, active * la.simdgroups_per_threadgroup / R.SCHEDULERS_PER_CORE)
    return Occupancy(per_core, limited_by, concurrent, waves, wave_eff, hiding, registers, reg_threads, serial)


def fenced_alone(counts, per_scheduler: float) -> float:
    """The share of a dispatch's work whose phases run one after another: a scheduler that holds one simdgroup
    (`per_scheduler`: the simdgroups each of a core's schedulers holds on average) has no other simdgroup to issue
    while that one waits, and a simdgroup barrier (`simdgroup_barrier`, what MLX puts before and after each fragment
    load of its steel attention) keeps the compiler from moving the loads of the next fragment above the
    multiply-accumulates of this one, so the simdgroup's memory and arithmetic do not overlap either. Alone is 1 at
    one simdgroup a scheduler or fewer and 0 from two on (two simdgroups issue in turn); fenced is the simdgroup
    barriers a multiply-accumulate, at most 1 (a kernel without multiply-accumulates is taken as not fenced)."""
    mma = sum(counts.simdgroup_mma.values())
    if not mma or not counts.simdgroup_barriers:
        return 0.0
    alone = _clamp(2.0 - per_scheduler)
    return alone * min(1.0, counts.simdgroup_barriers / mma)


def peak_flops(spec: GpuSpec, dtype: str) -> float:
    """The peak a simdgroup_matrix multiply of `dtype` inputs can reach."""
    return spec.fp16_matrix_flops if dtype == "half" else spec.fp32_flops


def tensor_peak_flops(spec: GpuSpec, input_type: str, thread: bool = False) -> float:
    """The peak a matmul2d of `input_type` inputs ("float", "tf32", "half", "bfloat") can reach: at
    execution_thread (`thread`) the shader ALUs', else the tensor-op peak (metile.profile.gpus, "Tensor ops")."""
    if thread:
        return spec.fp16_flops if input_type == "half" else spec.fp32_flops
    return spec.tensor_fp16_flops if input_type in ("half", "bfloat") else spec.tensor_fp32_flops


def device_traffic(profile, occ: Occupancy, cache_bytes: float) -> float:
    """Bytes device memory moves from DRAM through a last-level cache of `cache_bytes`, threadgroups running
    `occ.concurrent` at a time in dispatch order.

    With the segment trace of every threadgroup (`Profile.whole_trace`) this is a replay of the trace through an LRU
    cache (`metile.profile.reuse`): segments threadgroups share, and a threadgroup's own re-reads, move again exactly
    when the cache lost them in between. A sampled dispatch has the traces of some threadgroups only, so what they
    share is estimated from the totals: a threadgroup's live set is its segments over its steps (one per two
    barriers, or per 8 device instructions of a simdgroup, whichever is more); a segment another threadgroup touched
    is found in the cache when the live sets of the threadgroups running at once fit there, and the share of them
    beyond it is the share of shared segments moved again. Its own re-reads are the replay of each traced
    threadgroup alone through its part of the cache (`cache_bytes / running`), scaled to the dispatch; without a
    trace, its re-reads (load segments beyond its distinct ones) miss in the share of its live set beyond that part."""
    seg = profile.model.segment_bytes
    footprint = profile.device_traffic
    trace = profile.segment_trace
    if profile.whole_trace:
        moved = replay(trace, occ.concurrent, int(cache_bytes // seg)) * seg
        return moved + max(0.0, footprint - trace.distinct() * seg)   # accesses no instruction record holds
    per_tg = profile.device_traffic_per_threadgroup
    counts = profile.totals
    tgs = max(1, profile.threadgroups_total)
    running = max(1, min(occ.concurrent, tgs))
    per_simdgroup = counts.device_instructions / tgs / max(1, profile.launch.simdgroups_per_threadgroup)
    steps = max(1.0, counts.barriers / tgs / 2, per_simdgroup / 8)
    own_live = per_tg / tgs / steps
    shared_miss = _clamp(1 - cache_bytes / (running * own_live)) if own_live else 0.0
    shared = footprint + max(0.0, per_tg - footprint) * shared_miss
    if trace is not None and len(trace.threadgroups):
        share = int(cache_bytes / running // seg)
        traced = range(len(trace.threadgroups))
        again = sum(replay(trace, 1, share, [k]) - trace.distinct(k) for k in traced)
        return shared + again * seg * tgs / len(traced)
    rereads = max(0.0, counts.device_load_segments * seg - per_tg)
    own_miss = _clamp(1 - cache_bytes / running / own_live) if own_live else 0.0
    return shared + rereads * own_miss


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


@attrs.frozen
class Estimate:
    """A profiled dispatch on `gpu`: `bound_s` (no run can be faster), `estimate_s` (the prediction), the terms
    behind them and the occupancy. `seconds` is the bound; the `*_s` fields are the bound's terms."""

    gpu: GpuSpec
    terms: tuple[Term, ...]
    occupancy: Occupancy
    flops: float
    footprint_fits_cache: bool
    device_s: float               # no reuse across threadgroups, at the peak bandwidth (for comparison)
    device_reuse_s: float         # perfect reuse (the footprint) at the peak bandwidth

    @property
    def registers(self) -> int:
        """The estimated 32-bit registers a thread of the kernel holds (0: unknown); `occupancy.limited_by` is
        "registers" when they bound the threadgroups a core holds."""
        return self.occupancy.registers

    def term(self, name: str) -> Term:
        return next(t for t in self.terms if t.name == name)

    @property
    def bound_s(self) -> float:
        return max(t.bound_s for t in self.terms)

    @property
    def estimate_s(self) -> float:
        """The binding term's estimate, plus the share of the others that does not overlap it (OVERLAP, rising to all
        of them as far as the dispatch's phases run one after another: `Occupancy.serial`), plus the dispatch."""
        times = sorted((t.estimate_s for t in self.terms if t.name != "dispatch"), reverse=True)
        fixed = sum(t.estimate_s for t in self.terms if t.name == "dispatch")
        share = R.OVERLAP + (1.0 - R.OVERLAP) * self.occupancy.serial
        return fixed + times[0] + share * sum(times[1:])

    @property
    def binding(self) -> str:
        """The resource whose estimate is largest."""
        return max(self.terms, key=lambda t: t.estimate_s).name

    @property
    def bound_binding(self) -> str:
        """The resource whose bound is largest."""
        return max(self.terms, key=lambda t: t.bound_s).name

    @property
    def seconds(self) -> float:
        return self.bound_s

    @property
    def compute_s(self) -> float:
        return self.term("matrix").bound_s + self.term("tensor").bound_s

    @property
    def device_binding_s(self) -> float:
        return self.term("device memory").bound_s

    @property
    def threadgroup_s(self) -> float:
        return self.term("threadgroup memory").bound_s

    @property
    def bounds(self) -> dict[str, float]:
        return {t.name: t.bound_s for t in self.terms}

    def fraction_of_peak(self, measured_s: float) -> float:
        """The share of the binding resource's peak a run of `measured_s` seconds reaches."""
        return self.bound_s / measured_s if measured_s > 0 else 0.0

    def to_dict(self) -> dict:
        o = self.occupancy
        return {"gpu": self.gpu.name, "bound_s": self.bound_s, "estimate_s": self.estimate_s,
                "binding": self.binding, "bound_binding": self.bound_binding, "seconds": self.bound_s,
                "compute_s": self.compute_s, "device_s": self.device_s, "device_reuse_s": self.device_reuse_s,
                "threadgroup_s": self.threadgroup_s, "footprint_fits_cache": self.footprint_fits_cache,
                "flops": self.flops, "registers": self.registers,
                "terms": {t.name: {"bound_s": t.bound_s, "estimate_s": t.estimate_s, "detail": t.detail}
                          for t in self.terms},
                "occupancy": attrs.asdict(o)}


def _matrix(counts, spec: GpuSpec, rate: R.Rates, eff: float) -> Term:
    flops = counts.flops
    bound = sum(n / peak_flops(spec, d) for d, n in flops.items())
    achieved = spec.gpu_cores * rate.matrix_flops * spec.clock_hz * eff
    est = sum(flops.values()) / achieved
    return Term("matrix", bound, est, f"{sum(flops.values()):.4g} FLOPs at {rate.matrix_flops:g} per core-clock")


def _tensor(counts, spec: GpuSpec, rate: R.Rates, eff: float) -> Term:
    bound = (sum(n / tensor_peak_flops(spec, t) for t, n in counts.tensor_flops.items())
             + sum(n / tensor_peak_flops(spec, t, thread=True) for t, n in counts.tensor_thread_flops.items()))
    frac = rate.tensor_fraction if spec.neural_accelerator else rate.matrix_flops / 256
    est = (sum(n / (tensor_peak_flops(spec, t) * frac) for t, n in counts.tensor_flops.items())
           + sum(n / (tensor_peak_flops(spec, t, thread=True) * frac) for t, n in counts.tensor_thread_flops.items()))
    return Term("tensor", bound, est / eff, "matmul2d FLOPs")


def _device(profile, spec: GpuSpec, rate: R.Rates, occ: Occupancy) -> Term:
    footprint = profile.device_traffic
    llc = spec.last_level_cache
    cache_bw = spec.gpu_cores * R.CACHE_BYTES_PER_CORE_CLOCK_BOUND * spec.clock_hz
    bound = max(max(0.0, footprint - llc) / spec.memory_bandwidth, footprint / cache_bw)
    moved = device_traffic(profile, occ, llc)
    if footprint <= llc:     # the working set stays in the cache between repeated runs
        est = moved / (spec.gpu_cores * rate.cache_bytes * spec.clock_hz)
    else:
        est = moved / (spec.memory_bandwidth * rate.dram_fraction)
    return Term("device memory", bound, est / occ.latency_hiding,
                f"footprint {footprint:.4g} B, moved {moved:.4g} B")


def _cache(profile, spec: GpuSpec, rate: R.Rates, occ: Occupancy) -> Term:
    """Every segment the device instructions touch (re-reads included) comes through the core's port to the cache;
    a dispatch with tensor ops (whose operands the accelerators fetch) moves each threadgroup's segments once.
    Estimate only: a core's own L1 may serve some of them, so no bound can be drawn from it."""
    counts = profile.totals
    if counts.tensor_runs:      # the accelerators fetch tensor operands themselves: each threadgroup's segments once
        moved = profile.device_traffic_per_threadgroup
    else:
        moved = counts.device_segments * profile.model.segment_bytes
    est = moved / (spec.gpu_cores * rate.cache_bytes * spec.clock_hz * occ.latency_hiding)
    return Term("cache", 0.0, est, f"{moved:.4g} B of segments through the cores' cache ports")


def _alu(profile, spec: GpuSpec, eff: float) -> Term:
    """Simdgroup instructions of the statements run (counted once per simdgroup, a lane component each) on a core's
    four schedulers, float operations and (the estimate) the integer ones' issue cycles on the same pipeline; special
    functions on their pipeline beside them (metile.profile.rates, "The shader ALUs"). The bound leaves the integer
    cycles out: the compiler may still hoist or fold some of them (loop-invariant or constant arithmetic)."""
    counts = profile.totals
    width = profile.launch.simd_width
    clocks = spec.gpu_cores * spec.clock_hz
    alu_s = counts.alu_operations * width / (clocks * R.ALU_LANES_PER_CORE_CLOCK)
    issue_s = (counts.alu_operations + counts.integer_issue) * width / (clocks * R.ALU_LANES_PER_CORE_CLOCK)
    special = counts.special_operations * width
    per_clock = R.ALU_LANES_PER_CORE_CLOCK / 4   # lanes of one scheduler
    bound = max(alu_s, special * R.SPECIAL_CYCLES_BOUND / (clocks * per_clock * 4))
    est = max(issue_s, special * R.SPECIAL_CYCLES / (clocks * per_clock * 4)) / eff
    return Term("ALU", bound, est, f"{counts.alu_operations:.4g} float, {counts.integer_operations:.4g} integer "
                f"({counts.integer_issue:.4g} issue cycles timed), {counts.special_operations:.4g} special-function "
                "simdgroup operations")


def _threadgroup(counts, spec: GpuSpec, rate: R.Rates, eff: float) -> Term:
    moved = counts.threadgroup_passes * SEGMENT_PASS_BYTES
    bound = moved / spec.threadgroup_memory_bandwidth
    est = moved / (spec.gpu_cores * rate.tg_bytes * spec.clock_hz * eff)
    return Term("threadgroup memory", bound, est, f"{counts.threadgroup_passes:.4g} passes")


def estimate(profile, gpu: str | GpuSpec = "M1") -> Estimate:
    """The bound and estimate of a profiled dispatch on `gpu` (a name of `GPUS` or a `GpuSpec`)."""
    spec = gpu if isinstance(gpu, GpuSpec) else find_gpu(gpu)
    counts = profile.totals
    rate = R.rates(spec)
    occ = occupancy(profile, spec)
    terms = (_matrix(counts, spec, rate, occ.efficiency), _tensor(counts, spec, rate, occ.efficiency),
             _device(profile, spec, rate, occ), _cache(profile, spec, rate, occ),
             _threadgroup(counts, spec, rate, occ.efficiency), _alu(profile, spec, occ.efficiency),
             Term("dispatch", 0.0, R.DISPATCH_S, "fixed cost of a dispatch"))
    bw = spec.memory_bandwidth
    return Estimate(gpu=spec, terms=terms, occupancy=occ, flops=counts.total_flops,
                    footprint_fits_cache=profile.device_traffic <= spec.last_level_cache,
                    device_s=profile.device_traffic_per_threadgroup / bw, device_reuse_s=profile.device_traffic / bw)
