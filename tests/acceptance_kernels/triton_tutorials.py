"""Triton's introductory tutorials 01 to 06 ported to metile, kernel by kernel, with the host code that sizes their
grids and blocks; `tests/test_triton_tutorials.py` runs them against numpy.

Each section keeps its tutorial's algorithm, names and structure, so that the two read side by side; where metile
spells a construct differently, or a form Triton accepts is refused here, a comment at that line says what changed:

- 01 vector add: one program per block of `BLOCK_SIZE` elements, masked load and store.
- 02 fused softmax: one row per program, the row read whole (`BLOCK_SIZE = next_power_of_2(n_cols)`) with
  `other=-inf`, and a persistent form in which each program strides over the rows. Row strides are arguments, so
  a strided view (`x[:, :781]` of a wider array) works as it is.
- 03 matrix multiplication: f16 operands, an f32 accumulator, the grouped ("super-grouped") order of output tiles,
  an optional leaky ReLU (a `@metile.func`) and an f16 result. Two forms of the same kernel: bounded
  `tile_load`/`tile_store`, metile's own spelling of a block of a matrix, and Triton's pointer arithmetic with
  masks (`offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak`), which takes any strides.
- 04 low-memory dropout: with a mask array, and seeded with `metile.rand(seed, offsets)`, Triton's generator.
- 05 layer norm: the forward pass storing the mean and the reciprocal standard deviation, the backward pass giving
  dx and per-group partial sums of dw and db, and a second kernel reducing the groups.
- 06 fused attention: the forward pass of flash attention (online softmax in base 2), its inner loop a
  `@metile.func` as Triton's `_attn_fwd_inner`, causal or not, for sequence lengths that the blocks do not divide.

Host-side, numpy arrays stand for torch tensors: strides are `a.strides[i] // a.itemsize` elements.
"""

from __future__ import annotations

import numpy as np

import metile


def elem_strides(a: np.ndarray) -> tuple[int, ...]:
    """The strides of `a` in elements, as `torch.Tensor.stride()` gives them."""
    return tuple(s // a.itemsize for s in a.strides)


# ---- 01 vector add


@metile.kernel
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    y = metile.load(y_ptr + offsets, mask=mask)
    output = x + y
    metile.store(output_ptr + offsets, output, mask=mask)


def add(x: np.ndarray, y: np.ndarray, block_size: int = 1024) -> np.ndarray:
    output = np.empty_like(x)
    n_elements = output.size
    grid = lambda meta: (metile.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731 - Triton's spelling
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=block_size)
    return output


# ---- 02 fused softmax


@metile.kernel
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: metile.constexpr):
    row_idx = metile.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = metile.arange(0, BLOCK_SIZE)
    input_ptrs = row_start_ptr + col_offsets
    mask = col_offsets < n_cols
    row = metile.load(input_ptrs, mask=mask, other=-float("inf"))
    row_minus_max = row - metile.max(row, axis=0)
    numerator = metile.exp(row_minus_max)
    denominator = metile.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    output_row_start_ptr = output_ptr + row_idx * output_row_stride
    metile.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


@metile.kernel
def softmax_kernel_persistent(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                              BLOCK_SIZE: metile.constexpr):
    row_start = metile.program_id(0)
    row_step = metile.num_programs(0)
    for row_idx in metile.tile_range(row_start, n_rows, row_step):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = metile.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = metile.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - metile.max(row, axis=0)
        numerator = metile.exp(row_minus_max)
        denominator = metile.sum(numerator, axis=0)
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        metile.store(output_row_start_ptr + col_offsets, numerator / denominator, mask=mask)


def softmax(x: np.ndarray, num_programs: int | None = None) -> np.ndarray:
    """Row softmax of the 2-D array `x` (any row stride, unit column stride): one program per row, or with
    `num_programs` that many persistent programs sharing the rows."""
    n_rows, n_cols = x.shape
    assert x.strides[1] == x.itemsize, "the columns of a row must be adjacent"
    BLOCK_SIZE = metile.next_power_of_2(n_cols)
    y = np.empty_like(x)
    if num_programs is None:
        softmax_kernel[(n_rows,)](y, x, elem_strides(x)[0], elem_strides(y)[0], n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE)
    else:
        grid = (min(num_programs, n_rows),)
        softmax_kernel_persistent[grid](y, x, elem_strides(x)[0], elem_strides(y)[0], n_rows, n_cols,
                                        BLOCK_SIZE=BLOCK_SIZE)
    return y


# ---- 03 matrix multiplication


@metile.func
def grouped_tile(pid, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M):
    """The output tile `(pid_m, pid_n)` of program `pid` when programs go down groups of `GROUP_SIZE_M` tile rows
    column by column, so that programs running together share rows of A and columns of B."""
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@metile.func
def leaky_relu(x):
    return metile.where(x >= 0, x, 0.01 * x)


@metile.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                  BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr, BLOCK_SIZE_K: metile.constexpr,
                  GROUP_SIZE_M: metile.constexpr, ACTIVATION: metile.constexpr):
    """C = A @ B for row-major A, B and C whose rows are `lda`, `ldb` and `ldc` elements apart: each block is a
    bounded `tile_load`, zero outside the matrix, and the store writes only inside it."""
    pid = metile.program_id(axis=0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    row, col = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in metile.tile_range(0, K, BLOCK_SIZE_K):
        a = metile.tile_load(a_ptr, row, k, lda, (BLOCK_SIZE_M, BLOCK_SIZE_K), bounds=(M, K))
        b = metile.tile_load(b_ptr, k, col, ldb, (BLOCK_SIZE_K, BLOCK_SIZE_N), bounds=(K, N))
        accumulator = metile.dot(a, b, accumulator)
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(metile.float16)
    metile.tile_store(c_ptr, row, col, ldc, c, (BLOCK_SIZE_M, BLOCK_SIZE_N), bounds=(M, N))


@metile.kernel
def matmul_kernel_ptrs(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr,
                       BLOCK_SIZE_K: metile.constexpr, GROUP_SIZE_M: metile.constexpr,
                       ACTIVATION: metile.constexpr):
    """The same product written with pointer tiles, as Triton's tutorial does: any strides, masks along K only
    (rows and columns past the edge wrap around with `%` and are never stored)."""
    pid = metile.program_id(axis=0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    offs_am = (pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)) % N
    offs_k = metile.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_SIZE_K)):  # a runtime bound: a runtime loop, as in Triton
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = metile.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(metile.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    metile.store(c_ptrs, c, mask=c_mask)


def matmul(a: np.ndarray, b: np.ndarray, activation: str = "", pointers: bool = False, block_m: int = 32,
           block_n: int = 32, block_k: int = 32, group_size_m: int = 4) -> np.ndarray:
    """`a @ b` in f16 (f32 accumulation), with `activation` ("" or "leaky_relu") applied before the rounding.

    Triton's tutorial autotunes the block sizes over a list of configurations (`metile.autotune` does that too);
    here they are arguments, so that tests choose them (128 x 64 x 32 takes 14.5 KB of threadgroup memory: the
    operands' staging only, as the f32 accumulator is converted and stored by each lane from its simdgroup
    matrices). The tiled form needs rows of unit column stride, the pointer form takes any strides."""
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    c = np.empty((M, N), dtype=np.float16)
    grid = (metile.cdiv(M, block_m) * metile.cdiv(N, block_n),)
    blocks = dict(BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, GROUP_SIZE_M=group_size_m,
                  ACTIVATION=activation)
    if pointers:
        matmul_kernel_ptrs[grid](a, b, c, M, N, K, *elem_strides(a), *elem_strides(b), *elem_strides(c), **blocks)
    else:
        assert elem_strides(a)[1] == elem_strides(b)[1] == 1, "matmul_kernel reads row-major matrices"
        matmul_kernel[grid](a, b, c, M, N, K, elem_strides(a)[0], elem_strides(b)[0], N, **blocks)
    return c


# ---- 04 low-memory dropout


@metile.kernel
def _dropout(x_ptr, x_keep_ptr, output_ptr, n_elements, p, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    x_keep = metile.load(x_keep_ptr + offsets, mask=mask)
    output = metile.where(x_keep, x / (1 - p), 0.0)   # the integer keep mask: true where it is not 0
    metile.store(output_ptr + offsets, output, mask=mask)


@metile.kernel
def _seeded_dropout(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    random = metile.rand(seed, offsets)
    x_keep = random > p
    output = metile.where(x_keep, x / (1 - p), 0.0)
    metile.store(output_ptr + offsets, output, mask=mask)


def dropout(x: np.ndarray, x_keep: np.ndarray, p: float, block_size: int = 1024) -> np.ndarray:
    output = np.empty_like(x)
    n_elements = x.size
    _dropout[(metile.cdiv(n_elements, block_size),)](x, x_keep, output, n_elements, p, BLOCK_SIZE=block_size)
    return output


def seeded_dropout(x: np.ndarray, p: float, seed: int, block_size: int = 1024) -> np.ndarray:
    output = np.empty_like(x)
    n_elements = x.size
    _seeded_dropout[(metile.cdiv(n_elements, block_size),)](x, output, n_elements, p, seed, BLOCK_SIZE=block_size)
    return output


# ---- 05 layer norm


@metile.kernel
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: metile.constexpr):
    row = metile.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):  # N is a runtime value: a runtime loop
        cols = off + metile.arange(0, BLOCK_SIZE)
        a = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        _mean += a
    mean = metile.sum(_mean, axis=0) / N
    _var = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        x = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        x = metile.where(cols < N, x - mean, 0.)
        _var += x * x
    var = metile.sum(_var, axis=0) / N
    rstd = 1 / metile.sqrt(var + eps)
    metile.store(Mean + row, mean)
    metile.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        x = metile.load(X + cols, mask=mask, other=0.).to(metile.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        metile.store(Y + cols, y, mask=mask)


@metile.kernel
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, stride, N,
                             GROUP_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr):
    """dx of one row, and the row's dw and db added into the partial sums of its group, row `row % GROUP_SIZE_M`
    of DW and DB (f32 arrays of `GROUP_SIZE_M x N`, zero at the start)."""
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = metile.load(X + cols, mask=mask, other=0).to(metile.float32)
    dy = metile.load(DY + cols, mask=mask, other=0).to(metile.float32)
    w = metile.load(W + cols, mask=mask).to(metile.float32)
    mean = metile.load(Mean + row)
    rstd = metile.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = metile.where(mask, xhat, 0.)
    wdy = metile.where(mask, wdy, 0.)
    c1 = metile.sum(xhat * wdy, axis=0) / N
    c2 = metile.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    metile.store(DX + cols, dx, mask=mask)
    partial_dw = dy * xhat
    partial_db = dy
    # Triton serialises the programs of a group with a spin lock (`tl.atomic_cas` on Lock, a first-writer flag
    # set with `tl.atomic_xchg`) and adds with plain loads and stores. metile has neither compare-and-swap nor
    # exchange, so the lock is not expressible; each element is added atomically instead (hence f32 partial sums,
    # where Triton keeps them in the weight's type).
    metile.atomic_add(DW, partial_dw, mask=mask)
    metile.atomic_add(DB, partial_db, mask=mask)


@metile.kernel
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N,
                         BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr):
    pid = metile.program_id(0)
    cols = pid * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    dw = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    db = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for i in metile.tile_range(0, M, BLOCK_SIZE_M):
        rows = i + metile.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += metile.load(DW + offs, mask=mask, other=0.)
        db += metile.load(DB + offs, mask=mask, other=0.)
    sum_dw = metile.sum(dw, axis=0)
    sum_db = metile.sum(db, axis=0)
    metile.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    metile.store(FINAL_DB + cols, sum_db, mask=cols < N)


def layer_norm_block_size(x: np.ndarray) -> int:
    """The tutorial's block: the whole row, at most 64 KB of it."""
    max_fused_size = 65536 // x.itemsize
    block_size = min(max_fused_size, metile.next_power_of_2(x.shape[-1]))
    if x.shape[-1] > block_size:
        raise ValueError("this layer norm does not take rows of more than 64 KB")
    return block_size


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5,
               block_size: int | None = None):
    """`(y, mean, rstd)` of the layer norm over the last axis of `x` (y in x's type, mean and rstd in f32)."""
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    y = np.empty_like(x_arg)
    mean = np.empty(M, dtype=np.float32)
    rstd = np.empty(M, dtype=np.float32)
    BLOCK_SIZE = block_size or layer_norm_block_size(x)
    _layer_norm_fwd_fused[(M,)](x_arg, y, weight, bias, mean, rstd, elem_strides(x_arg)[0], N, eps,
                                BLOCK_SIZE=BLOCK_SIZE)
    return y.reshape(x.shape), mean, rstd


def layer_norm_backward(dy: np.ndarray, x: np.ndarray, weight: np.ndarray, mean: np.ndarray, rstd: np.ndarray):
    """`(dx, dw, db)` of the layer norm, from the upstream gradient `dy` and the forward pass's mean and rstd."""
    x_arg = x.reshape(-1, x.shape[-1])
    dy_arg = dy.reshape(x_arg.shape)
    M, N = x_arg.shape
    # the tutorial's number of groups of partial sums, more for narrower rows
    GROUP_SIZE_M = 64
    if N <= 8192:
        GROUP_SIZE_M = 96
    if N <= 4096:
        GROUP_SIZE_M = 128
    if N <= 1024:
        GROUP_SIZE_M = 256
    _dw = np.zeros((GROUP_SIZE_M, N), dtype=np.float32)
    _db = np.zeros((GROUP_SIZE_M, N), dtype=np.float32)
    dw = np.empty(N, dtype=weight.dtype)
    db = np.empty(N, dtype=weight.dtype)
    dx = np.empty_like(dy_arg)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy_arg, _dw, _db, x_arg, weight, mean, rstd, elem_strides(x_arg)[0], N,
                                   GROUP_SIZE_M=GROUP_SIZE_M, BLOCK_SIZE_N=layer_norm_block_size(x))
    BLOCK_SIZE_N = 128
    _layer_norm_bwd_dwdb[(metile.cdiv(N, BLOCK_SIZE_N),)](_dw, _db, dw, db, min(GROUP_SIZE_M, M), N,
                                                         BLOCK_SIZE_M=32, BLOCK_SIZE_N=BLOCK_SIZE_N)
    return dx.reshape(x.shape), dw, db


# ---- 06 fused attention (forward)


@metile.func
def _attn_fwd_inner(acc, l_i, m_i, q, K_ptr, V_ptr, stride_kn, stride_kk, stride_vn, stride_vk,
                    start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, STAGE, offs_m, offs_n, N_CTX):
    """One sweep of the online softmax over the keys of a stage: 1, the blocks left of the diagonal block
    (causal); 2, the diagonal block, masked (causal); 3, every key (not causal)."""
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        lo, hi = 0, N_CTX
    offs_d = metile.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = metile.multiple_of(start_n, BLOCK_N)
        keys = start_n + offs_n
        # K is read transposed (HEAD_DIM x BLOCK_N) by its strides; Triton reads it through a block pointer
        # of order (0, 1). Keys past the end of the sequence read 0.
        k = metile.load(K_ptr + offs_d[:, None] * stride_kk + keys[None, :] * stride_kn,
                        mask=keys[None, :] < N_CTX, other=0.0)
        qk = metile.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= keys[None, :]
            qk = qk * qk_scale + metile.where(mask, 0, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            # Triton's tutorial asks for a sequence length that BLOCK_N divides; here the keys past the end are
            # masked out like those above the diagonal.
            qk = metile.where(keys[None, :] < N_CTX, qk, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = metile.exp2(qk)
        l_ij = metile.sum(p, 1)
        alpha = metile.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = metile.load(V_ptr + keys[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                        mask=keys[:, None] < N_CTX, other=0.0)
        p = p.to(metile.float16)
        acc = metile.dot(p, v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@metile.kernel
def _attn_fwd(Q, K, V, sm_scale, M, Out,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vn, stride_vk,
              stride_oz, stride_oh, stride_om, stride_on,
              Z, H, N_CTX,
              HEAD_DIM: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
              STAGE: metile.constexpr):
    """Rows `start_m * BLOCK_M ...` of softmax(Q K^T * sm_scale) V for one (batch, head); M gets the base-2
    logarithm of each row's softmax denominator (what the backward pass needs)."""
    start_m = metile.program_id(0)
    off_hz = metile.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    # widened to 64 bits, as Triton's tutorial does: a batch of large heads may be past 2**31 elements
    q_offset = off_z.to(metile.int64) * stride_qz + off_h.to(metile.int64) * stride_qh
    k_offset = off_z.to(metile.int64) * stride_kz + off_h.to(metile.int64) * stride_kh
    v_offset = off_z.to(metile.int64) * stride_vz + off_h.to(metile.int64) * stride_vh
    o_offset = off_z.to(metile.int64) * stride_oz + off_h.to(metile.int64) * stride_oh
    offs_m = start_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.arange(0, BLOCK_N)
    offs_d = metile.arange(0, HEAD_DIM)
    m_i = metile.zeros([BLOCK_M], dtype=metile.float32) - float("inf")
    l_i = metile.zeros([BLOCK_M], dtype=metile.float32) + 1.0
    acc = metile.zeros([BLOCK_M, HEAD_DIM], dtype=metile.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1 / ln(2): exp(x) = exp2(x / ln 2)
    # Q and Out are addressed by strides with the rows past the end masked, where Triton uses block pointers.
    row_ok = offs_m[:, None] < N_CTX
    q = metile.load(Q + q_offset + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=row_ok, other=0.0)
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + k_offset, V + v_offset, stride_kn, stride_kk,
                                        stride_vn, stride_vk, start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + k_offset, V + v_offset, stride_kn, stride_kk,
                                        stride_vn, stride_vk, start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        2, offs_m, offs_n, N_CTX)
    m_i += metile.log2(l_i)
    acc = acc / l_i[:, None]
    metile.store(M + off_hz * N_CTX + offs_m, m_i, mask=offs_m < N_CTX)
    # Triton converts to `Out.type.element_ty`; a metile pointer's `.dtype` is its element type.
    metile.store(Out + o_offset + offs_m[:, None] * stride_om + offs_d[None, :] * stride_on, acc.to(Out.dtype),
                 mask=row_ok)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, sm_scale: float, block_m: int = 32,
              block_n: int = 32):
    """`(o, M)`: attention over arrays of shape (batch, heads, sequence, head_dim), and the per-row base-2
    log-sum-exp of the scaled scores."""
    HEAD_DIM_Q, HEAD_DIM_K, HEAD_DIM_V = q.shape[-1], k.shape[-1], v.shape[-1]
    assert HEAD_DIM_Q == HEAD_DIM_K == HEAD_DIM_V
    assert HEAD_DIM_K in {16, 32, 64, 128, 256}
    assert block_m % block_n == 0, "the diagonal stage steps through BLOCK_M in BLOCK_N steps"
    o = np.empty_like(q)
    stage = 3 if causal else 1
    grid = (metile.cdiv(q.shape[2], block_m), q.shape[0] * q.shape[1], 1)
    M = np.empty((q.shape[0], q.shape[1], q.shape[2]), dtype=np.float32)
    _attn_fwd[grid](q, k, v, sm_scale, M, o, *elem_strides(q), *elem_strides(k), *elem_strides(v),
                    *elem_strides(o), q.shape[0], q.shape[1], q.shape[2],
                    HEAD_DIM=HEAD_DIM_K, BLOCK_M=block_m, BLOCK_N=block_n, STAGE=stage)
    return o, M
