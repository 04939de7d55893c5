"""`@metile.kernel` options and limits on the CPU device: custom pipelines (`pipeline=`, `with_pipeline`), the
compile cache keyed by pipeline, per-pass verification as the debug mode, device limits checked before any
dispatch, and the launch cache that skips tracing, passes and emission on repeated launches."""

from __future__ import annotations

import importlib

import attrs
import numpy as np
import pytest

import metile
import metile.rewrite.pipeline as pipeline_module
from metile.frontend.errors import GridError, KernelArgumentError
from metile.ir import pretty
from metile.ir.ops import BinOp, Stage
from metile.ir.stmts import Kernel
from metile.ir.values import Binary
from metile.ir.verify import VerifyError
from metile.rewrite.driver import bottom_up
from metile.rewrite.pipeline import DEFAULT_PIPELINE, PipelineError, check_pipeline, run

kernel_module = importlib.import_module("metile.kernel")
BLOCK = 256


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.delenv("METILE_DEBUG", raising=False)
    monkeypatch.delenv("METILE_DEBUG_DIR", raising=False)


def subtract_float_adds_rule(n):
    match n:
        case Binary(BinOp.ADD, a, b) if n.type.dtype.is_float:
            return Binary(BinOp.SUB, a, b, loc=n.loc)
    return None


def subtract_float_adds(k: Kernel) -> Kernel:
    """A Tile IR pass: every float `a + b` becomes `a - b`."""
    return bottom_up(subtract_float_adds_rule, k)


def keep(k: Kernel) -> Kernel:
    return k


def forget_to_return(k: Kernel):
    attrs.evolve(k, name=k.name)  # the bug under test: the new kernel is dropped


def rename_badly(k: Kernel) -> Kernel:
    return attrs.evolve(k, name="not an identifier")


def lower_then_rename_badly(k: Kernel) -> Kernel:
    for p in DEFAULT_PIPELINE:
        k = p(k)
    return rename_badly(k)


def vec_add_body(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(C + offs, metile.load(A + offs, mask=live) + metile.load(B + offs, mask=live), mask=live)


vec_add = metile.kernel(vec_add_body)


@metile.kernel(pipeline=[subtract_float_adds, *metile.DEFAULT_PIPELINE])
def vec_sub_by_pass(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(C + offs, metile.load(A + offs, mask=live) + metile.load(B + offs, mask=live), mask=live)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def operands(n: int, dtype=np.float32):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * 10).astype(dtype)
    b = (rng.standard_normal(n) * 10).astype(dtype)
    return a, b, np.full(n, -1, dtype)


def launch(kernel, n: int, dtype=np.float32, block: int = BLOCK):
    a, b, c = operands(n, dtype)
    kernel[(cdiv(n, block),)](a, b, c, n, BLOCK=block)
    return a, b, c


# -- custom pipelines ----------------------------------------------------------------------------------------------

def test_the_public_default_pipeline_is_the_pipeline_modules():
    assert metile.DEFAULT_PIPELINE is pipeline_module.DEFAULT_PIPELINE
    assert vec_add.pipeline == tuple(DEFAULT_PIPELINE)
    assert metile.kernel(vec_add_body).pipeline == tuple(metile.DEFAULT_PIPELINE)


def test_a_pass_before_the_default_ones_changes_the_result():
    a, b, c = launch(vec_sub_by_pass, 1000)
    np.testing.assert_array_equal(c, a - b)
    a, b, c = launch(vec_add, 1000)
    np.testing.assert_array_equal(c, a + b)


class CountedHashes:
    """A pass (keeping the kernel) that counts how often it is hashed."""

    hashes = 0

    def __call__(self, k: Kernel) -> Kernel:
        return k

    def __hash__(self) -> int:
        CountedHashes.hashes += 1
        return 1


def test_a_compile_cache_hit_does_not_hash_the_pipeline_again():
    counted = CountedHashes()
    k = metile.kernel(vec_add_body, pipeline=[counted, *DEFAULT_PIPELINE])
    a, b, c = operands(300, np.float32)
    k.compile(a, b, c, 300, BLOCK=BLOCK)
    before = CountedHashes.hashes
    first = k.compile(a, b, c, 300, BLOCK=BLOCK)
    assert k.compile(a, b, c, 300, BLOCK=BLOCK) is first and CountedHashes.hashes == before
    k.pipeline = (counted, *DEFAULT_PIPELINE)   # another tuple of the same passes: an equal key, hashed once
    assert k.compile(a, b, c, 300, BLOCK=BLOCK) is first and CountedHashes.hashes == before + 1


def test_integer_adds_are_left_alone_by_the_float_rule():
    a, b, c = launch(vec_sub_by_pass, 300, np.int32)
    np.testing.assert_array_equal(c, a + b)


def test_with_pipeline_gives_a_kernel_lowered_by_other_passes():
    sub = vec_add.with_pipeline([subtract_float_adds, *DEFAULT_PIPELINE])
    assert sub.pipeline == (subtract_float_adds, *DEFAULT_PIPELINE) and vec_add.pipeline == tuple(DEFAULT_PIPELINE)
    a, b, c = launch(sub, 700)
    np.testing.assert_array_equal(c, a - b)
    a, b, c = launch(vec_add, 700)
    np.testing.assert_array_equal(c, a + b)


def test_compiled_entries_are_keyed_by_pipeline():
    x = np.zeros(16, np.float32)
    sub = vec_add.with_pipeline([subtract_float_adds, *DEFAULT_PIPELINE])
    plain, changed = vec_add.compile(x, x, x, 16, BLOCK=64), sub.compile(x, x, x, 16, BLOCK=64)
    assert changed is not plain and changed.metal_ir != plain.metal_ir
    assert changed.tile_ir is plain.tile_ir                      # the Tile IR cache is shared
    assert " - " in changed.msl and " - " not in plain.msl
    same = vec_add.with_pipeline(list(DEFAULT_PIPELINE))         # the same passes: the same entry
    assert same.compile(x, x, x, 16, BLOCK=64) is plain


def test_the_decorator_takes_options_with_or_without_a_function():
    assert metile.kernel()(vec_add_body).pipeline == tuple(DEFAULT_PIPELINE)
    k = metile.kernel(vec_add_body, pipeline=[keep, *DEFAULT_PIPELINE], debug=True)
    assert k.pipeline[0] is keep and k.debug
    assert metile.kernel(debug=True)(vec_add_body).debug


@pytest.mark.parametrize(("bad", "message"), [
    ("lower_everything", "a pipeline is a list of passes"),
    (42, "a pipeline is a list of passes"),
    ([keep, 3], r"pipeline entry 1 \(3\) is not a pass"),
])
def test_a_pipeline_that_is_not_a_list_of_passes_is_refused_at_decoration(bad, message):
    with pytest.raises(PipelineError, match=message):
        metile.kernel(vec_add_body, pipeline=bad)
    with pytest.raises(PipelineError, match=message):
        check_pipeline(bad)


def test_a_pass_that_returns_no_kernel_is_named():
    k = metile.kernel(vec_add_body, pipeline=[keep, forget_to_return, *DEFAULT_PIPELINE])
    x = np.zeros(16, np.float32)
    with pytest.raises(PipelineError, match="pass forget_to_return returned NoneType, not a Kernel") as info:
        k[(1,)](x, x, x, 16, BLOCK=16)
    assert isinstance(info.value, metile.MetileError)
    assert info.value.loc is not None and info.value.loc.line == vec_add_body.__code__.co_firstlineno


def test_a_pipeline_that_stops_before_metal_ir_is_refused():
    x = np.zeros(16, np.float32)
    with pytest.raises(PipelineError, match=r"ends in tile IR after keep; its passes must lower the kernel to Metal"):
        metile.kernel(vec_add_body, pipeline=[keep]).compile(x, x, x, 16, BLOCK=16)
    with pytest.raises(PipelineError, match="ends in tile IR after an empty pipeline"):
        metile.kernel(vec_add_body, pipeline=[]).compile(x, x, x, 16, BLOCK=16)


# -- verification: after every pass in debug mode, not at all otherwise --------------------------------------------

@pytest.fixture
def verify_calls(monkeypatch):
    calls = []
    real = pipeline_module.verify

    def counting(k, *, after):
        calls.append(after)
        return real(k, after=after)

    monkeypatch.setattr(pipeline_module, "verify", counting)
    return calls


def test_run_verifies_only_when_asked_for_each_pass(verify_calls):
    x = np.zeros(16, np.float32)
    tile_ir = vec_add.trace(x, x, x, 16, BLOCK=16)
    out = run([keep, keep, *DEFAULT_PIPELINE], tile_ir)
    assert out.stage is Stage.METAL and verify_calls == []
    verify_calls.clear()
    run([keep, keep, *DEFAULT_PIPELINE], tile_ir, verify_each=True)
    assert verify_calls == ["keep", "keep", *(p.__name__ for p in DEFAULT_PIPELINE)]


@pytest.mark.parametrize(("debug", "env", "each"), [(False, None, False), (True, None, True), (False, "verify", True),
                                                    (False, "1", True)])
def test_kernels_verify_each_pass_in_debug_mode(verify_calls, monkeypatch, debug, env, each):
    if env is not None:
        monkeypatch.setenv("METILE_DEBUG", env)
    k = metile.kernel(vec_add_body, pipeline=[keep, *DEFAULT_PIPELINE], debug=debug)
    a, b, c = launch(k, 100)
    np.testing.assert_array_equal(c, a + b)
    assert len(verify_calls) == (len(k.pipeline) if each else 0)


def test_debug_mode_names_the_pass_that_broke_the_ir():
    x = np.zeros(16, np.float32)
    k = metile.kernel(vec_add_body, pipeline=[keep, rename_badly, *DEFAULT_PIPELINE], debug=True)
    with pytest.raises(VerifyError, match="invalid IR after rename_badly: ") as info:
        k.compile(x, x, x, 16, BLOCK=16)
    assert info.value.after == "rename_badly"


def test_a_broken_pass_goes_unnoticed_by_run_only_outside_debug_mode():
    x = np.zeros(16, np.float32)
    tile_ir = vec_add.trace(x, x, x, 16, BLOCK=16)
    assert run([*DEFAULT_PIPELINE, rename_badly], tile_ir).name == "not an identifier"
    with pytest.raises(VerifyError, match="invalid IR after rename_badly: "):
        run([*DEFAULT_PIPELINE, rename_badly], tile_ir, verify_each=True)
    alone = metile.kernel(vec_add_body, pipeline=[lower_then_rename_badly], debug=True)
    with pytest.raises(VerifyError, match="invalid IR after lower_then_rename_badly: "):
        alone.compile(x, x, x, 16, BLOCK=16)


# -- device limits -------------------------------------------------------------------------------------------------

class RecordingDevice:
    """The CPU device with its limits overridable and its dispatches recorded instead of run."""

    def __init__(self, **limits):
        self.real = metile.device("cpu")
        self.name = "cpu"
        self.max_threads_per_threadgroup = limits.get("threads", self.real.max_threads_per_threadgroup)
        self.max_threadgroup_memory = limits.get("memory", self.real.max_threadgroup_memory)
        self.dispatches = []

    def compile(self, source, *, name=None, build=True):
        return self.real.compile(source, name=name, build=build)

    def dispatch_threadgroups(self, fn, groups, tpt, args):
        self.dispatches.append((groups, tpt))


@pytest.fixture
def recording(monkeypatch):
    def use(**limits):
        dev = RecordingDevice(**limits)
        monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
        return dev
    return use


def claiming(key: str, value: int):
    """A pass that sets field `key` of the kernel's launch plan (as a pass of the user's may)."""
    def claim(k: Kernel) -> Kernel:
        return attrs.evolve(k, plan=attrs.evolve(k.plan, **{key: value}))
    claim.__name__ = f"claim_{key}_{value}"
    return claim


def test_threadgroup_memory_over_the_device_limit_is_refused_before_dispatch(recording):
    dev = recording()
    x = np.zeros(16, np.float32)
    limit = dev.max_threadgroup_memory
    k = metile.kernel(vec_add_body, pipeline=[*DEFAULT_PIPELINE, claiming("threadgroup_memory", limit + 16)])
    with pytest.raises(metile.LaunchError) as info:
        k[(1,)](x, x, x, 16, BLOCK=16)
    msg = info.value.message
    assert f"kernel vec_add_body uses {limit + 16} bytes of threadgroup memory" in msg
    assert f"device 'cpu' allows at most {limit} bytes" in msg
    assert info.value.loc.line == vec_add_body.__code__.co_firstlineno and not dev.dispatches


def test_the_threadgroup_memory_limit_is_the_devices(recording):
    dev = recording(memory=1024)
    x = np.zeros(16, np.float32)
    k = metile.kernel(vec_add_body, pipeline=[*DEFAULT_PIPELINE, claiming("threadgroup_memory", 2048)])
    with pytest.raises(metile.LaunchError, match="uses 2048 bytes of threadgroup memory; device 'cpu' allows at "
                                                 "most 1024 bytes"):
        k.compile(x, x, x, 16, BLOCK=16)
    fits = metile.kernel(vec_add_body, pipeline=[*DEFAULT_PIPELINE, claiming("threadgroup_memory", 1024)])
    compiled = fits.compile(x, x, x, 16, BLOCK=16)
    assert compiled.threadgroup_memory == 1024
    fits[(1,)](x, x, x, 16, BLOCK=16)
    assert dev.dispatches == [((1, 1, 1), (compiled.threadgroup_size, 1, 1))]


def test_kernels_without_threadgroup_memory_report_zero():
    x = np.zeros(16, np.float32)
    assert vec_add.compile(x, x, x, 16, BLOCK=16).threadgroup_memory == 0


def test_threads_per_threadgroup_over_the_device_limit_are_refused(recording):
    dev = recording(threads=512)
    x = np.zeros(16, np.float32)
    k = metile.kernel(vec_add_body, pipeline=[*DEFAULT_PIPELINE, claiming("threads", 1024)])
    with pytest.raises(metile.LaunchError, match="kernel vec_add_body runs 1024 threads per threadgroup; device "
                                                 "'cpu' allows at most 512"):
        k[(1,)](x, x, x, 16, BLOCK=16)
    assert not dev.dispatches


def test_grids_beyond_the_device_limit_raise_grid_error_before_dispatch(recording):
    dev = recording()
    vec_add = metile.kernel(vec_add_body)   # compiled for the recording device
    x = np.zeros(16, np.float32)
    tpt = vec_add.compile(x, x, x, 16, BLOCK=BLOCK).threadgroup_size
    limit = (2**32 - 1) // tpt
    with pytest.raises(GridError) as info:
        vec_add[(limit + 1,)](x, x, x, 16, BLOCK=BLOCK)
    msg = info.value.message
    assert f"grid ({limit + 1},) is too large for vec_add_body: axis 0 allows at most {limit} programs" in msg
    assert f"{tpt} threads per program" in msg and str(2**32 - 1) in msg
    assert not dev.dispatches
    vec_add[(limit,)](x, x, x, 16, BLOCK=BLOCK)
    assert dev.dispatches == [((limit, 1, 1), (tpt, 1, 1))]
    with pytest.raises(GridError, match=f"axis 0 allows at most {limit} programs"):   # the cached launch checks too
        vec_add[limit + 1](x, x, x, 16, BLOCK=BLOCK)
    one = vec_add.compile(x, x, x, 16, BLOCK=1).threadgroup_size
    widest = min(2**31 - 1, (2**32 - 1) // one)
    vec_add[(widest, 7)](x, x, x, 16, BLOCK=1)                                         # other axes: i32 ids
    assert dev.dispatches[-1] == ((widest, 7, 1), (one, 1, 1)) and len(dev.dispatches) == 2
    assert vec_add.compile(x, x, x, 16, BLOCK=1).max_grid == (widest, 2**31 - 1, 2**31 - 1)


@pytest.mark.parametrize(("grid", "message"), [
    ((0,), r"grid \(0,\) is empty or too large: each dimension must be in 1..2147483647"),
    ((4, 2**31), r"grid \(4, 2147483648\) is empty or too large"),
    ((1, 1, 1, 1), "a grid has 1, 2 or 3 dimensions, not 4"),
    ((2.0,), "grid dimensions must be ints, not float"),
    ((True,), "grid dimensions must be ints, not bool"),
])
def test_grid_shape_errors_stay(grid, message, recording):
    dev = recording()
    vec_add = metile.kernel(vec_add_body)
    x = np.zeros(16, np.float32)
    vec_add[(1,)](x, x, x, 16, BLOCK=16)
    for _ in range(2):                                   # first and cached launches alike
        with pytest.raises(GridError, match=message):
            vec_add[grid](x, x, x, 16, BLOCK=16)
    assert len(dev.dispatches) == 1


def test_numpy_integer_grids_still_launch(recording):
    dev = recording()
    vec_add = metile.kernel(vec_add_body)
    x = np.zeros(16, np.float32)
    vec_add[np.int64(3)](x, x, x, 16, BLOCK=16)
    vec_add[[np.int32(2), 2]](x, x, x, 16, BLOCK=16)
    assert [g for g, _ in dev.dispatches] == [(3, 1, 1), (2, 2, 1)]


# -- the launch cache ----------------------------------------------------------------------------------------------

@pytest.fixture
def counted(monkeypatch):
    counts = {"pass": 0, "emit": 0, "settings": 0}

    def count_pass(k: Kernel) -> Kernel:
        counts["pass"] += 1
        return k

    real_emit, real_settings = kernel_module.emit_artifact, kernel_module.debug_settings

    def emit(k):
        counts["emit"] += 1
        return real_emit(k)

    def settings(*a, **kw):
        counts["settings"] += 1
        return real_settings(*a, **kw)

    monkeypatch.setattr(kernel_module, "emit_artifact", emit)
    monkeypatch.setattr(kernel_module, "debug_settings", settings)
    return counts, metile.kernel(vec_add_body, pipeline=[count_pass, *DEFAULT_PIPELINE])


def test_repeated_launches_do_not_trace_lower_or_emit_again(counted, monkeypatch):
    counts, k = counted
    for n in (100, 1000, 77):                            # new arrays and a new n, the same types
        a, b, c = launch(k, n)
        np.testing.assert_array_equal(c, a + b)
    assert counts == {"pass": 1, "emit": 1, "settings": 0} and len(k._cache) == 1
    traced = []
    monkeypatch.setattr(kernel_module.Tracer, "run", lambda self: traced.append(1))
    monkeypatch.setattr(kernel_module, "arg_type", lambda *a: traced.append(2))
    launch(k, 55)
    assert not traced and counts["pass"] == 1


def test_new_types_or_constexprs_compile_again(counted):
    counts, k = counted
    launch(k, 100)
    launch(k, 100, np.int32)
    launch(k, 100, block=64)
    launch(k, 100)
    assert counts["pass"] == 3 and counts["emit"] == 3


def test_debug_settings_are_parsed_once_per_value(counted, monkeypatch):
    counts, k = counted
    monkeypatch.setenv("METILE_DEBUG", "verify")
    for n in (10, 20, 30):
        launch(k, n)
    assert counts == {"pass": 1, "emit": 1, "settings": 1}
    monkeypatch.delenv("METILE_DEBUG")
    launch(k, 40)
    assert counts["pass"] == 2                           # a compile without per-pass verification is another entry


def test_arguments_are_still_checked_on_cached_launches():
    x = np.zeros(16, np.float32)
    vec_add[(1,)](x, x, x, 16, BLOCK=16)
    with pytest.raises(KernelArgumentError, match="does not fit a 64-bit integer"):
        vec_add[(1,)](x, x, x, 2**64, BLOCK=16)
    with pytest.raises(KernelArgumentError, match="float64 array"):
        vec_add[(1,)](x, x, x.astype(np.float64), 16, BLOCK=16)
    with pytest.raises(KernelArgumentError, match="missing constexpr 'BLOCK'"):
        vec_add[(1,)](x, x, x, 16)


def test_scalars_of_other_python_and_numpy_types_convert_to_the_parameter_type():
    n = 40
    a, b, c = operands(n)
    for count in (n, np.int32(n), True, np.int16(n)):
        c[:] = -1
        vec_add[(1,)](a, b, c, count, BLOCK=64)
        want = n if count is not True else 1
        np.testing.assert_array_equal(c[:want], (a + b)[:want])
        assert (c[want:] == -1).all()


def test_runtime_arguments_by_keyword_and_constexprs_by_position():
    a, b, c = operands(50)
    vec_add[(1,)](A=a, B=b, C=c, n=50, BLOCK=64)
    np.testing.assert_array_equal(c, a + b)
    c[:] = 0
    vec_add[(1,)](a, b, c, 50, 64)
    np.testing.assert_array_equal(c, a + b)


def test_buffers_take_the_launch_cache_too():
    for dtype in (np.float32, np.int32, np.float32):     # a new element type compiles another entry
        a, b, _ = operands(64, dtype)
        bufs = [metile.Buffer(data=a), metile.Buffer(data=b), metile.Buffer(shape=(64,), dtype=dtype)]
        for _ in range(2):
            vec_add[(1,)](*bufs, 64, BLOCK=64)
            np.testing.assert_array_equal(bufs[2].numpy(), a + b)


@metile.kernel
def named_like_the_plan(A, C, n, BLOCK: metile.constexpr, threads: metile.constexpr = 0,
                        threads_per_threadgroup: metile.constexpr = 0, role0_first: metile.constexpr = 0):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(C + offs, metile.load(A + offs, mask=live) + (threads + threads_per_threadgroup + role0_first),
                 mask=live)


def test_constexprs_named_like_compiler_facts_change_only_the_kernels_own_code():
    a = np.arange(1000, dtype=np.float32)
    c = np.zeros_like(a)
    plain = named_like_the_plan.compile(a, c, 1000, BLOCK=256)
    named = named_like_the_plan.compile(a, c, 1000, BLOCK=256, threads=1, threads_per_threadgroup=7, role0_first=3)
    assert named.metal_ir.plan == plain.metal_ir.plan and named.threadgroup_size == plain.threadgroup_size
    named_like_the_plan[(4,)](a, c, 1000, BLOCK=256, threads=1, threads_per_threadgroup=7, role0_first=3)
    np.testing.assert_array_equal(c, a + 11)


@metile.kernel
def small_product(A, B, C, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr):
    r, c, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, K)
    a = metile.load(A + r[:, None] * K + k[None, :])
    b = metile.load(B + k[:, None] * N + c[None, :])
    metile.store(C + r[:, None] * N + c[None, :], metile.dot(a, b))


@metile.kernel
def thread_level(X, Y, BLOCK: metile.constexpr):
    t = metile.thread_id()
    metile.store(Y + t, metile.load(X + t) * 2.0)


@pytest.mark.parametrize("n", [1, 2, 8, 16])
def test_num_simdgroups_sets_the_threads_of_elementwise_kernels(n):
    x = np.arange(3000, dtype=np.float32)
    z = np.zeros_like(x)
    compiled = vec_add.compile(x, x, z, 3000, BLOCK=1024, num_simdgroups=n)
    assert compiled.metal_ir.plan.threads == compiled.threadgroup_size == 32 * n
    assert compiled.tile_ir.options.num_simdgroups == n
    vec_add[(3,)](x, x, z, 3000, BLOCK=1024, num_simdgroups=n)
    np.testing.assert_array_equal(z, 2 * x)


@pytest.mark.parametrize("kw, sgs", [({}, 4), ({"num_simdgroups": 1}, 1), ({"num_simdgroups": 8}, 8),
                                     ({"NUM_SG": 2}, 2)])
def test_num_simdgroups_splits_a_dot_among_that_many_simdgroups(kw, sgs):
    rng = np.random.default_rng(0)
    a, b = rng.random((32, 32), dtype=np.float32), rng.random((32, 32), dtype=np.float32)
    c = np.zeros((32, 32), np.float32)
    assert small_product.compile(a, b, c, M=32, N=32, K=32, **kw).threadgroup_size == 32 * sgs
    small_product[(1,)](a, b, c, M=32, N=32, K=32, **kw)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_num_simdgroups_values_that_cannot_work_are_refused():
    x = np.zeros(64, np.float32)
    for bad in (0, 33, 2.0, "4"):
        with pytest.raises(KernelArgumentError, match="num_simdgroups=.* must be an int from 1 to 32"):
            vec_add[(1,)](x, x, x, 64, BLOCK=64, num_simdgroups=bad)
    with pytest.raises(KernelArgumentError, match="num_simdgroups=2 and NUM_SG=4 disagree"):
        vec_add[(1,)](x, x, x, 64, BLOCK=64, num_simdgroups=2, NUM_SG=4)
    with pytest.raises(metile.LoweringUnavailableError, match="num_simdgroups=4 asks for 128 threads, but this "
                                                              "kernel runs 64: the kernel runs one thread per element"):
        thread_level[(1,)](x, x, BLOCK=64, num_simdgroups=4)
    a = np.arange(64, dtype=np.float32).reshape(8, 8)   # one 8x8 piece on two simdgroups: the second copies it
    c = np.zeros_like(a)
    small_product[(1,)](a, a, c, M=8, N=8, K=8, num_simdgroups=2)
    np.testing.assert_allclose(c, a @ a)


def test_compiler_options_and_the_launch_plan_print_and_parse_back():
    from metile.ir import parse, pretty, verify

    x = np.arange(3000, dtype=np.float32)
    compiled = vec_add.compile(x, x, x, 3000, BLOCK=1024, num_simdgroups=2)
    for k in (compiled.tile_ir, compiled.metal_ir):
        text = pretty(k)
        back = parse(text)
        verify(back)
        assert (back.options, back.plan, back.meta) == (k.options, k.plan, k.meta)
        assert pretty(back) == text
    assert "options {num_simdgroups = 2}" in pretty(compiled.tile_ir)
    assert "plan {threads = 64, vector_width = 4," in pretty(compiled.metal_ir)


@metile.kernel
def strided_scale(X, Y, n, stride, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < n
    metile.store(Y + offs, metile.load(X + offs * stride, mask=mask) * 2.0, mask=mask)


def test_an_integer_argument_equal_to_one_is_compiled_as_the_constant():
    k = metile.kernel(strided_scale.fn)
    x = np.arange(4096 * 3, dtype=np.float32)
    y = np.zeros(4096, np.float32)
    efficiency = {}
    for stride in (1, 2, 1, 3, np.int32(1), np.int32(2)):
        p = k[(16,)](x, y, 4096, stride, BLOCK=256, profile=True)
        np.testing.assert_array_equal(y, 2 * x[:: int(stride)][:4096])      # never a stale specialization
        efficiency[int(stride)] = p.to_dict()["coalescing_efficiency"]
    assert len(k._compiled) == 2                 # one for 1, one for every other value
    assert efficiency[1] == 1.0 and efficiency[2] < 0.5   # the unit stride is proven contiguous: vector loads
    general = k.compile(x, y, 4096, 2, BLOCK=256)
    unit = k.compile(x, y, 4096, 1, BLOCK=256)
    assert [p.name for p in unit.metal_ir.params] == [p.name for p in general.metal_ir.params]  # still bound
    assert unit.metal_ir != general.metal_ir


@metile.kernel
def row_scale(X, Y, n_cols, BLOCK: metile.constexpr):
    row, cols = metile.program_id(0), metile.arange(0, BLOCK)
    ok = cols < n_cols
    metile.store(Y + row * n_cols + cols, metile.load(X + row * n_cols + cols, mask=ok) * 3.0, mask=ok)


def test_an_integer_argument_that_is_a_multiple_of_16_is_compiled_as_one():
    k = metile.kernel(row_scale.fn)
    rows = 5
    for n_cols in (48, 50, 64, np.int32(32), 33, 0):
        x = np.random.default_rng(int(n_cols)).standard_normal(rows * int(n_cols)).astype(np.float32)
        y = np.zeros(rows * int(n_cols), np.float32)
        k[(rows,)](x, y, n_cols, BLOCK=256)
        np.testing.assert_array_equal(y, 3 * x)     # never a stale specialization
    assert len(k._compiled) == 2                 # one for the multiples of 16 (0 too), one for every other value
    x = np.zeros(rows * 256, np.float32)
    aligned, general = k.compile(x, x, 48, BLOCK=256), k.compile(x, x, 50, BLOCK=256)
    assert "%n_cols: i32 multiple 16" in pretty(aligned.tile_ir) and "multiple" not in pretty(general.tile_ir)
    assert "float4" in aligned.msl and "float4" not in general.msl   # rows proven aligned: vector loads and stores
    assert k.cache_key(x, x, 32, BLOCK=256) == k.cache_key(x, x, np.int32(-32), BLOCK=256) != \
        k.cache_key(x, x, 31, BLOCK=256)
