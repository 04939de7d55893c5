"""The original meTile's row and element-wise kernels, their bodies as meTile writes them: `kernels/layernorm.py`,
`kernels/rmsnorm.py`, `kernels/add_rmsnorm.py` (one row per program, looping over the row in blocks),
`kernels/reduce.py` (the element-wise sum of 2, 4, 8 or 16 arrays) and
`kernels/simdgroup_specialized_elementwise.py` (element-wise activations, some split between two simdgroup roles).

Every kernel reads its last block with a mask: sizes that no block divides, one element and many blocks are all
in the tests (`tests/test_metile_kernels.py`).
"""

from __future__ import annotations

import metile

# ---- kernels/layernorm.py


@metile.kernel
def layernorm(X, W, B, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    s = 0.0
    ss = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + x
        ss = ss + x * x
    mean = metile.sum(s) / N
    inv_std = 1.0 / metile.sqrt(metile.sum(ss) / N - mean * mean + 1e-5)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        metile.store(Out + row * N + cols, (x - mean) * inv_std * w + b, mask=mask)


# ---- kernels/rmsnorm.py


@metile.kernel
def rmsnorm(X, W, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    ss = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        x_f32 = metile.cast(x, "f32")
        ss = ss + x_f32 * x_f32

    ss = metile.sum(ss)

    rms = 1.0 / metile.sqrt(ss / N + eps)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        result = metile.cast(x, "f32") * rms * metile.cast(w, "f32")
        metile.store(Out + row * N + cols, result, mask=mask)


# ---- kernels/add_rmsnorm.py


@metile.kernel
def add_rmsnorm(X, Residual, W, Sum, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)

    sum_squares = 0.0
    for start in metile.tile_range(0, N, BLOCK):
        columns = start + metile.arange(0, BLOCK)
        mask = columns < N
        values = metile.cast(metile.load(X + row * N + columns, mask=mask), "f32")
        residual = metile.cast(metile.load(Residual + row * N + columns, mask=mask), "f32")
        summed = values + residual
        metile.store(Sum + row * N + columns, summed, mask=mask)
        sum_squares = sum_squares + summed * summed

    inverse_rms = 1.0 / metile.sqrt(metile.sum(sum_squares) / N + eps)

    for start in metile.tile_range(0, N, BLOCK):
        columns = start + metile.arange(0, BLOCK)
        mask = columns < N
        summed = metile.cast(metile.load(Sum + row * N + columns, mask=mask), "f32")
        weight = metile.cast(metile.load(W + columns, mask=mask), "f32")
        metile.store(Out + row * N + columns, summed * inverse_rms * weight, mask=mask)


# ---- kernels/reduce.py


@metile.kernel
def reduce_2(p0, p1, out, N_ELEM, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK_SIZE + metile.arange(0, BLOCK_SIZE)
    mask = offs < N_ELEM
    acc = metile.load(p0 + offs, mask=mask) + metile.load(p1 + offs, mask=mask)
    metile.store(out + offs, acc, mask=mask)


@metile.kernel
def reduce_4(p0, p1, p2, p3, out, N_ELEM, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK_SIZE + metile.arange(0, BLOCK_SIZE)
    mask = offs < N_ELEM
    acc = metile.load(p0 + offs, mask=mask) + metile.load(p1 + offs, mask=mask)
    acc = acc + metile.load(p2 + offs, mask=mask) + metile.load(p3 + offs, mask=mask)
    metile.store(out + offs, acc, mask=mask)


@metile.kernel
def reduce_8(p0, p1, p2, p3, p4, p5, p6, p7, out, N_ELEM, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK_SIZE + metile.arange(0, BLOCK_SIZE)
    mask = offs < N_ELEM
    acc = metile.load(p0 + offs, mask=mask) + metile.load(p1 + offs, mask=mask)
    acc = acc + metile.load(p2 + offs, mask=mask) + metile.load(p3 + offs, mask=mask)
    acc = acc + metile.load(p4 + offs, mask=mask) + metile.load(p5 + offs, mask=mask)
    acc = acc + metile.load(p6 + offs, mask=mask) + metile.load(p7 + offs, mask=mask)
    metile.store(out + offs, acc, mask=mask)


@metile.kernel
def reduce_16(
    p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15,
    out, N_ELEM, BLOCK_SIZE: metile.constexpr,
):
    pid = metile.program_id(0)
    offs = pid * BLOCK_SIZE + metile.arange(0, BLOCK_SIZE)
    mask = offs < N_ELEM
    acc = metile.load(p0 + offs, mask=mask) + metile.load(p1 + offs, mask=mask)
    acc = acc + metile.load(p2 + offs, mask=mask) + metile.load(p3 + offs, mask=mask)
    acc = acc + metile.load(p4 + offs, mask=mask) + metile.load(p5 + offs, mask=mask)
    acc = acc + metile.load(p6 + offs, mask=mask) + metile.load(p7 + offs, mask=mask)
    acc = acc + metile.load(p8 + offs, mask=mask) + metile.load(p9 + offs, mask=mask)
    acc = acc + metile.load(p10 + offs, mask=mask) + metile.load(p11 + offs, mask=mask)
    acc = acc + metile.load(p12 + offs, mask=mask) + metile.load(p13 + offs, mask=mask)
    acc = acc + metile.load(p14 + offs, mask=mask) + metile.load(p15 + offs, mask=mask)
    metile.store(out + offs, acc, mask=mask)


REDUCE_KERNELS = {2: reduce_2, 4: reduce_4, 8: reduce_8, 16: reduce_16}


# ---- kernels/simdgroup_specialized_elementwise.py


@metile.kernel
def exp_sqrt_kernel(X, out_exp, out_sqrt, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N

    x = metile.load(X + offs, mask=mask)

    with metile.simdgroup_role(role=0, num_roles=2):
        metile.store(out_exp + offs, metile.exp(x), mask=mask)

    with metile.simdgroup_role(role=1, num_roles=2):
        metile.store(out_sqrt + offs, metile.sqrt(metile.abs(x)), mask=mask)


@metile.kernel
def gelu_silu_kernel(X, out_gelu, out_silu, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N

    x = metile.load(X + offs, mask=mask)

    with metile.simdgroup_role(role=0, num_roles=2):
        gelu = x / (1.0 + metile.exp(0.0 - 1.702 * x))
        metile.store(out_gelu + offs, gelu, mask=mask)

    with metile.simdgroup_role(role=1, num_roles=2):
        silu = x / (1.0 + metile.exp(0.0 - x))
        metile.store(out_silu + offs, silu, mask=mask)


@metile.kernel
def geglu_specialized_kernel(X_gate, X_up, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N

    gate = metile.load(X_gate + offs, mask=mask)
    up = metile.load(X_up + offs, mask=mask)

    with metile.simdgroup_role(role=0, num_roles=2):
        gelu_gate = gate / (1.0 + metile.exp(0.0 - 1.702 * gate))
        metile.store(out + offs, gelu_gate * up, mask=mask)

    with metile.simdgroup_role(role=1, num_roles=2):
        gelu_gate = gate / (1.0 + metile.exp(0.0 - 1.702 * gate))
        metile.store(out + offs, gelu_gate * up, mask=mask)


@metile.kernel
def exp_kernel(X, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(out + offs, metile.exp(metile.load(X + offs, mask=mask)), mask=mask)


@metile.kernel
def sqrt_abs_kernel(X, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(out + offs, metile.sqrt(metile.abs(metile.load(X + offs, mask=mask))), mask=mask)


@metile.kernel
def gelu_kernel(X, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(out + offs, x / (1.0 + metile.exp(0.0 - 1.702 * x)), mask=mask)


@metile.kernel
def silu_kernel(X, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(out + offs, x / (1.0 + metile.exp(0.0 - x)), mask=mask)


@metile.kernel
def geglu_kernel(X_gate, X_up, out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    gate = metile.load(X_gate + offs, mask=mask)
    up = metile.load(X_up + offs, mask=mask)
    gelu_gate = gate / (1.0 + metile.exp(0.0 - 1.702 * gate))
    metile.store(out + offs, gelu_gate * up, mask=mask)
