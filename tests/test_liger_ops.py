"""Liger-Kernel's Triton ops (its code unchanged, imported from the installed package) run on the CPU device through
`metile.triton`: forward and backward of each op against a torch reference, in fp32 and bf16, at shapes taken from
Liger's own tests (test/transformers/, the smaller of their shapes, scaled down where theirs take minutes on the CPU
device) and with Liger's tolerances. An op that stops at a construct metile does not compile yet is a strict xfail
naming the construct and the kernel line, and it must stop with a `metile.MetileError` saying why (`raises=`)."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
if importlib.util.find_spec("liger_kernel") is None:
    pytest.skip("liger-kernel is not installed (pip install 'metile[dev]')", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import metile  # noqa: E402
import metile.triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("on_cpu", "liger")

FP32, BF16 = torch.float32, torch.bfloat16
DTYPES = [pytest.param(FP32, id="fp32"), pytest.param(BF16, id="bf16")]


@pytest.fixture(scope="module")
def liger():
    """`import triton` is metile's while this module runs; Liger's modules import it then (they keep it after)."""
    was = metile.triton.installed()
    metile.triton.install()
    yield
    if not was:
        metile.triton.uninstall()


def ops(name: str):
    """Liger's module `liger_kernel.ops.<name>`: its Triton implementation, as Liger's own tests import it."""
    return importlib.import_module(f"liger_kernel.ops.{name}")


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def pair(*shape, dtype=FP32, scale=1.0):
    """The same random tensor twice, as leaves: one for Liger, one for the reference."""
    t = torch.randn(*shape, dtype=dtype) * scale
    return leaf(t), leaf(t)


def close(got, want, atol, rtol):
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol, equal_nan=True)


def check_backward(y1, y2, leaves, atol, rtol, dy=None):
    """Liger's result `y1` against the reference's `y2` and, after both are given the incoming gradient `dy` (None:
    a scalar loss), the gradients of each pair of leaves in `leaves` (Liger's, the reference's), at one tolerance."""
    y1.backward(None if dy is None else dy.to(y1.dtype))
    y2.backward(None if dy is None else dy.to(y2.dtype))
    close(y1, y2, atol, rtol)
    for a, b in leaves:
        close(a.grad, b.grad, atol, rtol)


def not_yet(construct: str, where: str):
    """A strict xfail: the op stops at `construct` (at `where`, a line of Liger's kernel), with a MetileError."""
    return pytest.mark.xfail(strict=True, raises=metile.MetileError, reason=f"{construct} ({where}) is not compiled "
                             "by metile yet")


# ---------------------------------------------------------------------------------------------------------------
# Normalisations: rms_norm (each casting mode), fused_add_rms_norm, layer_norm, group_norm, poly_norm, dyt
# ---------------------------------------------------------------------------------------------------------------

def rms_reference(x, w, eps, offset, mode):
    """HuggingFace's RMS norms, as Liger's test writes them: Llama's (the inverse RMS in fp32, the weight applied in
    the input's type), Gemma's (everything in fp32) and a norm computed in the input's type ("none")."""
    if mode == "none":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + w)
    x32 = x.float()
    norm = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if mode == "llama":
        return (offset + w) * norm.to(x.dtype)
    return (norm * (offset + w.float())).to(x.dtype)


NORM_TOL = {FP32: (1e-4, 1e-6), BF16: (2e-1, 2e-2)}   # Liger's test_rms_norm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode, offset", [("llama", 0.0), ("gemma", 1.0), ("none", 0.0)])
@pytest.mark.parametrize("shape", [(2, 128, 512), (5, 123, 123)], ids=str)
def test_rms_norm(shape, mode, offset, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype)
    w1, w2 = pair(shape[-1], dtype=dtype)
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("rms_norm").LigerRMSNormFunction.apply(x1, w1, 1e-6, offset, mode, False)
    y2 = rms_reference(x2, w2, 1e-6, offset, mode)
    y1.backward(dy)
    y2.backward(dy)
    atol, rtol = NORM_TOL[dtype]
    close(y1, y2, atol, rtol)
    close(x1.grad, x2.grad, atol, rtol)
    close(w1.grad, w2.grad, atol * 10 if dtype is BF16 else atol, rtol)   # a sum over every row: bf16 rounds it


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode, offset", [("llama", 0.0), ("gemma", 1.0)])
@pytest.mark.parametrize("shape", [(2, 128, 512), (5, 123, 123)], ids=str)
def test_fused_add_rms_norm(shape, mode, offset, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype)
    r1, r2 = pair(*shape, dtype=dtype)
    w1, w2 = pair(shape[-1], dtype=dtype)
    dy, dr = torch.randn(*shape, dtype=dtype), torch.randn(*shape, dtype=dtype)
    y1, s1 = ops("fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply(x1, r1, w1, 1e-6, offset, mode, False)
    s2 = x2 + r2
    y2 = rms_reference(s2, w2, 1e-6, offset, mode)
    torch.autograd.backward((y1, s1), (dy, dr))
    torch.autograd.backward((y2, s2), (dy, dr))
    atol, rtol = NORM_TOL[dtype]
    close(s1, s2, atol, rtol)
    close(y1, y2, atol, rtol)
    close(x1.grad, x2.grad, atol, rtol)
    close(r1.grad, r2.grad, atol, rtol)
    close(w1.grad, w2.grad, atol * 10 if dtype is BF16 else atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 8, 64), (16, 128, 512), (3, 7, 123)], ids=str)
def test_layer_norm(shape, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype)
    w1, w2 = pair(shape[-1], dtype=dtype)
    b1, b2 = pair(shape[-1], dtype=dtype)
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("layer_norm").LigerLayerNormFunction.apply(x1, w1, b1, 1e-6)
    y2 = F.layer_norm(x2.float(), (shape[-1],), w2.float(), b2.float(), 1e-6).to(dtype)
    y1.backward(dy)
    y2.backward(dy)
    atol, rtol = (1e-5, 1e-5) if dtype is FP32 else (1e-1, 1e-1)   # Liger's test_layer_norm
    close(y1, y2, atol, rtol)
    close(x1.grad, x2.grad, atol * 10, rtol)
    close(w1.grad, w2.grad, atol * 100, rtol)
    close(b1.grad, b2.grad, atol * 100, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch, channels, groups, hidden", [(2, 8, 4, 64), (3, 9, 3, 123)], ids=str)
def test_group_norm(batch, channels, groups, hidden, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(batch, channels, hidden, dtype=dtype)
    w1, w2 = pair(channels, dtype=dtype)
    b1, b2 = pair(channels, dtype=dtype)
    dy = torch.randn(batch, channels, hidden, dtype=dtype)
    y1 = ops("group_norm").LigerGroupNormFunction.apply(x1, w1, b1, channels, groups, 1e-6)
    y2 = F.group_norm(x2.float(), groups, w2.float(), b2.float(), 1e-6).to(dtype)
    atol, rtol = (1e-4, 1e-4) if dtype is FP32 else (1e-1, 1e-1)
    close(y1, y2, atol, rtol)
    y1.backward(dy)
    y2.backward(dy)
    close(x1.grad, x2.grad, atol * 10, rtol)
    close(w1.grad, w2.grad, atol * 100, rtol)
    close(b1.grad, b2.grad, atol * 100, rtol)


def poly_reference(x, w, b, eps):
    """PolyNorm: w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b, norm(u) = u / sqrt(mean(u**2) + eps)."""
    def norm(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
    x32 = x.float()
    return (w[0] * norm(x32 ** 3) + w[1] * norm(x32 ** 2) + w[2] * norm(x32) + b).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 128, 512), (5, 123, 123)], ids=str)
def test_poly_norm(shape, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype)
    w1, w2 = leaf(torch.tensor([0.3, 0.4, 0.5])), leaf(torch.tensor([0.3, 0.4, 0.5]))
    b1, b2 = leaf(torch.tensor(0.1)), leaf(torch.tensor(0.1))
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("poly_norm").LigerPolyNormFunction.apply(x1, w1, b1, 1e-6, False)
    y2 = poly_reference(x2, w2, b2, 1e-6)
    y1.backward(dy)
    y2.backward(dy)
    atol, rtol = (1e-4, 1e-4) if dtype is FP32 else (2e-1, 2e-2)
    close(y1, y2, atol, rtol)
    close(x1.grad, x2.grad, atol * 10, rtol)
    close(w1.grad, w2.grad, atol * 1000, rtol * 10)   # sums over every element
    close(b1.grad, b2.grad, atol * 1000, rtol * 10)


@pytest.mark.slow   # Liger autotunes the forward kernel over its configurations
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 64, 128), (3, 7, 123)], ids=str)
def test_dyt_forward(shape, dtype):
    """DyT: gamma * tanh(alpha * x) + beta. (Its backward is Liger's host code: it counts the device's
    multiprocessors for CUDA, XPU and NPU only, so on a CPU tensor it stops before any kernel, test below.)"""
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype)
    alpha, gamma, beta = torch.tensor([0.5]), torch.randn(shape[-1], dtype=dtype), torch.randn(shape[-1], dtype=dtype)
    with torch.no_grad():
        y1 = ops("dyt").LigerDyTFunction.apply(x, alpha, gamma, beta)
    y2 = (gamma.float() * torch.tanh(alpha * x.float()) + beta.float()).to(dtype)
    atol, rtol = (1e-5, 1e-5) if dtype is FP32 else (1e-1, 1e-1)
    close(y1, y2, atol, rtol)


@pytest.mark.xfail(strict=True, raises=UnboundLocalError, reason="Liger's liger_dyt_bwd sets NUM_SMS only when "
                   "infer_device() is cuda, xpu or npu: on a CPU tensor its host code fails before any kernel runs")
def test_dyt_backward_stops_in_liger_host_code():
    x = leaf(torch.randn(2, 8, 64))
    y = ops("dyt").LigerDyTFunction.apply(x, leaf(torch.tensor([0.5])), leaf(torch.ones(64)), leaf(torch.zeros(64)))
    y.sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# Activations: swiglu, geglu, relu_squared, softmax, sparsemax
# ---------------------------------------------------------------------------------------------------------------

ACT_TOL = {FP32: (1e-5, 1e-5), BF16: (1e-2, 1e-2)}   # Liger's test_swiglu / test_geglu (bf16: 1e4 x coarser)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["swiglu", "geglu"])
@pytest.mark.parametrize("shape", [(2, 256, 512), (3, 7, 123)], ids=str)
def test_gated_activations(op, shape, dtype):
    torch.manual_seed(0)
    a1, a2 = pair(*shape, dtype=dtype)
    b1, b2 = pair(*shape, dtype=dtype)
    dy = torch.randn(*shape, dtype=dtype)
    if op == "swiglu":
        y1 = ops("swiglu").LigerSiLUMulFunction.apply(a1, b1)
        y2 = (F.silu(a2.float()) * b2.float()).to(dtype)
    else:
        y1 = ops("geglu").LigerGELUMulFunction.apply(a1, b1)
        y2 = (F.gelu(a2.float(), approximate="tanh") * b2.float()).to(dtype)
    atol, rtol = ACT_TOL[dtype] if dtype is FP32 else (1e-1, 5e-2)
    check_backward(y1, y2, [(a1, a2), (b1, b2)], atol, rtol, dy)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 256, 512), (3, 7, 123)], ids=str)
def test_relu_squared(shape, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype)
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("relu_squared").LigerReLUSquaredFunction.apply(x1)
    y2 = F.relu(x2).square()
    atol, rtol = ACT_TOL[dtype] if dtype is FP32 else (1e-1, 5e-2)
    check_backward(y1, y2, [(x1, x2)], atol, rtol, dy)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 8, 128), (17, 1000), (4, 3, 7, 9)], ids=str)
def test_softmax(shape, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype, scale=3.0)
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("softmax").LigerSoftmaxFunction.apply(x1)
    y2 = torch.softmax(x2.float(), -1).to(dtype)
    atol, rtol = (1e-5, 1e-5) if dtype is FP32 else (1e-2, 5e-2)   # Liger's test_softmax
    check_backward(y1, y2, [(x1, x2)], atol, rtol, dy)


def sparsemax_reference(x, dim=-1):
    """Sparsemax (Martins & Astudillo 2016): the Euclidean projection onto the simplex, by sorting."""
    x = x.transpose(dim, -1)
    z, _ = torch.sort(x, dim=-1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    cum = z.cumsum(-1)
    support = (1 + k * z) > cum
    k_max = support.sum(-1, keepdim=True)
    tau = (cum.gather(-1, k_max - 1) - 1) / k_max.to(x.dtype)
    return torch.clamp(x - tau, min=0).transpose(dim, -1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, dim", [((2, 8, 128), -1), ((17, 37), -1), ((4, 16, 5), 1)], ids=str)
def test_sparsemax(shape, dim, dtype):
    torch.manual_seed(0)
    x1, x2 = pair(*shape, dtype=dtype, scale=2.0)
    dy = torch.randn(*shape, dtype=dtype)
    y1 = ops("sparsemax").LigerSparsemaxFunction.apply(x1, dim)
    y2 = sparsemax_reference(x2.float(), dim).to(dtype)
    atol, rtol = (1e-5, 1e-5) if dtype is FP32 else (5e-2, 5e-2)   # Liger's test_sparsemax
    check_backward(y1, y2, [(x1, x2)], atol, rtol, dy)


# ---------------------------------------------------------------------------------------------------------------
# Rotary embeddings: rope, llama4_rope, qwen2vl_mrope
# ---------------------------------------------------------------------------------------------------------------

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


ROPE_TOL = {FP32: (1e-5, 1e-5), BF16: (1e-1, 1e-5)}   # Liger's test_rope


def check_rotations(inputs, liger, ref_inputs, reference, dtype):
    """Liger's rotated `(q, k)` against the reference's, and the gradients of both for the same random incoming
    gradients (Liger's backward rotates them in place, so it is handed a copy)."""
    grads = [torch.randn_like(x) for x in inputs]
    torch.autograd.backward(liger, [g.clone() for g in grads])
    torch.autograd.backward(reference, grads)
    atol, rtol = ROPE_TOL[dtype]
    for got, want in (*zip(liger, reference), *((a.grad, b.grad) for a, b in zip(inputs, ref_inputs))):
        close(got, want, atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bsz, seq_len, n_q_head, n_kv_head, head_dim", [(2, 128, 8, 4, 64), (3, 37, 5, 3, 38),
                                                                     (2, 16, 4, 1, 64)], ids=str)
def test_rope(bsz, seq_len, n_q_head, n_kv_head, head_dim, dtype):
    torch.manual_seed(0)
    q1, q2 = pair(bsz, n_q_head, seq_len, head_dim, dtype=dtype)
    k1, k2 = pair(bsz, n_kv_head, seq_len, head_dim, dtype=dtype)
    angle = torch.arange(seq_len)[:, None] * torch.rand(head_dim // 2)[None, :]
    angle = torch.cat((angle, angle), -1)[None]
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    qo1, ko1 = ops("rope").LigerRopeFunction.apply(q1, k1, cos, sin)
    qo2 = q2 * cos[:, None] + rotate_half(q2) * sin[:, None]
    ko2 = k2 * cos[:, None] + rotate_half(k2) * sin[:, None]
    check_rotations((q1, k1), (qo1, ko1), (q2, k2), (qo2, ko2), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bsz, seq_len, n_q_head, n_kv_head, head_dim", [(2, 128, 8, 4, 64), (3, 37, 5, 3, 38)],
                         ids=str)
def test_qwen2vl_mrope(bsz, seq_len, n_q_head, n_kv_head, head_dim, dtype):
    torch.manual_seed(0)
    half = head_dim // 2
    section = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    q1, q2 = pair(bsz, n_q_head, seq_len, head_dim, dtype=dtype)
    k1, k2 = pair(bsz, n_kv_head, seq_len, head_dim, dtype=dtype)
    pos = torch.randint(0, 4 * seq_len, (3, bsz, seq_len, 1)).float()
    angle = pos * torch.rand(half)
    angle = torch.cat((angle, angle), -1)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    # Qwen2-VL's multimodal rotation: the head dimension's sections take the temporal, height and width angles
    parts = section * 2
    cos2 = torch.cat([c[i % 3] for i, c in enumerate(cos.split(parts, dim=-1))], dim=-1)[:, None]
    sin2 = torch.cat([s[i % 3] for i, s in enumerate(sin.split(parts, dim=-1))], dim=-1)[:, None]
    qo1, ko1 = ops("qwen2vl_mrope").LigerQwen2VLMRopeFunction.apply(q1, k1, cos, sin, section)
    qo2 = q2 * cos2 + rotate_half(q2) * sin2
    ko2 = k2 * cos2 + rotate_half(k2) * sin2
    check_rotations((q1, k1), (qo1, ko1), (q2, k2), (qo2, ko2), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_llama4_rope(dtype):
    torch.manual_seed(0)
    bsz, seq_len, heads, head_dim = 2, 64, 4, 64
    q1, q2 = pair(bsz, seq_len, heads, head_dim, dtype=dtype)
    k1, k2 = pair(bsz, seq_len, heads, head_dim, dtype=dtype)
    freqs = torch.polar(torch.ones(seq_len, head_dim // 2), torch.rand(seq_len, head_dim // 2) * 6.28)
    qo1, ko1 = ops("llama4_rope").LigerLlama4RopeFunction.apply(q1, k1, freqs)

    def rotate(x):   # Llama 4's rotation: pairs of the head dimension as complex numbers, times freqs_cis
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(-2).to(x.dtype)
    qo2, ko2 = rotate(q2), rotate(k2)
    check_rotations((q1, k1), (qo1, ko1), (q2, k2), (qo2, ko2), dtype)


# ---------------------------------------------------------------------------------------------------------------
# Losses: cross_entropy, fused_linear_cross_entropy, kl_div, jsd, fused_linear_jsd, tvd
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [{}, {"ignore_index": 2}, {"label_smoothing": 0.1}, {"softcap": 30.0},
                                     {"lse_square_scale": 1e-4}], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(options, reduction, dtype):
    torch.manual_seed(0)
    n, vocab = 3 * 17, 1000
    x1, x2 = pair(n, vocab, dtype=dtype)
    target = torch.randint(0, vocab, (n,))
    target[::5] = options.get("ignore_index", -100)
    ignore, smoothing = options.get("ignore_index", -100), options.get("label_smoothing", 0.0)
    softcap, z = options.get("softcap"), options.get("lse_square_scale", 0.0)
    y1 = ops("cross_entropy").LigerCrossEntropyFunction.apply(x1, target, None, ignore, z, smoothing, reduction,
                                                              softcap)[0]
    logits = x2.float() if softcap is None else softcap * torch.tanh(x2.float() / softcap)
    y2 = F.cross_entropy(logits, target, ignore_index=ignore, label_smoothing=smoothing, reduction=reduction)
    kept = target != ignore
    zl = torch.where(kept, z * torch.logsumexp(logits, -1) ** 2, 0.0)
    y2 = y2 + (zl.sum() / kept.sum() if reduction == "mean" else zl.sum() if reduction == "sum" else zl)
    dy = torch.randn_like(y1)
    atol, rtol = (1e-6, 1e-5) if dtype is FP32 else (1e-2, 5e-2)
    check_backward(y1, y2, [(x1, x2)], atol, rtol, dy)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_linear_cross_entropy(dtype):
    torch.manual_seed(0)
    n, hidden, vocab = 2 * 16, 64, 512
    x1, x2 = pair(n, hidden, dtype=dtype)
    w1, w2 = pair(vocab, hidden, dtype=dtype, scale=0.1)
    target = torch.randint(0, vocab, (n,))
    target[::7] = -100
    y1 = ops("fused_linear_cross_entropy").LigerFusedLinearCrossEntropyFunction.apply(x1, w1, target)[0]
    y2 = F.cross_entropy((x2 @ w2.T).float(), target)
    atol, rtol = (1e-5, 5e-4) if dtype is FP32 else (5e-2, 5e-1)   # Liger's test_fused_linear_cross_entropy
    check_backward(y1, y2, [(x1, x2), (w1, w2)], atol, rtol)


LOSS_TOL = {FP32: (1e-6, 1e-5), BF16: (1e-2, 5e-2)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("rows, vocab", [(32, 1000), (3 * 7, 123)], ids=str)
def test_kl_div(rows, vocab, log_target, reduction, dtype):
    torch.manual_seed(0)
    x = torch.randn(rows, vocab).log_softmax(-1).to(dtype)
    x1, x2 = leaf(x), leaf(x)
    t = torch.randn(rows, vocab).log_softmax(-1)
    t = (t if log_target else t.exp()).to(dtype)
    y1 = ops("kl_div").LigerKLDivLossFunction.apply(x1, t, reduction, log_target, 1e-10)
    y2 = F.kl_div(x2.float(), t.float(), reduction=reduction, log_target=log_target)
    dy = torch.randn_like(y2)
    check_backward(y1, y2, [(x1, x2)], *LOSS_TOL[dtype], dy)


def jsd_reference(log_q, log_p, beta):
    """Liger's generalised JSD of student log-probabilities `log_q` and teacher `log_p`, averaged over rows:
    beta * KL(P || M) + (1 - beta) * KL(Q || M), M = beta * P + (1 - beta) * Q (beta 0 and 1: the KL divergences)."""
    log_q, log_p = log_q.float(), log_p.float()
    p, q = log_p.exp(), log_q.exp()
    if beta == 0.0:
        rows = (p * (log_p - log_q)).sum(-1)
    elif beta == 1.0:
        rows = (q * (log_q - log_p)).sum(-1)
    else:
        log_m = torch.log(beta * p + (1 - beta) * q)
        rows = beta * (p * (log_p - log_m)).sum(-1) + (1 - beta) * (q * (log_q - log_m)).sum(-1)
    return rows


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("rows, vocab", [(32, 1000), (3 * 7, 123)], ids=str)
def test_jsd(rows, vocab, beta, dtype):
    torch.manual_seed(0)
    x = torch.randn(rows, vocab).log_softmax(-1).to(dtype)
    x1, x2 = leaf(x), leaf(x)
    t = torch.randn(rows, vocab).log_softmax(-1).to(dtype)
    y1 = ops("jsd").LigerJSDFunction.apply(x1, t, None, beta, -100, None, None)
    y2 = jsd_reference(x2, t, beta).mean()
    check_backward(y1, y2, [(x1, x2)], *LOSS_TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_jsd_with_ignored_labels(dtype):
    torch.manual_seed(0)
    rows, vocab = 32, 1000
    x = torch.randn(rows, vocab).log_softmax(-1).to(dtype)
    x1, x2 = leaf(x), leaf(x)
    t = torch.randn(rows, vocab).log_softmax(-1).to(dtype)
    labels = torch.randint(0, vocab, (rows,))
    labels[::3] = -100
    y1 = ops("jsd").LigerJSDFunction.apply(x1, t, labels, 0.5, -100, None, None)
    kept = labels != -100
    y2 = jsd_reference(x2, t, 0.5)[kept].sum() / kept.sum()
    check_backward(y1, y2, [(x1, x2)], *LOSS_TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta, temperature", [(0.5, 1.0), (0.1, 2.0)], ids=str)
def test_fused_linear_jsd(beta, temperature, dtype):
    torch.manual_seed(0)
    n, hidden, vocab = 2 * 16, 64, 512
    x1, x2 = pair(n, hidden, dtype=dtype)
    w1, w2 = pair(vocab, hidden, dtype=dtype, scale=0.1)
    tx, tw = torch.randn(n, hidden, dtype=dtype), torch.randn(vocab, hidden, dtype=dtype) * 0.1
    y1 = ops("fused_linear_jsd").LigerFusedLinearJSDFunction.apply(x1, w1, tx, tw, None, beta, -100, temperature,
                                                                    None, None, None)
    log_q = ((x2 @ w2.T).float() / temperature).log_softmax(-1)
    log_p = ((tx @ tw.T).float() / temperature).log_softmax(-1)
    y2 = jsd_reference(log_q, log_p, beta).mean()
    atol, rtol = (1e-5, 5e-4) if dtype is FP32 else (5e-2, 5e-1)   # Liger's test_fused_linear_jsd
    check_backward(y1, y2, [(x1, x2), (w1, w2)], atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
@pytest.mark.parametrize("rows, vocab", [(32, 1000), (3 * 7, 123)], ids=str)
def test_tvd(rows, vocab, reduction, dtype):
    torch.manual_seed(0)
    p = torch.randn(rows, vocab).softmax(-1).to(dtype)
    p1, p2 = leaf(p), leaf(p)
    q = torch.randn(rows, vocab).softmax(-1).to(dtype)
    y1 = ops("tvd").LigerTVDLossFunction.apply(p1, q, None, reduction)
    d = 0.5 * (p2.float() - q.float()).abs()
    y2 = {"batchmean": d.sum() / rows, "sum": d.sum(), "mean": d.sum() / d.numel(), "none": d}[reduction]
    dy = torch.randn_like(y2)
    check_backward(y1, y2, [(p1, p2)], *LOSS_TOL[dtype], dy)


def test_tvd_with_ignored_labels():
    torch.manual_seed(0)
    rows, vocab = 32, 1000
    p1 = leaf(torch.randn(rows, vocab).softmax(-1))
    labels = torch.randint(0, vocab, (rows,))
    labels[::3] = -100
    y1 = ops("tvd").LigerTVDLossFunction.apply(p1, torch.randn(rows, vocab).softmax(-1), labels, "batchmean")
    y1.backward()


# ---------------------------------------------------------------------------------------------------------------
# Embedding, multi-token attention, neighborhood attention
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab, dim, shape", [(100, 64, (2, 8)), (1000, 128, (4, 37)), (31, 7, (3, 5))], ids=str)
def test_embedding(vocab, dim, shape, dtype):
    torch.manual_seed(0)
    e1, e2 = pair(vocab, dim, dtype=dtype)
    idx = torch.randint(0, vocab, shape)
    dy = torch.randn(*shape, dim, dtype=dtype)
    from liger_kernel.ops.experimental.embedding import LigerEmbeddingFunction

    y1 = LigerEmbeddingFunction.apply(e1, idx)
    y2 = F.embedding(idx, e2)
    atol, rtol = (1e-6, 1e-6) if dtype is FP32 else (1e-2, 1e-2)
    close(y1, y2, atol, rtol)
    y1.backward(dy)
    y2.backward(dy)
    close(e1.grad, e2.grad, atol, rtol)


def mta_reference(scores, weight, bias, padding, groups):
    """Multi-token attention: scores masked causally (-inf above the diagonal), a softmax over each row, a 2-D
    convolution over the (query, key) grid, and the causal positions of its result set to zero."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    probs = torch.softmax(scores.float().masked_fill(future, float("-inf")), -1)
    out = F.conv2d(probs, weight.float(), None if bias is None else bias.float(), padding=padding, groups=groups)
    return out.masked_fill(future, 0.0).to(scores.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch, channels, length, kernel, groups",   # Liger's shapes (C_in = C_out)
                         [(2, 4, 8, 3, 1), (3, 6, 6, 3, 1), (1, 4, 33, 5, 4), (1, 8, 128, 5, 2)], ids=str)
def test_multi_token_attention(batch, channels, length, kernel, groups, dtype):
    torch.manual_seed(0)
    s1, s2 = pair(batch, channels, length, length, dtype=dtype)
    w1, w2 = pair(channels, channels // groups, kernel, kernel, dtype=dtype, scale=0.3)
    b1, b2 = pair(channels, dtype=dtype)
    y1 = ops("multi_token_attention").LigerMultiTokenAttentionFunction.apply(s1, w1, b1, 1, kernel // 2, 1, groups)
    y2 = mta_reference(s2, w2, b2, kernel // 2, groups)
    dy = torch.randn_like(y2)
    y1.backward(dy)
    y2.backward(dy)
    atol, rtol = (1e-4, 1e-4) if dtype is FP32 else (2e-2, 2e-2)   # Liger's test_multi_token_attention
    close(y1, y2, atol, rtol)
    for got, want in ((s1.grad, s2.grad), (w1.grad, w2.grad), (b1.grad, b2.grad)):
        close(got, want, atol * 10, rtol * 10)


def neighborhood_reference(q, k, v, kernel_size, dilation, scale):
    """1-D neighborhood attention: a query attends to the keys within kernel_size // 2 * dilation positions of
    its own, those at a multiple of `dilation` from it."""
    n = q.shape[-2]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    near = ((j - i).abs() <= kernel_size // 2 * dilation) & ((j - i) % dilation == 0)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    return (torch.softmax(s.masked_fill(~near, float("-inf")), -1) @ v.float()).to(q.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch, heads, length, head_dim, kernel_size, dilation",   # Liger's shapes, and dilated
                         [(2, 4, 32, 32, 7, 1), (1, 8, 32, 16, 5, 1), (2, 3, 24, 32, 9, 1), (2, 1, 48, 16, 5, 2),
                          (1, 4, 128, 64, 7, 1)], ids=str)
def test_fused_neighborhood_attention(batch, heads, length, head_dim, kernel_size, dilation, dtype):
    torch.manual_seed(0)
    q1, q2 = pair(batch, heads, length, head_dim, dtype=dtype)
    k1, k2 = pair(batch, heads, length, head_dim, dtype=dtype)
    v1, v2 = pair(batch, heads, length, head_dim, dtype=dtype)
    scale = head_dim ** -0.5
    y1 = ops("fused_neighborhood_attention").LigerFusedNeighborhoodAttentionFunction.apply(
        q1, k1, v1, kernel_size, dilation, scale)
    y2 = neighborhood_reference(q2, k2, v2, kernel_size, dilation, scale)
    dy = torch.randn_like(y2)
    y1.backward(dy)
    y2.backward(dy)
    atol, rtol = (1e-4, 1e-4) if dtype is FP32 else (5e-2, 5e-2)
    close(y1, y2, atol, rtol)
    for got, want in ((q1.grad, q2.grad), (k1.grad, k2.grad), (v1.grad, v2.grad)):
        close(got, want, atol * 10, rtol * 10)
