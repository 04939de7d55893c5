"""simd and quad collectives in divergent control flow on the CPU device: they run over the lanes that reach the
same call (the active lanes), as on Apple GPUs; lanes that skipped it, wait elsewhere or exited take no part, and a
shuffle from a lane that takes no part gives the reading lane its own value. Checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
LANES = np.arange(32)


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def run(cpu, body: str, x: np.ndarray, width: int, n: int = 64, tpt: int = 64) -> np.ndarray:
    fn = cpu.compile(HEAD + body, name="divergent.metal").function("k")
    out = np.full(n * width, -7.0, np.float32)
    cpu.dispatch_threads(fn, (n, 1, 1), (tpt, 1, 1), [x, out])
    return out.reshape(n, width)


PARTIAL = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    device float* o = out + i * 6;
    if (lane < 13) {
        o[0] = simd_sum(v);
        o[1] = simd_max(v);
        o[2] = simd_prefix_exclusive_sum(v);
        o[3] = simd_shuffle_xor(v, ushort(8));
        o[4] = float(uint(uint64_t(simd_ballot(v > 0.0f))));
        o[5] = float(uint(uint64_t(simd_active_threads_mask())));
    }
}
"""


def test_collectives_over_the_lanes_of_a_branch(cpu):
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    o = run(cpu, PARTIAL, x, 6)
    for sg in range(2):
        v = x[sg * 32:sg * 32 + 13]
        rows = o[sg * 32:sg * 32 + 13]
        np.testing.assert_allclose(rows[:, 0], v.sum(), rtol=1e-5)
        assert (rows[:, 1] == v.max()).all()
        np.testing.assert_allclose(rows[:, 2], np.cumsum(v) - v, rtol=1e-5, atol=1e-6)
        partner = LANES[:13] ^ 8
        # lanes 5..12 read lanes 13..20, which are not active: they get their own value
        want = np.where(partner < 13, v[np.minimum(partner, 12)], v)
        np.testing.assert_array_equal(rows[:, 3], want)
        assert (rows[:, 4] == sum(1 << j for j in range(13) if v[j] > 0)).all()
        assert (rows[:, 5] == (1 << 13) - 1).all()
        assert (o[sg * 32 + 13:(sg + 1) * 32] == -7).all()


IF_ELSE_THEN_ALL = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float a;
    if (lane % 2 == 0) {
        a = simd_sum(v);
    } else {
        a = simd_max(v);
    }
    float b = simd_sum(v);        // every lane again
    float c = v;
    if (lane >= 20) c = simd_prefix_inclusive_sum(v);
    float d = simd_min(c);        // every lane again
    out[i * 4 + 0] = a;
    out[i * 4 + 1] = b;
    out[i * 4 + 2] = c;
    out[i * 4 + 3] = d;
}
"""


def test_if_else_arms_and_reconvergence(cpu):
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    o = run(cpu, IF_ELSE_THEN_ALL, x, 4)
    for sg in range(2):
        v = x[sg * 32:(sg + 1) * 32]
        rows = o[sg * 32:(sg + 1) * 32]
        even, odd = LANES % 2 == 0, LANES % 2 == 1
        np.testing.assert_allclose(rows[even, 0], v[even].sum(), rtol=1e-5)
        assert (rows[odd, 0] == v[odd].max()).all()
        np.testing.assert_allclose(rows[:, 1], v.sum(), rtol=1e-5)
        c = v.copy()
        c[20:] = np.cumsum(v[20:])
        np.testing.assert_allclose(rows[:, 2], c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rows[:, 3], np.float32(c.min()), rtol=1e-6)


EARLY_EXIT = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float acc = 0.0f;
    for (uint it = 0; it < 4; ++it) {
        if (lane >= 8u * (4u - it)) break;   // lanes leave the loop early: 32, 24, 16, 8 lanes per iteration
        acc += simd_sum(v);
    }
    float q = 0.0f;
    if (lane < 16) {
        if (lane % 4 < 2) q = quad_sum(v);
    } else {
        if (lane == 30) return;             // exits: takes no part in what follows
    }
    out[i * 3 + 0] = acc;
    out[i * 3 + 1] = simd_sum(v);
    out[i * 3 + 2] = q;
}
"""


def test_loops_left_early_quads_and_exited_lanes(cpu):
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    o = run(cpu, EARLY_EXIT, x, 3)
    for sg in range(2):
        v = x[sg * 32:(sg + 1) * 32]
        rows = o[sg * 32:(sg + 1) * 32]
        sums = [v[:8 * (4 - it)].sum() for it in range(4)]
        want_acc = [sum(sums[it] for it in range(4) if lane < 8 * (4 - it)) for lane in range(32)]
        live = LANES != 30
        np.testing.assert_allclose(rows[live, 0], np.array(want_acc)[live], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[live, 1], v[live].sum(), rtol=1e-5)
        assert (rows[30] == -7).all()
        quads = np.array([v[4 * (lane // 4):4 * (lane // 4) + 2].sum() if lane < 16 and lane % 4 < 2 else 0.0
                          for lane in range(32)])
        np.testing.assert_allclose(rows[live, 2], quads[live], rtol=1e-5, atol=1e-6)


def test_a_collective_after_lanes_wait_at_the_threadgroup_barrier(cpu):
    src = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float t[64];
    float v = x[i];
    if (lane < 5) v = simd_sum(v);     // the others already wait at the barrier below
    t[i] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = t[63 - i];
}
"""
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    o = run(cpu, src, x, 1)[:, 0]
    want = x.copy()
    for sg in range(2):
        want[sg * 32:sg * 32 + 5] = x[sg * 32:sg * 32 + 5].sum()
    np.testing.assert_allclose(o, want[::-1], rtol=1e-5)


# ---- the arm, loop iteration and call a lane is in take part in telling collectives apart (metile/metal/cpu/arms.py)

def lanes_of(x: np.ndarray, sg: int) -> np.ndarray:
    return x[sg * 32:(sg + 1) * 32].astype(np.float64)


LOOP_THEN_BRANCH = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float a = x[i], b = x[i];
    for (uint it = 0; it < 3; ++it) {
        a = simd_sum(a) * 0.25f;                 // every lane, every iteration
        if (lane < 16) b = simd_sum(b) * 0.5f;   // the lanes below 16, before the others' next iteration
    }
    out[i * 2] = a;
    out[i * 2 + 1] = b;
}
"""


def test_a_loop_with_a_collective_before_a_divergent_branch_with_one(cpu):
    x = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    o = run(cpu, LOOP_THEN_BRANCH, x, 2)
    for sg in range(2):
        a, b = lanes_of(x, sg), lanes_of(x, sg)
        for _ in range(3):
            a[:] = a.sum() * 0.25
            b[:16] = b[:16].sum() * 0.5
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0], a, rtol=1e-5)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 1], b, rtol=1e-5)


HELPER_IN_BOTH_ARMS = """
float total(float v) { return simd_sum(v); }
float spread(float v, uint lane) {
    float s = simd_prefix_exclusive_sum(v);
    if (lane % 4 == 0) s += simd_max(v);        // a divergent branch inside the helper
    return s;
}

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float r, p;
    if (lane < 12) r = total(v); else r = total(2.0f * v);
    if (lane % 3 == 0) {
        p = spread(v, lane);
    } else {
        p = spread(-v, lane);
    }
    out[i * 3 + 0] = r;
    out[i * 3 + 1] = p;
    out[i * 3 + 2] = total(v);                  // uniform call: every lane
}
"""


def prefix_excl(v: np.ndarray) -> np.ndarray:
    return np.cumsum(v) - v


def test_one_helper_called_from_both_arms_runs_once_per_arm(cpu):
    x = np.random.default_rng(6).standard_normal(64).astype(np.float32)
    o = run(cpu, HELPER_IN_BOTH_ARMS, x, 3)
    for sg in range(2):
        v = lanes_of(x, sg)
        rows = o[sg * 32:(sg + 1) * 32]
        lo = LANES < 12
        want_r = np.where(lo, v[lo].sum(), (2 * v[~lo]).sum())
        np.testing.assert_allclose(rows[:, 0], want_r, rtol=1e-5, atol=1e-5)
        want_p = np.zeros(32)
        for arm, val in ((LANES % 3 == 0, v), (LANES % 3 != 0, -v)):
            idx = np.flatnonzero(arm)
            s = prefix_excl(val[idx])
            inner = idx % 4 == 0          # the helper's own branch, within this arm's lanes
            s[inner] += val[idx][inner].max()
            want_p[idx] = s
        np.testing.assert_allclose(rows[:, 1], want_p, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[:, 2], v.sum(), rtol=1e-5)


HELPER_IN_LOOP_ARMS = """
float total(float v) { return simd_sum(v); }

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i], acc = 0.0f, all = 0.0f;
    for (uint it = 0; it < 4; ++it) {
        if ((lane + it) % 3 == 0) acc += total(v);     // which lanes take which arm changes per iteration
        else acc -= total(v * float(it));
        if (lane < 8u * it) continue;                  // these lanes skip the rest of the iteration
        all += simd_max(v + float(it));
    }
    out[i * 2] = acc;
    out[i * 2 + 1] = all;
}
"""


def test_helper_called_from_if_else_in_a_loop_with_continue(cpu):
    x = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    o = run(cpu, HELPER_IN_LOOP_ARMS, x, 2)
    for sg in range(2):
        v = lanes_of(x, sg)
        acc, al = np.zeros(32), np.zeros(32)
        for it in range(4):
            first = (LANES + it) % 3 == 0
            acc[first] += v[first].sum()
            acc[~first] -= (v[~first] * it).sum()
            rest = ~(LANES < 8 * it)
            al[rest] += (v[rest] + it).max()
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0], acc, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 1], al, rtol=1e-5, atol=1e-5)


NESTED_AND_SWITCH = """
float bump(float v) { return simd_sum(v) + 1.0f; }

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i], n = 0.0f, s = 0.0f;
    if (lane < 20) {
        if (lane % 2 == 0)
            n = bump(v);
        else if (lane < 9)
            n = bump(2.0f * v);
        else
            n = simd_min(v);
        n += simd_sum(1.0f);                 // the lanes below 20 again
    }
    switch (lane % 4) {
        case 0:
            s = bump(v);
            break;
        case 1:
            s = 10.0f;                       // falls through into case 2
        case 2:
            s += bump(v);
            break;
        default:
            s = simd_sum(-v);
    }
    out[i * 2] = n;
    out[i * 2 + 1] = s;
}
"""


def test_nested_branches_and_switch_cases(cpu):
    x = np.random.default_rng(8).standard_normal(64).astype(np.float32)
    o = run(cpu, NESTED_AND_SWITCH, x, 2)
    for sg in range(2):
        v = lanes_of(x, sg)
        n = np.zeros(32)
        even = (LANES < 20) & (LANES % 2 == 0)
        odd_lo = (LANES < 9) & (LANES % 2 == 1)
        odd_hi = (LANES < 20) & (LANES >= 9) & (LANES % 2 == 1)
        n[even] = v[even].sum() + 1
        n[odd_lo] = 2 * v[odd_lo].sum() + 1
        n[odd_hi] = v[odd_hi].min()
        n[LANES < 20] += 20
        s = np.zeros(32)
        c0, c1, c2, c3 = (LANES % 4 == q for q in range(4))
        s[c0] = v[c0].sum() + 1
        s[c1 | c2] = v[c1 | c2].sum() + 1    # the fall-through lanes run case 2's collective with its own
        s[c1] += 10
        s[c3] = -v[c3].sum()
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0], n, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 1], s, rtol=1e-5, atol=1e-5)


NESTED_LOOPS = """
float early(float v, uint lane) {
    if (lane < 8) return v;                  // these lanes skip the collective below
    return simd_sum(v);
}

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float c = 0.0f;
    for (uint j = 0; j < 3; ++j)
        for (uint t = 0; t < lane % 4 + j; ++t)   // lane-dependent trip counts in every outer iteration
            c += simd_sum(1.0f) * float(j + 1);
    float a = early(x[i], lane);
    float b = early(a, lane);                // lanes that returned early wait here for the others
    uint it = 0;
    float d = 0.0f;
    do {
        if (lane % 2 == 1 && it == 1) { ++it; continue; }
        d += simd_sum(1.0f);
        ++it;
    } while (it < 3);
    out[i * 4 + 0] = c;
    out[i * 4 + 1] = a;
    out[i * 4 + 2] = b;
    out[i * 4 + 3] = d;
}
"""


def test_nested_loops_early_returns_and_do_while(cpu):
    x = np.random.default_rng(9).standard_normal(64).astype(np.float32)
    o = run(cpu, NESTED_LOOPS, x, 4)
    for sg in range(2):
        v = lanes_of(x, sg)
        c = np.zeros(32)
        for j in range(3):
            trips = LANES % 4 + j
            for t in range(trips.max()):
                active = trips > t
                c[active] += active.sum() * (j + 1)
        hi = LANES >= 8
        a = v.copy()
        a[hi] = v[hi].sum()
        b = a.copy()
        b[hi] = a[hi].sum()
        d = np.where(LANES % 2 == 1, 32 + 32, 32 + 16 + 32)  # the odd lanes skip iteration 1's collective
        rows = o[sg * 32:(sg + 1) * 32]
        np.testing.assert_allclose(rows[:, 0], c, rtol=1e-6)
        np.testing.assert_allclose(rows[:, 1], a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[:, 2], b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[:, 3], d, rtol=1e-6)


def test_a_helper_defined_above_runs_after_the_branch_before_it(cpu):
    src = """
float after(float v) { return simd_sum(v); }       // defined first, called last
float inside(float v) { return simd_max(v); }

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    if (lane < 16) v = inside(v);
    out[i] = after(v);
}
"""
    x = np.random.default_rng(10).standard_normal(64).astype(np.float32)
    o = run(cpu, src, x, 1)[:, 0]
    for sg in range(2):
        v = lanes_of(x, sg)
        v[:16] = v[:16].max()
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32], v.sum(), rtol=1e-5)


@pytest.mark.parametrize("expr", ["lane < 16 ? simd_sum(v) : v", "v > 0.0f && simd_any(v > 1.0f)",
                                  "lane == 0 || total(v) > 0.0f"])
def test_collectives_some_lanes_may_skip_in_an_expression_are_refused(cpu, expr):
    src = f"""
float total(float v) {{ return simd_sum(v); }}
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {{
    float v = x[i];
    out[i] = float({expr});
}}
"""
    with pytest.raises(metile.MSLUnsupportedError, match="only some lanes may evaluate") as e:
        cpu.compile(HEAD + src, name="divergent.metal")
    assert "divergent.metal:8" in str(e.value)


def test_collectives_evaluated_by_every_lane_in_an_expression_are_accepted(cpu):
    src = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float t = simd_sum(lane < 4 ? v : 0.0f);               // conditions inside a collective's operand
    out[i] = t + (simd_sum(v) > 0.0f && lane < 16 ? 1.0f : v);   // a collective before ? and &&
}
"""
    x = np.random.default_rng(11).standard_normal(64).astype(np.float32)
    o = run(cpu, src, x, 1)[:, 0]
    for sg in range(2):
        v = lanes_of(x, sg)
        want = v[:4].sum() + np.where((v.sum() > 0) & (LANES < 16), 1.0, v)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32], want, rtol=1e-5, atol=1e-6)


UNIFORM_GUARD = """
struct Params {{ int tiles; int n; }};
constant bool skip_all [[function_constant(0)]];
float total(float v) {{ return simd_sum(v); }}
template <int T>
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              constant Params* params [[buffer(2)]], constant int& limit [[buffer(3)]],
              uint3 tg [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {{
    constexpr int H = T / 2;
    float v = x[i];
    if ({cond}) {{
        return;
    }}
    out[i] = v;
}}
template [[host_name("k")]] kernel void k<4>(device const float*, device float*, constant Params*, constant int&,
                                             uint3, uint, uint, uint);
"""


def test_a_collective_after_a_condition_the_simdgroup_shares_runs(cpu):
    """MLX's gather kernels return early with `params->tiles_n <= static_cast<int>(tid.x) || !f(...)`, f running
    collectives: every lane of a simdgroup computes the left operand alike, so all of them call f, or none."""
    cond = ("params->tiles <= static_cast<int>(tg.x) || int(sg) >= H + limit || skip_all || "
            "(v = total(v), false)")
    src = HEAD + UNIFORM_GUARD.format(cond=cond)
    fn = cpu.compile(src, name="uniform_guard.metal").function("k", constants={0: False})
    x = np.random.default_rng(12).standard_normal(256).astype(np.float32)
    out = np.full(256, -7.0, np.float32)
    params = np.array([3, 0], np.int32)    # threadgroups 0-2 go on
    cpu.dispatch_threadgroups(fn, (4, 1, 1), (64, 1, 1), [x, out, params, np.int32(0)])
    for tg in range(4):
        for sg in range(2):
            part = slice(tg * 64 + sg * 32, tg * 64 + sg * 32 + 32)
            want = np.full(32, -7.0, np.float32) if tg >= 3 or sg >= 2 else np.full(32, x[part].sum())
            np.testing.assert_allclose(out[part], want, rtol=1e-5)


@pytest.mark.parametrize("cond", ["lane < 3 || total(v) > 0.0f", "v > 0.0f || total(v) > 0.0f",
                                  "x[tg.x] > 0.0f || total(v) > 0.0f", "params->tiles <= int(i) || total(v) > 0.0f",
                                  "params->tiles <= int(tg.x) || (lane < 3 && total(v) > 0.0f)"])
def test_a_collective_after_a_condition_lanes_may_not_share_stays_refused(cpu, cond):
    src = HEAD + UNIFORM_GUARD.format(cond=cond)
    with pytest.raises(metile.MSLUnsupportedError, match="only some lanes may evaluate"):
        cpu.compile(src, name="varying_guard.metal")


def test_control_flow_nested_too_deeply_is_a_device_fault(cpu):
    depth = 33
    opens = "".join(f"if (x[i] > {-100 - k}.0f) {{ " for k in range(depth))
    src = f"""
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {{
    float v = x[i];
    {opens}v = simd_sum(v); {"}" * depth}
    out[i] = v;
}}
"""
    x = np.zeros(64, np.float32)
    with pytest.raises(metile.DeviceFault, match="nested too deeply") as e:
        run(cpu, src, x, 1)
    assert "divergent.metal:7" in str(e.value)


LAMBDA_AND_OPERATOR = """
struct acc {
    float v;
};
acc operator+(acc a, acc b) { return acc{simd_sum(a.v) + b.v}; }   // a collective where no name shows

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    auto total = [&](float v) {
        if (lane % 2 == 0) return simd_sum(v);
        return simd_max(v);
    };
    acc a{x[i]}, one{1.0f};
    acc r = lane < 10 ? acc{0.0f} : one;
    if (lane < 10) r = a + one; else r = one + a;   // two arms, one operator
    float t;
    if (lane < 20) t = total(x[i]); else t = total(-x[i]);
    out[i * 2] = r.v;
    out[i * 2 + 1] = t;
}
"""


def test_lambdas_and_operators_with_collectives_in_both_arms(cpu):
    x = np.random.default_rng(12).standard_normal(64).astype(np.float32)
    o = run(cpu, LAMBDA_AND_OPERATOR, x, 2)
    for sg in range(2):
        v = lanes_of(x, sg)
        lo = LANES < 10
        want_r = np.where(lo, v[lo].sum() + 1.0, 1.0 * (~lo).sum() + v)
        t = np.zeros(32)
        for arm, val in ((LANES < 20, v), (LANES >= 20, -v)):
            even, odd = arm & (LANES % 2 == 0), arm & (LANES % 2 == 1)
            t[even] = val[even].sum()
            t[odd] = val[odd].max()
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0], want_r, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 1], t, rtol=1e-5, atol=1e-5)


def test_loops_after_a_pragma_or_a_macro_get_their_guards(cpu):
    src = """
#define UNROLL_HINT
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float a = x[i], b = x[i];
    #pragma unroll
    for (uint it = 0; it < 2; ++it) {
        a = simd_sum(a) * 0.25f;
        if (lane < 16) b = simd_sum(b) * 0.5f;
    }
    UNROLL_HINT for (uint it = 0; it < 2; ++it) {
        a = simd_sum(a) * 0.25f;
        if (lane >= 8) b = simd_sum(b) * 0.5f;
    }
    out[i * 2] = a;
    out[i * 2 + 1] = b;
}
"""
    x = np.random.default_rng(13).standard_normal(64).astype(np.float32)
    o = run(cpu, src, x, 2)
    for sg in range(2):
        a, b = lanes_of(x, sg), lanes_of(x, sg)
        for arm in (LANES < 16, LANES >= 8):
            for _ in range(2):
                a[:] = a.sum() * 0.25
                b[arm] = b[arm].sum() * 0.5
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0], a, rtol=1e-5)
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 1], b, rtol=1e-5)


def test_an_inner_loop_whose_counter_the_body_changes_is_not_taken_for_a_fixed_one(cpu):
    src = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float c = 0.0f, d = 0.0f;
    for (uint j = 0; j < 2; ++j) {
        for (uint t = 0; t < 6; ++t) {     // odd lanes skip every other iteration: 3 trips, even lanes 6
            c += simd_sum(float(j + 1));
            t += lane % 2;
        }
    }
    for (uint j = 0; j < 2; ++j)
        for (int u = 0; u < 2; ++u) d += simd_sum(1.0f) * float(j + 1);   // the same trips for every lane
    out[i * 2] = c;
    out[i * 2 + 1] = d;
}
"""
    o = run(cpu, src, np.zeros(64, np.float32), 2)
    for sg in range(2):
        want_c = np.where(LANES % 2 == 0, (3 * 32 + 3 * 16) * (1 + 2), 3 * 32 * (1 + 2))
        np.testing.assert_array_equal(o[sg * 32:(sg + 1) * 32, 0], want_c)
        np.testing.assert_array_equal(o[sg * 32:(sg + 1) * 32, 1], 2 * 32 * (1 + 2))


AFTER_AN_EARLY_RETURN_OR_A_RAGGED_LOOP = """
struct acc { float v; };
acc operator+(acc a, acc b) { return acc{simd_sum(a.v) + b.v}; }   // any function may run a collective
void fill(thread float& t, uint lane) {                             // some lanes return before the loop
    if (lane < 8) { t = 0.0f; return; }
    for (int j = 0; j < 2; j++) { if (j == 1) t += 1.0f; }
}
float total(float v) { return simd_sum(v); }
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float t = x[i], s = 0.0f;
    fill(t, lane);
    out[i * 3] = total(t);                                           // every lane, after the early return
    #pragma clang loop unroll(full)
    for (uint j = 0; j < lane % 3; j++) s += total(float(j + 1));   // calls of a helper, lane-dependent trips
    out[i * 3 + 1] = s;
    out[i * 3 + 2] = total(t);                                       // every lane again, after the loop
}
"""


def test_lanes_meet_again_after_an_early_return_and_a_loop_of_calls(cpu):
    x = np.random.default_rng(14).standard_normal(64).astype(np.float32)
    o = run(cpu, AFTER_AN_EARLY_RETURN_OR_A_RAGGED_LOOP, x, 3)
    for sg in range(2):
        t = np.where(LANES < 8, 0.0, lanes_of(x, sg) + 1.0)
        trips = LANES % 3
        s = [sum((j + 1) * (trips > j).sum() for j in range(n)) for n in trips]
        np.testing.assert_allclose(o[sg * 32:(sg + 1) * 32, 0::2], t.sum(), rtol=1e-5)
        np.testing.assert_array_equal(o[sg * 32:(sg + 1) * 32, 1], s)


def test_a_guard_goes_before_an_indented_loop_pragma():
    from metile.metal.cpu.msl import translate

    cpp = translate(HEAD + AFTER_AN_EARLY_RETURN_OR_A_RAGGED_LOOP, "divergent.metal").cpp
    assert "#pragma clang loop unroll(full)\n    for (uint j" in cpp   # clang wants the loop right after it


CONSTRUCTOR = """
struct Loader {
    const int ld;
    float v;
    Loader(int ld_, float x) thread : ld(ld_) { v = simd_sum(x); }
};
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
    Loader l(4, x[i]);
    const int j = int(i);
    out[i] = (j > 2 ? float(j * l.ld) : 0.0f) + l.v;
}
"""


def test_a_member_read_beside_a_constructor_that_runs_a_collective_is_no_collective(cpu):
    # `Loader(...) thread : ld(ld_)`: the constructor's address-space word stands between its parameters and its
    # initializers; `ld` is a member, not a function that runs simd_sum, so reading it under `?:` is allowed
    x = np.arange(64, dtype=np.float32)
    out = run(cpu, CONSTRUCTOR, x, 1)[:, 0]
    sums = x.reshape(2, 32).sum(1).repeat(32)
    j = np.arange(64)
    np.testing.assert_array_equal(out, np.where(j > 2, j * 4.0, 0.0) + sums)


CONSTEXPR_HELPER = HEAD + """
struct Two { constexpr operator int() const { return 2; } };
template <typename S>
static constexpr float lane_sum(float v, S scale = S{}) {   // a default argument with braces
    return simd_sum(v) * float(int(scale));
}
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
    out[i] = lane_sum<Two>(x[i]);
}
"""


def test_a_constexpr_function_with_a_collective_is_compiled_without_constexpr(cpu):
    """A function that runs a collective gets the guards that order it (not literal types), and is never a constant
    expression: its `constexpr` goes (clang, as on a Mac, refuses a variable of a non-literal type in a constexpr
    function; MLX's steel GEMM and attention declare their fragment helpers so), also past a parameter list whose
    default argument holds braces."""
    from metile.metal.cpu.msl import translate

    tr = translate(CONSTEXPR_HELPER, "helper.metal")
    helper = next(line for line in tr.cpp.splitlines() if "lane_sum(float v" in line)
    assert "constexpr" not in helper and "static" in helper
    assert "struct Two { constexpr operator int()" in tr.cpp   # a function without collectives keeps it
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    fn = cpu.compile(CONSTEXPR_HELPER, name="helper.metal").function("k")
    cpu.dispatch_threads(fn, 32, 32, [x, out])
    np.testing.assert_array_equal(out, np.full(32, 2 * x.sum(), np.float32))
