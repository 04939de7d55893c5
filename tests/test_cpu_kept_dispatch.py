"""A dispatch of the CPU device is kept and taken again by a later one of the same kernel, grid and argument
layouts (`metile.metal.cpu.dispatch.layout_key`): it allocates no device memory and fills no descriptor again, reads
the new arrays and scalars, and keeps none of them alive."""

from __future__ import annotations

import weakref

import numpy as np

import metile

ADD = """
#include <metal_stdlib>
using namespace metal;
kernel void add(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                constant float& k [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
    out[gid] = a[gid] + k;
}
"""


def test_a_repeated_dispatch_takes_its_device_memory_again(monkeypatch):
    cpu = metile.device("cpu")
    fn = cpu.compile(ADD, name="add.metal").function("add")
    made = []
    allocate = type(cpu).allocate
    monkeypatch.setattr(type(cpu), "allocate", lambda self, *a, **kw: made.append(a) or allocate(self, *a, **kw))
    a, out = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    cpu.dispatch_threads(fn, (100, 1, 1), (32, 1, 1), [a, out, np.float32(1)])
    assert (out == a + 1).all() and made
    made.clear()
    for k in range(2, 4):   # other arrays of the same layouts, another scalar: nothing allocated, all of it read
        a, out = np.arange(100, dtype=np.float32) * k, np.zeros(100, np.float32)
        cpu.dispatch_threads(fn, (100, 1, 1), (32, 1, 1), [a, out, np.float32(k)])
        assert (out == a + k).all() and not made
    cpu.dispatch_threads(fn, (64, 1, 1), (32, 1, 1), [a[:64], out[:64], np.float32(0)])   # another layout
    assert made


def test_a_kept_dispatch_keeps_no_array_alive():
    cpu = metile.device("cpu")
    fn = cpu.compile(ADD, name="add.metal").function("add")
    a, out = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    cpu.dispatch_threads(fn, (100, 1, 1), (32, 1, 1), [a, out, np.float32(1)])
    refs = [weakref.ref(a), weakref.ref(out)]
    del a, out
    assert [r() for r in refs] == [None, None]
