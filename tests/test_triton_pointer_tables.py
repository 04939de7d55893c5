"""Pointer tables under `triton.language`: an int64 tensor of addresses (`tensor.data_ptr()`), loaded and cast with
`.to(tl.pointer_type(...))`, is a base pointer for loads, stores and `tl.dot` operands, as Triton's grouped GEMM
tutorial (08) uses them. They run on the CPU device, which runs kernels in this process; a device whose kernels
cannot reach such addresses refuses them at the line that makes one."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
from metile.emit.msl import emit_msl
from metile.frontend.errors import KernelTypeError
from metile.ir import IntToPtr, parse, walk
from metile.metal.errors import LaunchError

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def gather_rows(Ptrs, Lens, Out, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    row = tl.load(Ptrs + g).to(tl.pointer_type(tl.float16))
    n = tl.load(Lens + g)
    offs = tl.arange(0, BLOCK)
    x = tl.load(row + offs, mask=offs < n, other=-1.0)
    tl.store(Out + g * BLOCK + offs, x.to(tl.float32) * 2)
    tl.store(row + offs, x + 1, mask=offs < n)          # and written back through the same address


def test_loads_and_stores_through_a_table_of_addresses():
    arrays = [torch.arange(n, dtype=torch.float16) + 10 * i for i, n in enumerate((5, 16, 1))]
    want = [a.clone() for a in arrays]
    ptrs = torch.tensor([a.data_ptr() for a in arrays])
    assert ptrs.dtype == torch.int64
    lens = torch.tensor([a.numel() for a in arrays], dtype=torch.int32)
    out = torch.zeros(3 * 16)
    gather_rows[(3,)](ptrs, lens, out, BLOCK=16)
    for i, a in enumerate(want):
        row = out[16 * i:16 * (i + 1)]
        assert row[:a.numel()].tolist() == (a.float() * 2).tolist()
        assert (row[a.numel():] == -2).all()
        assert arrays[i].tolist() == (a + 1).tolist()


@triton.jit
def grouped_matmul(group_a_ptrs, group_b_ptrs, group_c_ptrs, group_gemm_sizes, g_lds, group_size,
                   NUM_SM: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                   BLOCK_SIZE_K: tl.constexpr):
    """Tutorial 08's scheme: NUM_SM programs walk the tiles of every problem in turn."""
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        gm = tl.load(group_gemm_sizes + g * 3)
        gn = tl.load(group_gemm_sizes + g * 3 + 1)
        gk = tl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        while tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles:
            lda = tl.load(g_lds + g * 3)
            ldb = tl.load(g_lds + g * 3 + 1)
            ldc = tl.load(g_lds + g * 3 + 2)
            a_ptr = tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))
            b_ptr = tl.load(group_b_ptrs + g).to(tl.pointer_type(tl.float16))
            c_ptr = tl.load(group_c_ptrs + g).to(tl.pointer_type(tl.float16))
            tile_in_gemm = tile_idx - last_problem_end
            tile_m = tile_in_gemm // num_n_tiles
            tile_n = tile_in_gemm % num_n_tiles
            offs_am = tile_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for _kk in range(0, tl.cdiv(gk, BLOCK_SIZE_K)):
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                accumulator += tl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)
            c_ptrs = c_ptr + ldc * offs_am[:, None] + offs_bn[None, :]
            tl.store(c_ptrs, c)
            tile_idx += NUM_SM
        last_problem_end = last_problem_end + num_tiles


def group_gemm(group_A, group_B, num_sm):
    group_C = [torch.empty((A.shape[0], B.shape[1]), dtype=A.dtype) for A, B in zip(group_A, group_B)]
    sizes, lds = [], []
    for A, B, C in zip(group_A, group_B, group_C):
        sizes += [A.shape[0], B.shape[1], A.shape[1]]
        lds += [A.stride(0), B.stride(0), C.stride(0)]
    d_a = torch.tensor([A.data_ptr() for A in group_A])
    d_b = torch.tensor([B.data_ptr() for B in group_B])
    d_c = torch.tensor([C.data_ptr() for C in group_C])
    grouped_matmul[(num_sm,)](d_a, d_b, d_c, torch.tensor(sizes, dtype=torch.int32),
                              torch.tensor(lds, dtype=torch.int32), len(group_A), NUM_SM=num_sm,
                              BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16)
    return group_C


@pytest.mark.parametrize("num_sm", [3, 8])
def test_grouped_gemm_as_tutorial_08_writes_it(num_sm):
    torch.manual_seed(8)
    shapes = [(64, 96, 32), (32, 32, 48), (96, 64, 16)]       # M, N, K: every size a multiple of the blocks
    group_A = [torch.rand((m, k), dtype=torch.float16) for m, n, k in shapes]
    group_B = [torch.rand((k, n), dtype=torch.float16) for m, n, k in shapes]
    for A, B, C in zip(group_A, group_B, group_gemm(group_A, group_B, num_sm)):
        ref = (A.double() @ B.double()).half()
        torch.testing.assert_close(C, ref, atol=1e-2, rtol=0)


@triton.jit
def narrow_address(Ptrs, Out):
    p = tl.load(Ptrs).to(tl.pointer_type(tl.float32))
    tl.store(Out, tl.load(p))


@triton.jit
def retyped_pointer(X, Out):
    p = X.to(tl.pointer_type(tl.int32))
    tl.store(Out, tl.load(p))


def test_only_64_bit_integers_become_pointers():
    with pytest.raises(KernelTypeError, match="only 64-bit integers hold addresses: cannot make a pointer of i32") as e:
        narrow_address[(1,)](torch.zeros(1, dtype=torch.int32), torch.zeros(1))
    assert e.value.loc.line == narrow_address.fn.__code__.co_firstlineno + 2
    with pytest.raises(KernelTypeError, match="casting a pointer .* to another pointer type is not supported"):
        retyped_pointer[(1,)](torch.zeros(1), torch.zeros(1, dtype=torch.int32))


def test_the_msl_makes_a_device_pointer_of_the_address():
    ptrs, lens, out = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32), torch.zeros(16)
    compiled = gather_rows.warmup(ptrs, lens, out, BLOCK=16, grid=(1,))
    assert "reinterpret_cast<device half*>(" in compiled.asm["msl"]
    metal_ir = parse(compiled.asm["metal_ir"])               # the printed Metal IR reads back
    assert any(isinstance(n, IntToPtr) for n in walk(metal_ir))
    assert emit_msl(metal_ir) == compiled.asm["msl"]


def test_a_device_without_addresses_refuses_the_kernel_at_the_line(monkeypatch):
    """An Apple GPU cannot reach a torch tensor's data_ptr() (it is no GPU address, and the buffer is not made
    resident for the dispatch): compiling for a device without `supports_addresses` stops at the cast's line."""
    gpu = types.SimpleNamespace(name="metal", max_threads_per_threadgroup=1024, max_threadgroup_memory=32768)
    monkeypatch.setattr(sys.modules["metile.kernel"], "device", lambda: gpu)
    ptrs, lens, out = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32), torch.zeros(16)
    with pytest.raises(LaunchError, match="makes pointers of integer addresses .* run on the CPU device only") as e:
        gather_rows[(1,)](ptrs, lens, out, BLOCK=32)
    assert e.value.loc.line == gather_rows.fn.__code__.co_firstlineno + 3
