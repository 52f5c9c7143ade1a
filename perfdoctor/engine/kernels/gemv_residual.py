"""Matrix-vector product + residual add: h <- h + W x (the O and the down projection).

Fuses: the batch-1 projection (bf16 or int8 weights, fp32 accumulation) with the residual
add that follows it, updating the residual stream in place (each element is read and
written by the block that owns its row, so in-place is safe).

Work split: a block owns BLOCK_N rows and walks K in BLOCK_K-wide tiles, keeping a 2-D fp32
accumulator so each loop iteration is independent 16-byte loads and FMAs; the row sum
happens once at the end. The loop is software-pipelined (STAGES - 1 tiles in flight).
Llama-3.2-1B: O projection (2048 x 2048, 8.4 MB) and down projection (2048 x 8192,
33.6 MB) with BLOCK_N = 4 give 512 blocks for 132 SMs. Measured on an H200: O 4.4 us
(40 % of peak DRAM bandwidth: too small to hide ramp-up and tail), down 10.3 us (68 %).

Per call ([N, K] weights, 2 bytes each): bytes read = 2 N K + 2 K + 2 N, written 2 N;
FLOPs = 2 N K. With int8 weights (`fused-int8`, see `perfdoctor.engine.quant`): N K + 4 N
(the row scales) instead of 2 N K. H200, 2026-12-02, position 144: O 3.98 us (1055 GB/s),
down 8.90 us (1886 GB/s), against bf16 4.35 and 10.30 (docs/kernels-notes.md, "int8 outcome").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from perfdoctor.engine.kernels._common import (
    check_scale,
    load_1d,
    load_rows,
    row_sums,
    weights_f32,
)


@triton.jit
def _gemv_residual_kernel(
    x_ptr, w_ptr, scale_ptr, resid_ptr, out_ptr, N,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr,
    STAGES: tl.constexpr,
):
    EVEN_K: tl.constexpr = K % BLOCK_K == 0
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    # STAGES - 1 weight tiles stay in flight (cp.async into shared memory) while one is used.
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < K
        x = load_1d(x_ptr, cols, cmask, EVEN_K).to(tl.float32)
        w = load_rows(w_ptr, rows, rmask, cols, cmask, K, EVEN_N and EVEN_K)
        acc += weights_f32(w) * x[None, :]
    act = out_ptr.dtype.element_ty
    # Eager rounds the projection output.
    y = row_sums(acc, scale_ptr, rows, rmask).to(act).to(tl.float32)
    r = tl.load(resid_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, (r + y).to(act), mask=rmask)


def gemv_residual(
    x: torch.Tensor,
    w: torch.Tensor,
    resid: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    scale: torch.Tensor | None = None,
    block_n: int = 8,
    block_k: int = 512,
    num_stages: int = 3,
    num_warps: int = 4,
) -> torch.Tensor:
    """out <- resid + w @ x, rounded to out's dtype. x: [K]; w: [N, K]; resid, out: [N].

    `out` defaults to `resid` (in-place update of the residual stream). int8 `w` takes its
    row scales [N] fp32 (`quant.Int8Rows`): then w @ x means scale * (w @ x).
    """
    N, K = w.shape
    check_scale(w, scale)
    out = resid if out is None else out
    block_k = min(block_k, triton.next_power_of_2(K))
    _gemv_residual_kernel[(triton.cdiv(N, block_n),)](
        x, w, scale, resid, out, N,
        K=K, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_N=N % block_n == 0,
        STAGES=num_stages, num_warps=num_warps,
    )
    return out
