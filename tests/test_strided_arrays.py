"""Numpy arrays are passed as they are: a strided view (a slice of rows, a transposed or stepped view) is the memory
from its first element to its last, so the strides a kernel is given are the real ones, and only the view's own
elements are written back (its parent's gaps never are). A view the kernel only reads may repeat elements (a zero
stride, as np.broadcast_to and torch's expand make). Views a kernel cannot index as they are (negative strides,
overlapping elements of a view it may write, strides that are not whole elements) are refused, naming
np.ascontiguousarray."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError
from metile.metal.errors import ArrayLayoutError
from tests.msl_source import kernel_line as line_of

SENTINEL = -12345.0
HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def scale_2d(X, Y, n_cols, x_row, x_col, y_row, y_col, alpha, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    live = cols < n_cols
    x = metile.load(X + row * x_row + cols * x_col, mask=live)
    metile.store(Y + row * y_row + cols * y_col, x * alpha, mask=live)


@metile.kernel
def scale_in_place(X, n, stride, alpha, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    at = X + offs * stride
    metile.store(at, metile.load(at, mask=live) * alpha, mask=live)


def elements(a: np.ndarray) -> tuple[int, ...]:
    """The strides of `a` in elements, as a kernel takes them."""
    return tuple(s // a.itemsize for s in a.strides)


def launch_2d(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> None:
    rows, cols = x.shape
    scale_2d[(rows,)](x, y, cols, *elements(x), *elements(y), alpha, BLOCK=metile.next_power_of_2(cols))


def data(rows: int, cols: int) -> np.ndarray:
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / 7


def test_a_slice_of_columns_is_read_and_written_with_its_row_stride():
    """`x[:, :781]` of 800-wide data has a row stride of 800: packing it into a contiguous copy (as metile used to)
    made the kernel read the wrong rows from row 1 on, and fault past the end."""
    base = data(64, 800)
    out = np.full((64, 800), SENTINEL, np.float32)
    x, y = base[:, :781], out[:, :781]
    assert elements(x) == (800, 1)
    launch_2d(x, y)
    np.testing.assert_array_equal(y, 2 * base[:, :781])
    assert (out[:, 781:] == SENTINEL).all(), "the gaps between the view's rows were written"
    np.testing.assert_array_equal(base, data(64, 800))  # a read argument is left as it was


def test_a_transposed_view_and_a_fortran_array_keep_their_strides():
    base = data(48, 200)
    t = base.T                                   # shape (200, 48), strides (1, 200) in elements
    out = np.full((48, 200), SENTINEL, np.float32)
    launch_2d(t, out.T)
    np.testing.assert_array_equal(out, 2 * base)
    fortran = np.asfortranarray(data(30, 50))
    result = np.asfortranarray(np.full((30, 50), SENTINEL, np.float32))
    launch_2d(fortran, result)
    np.testing.assert_array_equal(result, 2 * fortran)


def test_a_view_with_a_step_is_updated_in_place_and_its_gaps_are_left_alone():
    x = np.arange(1000, dtype=np.float32)
    view = x[::2]
    scale_in_place[(metile.cdiv(500, 128),)](view, 500, 2, 3.0, BLOCK=128)
    np.testing.assert_array_equal(x[::2], 3 * np.arange(0, 1000, 2))
    np.testing.assert_array_equal(x[1::2], np.arange(1, 1000, 2))


def test_gaps_hold_what_the_parent_holds_and_are_never_written():
    """The kernel sees the span as memory (the gaps are the parent's elements); a kernel that writes a gap writes its
    own copy, which is not copied back."""
    base = data(8, 40)
    x = base[:, 4:20]                                     # its span: from row 0, column 4 to row 7, column 19
    scale_2d[(7,)](x, x, 40, 40, 1, 40, 1, 0.5, BLOCK=64)  # rows 0..6: 40 elements each, 24 of them gaps
    expect = data(8, 40)
    expect[:7, 4:20] /= 2
    np.testing.assert_array_equal(base, expect)


@pytest.mark.parametrize(("make", "says"), [
    (lambda: data(16, 16)[::-1], "negative stride"),
    (lambda: data(16, 16)[:, ::-1], "negative stride"),
    (lambda: np.zeros((16, 16), dtype=[("a", np.float32), ("b", np.uint8)])["a"], "not a whole number"),
], ids=["rows-reversed", "columns-reversed", "packed-field"])
def test_views_a_kernel_cannot_index_are_refused_at_the_parameter(make, says):
    x = make()
    y = np.zeros((16, 16), np.float32)
    for _ in range(2):  # the first launch and a cached one (same types) alike
        with pytest.raises(KernelArgumentError, match=says) as info:
            scale_2d[(16,)](x, y, 16, 16, 1, 16, 1, 2.0, BLOCK=16)
        err = info.value
        assert err.message.startswith("argument 'X' is a numpy view") and "np.ascontiguousarray" in err.message
        assert err.loc.line == line_of(scale_2d.fn, "def scale_2d")
        launch_2d(data(16, 16), y)
    assert (y == 2 * data(16, 16)).all()


def test_a_refused_output_view_is_named_too():
    x = data(16, 16)
    with pytest.raises(KernelArgumentError, match="argument 'Y' is a numpy view with a negative stride"):
        scale_2d[(16,)](x, np.zeros((16, 16), np.float32)[::-1], 16, 16, 1, 16, 1, 2.0, BLOCK=16)


@pytest.mark.parametrize("make", [
    lambda: np.broadcast_to(np.zeros(16, np.float32), (16, 16)),
    lambda: np.lib.stride_tricks.as_strided(np.zeros(64, np.float32), (16, 16), (8, 4)),
], ids=["broadcast", "as_strided"])
def test_an_output_view_whose_elements_overlap_is_refused(make):
    """A store to one element of such a view would change others."""
    with pytest.raises(KernelArgumentError, match="argument 'Y' is a numpy view whose elements overlap") as info:
        scale_2d[(16,)](data(16, 16), make(), 16, 16, 1, 16, 1, 2.0, BLOCK=16)
    assert "np.ascontiguousarray" in info.value.message


def test_a_read_view_may_repeat_its_elements():
    """A zero stride (np.broadcast_to, torch's expand) or an as_strided view with overlapping rows is read as it is
    when the kernel does not write it, as Triton reads an expanded tensor."""
    row = np.arange(16, dtype=np.float32) / 3
    y = np.full((16, 16), SENTINEL, np.float32)
    launch_2d(np.broadcast_to(row, (16, 16)), y)
    np.testing.assert_array_equal(y, np.broadcast_to(2 * row, (16, 16)))
    flat = np.arange(136, dtype=np.float32)
    windows = np.lib.stride_tricks.as_strided(flat, (16, 16), (32, 4))   # row r: flat[8r : 8r + 16]
    launch_2d(windows, y, alpha=0.5)
    np.testing.assert_array_equal(y, windows / 2)


def test_an_expanded_torch_tensor_is_read_as_it_is():
    torch = pytest.importorskip("torch")
    col = torch.arange(16, dtype=torch.float32)[:, None] / 7
    x = col.expand(16, 16)                                  # strides (1, 0)
    y = torch.full((16, 16), SENTINEL)
    scale_2d[(16,)](x, y, 16, *x.stride(), *y.stride(), 2.0, BLOCK=16)
    torch.testing.assert_close(y, (2 * col).expand(16, 16), rtol=0, atol=0)
    with pytest.raises(KernelArgumentError, match="argument 'Y' .*overlap"):
        scale_2d[(16,)](y, torch.zeros(16, 1).expand(16, 16), 16, 16, 1, 0, 1, 2.0, BLOCK=16)


# -- the raw device API ----------------------------------------------------------------------------------------------

STRIDED = HEAD + """
kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant uint& sx [[buffer(2)]], constant uint& sy [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    y[i * sy] = 2.0f * x[i * sx];
}
"""


def test_raw_dispatches_take_strided_views_as_they_are():
    cpu = metile.device("cpu")
    fn = cpu.compile(STRIDED, name="strided.metal").function("scale")
    x = np.arange(300, dtype=np.float32)
    out = np.full(300, SENTINEL, np.float32)
    cpu.dispatch_threads(fn, 100, 32, [x[::3], out[1::3], np.uint32(3), np.uint32(3)])
    np.testing.assert_array_equal(out[1::3], 2 * x[::3])
    assert (out[0::3] == SENTINEL).all() and (out[2::3] == SENTINEL).all()


def test_raw_dispatches_refuse_views_they_cannot_take():
    cpu = metile.device("cpu")
    fn = cpu.compile(STRIDED, name="strided.metal").function("scale")
    x = np.arange(300, dtype=np.float32)
    with pytest.raises(ArrayLayoutError, match=r"argument 1 \(`y`, .*\) is a numpy view with a negative stride") as e:
        cpu.dispatch_threads(fn, 100, 32, [x, x[::-3], np.uint32(1), np.uint32(1)])
    assert isinstance(e.value, metile.LaunchError) and e.value.index == 1 and "np.ascontiguousarray" in str(e.value)
    with pytest.raises(metile.LaunchError, match="overlap"):
        cpu.dispatch_threads(fn, 100, 32, [x, np.broadcast_to(x[:1], (100,)), np.uint32(1), np.uint32(1)])
    out = np.zeros(100, np.float32)
    cpu.dispatch_threads(fn, 100, 32, [np.broadcast_to(x[7:8], (100,)), out, np.uint32(0), np.uint32(1)])
    np.testing.assert_array_equal(out, 2 * x[7])                      # a read view may repeat its elements


# -- the Metal device, through the stand-in for its shim --------------------------------------------------------------

def numpy_scale(r, x, y, sx, sy) -> None:
    n = r.grid[0]
    y[: (n - 1) * sy + 1: sy] = 2 * x[: (n - 1) * sx + 1: sx]


def test_the_metal_device_takes_strided_views_as_they_are(stub, make_device):
    from metal_stub import numpy_kernels

    stub.execute_with(numpy_kernels({"scale": numpy_scale}))
    dev = make_device()
    fn = dev.compile(STRIDED, name="strided.metal").function("scale")
    x = np.arange(300, dtype=np.float32)
    out = np.full(300, SENTINEL, np.float32)
    dev.dispatch_threads(fn, 100, 32, [x[::3], out[1::3], np.uint32(3), np.uint32(3)])
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_array_equal(out[1::3], 2 * x[::3])
    assert (out[0::3] == SENTINEL).all() and (out[2::3] == SENTINEL).all()
    assert len([c for c in stub.calls("buffer_new_copy") if c.endswith("length=1192")]) == 2  # spans of 298 floats
    with pytest.raises(ArrayLayoutError, match="negative stride"):
        dev.dispatch_threads(fn, 100, 32, [x[::-3], out, np.uint32(3), np.uint32(3)])


def test_a_kernel_launch_on_the_metal_device_passes_views_as_they_are(stub, make_device, monkeypatch):
    from metal_stub import cpu_device_executor

    kernel_module = __import__("metile.kernel", fromlist=["device"])
    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(scale_2d.fn)                      # compiled for the Metal device
    base = data(16, 40)
    out = np.full((16, 40), SENTINEL, np.float32)
    x, y = base[:, :33], out[:, :33]
    k[(16,)](x, y, 33, *elements(x), *elements(y), 2.0, BLOCK=64)
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_array_equal(y, 2 * base[:, :33])
    assert (out[:, 33:] == SENTINEL).all()
    with pytest.raises(KernelArgumentError, match="argument 'X' is a numpy view with a negative stride"):
        k[(16,)](base[::-1], y, 33, -40, 1, 40, 1, 2.0, BLOCK=64)
