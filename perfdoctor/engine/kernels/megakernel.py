"""The whole batch-1 decode step as one persistent kernel: a task queue over the layers.

Why one kernel: the `fused` step is 81 kernels in a CUDA graph. Each kernel boundary costs
a launch gap, a ramp (the first weight bytes arrive a DRAM latency after the grid starts)
and a tail (the last blocks run while most SMs idle), and the small matrices (QKV, O) are
too small to hide either. Here a grid sized to the machine (a few programs per SM) stays
resident for the whole step and pulls tasks from one queue:

    t = atomic_add(queue, 1)          # tasks are numbered in topological order
    issue t's first two block loads   # weights never depend on activations
    wait until t's inputs are done    # spin on the producing stage's done counter
    issue the input-vector loads      # from L2: other SMs wrote them
    grab the next task id             # its round trip hides under the loads in flight
    for each block of t:              # double-buffered: the block after next is issued
        compute, store                #   before this one is reduced
    signal                            # block barrier, then a release increment

A weight task is several 16 KB blocks of rows (64 KB, 128 KB for the LM head), so the fixed
chain of dependent round trips per task (wait, input vector, queue atomic, release) is paid
once per 64 KB while two blocks' loads stay in flight: with one 32 KB tile per task that
chain, not DRAM, bounded the H200 at 2 TB/s (docs/kernels-notes.md, megakernel v1).

Task order per layer: norm+QKV+RoPE+KV-append tiles, attention per KV head, O-projection
tiles (+ residual), norm+gate/up+SiLU tiles, down-projection tiles (+ residual); after the
last layer the final-norm+LM-head tiles, whose last finisher reduces the argmax. A task
waits for the whole previous stage (each stage reads a full vector the previous one wrote:
the norm of h, all heads' attention output, all of the MLP activation).

Why it cannot deadlock: tasks are handed out in order, so every task below t is held by a
program that is already running (a program only takes a task while it runs); the lowest
unfinished task has all its inputs done and progresses, by induction all do, whatever the
grid size and however many programs are resident. Under Triton's CPU interpreter, which
runs programs one after another, program 0 simply executes every task in order and the
others find the queue empty.

What overlaps: while a program waits at a stage boundary its first blocks are already in
flight, so DRAM keeps streaming the next stage's weights through the boundary (about
programs x 32 KB of look-ahead), and there is no kernel ramp or tail.

Memory ordering: a producer's stores, then `tl.debug_barrier()` (every thread of the block
has stored), then one atomic increment with release semantics at GPU scope; a consumer
spins on an acquire load (`ld.acquire.gpu` on the GPU, an acquire atomic in the
interpreter) and reads every activation written in this launch with `.cg` loads (L2, not
the SM's incoherent L1, which may hold a line from an earlier layer).

Rounding follows the fused kernels (see their docstrings and `_common`), so the greedy
tokens follow the eager model as closely as theirs do; attention processes the cache in
BLOCK_S-position chunks merged exactly as `decode_attention` merges its splits.

Per-layer weights live in separate tensors (the model's own, used in place): the kernel
gets one base pointer and a table of element offsets `[layers + 1, NKIND]` relative to it
(all tensors share one dtype), hinted as multiples of 16 elements so that the tile loads
stay 16 bytes wide.

With TRACE, every task records (start, inputs ready, end) from %globaltimer and its SM id
into a `[n_tasks, 4]` int64 buffer: the per-stage time split without hardware counters.
"""

from __future__ import annotations

import triton
import triton.language as tl

from perfdoctor.engine.kernels._common import argmax_of_partials, load_1d, load_rows, normed_values, rope_pair

# Columns of the offset table (per layer), and of its last row (the model's head).
ATTN_NORM, WQKV, K_CACHE, V_CACHE, WO, MLP_NORM, W_GATE, W_UP, W_DOWN = range(9)
FINAL_NORM, LM_HEAD = range(2)
NKIND = 9
STAGES = 5  # done counters per layer: qkv, attention, o, gate/up, down
# Counters sit 128 bytes apart (32 int32): each in its own cache line and, by the address
# hash, mostly its own L2 slice, so spinning on one does not queue behind another's atomics.
COUNTER_STRIDE = 32


@triton.jit
def _counter(done_ptr, idx):
    """Address of done counter idx (layer * 5 + stage; layers * 5 for the LM head)."""
    return done_ptr + idx * 32  # COUNTER_STRIDE


@triton.jit
def _offset(table_ptr, row, kind, ALIGNED: tl.constexpr):
    """Element offset of tensor `kind` of `row` from the base pointer."""
    off = tl.load(table_ptr + row * 9 + kind)
    if ALIGNED:
        off = tl.multiple_of(off, 16)
    return off


@triton.jit
def _acquire_load(ptr, GPU: tl.constexpr):
    if GPU:
        return tl.inline_asm_elementwise(
            "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32, is_pure=False, pack=1
        )
    else:
        return tl.atomic_add(ptr, 0, sem="acquire")


@triton.jit
def _wait(done_ptr, idx, target, seen, GPU: tl.constexpr):
    """Spin until done[idx] reaches target (acquire: later loads see its producers' stores),
    unless this program already saw it there: `seen` is the counter its last wait saw
    complete; counters only grow within a step and that acquire orders every later load, so
    the tasks after the first of a stage skip the round trip. Returns the index now seen."""
    if idx != seen:
        n = _acquire_load(_counter(done_ptr, idx), GPU)
        while n < target:
            n = _acquire_load(_counter(done_ptr, idx), GPU)
    return idx


@triton.jit
def _signal(done_ptr, idx):
    """Count this task done: every thread's stores first, then one release increment."""
    tl.debug_barrier()
    tl.atomic_add(_counter(done_ptr, idx), 1, sem="release", scope="gpu")


@triton.jit
def _stamp(trace_ptr, t, slot: tl.constexpr, TRACE: tl.constexpr):
    """With TRACE, record %globaltimer (ns) in trace[t, slot]; slot 0 also records the SM id."""
    if TRACE:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [t], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(trace_ptr + t.to(tl.int64) * 4 + slot, now)
        if slot == 0:
            sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [t], dtype=tl.int32, is_pure=False, pack=1)
            tl.store(trace_ptr + t.to(tl.int64) * 4 + 3, sm.to(tl.int64))


@triton.jit
def _row_dot(w, x):
    """sum_k w[r, k] * x[k] in fp32, for a bf16 (or fp32) tile and an fp32 vector."""
    return tl.sum(w.to(tl.float32) * x[None, :], axis=1)


@triton.jit
def _qkv_load(w_ptr, b, NB: tl.constexpr, K: tl.constexpr, KP2: tl.constexpr, D: tl.constexpr, PAIRS: tl.constexpr):
    """Weight rows of QKV block b (clamped into range; a block past the end is not stored):
    PAIRS rows of one head and their RoPE partners D/2 rows further."""
    HALF: tl.constexpr = D // 2
    bc = tl.minimum(b, NB - 1)
    jj = (bc % (HALF // PAIRS)) * PAIRS + tl.arange(0, PAIRS)
    rows_lo = (bc // (HALF // PAIRS)) * D + jj
    cols = tl.arange(0, KP2)
    lo = load_rows(w_ptr, rows_lo, jj < HALF, cols, cols < K, K, K == KP2)
    hi = load_rows(w_ptr, rows_lo + HALF, jj < HALF, cols, cols < K, K, K == KP2)
    return lo, hi


@triton.jit
def _qkv_store(
    w_lo, w_hi, b, xn, pos, layer, base_ptr, table_ptr, cos_ptr, sin_ptr, q_ptr, stride_head, stride_pos, act: tl.constexpr,
    NB: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, PAIRS: tl.constexpr, ALIGNED: tl.constexpr,
):
    """Projection, RoPE and the q / K / V-cache store of QKV block b, as `norm_qkv_rope`."""
    HALF: tl.constexpr = D // 2
    head = b // (HALF // PAIRS)
    jj = (b % (HALF // PAIRS)) * PAIRS + tl.arange(0, PAIRS)
    keep = (jj < HALF) & (b < NB)
    a = _row_dot(w_lo, xn).to(act).to(tl.float32)
    c2 = _row_dot(w_hi, xn).to(act).to(tl.float32)
    if head < NQ + NKV:  # q and k heads rotate; v heads do not
        c = tl.load(cos_ptr + pos * HALF + jj).to(tl.float32)
        s = tl.load(sin_ptr + pos * HALF + jj).to(tl.float32)
        a, c2 = rope_pair(a, c2, c, s, act)
    if head < NQ:
        tl.store(q_ptr + head * D + jj, a.to(act), mask=keep)
        tl.store(q_ptr + head * D + jj + HALF, c2.to(act), mask=keep)
    else:
        if head < NQ + NKV:
            base = base_ptr + _offset(table_ptr, layer, 2, ALIGNED) + (head - NQ) * stride_head
        else:
            base = base_ptr + _offset(table_ptr, layer, 3, ALIGNED) + (head - NQ - NKV) * stride_head
        base += pos * stride_pos
        tl.store(base + jj, a.to(act), mask=keep)
        tl.store(base + jj + HALF, c2.to(act), mask=keep)


@triton.jit
def _qkv_task(
    t, r, layer, seen, base_ptr, table_ptr, token_ptr, pos_ptr, cos_ptr, sin_ptr, h_ptr, q_ptr,
    queue_ptr, done_ptr, trace_ptr, stride_head, stride_pos, eps,
    K: tl.constexpr, KP2: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
    PAIRS: tl.constexpr, SUB: tl.constexpr, N_DOWN: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """SUB consecutive QKV blocks of [Wq; Wk; Wv] (a block: PAIRS rows of one head and their
    RoPE partners), as `norm_qkv_rope`: norm, projection, RoPE, then q or the K/V cache row
    at `pos`. Layer 0 reads the token's embedding row and task 0 seeds the residual stream
    h with it. The blocks stream double-buffered: two in flight while one is reduced."""
    NB: tl.constexpr = (NQ + 2 * NKV) * (D // 2 // PAIRS)
    EVEN_K: tl.constexpr = K == KP2
    cols = tl.arange(0, KP2)
    cmask = cols < K
    w_ptr = base_ptr + _offset(table_ptr, layer, 1, ALIGNED)
    b0 = r * SUB
    lo_a, hi_a = _qkv_load(w_ptr, b0, NB, K, KP2, D, PAIRS)
    if SUB > 1:
        lo_b, hi_b = _qkv_load(w_ptr, b0 + 1, NB, K, KP2, D, PAIRS)
    if layer > 0:
        seen = _wait(done_ptr, (layer - 1) * 5 + 4, N_DOWN, seen, GPU)
        _stamp(trace_ptr, t, 1, TRACE)
        x = load_1d(h_ptr, cols, cmask, EVEN_K, tl.constexpr(".cg")).to(tl.float32)
    else:
        _stamp(trace_ptr, t, 1, TRACE)
        row = base_ptr + tl.load(token_ptr).to(tl.int64) * K  # the embedding is offset 0
        x = load_1d(row, cols, cmask, EVEN_K).to(tl.float32)
    # The next task's id: its round trip overlaps the weight and input loads in flight.
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    act = h_ptr.dtype.element_ty
    inv_std = tl.math.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    g = load_1d(base_ptr + _offset(table_ptr, layer, 0, ALIGNED), cols, cmask, EVEN_K).to(tl.float32)
    xn = normed_values(x, g, inv_std, act, ROUND_TWICE)
    pos = tl.load(pos_ptr)
    for s in tl.static_range(SUB):
        if s + 2 < SUB:
            lo_n, hi_n = _qkv_load(w_ptr, b0 + s + 2, NB, K, KP2, D, PAIRS)
        _qkv_store(lo_a, hi_a, b0 + s, xn, pos, layer, base_ptr, table_ptr, cos_ptr, sin_ptr, q_ptr,
                   stride_head, stride_pos, act, NB, NQ, NKV, D, PAIRS, ALIGNED)
        if s + 1 < SUB:
            lo_a, hi_a = lo_b, hi_b
        if s + 2 < SUB:
            lo_b, hi_b = lo_n, hi_n
    if (layer == 0) & (r == 0):
        tl.store(h_ptr + cols, x.to(act), mask=cmask)  # the residual stream starts as the row
    _signal(done_ptr, layer * 5 + 0)
    return nxt, seen


@triton.jit
def _attention_task(
    t, kv, layer, seen, base_ptr, table_ptr, pos_ptr, q_ptr, attn_ptr, queue_ptr, done_ptr, trace_ptr,
    stride_head, stride_pos, scale,
    NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, BLOCK_S: tl.constexpr, N_QKV: tl.constexpr,
    UPCAST: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """Attention of the GROUP query heads sharing KV head `kv` over positions [0, pos]:
    BLOCK_S-position chunks, each as one split of `decode_attention` (scores and P rounded
    the same way), merged with its combine formula as they come. The next chunk's K/V loads
    are issued before the current chunk is computed, and the first chunk's before the wait
    (the cache rows below pos were written by earlier steps; the chunk is read again after
    the wait only when it holds pos, the row this step's QKV tasks append)."""
    GROUP: tl.constexpr = NQ // NKV
    DOT_M: tl.constexpr = 16 if GROUP < 16 else GROUP  # tl.dot needs >= 16 rows
    act = q_ptr.dtype.element_ty
    length = tl.load(pos_ptr).to(tl.int32) + 1
    g = tl.arange(0, DOT_M)
    d = tl.arange(0, D)
    k_ptr = base_ptr + _offset(table_ptr, layer, 2, ALIGNED) + kv * stride_head
    v_ptr = base_ptr + _offset(table_ptr, layer, 3, ALIGNED) + kv * stride_head
    s_idx = tl.arange(0, BLOCK_S)
    off = s_idx[:, None] * stride_pos + d[None, :]
    k_n = tl.load(k_ptr + off, mask=(s_idx < length - 1)[:, None], other=0.0, cache_modifier=".cg")
    v_n = tl.load(v_ptr + off, mask=(s_idx < length - 1)[:, None], other=0.0, cache_modifier=".cg")
    seen = _wait(done_ptr, layer * 5 + 0, N_QKV, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    if length <= BLOCK_S:  # the first chunk holds pos: read it again, now that it is written
        k_n = tl.load(k_ptr + off, mask=(s_idx < length)[:, None], other=0.0, cache_modifier=".cg")
        v_n = tl.load(v_ptr + off, mask=(s_idx < length)[:, None], other=0.0, cache_modifier=".cg")
    q_rows = kv * GROUP + g
    q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=(g < GROUP)[:, None], other=0.0, cache_modifier=".cg")
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    q = (q.to(tl.float32) * scale).to(act)
    if UPCAST:  # the interpreter's bf16 tl.dot is wrong (see decode_attention)
        q = q.to(tl.float32)
    run_m = tl.full([DOT_M], float("-inf"), tl.float32)
    run_l = tl.zeros([DOT_M], dtype=tl.float32)
    run_acc = tl.zeros([DOT_M, D], dtype=tl.float32)
    s0 = 0
    while s0 < length:  # a while loop: the interpreter's range() wants a host int
        k, v = k_n, v_n
        s_idx = s0 + tl.arange(0, BLOCK_S)
        smask = s_idx < length
        nxt_idx = s_idx + BLOCK_S  # the next chunk, in flight while this one is computed
        off = nxt_idx[:, None] * stride_pos + d[None, :]
        k_n = tl.load(k_ptr + off, mask=(nxt_idx < length)[:, None], other=0.0, cache_modifier=".cg")
        v_n = tl.load(v_ptr + off, mask=(nxt_idx < length)[:, None], other=0.0, cache_modifier=".cg")
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee").to(act).to(tl.float32)
        scores = tl.where(smask[None, :], scores, float("-inf"))
        m = tl.max(scores, axis=1)  # finite: every chunk holds a position
        p = tl.exp(scores - m[:, None])
        l = tl.sum(p, axis=1)
        p = p.to(act)
        if UPCAST:
            p = p.to(tl.float32)
        acc = tl.dot(p, v, input_precision="ieee")
        new_m = tl.maximum(run_m, m)
        w = tl.exp(m - new_m)
        alpha = tl.exp(run_m - new_m)  # 0 on the first chunk
        run_l = run_l * alpha + w * l
        run_acc = run_acc * alpha[:, None] + w[:, None] * acc
        run_m = new_m
        s0 += BLOCK_S
    o = run_acc / run_l[:, None]
    tl.store(attn_ptr + q_rows[:, None] * D + d[None, :], o.to(act), mask=(g < GROUP)[:, None])
    _signal(done_ptr, layer * 5 + 1)
    return nxt, seen


@triton.jit
def _rows_load(w_ptr, blk, N: tl.constexpr, KIN: tl.constexpr, KIN_P2: tl.constexpr, ROWS: tl.constexpr,
               EVEN: tl.constexpr):
    """Rows [blk * ROWS, blk * ROWS + ROWS) of a row-major [N, KIN] matrix (zeros past N)."""
    rows = blk * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, KIN_P2)
    return load_rows(w_ptr, rows, rows < N, cols, cols < KIN, KIN, EVEN)


@triton.jit
def _gemv_residual_task(
    t, r, seen, x_ptr, w_ptr, h_ptr, queue_ptr, done_ptr, wait_idx, wait_target, signal_idx, trace_ptr,
    N: tl.constexpr, KIN: tl.constexpr, KIN_P2: tl.constexpr, ROWS: tl.constexpr, SUB: tl.constexpr,
    GPU: tl.constexpr, TRACE: tl.constexpr,
):
    """h[rows] <- h[rows] + W[rows] x for SUB blocks of ROWS rows, rounded as
    `gemv_residual` (the O and down projections); blocks stream double-buffered."""
    EVEN: tl.constexpr = (KIN == KIN_P2) and (N % (ROWS * SUB) == 0)
    b0 = r * SUB
    w_a = _rows_load(w_ptr, b0, N, KIN, KIN_P2, ROWS, EVEN)
    if SUB > 1:
        w_b = _rows_load(w_ptr, b0 + 1, N, KIN, KIN_P2, ROWS, EVEN)
    seen = _wait(done_ptr, wait_idx, wait_target, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    act = h_ptr.dtype.element_ty
    cols = tl.arange(0, KIN_P2)
    x = load_1d(x_ptr, cols, cols < KIN, KIN == KIN_P2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    for s in tl.static_range(SUB):
        if s + 2 < SUB:
            w_n = _rows_load(w_ptr, b0 + s + 2, N, KIN, KIN_P2, ROWS, EVEN)
        rows = (b0 + s) * ROWS + tl.arange(0, ROWS)
        rmask = rows < N
        y = _row_dot(w_a, x).to(act).to(tl.float32)
        res = tl.load(h_ptr + rows, mask=rmask, other=0.0, cache_modifier=".cg").to(tl.float32)
        tl.store(h_ptr + rows, (res + y).to(act), mask=rmask)
        if s + 1 < SUB:
            w_a = w_b
        if s + 2 < SUB:
            w_b = w_n
    _signal(done_ptr, signal_idx)
    return nxt, seen


@triton.jit
def _gate_up_task(
    t, r, layer, seen, base_ptr, table_ptr, h_ptr, act_ptr, queue_ptr, done_ptr, trace_ptr, eps,
    K: tl.constexpr, KP2: tl.constexpr, I: tl.constexpr, ROWS: tl.constexpr, SUB: tl.constexpr, N_O: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """act[rows] <- silu(W_gate[rows] n) * (W_up[rows] n), n = RMSNorm(h), as `norm_gate_up`,
    for SUB blocks of ROWS rows of each matrix, double-buffered."""
    EVEN: tl.constexpr = (K == KP2) and (I % (ROWS * SUB) == 0)
    wg_ptr = base_ptr + _offset(table_ptr, layer, 6, ALIGNED)
    wu_ptr = base_ptr + _offset(table_ptr, layer, 7, ALIGNED)
    b0 = r * SUB
    g_a = _rows_load(wg_ptr, b0, I, K, KP2, ROWS, EVEN)
    u_a = _rows_load(wu_ptr, b0, I, K, KP2, ROWS, EVEN)
    if SUB > 1:
        g_b = _rows_load(wg_ptr, b0 + 1, I, K, KP2, ROWS, EVEN)
        u_b = _rows_load(wu_ptr, b0 + 1, I, K, KP2, ROWS, EVEN)
    seen = _wait(done_ptr, layer * 5 + 2, N_O, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    act = act_ptr.dtype.element_ty
    cols = tl.arange(0, KP2)
    cmask = cols < K
    x = load_1d(h_ptr, cols, cmask, K == KP2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    inv_std = tl.math.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    g = load_1d(base_ptr + _offset(table_ptr, layer, 5, ALIGNED), cols, cmask, K == KP2).to(tl.float32)
    xn = normed_values(x, g, inv_std, act, ROUND_TWICE)
    for s in tl.static_range(SUB):
        if s + 2 < SUB:
            g_n = _rows_load(wg_ptr, b0 + s + 2, I, K, KP2, ROWS, EVEN)
            u_n = _rows_load(wu_ptr, b0 + s + 2, I, K, KP2, ROWS, EVEN)
        rows = (b0 + s) * ROWS + tl.arange(0, ROWS)
        gate = _row_dot(g_a, xn).to(act).to(tl.float32)
        up = _row_dot(u_a, xn).to(act).to(tl.float32)
        silu = (gate * tl.sigmoid(gate)).to(act).to(tl.float32)
        tl.store(act_ptr + rows, (silu * up).to(act), mask=rows < I)
        if s + 1 < SUB:
            g_a, u_a = g_b, u_b
        if s + 2 < SUB:
            g_b, u_b = g_n, u_n
    _signal(done_ptr, layer * 5 + 3)
    return nxt, seen


@triton.jit
def _head_task(
    t, r, seen, base_ptr, table_ptr, h_ptr, logits_ptr, part_val_ptr, part_idx_ptr, next_token_ptr,
    queue_ptr, done_ptr, trace_ptr, eps,
    L: tl.constexpr, K: tl.constexpr, KP2: tl.constexpr, V: tl.constexpr, ROWS: tl.constexpr, SUB: tl.constexpr,
    N_DOWN: tl.constexpr, N_HEAD: tl.constexpr, REDUCE: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """logits[rows] <- W_head[rows] RMSNorm(h) for SUB blocks of ROWS rows (double-buffered)
    and the task's (max, first argmax); the task that finishes last reduces the partials to
    the next token, as `norm_lm_head_argmax`."""
    EVEN: tl.constexpr = (K == KP2) and (V % (ROWS * SUB) == 0)
    BIG: tl.constexpr = 2147483647
    w_ptr = base_ptr + _offset(table_ptr, L, 1, ALIGNED)
    b0 = r * SUB
    w_a = _rows_load(w_ptr, b0, V, K, KP2, ROWS, EVEN)
    if SUB > 1:
        w_b = _rows_load(w_ptr, b0 + 1, V, K, KP2, ROWS, EVEN)
    seen = _wait(done_ptr, (L - 1) * 5 + 4, N_DOWN, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    out_t = logits_ptr.dtype.element_ty
    cols = tl.arange(0, KP2)
    cmask = cols < K
    x = load_1d(h_ptr, cols, cmask, K == KP2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    inv_std = tl.math.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    g = load_1d(base_ptr + _offset(table_ptr, L, 0, ALIGNED), cols, cmask, K == KP2).to(tl.float32)
    xn = normed_values(x, g, inv_std, h_ptr.dtype.element_ty, ROUND_TWICE)
    run_val = tl.max(tl.full([ROWS], float("-inf"), tl.float32), axis=0)
    run_idx = tl.min(tl.full([ROWS], BIG, tl.int32), axis=0)
    for s in tl.static_range(SUB):
        if s + 2 < SUB:
            w_n = _rows_load(w_ptr, b0 + s + 2, V, K, KP2, ROWS, EVEN)
        rows = (b0 + s) * ROWS + tl.arange(0, ROWS)
        rmask = rows < V
        logits = _row_dot(w_a, xn).to(out_t)
        tl.store(logits_ptr + rows, logits, mask=rmask)
        logits = tl.where(rmask, logits.to(tl.float32), float("-inf"))
        best = tl.max(logits, axis=0)
        take = best > run_val  # strict: an earlier block (lower indices) wins ties
        run_idx = tl.where(take, tl.min(tl.where(logits == best, rows, BIG), axis=0), run_idx)
        run_val = tl.where(take, best, run_val)
        if s + 1 < SUB:
            w_a = w_b
        if s + 2 < SUB:
            w_b = w_n
    tl.store(part_val_ptr + r, run_val)
    tl.store(part_idx_ptr + r, run_idx)
    tl.debug_barrier()  # every thread's partial store happens before the release below
    arrived = tl.atomic_add(_counter(done_ptr, L * 5), 1)  # acq_rel: the last arriver sees all partials
    if arrived == N_HEAD - 1:
        run_idx = argmax_of_partials(part_val_ptr, part_idx_ptr, N_HEAD, REDUCE)
        tl.store(next_token_ptr, run_idx.to(next_token_ptr.dtype.element_ty))
    return nxt, seen


@triton.jit
def megakernel(
    base_ptr, table_ptr, cos_ptr, sin_ptr, token_ptr, pos_ptr,
    h_ptr, q_ptr, attn_ptr, act_ptr, logits_ptr, part_val_ptr, part_idx_ptr, next_token_ptr,
    queue_ptr, done_ptr, trace_ptr,
    stride_head, stride_pos, eps, scale,
    L: tl.constexpr, K: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
    I: tl.constexpr, V: tl.constexpr, KP2: tl.constexpr, AP2: tl.constexpr, IP2: tl.constexpr,
    PAIRS: tl.constexpr, QKV_SUB: tl.constexpr, O_ROWS: tl.constexpr, O_SUB: tl.constexpr,
    GU_ROWS: tl.constexpr, GU_SUB: tl.constexpr, DOWN_ROWS: tl.constexpr, DOWN_SUB: tl.constexpr,
    HEAD_ROWS: tl.constexpr, HEAD_SUB: tl.constexpr, BLOCK_S: tl.constexpr, REDUCE: tl.constexpr,
    ROUND_TWICE: tl.constexpr, UPCAST: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr,
    TRACE: tl.constexpr,
):
    """One decode step: every program pulls tasks until the queue is empty (see the module
    docstring). `queue_ptr` and the `L * 5 + 1` done counters (COUNTER_STRIDE int32 apart)
    must be zero at launch. KP2, AP2, IP2: the next powers of two of K, NQ * D and I (tile
    widths). A task of a weight stage is *_SUB blocks of *_ROWS rows (QKV: PAIRS rows of a
    head and their RoPE partners), the same arithmetic as `task_counts`."""
    N_QKV: tl.constexpr = ((NQ + 2 * NKV) * (D // 2 // PAIRS) + QKV_SUB - 1) // QKV_SUB
    N_ATT: tl.constexpr = NKV
    N_O: tl.constexpr = ((K + O_ROWS - 1) // O_ROWS + O_SUB - 1) // O_SUB
    N_GU: tl.constexpr = ((I + GU_ROWS - 1) // GU_ROWS + GU_SUB - 1) // GU_SUB
    N_DOWN: tl.constexpr = ((K + DOWN_ROWS - 1) // DOWN_ROWS + DOWN_SUB - 1) // DOWN_SUB
    PER_LAYER: tl.constexpr = N_QKV + N_ATT + N_O + N_GU + N_DOWN
    N_HEAD: tl.constexpr = ((V + HEAD_ROWS - 1) // HEAD_ROWS + HEAD_SUB - 1) // HEAD_SUB
    N_TASKS: tl.constexpr = L * PER_LAYER + N_HEAD

    t = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    seen = t * 0 - 1  # no done counter seen complete yet
    while t < N_TASKS:
        _stamp(trace_ptr, t, 0, TRACE)
        layer = t // PER_LAYER
        r = t - layer * PER_LAYER
        if layer < L:
            if r < N_QKV:
                nxt, seen = _qkv_task(
                    t, r, layer, seen, base_ptr, table_ptr, token_ptr, pos_ptr, cos_ptr, sin_ptr, h_ptr, q_ptr,
                    queue_ptr, done_ptr, trace_ptr, stride_head, stride_pos, eps,
                    K, KP2, NQ, NKV, D, PAIRS, QKV_SUB, N_DOWN, ROUND_TWICE, GPU, ALIGNED, TRACE,
                )
            elif r < N_QKV + N_ATT:
                nxt, seen = _attention_task(
                    t, r - N_QKV, layer, seen, base_ptr, table_ptr, pos_ptr, q_ptr, attn_ptr, queue_ptr, done_ptr,
                    trace_ptr, stride_head, stride_pos, scale,
                    NQ, NKV, D, BLOCK_S, N_QKV, UPCAST, GPU, ALIGNED, TRACE,
                )
            elif r < N_QKV + N_ATT + N_O:
                nxt, seen = _gemv_residual_task(
                    t, r - N_QKV - N_ATT, seen, attn_ptr, base_ptr + _offset(table_ptr, layer, 4, ALIGNED), h_ptr,
                    queue_ptr, done_ptr, layer * 5 + 1, N_ATT, layer * 5 + 2, trace_ptr,
                    K, NQ * D, AP2, O_ROWS, O_SUB, GPU, TRACE,
                )
            elif r < N_QKV + N_ATT + N_O + N_GU:
                nxt, seen = _gate_up_task(
                    t, r - N_QKV - N_ATT - N_O, layer, seen, base_ptr, table_ptr, h_ptr, act_ptr, queue_ptr, done_ptr,
                    trace_ptr, eps, K, KP2, I, GU_ROWS, GU_SUB, N_O, ROUND_TWICE, GPU, ALIGNED, TRACE,
                )
            else:
                nxt, seen = _gemv_residual_task(
                    t, r - N_QKV - N_ATT - N_O - N_GU, seen, act_ptr,
                    base_ptr + _offset(table_ptr, layer, 8, ALIGNED),
                    h_ptr, queue_ptr, done_ptr, layer * 5 + 3, N_GU, layer * 5 + 4, trace_ptr,
                    K, I, IP2, DOWN_ROWS, DOWN_SUB, GPU, TRACE,
                )
        else:
            nxt, seen = _head_task(
                t, t - L * PER_LAYER, seen, base_ptr, table_ptr, h_ptr, logits_ptr, part_val_ptr, part_idx_ptr,
                next_token_ptr, queue_ptr, done_ptr, trace_ptr, eps,
                L, K, KP2, V, HEAD_ROWS, HEAD_SUB, N_DOWN, N_HEAD, REDUCE, ROUND_TWICE, GPU, ALIGNED, TRACE,
            )
        _stamp(trace_ptr, t, 2, TRACE)
        t = nxt


def task_counts(
    layers: int, hidden: int, q_heads: int, kv_heads: int, head_dim: int, intermediate: int, vocab: int,
    pairs: int, qkv_sub: int, o_rows: int, o_sub: int, gu_rows: int, gu_sub: int, down_rows: int, down_sub: int,
    head_rows: int, head_sub: int,
) -> dict[str, int]:
    """Tasks per stage of one layer (qkv, attention, o, gate_up, down), the head's, and the
    total: the same arithmetic as the kernel's constexprs (the host sizes buffers with it)."""
    cd = triton.cdiv
    per = {
        "qkv": cd((q_heads + 2 * kv_heads) * (head_dim // 2 // pairs), qkv_sub),
        "attention": kv_heads,
        "o": cd(cd(hidden, o_rows), o_sub),
        "gate_up": cd(cd(intermediate, gu_rows), gu_sub),
        "down": cd(cd(hidden, down_rows), down_sub),
    }
    head = cd(cd(vocab, head_rows), head_sub)
    return {**per, "per_layer": sum(per.values()), "head": head, "total": layers * sum(per.values()) + head}
