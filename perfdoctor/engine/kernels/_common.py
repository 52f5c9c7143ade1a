"""Small `@triton.jit` helpers shared by the fused kernels (inlined into each caller), and
the launchers' check of int8 weights' scales."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def check_scale(w: torch.Tensor, scale: torch.Tensor | None) -> None:
    """int8 weights come with one fp32 scale per row (`perfdoctor.engine.quant`), others
    with none."""
    assert (scale is not None) == (w.dtype == torch.int8), "int8 weights need their row scales, and only they"
    assert scale is None or (scale.shape == w.shape[:1] and scale.dtype == torch.float32 and scale.is_contiguous())


@triton.jit
def load_1d(ptr, offs, mask, EVEN: tl.constexpr, CACHE: tl.constexpr = tl.constexpr("")):
    """Load a vector, skipping the bounds mask when the caller knows the tile is in range.

    An unmasked load lets the compiler emit one 16-byte load per 8 bf16 values. CACHE is
    tl.load's cache_modifier (".cg": from L2, for data other blocks wrote in this launch).
    """
    if EVEN:
        return tl.load(ptr + offs, cache_modifier=CACHE)
    else:
        return tl.load(ptr + offs, mask=mask, other=0.0, cache_modifier=CACHE)


@triton.jit
def load_rows(w_ptr, rows, row_mask, cols, col_mask, K, EVEN: tl.constexpr):
    """Load the weight tile W[rows, cols] of a row-major [N, K] matrix (zeros out of range)."""
    ptrs = w_ptr + rows[:, None] * K + cols[None, :]
    if EVEN:
        return tl.load(ptrs)
    else:
        return tl.load(ptrs, mask=row_mask[:, None] & col_mask[None, :], other=0.0)


@triton.jit
def weights_f32(w):
    """A loaded weight tile in fp32: a cast, or for int8 the exponent trick below. The
    kernels convert where they multiply, after all of an iteration's loads."""
    if w.dtype == tl.int8:
        # int8 -> fp32 exactly without a conversion instruction: the bits 0x4B000080 + q
        # are the float 2^23 + 128 + q (q + 128 fills the mantissa's low byte), so
        # subtracting 2^23 + 128 leaves q. An integer and a float add per value instead of
        # an I2F (`cvt.rn.f32.s16`, a quarter of the integer pipe's rate on sm_90), which at
        # int8's values per byte would take about as long as the bytes take to arrive.
        return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
    return w.to(tl.float32)


@triton.jit
def row_sums(acc, scale_ptr, rows, row_mask):
    """The rows' dot products from a [rows, BLOCK_K] fp32 accumulator. With int8 weights
    (a scale pointer, not None) each sum is multiplied by its row's scale: the integers
    were accumulated as they are, so dequantisation costs one multiply per row, not per
    weight. With scale_ptr None (bf16 weights) the branch is not compiled at all."""
    y = tl.sum(acc, axis=1)
    if scale_ptr is not None:
        y = y * tl.load(scale_ptr + rows, mask=row_mask, other=0.0)
    return y


@triton.jit
def rms_inv_std(x_ptr, eps, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of a length-K vector, in fp32.

    Every block of a fused norm+GEMV recomputes this from the whole vector: the vector is
    K * 2 bytes (4 KB for Llama-3.2-1B) and sits in L2, which is far cheaper than a separate
    norm kernel and a round trip through DRAM.
    """
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs, mask=offs < K, other=0.0).to(tl.float32)
        acc += x * x
    return tl.math.rsqrt(tl.sum(acc, axis=0) / K + eps)


@triton.jit
def rms_normed(x_ptr, g_ptr, offs, mask, inv_std, EVEN: tl.constexpr, ROUND_TWICE: tl.constexpr):
    """A chunk of RMSNorm(x) * g in fp32, rounded to the activation dtype like the eager
    model. PyTorch's fused `F.rms_norm` rounds once, after the gain; the composite
    formulation (and Hugging Face's LlamaRMSNorm) rounds the normalised x first, then the
    product. `ROUND_TWICE` picks the latter."""
    x = load_1d(x_ptr, offs, mask, EVEN).to(tl.float32)
    g = load_1d(g_ptr, offs, mask, EVEN).to(tl.float32)
    return normed_values(x, g, inv_std, x_ptr.dtype.element_ty, ROUND_TWICE)


@triton.jit
def normed_values(x, g, inv_std, act: tl.constexpr, ROUND_TWICE: tl.constexpr):
    """`rms_normed` on values already loaded (fp32 x and gain): x * inv_std * g with the
    eager model's rounding to `act`. For callers that must choose how x is loaded (the
    megakernel reads activations that other blocks wrote in the same launch)."""
    n = x * inv_std
    if ROUND_TWICE:
        n = n.to(act).to(tl.float32)
    return (n * g).to(act).to(tl.float32)


@triton.jit
def rope_pair(a, b, c, s, act: tl.constexpr):
    """Rotate the pair (a, b) = (x[j], x[j + D/2]) by the angle with cosine c and sine s, all
    fp32, rounding each product and the sums to `act` as the eager model's
    x * cos + rotate_half(x) * sin does in its dtype."""
    ac = (a * c).to(act).to(tl.float32)
    bs = (b * s).to(act).to(tl.float32)
    bc = (b * c).to(act).to(tl.float32)
    as_ = (a * s).to(act).to(tl.float32)
    return ac - bs, bc + as_


@triton.jit
def argmax_of_partials(part_val_ptr, part_idx_ptr, N: tl.constexpr, REDUCE: tl.constexpr):
    """The index of the largest of N per-block partial maxima (the lowest index on ties, as
    torch.argmax), read REDUCE at a time from L2 (`.cg`: other blocks wrote them in this
    launch). part_idx holds each block's own first argmax."""
    BIG: tl.constexpr = 2147483647
    run_val = tl.max(tl.full([REDUCE], float("-inf"), tl.float32), axis=0)
    run_idx = tl.min(tl.full([REDUCE], BIG, tl.int32), axis=0)
    for c0 in range(0, N, REDUCE):
        i = c0 + tl.arange(0, REDUCE)
        imask = i < N
        v = tl.load(part_val_ptr + i, mask=imask, other=float("-inf"), cache_modifier=".cg")
        ix = tl.load(part_idx_ptr + i, mask=imask, other=BIG, cache_modifier=".cg")
        cv = tl.max(v, axis=0)
        ci = tl.min(tl.where(v == cv, ix, BIG), axis=0)
        take = cv > run_val  # strict: an earlier chunk (lower indices) wins ties
        run_idx = tl.where(take, ci, run_idx)
        run_val = tl.where(take, cv, run_val)
    return run_idx
