"""Shared pytest options and fixtures: `--update-golden`, the C stand-in for the Metal shim, and Metal devices on it."""

from __future__ import annotations

import os

import pytest

# Every kernel the tests compile is verified after each pass (the debug mode's check, off in a normal compile);
# tests about debug settings set or clear the variable themselves.
os.environ.setdefault("METILE_DEBUG", "verify")


def pytest_collection_finish(session):
    """One call into torch's CPU math library, single-threaded, before any test runs (when a test module imported
    torch). Intel MKL's vector math, which torch's CPU `tanh`, `exp`, `erf`... call, detects the CPU on the process's
    first call into it and stores the result in two steps without a lock: when that first call is split over torch's
    threads, a thread can read the half-stored value and run the call with the wrong kernels (AVX2 at reduced
    accuracy: `tanh` off by up to 5e-5 over that thread's half). Whichever test made that first call had a torch
    reference wrong now and then, and a test of a metile kernel against it failed with the kernel right."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.tanh(torch.zeros(8))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden from the current output, for review")


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    """The stand-in shim (compiled once per test module)."""
    from metal_stub import build_stub

    return build_stub(tmp_path_factory.getbasetemp() / "metal_stub")


@pytest.fixture
def make_device(stub, tmp_path):
    """Metal devices on the stand-in (no xcrun unless a runner says so, so JIT), closed after the test;
    numpy replays the kernels."""
    from metal_stub import NUMPY_KERNELS, FakeXcrun, numpy_kernels

    from metile.metal.gpu.device import MetalDevice, MetalOptions

    stub.reset()
    stub.execute_with(numpy_kernels(NUMPY_KERNELS))
    made = []

    def make(runner=None, cache_dir=None, **options) -> MetalDevice:
        opts = MetalOptions(cache_dir=cache_dir or tmp_path / "cache", **options)
        dev = MetalDevice(opts, shim=stub.shim, runner=runner or FakeXcrun(present=False))
        made.append(dev)
        return dev

    yield make
    for dev in made:
        dev.close()


@pytest.fixture
def dev(make_device):
    """A Metal device on the stand-in."""
    return make_device()


@pytest.fixture
def add(dev):
    """The `add` kernel of `metal_stub.KERNELS` on the stand-in device `dev`."""
    from metal_stub import KERNELS

    return dev.compile(KERNELS, name="kernels.metal").function("add")


@pytest.fixture
def on_cpu(monkeypatch):
    """Kernels launch on the CPU device (`METILE_DEVICE=cpu`) during the test; a module asks for it with
    `pytestmark = pytest.mark.usefixtures("on_cpu")`."""
    monkeypatch.setenv("METILE_DEVICE", "cpu")


@pytest.fixture(scope="module")
def cpu():
    """The CPU device (one per process; modules share it)."""
    import metile

    return metile.device("cpu")


@pytest.fixture
def copies(monkeypatch):
    """The sizes of the array copies (the runtime's `mt_copy`) the CPU device makes during the test, in order."""
    import metile

    dev = metile.device("cpu")
    rt, sizes = dev.rt, []

    class Counting:
        def mt_copy(self, dst, src, nbytes):
            sizes.append(nbytes)
            rt.mt_copy(dst, src, nbytes)

        def __getattr__(self, name):
            return getattr(rt, name)

    monkeypatch.setattr(dev, "rt", Counting())
    return sizes
