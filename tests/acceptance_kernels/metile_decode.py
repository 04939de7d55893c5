"""The original meTile's decode kernels, their bodies as meTile writes them: `kernels/attention.py` (online
multi-head decode attention, one head per program, the tokens spread over the simdgroups and each lane holding
`D // 32` dimensions in Python lists) and `kernels/affine_qmv.py` (matrix-vector products with packed `BITS`-bit
weights, an affine scale and bias per group of `GROUP_SIZE` weights, accumulated per output in Python lists and
summed over a simdgroup).

Both use meTile's `metile.scalar`, `metile.fast_exp`, `metile.simd_sum` and `metile.simd_max`, and keep values in
lists whose items a `tile_range` loop assigns (carried by the loop). One change from meTile's text: the helper
`_affine_qmv_results`, a plain function in meTile (whose tracer ran the kernel as Python), is marked
`@metile.func`, which is how a metile kernel calls a helper (docs/language.md 7.4); its body is meTile's.

Host code: the reference functions and the weight packing are this project's.
"""

from __future__ import annotations

import numpy as np

import metile

ATTENTION_DECODE_CONFIGS = [
    metile.Config(BLOCK=64),
    metile.Config(BLOCK=128),
    metile.Config(BLOCK=256),
    metile.Config(BLOCK=512),
    metile.Config(BLOCK=1024),
]


@metile.kernel
def attention_decode_kernel(
    Q,
    K,
    V,
    Out,
    N,
    scale,
    D: metile.constexpr,
    BLOCK: metile.constexpr,
):
    """Online MHA decode attention over flattened ``[head, token, dim]`` tensors."""
    head = metile.program_id(0)
    thread = metile.thread_id()
    lane = metile.simd_lane_id()
    simdgroup = thread // 32
    num_simdgroups = BLOCK // 32
    values_per_lane = D // 32

    partial_maxima = metile.shared(BLOCK, dtype="f32")
    partial_sums = metile.shared(BLOCK, dtype="f32")
    partial_outputs = metile.shared(D * num_simdgroups, dtype="f32")

    query_offset = head * D
    query = []
    for component in range(values_per_lane):
        dimension = lane * values_per_lane + component
        query.append(metile.load(Q + query_offset + dimension) * scale)

    local_maximum = metile.scalar(-1e30)
    local_sum = metile.scalar(0.0)
    local_outputs = [metile.scalar(0.0) for _ in range(values_per_lane)]

    for token in metile.tile_range(simdgroup, N, num_simdgroups):
        token_offset = (head * N + token) * D
        score = 0.0
        for component in range(values_per_lane):
            dimension = lane * values_per_lane + component
            key_offset = token_offset + dimension
            score = score + query[component] * metile.load(K + key_offset)

        score = metile.simd_sum(score)
        new_maximum = metile.maximum(local_maximum, score)
        old_factor = metile.fast_exp(local_maximum - new_maximum)
        probability = metile.fast_exp(score - new_maximum)
        local_sum = local_sum * old_factor + probability

        for component in range(values_per_lane):
            dimension = lane * values_per_lane + component
            value_offset = token_offset + dimension
            value = metile.load(V + value_offset)
            local_outputs[component] = local_outputs[component] * old_factor + probability * value
        local_maximum = new_maximum

    metile.store(partial_maxima + thread, local_maximum)
    metile.store(partial_sums + thread, local_sum)
    for component in range(values_per_lane):
        dimension = lane * values_per_lane + component
        partial_offset = dimension * num_simdgroups + simdgroup
        metile.store(partial_outputs + partial_offset, local_outputs[component])
    metile.barrier()

    active_source = lane < num_simdgroups
    source_simdgroup = metile.minimum(lane, num_simdgroups - 1)
    source_thread = source_simdgroup * 32
    source_maximum = metile.where(
        active_source,
        metile.load(partial_maxima + source_thread),
        -1e30,
    )
    global_maximum = metile.simd_max(source_maximum)
    source_sum = metile.where(
        active_source,
        metile.load(partial_sums + source_thread),
        0.0,
    )
    source_factor = metile.where(
        active_source,
        metile.fast_exp(source_maximum - global_maximum),
        0.0,
    )
    denominator = metile.simd_sum(source_sum * source_factor)

    output_dimensions = []
    output_values = []
    for chunk_offset in range(0, 32, num_simdgroups):
        chunk = simdgroup + chunk_offset
        for component in range(values_per_lane):
            dimension = chunk * values_per_lane + component
            partial_offset = dimension * num_simdgroups + source_simdgroup
            source_output = metile.where(
                active_source,
                metile.load(partial_outputs + partial_offset),
                0.0,
            )
            output_dimensions.append(dimension)
            output_values.append(metile.simd_sum(source_output * source_factor) / denominator)

    writer = lane == 0
    output_offset = head * D
    for output_index in range(len(output_values)):
        metile.store(
            Out + output_offset + output_dimensions[output_index],
            output_values[output_index],
            mask=writer,
        )


attention_decode = metile.autotune(
    configs=ATTENTION_DECODE_CONFIGS,
    key=["N", "D"],
    verbose=False,
)(attention_decode_kernel)


@metile.func
def _affine_qmv_results(
    X,
    W,
    Scales,
    Biases,
    K,
    N,
    GROUP_SIZE,
    BITS,
    BLOCK,
    OUTPUTS_PER_SIMDGROUP,
    HALF_DECODE,
):
    thread = metile.thread_id()
    lane = thread % 32
    simdgroup = thread // 32
    simdgroups_per_threadgroup = BLOCK // 32
    outputs_per_threadgroup = simdgroups_per_threadgroup * OUTPUTS_PER_SIMDGROUP
    output_base = metile.program_id(0) * outputs_per_threadgroup + simdgroup * OUTPUTS_PER_SIMDGROUP
    row = output_base // N
    column_base = output_base % N
    values_per_word = 32 // BITS
    words_per_row = K // values_per_word
    groups_per_row = K // GROUP_SIZE
    words_per_group = GROUP_SIZE // values_per_word
    decode_dtype = "f16" if HALF_DECODE else "f32"
    accumulators = [metile.scalar(0.0) for _ in range(OUTPUTS_PER_SIMDGROUP)]

    for word_index in metile.tile_range(lane, words_per_row, 32):
        input_base = row * K + word_index * values_per_word
        input_values = [
            metile.cast(metile.load(X + input_base + element), decode_dtype)
            for element in range(values_per_word)
        ]
        for output_offset in range(OUTPUTS_PER_SIMDGROUP):
            column = column_base + output_offset
            packed = metile.load(W + column * words_per_row + word_index)
            group = column * groups_per_row + word_index // words_per_group
            scale = metile.cast(metile.load(Scales + group), decode_dtype)
            bias = metile.cast(metile.load(Biases + group), decode_dtype)
            for element in range(values_per_word):
                quantized = metile.cast(
                    (packed >> (element * BITS)) & ((1 << BITS) - 1),
                    decode_dtype,
                )
                accumulators[output_offset] = accumulators[output_offset] + input_values[
                    element
                ] * (quantized * scale + bias)

    results = [metile.simd_sum(accumulator) for accumulator in accumulators]
    return lane, output_base, results


@metile.kernel
def affine_qmv(
    X,
    W,
    Scales,
    Biases,
    Out,
    K,
    N,
    GROUP_SIZE: metile.constexpr,
    BITS: metile.constexpr,
    BLOCK: metile.constexpr,
    OUTPUTS_PER_SIMDGROUP: metile.constexpr,
    HALF_DECODE: metile.constexpr,
):
    """Affine packed-weight matrix-vector product for decode-shaped rows."""
    lane, output_base, results = _affine_qmv_results(
        X,
        W,
        Scales,
        Biases,
        K,
        N,
        GROUP_SIZE,
        BITS,
        BLOCK,
        OUTPUTS_PER_SIMDGROUP,
        HALF_DECODE,
    )
    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        metile.store(
            Out + output_base + output_offset,
            results[output_offset],
            mask=lane == 0,
        )


@metile.kernel
def affine_residual_qmv(
    X,
    W,
    Scales,
    Biases,
    Residual,
    Out,
    K,
    N,
    GROUP_SIZE: metile.constexpr,
    BITS: metile.constexpr,
    BLOCK: metile.constexpr,
    OUTPUTS_PER_SIMDGROUP: metile.constexpr,
    HALF_DECODE: metile.constexpr,
):
    """Affine packed-weight QMV with a fused residual-add epilogue."""
    lane, output_base, results = _affine_qmv_results(
        X,
        W,
        Scales,
        Biases,
        K,
        N,
        GROUP_SIZE,
        BITS,
        BLOCK,
        OUTPUTS_PER_SIMDGROUP,
        HALF_DECODE,
    )
    lane_zero = lane == 0
    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        output_index = output_base + output_offset
        residual = metile.load(Residual + output_index, mask=lane_zero)
        metile.store(
            Out + output_index,
            results[output_offset] + residual,
            mask=lane_zero,
        )


@metile.kernel
def affine_swiglu_qmv(
    X,
    GateW,
    GateScales,
    GateBiases,
    UpW,
    UpScales,
    UpBiases,
    Out,
    K,
    N,
    GROUP_SIZE: metile.constexpr,
    BITS: metile.constexpr,
    BLOCK: metile.constexpr,
    OUTPUTS_PER_SIMDGROUP: metile.constexpr,
    HALF_DECODE: metile.constexpr,
):
    """Fuse two affine QMV projections with a SwiGLU epilogue."""
    thread = metile.thread_id()
    lane = thread % 32
    simdgroup = thread // 32
    simdgroups_per_threadgroup = BLOCK // 32
    outputs_per_threadgroup = simdgroups_per_threadgroup * OUTPUTS_PER_SIMDGROUP
    output_base = metile.program_id(0) * outputs_per_threadgroup + simdgroup * OUTPUTS_PER_SIMDGROUP
    row = output_base // N
    column_base = output_base % N
    values_per_word = 32 // BITS
    words_per_row = K // values_per_word
    groups_per_row = K // GROUP_SIZE
    words_per_group = GROUP_SIZE // values_per_word
    decode_dtype = "f16" if HALF_DECODE else "f32"
    gate_accumulators = [metile.scalar(0.0) for _ in range(OUTPUTS_PER_SIMDGROUP)]
    up_accumulators = [metile.scalar(0.0) for _ in range(OUTPUTS_PER_SIMDGROUP)]

    for word_index in metile.tile_range(lane, words_per_row, 32):
        input_base = row * K + word_index * values_per_word
        input_values = [
            metile.cast(metile.load(X + input_base + element), decode_dtype)
            for element in range(values_per_word)
        ]
        for output_offset in range(OUTPUTS_PER_SIMDGROUP):
            column = column_base + output_offset
            packed_offset = column * words_per_row + word_index
            gate_packed = metile.load(GateW + packed_offset)
            up_packed = metile.load(UpW + packed_offset)
            group = column * groups_per_row + word_index // words_per_group
            gate_scale = metile.cast(metile.load(GateScales + group), decode_dtype)
            gate_bias = metile.cast(metile.load(GateBiases + group), decode_dtype)
            up_scale = metile.cast(metile.load(UpScales + group), decode_dtype)
            up_bias = metile.cast(metile.load(UpBiases + group), decode_dtype)
            for element in range(values_per_word):
                shift = element * BITS
                mask = (1 << BITS) - 1
                gate_quantized = metile.cast(
                    (gate_packed >> shift) & mask,
                    decode_dtype,
                )
                up_quantized = metile.cast(
                    (up_packed >> shift) & mask,
                    decode_dtype,
                )
                gate_accumulators[output_offset] = gate_accumulators[output_offset] + input_values[
                    element
                ] * (gate_quantized * gate_scale + gate_bias)
                up_accumulators[output_offset] = up_accumulators[output_offset] + input_values[
                    element
                ] * (up_quantized * up_scale + up_bias)

    results = []
    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        gate = metile.simd_sum(gate_accumulators[output_offset])
        up = metile.simd_sum(up_accumulators[output_offset])
        results.append(gate / (1.0 + metile.fast_exp(0.0 - gate)) * up)
    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        metile.store(
            Out + output_base + output_offset,
            results[output_offset],
            mask=lane == 0,
        )


@metile.kernel
def affine_swiglu_scratch_qmv(
    X,
    GateW,
    GateScales,
    GateBiases,
    UpW,
    UpScales,
    UpBiases,
    Out,
    K,
    N,
    GROUP_SIZE: metile.constexpr,
    BITS: metile.constexpr,
    BLOCK: metile.constexpr,
    OUTPUTS_PER_SIMDGROUP: metile.constexpr,
    HALF_DECODE: metile.constexpr,
):
    """Sequence projection lifetimes through threadgroup scratch before SwiGLU."""
    thread = metile.thread_id()
    lane = thread % 32
    simdgroup = thread // 32
    simdgroups_per_threadgroup = BLOCK // 32
    outputs_per_threadgroup = simdgroups_per_threadgroup * OUTPUTS_PER_SIMDGROUP
    output_base = metile.program_id(0) * outputs_per_threadgroup + simdgroup * OUTPUTS_PER_SIMDGROUP
    row = output_base // N
    column_base = output_base % N
    values_per_word = 32 // BITS
    words_per_row = K // values_per_word
    groups_per_row = K // GROUP_SIZE
    words_per_group = GROUP_SIZE // values_per_word
    decode_dtype = "f16" if HALF_DECODE else "f32"
    projection_scratch = metile.shared(64 * outputs_per_threadgroup, dtype=decode_dtype)

    gate_accumulators = [metile.scalar(0.0) for _ in range(OUTPUTS_PER_SIMDGROUP)]
    for word_index in metile.tile_range(lane, words_per_row, 32):
        input_base = row * K + word_index * values_per_word
        input_values = [
            metile.cast(metile.load(X + input_base + element), decode_dtype)
            for element in range(values_per_word)
        ]
        for output_offset in range(OUTPUTS_PER_SIMDGROUP):
            column = column_base + output_offset
            packed = metile.load(GateW + column * words_per_row + word_index)
            group = column * groups_per_row + word_index // words_per_group
            scale = metile.cast(metile.load(GateScales + group), decode_dtype)
            bias = metile.cast(metile.load(GateBiases + group), decode_dtype)
            for element in range(values_per_word):
                quantized = metile.cast(
                    (packed >> (element * BITS)) & ((1 << BITS) - 1),
                    decode_dtype,
                )
                gate_accumulators[output_offset] = gate_accumulators[output_offset] + input_values[
                    element
                ] * (quantized * scale + bias)

    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        scratch_offset = (simdgroup * OUTPUTS_PER_SIMDGROUP + output_offset) * 32 + lane
        metile.store(
            projection_scratch + scratch_offset,
            metile.simd_sum(gate_accumulators[output_offset]),
        )

    up_accumulators = [metile.scalar(0.0) for _ in range(OUTPUTS_PER_SIMDGROUP)]
    for word_index in metile.tile_range(lane, words_per_row, 32):
        input_base = row * K + word_index * values_per_word
        input_values = [
            metile.cast(metile.load(X + input_base + element), decode_dtype)
            for element in range(values_per_word)
        ]
        for output_offset in range(OUTPUTS_PER_SIMDGROUP):
            column = column_base + output_offset
            packed = metile.load(UpW + column * words_per_row + word_index)
            group = column * groups_per_row + word_index // words_per_group
            scale = metile.cast(metile.load(UpScales + group), decode_dtype)
            bias = metile.cast(metile.load(UpBiases + group), decode_dtype)
            for element in range(values_per_word):
                quantized = metile.cast(
                    (packed >> (element * BITS)) & ((1 << BITS) - 1),
                    decode_dtype,
                )
                up_accumulators[output_offset] = up_accumulators[output_offset] + input_values[
                    element
                ] * (quantized * scale + bias)

    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        scratch_offset = (
            outputs_per_threadgroup + simdgroup * OUTPUTS_PER_SIMDGROUP + output_offset
        ) * 32 + lane
        metile.store(
            projection_scratch + scratch_offset,
            metile.simd_sum(up_accumulators[output_offset]),
        )

    metile.barrier()

    for output_offset in range(OUTPUTS_PER_SIMDGROUP):
        scratch_offset = (simdgroup * OUTPUTS_PER_SIMDGROUP + output_offset) * 32 + lane
        gate = metile.load(projection_scratch + scratch_offset)
        up = metile.load(projection_scratch + outputs_per_threadgroup * 32 + scratch_offset)
        result = gate / (1.0 + metile.fast_exp(0.0 - gate)) * up
        metile.store(
            Out + output_base + output_offset,
            result,
            mask=lane == 0,
        )


# ---- host code (this project's)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """`softmax(q . k * scale) @ v` per head: q `[heads, D]`, k and v `[heads, N, D]`."""
    s = np.einsum("hd,hnd->hn", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(1, keepdims=True))
    return np.einsum("hn,hnd->hd", p / p.sum(1, keepdims=True), v.astype(np.float64))


def pack_weights(q: np.ndarray, bits: int) -> np.ndarray:
    """Quantized weights `q` (`[N, K]`, values below `2**bits`) packed into uint32 words, `32 // bits` per word,
    the first in the lowest bits."""
    per_word = 32 // bits
    n, k = q.shape
    parts = q.reshape(n, k // per_word, per_word).astype(np.uint64) << (np.arange(per_word, dtype=np.uint64) * bits)
    return parts.sum(axis=2).astype(np.uint32)


def affine_weights(rng, n: int, k: int, bits: int, group: int):
    """Random quantized weights with their packed words, scales and biases, and the dense weights they stand for."""
    q = rng.integers(0, 1 << bits, (n, k))
    scales = rng.uniform(0.01, 0.1, (n, k // group)).astype(np.float32)
    biases = rng.uniform(-0.1, 0.1, (n, k // group)).astype(np.float32)
    dense = q * np.repeat(scales, group, axis=1) + np.repeat(biases, group, axis=1)
    return pack_weights(q, bits), scales, biases, dense
