"""A dispatch of the CPU device is kept and taken again by a later one of the same kernel, grid and argument
layouts (`metile.metal.cpu.dispatch.layout_key`): it allocates no device memory and fills no descriptor again, reads
the new arrays and scalars, and keeps none of them alive."""

from __future__ import annotations

import weakref

import numpy as np

import metile
from metile.metal.cpu import dispatch

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


HALVES = """
#include <metal_stdlib>
using namespace metal;
kernel void halves(device float* a [[buffer(0)]], device float* b [[buffer(1)]], device const float* c [[buffer(2)]],
                   device float* d [[buffer(3)]], uint gid [[thread_position_in_grid]]) {
    a[gid] = 1.0f;
    b[gid + 4] = 2.0f;
    d[gid] = c[gid];
}
"""


def test_one_array_given_to_two_parameters_is_one_memory(monkeypatch):
    """An array passed for two parameters is one copy in device memory, as on a GPU: what the kernel writes through
    each reaches the array (a copy per parameter wrote the other's old bytes back over it), and it is copied in
    once. A kept dispatch is taken again only by arguments aliased alike."""
    cpu = metile.device("cpu")
    fn = cpu.compile(HALVES, name="halves.metal").function("halves")
    copies = []

    class Counting:   # the runtime's mt_copy (arrays) and the dispatch's cffi (scalars), counting each copy's bytes
        def __init__(self, of, name):
            self.of, self.name = of, name

        def __getattr__(self, name):
            if name == self.name:
                return lambda dst, src, n: (copies.append(n), getattr(self.of, name)(dst, src, n))[1]
            return getattr(self.of, name)

    monkeypatch.setattr(dispatch, "ffi", Counting(dispatch.ffi, "memmove"))
    monkeypatch.setattr(cpu, "rt", Counting(cpu.rt, "mt_copy"))
    for _ in range(2):   # made, then kept and taken again
        x, c = np.zeros(8, np.float32), np.arange(4, dtype=np.float32)
        copies.clear()
        cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [x, x, c, np.zeros(4, np.float32)])
        assert list(x) == [1, 1, 1, 1, 2, 2, 2, 2]
        assert sorted(copies) == [16, 16, 16, 32, 32], copies   # x in and out once, c in, the last in and out
    x, y, d = np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(4, np.float32)
    cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [x, y, c, d])   # the same layouts, not aliased
    assert list(x) == [1, 1, 1, 1, 0, 0, 0, 0] and list(y) == [0, 0, 0, 0, 2, 2, 2, 2] and (d == c).all()


def test_views_of_one_array_that_overlap_are_one_memory():
    """Two views of one array that share elements are one copy in device memory too, each parameter at its place in
    it: a write through the first view inside the second's span is not undone when the second is written back."""
    cpu = metile.device("cpu")
    fn = cpu.compile(HALVES, name="halves.metal").function("halves")
    for _ in range(2):   # made, then kept and taken again
        x, c = np.zeros(12, np.float32), np.arange(4, dtype=np.float32)
        # a = x[0:8] writes x[0:4]; b = x[2:10] writes b[4:8] = x[6:10]; c and d are x's neighbours' business
        cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [x[:8], x[2:10], c, np.zeros(4, np.float32)])
        assert list(x) == [1, 1, 1, 1, 0, 0, 2, 2, 2, 2, 0, 0]
    x = np.zeros(12, np.float32)   # views that meet without sharing an element: each its own copy
    cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [x[:4], x[4:12], c, np.zeros(4, np.float32)])
    assert list(x) == [1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2]
