"""Control flow in Triton kernels on metile: `return` (also inside an `if` on a traced condition), `break` and
`continue` in `range`/`tl.range`/`tl.static_range` loops and `while` loops give what Triton's own interpreter gives
(`TRITON_INTERPRET=1`, run in a process of its own without metile), and `and`/`or`/`not` follow Triton's compiled
semantics: int1 operands only, combined without run-time short-circuit, compile-time operands short-circuit."""

from __future__ import annotations

import numpy as np
import pytest

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError
from tests.triton_kernels import interpreted as run_interpreted
from tests.triton_kernels import kernel_from_source, on_metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@pytest.fixture(scope="module")
def control():
    return on_metile("control")


@pytest.fixture(scope="module")
def interpreted():
    """The outputs of `tests/triton_kernels/control.py` under Triton's interpreter."""
    return run_interpreted("control")


def test_control_flow_matches_triton_s_interpreter(control, interpreted):
    mine = control.run("cpu")
    assert mine.keys() == interpreted.keys()
    for name, want in interpreted.items():
        np.testing.assert_array_equal(mine[name], want, err_msg=name)


@triton.jit
def logic(X, Out, n, flag):
    pid = tl.program_id(0)
    a = pid < n
    b = tl.load(X + pid) > 0.0
    tl.store(Out + pid * 6, (a and b).to(tl.int32))
    tl.store(Out + pid * 6 + 1, (a or b).to(tl.int32))
    tl.store(Out + pid * 6 + 2, (not b).to(tl.int32))
    tl.store(Out + pid * 6 + 3, (a and True and b).to(tl.int32))
    if (a and not b) or flag > 0:
        tl.store(Out + pid * 6 + 4, 1)
    else:
        tl.store(Out + pid * 6 + 4, 2)
    m = tl.arange(0, 4) < pid       # tensors too, element by element (Triton warns that this is deprecated)
    tl.store(Out + pid * 6 + 5, tl.sum((m and (tl.arange(0, 4) > 0)).to(tl.int32), axis=0))


@pytest.mark.parametrize("flag", [0, 3])
def test_and_or_not_on_int1_values(flag):
    x = np.array([1.0, -1.0, 2.0, 0.0], np.float32)
    out = np.zeros(24, np.int32)
    logic[(4,)](x, out, 2, flag)
    for pid in range(4):
        a, b = pid < 2, x[pid] > 0
        want = [a and b, a or b, not b, a and b, 1 if (a and not b) or flag > 0 else 2, max(pid - 1, 0)]
        assert list(out[pid * 6:pid * 6 + 6]) == [int(w) for w in want], pid


@triton.jit
def no_short_circuit(X, Out, n):
    i = tl.program_id(0) + n
    if i < n and tl.load(X + i) > 0.0:    # Triton evaluates both operands: the load runs past the array
        tl.store(Out, 1)


def test_and_does_not_short_circuit_at_run_time():
    with pytest.raises(triton.TritonError, match="invalid memory access"):
        no_short_circuit[(1,)](np.zeros(4, np.float32), np.zeros(1, np.int32), 4000, sanitize=True)


@triton.jit
def compile_time_operands(Out, n):
    x = n > 0
    tl.store(Out, (x and False) + 5)    # a false constant ends the `and`: it is the result
    tl.store(Out + 1, (x or 0) + 0)     # a false constant in an `or` is dropped: x


def test_compile_time_operands_short_circuit_as_in_triton():
    out = np.zeros(2, np.int32)
    compile_time_operands[(1,)](out, 3)
    assert list(out) == [5, 1]


def _module(tmp_path, body: str):
    return kernel_from_source(tmp_path, "logic_refused",
                              "import metile.triton as triton\nimport metile.triton.language as tl\n\n\n@triton.jit\n"
                              "def kernel(X, n):\n" + body)


@pytest.mark.parametrize("body", ["    if n and n > 1:\n        tl.store(X, 1.0)\n",
                                  "    y = not tl.program_id(0)\n"])
def test_and_or_not_refuse_other_types_than_int1_as_triton_does(tmp_path, body):
    kernel = _module(tmp_path, body)
    with pytest.raises(KernelTypeError, match="Cannot bitcast data-type of size 32 to data-type of size 1") as e:
        kernel.kernel.trace(np.zeros(4, np.float32), 3)
    assert e.value.loc.line == 7
