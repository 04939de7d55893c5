"""`metile.triton.launch_options`: metile's launch keywords for the launches a library's host code makes (here a
function standing for Liger-Kernel's host code, which launches its kernel without them), and `profile=` on a single
`@triton.jit` launch, whose result carries the `metile.Profile`."""

from __future__ import annotations

import pytest
import torch

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelArgumentError
from metile.metal.errors import DeviceFault

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def shift_copy(X, Y, n, SHIFT, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs + SHIFT, mask=offs < n), mask=offs < n)


def library_op(x: torch.Tensor, shift: int = 0) -> torch.Tensor:
    """Host code that launches a kernel with no metile keywords, as a library's does."""
    y = torch.empty_like(x)
    shift_copy[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), shift, BLOCK=64)
    return y


def test_the_block_profiles_every_launch_the_library_makes():
    x = torch.arange(200, dtype=torch.float32)
    with triton.launch_options(profile=2) as launches:
        y = library_op(x)
        library_op(y)
    assert torch.equal(y, x)                                  # profiled launches still compute their results
    assert [name for name, _ in launches] == ["shift_copy", "shift_copy"]
    assert len(launches.profiles) == 2 and all(isinstance(p, metile.Profile) for p in launches.profiles)
    assert launches.profiles[0].totals.device_bytes > 0
    with triton.launch_options(timeout=60.0) as plain:        # keywords that return nothing: listed, no profiles
        library_op(x)
    assert [r for _, r in plain] == [None] and plain.profiles == []
    assert library_op(x).equal(x)                             # outside any block, launches are plain again


def test_the_sanitizer_catches_an_out_of_bounds_read_of_library_code():
    x = torch.arange(128, dtype=torch.float32)
    with triton.launch_options(sanitize=True), pytest.raises(DeviceFault, match="past the end"):
        library_op(x, shift=64)                               # reads 64 elements past the end of X


def test_blocks_nest_and_a_launch_keeps_its_own_keywords():
    x = torch.arange(64, dtype=torch.float32)
    with triton.launch_options(profile=1) as outer, triton.launch_options(timeout=30.0) as inner:
        library_op(x)
        y = torch.empty_like(x)
        shift_copy[(1,)](x, y, 64, 0, BLOCK=64, profile=False)   # its own keyword wins over the block's
    assert len(inner) == 2 and len(inner.profiles) == 1 and outer == []


def test_a_single_launch_returns_its_profile():
    x = torch.arange(64, dtype=torch.float32)
    y = torch.empty_like(x)
    launched = shift_copy[(1,)](x, y, 64, 0, BLOCK=64, profile=True)
    assert isinstance(launched.profile, metile.Profile) and launched.metadata.num_warps >= 1
    assert shift_copy[(1,)](x, y, 64, 0, BLOCK=64).profile is None


def test_only_metiles_launch_keywords_are_taken():
    with pytest.raises(KernelArgumentError, match="launch_options takes metile's launch keywords .* not num_warps"):
        with triton.launch_options(num_warps=4):
            pass
