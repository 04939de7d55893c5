"""Atomics in metile's language and under `triton.language`: `atomic_max`, `atomic_min`, `atomic_and`, `atomic_or`,
`atomic_xor` on i32 and u32 memory, `atomic_xchg` and f32 max and min too, each element combined once where the
mask holds, and a uniform scalar atomic once per program; the old value of an atomic on one address (a spin lock on
`atomic_cas`, a ticket counter); the types Metal's atomics lack are refused at the line."""

from __future__ import annotations

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError
from metile.ir import AtomicAdd, AtomicOp, parse, pretty

pytestmark = pytest.mark.usefixtures("on_cpu")

OPS = {"max": np.maximum, "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@metile.kernel
def combine(Acc, X, n, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    x = metile.load(X + offs, mask=ok)
    slot = Acc + offs % 4                        # many elements meet at each of 4 addresses
    if OP == "max":
        metile.atomic_max(slot, x, mask=ok)
    elif OP == "min":
        metile.atomic_min(slot, x, mask=ok)
    elif OP == "and":
        metile.atomic_and(slot, x, mask=ok)
    elif OP == "or":
        metile.atomic_or(slot, x, mask=ok)
    else:
        metile.atomic_xor(slot, x, mask=ok)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("op", sorted(OPS))
def test_atomic_combines_every_element_once(op, dtype):
    n = 1000
    x = np.random.default_rng(5).integers(0, 2**31 - 1, n).astype(dtype)
    if dtype is np.int32:
        x[::7] = -x[::7]
    start = {"and": ~dtype(0), "min": np.iinfo(dtype).max}.get(op, dtype(0))
    acc = np.full(4, start, dtype)
    combine[(metile.cdiv(n, 128),)](acc, x, n, OP=op, BLOCK=128)
    want = np.array([OPS[op].reduce(np.concatenate([[start], x[i::4]])) for i in range(4)], dtype)
    assert acc.tolist() == want.tolist()


@metile.kernel
def swap(Flags, Out, value):
    metile.atomic_xchg(Flags + metile.program_id(0), value)   # a uniform scalar: once per program
    metile.atomic_add(Out, 1)


def test_xchg_of_f32_and_uniform_scalars_run_once_per_program():
    flags, out = np.zeros(3, np.float32), np.zeros(1, np.int32)
    swap[(3,)](flags, out, 2.5)
    assert flags.tolist() == [2.5] * 3 and out.tolist() == [3]


@metile.kernel
def float_extremes(Hi, Lo, X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.atomic_max(Hi + metile.arange(0, BLOCK) % 2, x)
    metile.atomic_min(Lo + metile.arange(0, BLOCK) % 2, x)


@pytest.mark.parametrize("start", [-np.inf, -5.0, -0.0, 0.0, 3.0])
def test_f32_max_and_min_are_built_from_integer_atomics(start):
    """Metal's atomic_float has no max or min: the emitter orders floats by their bits (signed when the sign bit is
    clear, unsigned and reversed when it is set), which gives -0.0 as the larger of -0.0 and a negative float."""
    x = np.array([-1.5, -0.0, 2.0, -7.0, 0.0, -0.0, -3.0, -0.5], np.float32)
    hi, lo = np.full(2, start, np.float32), np.full(2, -start, np.float32)
    float_extremes[(1,)](hi, lo, x, BLOCK=8)
    order = lambda v: (float(v), not np.signbit(v))    # -0.0 below +0.0  # noqa: E731
    for i in range(2):
        want_hi = max([np.float32(start), *x[i::2]], key=order)
        want_lo = min([np.float32(-start), *x[i::2]], key=order)
        assert order(hi[i]) == order(want_hi) and order(lo[i]) == order(want_lo)


@metile.kernel
def half_max(Acc, X):
    metile.atomic_max(Acc, metile.load(X))


@metile.kernel
def float_and(Acc, X):
    metile.atomic_and(Acc, metile.load(X))


def test_types_metal_atomics_lack_are_refused_at_the_line():
    with pytest.raises(KernelTypeError, match="atomic_max works on i32, u32, f32, f16 and bf16 memory, not i16: Metal "
                                              r"has no atomics narrower than 32 bits \(metile builds those of f16 and "
                                              r"bf16\)") as e:
        half_max[(1,)](np.zeros(1, np.int16), np.zeros(1, np.int16))
    assert e.value.loc.line == half_max.fn.__code__.co_firstlineno + 2
    with pytest.raises(KernelTypeError, match="no 64-bit atomic max"):
        half_max[(1,)](np.zeros(1, np.int64), np.zeros(1, np.int64))
    with pytest.raises(KernelTypeError, match="atomic_and works on i32 and u32 memory, not f32"):
        float_and[(1,)](np.zeros(1, np.float32), np.zeros(1, np.float32))


def test_the_op_prints_and_reads_back():
    k = combine.trace(np.zeros(4, np.int32), np.zeros(8, np.int32), 8, OP="xor", BLOCK=8)
    assert "atomic_xor " in pretty(k)
    assert parse(pretty(k)) == k
    ops = [s.op for s in k.body if isinstance(s, AtomicAdd)]
    assert ops == [AtomicOp.XOR]


@triton.jit
def triton_atomics(Lock, Hist, X, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.atomic_max(Hist + offs % 2, x, sem="acq_rel", scope="gpu")
    tl.atomic_or(Hist + 2, x, mask=x > 0)
    tl.atomic_xchg(Lock, 7)


@triton.jit
def triton_tile_old_values(Counter, Out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(Counter + offs % 2, 1, sem="relaxed")
    tl.store(Out + offs, old)


def test_triton_atomics_return_the_old_values_of_a_tile():
    counter, out = np.zeros(2, np.int32), np.zeros(16, np.int32)
    triton_tile_old_values[(1,)](counter, out, BLOCK=16)
    assert counter.tolist() == [8, 8] and sorted(out[::2].tolist()) == sorted(out[1::2].tolist()) == list(range(8))


def test_triton_atomics_as_statements():
    x = np.array([3, -1, 8, 2, 5, 9, -4, 1], np.int32)
    lock, hist = np.zeros(1, np.int32), np.full(3, -100, np.int32)
    hist[2] = 0
    triton_atomics[(1,)](lock, hist, x, BLOCK=8)
    assert hist.tolist() == [8, 9, int(np.bitwise_or.reduce(x[x > 0]))] and lock.tolist() == [7]


@triton.jit
def locked_rows(Lock, Total, Count, X, BLOCK: tl.constexpr):
    """Tutorial 05's layer-norm backward scheme: a spin lock around a read-modify-write of shared rows."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + pid * BLOCK + cols)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        x += tl.load(Total + cols)
    tl.store(Total + cols, x)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


def test_a_spin_lock_serialises_programs():
    x = np.random.default_rng(6).integers(-100, 100, (48, 128)).astype(np.int32)
    lock, count, total = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(128, np.int32)
    locked_rows[(48,)](lock, total, count, x, BLOCK=128)
    assert total.tolist() == x.sum(0).tolist() and lock.tolist() == [0] and count.tolist() == [1]


@triton.jit
def tickets(Counter, Out, BLOCK: tl.constexpr):
    t = tl.atomic_add(Counter, 1)                  # once per program: every program its own ticket
    tl.store(Out + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), t)


def test_a_ticket_counter_gives_each_program_its_own_ticket():
    counter, out = np.zeros(1, np.int32), np.zeros((100, 64), np.int32)
    tickets[(100,)](counter, out, BLOCK=64)
    assert counter.tolist() == [100]
    assert sorted(out[:, 0].tolist()) == list(range(100)) and (out == out[:, :1]).all()


@triton.jit
def count_tries(C, Out):
    n = 0
    while tl.atomic_add(C, 1) < 5:                 # the condition runs once per test, its atomic with it
        n += 1
    tl.store(Out, n)


def test_a_while_condition_with_an_atomic_runs_once_per_test():
    c, out = np.zeros(1, np.int32), np.zeros(1, np.int32)
    count_tries[(1,)](c, out)
    assert c.tolist() == [6] and out.tolist() == [5]


@metile.kernel
def old_values(Counter, Flags, Out, Cas):
    old = metile.atomic_add(Counter, 2)
    swapped = metile.atomic_cas(Flags, 0, 7)           # 0 -> 7 once: the program that sees 0 swapped
    again = metile.atomic_cas(Flags + 1, 5, 9)         # never equal: no swap, the old value is 3
    hi = metile.atomic_max(Counter + 1, metile.program_id(0))
    metile.store(Out + metile.program_id(0), old + 0 * hi)
    metile.store(Cas + metile.program_id(0) * 2, swapped)
    metile.store(Cas + metile.program_id(0) * 2 + 1, again)


def test_old_values_in_metiles_language():
    counter, flags = np.zeros(2, np.int32), np.array([0, 3], np.int32)
    out, cas = np.zeros(8, np.int32), np.zeros(16, np.int32)
    old_values[(8,)](counter, flags, out, cas)
    assert sorted(out.tolist()) == list(range(0, 16, 2)) and counter.tolist() == [16, 7]
    assert sorted(cas[::2].tolist()) == [0] + [7] * 7 and flags.tolist() == [7, 3] and (cas[1::2] == 3).all()


@metile.kernel
def tile_old_values(Counter, Out, Swapped, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    old = metile.atomic_add(Counter + offs % 3, 1, mask=offs < 100)   # many elements meet at each address
    metile.store(Out + offs, old)
    got = metile.atomic_cas(Swapped + offs % 2, 0, offs + 1)          # one element per address swaps
    metile.store(Out + 128 + offs, got)


def test_the_old_values_of_a_tile():
    counter, out, swapped = np.zeros(3, np.int32), np.full(256, -1, np.int32), np.zeros(2, np.int32)
    tile_old_values[(2,)](counter, out, swapped, BLOCK=64)
    assert counter.tolist() == [34, 33, 33]
    for a in range(3):                              # each address's elements saw 0, 1, 2, ... once each
        assert sorted(out[:100][np.arange(100) % 3 == a].tolist()) == list(range(counter[a]))
    assert (out[100:128] == 0).all()                # masked off: 0
    got = out[128:]
    for a in range(2):
        mine = got[np.arange(128) % 2 == a]
        assert (mine == 0).sum() == 1 and (mine[mine != 0] == swapped[a]).all() and swapped[a] % 2 == (a + 1) % 2


@triton.jit
def handoff(Flag, Data, Out, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid == 0:
        tl.store(Data + offs, offs * 3)
        tl.debug_barrier()                          # the data is stored before the flag is raised
        tl.atomic_xchg(Flag, 1)
    else:
        while tl.load(Flag, volatile=True) == 0:    # a spin-wait: the flag is read from memory every time
            pass
        tl.store(Out + offs, tl.load(Data + offs, volatile=True))


def test_volatile_loads_read_memory_every_time():
    flag, data, out = np.zeros(1, np.int32), np.zeros(64, np.int32), np.zeros(64, np.int32)
    msl = handoff.warmup(flag, data, out, BLOCK=64, grid=(2,)).asm["msl"]
    assert "= *(volatile device int*)(Flag);" in msl                  # not hoisted out of the loop by a compiler
    assert "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);" in msl
    assert "int4" not in msl                                           # element by element, not in vectors
    handoff[(2,)](flag, data, out, BLOCK=64)
    assert out.tolist() == [3 * i for i in range(64)] and flag.tolist() == [1]


def test_a_volatile_load_prints_and_reads_back():
    k = handoff.kernel.trace(np.zeros(1, np.int32), np.zeros(64, np.int32), np.zeros(64, np.int32), BLOCK=64)
    text = pretty(k)
    assert ", volatile :" in text and parse(text) == k


@metile.kernel
def claim_f32(Slots, Won, cmp, BLOCK: metile.constexpr):
    """Each program tries to swap `cmp` for its id + 1 in each slot; Won[pid, slot] gets the old element."""
    pid = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    old = metile.atomic_cas(Slots + offs, metile.full((BLOCK,), cmp, "f32"), metile.full((BLOCK,), pid + 1, "f32"))
    metile.store(Won + pid * BLOCK + offs, old)


@triton.jit
def triton_claim_f32(Slots, Won, cmp, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(Slots + offs, tl.full((BLOCK,), cmp, tl.float32), tl.full((BLOCK,), pid + 1, tl.float32))
    tl.store(Won + pid * BLOCK + offs, old)


@pytest.mark.parametrize("lang", ["metile", "triton"])
def test_f32_compare_and_swap_compares_bits_and_one_program_wins_each_slot(lang):
    """As Triton's compare-and-swap on GPUs (a swap of the 32-bit word): -0.0 does not match +0.0, a NaN matches a
    NaN of the same bits."""
    programs = 24
    nan = np.float32(np.nan)
    slots = np.array([0.0, 0.0, -0.0, 2.5, nan, 0.0, 0.0, 0.0], np.float32)
    won = np.zeros((programs, 8), np.float32)
    launch = claim_f32 if lang == "metile" else triton_claim_f32
    launch[(programs,)](slots, won, 0.0, BLOCK=8)
    for s in (0, 1, 5, 6, 7):   # +0.0 matched once: the winner saw +0.0, every later program the winner's id
        winners = np.flatnonzero(won[:, s].view(np.uint32) == 0)
        assert len(winners) == 1 and slots[s] == winners[0] + 1
        assert (won[np.arange(programs) != winners[0], s] == winners[0] + 1).all()
    assert slots[2:3].view(np.uint32) == [0x80000000] and (won[:, 2].view(np.uint32) == 0x80000000).all()
    assert slots[3] == 2.5 and (won[:, 3] == 2.5).all()
    assert np.isnan(slots[4]) and np.isnan(won[:, 4]).all()   # a NaN never equals +0.0
    swapped = np.array([nan], np.float32)
    claim_f32[(1,)](swapped, np.zeros((1, 1), np.float32), float("nan"), BLOCK=1)
    assert swapped[0] == 1.0                                  # the same NaN bits match
