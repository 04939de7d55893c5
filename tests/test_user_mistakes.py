"""User mistakes around the kernel language and the host API: each raises a `MetileError` subclass that names
the problem (at the user's line for kernel code), never a raw Python exception, a C++ compile error of the
emitted MSL, or a silently different result."""

from __future__ import annotations

import functools
import importlib.util
import math

import numpy as np
import pytest

import metile
from metile.frontend import errors as E

X = np.zeros(64, np.float32)


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def bad_other(X, KIND: metile.constexpr):
    o = metile.arange(0, 64)
    metile.store(X + o, metile.load(X + o, mask=o < 3, other=X if KIND == 1 else "a"))


@metile.kernel
def store_pointer_tile(X):
    metile.tile_store(X, 0, 0, 8, X, (8, 8))


@metile.kernel
def cdiv_by_zero(X, BLOCK: metile.constexpr):
    metile.store(X + metile.arange(0, metile.cdiv(BLOCK, 0)), 1.0)


@metile.kernel
def lane_out_of_range(X, LANE: metile.constexpr, BROADCAST: metile.constexpr, BLOCK: metile.constexpr):
    t = metile.thread_id()
    v = metile.load(X + t)
    w = metile.simd_broadcast(v, LANE) if BROADCAST else metile.simd_shuffle_xor(v, LANE)
    metile.store(X + t, w)


@pytest.mark.parametrize(("call", "cls", "message"), [
    (lambda: bad_other[(1,)](X, KIND=1), E.KernelTypeError,
     "`other` must be a number or a tile of values, not a pointer"),
    (lambda: bad_other[(1,)](X, KIND=0), E.KernelTypeError, "expected a number or a traced value, not str"),
    (lambda: store_pointer_tile[(1,)](X), E.KernelTypeError, "tile_store: cannot write a pointer"),
    (lambda: cdiv_by_zero[(1,)](X, BLOCK=64), E.KernelTypeError, r"metile.cdiv: division by zero"),
    (lambda: lane_out_of_range[(1,)](X, LANE=32, BROADCAST=False, BLOCK=32), E.KernelTypeError,
     r"simd_shuffle_xor: lane operand 32 is outside 0..31"),
    (lambda: lane_out_of_range[(1,)](X, LANE=-1, BROADCAST=True, BLOCK=32), E.KernelTypeError,
     r"simd_broadcast: lane operand -1 is outside 0..31"),
], ids=["other_pointer", "other_str", "tile_store_pointer", "cdiv_zero", "shuffle_lane", "broadcast_lane"])
def test_kernel_mistakes_are_refused_at_their_line(call, cls, message):
    with pytest.raises(cls, match=message) as info:
        call()
    assert info.value.loc is not None and info.value.loc.file == __file__


def test_lane_out_of_range_kernel_is_fine_within_range():
    x = np.arange(32, dtype=np.float32)
    lane_out_of_range[(1,)](x, LANE=31, BROADCAST=True, BLOCK=32)
    np.testing.assert_array_equal(x, np.full(32, 31.0))


def test_cdiv_by_zero_on_the_host():
    with pytest.raises(metile.MetileError, match="division by zero"):
        metile.cdiv(5, 0)


@metile.kernel
def fill(Out, n, value, BLOCK: metile.constexpr = 64):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, value, mask=offs < n)


def test_a_misspelt_constexpr_is_refused_instead_of_falling_back_to_its_default():
    out = np.zeros(256, np.float32)
    with pytest.raises(E.KernelArgumentError, match=r"unexpected keyword argument 'BLOKC'.*did you mean 'BLOCK'"):
        fill[(1,)](out, 256, 1.0, BLOKC=256)
    fill[(4,)](out, 256, 1.0, NUM_SG=4)  # the original meTile's tuning keywords are still accepted
    assert out.sum() == 256


@pytest.mark.parametrize("thing", [5, len, functools.partial(lambda x: x, 1), type("Callable", (), {"__call__": id})()])
def test_only_functions_become_kernels(thing):
    with pytest.raises(E.UnsupportedSyntaxError, match="applies to functions written with `def`"):
        metile.kernel(thing)


MACROS = ["NULL", "FLT_MAX", "INT_MAX", "M_PI_F", "HUGE_VALF", "__LINE__", "restrict", "MT_F1", "_Foo",
          # C++ alternative tokens and keywords, and Metal type names, which are not macros but no name either
          "bitand", "compl", "xor_eq", "thread_local", "char16_t", "sampler", "texture2d", "threadgroup_imageblock"]


def test_parameters_named_like_c_or_metal_macros_compile_and_run(tmp_path):
    """Parameter names reach the MSL; the ones a header may define as macros, and C++ or Metal reserved words,
    are renamed there (a parameter named `bitand` or `sampler` used to make MSL that does not compile)."""
    path = tmp_path / "macro_params.py"
    path.write_text("import metile\n" + "".join(
        f"@metile.kernel\ndef k{i}({name}, Y, BLOCK: metile.constexpr):\n"
        f"    t = metile.arange(0, BLOCK)\n    metile.store(Y + t, metile.load({name} + t) * 2.0)\n"
        for i, name in enumerate(MACROS)))
    spec = importlib.util.spec_from_file_location("macro_params", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.arange(32, dtype=np.float32)
    for i in range(len(MACROS)):
        y = np.zeros(32, np.float32)
        getattr(module, f"k{i}")[(1,)](x, y, BLOCK=32)
        np.testing.assert_array_equal(y, 2 * x, err_msg=MACROS[i])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: metile.Buffer(), "needs `data` or a `shape`"),
    (lambda: metile.Buffer(shape=(-1,)), "non-negative ints, not"),
    (lambda: metile.Buffer(shape="abc"), "non-negative ints, not 'abc'"),
    (lambda: metile.Buffer(shape=(2.5,)), r"non-negative ints, not \(2.5,\)"),
    (lambda: metile.Buffer(shape=(2**62,)), "more than any device has"),
    (lambda: metile.Buffer(shape=(4,), dtype="f33"), "'f33' is not a dtype"),
    (lambda: metile.Buffer(data=np.zeros(4, np.float32), shape=(8,)), r"shape \(8,\) does not match"),
    (lambda: metile.Buffer(data=np.zeros(4, np.float32), dtype=np.int32), "does not match the data's dtype"),
    (lambda: metile.Buffer(shape=(4,), device=5), "needs a device"),
    (lambda: metile.Buffer((1024,), dtype=np.float32), r"the data must be an array .* not tuple \(1024,\)"),
    (lambda: metile.Buffer([[1, 2], [3]]), r"the data must be an array .* not list"),
    (lambda: metile.Buffer(data=np.zeros(4, np.int32), dtype=np.float32), "does not match the data's dtype int32"),
    (lambda: metile.Buffer(shape=(4,), dtype=None), "dtype=None names no element type"),
    (lambda: metile.Buffer(data=np.zeros(4, object)), "Metal kernels cannot hold object elements"),
    (lambda: metile.Buffer(shape=(4,), dtype=np.float64), "Metal kernels cannot hold float64 elements"),
    (lambda: metile.device(5), "a device is named by a string"),
])
def test_buffer_and_device_mistakes(make, message):
    with pytest.raises(metile.MetileError, match=message):
        make()


@pytest.mark.parametrize(("name", "dtype"), [("f32", np.float32), ("f16", np.float16), ("i8", np.int8),
                                             ("u32", np.uint32), ("bool", np.bool_)])
def test_buffers_take_metiles_element_type_names(name, dtype):
    """"f16" is metile's half, not numpy's 16-byte float128 ("f16" read as a numpy type string)."""
    buf = metile.Buffer.zeros((4,), dtype=name, device="cpu")
    assert buf.dtype == np.dtype(dtype) and buf.numpy().shape == (4,)


@metile.kernel
def huge_tile(X, KIND: metile.constexpr):
    if KIND == 0:
        metile.store(X + metile.arange(0, 1 << 40), 1.0)
    if KIND == 1:
        metile.store(X, metile.sum(metile.zeros((512, 512))))
    if KIND == 2:
        r = metile.arange(0, 1024)
        metile.store(X, metile.sum(r[:, None] + r[None, :]))


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_tiles_beyond_the_size_limit_are_refused_at_once(kind):
    """A huge tile used to make the lowering run for minutes or forever; the limit is 65536 elements."""
    with pytest.raises(E.ShapeMismatchError, match=r"more than metile's limit of 65536") as info:
        huge_tile[(1,)](X, KIND=kind)
    assert info.value.loc.file == __file__


@pytest.mark.parametrize(("name", "value", "message"), [
    ("METILE_CPU_WORKERS", "abc", "a whole number of worker threads from 0"),
    ("METILE_CPU_WORKERS", "-3", "a whole number of worker threads from 0"),
    ("METILE_CPU_WORKERS", "100000", r"to 1024"),
    ("METILE_CPU_TIMEOUT", "soon", r"a number >= 0 \(0: no limit\)"),
    ("METILE_CPU_TIMEOUT", "-1", r"a number >= 0"),
    ("METILE_CPU_TIMEOUT", "nan", r"a number >= 0"),
])
def test_bad_cpu_device_settings_are_refused_by_name(monkeypatch, name, value, message):
    """They used to escape as a raw ValueError or OverflowError at the first launch."""
    from metile.devices import _cpu_options
    monkeypatch.setenv(name, value)
    with pytest.raises(metile.DeviceError, match=f"{name}='{value}' is not a valid setting.*{message}"):
        _cpu_options()


@pytest.mark.parametrize(("name", "value", "field", "expected"), [
    ("METILE_CPU_WORKERS", "3", "workers", 3), ("METILE_CPU_WORKERS", " ", "workers", 0),
    ("METILE_CPU_TIMEOUT", "0", "timeout_s", 0.0), ("METILE_CPU_TIMEOUT", "2.5", "timeout_s", 2.5),
])
def test_good_cpu_device_settings_are_read(monkeypatch, name, value, field, expected):
    from metile.devices import _cpu_options
    monkeypatch.setenv(name, value)
    assert getattr(_cpu_options(), field) == expected


def test_an_unusable_cache_directory_is_refused_by_name(monkeypatch, tmp_path):
    from metile.devices import _cache_dir
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("METILE_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(metile.DeviceError, match="cannot use .*a_file/cache.* as its kernel cache directory"):
        _cache_dir()
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path / "new" / "cache"))
    assert _cache_dir().is_dir()


@metile.kernel
def add_one(X, BLOCK: metile.constexpr):
    o = metile.arange(0, BLOCK)
    metile.store(X + o, metile.load(X + o) + 1.0)


def test_an_unwritable_debug_directory_is_refused_by_name(monkeypatch, tmp_path):
    """It used to escape as a raw FileNotFoundError or NotADirectoryError from the compile."""
    from metile.debug import DebugSettingError
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("METILE_DEBUG", "msl")
    monkeypatch.setenv("METILE_DEBUG_DIR", str(blocker / "dumps"))
    with pytest.raises(DebugSettingError, match="METILE_DEBUG_DIR=.*a_file/dumps.*: cannot write"):
        add_one[(1,)](np.zeros(64, np.float32), BLOCK=64)


@metile.kernel
def pick_from_tuple(X, i):
    table = (1.0, 2.0)
    metile.store(X, table[i])


def test_a_tuple_indexed_by_a_runtime_value_is_refused_at_the_index():
    """The message used to name the tracer's internal class ('not Param')."""
    with pytest.raises(E.KernelTypeError, match="a compile-time tuple can only be indexed by a compile-time value"
                       ".*metile.where") as info:
        pick_from_tuple[(1,)](np.zeros(4, np.float32), 1)
    head, source, caret = str(info.value).splitlines()
    assert head.startswith(f"{__file__}:{info.value.loc.line}:") and "table[i]" in source
    assert caret.index("^") == source.index("i]")  # under the index


class _TensorLike:
    """An array of another library: `dtype`, `nbytes` and `numpy()`, with a dtype numpy does not know."""

    dtype = "torch.float32"
    nbytes = 16
    shape = (4,)

    def numpy(self):
        return np.zeros(4, np.float32)


@pytest.mark.parametrize(("arg", "message"), [
    (np.zeros(64, ">f4"), r"argument 'X' is a big-endian float32 array \(>f4\): Apple GPUs are little-endian; "
                          r"convert with .astype\(np.float32\)"),
    (np.zeros(64, ">i2"), r"a big-endian int16 array \(>i2\)"),
    (np.zeros(64, object), "argument 'X' is an object array: Metal cannot hold it"),
    (_TensorLike(), "argument 'X' has the element type 'torch.float32', which numpy does not know"),
], ids=["big_endian_f32", "big_endian_i16", "object", "tensor_like"])
def test_arrays_metal_cannot_hold_are_refused_with_the_reason(arg, message):
    with pytest.raises(E.KernelArgumentError, match=message) as info:
        add_one[(1,)](arg, BLOCK=64)
    assert info.value.loc.file == __file__


@metile.kernel
def from_constexpr(Out, C: metile.constexpr, KIND: metile.constexpr):
    if KIND == "sign":
        metile.store(Out + metile.arange(0, 32), math.copysign(1.0, C))
    if KIND == "table":
        metile.store(Out + metile.arange(0, 32), C[1500] * 1.0)
    if KIND == "zeros":
        metile.store(Out + metile.arange(0, 32), metile.sum(metile.zeros(C)) + 1.0)


def test_constexprs_that_compare_equal_but_trace_apart_get_kernels_of_their_own():
    """The compile caches used to key a constexpr by `(class, value)` (and an unhashable one by its `repr`), so
    `-0.0` reused the kernel of `0.0`, two 2000-element tables whose `repr`s numpy abbreviates alike shared one,
    and a `(8.0, 8)` shape reused the kernel of `(8, 8)` instead of being refused."""
    out = np.zeros(32, np.float32)
    from_constexpr[(1,)](out, C=0.0, KIND="sign")
    from_constexpr[(1,)](out, C=-0.0, KIND="sign")
    assert out[0] == -1.0
    t1, t2 = np.zeros(2000), np.zeros(2000)
    t1[1500], t2[1500] = 1.0, 2.0
    assert repr(t1) == repr(t2)
    from_constexpr[(1,)](out, C=t1, KIND="table")
    assert out[0] == 1.0
    from_constexpr[(1,)](out, C=t2, KIND="table")
    assert out[0] == 2.0
    from_constexpr[(1,)](out, C=(8, 8), KIND="zeros")
    with pytest.raises(E.KernelTypeError, match="must be an int, not float"):
        from_constexpr[(1,)](out, C=(8.0, 8), KIND="zeros")


def test_exact_keys_tell_apart_what_traces_apart():
    from metile.frontend.specialize import exact_key
    assert exact_key(0.0) != exact_key(-0.0) and exact_key(1) != exact_key(1.0) != exact_key(True)
    assert exact_key((1, 2.0)) == exact_key((1, 2.0)) and exact_key((1, 2.0)) != exact_key((1, 2))
    assert exact_key(np.arange(3)) != exact_key(np.arange(3.0)) != exact_key(np.arange(4.0)[:3].reshape(3, 1))
    assert exact_key({"a": [1, 2]}) == exact_key({"a": [1, 2]}) != exact_key({"a": [1, 3]})
    thing = object.__new__(type("Unhashable", (), {"__hash__": None}))
    assert exact_key(thing) == exact_key(thing) and exact_key(thing) != exact_key(
        object.__new__(type(thing)))
    hash(exact_key(thing))


@metile.kernel
def tile_mistakes(X, KIND: metile.constexpr):
    o = metile.arange(0, 32)
    if KIND == "bool_acc":
        a = metile.zeros((16, 16))
        metile.store(X + o, metile.sum(metile.dot(a, a, a < 1.0)))
    if KIND == "pointer_acc":
        metile.store(X + o, metile.sum(metile.dot(metile.zeros((16, 16)), metile.zeros((16, 16)), X)))
    if KIND == "other_shape":
        metile.store(X + o, metile.load(X + o, mask=o < 3, other=metile.arange(0, 16) * 1.0))
    if KIND == "tuple_mask":
        metile.store(X + o, 1.0, mask=(1, 2))
    if KIND == "str_mask":
        metile.store(X + o, metile.load(X + o, mask="abc"))
    if KIND == "arange_i32":
        metile.store(X + o, metile.sum(metile.arange(2**31 - 10, 2**31 + 10)) * 1.0)
    if KIND == "tile_row_offset":
        metile.store(X + o, metile.sum(metile.tile_load(X, metile.arange(0, 4), 0, 8, (4, 8))))
    if KIND == "tile_stride":
        metile.tile_store(X, 0, 0, 1.5, metile.zeros((4, 8)), (4, 8))


@pytest.mark.parametrize(("kind", "cls", "message"), [
    ("bool_acc", E.KernelTypeError, "dot: the accumulator is a bool tile"),
    ("pointer_acc", E.KernelTypeError, r"dot: the accumulator is a pointer \(ptr<f32, device>\); load the values"),
    ("other_shape", E.ShapeMismatchError, r"a tile of shape \[16\] cannot be broadcast to shape \[32\]"),
    ("tuple_mask", E.KernelTypeError, r"the mask must be bool .*not tuple \(1, 2\)"),
    ("str_mask", E.KernelTypeError, r"the mask must be bool .*not str 'abc'"),
    ("arange_i32", E.KernelTypeError, r"arange\(2147483638, 2147483658\) holds values beyond i32"),
    ("tile_row_offset", E.KernelTypeError, r"tile_load: the row offset must be an integer scalar, not tile<4xi32>"),
    ("tile_stride", E.KernelTypeError, r"tile_store: the row stride must be an integer scalar, not f32"),
])
def test_tile_mistakes_that_used_to_give_silent_results(kind, cls, message):
    """Each compiled and ran, or failed elsewhere: a bool accumulator added as bools, a pointer accumulator made
    the dot a pointer (refused at the store), a 16-element `other` was read as 32, a tuple
    or string mask meant True, the arange wrapped around, and a tile offset or a float stride read other rows."""
    with pytest.raises(cls, match=message) as info:
        tile_mistakes[(1,)](np.zeros(32, np.float32), KIND=kind)
    assert info.value.loc.file == __file__


@metile.kernel
def bool_zeros(X):
    metile.store(X + metile.arange(0, 32), metile.zeros((32,), dtype="bool"))


def test_bool_zeros_are_false():
    """`zeros(dtype="bool")` used to be refused with "the constant 0 does not fit bool"."""
    x = np.ones(32, np.bool_)
    bool_zeros[(1,)](x)
    assert not x.any()


@metile.kernel
def python_mistakes(X, FLAGS: metile.constexpr, KIND: metile.constexpr):
    if KIND == "truth":
        if FLAGS:  # the truth of an array
            metile.store(X + metile.arange(0, 32), 1.0)
    if KIND == "in":
        if 3 in FLAGS:  # membership in an int
            metile.store(X + metile.arange(0, 32), 1.0)


@pytest.mark.parametrize(("kind", "flags", "message"), [
    ("truth", np.array([True, False]), "raised ValueError: The truth value of an array"),
    ("in", 5, "raised TypeError: argument of type 'int' is not iterable"),
])
def test_python_errors_of_compile_time_code_are_reported_at_their_statement(kind, flags, message):
    """They used to escape as raw Python exceptions from the tracer."""
    with pytest.raises(E.KernelTypeError, match=f"running this statement at compile time {message}") as info:
        python_mistakes[(1,)](X, FLAGS=flags, KIND=kind)
    assert info.value.loc.file == __file__
    assert ("# the truth" if kind == "truth" else "# membership") in str(info.value).splitlines()[1]


def test_a_chain_too_deep_to_compile_is_refused_with_advice(tmp_path):
    """A Python `for` over a constexpr range unrolls into one expression; past Python's recursion limit the
    compile used to end in a raw RecursionError."""
    path = tmp_path / "deep_chain.py"
    path.write_text("import metile\n\n@metile.kernel\ndef deep(X, N: metile.constexpr):\n"
                    "    o = metile.arange(0, 32)\n    x = metile.load(X + o)\n    acc = x\n"
                    "    for _ in range(N):\n        acc = acc + x\n    metile.store(X + o, acc)\n")
    spec = importlib.util.spec_from_file_location("deep_chain", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.ones(32, np.float32)
    module.deep[(1,)](x, N=50)
    assert x[0] == 51.0
    with pytest.raises(E.KernelTypeError, match="too deep for metile to compile.*use metile.tile_range") as info:
        module.deep[(1,)](x, N=2000)
    assert info.value.loc.file == str(path)


def test_a_pass_that_fails_is_named_in_a_pipeline_error():
    from metile.rewrite.pipeline import PipelineError

    def two_args(k, extra):
        return k

    for bad, message in ((two_args, "pass two_args raised TypeError"), (len, "pass len raised TypeError")):
        with pytest.raises(PipelineError, match=message):
            add_one.with_pipeline([bad, *metile.DEFAULT_PIPELINE])[(1,)](np.zeros(64, np.float32), BLOCK=64)


def test_a_runtime_built_by_a_c_driver_is_refused_as_not_a_cpp_compiler(monkeypatch, tmp_path):
    """With CXX=gcc (the C driver) the runtime builds without the C++ library and used to fail to load with a
    raw OSError."""
    from metile.metal.cpu import runtime_api
    from metile.metal.cpu.toolchain import Compiler
    broken = tmp_path / "libbroken.so"
    broken.write_text("not a library")
    monkeypatch.setattr(runtime_api, "build_runtime", lambda compiler, cache_dir: broken)
    with pytest.raises(metile.CompilerNotFoundError, match="CXX must name a C\\+\\+ compiler"):
        runtime_api.load_runtime(Compiler("/usr/bin/gcc", "gcc", 12, "gcc 12"), tmp_path)
