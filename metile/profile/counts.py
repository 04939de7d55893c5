"""The counts of a profiled dispatch: `Counts` (one set of counters) and `Profile` (a dispatch's, per line too).

A device fills a `Profile` from its raw counters (`Profile.from_raw`): the counts of the threadgroups it profiled,
per source line, scaled to the whole dispatch when it profiled a sample. `metile.profile.model` turns one into
a bound and an estimate of its run time on an Apple GPU; docs/performance.md says what is counted and how.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import numpy as np

DTYPES = ("float", "half", "bfloat", "other")
TENSOR_TYPES = ("float", "half", "bfloat", "tf32")   # matmul2d inputs; tf32: float with relaxed_precision
TENSOR_SCOPES = ("thread", "simdgroup", "simdgroups")  # execution_thread, _simdgroup, _simdgroups<N>
_KEY_ORDER = (*DTYPES, "tf32", *TENSOR_SCOPES)
MMA_FLOPS = 2 * 8 * 8 * 8   # one 8x8x8 simdgroup_matrix multiply-accumulate, an FMA counting as 2

# the counters of one entry, in the runtime's order (metile/metal/cpu/mt_runtime.h, enum mt_prof_counter)
RAW_COUNTERS = (
    "dev_read_bytes", "dev_write_bytes", "dev_lane_ops", "dev_simd_ops", "dev_segments", "dev_active_lanes",
    "dev_distinct_bytes", "tg_read_bytes", "tg_write_bytes", "tg_lane_ops", "tg_simd_ops", "tg_passes",
    "tg_conflicts", "atomics", "tg_barriers", "sg_barriers", "collectives",
    *(f"mat_load_{d}" for d in DTYPES), *(f"mat_store_{d}" for d in DTYPES), *(f"mma_{d}" for d in DTYPES),
    "dev_load_segments", "dev_load_distinct_bytes",
    *(f"tensor_flops_{t}" for t in TENSOR_TYPES), *(f"tensor_thread_flops_{t}" for t in TENSOR_TYPES),
    *(f"tensor_runs_{s}" for s in TENSOR_SCOPES), "coop_loads", "coop_stores",
    "alu_float", "alu_int", "alu_special", "alu_int_issue",
)


@attrs.frozen
class Counts:
    """Counters of a dispatch or of one line: sums over its threadgroups (scaled when sampled). Simdgroup-wide
    instructions count once per simdgroup; barriers once per threadgroup."""

    device_bytes_read: float = 0
    device_bytes_written: float = 0
    device_accesses: float = 0          # lane accesses to device memory
    device_instructions: float = 0      # simdgroup-wide device memory instructions
    device_segments: float = 0          # distinct aligned segments those touch, summed
    device_active_lanes: float = 0      # active lanes of those instructions, summed
    device_distinct_bytes: float = 0    # bytes those touch, a byte two lanes touch once
    threadgroup_bytes_read: float = 0
    threadgroup_bytes_written: float = 0
    threadgroup_accesses: float = 0
    threadgroup_instructions: float = 0
    threadgroup_passes: float = 0       # passes those need (a bank serves one word per pass)
    bank_conflicts: float = 0           # passes beyond the fewest the distinct words need
    atomics: float = 0
    barriers: float = 0                 # threadgroup barriers
    simdgroup_barriers: float = 0
    simd_collectives: float = 0
    simdgroup_loads: Mapping[str, float] = attrs.field(factory=dict)   # by dtype
    simdgroup_stores: Mapping[str, float] = attrs.field(factory=dict)
    simdgroup_mma: Mapping[str, float] = attrs.field(factory=dict)     # by input dtype
    device_load_segments: float = 0         # device_segments of the loads alone (not stores, not atomics)
    device_load_distinct_bytes: float = 0   # device_distinct_bytes of the loads alone
    # Metal 4 tensor ops (matmul2d): FLOPs (2 m n k a run) by input type (TENSOR_TYPES) at execution_simdgroup and
    # execution_simdgroups<N>, the scopes an accelerator runs, and at execution_thread; runs by scope (per
    # simdgroup, per threadgroup, per thread). Cooperative tensor loads and stores count once per simdgroup; their
    # bytes, like those of a run's tensor operands (each element once a run), are device or threadgroup traffic.
    tensor_flops: Mapping[str, float] = attrs.field(factory=dict)
    tensor_thread_flops: Mapping[str, float] = attrs.field(factory=dict)
    tensor_runs: Mapping[str, float] = attrs.field(factory=dict)
    cooperative_loads: float = 0
    cooperative_stores: float = 0
    # arithmetic of the statements run (docs/performance.md): lane-component operations, once per simdgroup that
    # runs the statement (a float4 add is 4): float ALU, integer ALU, special functions (exp2, rsqrt, reciprocal...)
    alu_operations: float = 0
    integer_operations: float = 0
    special_operations: float = 0
    # issue cycles of the integer operations the model times: those outside subscripts and loop control, an add,
    # compare, select or bitwise operation 1 a lane component, a multiply 4, a division or remainder 8
    integer_issue: float = 0

    @classmethod
    def from_raw(cls, raw: Mapping[str, float]) -> Counts:
        """From runtime counters by name (RAW_COUNTERS), missing ones 0."""
        g = raw.get

        def by_dtype(prefix: str, keys=DTYPES) -> dict[str, float]:
            return {d: g(f"{prefix}_{d}", 0) for d in keys if g(f"{prefix}_{d}", 0)}

        return cls(g("dev_read_bytes", 0), g("dev_write_bytes", 0), g("dev_lane_ops", 0), g("dev_simd_ops", 0),
                   g("dev_segments", 0), g("dev_active_lanes", 0), g("dev_distinct_bytes", 0),
                   g("tg_read_bytes", 0), g("tg_write_bytes", 0), g("tg_lane_ops", 0), g("tg_simd_ops", 0),
                   g("tg_passes", 0), g("tg_conflicts", 0), g("atomics", 0), g("tg_barriers", 0),
                   g("sg_barriers", 0), g("collectives", 0), by_dtype("mat_load"), by_dtype("mat_store"),
                   by_dtype("mma"), g("dev_load_segments", 0), g("dev_load_distinct_bytes", 0),
                   by_dtype("tensor_flops", TENSOR_TYPES), by_dtype("tensor_thread_flops", TENSOR_TYPES),
                   by_dtype("tensor_runs", TENSOR_SCOPES), g("coop_loads", 0), g("coop_stores", 0),
                   g("alu_float", 0), g("alu_int", 0), g("alu_special", 0), g("alu_int_issue", 0))

    def __add__(self, other: Counts) -> Counts:
        def add(a, b):
            if isinstance(a, Mapping):
                return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b), key=_KEY_ORDER.index)}
            return a + b
        return Counts(*(add(getattr(self, f.name), getattr(other, f.name)) for f in attrs.fields(Counts)))

    def scaled(self, factor: float) -> Counts:
        def mul(a):
            return {k: v * factor for k, v in a.items()} if isinstance(a, Mapping) else a * factor
        return Counts(*(mul(getattr(self, f.name)) for f in attrs.fields(Counts)))

    @property
    def device_bytes(self) -> float:
        return self.device_bytes_read + self.device_bytes_written

    @property
    def threadgroup_bytes(self) -> float:
        return self.threadgroup_bytes_read + self.threadgroup_bytes_written

    @property
    def flops(self) -> dict[str, float]:
        """Floating-point operations of the simdgroup_matrix multiplies, by input dtype."""
        return {d: n * MMA_FLOPS for d, n in self.simdgroup_mma.items()}

    @property
    def total_flops(self) -> float:
        """Every counted FLOP: simdgroup_matrix multiplies and tensor ops of every scope."""
        return sum(self.flops.values()) + sum(self.tensor_flops.values()) + sum(self.tensor_thread_flops.values())

    def coalescing(self, segment_bytes: int) -> float | None:
        """The bytes device instructions ask for (each once) over the bytes of the segments they touch: 1.0 when
        every segment touched is used whole; None without device instructions."""
        if not self.device_segments:
            return None
        return self.device_distinct_bytes / (self.device_segments * segment_bytes)

    def load_coalescing(self, segment_bytes: int) -> float | None:
        """`coalescing` of the loads alone; None without device loads."""
        if not self.device_load_segments:
            return None
        return self.device_load_distinct_bytes / (self.device_load_segments * segment_bytes)

    def to_dict(self, segment_bytes: int) -> dict:
        out = {f.name: _plain(getattr(self, f.name)) for f in attrs.fields(Counts)}
        for name in ("simdgroup_loads", "simdgroup_stores", "simdgroup_mma"):
            out[name + "_by_dtype"] = out.pop(name)
            out[name] = _plain(sum(getattr(self, name).values()))
        for name in ("tensor_flops", "tensor_thread_flops"):
            out[name + "_by_type"] = out.pop(name)
            out[name] = _plain(sum(getattr(self, name).values()))
        out["tensor_runs_by_scope"] = out.pop("tensor_runs")
        out["tensor_runs"] = _plain(sum(self.tensor_runs.values()))
        out["threadgroup_bytes"] = _plain(self.threadgroup_bytes)
        out["flops_by_dtype"] = _plain(self.flops)
        out["flops"] = _plain(self.total_flops)   # simdgroup_matrix and tensor ops
        out["coalescing_efficiency"] = self.coalescing(segment_bytes)
        out["load_coalescing_efficiency"] = self.load_coalescing(segment_bytes)
        return out


def _plain(v):
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return int(v) if float(v).is_integer() else float(v)


@attrs.frozen
class LineCounts:
    """The counts of one source line: `file` and `line` (a Python line for `@metile.kernel`, else a `.metal` one;
    line 0: instructions no line is known for), its text, and its counters."""

    file: str
    line: int
    text: str
    counts: Counts

    @property
    def key(self) -> str:
        return f"{self.file}:{self.line}"


@attrs.frozen
class Launch:
    """The shape of the dispatch profiled."""

    threadgroups: tuple[int, int, int]
    threads_per_threadgroup: tuple[int, int, int]
    simd_width: int
    threadgroup_memory: int     # bytes a threadgroup used (the largest profiled)

    @property
    def threads(self) -> int:
        x, y, z = self.threads_per_threadgroup
        return x * y * z

    @property
    def simdgroups_per_threadgroup(self) -> int:
        return -(-self.threads // self.simd_width)

    @property
    def threadgroups_total(self) -> int:
        x, y, z = self.threadgroups
        return x * y * z


@attrs.frozen
class Model:
    """The parameters counts were made with (documented in docs/performance.md)."""

    segment_bytes: int = 64
    banks: int = 32
    bank_bytes: int = 4


STEP_END = np.uint64(2**64 - 1)   # ends a step in `SegmentTrace.segments` (runtime_trace.h)


@attrs.frozen(eq=False)
class SegmentTrace:
    """The device segments each counted threadgroup touched, in order: threadgroup k (in dispatch order, linear index
    `threadgroups[k]`, x fastest) holds `segments[starts[k]:starts[k + 1]]`, a sequence of steps (a step: the
    distinct segments its instructions touched between two threadgroup barriers, at most `step_segments` of them,
    each step ended by STEP_END). `complete` is False when some counted threadgroups were left out (the runtime
    keeps a bounded number of segments). Compared by identity; `metile.profile.reuse` replays it."""

    threadgroups: np.ndarray     # uint64 linear indices, ascending
    starts: np.ndarray           # int64, len(threadgroups) + 1
    segments: np.ndarray         # uint64 segment numbers (address // segment_bytes) and STEP_END
    complete: bool = True
    step_segments: int = 1024
    memo: dict = attrs.field(factory=dict, repr=False)   # replays and distinct counts already made, by their parameters

    def steps(self, k: int) -> list[list[int]]:
        """The steps of the k-th threadgroup, each a list of segment numbers."""
        seg = self.segments[self.starts[k]:self.starts[k + 1]]
        ends = np.flatnonzero(seg == STEP_END)
        out, at = [], 0
        for e in ends.tolist():
            out.append(seg[at:e].tolist())
            at = e + 1
        return out

    def distinct(self, k: int | None = None) -> int:
        """Distinct segments of the k-th threadgroup (of them all when None), counted once per trace: each estimate
        of the dispatch (one per GPU) reads them again."""
        key = ("distinct", k)
        found = self.memo.get(key)
        if found is None:
            seg = self.segments if k is None else self.segments[self.starts[k]:self.starts[k + 1]]
            found = self.memo[key] = int(np.unique(seg[seg != STEP_END]).size)
        return found


@attrs.frozen
class Profile:
    """A profiled dispatch: totals and per-line counts (scaled to the whole dispatch), the launch, and how many
    threadgroups were counted. `to_dict()` for tools, `estimate(gpu)` and `summary(gpu)` for the Apple GPU model."""

    kernel: str
    totals: Counts
    lines: tuple[LineCounts, ...]
    launch: Launch
    threadgroups_profiled: int
    device_unique_bytes_per_threadgroup: float   # summed over threadgroups (scaled): no reuse across them
    device_unique_bytes: float                   # the dispatch's footprint: perfect reuse (estimated when sampled)
    device_unique_segments_per_threadgroup: float = 0   # the same two in aligned segments (what memory moves)
    device_unique_segments: float = 0
    model: Model = Model()
    segment_trace: SegmentTrace | None = None   # the segments each counted threadgroup touched, in order
    registers: int = 0      # 32-bit registers a thread holds, estimated from the source (0: unknown)

    @property
    def whole_trace(self) -> bool:
        """Whether `segment_trace` holds every threadgroup of the dispatch (what an exact replay needs)."""
        t = self.segment_trace
        return t is not None and t.complete and not self.sampled and len(t.threadgroups) == self.threadgroups_total

    @property
    def device_traffic_per_threadgroup(self) -> float:
        """Bytes device memory moves with no reuse across threadgroups: each threadgroup's segments, once each."""
        return self.device_unique_segments_per_threadgroup * self.model.segment_bytes

    @property
    def device_traffic(self) -> float:
        """Bytes device memory moves with perfect reuse: the dispatch's segments, once each."""
        return self.device_unique_segments * self.model.segment_bytes

    @property
    def threadgroups_total(self) -> int:
        return self.launch.threadgroups_total

    @property
    def sampled(self) -> bool:
        return self.threadgroups_profiled < self.threadgroups_total

    @property
    def scale(self) -> float:
        return self.threadgroups_total / self.threadgroups_profiled if self.threadgroups_profiled else 0.0

    def line(self, line: int, file: str | None = None) -> Counts:
        """The counts of a source line (summed over files with that line number when `file` is None)."""
        found = [lc.counts for lc in self.lines if lc.line == line and (file is None or lc.file == file)]
        return sum(found[1:], found[0]) if found else Counts()

    def to_dict(self) -> dict:
        seg = self.model.segment_bytes
        out = self.totals.to_dict(seg)
        out.update(
            kernel=self.kernel,
            device_unique_bytes_per_threadgroup=_plain(self.device_unique_bytes_per_threadgroup),
            device_unique_bytes=_plain(self.device_unique_bytes),
            device_unique_segments_per_threadgroup=_plain(self.device_unique_segments_per_threadgroup),
            device_unique_segments=_plain(self.device_unique_segments),
            device_traffic_per_threadgroup=_plain(self.device_traffic_per_threadgroup),
            device_traffic=_plain(self.device_traffic),
            threadgroups_profiled=self.threadgroups_profiled,
            threadgroups_total=self.threadgroups_total,
            sampled=self.sampled,
            scale=self.scale,
            launch={"threadgroups": list(self.launch.threadgroups),
                    "threads_per_threadgroup": list(self.launch.threads_per_threadgroup),
                    "threads": self.launch.threads,
                    "simdgroups_per_threadgroup": self.launch.simdgroups_per_threadgroup,
                    "threadgroup_memory": self.launch.threadgroup_memory},
            model=attrs.asdict(self.model),
            registers=self.registers,
            lines={lc.key: {"text": lc.text, **lc.counts.to_dict(seg)} for lc in self.lines},
        )
        return out

    def estimate(self, gpu: str = "M1"):
        """The bound and estimate of this dispatch's run time on an Apple GPU (`metile.profile.model.Estimate`)."""
        from metile.profile.model import estimate
        return estimate(self, gpu)

    def format_summary(self, gpu: str = "M1", lines: int = 12) -> str:
        """The readable report `summary` prints (the `lines` busiest lines)."""
        from metile.profile.report import format_summary
        return format_summary(self, gpu, lines)

    def summary(self, gpu: str = "M1", lines: int = 12, file=None) -> None:
        """Print the counts, the Apple GPU bound and estimate with their terms, and the busiest lines."""
        print(self.format_summary(gpu, lines), file=file)


def merge_lines(lines: Iterable[LineCounts]) -> tuple[LineCounts, ...]:
    """Lines with the same file and number added up, in (file, line) order."""
    merged: dict[tuple[str, int], LineCounts] = {}
    for lc in lines:
        k = (lc.file, lc.line)
        prev = merged.get(k)
        merged[k] = lc if prev is None else attrs.evolve(prev, counts=prev.counts + lc.counts,
                                                         text=prev.text or lc.text)
    return tuple(merged[k] for k in sorted(merged))
