"""`emit_msl`: goldens for every kernel here, and each one compiled and run on the CPU device against numpy.

Goldens live in `tests/golden/emit/<case>.metal` (the exact emitted text); `pytest --update-golden`
rewrites them for review. The Metal IR examples of `tests/test_ir_examples.py` are emitted as they are;
the hand-built kernels below group the remaining node kinds (operators on each dtype, builtins,
control flow, atomics, barriers, simd and vector nodes) into a few kernels, since each distinct kernel
costs a compile.
"""

from __future__ import annotations

import gc
import re
from pathlib import Path

import numpy as np
import pytest
from test_ir_examples import METAL_EXAMPLES, add, f32, i32, let, mul, ptr, scalar

import metile
from metile.emit.facts import (
    ADMITTED_METAL,
    CHILDREN,
    LEAVES,
    bindings,
    builtins_used,
    c_names,
    distinct_nodes,
    scan,
    use_counts,
    value_children,
    written_params,
)
from metile.emit.msl import _Emitter, emit_msl
from metile.emit.spell import _LOWER_MACROS, _MACRO_LIKE, EmitError, c_identifier, function_name, literal
from metile.ir import (
    AddPtr,
    AtomicAdd,
    Barrier,
    Binary,
    BinOp,
    Builtin,
    BuiltinKind,
    Cast,
    CmpOp,
    Compare,
    Const,
    DType,
    Extract,
    Fence,
    For,
    If,
    Kernel,
    Load,
    MakeVector,
    MetileError,
    Param,
    ReduceOp,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Splat,
    Stage,
    Store,
    TileType,
    Unary,
    UnOp,
    Value,
    Var,
    VecLoad,
    VecStore,
    Where,
    While,
    children,
    parse,
    pretty,
    verify,
)

GOLDEN = Path(__file__).parent / "golden" / "emit"
F32, F16, I32, U32, U8, I16, BOOL = DType.F32, DType.F16, DType.I32, DType.U32, DType.U8, DType.I16, DType.BOOL
TPIG = BuiltinKind.THREAD_POSITION_IN_GRID

FLOAT_BINOPS = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.REM, BinOp.POW, BinOp.MAX, BinOp.MIN]
FLOAT_UNOPS = [UnOp.NEG, UnOp.EXP, UnOp.EXP2, UnOp.LOG, UnOp.LOG2, UnOp.SQRT, UnOp.RSQRT, UnOp.ABS, UnOp.TANH,
               UnOp.SIN, UnOp.COS, UnOp.FLOOR, UnOp.CEIL]
CMPOPS = list(CmpOp)
INT_BINOPS = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.TRUNCDIV, BinOp.REM, BinOp.AND, BinOp.OR, BinOp.XOR,
              BinOp.MAX, BinOp.MIN]

NP_BIN = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.DIV: np.divide,
          BinOp.REM: np.fmod, BinOp.POW: np.power, BinOp.MAX: np.maximum, BinOp.MIN: np.minimum,
          BinOp.AND: np.bitwise_and, BinOp.OR: np.bitwise_or, BinOp.XOR: np.bitwise_xor}
NP_UN = {UnOp.NEG: np.negative, UnOp.EXP: np.exp, UnOp.EXP2: np.exp2, UnOp.LOG: np.log, UnOp.LOG2: np.log2,
         UnOp.SQRT: np.sqrt, UnOp.RSQRT: lambda a: 1 / np.sqrt(a), UnOp.ABS: np.abs, UnOp.TANH: np.tanh,
         UnOp.SIN: np.sin, UnOp.COS: np.cos, UnOp.FLOOR: np.floor, UnOp.CEIL: np.ceil}
NP_CMP = {CmpOp.LT: np.less, CmpOp.LE: np.less_equal, CmpOp.GT: np.greater, CmpOp.GE: np.greater_equal,
          CmpOp.EQ: np.equal, CmpOp.NE: np.not_equal}


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def compile_fn(cpu, k: Kernel):
    return cpu.compile(emit_msl(k), name=f"{k.name}.metal").function(function_name(k.name))


def tid_let(name: str = "tid", kind: BuiltinKind = TPIG):
    return let(name, Cast(Builtin(kind, 0), I32))


def stores(out, tid, values) -> list[Store]:
    """`out[tid * len(values) + j] = values[j]` for each j."""
    n = len(values)
    return [Store(AddPtr(out, add(mul(tid, i32(n)), i32(j))), v) for j, v in enumerate(values)]


def trunc_div(a, b):
    return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(a.dtype)


# ---- hand-built kernels


def float_ops() -> Kernel:
    """Every float operator on f32, literals (0.1, inf, nan, -0.0), `Where`, and f16 arithmetic and casts."""
    X, Y, H, Out, HOut = ptr("X", 0), ptr("Y", 1), ptr("H", 2, F16), ptr("Out", 3), ptr("HOut", 4, F16)
    s_tid, tid = tid_let()
    s_x, x = let("x", Load(AddPtr(X, tid)))
    s_y, y = let("y", Load(AddPtr(Y, tid)))
    s_h, h = let("h", Load(AddPtr(H, tid)))
    vals = [Binary(op, x, y) for op in FLOAT_BINOPS] + [Unary(op, x) for op in FLOAT_UNOPS]
    vals += [Cast(Compare(op, x, y), F32) for op in CMPOPS]
    vals += [Where(Compare(CmpOp.LT, x, y), x, y), add(x, f32(0.1)), Binary(BinOp.MIN, x, f32(float("inf"))),
             add(x, f32(float("nan"))), Binary(BinOp.MAX, x, f32(float("-inf"))), mul(x, f32(-0.0)),
             Cast(h, F32), Cast(Cast(x, I32), F32)]
    hvals = [add(h, Const(0.1, F16)), mul(h, h), Binary(BinOp.MAX, h, Const(-1.0, F16)), Unary(UnOp.NEG, h),
             Cast(x, F16), Binary(BinOp.MIN, h, Const(float("inf"), F16))]
    body = [s_tid, s_x, s_y, s_h, *stores(Out, tid, vals), *stores(HOut, tid, hvals)]
    return Kernel("float_ops", Stage.METAL, (X, Y, H, Out, HOut), body)


def float_ops_reference(x, y, h):
    with np.errstate(all="ignore"):
        cols = [NP_BIN[op](x, y) for op in FLOAT_BINOPS] + [NP_UN[op](x) for op in FLOAT_UNOPS]
        cols += [NP_CMP[op](x, y).astype(np.float32) for op in CMPOPS]
        cols += [np.where(x < y, x, y), x + np.float32(0.1), x, x + np.float32("nan"), x, x * np.float32(-0.0),
                 h.astype(np.float32), np.trunc(x)]
        hcols = [h + np.float16(0.1), h * h, np.maximum(h, np.float16(-1)), -h, x.astype(np.float16), h]
    return np.stack(cols, 1).astype(np.float32), np.stack(hcols, 1).astype(np.float16)


def int_ops() -> Kernel:
    """Integer operators on i32, u32, u8 (wrapping) and i16, bool logic, and integer literals."""
    A, B, U, V, C8, S16 = ptr("A", 0, I32), ptr("B", 1, I32), ptr("U", 2, U32), ptr("V", 3, U32), ptr(
        "C8", 4, U8), ptr("S16", 5, I16)
    Out, OutU, Out8, Out16 = ptr("Out", 6, I32), ptr("OutU", 7, U32), ptr("Out8", 8, U8), ptr("Out16", 9, I16)
    s_tid, tid = tid_let()
    lets, (a, b, u, v, c, s) = zip(*[let(n, Load(AddPtr(p, tid))) for n, p in
                                     zip("abuvcs", (A, B, U, V, C8, S16))])
    p, q = Compare(CmpOp.LT, a, b), Compare(CmpOp.GT, a, i32(0))
    ivals = [Binary(op, a, b) for op in INT_BINOPS]
    ivals += [Binary(BinOp.SHL, a, Binary(BinOp.AND, b, i32(7))), Binary(BinOp.SHR, a, i32(3)),
              Unary(UnOp.NEG, a), Unary(UnOp.NOT, a), Unary(UnOp.ABS, a), Where(p, a, b),
              Binary(BinOp.MAX, a, i32(-(1 << 31)))]
    ivals += [Cast(Compare(op, a, b), I32) for op in CMPOPS]
    ivals += [Cast(Binary(op, p, q), I32) for op in (BinOp.AND, BinOp.OR, BinOp.XOR)] + [
        Cast(Unary(UnOp.NOT, p), I32)]
    uvals = [add(u, v), Binary(BinOp.SUB, u, v), Binary(BinOp.TRUNCDIV, u, v), Binary(BinOp.REM, u, v),
             Binary(BinOp.SHR, u, Const(3, U32)), Unary(UnOp.NOT, u), add(u, Const(4_000_000_000, U32)),
             Binary(BinOp.MAX, u, v)]
    vals8 = [add(c, c), Binary(BinOp.SHR, add(c, Const(100, U8)), Const(1, U8)), mul(c, Const(3, U8)),
             Unary(UnOp.NOT, c)]
    vals16 = [mul(s, s), Unary(UnOp.NEG, s), Binary(BinOp.SUB, s, Const(-30000, I16))]
    body = [s_tid, *lets, *stores(Out, tid, ivals), *stores(OutU, tid, uvals), *stores(Out8, tid, vals8),
            *stores(Out16, tid, vals16)]
    return Kernel("int_ops", Stage.METAL, (A, B, U, V, C8, S16, Out, OutU, Out8, Out16), body)


def int_ops_reference(a, b, u, v, c, s):
    with np.errstate(all="ignore"):
        p, q = a < b, a > 0
        iv = [a + b, a - b, a * b, trunc_div(a, b), np.fmod(a, b), a & b, a | b, a ^ b, np.maximum(a, b),
              np.minimum(a, b), a << (b & 7), a >> 3, -a, ~a, np.abs(a), np.where(p, a, b), a]
        iv += [NP_CMP[op](a, b) for op in CMPOPS] + [p & q, p | q, p ^ q, ~p]
        uv = [u + v, u - v, u // v, u % v, u >> 3, ~u, u + np.uint32(4_000_000_000), np.maximum(u, v)]
        v8 = [c + c, (c + np.uint8(100)) >> 1, c * np.uint8(3), ~c]
        v16 = [s * s, -s, s - np.int16(-30000)]
    return [np.stack(cols, 1).astype(dt) for cols, dt in
            ((iv, np.int32), (uv, np.uint32), (v8, np.uint8), (v16, np.int16))]


def builtins() -> Kernel:
    """Every thread-position attribute (each axis of the `uint3` ones), stored per thread."""
    Out = ptr("Out", 0, U32)
    grid = [Builtin(BuiltinKind.THREADS_PER_GRID, ax) for ax in range(3)]
    pos = [Builtin(TPIG, ax) for ax in range(3)]
    linear = add(pos[0], mul(grid[0], add(pos[1], mul(grid[1], pos[2]))))
    s_lin, lin = let("linear", Cast(linear, I32))
    vals = [Builtin(kind, ax) for kind in BuiltinKind for ax in (range(3) if kind.has_axes else (0,))]
    return Kernel("builtins", Stage.METAL, (Out,), [s_lin, *stores(Out, lin, vals)])


def control() -> Kernel:
    """Threadgroup memory, barriers of each fence, simd shuffles and reductions, `If` with results,
    `While`, a `For` whose yields swap, atomics (masked and not), and vector select, casts and lanes."""
    X, Vin, Hin, Out, VOut = ptr("X", 0), ptr("Vin", 1), ptr("Hin", 2, F16), ptr("Out", 3), ptr("VOut", 4)
    Cnt, Tot = ptr("Cnt", 5, I32), ptr("Tot", 6)
    s_buf, buf = let("buf", SharedAlloc((64,), F32))
    s_tid, tid = tid_let()
    s_lid, lid = tid_let("lid", BuiltinKind.THREAD_POSITION_IN_THREADGROUP)
    s_lane, lane = tid_let("lane", BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
    s_x, x = let("x", Load(AddPtr(X, tid)))
    s_nb, nb = let("nb", Load(AddPtr(buf, Binary(BinOp.SUB, i32(63), lid))))
    s_shx, shx = let("shx", SimdShuffleXor(x, i32(1)))
    s_bc, bc = let("bc", SimdBroadcast(x, i32(3)))
    reds = [let(f"r_{op.value}", SimdReduce(op, x)) for op in ReduceOp]
    r = Var("r", TileType(F32))
    pick = If(Compare(CmpOp.GT, x, f32(0.0)), [], [], [mul(x, f32(2.0))], [Unary(UnOp.NEG, x)], [r])
    n, acc, n_out, total = (Var(nm, TileType(I32)) for nm in ("n", "acc", "n_out", "total"))
    s_again, again = let("again", Compare(CmpOp.GT, n, i32(0)))
    loop = While([n, acc], [Binary(BinOp.REM, tid, i32(5)), i32(0)], [s_again], again, [],
                 [Binary(BinOp.SUB, n, i32(1)), add(acc, n)], [n_out, total])
    i, fa, fb, fib, fib1 = (Var(nm, TileType(I32)) for nm in ("i", "fa", "fb", "fib", "fib1"))
    fibl = For(i, i32(0), Binary(BinOp.REM, tid, i32(10)), i32(1), [fa, fb], [i32(0), i32(1)], [], [fb, add(fa, fb)],
               [fib, fib1])
    s_v, vec = let("v", VecLoad(AddPtr(Vin, mul(tid, i32(4))), 4))
    s_hv, hv = let("hv", VecLoad(AddPtr(Hin, mul(tid, i32(4))), 4))
    zero4 = Splat(f32(0.0), 4)
    relu = Where(Compare(CmpOp.LT, vec, zero4), zero4, vec)
    trunc = Cast(Cast(vec, I32), F32)
    s_w, w = let("w", add(relu, Cast(hv, F32)))
    out_vec = MakeVector([Extract(w, 3), Extract(trunc, 1), Extract(w, 1), Extract(trunc, 3)])
    vals = [nb, shx, bc, *(v for _, v in reds), r, Cast(total, F32), Cast(fib, F32)]
    body = [s_buf, s_tid, s_lid, s_lane, s_x, Store(AddPtr(buf, lid), x), Barrier(), s_nb,
            Barrier(Fence.NONE), Barrier(Fence.DEVICE), Barrier(Fence.DEVICE_AND_THREADGROUP),
            s_shx, s_bc, *(s for s, _ in reds), pick, loop, fibl, s_v, s_hv, s_w,
            VecStore(AddPtr(VOut, mul(tid, i32(4))), out_vec), *stores(Out, tid, vals),
            AtomicAdd(Cnt, i32(1), Compare(CmpOp.EQ, lane, i32(0))), AtomicAdd(Tot, x)]
    return Kernel("control", Stage.METAL, (X, Vin, Hin, Out, VOut, Cnt, Tot), body)


HAND_BUILT = {"float_ops": float_ops, "int_ops": int_ops, "builtins": builtins, "control": control}
CASES = {**METAL_EXAMPLES, **HAND_BUILT}


# ---- goldens and purity


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, request):
    k = CASES[case]()
    verify(k, after="construction")
    text = emit_msl(k)
    path = GOLDEN / f"{case}.metal"
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} is stale: run pytest --update-golden and review the diff"


@pytest.mark.parametrize("case", sorted(CASES))
def test_emission_depends_only_on_the_kernel(case):
    k = CASES[case]()
    assert emit_msl(parse(pretty(k))) == emit_msl(k) == emit_msl(CASES[case]())


@pytest.mark.parametrize("case", sorted(CASES))
def test_located_emission_writes_the_same_text_and_its_signature_declares_it(case):
    """`emit_msl` writes the parameter declarations without the signature's `Param`s; `emit_located` writes the same
    text, and each declaration of its signature is the text's line at that `Param`'s line."""
    from metile.emit.msl import emit_located

    k = CASES[case]()
    text, signature, _ = emit_located(k)
    assert text == emit_msl(k)
    lines = text.splitlines()
    assert signature.params
    for p in signature.params:
        assert lines[p.line - 1].strip().removeprefix(f"kernel void {signature.name}(").rstrip(",) {") \
            == p.declaration


# ---- the emitter's facts against their definitions in `metile.emit.facts`


@pytest.mark.parametrize("case", sorted(CASES))
def test_scan_agrees_with_the_definitions(case):
    k = CASES[case]()
    facts = scan(k)
    assert facts.names == c_names(k)
    assert facts.defs == bindings(k)
    assert facts.written == written_params(k, bindings(k))
    assert facts.kinds == {kind._value_ for kind in builtins_used(k)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_value_children_are_children(case):
    for n in distinct_nodes(CASES[case]()):
        if isinstance(n, Value):
            assert value_children(n) == tuple(children(n))
            if type(n) in CHILDREN:
                assert CHILDREN[type(n)](n) == value_children(n)


def test_every_compound_metal_value_has_a_children_getter():
    assert {cls for cls in ADMITTED_METAL if issubclass(cls, Value)} - LEAVES == set(CHILDREN)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_walk_counts_parents_as_use_counts_does(case):
    """Each value structure the emitter met is shared exactly when `use_counts` gives it two or more parents, and
    the attributes the kernel declares are `builtins_used`."""
    k = CASES[case]()
    emitter = _Emitter(k)
    emitter.run()
    counts = use_counts(k)
    records = [*emitter.records.by_hash.values(), *emitter.records._others.values()]
    values = [rec for rec in records if isinstance(rec[0], Value)]
    assert values and all(rec[3] == (counts.get(rec[0], 0) >= 2) for rec in values)
    assert emitter.kinds == {kind._value_ for kind in builtins_used(k)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emission_leaves_no_reference_cycles(case):
    """What `emit_msl` builds (the emitter, `scan`'s tables) is freed when it returns, not left for the garbage
    collector to find (which would make every later collection walk it)."""
    k = CASES[case]()
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        emit_msl(k)
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


def test_values_left_out_of_the_text_still_count_as_parents():
    """A `Load`'s `other` without a mask is not written, but it is a parent of what it reads: `N + 1` has two
    parents, so it is named; so is a yield past the results of an `If`."""
    N, P, Out = scalar("N", 0), ptr("P", 1, I32), ptr("Out", 2, I32)
    shared = add(N, i32(1))
    s_x, x = let("x", Load(P, None, shared))
    k = Kernel("k", Stage.METAL, (N, P, Out), [s_x, Store(AddPtr(Out, mul(N, i32(2))), add(shared, x))])
    assert "const int t0 = N + 1;" in emit_msl(k)
    other = mul(N, i32(3))
    branch = If(Compare(CmpOp.LT, N, i32(0)), [], [], [i32(1), other], [i32(2)], [Var("r", TileType(I32))])
    k = Kernel("k", Stage.METAL, (N, P, Out), [branch, Store(Out, other)])
    assert "const int t0 = N * 3;" in emit_msl(k)


def test_structures_with_one_hash_stay_apart():
    """`N + (-1)` and `N + (-2)` hash alike (as -1 and -2 do), and so do `x * 0.0` and `x * -0.0`: each is named or
    written out on its own parent count; a structure met again in another node is found by `==`."""
    N, Out, F = scalar("N", 0), ptr("Out", 1, I32), ptr("F", 2)
    a, b = add(N, i32(-1)), add(N, i32(-2))
    x = Cast(N, F32)
    zero, minus_zero = mul(x, f32(0.0)), mul(x, f32(-0.0))
    assert hash(a) == hash(b) and hash(zero) == hash(minus_zero)
    body = [Store(AddPtr(Out, a), b), Store(AddPtr(Out, b), a), Store(AddPtr(Out, add(N, i32(-1))), i32(3)),
            Store(AddPtr(F, N), zero), Store(AddPtr(F, i32(1)), minus_zero), Store(AddPtr(F, i32(2)), mul(x, f32(0.0)))]
    text = emit_msl(Kernel("k", Stage.METAL, (N, Out, F), body))
    for line in ("const int t0 = N + (-1);", "device int* const t1 = Out + t0;", "const int t2 = N + (-2);",
                 "t1[0] = t2;", "Out[t2] = t0;", "t1[0] = 3;", "const float t4 = t3 * 0.0f;",
                 "F[1] = t3 * (-0.0f);", "F[2] = t4;"):
        assert f"    {line}\n" in text


def test_statements_with_one_hash_stay_apart():
    """Stores of -1 and of -2 hash alike (as -1 and -2 do) but are two parents of the address they share, which is
    then named; two equal stores are one parent, and the address is written out in each."""
    N, Out = scalar("N", 0), ptr("Out", 1, I32)
    first, second, again = (Store(AddPtr(Out, mul(N, i32(2))), i32(c)) for c in (-1, -2, -2))
    assert hash(first) == hash(second) and first != second and second == again and second is not again
    text = emit_msl(Kernel("k", Stage.METAL, (N, Out), [first, second, again]))
    assert "    device int* const t0 = Out + (N * 2);\n    t0[0] = -1;\n    t0[0] = -2;\n    t0[0] = -2;\n" in text
    text = emit_msl(Kernel("k", Stage.METAL, (N, Out), [second, again]))
    assert "    Out[N * 2] = -2;\n    Out[N * 2] = -2;\n}" in text


# ---- the Metal IR examples, run


def test_vector_add_runs(cpu):
    n = 1030
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    cpu.dispatch_threads(compile_fn(cpu, METAL_EXAMPLES["metal_vector_add"]()), (-(-n // 4), 1, 1), (256, 1, 1),
                         [x, y, out, np.int32(n)])
    np.testing.assert_array_equal(out, x + y)


def test_row_sum_runs(cpu):
    rows, n = 5, 1000
    x = np.random.default_rng(1).standard_normal((rows, n), dtype=np.float32)
    out = np.zeros(rows, np.float32)
    cpu.dispatch_threadgroups(compile_fn(cpu, METAL_EXAMPLES["metal_row_sum"]()), (rows, 1, 1), (256, 1, 1),
                              [x, out, np.int32(n)])
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-4, atol=1e-4)


def test_gemm_runs(cpu):
    m, n, k = 16, 32, 24
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    cpu.dispatch_threadgroups(compile_fn(cpu, METAL_EXAMPLES["metal_gemm"]()), (m // 8, n // 16, 1), (32, 1, 1),
                              [a, b, c, np.int32(m), np.int32(n), np.int32(k)])
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_vectors_run(cpu):
    x = np.array([3.0, -1.0, 7.5, 2.0], np.float32)
    out = np.zeros(4, np.float32)
    cpu.dispatch_threads(compile_fn(cpu, METAL_EXAMPLES["metal_vectors"]()), (1, 1, 1), (1, 1, 1), [x, out])
    np.testing.assert_array_equal(out, x[[1, 0, 3, 2]] - x.max())


def test_pointer_table_runs(cpu):
    rows = [np.arange(4, dtype=np.float32) + 10 * i for i in range(3)]
    table = np.array([r.ctypes.data for r in rows], np.int64)
    out, counter = np.zeros(3, np.float32), np.zeros(5, np.int32)
    cpu.dispatch_threads(compile_fn(cpu, METAL_EXAMPLES["metal_pointer_table"]()), (3, 1, 1), (32, 1, 1),
                         [table, out, counter])
    assert out.tolist() == [2.0, 12.0, 22.0]
    assert counter[:2].tolist() == [3, 1]           # three tickets; the flag swapped 0 -> 1 once
    assert counter[2:].sum() == 0 + 1 + 2 + 1        # each ticket plus the old flag: 1 for the thread that lost


# ---- the hand-built kernels, run


def test_float_ops_run(cpu):
    n = 64
    rng = np.random.default_rng(3)
    x = rng.uniform(0.25, 3.0, n).astype(np.float32)
    y = rng.uniform(0.25, 3.0, n).astype(np.float32)
    y[::7] = x[::7]  # equal operands for the comparisons
    h = rng.uniform(-4, 4, n).astype(np.float16)
    want, hwant = float_ops_reference(x, y, h)
    out, hout = np.zeros_like(want), np.zeros_like(hwant)
    cpu.dispatch_threads(compile_fn(cpu, float_ops()), (n, 1, 1), (32, 1, 1), [x, y, h, out, hout])
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6, equal_nan=True)
    assert np.signbit(out[:, -3]).all()  # x * -0.0 keeps the sign
    np.testing.assert_allclose(hout.astype(np.float32), hwant.astype(np.float32), rtol=1e-3)


def test_int_ops_run(cpu):
    n = 64
    rng = np.random.default_rng(4)
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(1, 50, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    b[::5] = a[::5] | 1  # equal operands for the comparisons
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v = rng.integers(1, 2**16, n).astype(np.uint32)
    c = rng.integers(0, 256, n).astype(np.uint8)
    s = rng.integers(-300, 300, n).astype(np.int16)
    wants = int_ops_reference(a, b, u, v, c, s)
    outs = [np.zeros_like(w) for w in wants]
    cpu.dispatch_threads(compile_fn(cpu, int_ops()), (n, 1, 1), (32, 1, 1), [a, b, u, v, c, s, *outs])
    for got, want in zip(outs, wants):
        np.testing.assert_array_equal(got, want)


def test_builtins_run(cpu):
    grid, tpt = (16, 4, 2), (8, 4, 2)
    kinds = [(kind, ax) for kind in BuiltinKind for ax in (range(3) if kind.has_axes else (0,))]
    out = np.zeros(np.prod(grid) * len(kinds), np.uint32)
    cpu.dispatch_threads(compile_fn(cpu, builtins()), grid, tpt, [out])
    got = out.reshape(grid[2], grid[1], grid[0], len(kinds))
    z, y, x = np.meshgrid(*(np.arange(g) for g in reversed(grid)), indexing="ij")
    pos, local = (x, y, z), (x % tpt[0], y % tpt[1], z % tpt[2])
    index = local[0] + tpt[0] * (local[1] + tpt[1] * local[2])
    expect = {
        BuiltinKind.THREAD_POSITION_IN_GRID: lambda ax: pos[ax],
        BuiltinKind.THREADGROUP_POSITION_IN_GRID: lambda ax: pos[ax] // tpt[ax],
        BuiltinKind.THREAD_POSITION_IN_THREADGROUP: lambda ax: local[ax],
        BuiltinKind.THREADS_PER_THREADGROUP: lambda ax: tpt[ax],
        BuiltinKind.THREADGROUPS_PER_GRID: lambda ax: grid[ax] // tpt[ax],
        BuiltinKind.THREADS_PER_GRID: lambda ax: grid[ax],
        BuiltinKind.THREAD_INDEX_IN_THREADGROUP: lambda ax: index,
        BuiltinKind.THREAD_INDEX_IN_SIMDGROUP: lambda ax: index % 32,
        BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP: lambda ax: index // 32,
        BuiltinKind.SIMDGROUPS_PER_THREADGROUP: lambda ax: np.prod(tpt) // 32,
        BuiltinKind.THREADS_PER_SIMDGROUP: lambda ax: 32,
    }
    for j, (kind, ax) in enumerate(kinds):
        np.testing.assert_array_equal(got[..., j], np.broadcast_to(expect[kind](ax), x.shape), err_msg=str(kind))


def test_control_runs(cpu):
    groups, n = 2, 128
    rng = np.random.default_rng(5)
    x = rng.standard_normal(n).astype(np.float32)
    vin = rng.standard_normal(4 * n).astype(np.float32) * 4
    hin = rng.standard_normal(4 * n).astype(np.float16)
    out, vout = np.zeros((n, 10), np.float32), np.zeros((n, 4), np.float32)
    cnt, tot = np.zeros(1, np.int32), np.zeros(1, np.float32)
    cpu.dispatch_threadgroups(compile_fn(cpu, control()), (groups, 1, 1), (64, 1, 1),
                              [x, vin, hin, out, vout, cnt, tot])
    t = np.arange(n)
    sg = x.reshape(-1, 32)
    fib = [0, 1]
    while len(fib) < 10:
        fib.append(fib[-1] + fib[-2])
    m = t % 5
    want = np.stack([x[(t // 64) * 64 + 63 - t % 64], x[t ^ 1], x[(t // 32) * 32 + 3],
                     np.repeat(sg.sum(1), 32), np.repeat(sg.prod(1), 32), np.repeat(sg.max(1), 32),
                     np.repeat(sg.min(1), 32),
                     np.where(x > 0, x * 2, -x), m * (m + 1) // 2, np.array(fib)[t % 10]], 1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    v = vin.reshape(n, 4)
    w = np.maximum(v, 0) + hin.reshape(n, 4).astype(np.float32)
    np.testing.assert_allclose(vout, np.stack([w[:, 3], np.trunc(v[:, 1]), w[:, 1], np.trunc(v[:, 3])], 1),
                               rtol=1e-6)
    assert cnt[0] == n // 32
    np.testing.assert_allclose(tot[0], x.sum(), rtol=1e-4, atol=1e-4)


def test_a_loop_result_is_its_carried_local_and_a_pointer_result_its_own(cpu):
    """The int result is written as the carried local; the pointer result gets a local of its own, since
    only it is stored through (the carried pointer is only read, so it is a `device const` pointer)."""
    X, Out = ptr("X", 0, I32), ptr("Out", 1, I32)
    i, p, acc = Var("i", TileType(I32)), Var("p", Out.type), Var("acc", TileType(I32))
    end, total = Var("end", Out.type), Var("total", TileType(I32))
    loop = For(i, i32(0), i32(4), i32(1), [p, acc], [Out, i32(0)], [],
               [AddPtr(p, i32(1)), add(acc, Load(AddPtr(X, i)))], [end, total])
    k = Kernel("results", Stage.METAL, (X, Out), [loop, Store(end, total)])
    text = emit_msl(k)
    assert " total" not in text and "end = p;" in text
    x, out = np.array([3, 5, 7, 11], np.int32), np.zeros(6, np.int32)
    cpu.dispatch_threadgroups(compile_fn(cpu, k), (1, 1, 1), (1, 1, 1), [x, out])
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 26, 0])


def test_an_inner_loop_carries_the_outer_accumulators_in_place(cpu):
    """An inner loop whose inits are the outer loop's carried values, read nowhere else, carries them in the
    same locals; the outer yields swap the results, which must still be a parallel assignment."""
    Out = ptr("Out", 0, I32)
    i, j = Var("i", TileType(I32)), Var("j", TileType(I32))
    x1, x2, c1, c2, r1, r2, e1, e2 = (Var(n, TileType(I32)) for n in ("x1", "x2", "c1", "c2", "r1", "r2", "e1", "e2"))
    inner = For(j, i32(0), i32(2), i32(1), [c1, c2], [x1, x2], [], [add(c1, i32(10)), add(c2, i32(100))], [r1, r2])
    outer = For(i, i32(0), i32(3), i32(1), [x1, x2], [i32(1), i32(2)], [inner], [r2, r1], [e1, e2])
    k = Kernel("in_place", Stage.METAL, (Out,), [outer, Store(Out, e1), Store(AddPtr(Out, i32(1)), e2)])
    text = emit_msl(k)
    assert "int c1" not in text and "int r1" not in text  # carried in x1, x2; results written as them
    a, b = 1, 2
    for _ in range(3):
        a, b = b + 200, a + 20
    out = np.zeros(2, np.int32)
    cpu.dispatch_threadgroups(compile_fn(cpu, k), (1, 1, 1), (1, 1, 1), [out])
    np.testing.assert_array_equal(out, [a, b])


def test_an_init_read_elsewhere_gets_a_local_of_its_own(cpu):
    """When the outer value is read again after the inner loop, the inner loop copies it."""
    Out = ptr("Out", 0, I32)
    i, j = Var("i", TileType(I32)), Var("j", TileType(I32))
    x, c, r, e = (Var(n, TileType(I32)) for n in ("x", "c", "r", "e"))
    inner = For(j, i32(0), i32(2), i32(1), [c], [x], [], [add(c, i32(10))], [r])
    outer = For(i, i32(0), i32(3), i32(1), [x], [i32(1)], [inner], [add(r, x)], [e])
    k = Kernel("copied", Stage.METAL, (Out,), [outer, Store(Out, e)])
    assert "int c = x;" in emit_msl(k)
    v = 1
    for _ in range(3):
        v = (v + 20) + v
    out = np.zeros(1, np.int32)
    cpu.dispatch_threadgroups(compile_fn(cpu, k), (1, 1, 1), (1, 1, 1), [out])
    assert out[0] == v


def _counting_loop(start, stop, step: int, dtype: DType = I32) -> Kernel:
    """A kernel storing how many times a `For` from `start` to `stop` by `step` runs, and its last index."""
    Out = ptr("Out", 2, dtype)
    i, n, last, rn, rl = (Var(name, TileType(dtype)) for name in ("i", "n", "last", "rn", "rl"))
    loop = For(i, start, stop, Const(step, dtype), [n, last], [Const(0, dtype), Const(0, dtype)], [],
               [add(n, Const(1, dtype)), i], [rn, rl])
    params = tuple(p for p in (start, stop) if isinstance(p, Param)) + (Out,)
    return Kernel("count", Stage.METAL, params, [loop, Store(Out, rn), Store(AddPtr(Out, Const(1, dtype)), rl)])


@pytest.mark.parametrize(("dtype", "step", "start", "stop"), [
    (I32, 7, 2**31 - 10, 2**31 - 1), (I32, 2**30, 0, 2**31 - 1), (I32, 3, -(2**31), 2**31 - 1),
    (I32, 256, 0, 1000), (I32, 1, 2**31 - 3, 2**31 - 1), (I32, -5, -(2**31) + 9, -(2**31)),
    (I32, -2**30, 2**31 - 1, -(2**31)), (U32, 7, 2**32 - 10, 2**32 - 1), (U32, 1, 0, 5), (I32, 4, 5, 5)])
def test_a_for_loop_steps_as_range_does_without_wrapping_around(cpu, dtype, step, start, stop):
    """Near the index type's limits the index must not wrap around (it would run forever, or again from the
    other end); the loop runs as Python's `range` does."""
    k = _counting_loop(scalar("start", 0, dtype), scalar("stop", 1, dtype), step, dtype)
    out = np.zeros(2, dtype.numpy)
    cpu.dispatch_threadgroups(compile_fn(cpu, k), (1, 1, 1), (1, 1, 1),
                              [dtype.numpy.type(start), dtype.numpy.type(stop), out])
    r = range(start, stop, step)
    np.testing.assert_array_equal(out, [len(r), r[-1] if r else 0])


def test_a_loop_that_cannot_pass_the_limit_keeps_the_plain_step():
    """A step of one, or a constant end far enough from the limit, cannot wrap: `i += step` stays."""
    for k in (_counting_loop(scalar("start", 0), scalar("stop", 1), 1),
              _counting_loop(scalar("start", 0), i32(2**31 - 8), 8),
              _counting_loop(scalar("start", 0), i32(-(2**31) + 2), -2)):
        assert "i += " in emit_msl(k) and "static_cast<uint>" not in emit_msl(k)
    for k in (_counting_loop(scalar("start", 0), scalar("stop", 1), 2),
              _counting_loop(scalar("start", 0), i32(2**31 - 7), 8)):
        assert "i += " not in emit_msl(k)


# ---- spellings and errors


def test_literals():
    assert literal(0.1, F32) == "0.1f"
    assert literal(1.0, F32) == "1.0f"
    assert literal(1e-8, F32) == "1e-08f"
    assert literal(float("inf"), F32) == "INFINITY"
    assert literal(float("-inf"), F32) == "-INFINITY"
    assert literal(float("nan"), F32) == "NAN"
    assert literal(0.1, F16) == "half(0.099975586f)"
    assert literal(float("inf"), F16) == "half(INFINITY)"
    assert literal(7, U32) == "7u"
    assert literal(-3, I16) == "short(-3)"
    assert literal(-(1 << 31), I32) == "(-2147483647 - 1)"
    assert literal(True, BOOL) == "true"
    for v in (0.1, 1 / 3, 3.4028234e38, 1e-45, -2.5e-7):
        assert np.float32(literal(v, F32).removesuffix("f")) == np.float32(v)


def test_names_are_valid_identifiers():
    N, Out = scalar("kernel", 0), ptr("float", 1)
    s_a, a = let("int", add(N, i32(1)))
    s_b, b = let("2x", add(a, a))
    text = emit_msl(Kernel("k", Stage.METAL, (N, Out), [s_a, s_b, Store(Out, b)]))
    assert "constant int& kernel_1 [[buffer(0)]]" in text
    assert "device float* float_1 [[buffer(1)]]" in text
    assert "const int int_1 = kernel_1 + 1;" in text and "const int v2x = int_1 + int_1;" in text


def test_tile_stage_is_refused():
    from test_ir_examples import vector_add

    with pytest.raises(EmitError, match="Metal IR only"):
        emit_msl(vector_add())
    assert issubclass(EmitError, MetileError)


@pytest.mark.parametrize("op", [BinOp.FLOORDIV, BinOp.MOD])
def test_floor_division_is_refused(op):
    N, Out = scalar("N", 0), ptr("Out", 1, I32)
    k = Kernel("k", Stage.METAL, (N, Out), [Store(Out, Binary(op, N, i32(3)))])
    with pytest.raises(EmitError, match=op.value):
        emit_msl(k)


def test_tile_node_in_metal_ir_is_refused():
    from metile.ir import ProgramId

    Out = ptr("Out", 0, I32)
    with pytest.raises(EmitError, match="ProgramId"):
        emit_msl(Kernel("k", Stage.METAL, (Out,), [Store(Out, ProgramId(0))]))


def test_each_line_is_located_at_the_innermost_located_statement_that_wrote_it():
    """Lines written inside a located loop belong to the statements inside it (a masked store's three lines to the
    store), the loop's own head and closing brace to the loop, and a statement after it to that statement; a loop
    without a location leaves its lines to the statement around it. `emit_msl` writes the same text."""
    from metile.emit.msl import emit_located
    from metile.ir import LaunchPlan, Let, Loc

    def at(line: int) -> Loc:
        return Loc("k.py", line)

    X, N = ptr("X", 0), scalar("N", 1)
    i, j = Var("i", TileType(DType.I32)), Var("j", TileType(DType.I32))
    s_x = Let(Var("x", TileType(F32)), Load(AddPtr(X, i)), loc=at(2))
    store = Store(AddPtr(X, i), add(s_x.var, f32(1.0)), Compare(CmpOp.LT, i, N), loc=at(3))
    inner = For(j, i32(0), i32(2), i32(1), [], [], [Store(AddPtr(X, j), f32(0.0), loc=at(5))], [], [])
    loop = For(i, i32(0), N, i32(1), [], [], [s_x, store, inner], [], [], loc=at(1))
    after = Store(AddPtr(X, i32(0)), f32(2.0), loc=at(4))
    k = Kernel("located", Stage.METAL, (X, N), [loop, after], plan=LaunchPlan(32))
    text, _, by_line = emit_located(k)
    assert emit_msl(k) == text
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines, 1) if "for (int i" in line)
    body = [(lines[n - 1].strip(), by_line[n].line) for n in range(first, len(lines))]
    assert body == [
        ("for (int i = 0; i < N; i += 1) {", 1), ("device float* const t0 = X + i;", 2), ("const float x = t0[0];", 2),
        ("if (i < N) {", 3), ("t0[0] = x + 1.0f;", 3), ("}", 3), ("for (int j = 0; j < 2; j += 1) {", 1),
        ("X[j] = 0.0f;", 5), ("}", 1), ("}", 1), ("X[0] = 2.0f;", 4)]


def test_a_lower_case_name_skips_the_macro_pattern_only_when_the_pattern_cannot_match_it():
    """`c_identifier` takes a name starting in lower case as it is without running `_MACRO_LIKE`, except the
    lower-case words the pattern names, which are exactly `_LOWER_MACROS`: every other lower-case name keeps its
    spelling either way, and those get `v_`."""
    words = set(re.findall(r"(?<![\\a-z])[a-z]{2,}", _MACRO_LIKE.pattern))
    assert words == _LOWER_MACROS
    for name in [*sorted(words), "acc", "offs_1", "t3", "restrict_1", "errnos", "assert_", "m_pi", "int_max"]:
        assert (c_identifier(name) == name) == (not _MACRO_LIKE.match(name)), name
    assert [c_identifier(w) for w in sorted(words)] == [f"v_{w}" for w in sorted(words)]
