"""The readable report of a `Profile` (`Profile.summary`): totals, the Apple GPU estimate, the busiest lines."""

from __future__ import annotations

from metile.profile.counts import Counts, Profile
from metile.profile.model import estimate


def _n(v: float) -> str:
    """A count, short: 1234567 -> 1.23M."""
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.4g}" if v != int(v) else str(int(v))


def _t(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def format_summary(p: Profile, gpu: str = "M1", lines: int = 12) -> str:
    t = p.totals
    seg = p.model.segment_bytes
    la = p.launch
    out = [f"profile of {p.kernel}: {la.threadgroups_total} threadgroups of {la.threads} threads "
           f"({la.simdgroups_per_threadgroup} simdgroups), {la.threadgroup_memory} bytes of threadgroup memory"]
    if p.sampled:
        out.append(f"  counted {p.threadgroups_profiled} of {p.threadgroups_total} threadgroups, scaled by "
                   f"{p.scale:.3g} (the footprint is an estimate)")
    out += [
        f"  device memory    read {_n(t.device_bytes_read)}B, written {_n(t.device_bytes_written)}B in "
        f"{_n(t.device_instructions)} simdgroup instructions ({_n(t.device_segments)} {seg}-byte segments, "
        f"coalescing {_pct(t.coalescing(seg))})",
        f"                   touched {_n(p.device_unique_bytes_per_threadgroup)}B once per threadgroup, "
        f"{_n(p.device_unique_bytes)}B once in all; in segments {_n(p.device_traffic_per_threadgroup)}B and "
        f"{_n(p.device_traffic)}B",
        f"  threadgroup mem  {_n(t.threadgroup_bytes)}B in {_n(t.threadgroup_instructions)} simdgroup instructions, "
        f"{_n(t.bank_conflicts)} bank-conflict passes ({p.model.banks} banks x {p.model.bank_bytes} B)",
        f"  sync             {_n(t.barriers)} threadgroup barriers, {_n(t.simdgroup_barriers)} simdgroup barriers, "
        f"{_n(t.simd_collectives)} simd collectives, {_n(t.atomics)} atomics",
        f"  simdgroup_matrix {_n(sum(t.simdgroup_loads.values()))} loads, {_n(sum(t.simdgroup_stores.values()))} "
        f"stores, {_n(sum(t.simdgroup_mma.values()))} multiply-accumulates = {_n(sum(t.flops.values()))} FLOPs",
    ]
    if t.alu_operations or t.integer_operations or t.special_operations:
        out.append(f"  arithmetic       {_n(t.alu_operations)} float, {_n(t.integer_operations)} integer "
                   f"({_n(t.integer_issue)} issue cycles timed), {_n(t.special_operations)} special-function "
                   "simdgroup operations (lane components)")
    if t.tensor_runs or t.cooperative_loads or t.cooperative_stores:
        types = ", ".join(f"{k} {_n(v)}" for k, v in {**t.tensor_flops, **{f"{k} (thread)": v for k, v in
                                                                             t.tensor_thread_flops.items()}}.items())
        out.append(f"  tensor ops       {_n(sum(t.tensor_runs.values()))} matmul2d runs = "
                   f"{_n(sum(t.tensor_flops.values()) + sum(t.tensor_thread_flops.values()))} FLOPs ({types or '-'}), "
                   f"{_n(t.cooperative_loads)} cooperative loads, {_n(t.cooperative_stores)} stores")
    e = estimate(p, gpu)
    o = e.occupancy
    out.append(f"  on {e.gpu.name}: at least {_t(e.bound_s)} (bound by {e.bound_binding}), estimate "
               f"{_t(e.estimate_s)} (bound by {e.binding})")
    out.append("    terms (bound / estimate): " + ", ".join(
        f"{t.name} {_t(t.bound_s)} / {_t(t.estimate_s)}" for t in e.terms if t.bound_s or t.estimate_s)
        + f"; {o.per_core} threadgroups a core (by {o.limited_by}), {o.waves} wave{'s' if o.waves != 1 else ''}, "
        f"latency hiding {o.latency_hiding:.0%}")
    if o.registers:
        held = f", which hold {o.register_threads} threads a core" if o.register_threads else \
            " (allocated as used on this GPU: no limit)"
        out.append(f"    registers: about {o.registers} 32-bit registers a thread{held}")
    busiest = sorted(p.lines, key=lambda lc: -_weight(lc.counts))[:lines]
    if busiest:
        out.append("  busiest lines:")
        width = max(len(lc.key) for lc in busiest)
        for lc in busiest:
            c = lc.counts
            out.append(f"    {lc.key:<{width}}  dev {_n(c.device_bytes):>6}B seg {_n(c.device_segments):>6} "
                       f"coal {_pct(c.coalescing(seg)):>4}  tg {_n(c.threadgroup_bytes):>6}B conf "
                       f"{_n(c.bank_conflicts):>5}  mma {_n(sum(c.simdgroup_mma.values())):>5}  "
                       f"{lc.text.strip()[:60]}")
    return "\n".join(out)


def _weight(c: Counts) -> float:
    """How much a line matters: its device and threadgroup traffic and its matrix work, roughly in bytes."""
    return (c.device_segments * 64 + c.threadgroup_passes * 128 + sum(c.simdgroup_mma.values()) * 512
            + sum(c.tensor_flops.values()) / 2)
