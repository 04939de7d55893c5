"""Atomics on f16 and bf16 memory, in metile's language (add, exchange, max, min, compare-and-swap) and under
`triton.language` (`tl.atomic_add` and `tl.atomic_cas`, the two Triton allows there): compare-and-swap loops on the
32-bit word holding the element, which change only the element's half. Counts under contention are exact (small
integers), float sums agree with a sequential model, the old values are those of 32-bit atomics, a neighbour in the
same word is never disturbed, the word is found from the element's index in its parameter's array (a view at an odd
offset, an odd pointer offset, the last element of an odd-length array, under the sanitizer), and the Metal device
refuses an array of another library that does not start 4-byte aligned. What Triton or Metal does not allow is
refused at the line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.emit.spell import EmitError
from metile.frontend.errors import KernelArgumentError, KernelTypeError
from tests.test_metal_hardening import MetalTensor

pytestmark = pytest.mark.usefixtures("on_cpu")

BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = [pytest.param(np.dtype(np.float16), id="f16"), pytest.param(BF16, id="bf16")]
TORCH = {np.dtype(np.float16): torch.float16, BF16: torch.bfloat16}


def bits(a: np.ndarray) -> list[int]:
    return a.view(np.uint16).tolist()


@metile.kernel
def add_at(Idx, Out, Old, V, n, KEEP: metile.constexpr, BLOCK: metile.constexpr):
    """`Out[Idx[i]] += V[i]` for every i < n, keeping each atomic's old element in `Old[i]` when KEEP."""
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    i = metile.load(Idx + offs, mask=ok)
    v = metile.load(V + offs, mask=ok)
    if KEEP:
        old = metile.atomic_add(Out + i, v, mask=ok)
        metile.store(Old + offs, old, mask=ok)
    else:
        metile.atomic_add(Out + i, v, mask=ok)


def spread(m: int, per: int, seed: int) -> np.ndarray:
    """Each of `m` indexes `per` times, shuffled."""
    idx = np.repeat(np.arange(m, dtype=np.int32), per)
    np.random.default_rng(seed).shuffle(idx)
    return idx


@pytest.mark.parametrize("keep", [True, False], ids=["value", "statement"])
@pytest.mark.parametrize("dtype", HALVES)
def test_counts_under_contention_are_exact(dtype, keep):
    """11 elements (both halves of five words, and the low half of the last word of an odd-length array), each
    incremented 200 times by threads of 18 programs: small integers, exact in either type whatever the order."""
    m, per = 11, 200
    idx = spread(m, per, 1)
    n = idx.size
    out, old = np.zeros(m, dtype), np.full(n, -1, dtype)
    add_at[(metile.cdiv(n, 128),)](idx, out, old, np.ones(n, dtype), n, KEEP=keep, BLOCK=128)
    assert out.astype(np.float32).tolist() == [float(per)] * m
    if keep:   # as for 32-bit atomics: each add of an element saw a different old value
        for b in range(m):
            assert sorted(old[idx == b].astype(np.float32).tolist()) == list(range(per))
    else:
        assert (old == -1).all()


@pytest.mark.parametrize("dtype", HALVES)
def test_float_sums_agree_with_a_sequential_model(dtype):
    """Random values added in whatever order the threads run, against numpy adding them one at a time in the array's
    order, each sum rounded to the memory's type: equal within the rounding of the adds each element takes."""
    rng = np.random.default_rng(2)
    m, per = 13, 40
    idx = spread(m, per, 3)
    n = idx.size
    v = rng.standard_normal(n).astype(dtype)
    start = rng.standard_normal(m).astype(dtype)
    out = start.copy()
    add_at[(metile.cdiv(n, 64),)](idx, out, np.zeros(n, dtype), v, n, KEEP=False, BLOCK=64)
    model = start.copy()
    for i, x in zip(idx, v):
        model[i] = dtype.type(np.float32(model[i]) + np.float32(x))
    eps = float(ml_dtypes.finfo(dtype).eps)
    tol = per * eps * (np.abs(start.astype(np.float32)) + np.abs(v.astype(np.float32)).sum() / m * 4)
    got, want = out.astype(np.float64), model.astype(np.float64)
    assert (np.abs(got - want) <= tol).all(), (got, want)
    exact = start.astype(np.float64) + np.bincount(idx, v.astype(np.float64), minlength=m)
    assert (np.abs(got - exact) <= tol).all()


@metile.kernel
def add_every_other(Out, n, PARITY: metile.constexpr, BLOCK: metile.constexpr):
    """Each program adds 1 to the elements of Out of parity PARITY (or to all of them, and each thread a different
    element of a word than its neighbour's, for PARITY 2): the halves of one word change in different threads."""
    offs = metile.arange(0, BLOCK) % n
    if PARITY == 2:
        ok = (offs + metile.program_id(0)) % 2 == 0
    else:
        ok = offs % 2 == PARITY
    metile.atomic_add(Out + offs, 1.0, mask=ok)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("parity", [0, 1])
def test_the_other_half_of_the_word_is_never_disturbed(dtype, parity):
    """The half of the word an atomic does not address keeps its bits exactly (a NaN with a payload, -0.0, the
    largest finite value), while the addressed half takes 24 adds of 1."""
    n = 9
    out = np.zeros(n, dtype)
    pattern = np.array([0x7E01, 0x8000, 0x7BFF if dtype == np.float16 else 0x7F7F, 0x0001], np.uint16)
    others = [i for i in range(n) if i % 2 != parity]
    out.view(np.uint16)[others] = np.resize(pattern, len(others))
    before = out.copy()
    add_every_other[(24,)](out, n, PARITY=parity, BLOCK=64)
    assert bits(out[others]) == bits(before[others])
    mine = [i for i in range(n) if i % 2 == parity]
    assert out[mine].astype(np.float32).tolist() == [24.0 * len(range(i, 64, n)) for i in mine]


@pytest.mark.parametrize("dtype", HALVES)
def test_both_halves_of_a_word_added_at_once_from_different_threads(dtype):
    n = 10
    out = np.zeros(n, dtype)
    add_every_other[(48,)](out, n, PARITY=2, BLOCK=64)
    # program p adds to offs = t % n for threads t with (t % n + p) even: element i, reached by len(range(i, 64, n))
    # threads, in the 24 programs of i's parity
    assert out.astype(np.float32).tolist() == [24.0 * len(range(i, 64, n)) for i in range(n)]


@metile.kernel
def add_after(Out, first, count, BLOCK: metile.constexpr):
    """Adds 1 to Out[first + j] for j < count, through a pointer offset by `first` before the tile's offsets."""
    base = Out + first
    offs = metile.arange(0, BLOCK)
    metile.atomic_add(base + offs, 1.0, mask=offs < count)


@pytest.mark.parametrize("dtype", HALVES)
def test_an_odd_pointer_offset_and_a_view_at_an_odd_offset(dtype):
    """The word is counted from the parameter's array: an odd scalar offset inside the kernel, and a torch view
    starting at an odd element (the CPU device binds a copy of it at the start of a buffer), both land on the right
    elements, and the elements outside the view keep their values."""
    out = np.zeros(9, dtype)
    add_after[(3,)](out, 3, 5, BLOCK=8)
    assert out.astype(np.float32).tolist() == [0, 0, 0, 3, 3, 3, 3, 3, 0]
    whole = torch.arange(12, dtype=TORCH[dtype])
    view = whole[1:10]
    assert view.storage_offset() == 1 and view.data_ptr() % 4 == 2
    add_after[(5,)](view, 2, 7, BLOCK=8)
    want = torch.arange(12, dtype=torch.float32)
    want[3:10] += 5
    assert whole.float().tolist() == want.tolist()


@pytest.mark.parametrize("dtype", HALVES)
def test_the_last_element_of_an_odd_length_array_under_the_sanitizer(dtype):
    """The word of the last element of an array of 7 reaches past the array; the sanitizer does not object, and the
    elements before it are unchanged, for a numpy array and for a metile.Buffer."""
    for out in (np.arange(7).astype(dtype), metile.Buffer(np.arange(7).astype(dtype))):
        add_after[(6,)](out, 6, 1, BLOCK=8, sanitize=True)
        metile.synchronize()
        got = out if isinstance(out, np.ndarray) else out.numpy()
        assert got.astype(np.float32).tolist() == [0, 1, 2, 3, 4, 5, 12]


@metile.kernel
def tickets(Counter, Out):
    ticket = metile.atomic_add(Counter + 1, 1.0)   # a uniform scalar: once per program, its old value for all
    metile.store(Out + metile.program_id(0), ticket)
    metile.atomic_add(Counter, 2.0)


@pytest.mark.parametrize("dtype", HALVES)
def test_a_scalar_atomic_runs_once_per_program_and_gives_each_its_ticket(dtype):
    counter, out = np.array([0, 0, 9], dtype), np.zeros(60, dtype)
    tickets[(60,)](counter, out)
    assert counter.astype(np.float32).tolist() == [120, 60, 9]
    assert sorted(out.astype(np.float32).tolist()) == list(range(60))


@metile.kernel
def combine16(Acc, X, Old, n, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    x = metile.load(X + offs, mask=ok)
    slot = Acc + offs % 5
    if OP == "max":
        old = metile.atomic_max(slot, x, mask=ok)
    elif OP == "min":
        old = metile.atomic_min(slot, x, mask=ok)
    else:
        old = metile.atomic_xchg(slot, x, mask=ok)
    metile.store(Old + offs, old, mask=ok)


def order_key(a: np.ndarray) -> np.ndarray:
    """The bits of 16-bit floats as integers of the same order, -0.0 below +0.0."""
    b = a.view(np.uint16).astype(np.int64)
    return np.where(b & 0x8000, 0xFFFF - b, b | 0x8000)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("op", ["max", "min", "xchg"])
def test_max_min_and_exchange_in_metiles_language(dtype, op):
    rng = np.random.default_rng(4)
    n = 600
    x = (rng.standard_normal(n) * 100).astype(dtype)
    x[::7] = -0.0
    x[3::11] = 0.0
    acc = np.array([0.0, -0.0, 1.0, -1.0, 5.0], dtype)
    start = acc.copy()
    old = np.zeros(n, dtype)
    combine16[(metile.cdiv(n, 128),)](acc, x, old, n, OP=op, BLOCK=128)
    for s in range(5):
        seen = np.concatenate([start[s:s + 1], x[s::5]])
        if op == "xchg":   # the old values and the final one: the start and every exchanged value, each once
            assert sorted(bits(np.concatenate([old[s::5], acc[s:s + 1]]))) == sorted(bits(seen))
        else:
            pick = np.argmax if op == "max" else np.argmin
            assert bits(acc[s:s + 1]) == bits(seen[pick(order_key(seen)):][:1])
            assert all(np.isin(bits(old[s::5]), bits(seen)))


@metile.kernel
def claim(Slots, Won, cmp, BLOCK: metile.constexpr):
    """Each program tries to swap `cmp` for its id + 1 in each slot; Won[pid, slot] gets the old element."""
    pid = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    v = metile.full((BLOCK,), pid + 1, "f32")
    old = metile.atomic_cas(Slots + offs, metile.full((BLOCK,), cmp, "f32"), v)
    metile.store(Won + pid * BLOCK + offs, old)


@pytest.mark.parametrize("dtype", HALVES)
def test_compare_and_swap_compares_bits_and_one_program_wins_each_slot(dtype):
    programs, k = 20, 5
    slots = np.array([0.0, 0.0, -0.0, 0.0, 7.0], dtype)
    won = np.zeros((programs, k), dtype)
    claim[(programs,)](slots, won, 0.0, BLOCK=k)
    for s in (0, 1, 3):   # +0.0 matched once: the winner saw +0.0, every later program the winner's id
        winners = np.flatnonzero(bits(won[:, s]) == np.uint16(0))
        assert len(winners) == 1 and float(slots[s]) == winners[0] + 1
        assert (won[np.arange(programs) != winners[0], s].astype(np.float32) == winners[0] + 1).all()
    assert bits(slots[2:3]) == [0x8000] and bits(won[:, 2]) == [0x8000] * programs   # -0.0 is not +0.0's bits
    assert float(slots[4]) == 7.0 and (won[:, 4].astype(np.float32) == 7.0).all()


def test_the_msl_is_a_loop_on_the_word_of_the_parameters_array():
    n = 8
    k = add_at.compile(np.zeros(n, np.int32), np.zeros(4, BF16), np.zeros(n, BF16), np.zeros(n, BF16), n,
                       KEEP=True, BLOCK=8)
    msl = k.msl
    assert "mt_atomic_add_bfloat_device(Out, " in msl
    assert "device atomic_uint* word = (device atomic_uint*)(p - (i & 1));" in msl
    assert "atomic_compare_exchange_weak_explicit(word, &old, next, memory_order_relaxed, memory_order_relaxed)" in msl
    assert "device bfloat* Out" in msl and "device const bfloat* V" in msl


# -- triton.language --------------------------------------------------------------------------------------------

@triton.jit
def triton_scatter_add(Idx, Out, Old, V, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    old = tl.atomic_add(Out + tl.load(Idx + offs, mask=ok), tl.load(V + offs, mask=ok), mask=ok, sem="relaxed")
    tl.store(Old + offs, old, mask=ok)


@triton.jit
def triton_cas(Slots, Won, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(Slots + offs, 0.0, 1.0 + tl.program_id(0))
    tl.store(Won + tl.program_id(0) * BLOCK + offs, old)


@pytest.mark.parametrize("dtype", HALVES)
def test_triton_atomic_add_and_cas_on_16_bit_memory(dtype):
    m, per = 7, 100
    idx = spread(m, per, 5)
    n = idx.size
    out, old = torch.zeros(m, dtype=TORCH[dtype]), torch.zeros(n, dtype=TORCH[dtype])
    triton_scatter_add[(metile.cdiv(n, 64),)](torch.from_numpy(idx), out, old, torch.ones(n, dtype=TORCH[dtype]), n,
                                              BLOCK=64)
    assert out.float().tolist() == [float(per)] * m
    for b in range(m):
        assert sorted(old[torch.from_numpy(idx) == b].float().tolist()) == list(range(per))
    slots, won = torch.zeros(4, dtype=TORCH[dtype]), torch.zeros(6, 4, dtype=TORCH[dtype])
    triton_cas[(6,)](slots, won, BLOCK=4)
    for s in range(4):
        winner = int(slots[s]) - 1
        assert won[winner, s] == 0 and (won[torch.arange(6) != winner, s] == winner + 1).all()


@triton.jit
def triton_other_atomic(P, X, OP: tl.constexpr):
    x = tl.load(X)
    if OP == "max":
        tl.atomic_max(P, x)
    elif OP == "xchg":
        tl.atomic_xchg(P, x)
    else:
        tl.atomic_and(P, x)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("op, line", [("max", 4), ("xchg", 6), ("and", 8)])
def test_triton_refuses_the_atomics_it_does_not_allow_on_16_bit_memory(dtype, op, line):
    p = torch.zeros(1, dtype=TORCH[dtype])
    with pytest.raises(KernelTypeError, match=f"tl.atomic_{op} does not take {'f16' if dtype == np.float16 else 'bf16'}"
                                              " memory: Triton allows tl.atomic_add and tl.atomic_cas on fp16 and "
                                              "bf16") as e:
        triton_other_atomic[(1,)](p, p, OP=op)
    assert e.value.loc.line == triton_other_atomic.fn.__code__.co_firstlineno + line


# -- refusals in metile's language -------------------------------------------------------------------------------

@metile.kernel
def bitwise16(Acc, X):
    metile.atomic_or(Acc, metile.load(X))


@metile.kernel
def add16(Acc, X):
    metile.atomic_add(Acc, metile.load(X))


@metile.kernel
def shared16(Out, BLOCK: metile.constexpr):
    tmp = metile.shared(BLOCK, "f16")
    metile.atomic_add(tmp + metile.arange(0, BLOCK), 1.0)


@metile.kernel
def either16(A, B, which, BLOCK: metile.constexpr):
    p = A
    if which > 0:
        p = B
    metile.atomic_add(p + metile.arange(0, BLOCK), 1.0)


def test_what_16_bit_atomics_cannot_do_is_refused_at_the_line():
    with pytest.raises(KernelTypeError, match="atomic_or works on i32 and u32 memory, not bf16: a bitwise atomic "
                                              "takes integers") as e:
        bitwise16[(1,)](np.zeros(1, BF16), np.zeros(1, BF16))
    assert e.value.loc.line == bitwise16.fn.__code__.co_firstlineno + 2
    with pytest.raises(KernelTypeError, match="atomic_add works on .* memory, not i16: Metal has no atomics narrower "
                                              r"than 32 bits \(metile builds those of f16 and bf16\)"):
        add16[(1,)](np.zeros(1, np.int16), np.zeros(1, np.int16))
    with pytest.raises(KernelTypeError, match="atomic_add on f16 works on device memory only") as e:
        shared16[(1,)](np.zeros(8, np.float16), BLOCK=8)
    assert e.value.loc.line == shared16.fn.__code__.co_firstlineno + 3
    with pytest.raises(EmitError, match="needs a pointer into the array of one pointer parameter") as e:
        either16[(1,)](np.zeros(8, np.float16), np.zeros(8, np.float16), 1, BLOCK=8)
    assert e.value.loc.line == either16.fn.__code__.co_firstlineno + 5


# -- the Metal device (the stand-in shim, replaying the MSL on the CPU device) ----------------------------------

def test_the_metal_device_refuses_an_array_that_does_not_start_4_byte_aligned(stub, make_device, monkeypatch):
    import importlib

    from metal_stub import cpu_device_executor

    kernel_module = importlib.import_module("metile.kernel")
    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(add_after.fn)
    mem = dev.allocate(64)
    view = np.frombuffer(stub.ffi.buffer(mem.ptr, 64), np.uint16)
    with pytest.raises(KernelArgumentError, match="argument 'Out' starts 6 bytes into its Metal buffer, not at a "
                                                  "multiple of 4 bytes: an atomic on its 16-bit elements") as e:
        k[(1,)](MetalTensor(mem, 9, 3, "bfloat16"), 0, 4, BLOCK=8)
    assert e.value.loc.line == add_after.fn.__code__.co_firstlineno + 1   # its parameter
    assert stub.calls("commands_encode") == []
    k[(2,)](MetalTensor(mem, 9, 4, "bfloat16"), 1, 3, BLOCK=8)   # 8 bytes in: bound, and run in place
    dev.synchronize()
    assert not stub.errors, stub.errors
    assert view[:16].view(BF16).astype(np.float32).tolist() == [0] * 5 + [2] * 3 + [0] * 8
