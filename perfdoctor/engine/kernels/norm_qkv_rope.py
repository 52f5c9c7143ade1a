"""RMSNorm -> QKV projection -> RoPE -> K/V cache append, in one kernel.

Fuses: (in layer 0) the embedding gather of the step's token, the attention RMSNorm, the
concatenated [Wq; Wk; Wv] matrix-vector product, rotary embedding of q and k at the current
position, and the write of k and v into the cache at that position. The position and the
token are read from device memory, so one CUDA graph serves every position.

Work split: a block owns `PAIRS` rotation pairs of one head, i.e. 2 * PAIRS rows of the
weight matrix (row j and its RoPE partner j + head_dim/2: the "rotate half" layout of
Hugging Face Llama weights), so RoPE needs no data from another block. Llama-3.2-1B with
PAIRS = 4 gives 48 heads * 32/4 = 384 blocks for 132 SMs; measured on an H200: 6.1 us,
43 % of peak DRAM bandwidth (a 12.6 MB matrix is too small to hide ramp-up and tail).

Per call (hidden K, heads H = q_heads + 2 kv_heads, head_dim D, 2-byte weights):
bytes read = 2 * H * D * K (12.6 MB for Llama-3.2-1B) + 4 K (x, gain); written 2 H D;
FLOPs = 2 * H * D * K (12.6 MFLOP). With int8 weights (`fused-int8`): H D K + 4 H D (the
row scales) instead of 2 H D K. H200, 2026-12-02, position 144: 5.13 us (1228 GB/s) against
bf16 6.11.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from perfdoctor.engine.kernels._common import (
    check_scale,
    load_rows,
    rms_inv_std,
    rms_normed,
    rope_pair,
    row_sums,
    weights_f32,
)


@triton.jit
def _norm_qkv_rope_kernel(
    x_ptr, token_ptr, embed_ptr,
    norm_ptr, w_ptr, scale_ptr, cos_ptr, sin_ptr, pos_ptr,
    q_out_ptr, k_cache_ptr, v_cache_ptr, stride_cache_head, stride_cache_pos,
    eps,
    K: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
    PAIRS: tl.constexpr, BLOCK_K: tl.constexpr,
    FROM_EMBED: tl.constexpr, ROUND_TWICE: tl.constexpr, STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    HALF: tl.constexpr = D // 2
    BLOCKS_PER_HEAD: tl.constexpr = HALF // PAIRS
    EVEN: tl.constexpr = K % BLOCK_K == 0
    head = pid // BLOCKS_PER_HEAD
    j = (pid % BLOCKS_PER_HEAD) * PAIRS + tl.arange(0, PAIRS)  # pair index in [0, HALF)
    rows_lo = head * D + j
    rows_hi = rows_lo + HALF
    all_rows = j < HALF  # always true; a mask of the right shape for the odd-K path

    src_ptr = x_ptr
    if FROM_EMBED:
        # Layer 0: the input is the embedding row of this step's token.
        src_ptr = embed_ptr + tl.load(token_ptr).to(tl.int64) * K
    inv_std = rms_inv_std(src_ptr, eps, K, BLOCK_K)

    # STAGES - 1 weight tiles stay in flight (cp.async into shared memory) while one is used.
    acc_lo = tl.zeros([PAIRS, BLOCK_K], dtype=tl.float32)
    acc_hi = tl.zeros([PAIRS, BLOCK_K], dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < K
        xn = rms_normed(src_ptr, norm_ptr, cols, cmask, inv_std, EVEN, ROUND_TWICE)
        w_lo = load_rows(w_ptr, rows_lo, all_rows, cols, cmask, K, EVEN)
        w_hi = load_rows(w_ptr, rows_hi, all_rows, cols, cmask, K, EVEN)
        acc_lo += weights_f32(w_lo) * xn[None, :]
        acc_hi += weights_f32(w_hi) * xn[None, :]

    if FROM_EMBED:  # noqa: SIM102 (compile-time branch around a run-time one)
        # The residual stream starts as the embedding row; block 0 copies it into x.
        if pid == 0:
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                row = tl.load(src_ptr + cols, mask=cols < K)
                tl.store(x_ptr + cols, row.to(x_ptr.dtype.element_ty), mask=cols < K)

    act = q_out_ptr.dtype.element_ty
    # Round where the eager model does: the projection output, each RoPE product, the sum.
    a = row_sums(acc_lo, scale_ptr, rows_lo, all_rows).to(act).to(tl.float32)
    b = row_sums(acc_hi, scale_ptr, rows_hi, all_rows).to(act).to(tl.float32)
    pos = tl.load(pos_ptr)
    if head < NQ + NKV:  # q and k heads rotate; v heads do not
        c = tl.load(cos_ptr + pos * HALF + j).to(tl.float32)
        s = tl.load(sin_ptr + pos * HALF + j).to(tl.float32)
        a, b = rope_pair(a, b, c, s, act)
    if head < NQ:
        tl.store(q_out_ptr + head * D + j, a.to(act))
        tl.store(q_out_ptr + head * D + j + HALF, b.to(act))
    else:
        if head < NQ + NKV:
            base = k_cache_ptr + (head - NQ) * stride_cache_head
        else:
            base = v_cache_ptr + (head - NQ - NKV) * stride_cache_head
        base += pos * stride_cache_pos
        tl.store(base + j, a.to(k_cache_ptr.dtype.element_ty))
        tl.store(base + j + HALF, b.to(k_cache_ptr.dtype.element_ty))


def norm_qkv_rope(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    w_qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pos: torch.Tensor,
    q_out: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    q_heads: int,
    kv_heads: int,
    eps: float,
    scale: torch.Tensor | None = None,
    token: torch.Tensor | None = None,
    embed: torch.Tensor | None = None,
    round_twice: bool = False,
    pairs: int = 8,
    block_k: int = 256,
    num_stages: int = 3,
    num_warps: int = 4,
) -> None:
    """q_out <- RoPE(Wq n); k_cache[:, pos] <- RoPE(Wk n); v_cache[:, pos] <- Wv n,
    with n = RMSNorm(x) * norm_weight.

    x: [K] activations. int8 `w_qkv` takes its row scales [(q_heads + 2 kv_heads) D] fp32
    (`quant.Int8Rows`). With `token` and `embed` given, the input is embed[token] instead
    and x receives a copy of that row (it becomes the residual stream). w_qkv:
    [(q_heads + 2 kv_heads) * D, K]. cos, sin: [max_seq, D/2] (one copy of each frequency).
    pos: 1-element int tensor on the device. k_cache, v_cache: [kv_heads, max_seq, D], last
    dim contiguous. round_twice: see `_common.rms_normed`.
    """
    K = norm_weight.numel()
    head_dim = k_cache.shape[-1]
    half = head_dim // 2
    assert head_dim % 2 == 0 and cos.shape[-1] == half and cos.is_contiguous() and sin.is_contiguous()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    assert w_qkv.shape == ((q_heads + 2 * kv_heads) * head_dim, K) and w_qkv.is_contiguous()
    check_scale(w_qkv, scale)
    pairs = min(pairs, half)
    assert half % pairs == 0 and pairs & (pairs - 1) == 0, "pairs: a power of two dividing D/2"
    from_embed = token is not None
    assert from_embed == (embed is not None), "token and embed go together"
    grid = ((q_heads + 2 * kv_heads) * (half // pairs),)
    _norm_qkv_rope_kernel[grid](
        x, token if from_embed else pos, embed if from_embed else x,
        norm_weight, w_qkv, scale, cos, sin, pos,
        q_out, k_cache, v_cache, k_cache.stride(0), k_cache.stride(1),
        eps,
        K=K, NQ=q_heads, NKV=kv_heads, D=head_dim, PAIRS=pairs,
        BLOCK_K=min(block_k, triton.next_power_of_2(K)),
        FROM_EMBED=from_embed, ROUND_TWICE=round_twice,
        STAGES=num_stages, num_warps=num_warps,
    )
