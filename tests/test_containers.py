"""Compile-time containers of traced values (`metile.frontend.containers`, docs/language.md 7.5): lists, tuples and
dicts built and changed while tracing, as the original meTile's kernels build them; merged after a runtime `if`,
carried by runtime loops and handed off by role blocks when their items change there; refused, at the user's line,
when indexed by a traced value, when their length would depend on the run-time path, and when they come from
outside the kernel. Every kernel runs on the CPU device against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import metile
from metile.frontend import errors as E

pytestmark = pytest.mark.usefixtures("on_cpu")
LINES = Path(__file__).read_text().splitlines()
RNG = np.random.default_rng(7)


def line_of(case: str) -> int:
    return next(i + 1 for i, text in enumerate(LINES) if text.rstrip().endswith(f"# E:{case}"))


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---- building and reading containers while tracing


@metile.kernel
def build_and_read(X, Out, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    rows = [metile.load(X + k * BLOCK + c) for k in range(4)]     # a comprehension of loads
    rows.append(rows[0] * 2.0)                                    # 5 items
    rows.extend([rows[1], rows[2]])                               # 7
    rows.insert(0, rows[-1] + 1.0)                                # 8: rows[2] + 1 first
    last = rows.pop()                                             # rows[2] again; 7 left
    head, *_ = rows[:2], 0
    table = {"first": rows[0], "n": len(rows)}
    table["sum"] = sum(rows[1:5])                                 # X0 + X1 + X2 + X3
    pairs = tuple(zip(rows[1:3], (10.0, 20.0)))
    scaled = [v * s for v, s in pairs]                            # X0 * 10, X1 * 20
    total = table["sum"] + head[1] - last + table["n"] * 0.0      # + X0 - X2
    for i, v in enumerate(scaled):
        total = total + v * (i + 1)                               # + 10 X0 + 40 X1
    metile.store(Out + c, total)
    metile.store(Out + BLOCK + c, table["first"])                 # X2 + 1
    metile.store(Out + 2 * BLOCK + c, max(rows[1:5]) - min(rows[1:5]))


def test_lists_dicts_and_tuples_of_traced_values():
    x = rand(4, 32)
    out = np.zeros((3, 32), np.float32)
    build_and_read[(1,)](x, out, BLOCK=32)
    metile.synchronize()
    want = x.sum(0) + x[0] - x[2] + 10 * x[0] + 40 * x[1]
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], x[2] + 1, rtol=1e-6)
    np.testing.assert_allclose(out[2], x.max(0) - x.min(0), rtol=1e-6)


@metile.kernel
def butterflies(X, Y, N: metile.constexpr):
    # meTile's FFT style: a list of traced values updated in place, stage by stage, by compile-time indices
    t = metile.arange(0, 1)
    v = [metile.load(X + k + t) for k in range(N)]
    h = 1
    while h < N:
        for k in range(N):
            if k & h == 0:
                a, b = v[k], v[k + h]
                v[k], v[k + h] = a + b, a - b
        h *= 2
    for k, item in enumerate(v):
        metile.store(Y + k + t, item)


def test_items_assigned_in_place_by_compile_time_indices():
    x = rand(8)
    y = np.zeros(8, np.float32)
    butterflies[(1,)](x, y, N=8)
    metile.synchronize()
    walsh = np.array([[(-1) ** bin(i & j).count("1") for j in range(8)] for i in range(8)], np.float32)
    np.testing.assert_allclose(y, walsh @ x, rtol=1e-5, atol=1e-5)


@metile.kernel
def comprehension_scope(X, BLOCK: metile.constexpr):
    doubled = [i * 2 for i in range(3) if i != 1]
    metile.store(X + 0, i * 1.0 + len(doubled))  # noqa: F821  # E:comp_scope


def test_comprehension_variables_stay_inside():
    with pytest.raises(E.UndefinedNameError, match="name 'i' is not defined") as info:
        comprehension_scope.trace(np.zeros(4, np.float32), BLOCK=1)
    assert info.value.loc.line == line_of("comp_scope")


# ---- runtime control flow


@metile.kernel
def merge_if(X, Out, flag, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    x = metile.load(X + c)
    vals = [x, x * 2.0, 1.0]
    if flag > 0:
        vals[0] = x + 100.0
        vals[2] = 3.0
        pair = [x, 5.0]
    else:
        vals[1] = x - 100.0
        pair = [x * 0.5, 7.0]
    metile.store(Out + c, vals[0] + vals[1] + vals[2] + pair[0] + pair[1])


@pytest.mark.parametrize("flag", [0, 1])
def test_items_changed_in_a_runtime_if_are_merged(flag):
    x = rand(16)
    out = np.zeros(16, np.float32)
    merge_if[(1,)](x, out, flag, BLOCK=16)
    metile.synchronize()
    want = (x + 100 + 2 * x + 3 + x + 5) if flag else (x + x - 100 + 1 + 0.5 * x + 7)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@metile.kernel
def carry(X, Out, n, K: metile.constexpr, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    sums = [metile.zeros((BLOCK,)) for _ in range(K)]
    stats = {"count": 0, "odd": 0.0}
    alias = sums
    for i in metile.tile_range(0, n):
        for k in range(K):
            x = metile.load(X + ((row * K + k) * n + i) * BLOCK + cols)
            alias[k] = alias[k] + x                       # the same list as `sums`
        stats["count"] += 1                               # a Python number becomes a carried i32
        if i % 2 == 1:
            stats["odd"] = stats["odd"] + metile.sum(sums[0])
    for k, s in enumerate(sums):
        metile.store(Out + (row * (K + 1) + k) * BLOCK + cols, s / stats["count"])
    metile.store(Out + (row * (K + 1) + K) * BLOCK + cols, stats["odd"])


@pytest.mark.parametrize("n", [1, 2, 5])
def test_items_assigned_in_a_runtime_loop_are_carried(n):
    rows, k, block = 2, 3, 16
    x = rand(rows, k, n, block)
    out = np.zeros((rows, k + 1, block), np.float32)
    carry[(rows,)](x, out, n, K=k, BLOCK=block)
    metile.synchronize()
    np.testing.assert_allclose(out[:, :k], x.mean(2), rtol=1e-5, atol=1e-5)
    running = np.cumsum(x[:, 0].sum(-1), axis=1)                    # sum(sums[0]) after each iteration
    odd = running[:, 1::2].sum(1)
    np.testing.assert_allclose(out[:, k], np.repeat(odd[:, None], block, 1), rtol=1e-4, atol=1e-4)


@metile.kernel
def carry_while(X, Out, n, BLOCK: metile.constexpr):
    acc = [0.0, 0]
    i = 0
    while i < n:
        acc[0] = acc[0] + metile.load(X + i)
        acc[1] += 1
        i += 1
    metile.store(Out + 0, acc[0])
    metile.store(Out + 1, acc[1] * 1.0)


def test_items_assigned_in_a_runtime_while_are_carried():
    x = rand(8)
    out = np.zeros(2, np.float32)
    carry_while[(1,)](x, out, 6, BLOCK=1)
    metile.synchronize()
    np.testing.assert_allclose(out, [x[:6].sum(), 6.0], rtol=1e-5)


@metile.kernel
def carry_widening(X, Out, n, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    acc = 0                                   # i32, then a f32 tile: the body is traced again
    for i in metile.tile_range(0, n):
        parts = []
        parts.append(acc)
        parts.append(metile.load(X + i * BLOCK + c))
        acc = parts[0] + parts[1]
    metile.store(Out + c, acc)


def test_a_loop_traced_again_rebuilds_its_lists():
    x = rand(5, 16)
    out = np.zeros(16, np.float32)
    carry_widening[(1,)](x, out, 5, BLOCK=16)
    metile.synchronize()
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)


@metile.kernel
def comprehension_in_loop(X, Out, n, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    acc = 0                                   # widens: the body is traced again, replaying what it can
    for i in metile.tile_range(0, n):
        parts = [metile.load(X + (i * 2 + j) * BLOCK + c) for j in range(2)]
        acc = acc + parts[0] * parts[1]
    metile.store(Out + c, acc)


def test_a_comprehension_in_a_loop_keeps_its_variable_to_itself():
    x = rand(3, 2, 16)
    out = np.zeros(16, np.float32)
    comprehension_in_loop[(1,)](x, out, 3, BLOCK=16)
    metile.synchronize()
    np.testing.assert_allclose(out, (x[:, 0] * x[:, 1]).sum(0), rtol=1e-5, atol=1e-5)


@metile.kernel
def nested_runtime(X, Out, n, m, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    acc = {"even": metile.zeros((BLOCK,)), "odd": metile.zeros((BLOCK,))}
    for i in metile.tile_range(0, n):
        for j in metile.tile_range(0, m):
            x = metile.load(X + (i * m + j) * BLOCK + c)
            if (i + j) % 2 == 0:
                acc["even"] = acc["even"] + x
            else:
                acc["odd"] = acc["odd"] + x
    metile.store(Out + c, acc["even"])
    metile.store(Out + BLOCK + c, acc["odd"])


def test_items_assigned_in_nested_runtime_constructs():
    x = rand(3, 4, 16)
    out = np.zeros((2, 16), np.float32)
    nested_runtime[(1,)](x, out, 3, 4, BLOCK=16)
    metile.synchronize()
    parity = (np.arange(3)[:, None] + np.arange(4)[None, :]) % 2
    np.testing.assert_allclose(out[0], x[parity == 0].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], x[parity == 1].sum(0), rtol=1e-5, atol=1e-5)


@metile.kernel
def role_items(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = offs < n
    x = metile.load(X + offs, mask=ok)
    r = [x, x]
    with metile.simdgroup_role(role=0, num_roles=2):
        r[0] = metile.exp(x)
        pair = (metile.sqrt(x), 2.0)
    with metile.simdgroup_role(role=1, num_roles=2):
        r[1] = x * 3.0
    metile.store(Out + offs, r[0] + r[1] + pair[0] * pair[1], mask=ok)


def test_items_assigned_in_role_blocks_are_handed_off():
    x = np.abs(rand(1000))
    out = np.zeros_like(x)
    role_items[(4,)](x, out, 1000, BLOCK=256)
    metile.synchronize()
    np.testing.assert_allclose(out, np.exp(x) + 3 * x + 2 * np.sqrt(x), rtol=1e-5)


@metile.kernel
def local_list_in_loop(X, Out, n, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    total = metile.zeros((BLOCK,))
    for i in metile.tile_range(0, n):
        parts = []                                  # built in the loop's body: free to grow there
        for k in range(3):
            parts.append(metile.load(X + (i * 3 + k) * BLOCK + c))
        total = total + parts[0] * parts[1] - parts.pop()
    metile.store(Out + c, total)


def test_a_list_built_in_a_loop_body_may_grow_there():
    x = rand(4, 3, 16)
    out = np.zeros(16, np.float32)
    local_list_in_loop[(1,)](x, out, 4, BLOCK=16)
    metile.synchronize()
    np.testing.assert_allclose(out, (x[:, 0] * x[:, 1] - x[:, 2]).sum(0), rtol=1e-5, atol=1e-5)


# ---- refused, at the user's line

GLOBAL_LIST: list = []


@metile.func
def collect(x, into=[]):  # noqa: B006 - the default is what the test refuses to change
    into.append(x)  # E:default_arg
    return into


@metile.kernel
def k_traced_index(X, n):
    xs = [1.0, 2.0]
    metile.store(X, xs[n])  # E:traced_index


@metile.kernel
def k_traced_store_index(X, n):
    xs = [1.0, 2.0]
    xs[n] = 3.0  # E:traced_store_index


@metile.kernel
def k_traced_slice(X, n):
    xs = [1.0, 2.0]
    metile.store(X, sum(xs[:n]))  # E:traced_slice


@metile.kernel
def k_traced_key(X, n):
    d = {"a": 1.0}
    metile.store(X, d[n])  # E:traced_key


@metile.kernel
def k_append_in_loop(X, n):
    xs = []
    for i in metile.tile_range(0, n):
        xs.append(metile.load(X + i))  # E:append_in_loop


@metile.kernel
def k_pop_in_if(X, n):
    xs = [metile.load(X)]
    if n > 0:
        xs.pop()  # E:pop_in_if


@metile.kernel
def k_new_key_in_while(X, n):
    d = {}
    while n > 0:
        d["k"] = n  # E:new_key_in_while
        n -= 1


@metile.kernel
def k_extend_in_role(X, BLOCK: metile.constexpr):
    xs = [metile.load(X + metile.arange(0, BLOCK))]
    with metile.simdgroup_role(role=0, num_roles=2):
        xs += [1.0]  # E:extend_in_role


@metile.kernel
def k_list_item_in_loop(X, n):
    xs = [1.0]
    for _ in metile.tile_range(0, n):
        xs[0] = [1.0]  # E:list_item_in_loop


@metile.kernel
def k_string_item_in_loop(X, n):
    xs = ["a", 1.0]
    for _ in metile.tile_range(0, n):
        xs.reverse()  # E:string_item_in_loop


@metile.kernel
def k_global(X):
    GLOBAL_LIST.append(metile.load(X))  # E:global


@metile.kernel
def k_constexpr(X, L: metile.constexpr):
    L[0] = metile.load(X)  # E:constexpr


@metile.kernel
def k_default_arg(X):
    collect(metile.load(X))


@metile.kernel
def k_in(X):
    xs = [metile.load(X)]
    metile.store(X, 1.0 if 1.0 in xs else 0.0)  # E:in


@metile.kernel
def k_equal(X):
    a = (metile.load(X), 1)
    metile.store(X, 1.0 if a == a else 0.0)  # E:equal


@metile.kernel
def k_sorted(X):
    xs = [metile.load(X), metile.load(X + 1)]
    metile.store(X, sorted(xs)[0])  # E:sorted


@metile.kernel
def k_index(X):
    xs = [metile.load(X), 1.0]
    metile.store(X, xs.index(1.0) * 1.0)  # E:index


@metile.kernel
def k_any(X):
    xs = [metile.load(X) > 0.0]
    metile.store(X, 1.0 if any(xs) else 0.0)  # E:any


@metile.kernel
def k_tuple_item(X):
    t = (1.0, 2.0)
    t[0] = metile.load(X)  # E:tuple_item


@metile.kernel
def k_comp_condition(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(X, len([x for k in range(2) if metile.max(x) > k]))  # E:comp_condition


@metile.kernel
def k_comp_traced_iter(X, n):
    metile.store(X, len([k for k in metile.load(X)]))  # E:comp_traced_iter


@metile.kernel
def k_reassigned_in_loop(X, n):
    xs = [1.0]
    for i in metile.tile_range(0, n):  # E:reassigned_in_loop
        xs = [metile.load(X + i)]
    metile.store(X, xs[0])


@metile.kernel
def k_method(X):
    xs = [1.0]
    xs.frobnicate()  # E:method


@metile.kernel
def k_tile_item(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    x[0] += 1.0  # E:tile_item


F32 = np.zeros(8, np.float32)
CASES = [
    ("traced_index", k_traced_index, (F32, 1), {}, E.KernelTypeError,
     "a compile-time list can only be indexed by a compile-time value"),
    ("traced_store_index", k_traced_store_index, (F32, 1), {}, E.KernelTypeError,
     "a compile-time list can only be indexed by a compile-time value"),
    ("traced_slice", k_traced_slice, (F32, 1), {}, E.KernelTypeError, "can only be indexed by a compile-time value"),
    ("traced_key", k_traced_key, (F32, 1), {}, E.KernelTypeError,
     "a compile-time dict can only be indexed by a compile-time value"),
    ("append_in_loop", k_append_in_loop, (F32, 3), {}, E.KernelTypeError,
     r"list.append\(\) changes the length of a list built outside the tile_range loop at line \d+: its length "
     "would then depend on the path"),
    ("pop_in_if", k_pop_in_if, (F32, 3), {}, E.KernelTypeError,
     r"list.pop\(\) changes the length of a list built outside the runtime `if` at line"),
    ("new_key_in_while", k_new_key_in_while, (F32, 3), {}, E.KernelTypeError,
     r"changes the length of a dict built outside the `while` loop at line"),
    ("extend_in_role", k_extend_in_role, (F32,), {"BLOCK": 64}, E.KernelTypeError,
     r"list.extend\(\) changes the length of a list built outside the simdgroup_role block"),
    ("list_item_in_loop", k_list_item_in_loop, (F32, 3), {}, E.KernelTypeError,
     "a compile-time list cannot be stored in a list built outside the tile_range loop"),
    ("string_item_in_loop", k_string_item_in_loop, (F32, 3), {}, E.KernelTypeError,
     r"list.reverse\(\): a compile-time str cannot be stored in a list built outside the tile_range loop"),
    ("global", k_global, (F32,), {}, E.KernelTypeError, "this list was not built by this kernel's code"),
    ("constexpr", k_constexpr, (F32,), {"L": [0.0]}, E.KernelTypeError,
     "this list was not built by this kernel's code"),
    ("default_arg", k_default_arg, (F32,), {}, E.KernelTypeError, "this list was not built by this kernel's code"),
    ("in", k_in, (F32,), {}, E.KernelTypeError, "`in` would compare with traced values"),
    ("equal", k_equal, (F32,), {}, E.KernelTypeError, "comparing containers that hold traced values"),
    ("sorted", k_sorted, (F32,), {}, E.KernelTypeError, r"sorted\(\) compares items, and some are traced"),
    ("index", k_index, (F32,), {}, E.KernelTypeError, r"list.index\(\) compares items"),
    ("any", k_any, (F32,), {}, E.RuntimeConditionError, r"any\(\) needs compile-time truth values"),
    ("tuple_item", k_tuple_item, (F32,), {}, E.KernelTypeError, "cannot assign to an item of a tuple"),
    ("comp_condition", k_comp_condition, (F32,), {"BLOCK": 4}, E.RuntimeConditionError,
     "the `if` of a comprehension needs a compile-time condition"),
    ("comp_traced_iter", k_comp_traced_iter, (F32, 1), {}, E.ConstexprRequiredError,
     "a comprehension needs a compile-time iterable"),
    ("reassigned_in_loop", k_reassigned_in_loop, (F32, 3), {}, E.KernelTypeError,
     "variable 'xs' holds a compile-time list and is reassigned in a runtime loop"),
    ("method", k_method, (F32,), {}, E.KernelTypeError, "a list in a kernel has no method 'frobnicate'"),
    ("tile_item", k_tile_item, (F32,), {"BLOCK": 4}, E.UnsupportedSyntaxError,
     "write memory with metile.store"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_at_the_line(case):
    name, kern, args, kwargs, cls, message = case
    with pytest.raises(cls, match=message) as info:
        kern.trace(*args, **kwargs)
    err = info.value
    assert err.loc is not None and err.loc.line == line_of(name), str(err)
    text = str(err)
    assert text.startswith(f"{err.loc.file}:{err.loc.line}:{err.loc.col + 1}: error: ")
    assert f"# E:{name}" in text and "^" in text


def test_refused_changes_leave_outside_containers_alone():
    given = [5.0]
    for kern, kwargs in ((k_global, {}), (k_constexpr, {"L": given}), (k_default_arg, {})):
        with pytest.raises(E.KernelTypeError):
            kern.trace(F32, **kwargs)
    assert GLOBAL_LIST == [] and given == [5.0] and collect.fn.__defaults__ == ([],)


@metile.kernel
def first_kernel(X, Out, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    kept = [metile.load(X + c)]
    metile.store(Out + c, kept[0] * 2.0)


@metile.kernel
def second_kernel(X, Out, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    kept = []
    kept.append(metile.load(X + c) + 1.0)
    metile.store(Out + c, kept[-1] + len(kept))


def test_containers_do_not_outlive_their_trace():
    x = rand(16)
    a, b = np.zeros(16, np.float32), np.zeros(16, np.float32)
    for _ in range(2):  # traced once each, then launched from the cache
        first_kernel[(1,)](x, a, BLOCK=16)
        second_kernel[(1,)](x, b, BLOCK=16)
    metile.synchronize()
    np.testing.assert_allclose(a, 2 * x, rtol=1e-6)
    np.testing.assert_allclose(b, x + 2, rtol=1e-6)


def test_any_container_finds_lists_and_dicts_at_any_depth_of_tuples():
    """The replay of a loop body refuses a statement that reads or assigns a list or dict, or a tuple holding one;
    `any_container` looks into tuples only and compares the other values' classes alone."""
    from metile.frontend.replay import any_container, holds_container
    from metile.ir import Const, DType

    class Listish(list):
        pass

    c = Const(1, DType.I32)
    cases = [[], [1, 2.0, c, "s", None], [(1, (2, c))], [(1, (2, [3]))], [{}], [[c]], [c, (c, {"a": 1})],
             [Listish()], [(Listish(),)]]
    for values in cases:
        assert any_container(values) == any(map(holds_container, values)), values
    assert [any_container(v) for v in cases] == [False, False, False, True, True, True, True, False, False]
