"""Profiled dispatches on the CPU device (`profile=` of `dispatch_threadgroups` / `dispatch_threads`).

A profiled dispatch runs the instrumented (sanitizer) build of the kernel with the runtime's counters on
(runtime_profile.cpp) for a sample of its threadgroups: all of them up to `profile=N` (N threadgroups, default
DEFAULT_SAMPLE), else N spread evenly over the grid, first and last included. The counts come back per
instruction and per `.metal` line; this module turns them into a `metile.Profile`, instructions placed on the
`.metal` line they come from (read from the debug information, as for faults: symbolize.py) and everything scaled
to the whole grid. The runtime's segment trace (runtime_trace.h: each counted threadgroup's device segments in
order, by dispatch position) becomes `Profile.segment_trace`, which the model replays through a cache.
"""

from __future__ import annotations

import numpy as np

from metile.metal.args import run_options_problem
from metile.metal.cpu.faults import pick_metal_line
from metile.metal.cpu.runtime_api import PROFILE_COUNTERS, ffi
from metile.metal.cpu.symbolize import source_frames
from metile.metal.errors import ProfileError
from metile.profile.counts import RAW_COUNTERS, Counts, Launch, LineCounts, Model, Profile, SegmentTrace, merge_lines

DEFAULT_SAMPLE = 32   # threadgroups counted when profile=True
MODEL = Model()       # 64-byte segments, 32 banks of 4 bytes (docs/performance.md)

assert PROFILE_COUNTERS == RAW_COUNTERS, "mt_runtime.h's counters and metile.profile's names differ"


def sample_size(profile, profile_only=False) -> int | None:
    """The threadgroups to count for a `profile=` argument (None: not profiled)."""
    problem = run_options_problem(False, None, profile, profile_only)
    if problem is not None:
        raise ProfileError(problem)
    if profile is None or profile is False:
        return None
    return DEFAULT_SAMPLE if profile is True else profile


def sample(total: int, n: int) -> list[int]:
    """`n` linear threadgroup indices spread evenly over `total` (all of them when n >= total)."""
    if n >= total:
        return list(range(total))
    if n == 1:
        return [0]
    return sorted({round(i * (total - 1) / (n - 1)) for i in range(n)})


class ProfiledRun:
    """The runtime's profile description for one dispatch and its result record (kept alive with the dispatch)."""

    def __init__(self, n: int, total: int, spans: list[tuple[int, int]], only: bool = False):
        ids = sample(total, n)
        self.ids = ffi.new("uint64_t[]", ids)
        self.lo = ffi.new("uint64_t[]", [lo for lo, _ in spans] or [0])
        self.hi = ffi.new("uint64_t[]", [hi for _, hi in spans] or [0])
        d = ffi.new("mt_profile_desc*")
        d.threadgroups, d.n_threadgroups = self.ids, len(ids)
        d.device_lo, d.device_hi, d.n_device = self.lo, self.hi, len(spans)
        d.segment_bytes, d.banks, d.bank_bytes = MODEL.segment_bytes, MODEL.banks, MODEL.bank_bytes
        d.only_counted = 1 if only else 0
        self.desc = d
        self.out = ffi.new("mt_profile_result*")

    def result(self, rt, *, kernel: str, metal_name: str, source: str, launch: Launch,
               user_file=None, registers: int = 0) -> Profile:
        """The counts of the last run as a Profile with `.metal` lines (frees the runtime's record); `registers`:
        the kernel's estimated registers a thread (metile/metal/cpu/registers.py, 0 unknown)."""
        r = self.out
        try:
            entries = [(int(e.pc_offset), int(e.line), list(e.c)) for e in ffi.unpack(r.entries, r.n_entries)]
            module = ffi.string(r.module).decode(errors="replace")
            counted = int(r.threadgroups)
            unique_tg, unique = int(r.unique_tg_bytes), int(r.unique_bytes)
            seg_tg, seg = int(r.unique_tg_segments), int(r.unique_segments)
            launch = Launch(launch.threadgroups, launch.threads_per_threadgroup, launch.simd_width,
                            int(r.max_tg_memory))
            trace = _trace(r)
        finally:
            rt.mt_profile_free(r)
        frames = source_frames(module, [pc for pc, _, _ in entries])
        text = source.splitlines()
        lines = []
        for pc, line, c in entries:
            file = metal_name
            if pc:
                file, line = pick_metal_line(frames.get(pc, ()), module, metal_name, user_file)
            body = text[line - 1] if file == metal_name and 0 < line <= len(text) else ""
            lines.append(LineCounts(file, line, body, Counts.from_raw(dict(zip(RAW_COUNTERS, c)))))
        total = launch.threadgroups_total
        scale = total / counted if counted else 0.0
        lines = [LineCounts(lc.file, lc.line, lc.text, lc.counts.scaled(scale)) for lc in merge_lines(lines)]
        totals = sum((lc.counts for lc in lines), Counts())
        bound = _bound_bytes(self)
        footprint = unique if counted >= total else min(unique * scale, bound)
        seg_footprint = seg if counted >= total else min(seg * scale, -(-bound // MODEL.segment_bytes) + 1)
        return Profile(kernel=kernel, totals=totals, lines=tuple(lines), launch=launch, threadgroups_profiled=counted,
                       device_unique_bytes_per_threadgroup=unique_tg * scale, device_unique_bytes=footprint,
                       device_unique_segments_per_threadgroup=seg_tg * scale, device_unique_segments=seg_footprint,
                       model=MODEL, segment_trace=trace, registers=registers)


def _trace(r) -> SegmentTrace:
    """The runtime's segment trace (runtime_trace.h), copied out of its record."""
    n, m = int(r.n_trace_threadgroups), int(r.n_trace)
    tgs = np.frombuffer(ffi.buffer(r.trace_threadgroups, 24 * n), np.uint64).reshape(n, 3) if n else \
        np.zeros((0, 3), np.uint64)
    segments = np.frombuffer(ffi.buffer(r.trace, 8 * m), np.uint64).copy() if m else np.zeros(0, np.uint64)
    starts = np.append(tgs[:, 1], tgs[-1, 2] if n else 0).astype(np.int64)
    return SegmentTrace(tgs[:, 0].copy(), starts, segments, bool(r.trace_complete), int(r.trace_step_segments))


def _bound_bytes(run: ProfiledRun) -> int:
    """The bytes of the device buffers a dispatch binds (no footprint can be larger)."""
    n = run.desc.n_device
    return sum(int(run.hi[i]) - int(run.lo[i]) for i in range(n))
