"""The MSL standard-library surface of the CPU device's compatibility header that real-world MSL (Apple MLX's
kernel headers) leans on: overloads users add to metal::fast / metal::precise, type traits, numeric limits,
metal::array, uniform, the __metal_* intrinsics and the METAL_FUNC qualifier. Each kernel is run and checked."""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def run(cpu, body: str, n: int, args, name: str = "stdlib.metal") -> None:
    fn = cpu.compile(HEAD + body, name=name).function("k")
    cpu.dispatch_threads(fn, (n, 1, 1), (min(n, 64), 1, 1), args)


USER_FAST_OVERLOADS = """
typedef bfloat bfloat16_t;
namespace metal {
namespace fast {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return bfloat16_t(-1.0f); }
METAL_FUNC bfloat16_t tanh(bfloat16_t x) { return bfloat16_t(-2.0f); }
}
namespace precise {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return bfloat16_t(-3.0f); }
}
}
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
    float v = x[i];
    device float* o = out + i * 8;
    o[0] = fast::exp(v);
    o[1] = metal::exp(v);
    o[2] = precise::exp(v);
    o[3] = metal::fast::tanh(v);
    o[4] = metal::tanh(v);
    o[5] = fast::exp(bfloat16_t(v));      // the user's overload
    o[6] = precise::exp(bfloat16_t(v));
    o[7] = fast::max(v, 0.5f) + precise::sqrt(fabs(v));
}
"""


def test_user_overloads_in_fast_and_precise_add_to_the_library_functions(cpu):
    x = np.linspace(-4, 4, 64).astype(np.float32)
    out = np.zeros(64 * 8, np.float32)
    run(cpu, USER_FAST_OVERLOADS, 64, [x, out])
    o = out.reshape(64, 8)
    # fast:: and precise:: of a float compute in float: bit-identical to metal::, not rounded through bfloat
    np.testing.assert_array_equal(o[:, 0], o[:, 1])
    np.testing.assert_array_equal(o[:, 2], o[:, 1])
    np.testing.assert_array_equal(o[:, 3], o[:, 4])
    np.testing.assert_allclose(o[:, 1], np.exp(x.astype(np.float64)), rtol=2e-7)
    np.testing.assert_allclose(o[:, 4], np.tanh(x.astype(np.float64)), rtol=2e-7, atol=1e-7)
    assert (o[:, 5] == -1).all() and (o[:, 6] == -3).all()
    np.testing.assert_allclose(o[:, 7], np.maximum(x, 0.5) + np.sqrt(np.abs(x)), rtol=1e-6)
