"""metile kernels as MLX operations (`metile.frameworks.mlx_kernel`) and on torch's mps stream (`torch_kernel`).
Neither library runs Metal here, so their entry points are replaced by stand-ins that do what they do: MLX's writes
the kernel's signature from the body as `mx.fast.metal_kernel` does (inputs, outputs, then the attributes the body
names; MLX's own code, `write_signature`) and runs the result on metile's CPU device with `dispatch_threads`; torch's
compiles the whole source and dispatches it the same way."""

from __future__ import annotations

import numpy as np
import pytest
from test_interop import axpy

import metile
from metile.frameworks import MLX_ATTRIBUTES, MLX_CONSTANT_ELEMENTS, FrameworkError, mlx_kernel, torch_kernel

pytestmark = pytest.mark.usefixtures("on_cpu")
MLX_TYPES = {"float32": "float", "float16": "half", "int32": "int32_t", "uint32": "uint32_t", "bool": "bool"}


def mlx_stand_in(mx, seen: list):
    def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                     atomic_outputs=False):
        def run(inputs, grid, threadgroup, output_shapes, output_dtypes, init_value=None, **_):
            lines, index = [], 0
            for n, a in zip(input_names, inputs):
                where = "constant" if a.size < MLX_CONSTANT_ELEMENTS else "device"
                ref = "&" if a.ndim == 0 else "*"
                lines.append(f"  const {where} {MLX_TYPES[str(a.dtype).split('.')[-1]]}{ref} {n} [[buffer({index})]]")
                index += 1
            for n, d in zip(output_names, output_dtypes):
                lines.append(f"  device {MLX_TYPES[str(d).split('.')[-1]]}* {n} [[buffer({index})]]")
                index += 1
            lines += [f"  {t} {attr} [[{attr}]]" for attr, t in MLX_ATTRIBUTES.items() if attr in source]
            kernel = f"custom_kernel_{name}"
            text = f"{header}[[kernel]] void {kernel}(\n" + ",\n".join(lines) + ") {\n" + source + "\n}\n"
            seen.append(text)
            dev = metile.device("cpu")
            fn = dev.compile(text, name=f"{name}.metal").function(kernel)
            outs = [np.full(s, init_value or 0, np.dtype(str(d).split(".")[-1])) for s, d in zip(output_shapes,
                                                                                                output_dtypes)]
            args = [np.array(a)[()] if a.ndim == 0 else np.array(a) for a in inputs] + outs
            group = tuple(min(t, g) for t, g in zip(threadgroup, grid))
            dev.dispatch_threads(fn, grid, group, args)
            return [mx.array(o) for o in outs]

        return run

    return metal_kernel


@pytest.fixture
def mx(monkeypatch):
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'metile[mlx]')")
    seen: list[str] = []
    monkeypatch.setattr(mx.fast, "metal_kernel", mlx_stand_in(mx, seen))
    mx.seen = seen
    return mx


@metile.kernel
def matmul(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, metile.program_id(0) * BM, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, metile.program_id(1) * BN, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, metile.program_id(0) * BM, metile.program_id(1) * BN, N, acc, (BM, BN), bounds=(M, N))


def test_an_elementwise_kernel_is_an_mlx_operation(mx):
    n = 1000
    x, y = mx.arange(n, dtype=mx.float32), mx.ones((n,))
    (out,) = mlx_kernel(axpy, outputs=["Out"])(x, y, 2.0, n, grid=lambda meta: (metile.cdiv(meta["n"], 256),),
                                                 output_shapes=[(n,)], output_dtypes=[mx.float32], BLOCK=256)
    np.testing.assert_array_equal(np.array(out), 2 * np.arange(n, dtype=np.float32) + 1)
    text = mx.seen[-1]
    assert "const device float* X [[buffer(0)]]" in text and "const constant float& a [[buffer(2)]]" in text
    assert "device float* Out [[buffer(4)]]" in text and "uint3 threadgroup_position_in_grid" in text


def test_a_product_on_simdgroup_matrices_is_an_mlx_operation(mx):
    M, N, K = 40, 24, 36
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    (c,) = mlx_kernel(matmul, "C")(mx.array(a), mx.array(b), M, N, K, grid=(2, 1), output_shapes=[(M, N)],
                                   output_dtypes=[mx.float32], BM=32, BN=32, BK=16)
    np.testing.assert_allclose(np.array(c), a @ b, rtol=1e-4, atol=1e-4)
    assert "uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]]" in mx.seen[-1]


@metile.kernel
def in_place(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.load(Y + offs, mask=offs < n), mask=offs < n)
    metile.store(Y + offs, 0.0, mask=offs < n)


def test_what_mlx_cannot_express_is_refused(mx):
    x = mx.zeros((64,))
    with pytest.raises(FrameworkError, match="writes `Y`, which is not one of its outputs"):
        mlx_kernel(in_place, ["X"])(x, 64, grid=1, output_shapes=[(64,)], output_dtypes=[mx.float32], BLOCK=64)
    with pytest.raises(FrameworkError, match="input `X` has 4 element"):
        mlx_kernel(axpy, ["Out"])(mx.zeros((4,)), mx.zeros((4,)), 1.0, 4, grid=1, output_shapes=[(4,)],
                                  output_dtypes=[mx.float32], BLOCK=64)
    with pytest.raises(FrameworkError, match="not Z"):
        mlx_kernel(axpy, ["Z"])


TORCH_CASTS = {"fp16": np.float16, "int32": np.int32, "int16": np.int16, "int8": np.int8, "uint8": np.uint8}


class TorchLibrary:
    """torch's `compile_shader` library as torch binds a kernel's arguments (torch/csrc/mps/Module.cpp): a tensor as
    its buffer, a Python int as 8 bytes of int64 and a float as 4 bytes of float32 unless `arg_casts` names another
    type for its index, anything else refused. The kernel reads the first bytes of each as its parameter's type (on
    the CPU device here)."""

    def __init__(self, source):
        from metile.metal.msl_signature import kernel_signatures

        self.dev = metile.device("cpu")
        self.lib = self.dev.compile(source, name="torch.metal")
        self.signatures = {k.name: k for k in kernel_signatures(source)}

    def __getattr__(self, entry):
        import torch

        from metile.metal.args import element_type

        params = {p.index: p for p in self.signatures[entry].buffers}

        def launch(*args, threads, group_size, arg_casts=None):
            bound = []
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor):
                    bound.append(a)
                    continue
                if not isinstance(a, (int, float)):
                    raise RuntimeError("Unsupported argument type")
                kind = (arg_casts or {}).get(i)
                carrier = TORCH_CASTS[kind] if kind else np.float32 if isinstance(a, float) else np.int64
                raw = np.array(a).astype(carrier).tobytes()
                dtype = element_type(params[i].element_type).dtype
                bound.append(np.frombuffer(raw[:dtype.itemsize], dtype)[0])   # what the kernel reads
            self.dev.dispatch_threads(self.lib.function(entry), threads, group_size, bound)
        return launch


def test_a_kernel_runs_on_torch_s_stream_through_compile_shader(monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    compiled = []
    monkeypatch.setattr(torch.mps, "compile_shader", lambda source: compiled.append(source) or TorchLibrary(source),
                        raising=False)
    op = torch_kernel(axpy, device="cpu")   # the stand-in runs on the CPU; on a Mac the tensors are on mps
    x, y, out = torch.arange(1000, dtype=torch.float32), torch.ones(1000), torch.zeros(1000)
    op[(4,)](x, y, out, 2.0, 1000, BLOCK=256)
    op[(4,)](x, y, out, 2.0, 1000, BLOCK=256)
    torch.testing.assert_close(out, 2 * x + 1)
    assert len(compiled) == 1        # compiled once per argument types and constexprs
    with pytest.raises(metile.MetileError, match="takes mps tensors: argument 0 is on cpu"):
        torch_kernel(axpy)[(4,)](x, y, out, 2.0, 1000, BLOCK=256)


@pytest.mark.parametrize(("a", "n"), [(np.float16(2.5), np.int16(999)), (np.float32(2.5), np.uint8(200)),
                                      (np.float16(-0.75), np.int8(100)), (2.5, np.uint16(1000))])
def test_scalars_of_every_width_reach_a_torch_kernel_as_their_parameter_s_type(monkeypatch, a, n):
    """torch binds Python ints as int64 and floats as float32, and takes no numpy scalar: a half, short or char
    parameter gets its number as a Python one with the `arg_casts` of its type, so it reads the number's bytes."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    monkeypatch.setattr(torch.mps, "compile_shader", TorchLibrary, raising=False)
    x, y, out = torch.arange(1000, dtype=torch.float32), torch.ones(1000), torch.zeros(1000)
    torch_kernel(axpy, device="cpu")[(4,)](x, y, out, a, n, BLOCK=256)
    k = int(n)
    torch.testing.assert_close(out[:k], float(a) * x[:k] + 1)
    assert not out[k:].any()


@metile.kernel
def copy_block(X, Out, n_cols, R: metile.constexpr, C: metile.constexpr):
    t = metile.tile_load(X, 0, 0, n_cols, (R, C))          # no bounds=: clipped to X's length
    metile.tile_store(Out, 0, 0, C, t, (R, C))


def test_an_unbounded_tile_passes_its_array_length_to_torch_and_is_refused_by_mlx(monkeypatch, mx):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")

    monkeypatch.setattr(torch.mps, "compile_shader", TorchLibrary, raising=False)
    x, out = torch.arange(12, dtype=torch.float32), torch.full((4, 8), -1.0)
    torch_kernel(copy_block, device="cpu")[(1,)](x, out, 8, R=4, C=8)
    expect = torch.zeros(4, 8)
    expect[0] = torch.arange(8.0)        # 12 elements are one whole row of 8: the rest of the tile is clipped
    torch.testing.assert_close(out, expect)
    with pytest.raises(FrameworkError, match="without bounds=.* MLX does not pass"):
        mlx_kernel(copy_block, ["Out"])(mx.zeros((12,)), 8, grid=1, output_shapes=[(32,)],
                                        output_dtypes=[mx.float32], R=4, C=8)
