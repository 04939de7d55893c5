"""MLX's quantized gather products on Metal 4 tensor ops: affine_gather_qmm_t_nax, affine_gather_qmm_n_nax and
affine_gather_qmm_rhs_nax (quantized_nax.h), and their float-mode twins fp_gather_qmm_t_nax and
fp_gather_qmm_rhs_nax (fp_quantized_nax.h) for mxfp4, mxfp8 and nvfp4. `REFUSED` holds fp_qmm_n_nax and
fp_gather_qmm_n_nax, which the shipped header does not compile, and `FAULTS` the rhs products with K off the
64-column tile, which read past the ends of their buffers as MLX dispatches them.

GatherQMM::eval_gpu (mlx/backend/metal/quantized.cpp) sends a product with sorted right-hand indices and one row per
index (M == 1, at least 16 rows and 4 per expert) to gather_qmm_rhs, which takes the NAX kernel for transposed
weights, and other matrix products to gather_qmm, which takes `gather_qmm_nax` for transposed weights with K a
multiple of 64; neither takes NAX for float32 unless TF32 is enabled. gather_qmm_nax dispatches the `_t_` kernel for
transposed weights and the `_n_` one otherwise. The copies of quantized.cpp at hand are older than the 0.32.4
headers or changed forks (their gather_qmm_rhs_nax binds no group offsets), so what the current rhs kernels read
beyond them (the offsets at buffer 4, the group count at 9, the grid of row tiles) is taken from the kernels, as
for gather_mm_rhs_nax.

Every kernel dequantizes a 64-wide tile of w into threadgroup memory (T for affine, bfloat for the float modes)
and multiplies x by it with matmul2d; the references multiply x by the dequantized weights (exact in bfloat for
the float modes), with the tolerance of qmm_nax (cases_nax).
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.mlx_kernels.cases_matmul import _TYPES, _args, _check, _empty, _i32, _i64, _random
from benchmarks.mlx_kernels.cases_nax import _FP_MODES, fp_quantized
from benchmarks.mlx_kernels.cases_quantized import _affine_quantize
from benchmarks.mlx_kernels.common import Case, Result, compile_mlx, instantiation, rng

_AFFINE_HEADERS = ["steel/gemm/gemm.h", "steel/gemm/nax.h", "quantized_utils.h", "quantized_nax.h"]
_FP_HEADERS = ["steel/gemm/gemm.h", "steel/gemm/nax.h", "fp_quantized_nax.h"]
_TILE = "64, 64, 64, 2, 2"                              # BM, BK, BN, WM, WN of gather_qmm_nax (BM, BN, BK for rhs)


def _weights(gen, mode: str, dtype: str, bits: int, group_size: int, experts: tuple[int, ...], rows: int,
             cols: int):
    """Quantized weights of shape (*experts, rows, cols), quantized along cols: (packed uint32 words, scales,
    biases or None, the dequantized weights as float64), each with the expert dimensions in front."""
    count = math.prod(experts)
    if mode == "affine":
        w = gen.normal(0.0, 1.0, size=(count * rows, cols)).astype(np.float32)
        packed, scales, biases, deq = _affine_quantize(w, group_size, bits, dtype)
    else:
        packed, scales, deq = fp_quantized(gen, mode, count * rows, cols)
        biases = None
    lead = (*experts, rows)
    return (packed.reshape(*lead, -1), scales.reshape(*lead, -1),
            None if biases is None else biases.reshape(*lead, -1), deq.reshape(*lead, cols))


def _strides(a: np.ndarray) -> np.ndarray:
    """An array's strides in elements, as MLX binds them."""
    return _i64(*(s // a.itemsize for s in a.strides))


def _gather_qmm_nax_case(name: str, dtype: str, mode: str, M: int, N: int, K: int, *, transposed: bool = True,
                         bits: int = 4, group_size: int = 64, x_batch: tuple[int, ...] = (2,),
                         experts: tuple[int, ...] = (3,), lhs: tuple = ((0,), (1,)), rhs: tuple = ((2, 0, 1),),
                         seed: int = 0) -> Case:
    """out[b] = x[lhs[b]] @ deq(w[rhs[b]]).T (w (..., N, K), `_gather_qmm_t_nax`) or x[lhs[b]] @ deq(w[rhs[b]])
    (w (..., K, N), `_gather_qmm_n_nax`), as gather_qmm_nax dispatches them: 64 x 64 output tiles (the `_t_` kernel
    with alN from N % 64), K in steps of 64, a grid of (ceil(N / 64), ceil(M / 64), B) threadgroups of (32, 2, 2)
    for the B products; w, scales, biases (nothing for the float modes), x, lhs_indices, rhs_indices, out, K, N, M
    at buffers 0-9, then x's batch rank, shape and strides, w's batch rank, shape and strides, the scales' (and
    biases') strides, and the index batch as collapse_contiguous_dims leaves it: rank, shape, lhs and rhs strides.
    M may be ragged, N too for the `_t_` kernel; the `_n_` kernel stores whole 64-column tiles, so N % 64 == 0.
    `lhs` and `rhs` are the index arrays before broadcasting to one shape (a (2, 1) and a (1, 3) array give a
    2-D batch with zero strides, which the kernel walks with elem_to_loc_broadcast); more than one batch
    dimension of x or w takes elem_to_loc."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        group_size_, bits_ = _FP_MODES.get(mode, (group_size, bits))
        aligned = str(N % 64 == 0).lower()
        kind = "t" if transposed else "n"
        host = f"{mode}_gather_qmm_{kind}_nax_{tstr}_gs_{group_size_}_b_{bits_}_bm64_bn64_bk64_wm2_wn2"
        host += f"_alN_{aligned}" if transposed else ""
        targs = f"{msl}, {group_size_}, {bits_}, " + (f"{aligned}, " if transposed else "") + _TILE
        func = f"{'affine' if mode == 'affine' else 'fp'}_gather_qmm_{kind}_nax"
        src = instantiation(_AFFINE_HEADERS if mode == "affine" else _FP_HEADERS,
                            [f'instantiate_kernel("{host}", {func}, {targs})'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(host)
        gen = rng(seed)
        packed, scales, biases, deq = _weights(gen, mode, dtype, bits_, group_size_, experts,
                                               N if transposed else K, K if transposed else N)
        x, x_v = _random(gen, (*x_batch, M, K), dtype)
        lhs_a, rhs_a = np.array(lhs, np.uint32), np.array(rhs, np.uint32)
        shape = np.broadcast_shapes(lhs_a.shape, rhs_a.shape)
        lhs_b, rhs_b = np.broadcast_to(lhs_a, shape), np.broadcast_to(rhs_a, shape)
        flat_x, flat_w = x_v.reshape(-1, M, K), deq.reshape(-1, *deq.shape[-2:])
        want = np.stack([flat_x[i] @ (flat_w[j].T if transposed else flat_w[j])
                         for i, j in zip(lhs_b.ravel(), rhs_b.ravel())]).reshape(*shape, M, N)
        out = _empty((*shape, M, N), dtype)
        # collapse_contiguous_dims: neighbouring index dimensions merge where both stride lists allow it
        dims = [[n, ls, rs] for n, ls, rs in zip(shape, _strides(lhs_b), _strides(rhs_b))]
        merged = [dims[0]]
        for n, ls, rs in dims[1:]:
            prev = merged[-1]
            if prev[1] == ls * n and prev[2] == rs * n:
                merged[-1] = [prev[0] * n, ls, rs]
            else:
                merged.append([n, ls, rs])
        bound = {0: packed, 1: scales, 3: x, 4: np.ascontiguousarray(lhs_a), 5: np.ascontiguousarray(rhs_a), 6: out,
                 7: np.int32(K), 8: np.int32(N), 9: np.int32(M), 10: np.int32(len(x_batch)),
                 11: _i32(*x.shape), 12: _strides(x), 13: np.int32(len(experts)), 14: _i32(*packed.shape),
                 15: _strides(packed), 16: _strides(scales)}
        c = 17
        if biases is not None:
            bound[2], bound[17] = biases, _strides(biases)
            c = 18
        bound[c] = np.int32(len(merged))
        bound[c + 1] = _i32(*(m[0] for m in merged))
        bound[c + 2] = _i64(*(m[1] for m in merged))
        bound[c + 3] = _i64(*(m[2] for m in merged))
        batch = math.prod(shape)
        dev.dispatch_threadgroups(fn, (-(-N // 64), -(-M // 64), batch), (32, 2, 2), _args(c + 4, bound))
        return _check(out, want, dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized_nax", run)


def _gather_qmm_rhs_nax_case(name: str, dtype: str, mode: str, M: int, N: int, K: int, experts: int, *,
                             bits: int = 4, group_size: int = 64, transposed: bool = True, seed: int = 0) -> Case:
    """out[i] = x[i] @ deq(w[idx[i]]).T for M rows of one vector each and sorted `idx`, as gather_qmm_rhs takes
    `_gather_qmm_rhs_nax_nt_` (the NAX path is for transposed weights; `transposed=False` runs the `_nn_` kernel
    quantized_nax.metal also instantiates, w (E, K, N)): BM = 32 rows per tile when M / E < 64, else 64; BN = BK = 64,
    threadgroups of (32, 2, 2), align_M/N/K at 200-202; x, w, scales, biases (nothing for the float modes),
    offsets, out, M, N, K and the group count at buffers 0-9. The kernel finds each tile's rows and expert with
    schedule_row_tile from the group offsets (first row of each expert, what gather_mm_offsets writes from the
    sorted indices), so the grid is (ceil(N / 64), min(M, ceil(M / BM) + E - 1)) tiles, the most any grouping
    needs; tiles past the last return. One expert owns no rows."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        group_size_, bits_ = _FP_MODES.get(mode, (group_size, bits))
        bm = 32 if M // experts < 64 else 64
        tn = "nt" if transposed else "nn"
        host = f"{mode}_gather_qmm_rhs_nax_{tn}_{tstr}_gs_{group_size_}_b_{bits_}_bm_{bm}_bn_64_bk_64_wm_2_wn_2"
        func = f"{'affine' if mode == 'affine' else 'fp'}_gather_qmm_rhs_nax"
        src = instantiation(_AFFINE_HEADERS if mode == "affine" else _FP_HEADERS, [
            f'instantiate_kernel("{host}", {func}, {msl}, {group_size_}, {bits_}, {bm}, 64, 64, 2, 2, '
            f'{str(transposed).lower()})'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(
            host, constants={200: M % bm == 0, 201: N % 64 == 0, 202: K % 64 == 0})
        gen = rng(seed)
        packed, scales, biases, deq = _weights(gen, mode, dtype, bits_, group_size_, (experts,),
                                               N if transposed else K, K if transposed else N)
        idx = np.sort(gen.integers(0, experts, size=M))
        idx[idx == 1] = 2                               # expert 1 owns no rows
        x, x_v = _random(gen, (M, 1, K), dtype)
        w_m = np.swapaxes(deq, -1, -2) if transposed else deq
        want = np.einsum("mk,mkn->mn", x_v[:, 0], w_m[idx])[:, None, :]
        offsets = np.searchsorted(idx, np.arange(experts), "left").astype(np.int32)
        out = _empty((M, 1, N), dtype)
        bound = {0: x, 1: packed, 2: scales, 4: offsets, 5: out, 6: np.int32(M), 7: np.int32(N), 8: np.int32(K),
                 9: np.int32(experts)}
        if biases is not None:
            bound[3] = biases
        grid = (-(-N // 64), min(M, -(-M // bm) + experts - 1), 1)
        dev.dispatch_threadgroups(fn, grid, (32, 2, 2), _args(10, bound))
        return _check(out, want, dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized_nax", run)


def _fp_n_nax_case(name: str, dtype: str, mode: str, gather: bool) -> Case:
    """fp_qmm_n_nax or fp_gather_qmm_n_nax, instantiated as qmm_nax / gather_qmm_nax would name them: compiling
    either fails, since both call fp_qmm_n_impl with a threadgroup x tile it does not take (14 arguments for 13
    parameters). MLX never reaches them: its NAX products are for transposed weights, and fp_quantized_nax.metal
    instantiates neither."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        group_size, bits = _FP_MODES[mode]
        kind = "gather_qmm_n_nax" if gather else "qmm_n_nax"
        host = f"{mode}_{kind}_{tstr}_gs_{group_size}_b_{bits}_bm64_bn64_bk64_wm2_wn2" + ("" if gather else "_batch_0")
        targs = f"{msl}, {group_size}, {bits}, " + ("" if gather else "false, ") + _TILE
        src = instantiation(_FP_HEADERS, [f'instantiate_kernel("{host}", fp_{kind}, {targs})'])
        compile_mlx(dev, src, f"{host}.metal").function(host)
        raise AssertionError(f"{host} compiled")

    return Case(name, "quantized_nax", run)


CASES: list[Case] = [
    _gather_qmm_nax_case("affine_gather_qmm_t_nax_float16_4bit_broadcast", "float16", "affine", 40, 100, 128),
    _gather_qmm_nax_case("affine_gather_qmm_n_nax_bfloat16_8bit_batched", "bfloat16", "affine", 70, 128, 128,
                         transposed=False, bits=8, group_size=32, x_batch=(2, 2), experts=(2, 2),
                         lhs=(3, 0, 1), rhs=(1, 3, 2)),
    _gather_qmm_rhs_nax_case("affine_gather_qmm_rhs_nax_nt_float16_4bit_bm32_ragged", "float16", "affine", 70, 100,
                             128, 4, group_size=32),
    _gather_qmm_rhs_nax_case("affine_gather_qmm_rhs_nax_nt_bfloat16_8bit_bm64", "bfloat16", "affine", 200, 128, 128,
                             3, bits=8),
    _gather_qmm_rhs_nax_case("affine_gather_qmm_rhs_nax_nn_float16_4bit", "float16", "affine", 96, 128, 128, 3,
                             transposed=False),
    _gather_qmm_nax_case("mxfp8_gather_qmm_t_nax_bfloat16_unaligned_n", "bfloat16", "mxfp8", 40, 100, 128),
    _gather_qmm_rhs_nax_case("nvfp4_gather_qmm_rhs_nax_nt_float16_ragged", "float16", "nvfp4", 70, 100, 128, 4),
]
# Faulting as MLX dispatches them: gather_qmm_rhs takes the NAX kernel whatever K is, and with K not a multiple of
# 64 the kernel's last K step (`if (!align_K)`, load_safe with the remaining columns) still dequantizes a whole
# 64-column tile of every valid row: scales, biases and weights past the end of each row, which for the last row
# of the last expert lie past the end of the buffers. The CPU device stops at that read (a DeviceFault naming the
# line and the `scales` buffer); the test pins it.
FAULTS: list[tuple[Case, str]] = [
    (_gather_qmm_rhs_nax_case("affine_gather_qmm_rhs_nax_nt_float16_4bit_ragged_k", "float16", "affine", 70, 100,
                              160, 4, group_size=32), "quantized_nax.h:898"),
    (_gather_qmm_rhs_nax_case("nvfp4_gather_qmm_rhs_nax_nt_float16_ragged_k", "float16", "nvfp4", 70, 100, 160, 4),
     "fp_quantized_nax.h:171"),
]
# Refused: the shipped fp_quantized_nax.h does not compile these two (the call at the line named); the test pins
# that the CPU device says so, naming fp_qmm_n_impl and the line, instead of running anything.
REFUSED: list[tuple[Case, str]] = [
    (_fp_n_nax_case("mxfp4_qmm_n_nax_float16", "float16", "mxfp4", gather=False), "fp_quantized_nax.h:678"),
    (_fp_n_nax_case("mxfp8_gather_qmm_n_nax_bfloat16", "bfloat16", "mxfp8", gather=True), "fp_quantized_nax.h:828"),
]
