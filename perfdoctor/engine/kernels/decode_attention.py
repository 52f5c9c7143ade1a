"""Decode attention (one query token) over a static KV cache: split-KV with GQA.

Fuses: scores q.K^T, the causal mask at the current length, softmax, the product with V,
and the flash-decoding combine of the per-split partial results. The length (position + 1)
is read from device memory, so the launch grid is fixed at the cache size and one CUDA
graph serves every position: programs for splits past the current length exit at once.

Work split: program (kv_head, split) reads BLOCK_S cached positions of one KV head and
scores them against all `q_heads / kv_heads` query heads that share it (GQA: each K/V byte
is read once, not once per query head), with the group's heads as the rows of two small
tensor-core matmuls (q K^T, then P V). It writes an unnormalised partial (max, sum,
weighted V) to a workspace and bumps a per-head counter; the program that arrives last
for a head merges that head's partials and writes the output, then resets the counter for
the next call. That saves a second kernel launch.

Measured on an H200 (Llama-3.2-1B, 64 positions per split): 6.5 us at length 145, 9.2 us
at 2048, a latency chain (K/V load, two matmuls, partial store, atomic, combine) rather than
bandwidth.

Per call at length L (kv_heads H, head_dim D, 2-byte cache): bytes read = 2 * H * L * D * 2
(4.2 MB per layer for Llama-3.2-1B at L = 2048); FLOPs = 4 * q_heads * L * D.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, out_ptr,
    part_acc_ptr, part_m_ptr, part_l_ptr, counter_ptr,
    stride_cache_head, stride_cache_pos, scale,
    GROUP: tl.constexpr, GROUP_P2: tl.constexpr, DOT_M: tl.constexpr, D: tl.constexpr,
    BLOCK_S: tl.constexpr, NSPLIT: tl.constexpr, COMBINE: tl.constexpr, UPCAST: tl.constexpr,
):
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.load(pos_ptr).to(tl.int32) + 1
    n_active = tl.cdiv(length, BLOCK_S)
    # The grid covers the whole cache; splits past the current length exit at once, so a
    # short context costs only the splits it uses.
    if split < n_active:
        act = q_ptr.dtype.element_ty
        # The group's query heads are the rows of a tensor-core matmul; rows >= GROUP are
        # padding (tl.dot needs at least 16) and are never stored.
        g = tl.arange(0, DOT_M)
        d = tl.arange(0, D)
        q_rows = kv_head * GROUP + g
        q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=(g < GROUP)[:, None], other=0.0)
        # The eager model scales q in its dtype and gets the scores rounded from its matmul.
        q = (q.to(tl.float32) * scale).to(act)

        s_idx = split * BLOCK_S + tl.arange(0, BLOCK_S)
        smask = s_idx < length
        kv_off = kv_head * stride_cache_head + s_idx[:, None] * stride_cache_pos + d[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=smask[:, None], other=0.0)  # [S, D]
        v = tl.load(v_cache_ptr + kv_off, mask=smask[:, None], other=0.0)

        if UPCAST:
            # Triton 3.6's CPU interpreter multiplies bf16 tiles wrongly in tl.dot; fp32
            # operands give the same numbers (bf16 products are exact in fp32).
            q, k, v = q.to(tl.float32), k.to(tl.float32), v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee").to(act).to(tl.float32)  # [M, S]
        scores = tl.where(smask[None, :], scores, float("-inf"))
        m = tl.max(scores, axis=1)  # finite: every active split holds a position
        p = tl.exp(scores - m[:, None])  # exactly 0 where masked
        l = tl.sum(p, axis=1)
        p = p.to(act)  # the eager model also feeds P @ V in its dtype
        if UPCAST:
            p = p.to(tl.float32)
        acc = tl.dot(p, v, input_precision="ieee")  # [M, D]

        part = kv_head * NSPLIT + split
        keep = g < GROUP_P2
        tl.store(part_m_ptr + part * GROUP_P2 + g, m, mask=keep)
        tl.store(part_l_ptr + part * GROUP_P2 + g, l, mask=keep)
        tl.store(part_acc_ptr + (part * GROUP_P2 + g[:, None]) * D + d[None, :], acc, mask=keep[:, None])

        # All threads' stores happen before the (release) counter bump; the last arriver's
        # (acquire) bump then sees every split's partials.
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + kv_head, 1)
        if arrived == n_active - 1:
            tl.debug_barrier()
            gc = tl.arange(0, GROUP_P2)
            run_m = tl.full([GROUP_P2], float("-inf"), tl.float32)
            run_l = tl.zeros([GROUP_P2], dtype=tl.float32)
            run_acc = tl.zeros([GROUP_P2, D], dtype=tl.float32)
            for c0 in range(0, NSPLIT, COMBINE):  # static trip count; inactive splits masked
                sp = c0 + tl.arange(0, COMBINE)
                spmask = sp < n_active
                idx = (kv_head * NSPLIT + sp[:, None]) * GROUP_P2 + gc[None, :]  # [C, G]
                pm = tl.load(part_m_ptr + idx, mask=spmask[:, None], other=float("-inf"), cache_modifier=".cg")
                pl = tl.load(part_l_ptr + idx, mask=spmask[:, None], other=0.0, cache_modifier=".cg")
                pa = tl.load(part_acc_ptr + idx[:, :, None] * D + d[None, None, :],
                             mask=spmask[:, None, None], other=0.0, cache_modifier=".cg")
                new_m = tl.maximum(run_m, tl.max(pm, axis=0))  # finite from the first chunk on
                w = tl.exp(pm - new_m[None, :])  # [C, G], 0 for inactive splits
                alpha = tl.exp(run_m - new_m)
                run_l = run_l * alpha + tl.sum(w * pl, axis=0)
                run_acc = run_acc * alpha[:, None] + tl.sum(w[:, :, None] * pa, axis=0)
                run_m = new_m
            o = run_acc / run_l[:, None]
            out_rows = kv_head * GROUP + gc
            tl.store(out_ptr + out_rows[:, None] * D + d[None, :], o.to(out_ptr.dtype.element_ty),
                     mask=(gc < GROUP)[:, None])
            tl.atomic_xchg(counter_ptr + kv_head, 0)  # ready for the next layer / step


@dataclass
class AttentionWorkspace:
    """Scratch for the split partials and the arrival counters; reusable by every layer
    because layers run one after another and the last arriver resets the counters."""

    acc: torch.Tensor  # [kv_heads, nsplit, group_p2, D] fp32
    m: torch.Tensor  # [kv_heads, nsplit, group_p2] fp32
    l: torch.Tensor
    counters: torch.Tensor  # [kv_heads] int32, zero between calls
    block_s: int

    @property
    def nsplit(self) -> int:
        return self.m.shape[1]


def attention_workspace(
    kv_heads: int, group: int, head_dim: int, max_seq: int, device: torch.device | str,
    block_s: int = 64,
) -> AttentionWorkspace:
    """Allocate the scratch for a cache of `max_seq` positions (one split per block_s)."""
    nsplit = triton.cdiv(max_seq, block_s)
    gp2 = triton.next_power_of_2(group)
    f32 = {"dtype": torch.float32, "device": device}
    return AttentionWorkspace(
        acc=torch.empty(kv_heads, nsplit, gp2, head_dim, **f32),
        m=torch.empty(kv_heads, nsplit, gp2, **f32),
        l=torch.empty(kv_heads, nsplit, gp2, **f32),
        counters=torch.zeros(kv_heads, dtype=torch.int32, device=device),
        block_s=block_s,
    )


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    out: torch.Tensor,
    ws: AttentionWorkspace,
    *,
    scale: float | None = None,
    num_warps: int = 4,
) -> None:
    """out[h] <- softmax(q[h] K[g(h), :pos+1]^T * scale) V[g(h), :pos+1] for every q head h.

    q, out: [q_heads * D]. k_cache, v_cache: [kv_heads, max_seq, D] (last dim contiguous),
    already holding position `pos`. pos: 1-element int tensor on device.
    """
    kv_heads, max_seq, head_dim = k_cache.shape
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, "head_dim: a power of two >= 16"
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    group = q.numel() // (kv_heads * head_dim)
    nsplit = ws.nsplit
    assert nsplit == triton.cdiv(max_seq, ws.block_s), "workspace sized for another cache"
    assert ws.block_s >= 16, "block_s >= 16 (a tensor-core matmul dimension)"
    gp2 = triton.next_power_of_2(group)
    combine = max(1, min(triton.next_power_of_2(nsplit), 4096 // (gp2 * head_dim)))
    _decode_attention_kernel[(kv_heads, nsplit)](
        q, k_cache, v_cache, pos, out,
        ws.acc, ws.m, ws.l, ws.counters,
        k_cache.stride(0), k_cache.stride(1),
        head_dim ** -0.5 if scale is None else scale,
        GROUP=group, GROUP_P2=gp2, DOT_M=max(16, gp2), D=head_dim,
        BLOCK_S=ws.block_s, NSPLIT=nsplit, COMBINE=combine, UPCAST=q.device.type == "cpu",
        num_warps=num_warps,
    )
