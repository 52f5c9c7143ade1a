"""Final RMSNorm -> LM head -> greedy argmax, in one kernel.

Fuses: the final norm, the [V, K] LM-head matrix-vector product (the largest matrix of the
model: 128256 x 2048, 525 MB, 21 % of a Llama-3.2-1B step's bytes), the logits write, and a
two-stage argmax: each block reduces its rows to (max, first index of the max) in a
workspace; the block that finishes last (an atomic arrival counter) reduces those partials
and writes the token id. No extra kernel and no host round trip decide the next token, and
the next step's embedding gather reads the token straight from device memory.

Ties go to the lowest index, as `torch.argmax` does, and the argmax is taken over the logits
rounded to the logits buffer's dtype, as the eager model does.

Llama-3.2-1B with 32 rows per block (4008 blocks): 127.5 us on an H200, 86 % of peak DRAM
bandwidth (the one matrix big enough to amortise ramp-up and tail).

Per call ([V, K] weights, 2 bytes each): bytes read = 2 V K + 4 K; written 2 V (logits);
FLOPs = 2 V K. With int8 weights (`fused-int8`): V K + 4 V (the row scales) instead of
2 V K. H200, 2026-12-02: 85.8 us (3067 GB/s, 64 % of peak) against bf16 127.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from perfdoctor.engine.kernels._common import (
    argmax_of_partials,
    check_scale,
    load_rows,
    rms_inv_std,
    rms_normed,
    row_sums,
    weights_f32,
)


@triton.jit
def _norm_lm_head_argmax_kernel(
    x_ptr, norm_ptr, w_ptr, scale_ptr, logits_ptr, part_val_ptr, part_idx_ptr, counter_ptr, token_ptr,
    N, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr,
    NBLOCKS: tl.constexpr, REDUCE: tl.constexpr, ROUND_TWICE: tl.constexpr,
    STAGES: tl.constexpr,
):
    EVEN_K: tl.constexpr = K % BLOCK_K == 0
    BIG: tl.constexpr = 2147483647
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    inv_std = rms_inv_std(x_ptr, eps, K, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    # STAGES - 1 weight tiles stay in flight (cp.async into shared memory) while one is used.
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < K
        xn = rms_normed(x_ptr, norm_ptr, cols, cmask, inv_std, EVEN_K, ROUND_TWICE)
        w = load_rows(w_ptr, rows, rmask, cols, cmask, K, EVEN_N and EVEN_K)
        acc += weights_f32(w) * xn[None, :]
    logits = row_sums(acc, scale_ptr, rows, rmask).to(logits_ptr.dtype.element_ty)
    tl.store(logits_ptr + rows, logits, mask=rmask)

    logits = tl.where(rmask, logits.to(tl.float32), float("-inf"))
    best = tl.max(logits, axis=0)
    tl.store(part_val_ptr + pid, best)
    tl.store(part_idx_ptr + pid, tl.min(tl.where(logits == best, rows, BIG), axis=0))

    tl.debug_barrier()  # every thread's partial store happens before the release below
    arrived = tl.atomic_add(counter_ptr, 1)  # acq_rel: the last arriver sees all partials
    if arrived == NBLOCKS - 1:
        tl.debug_barrier()
        run_idx = argmax_of_partials(part_val_ptr, part_idx_ptr, NBLOCKS, REDUCE)
        tl.store(token_ptr, run_idx.to(token_ptr.dtype.element_ty))
        tl.atomic_xchg(counter_ptr, 0)  # ready for the next call


@dataclass
class ArgmaxWorkspace:
    """Per-block (max, index) partials and the arrival counter (zero between calls)."""

    val: torch.Tensor  # [nblocks] fp32
    idx: torch.Tensor  # [nblocks] int32
    counter: torch.Tensor  # [1] int32
    block_n: int


def argmax_workspace(vocab: int, device: torch.device | str, block_n: int = 16) -> ArgmaxWorkspace:
    """Allocate the argmax scratch for a `vocab`-row LM head split into block_n-row blocks."""
    nblocks = triton.cdiv(vocab, block_n)
    return ArgmaxWorkspace(
        val=torch.empty(nblocks, dtype=torch.float32, device=device),
        idx=torch.empty(nblocks, dtype=torch.int32, device=device),
        counter=torch.zeros(1, dtype=torch.int32, device=device),
        block_n=block_n,
    )


def norm_lm_head_argmax(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    w: torch.Tensor,
    logits: torch.Tensor,
    token: torch.Tensor,
    ws: ArgmaxWorkspace,
    *,
    eps: float,
    scale: torch.Tensor | None = None,
    round_twice: bool = False,
    block_k: int = 512,
    num_stages: int = 3,
    num_warps: int = 4,
) -> None:
    """logits <- w @ (RMSNorm(x) * norm_weight) (rounded to logits' dtype);
    token <- argmax(logits).

    x: [K]; w: [V, K] row-major; logits: [V]; token: 1-element int tensor on the device.
    int8 `w` takes its row scales [V] fp32 (`quant.Int8Rows`). round_twice: see
    `_common.rms_normed`.
    """
    N, K = w.shape
    assert w.is_contiguous()
    check_scale(w, scale)
    nblocks = triton.cdiv(N, ws.block_n)
    assert ws.val.numel() == nblocks, "workspace sized for another vocabulary"
    _norm_lm_head_argmax_kernel[(nblocks,)](
        x, norm_weight, w, scale, logits, ws.val, ws.idx, ws.counter, token, N, eps,
        K=K, BLOCK_N=ws.block_n, BLOCK_K=min(block_k, triton.next_power_of_2(K)),
        EVEN_N=N % ws.block_n == 0, NBLOCKS=nblocks, REDUCE=min(1024, triton.next_power_of_2(nblocks)),
        ROUND_TWICE=round_twice, STAGES=num_stages, num_warps=num_warps,
    )
