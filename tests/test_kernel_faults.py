"""A fault inside a `@metile.kernel` launch is reported at the kernel's Python line, with a caret, the `.metal`
line it happened on named in the message and kept as `metal_loc`."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import metile
from metile.emit.msl import emit_msl
from metile.emit.source_map import msl_locations
from metile.kernel import at_python_line
from metile.metal.errors import DeviceFault
from tests.acceptance_kernels import docs_examples as docs
from tests.msl_source import kernel_line as line_of

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def far_load(A, B, n, SHIFT: metile.constexpr, MASKED: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    if MASKED:
        a = metile.load(A + offs + SHIFT, mask=offs < n)  # masked load
    else:
        a = metile.load(A + offs + SHIFT)  # plain load
    metile.store(B + offs, a)


@metile.kernel
def far_store(A, B, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    a = metile.load(A + offs, mask=offs < n)
    metile.store(B + offs * n, a + 1.0)  # the store
    metile.store(A + offs, a, mask=offs < n)


@metile.kernel
def divide(X, d, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    q = x // d  # the division
    metile.store(X + offs, q)


@metile.kernel
def loop_reads_past(X, Y, n, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,), dtype="f32")
    for c in metile.tile_range(0, n, BLOCK):
        acc = acc + metile.load(X + c + metile.arange(0, BLOCK))  # in the loop
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.kernel
def staged_operand(A, B, C, lda, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    acc = metile.zeros((BM, BN), dtype="f32")
    rows, ks = metile.arange(0, BM), metile.arange(0, BK)
    a = metile.load(A + rows[:, None] * lda + ks[None, :])  # the tile load
    b = metile.tile_load(B, 0, 0, BN, (BK, BN))
    acc = metile.dot(a, b, acc)
    metile.tile_store(C, 0, 0, BN, acc, (BM, BN))


@metile.kernel
def folded_load(A, B, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs + 1)  # the load
    metile.store(B + offs, a * 2.0)


def fault_of(launch) -> DeviceFault:
    with pytest.raises(DeviceFault) as info:
        launch()
    return info.value


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_a_bad_load_is_reported_at_its_python_line(masked):
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    err = fault_of(lambda: far_load[(1,)](a, b, 64, SHIFT=64, MASKED=masked, BLOCK=64))
    assert err.kind == "bad-access"
    assert err.loc.file == __file__
    assert err.loc.line == line_of(far_load.fn, "# masked load" if masked else "# plain load")
    text = str(err).splitlines()
    assert text[0].startswith(f"{__file__}:{err.loc.line}:")
    assert "metile.load(A + offs + SHIFT" in text[1] and text[2].strip() == "^"
    assert text[1].index("metile.load") == text[2].index("^")  # the caret is under the load
    metal = err.metal_loc
    assert metal.file == "far_load.metal"
    assert f"(generated MSL: far_load.metal:{metal.line})" in err.message
    msl = far_load.compile(a, b, 64, SHIFT=64, MASKED=masked, BLOCK=64).msl
    assert "A + " in msl.splitlines()[metal.line - 1]  # the load's line
    assert err.thread is not None and err.buffer == 0 and err.offset >= 256


def test_a_wide_bad_load_is_reported_at_its_python_line():
    """With 8192 elements the C++ compiler's line table names the translation unit instead of the `.metal`
    file for the faulting instruction (with the `.metal` line number); the fault used to have no location."""
    a, b = np.ones(8192, np.float32), np.zeros(8192, np.float32)
    err = fault_of(lambda: far_load[(1,)](a, b, 8192, SHIFT=8192, MASKED=False, BLOCK=8192))
    assert err.metal_loc is not None and err.metal_loc.file == "far_load.metal"
    assert (err.loc.file, err.loc.line) == (__file__, line_of(far_load.fn, "# plain load"))


def test_a_tile_load_staged_by_dot_is_reported_at_the_tile_load():
    """The staging loads are emitted while the `dot` is lowered; they used to be reported at the `dot`. (A tile
    loaded past its array's end with `load`: a `tile_load` is clipped to its array.)"""
    x = np.ones(32 * 32, np.float32)
    err = fault_of(lambda: staged_operand[(1,)](x, x.copy(), np.zeros_like(x), 33, BM=32, BN=32, BK=32))
    assert err.kind == "bad-access" and err.buffer == 0
    assert (err.loc.file, err.loc.line) == (__file__, line_of(staged_operand.fn, "# the tile load"))


def test_a_load_folded_into_its_use_is_reported_at_the_load():
    """The C++ compiler folds the load into the multiply of the store's line, where the runtime finds the
    faulting instruction; that line does not touch buffer 0, so the access is the line above that reads it."""
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    err = fault_of(lambda: folded_load[(1,)](a, b, BLOCK=64))
    assert err.kind == "bad-access" and err.buffer == 0
    assert (err.loc.file, err.loc.line) == (__file__, line_of(folded_load.fn, "# the load"))


def test_the_access_line_is_the_nearest_line_above_that_reads_the_buffer():
    from metile.emit.artifact import MslArtifact
    from metile.emit.signature import KernelSignature, Param, ParamKind
    from metile.emit.source_map import FaultLocator
    from metile.ir.stmts import LaunchPlan

    signature = KernelSignature("k", (Param("A", ParamKind.BUFFER, "device const float*", 0, line=1),
                                      Param("B", ParamKind.BUFFER, "device float*", 1, line=2)), 1)
    locator = FaultLocator(MslArtifact("kernel void k(device const float* A [[buffer(0)]],\n"
                                       "              device float* B [[buffer(1)]]) {\n"
                                       "    const float x = A[3];\n"
                                       "    device const float* const t0 = A + 8;\n"
                                       "    const float y = t0[1];\n"
                                       "    B[0] = x * y;\n"
                                       "}\n", "k.metal", signature, LaunchPlan(32), {}))
    assert locator.access_line(6, 0) == 5  # through the pointer made from A, not its declaration
    assert locator.access_line(6, 1) == 6  # the line stores to B itself
    assert locator.access_line(3, 0) == 3
    assert locator.access_line(3, 1) == 3  # nothing above reads B within the body: the line stays


def test_a_bad_store_is_reported_at_its_python_line():
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    err = fault_of(lambda: far_store[(1,)](a, b, 64, BLOCK=64))
    assert err.kind == "bad-access" and err.buffer == 1
    assert (err.loc.file, err.loc.line) == (__file__, line_of(far_store.fn, "# the store"))


def test_an_integer_division_by_zero_is_reported_at_its_python_line():
    x = np.arange(32, dtype=np.int32)
    err = fault_of(lambda: divide[(1,)](x, 0, BLOCK=32))
    assert err.kind == "division-by-zero"
    assert (err.loc.file, err.loc.line) == (__file__, line_of(divide.fn, "# the division"))


def test_a_fault_in_a_loop_body_is_reported_at_its_python_line():
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)  # the second iteration reads past the end
    err = fault_of(lambda: loop_reads_past[(1,)](x, y, 1024, BLOCK=64))
    assert err.kind == "bad-access" and err.buffer == 0
    assert (err.loc.file, err.loc.line) == (__file__, line_of(loop_reads_past.fn, "# in the loop"))


def test_a_metal_line_that_leads_nowhere_keeps_the_fault_as_it_is():
    a = np.ones(64, np.float32)
    compiled = far_load.compile(a, a, 64, SHIFT=0, MASKED=False, BLOCK=64)
    header = metile.ir.errors.Loc("far_load.metal", 1, 0)  # the `#include` line: no statement wrote it
    for loc in (header, metile.ir.errors.Loc("other.metal", 14, 4), None):
        fault = DeviceFault("bad", loc, kind="bad-access")
        assert at_python_line(compiled, fault) is fault


@pytest.mark.parametrize("case", ["softmax", "gemm", "layernorm", "vec_add"])
def test_every_line_that_touches_memory_leads_back_to_the_kernel_source(case):
    """`msl_locations` emits the same text as `emit_msl`, and each body line that reads or writes memory (or
    computes a value) leads to a line of the kernel's own function."""
    kernels = {
        "softmax": (docs.softmax_rows, (np.zeros(64 * 300, np.float32), np.zeros(64 * 300, np.float32), 300),
                    {"BLOCK": 256}),
        "gemm": (docs.matmul, (np.zeros(64 * 64, np.float32),) * 3 + (64, 64, 64),
                 {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}),
        "layernorm": (docs.layernorm, (np.zeros(32 * 300, np.float32), np.zeros(300, np.float32),
                                       np.zeros(300, np.float32), np.zeros(32 * 300, np.float32), 300, 1e-5),
                      {"BLOCK": 256}),
        "vec_add": (docs.vec_add, (np.zeros(1000, np.float32),) * 3 + (1000,), {"BLOCK": 256}),
    }
    kern, args, constexprs = kernels[case]
    compiled = kern.compile(*args, **constexprs)
    text, locs = msl_locations(compiled.metal_ir)
    assert text == emit_msl(compiled.metal_ir) == compiled.msl
    assert locs == dict(compiled.artifact.locations)   # what the compile kept: the map of the text it compiled
    lines, first = inspect.getsourcelines(kern.fn)
    file = inspect.getsourcefile(kern.fn)
    body = text.splitlines()
    start = next(i for i, t in enumerate(body) if t.startswith("kernel void")) + 1
    own = [i + 1 for i, t in enumerate(body) if i > start and " = " in t and "[" in t]
    assert own, "the kernel reads or writes memory somewhere"
    for line in own:
        loc = locs.get(line)
        assert loc is not None, body[line - 1]
        assert loc.file == file and first < loc.line < first + len(lines), (body[line - 1], loc)
