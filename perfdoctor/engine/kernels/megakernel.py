"""The whole batch-1 decode step as one persistent kernel: a task queue over the layers.

Why one kernel: the `fused` step is 81 kernels in a CUDA graph. Each kernel boundary costs
a launch gap, a ramp (the first weight bytes arrive a DRAM latency after the grid starts)
and a tail (the last blocks run while most SMs idle), and the small matrices (QKV, O) are
too small to hide either. Here a grid sized to the machine (a few programs per SM) stays
resident for the whole step and pulls tasks from one queue:

    t = atomic_add(queue, 1)          # tasks are numbered in topological order
    issue the weight-tile loads of t  # weights never depend on activations
    wait until t's inputs are done    # spin on the producing stage's done counter
    issue the input-vector loads      # from L2: other SMs wrote them
    grab the next task id             # its round trip hides under the loads in flight
    compute t, store, signal          # block barrier, then a release increment

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

What overlaps: while a program waits at a stage boundary its weight tile is already in
flight, so DRAM keeps streaming the next stage's weights through the boundary (about
programs x tile bytes of look-ahead), and there is no kernel ramp or tail.

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

from perfdoctor.engine.kernels._common import load_1d, load_rows, normed_values

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
def _prefetch_l2(ptr, nbytes):
    """One bulk L2 prefetch of `nbytes` (a multiple of 16) from ptr, issued by thread 0 only
    (the Hopper copy engine's `cp.async.bulk.prefetch.L2`: no registers, no shared memory)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;\n"
        "@p cp.async.bulk.prefetch.L2.global [$1], $2;\nmov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1,
    )


@triton.jit
def _prefetch_task(
    u, base_ptr, table_ptr,
    L: tl.constexpr, K: tl.constexpr, NQ: tl.constexpr, D: tl.constexpr, I: tl.constexpr, V: tl.constexpr,
    PAIRS: tl.constexpr, O_ROWS: tl.constexpr, GU_ROWS: tl.constexpr, DOWN_ROWS: tl.constexpr,
    HEAD_ROWS: tl.constexpr, N_QKV: tl.constexpr, N_ATT: tl.constexpr, N_O: tl.constexpr, N_GU: tl.constexpr,
    PER_LAYER: tl.constexpr, N_TASKS: tl.constexpr, ALIGNED: tl.constexpr,
):
    """Ask L2 for the weight tile(s) of future task u (nothing for attention tasks or past
    the end). Whoever takes task t prefetches task t + PREFETCH, so the DRAM stream runs a
    fixed distance ahead of the tasks in progress, beyond what registers could hold."""
    ES: tl.constexpr = base_ptr.dtype.element_ty.primitive_bitwidth // 8
    HALF: tl.constexpr = D // 2
    BPH: tl.constexpr = HALF // PAIRS
    KA: tl.constexpr = NQ * D
    if u < N_TASKS:
        layer = u // PER_LAYER
        r = u - layer * PER_LAYER
        if layer < L:
            if r < N_QKV:
                w = base_ptr + _offset(table_ptr, layer, 1, ALIGNED) + ((r // BPH) * D + (r % BPH) * PAIRS) * K
                _prefetch_l2(w, PAIRS * K * ES)
                _prefetch_l2(w + HALF * K, PAIRS * K * ES)
            elif r >= N_QKV + N_ATT:
                if r < N_QKV + N_ATT + N_O:
                    row0 = (r - N_QKV - N_ATT) * O_ROWS
                    w = base_ptr + _offset(table_ptr, layer, 4, ALIGNED) + row0 * KA
                    _prefetch_l2(w, tl.minimum(O_ROWS, K - row0) * KA * ES)
                elif r < N_QKV + N_ATT + N_O + N_GU:
                    row0 = (r - N_QKV - N_ATT - N_O) * GU_ROWS
                    n = tl.minimum(GU_ROWS, I - row0) * K * ES
                    _prefetch_l2(base_ptr + _offset(table_ptr, layer, 6, ALIGNED) + row0 * K, n)
                    _prefetch_l2(base_ptr + _offset(table_ptr, layer, 7, ALIGNED) + row0 * K, n)
                else:
                    row0 = (r - N_QKV - N_ATT - N_O - N_GU) * DOWN_ROWS
                    w = base_ptr + _offset(table_ptr, layer, 8, ALIGNED) + row0 * I
                    _prefetch_l2(w, tl.minimum(DOWN_ROWS, K - row0) * I * ES)
        else:
            row0 = (u - L * PER_LAYER) * HEAD_ROWS
            w = base_ptr + _offset(table_ptr, L, 1, ALIGNED) + row0.to(tl.int64) * K
            _prefetch_l2(w, tl.minimum(HEAD_ROWS, V - row0) * K * ES)


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
def _qkv_task(
    t, j, layer, seen, base_ptr, table_ptr, token_ptr, pos_ptr, cos_ptr, sin_ptr, h_ptr, q_ptr,
    queue_ptr, done_ptr, trace_ptr, stride_head, stride_pos, eps,
    K: tl.constexpr, KP2: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
    PAIRS: tl.constexpr, N_DOWN: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """2 * PAIRS rows of one head of [Wq; Wk; Wv] (row i and its RoPE partner i + D/2), as
    `norm_qkv_rope`: norm, projection, RoPE, then q or the K/V cache row at `pos`. Layer 0
    reads the token's embedding row and task 0 seeds the residual stream h with it."""
    HALF: tl.constexpr = D // 2
    BPH: tl.constexpr = HALF // PAIRS
    EVEN_K: tl.constexpr = K == KP2
    head = j // BPH
    jj = (j % BPH) * PAIRS + tl.arange(0, PAIRS)
    rows_lo = head * D + jj
    rows_hi = rows_lo + HALF
    all_rows = jj < HALF
    cols = tl.arange(0, KP2)
    cmask = cols < K
    w_ptr = base_ptr + _offset(table_ptr, layer, 1, ALIGNED)
    w_lo = load_rows(w_ptr, rows_lo, all_rows, cols, cmask, K, EVEN_K)
    w_hi = load_rows(w_ptr, rows_hi, all_rows, cols, cmask, K, EVEN_K)
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
    a = _row_dot(w_lo, xn).to(act).to(tl.float32)
    b = _row_dot(w_hi, xn).to(act).to(tl.float32)
    pos = tl.load(pos_ptr)
    if head < NQ + NKV:  # q and k heads rotate; v heads do not
        c = tl.load(cos_ptr + pos * HALF + jj).to(tl.float32)
        s = tl.load(sin_ptr + pos * HALF + jj).to(tl.float32)
        ac = (a * c).to(act).to(tl.float32)
        bs = (b * s).to(act).to(tl.float32)
        bc = (b * c).to(act).to(tl.float32)
        as_ = (a * s).to(act).to(tl.float32)
        a = ac - bs
        b = bc + as_
    if head < NQ:
        tl.store(q_ptr + head * D + jj, a.to(act))
        tl.store(q_ptr + head * D + jj + HALF, b.to(act))
    else:
        if head < NQ + NKV:
            base = base_ptr + _offset(table_ptr, layer, 2, ALIGNED) + (head - NQ) * stride_head
        else:
            base = base_ptr + _offset(table_ptr, layer, 3, ALIGNED) + (head - NQ - NKV) * stride_head
        base += pos * stride_pos
        tl.store(base + jj, a.to(act))
        tl.store(base + jj + HALF, b.to(act))
    if (layer == 0) & (j == 0):
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
    the same way), merged with its combine formula as they come."""
    GROUP: tl.constexpr = NQ // NKV
    DOT_M: tl.constexpr = 16 if GROUP < 16 else GROUP  # tl.dot needs >= 16 rows
    seen = _wait(done_ptr, layer * 5 + 0, N_QKV, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    act = q_ptr.dtype.element_ty
    length = tl.load(pos_ptr).to(tl.int32) + 1
    g = tl.arange(0, DOT_M)
    d = tl.arange(0, D)
    q_rows = kv * GROUP + g
    q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=(g < GROUP)[:, None], other=0.0, cache_modifier=".cg")
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    q = (q.to(tl.float32) * scale).to(act)
    if UPCAST:  # the interpreter's bf16 tl.dot is wrong (see decode_attention)
        q = q.to(tl.float32)
    k_ptr = base_ptr + _offset(table_ptr, layer, 2, ALIGNED) + kv * stride_head
    v_ptr = base_ptr + _offset(table_ptr, layer, 3, ALIGNED) + kv * stride_head
    run_m = tl.full([DOT_M], float("-inf"), tl.float32)
    run_l = tl.zeros([DOT_M], dtype=tl.float32)
    run_acc = tl.zeros([DOT_M, D], dtype=tl.float32)
    s0 = 0
    while s0 < length:  # a while loop: the interpreter's range() wants a host int
        s_idx = s0 + tl.arange(0, BLOCK_S)
        smask = s_idx < length
        off = s_idx[:, None] * stride_pos + d[None, :]
        k = tl.load(k_ptr + off, mask=smask[:, None], other=0.0, cache_modifier=".cg")
        v = tl.load(v_ptr + off, mask=smask[:, None], other=0.0, cache_modifier=".cg")
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
def _gemv_residual_task(
    t, r, seen, x_ptr, w_ptr, h_ptr, queue_ptr, done_ptr, wait_idx, wait_target, signal_idx, trace_ptr,
    N: tl.constexpr, KIN: tl.constexpr, KIN_P2: tl.constexpr, ROWS: tl.constexpr,
    GPU: tl.constexpr, TRACE: tl.constexpr,
):
    """h[rows] <- h[rows] + W[rows] x, rounded as `gemv_residual` (the O and down projections)."""
    EVEN: tl.constexpr = (KIN == KIN_P2) and (N % ROWS == 0)
    rows = r * ROWS + tl.arange(0, ROWS)
    rmask = rows < N
    cols = tl.arange(0, KIN_P2)
    cmask = cols < KIN
    w = load_rows(w_ptr, rows, rmask, cols, cmask, KIN, EVEN)
    seen = _wait(done_ptr, wait_idx, wait_target, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    act = h_ptr.dtype.element_ty
    x = load_1d(x_ptr, cols, cmask, KIN == KIN_P2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    y = _row_dot(w, x).to(act).to(tl.float32)
    res = tl.load(h_ptr + rows, mask=rmask, other=0.0, cache_modifier=".cg").to(tl.float32)
    tl.store(h_ptr + rows, (res + y).to(act), mask=rmask)
    _signal(done_ptr, signal_idx)
    return nxt, seen


@triton.jit
def _gate_up_task(
    t, r, layer, seen, base_ptr, table_ptr, h_ptr, act_ptr, queue_ptr, done_ptr, trace_ptr, eps,
    K: tl.constexpr, KP2: tl.constexpr, I: tl.constexpr, ROWS: tl.constexpr, N_O: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """act[rows] <- silu(W_gate[rows] n) * (W_up[rows] n), n = RMSNorm(h), as `norm_gate_up`."""
    EVEN: tl.constexpr = (K == KP2) and (I % ROWS == 0)
    rows = r * ROWS + tl.arange(0, ROWS)
    rmask = rows < I
    cols = tl.arange(0, KP2)
    cmask = cols < K
    wg = load_rows(base_ptr + _offset(table_ptr, layer, 6, ALIGNED), rows, rmask, cols, cmask, K, EVEN)
    wu = load_rows(base_ptr + _offset(table_ptr, layer, 7, ALIGNED), rows, rmask, cols, cmask, K, EVEN)
    seen = _wait(done_ptr, layer * 5 + 2, N_O, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    act = act_ptr.dtype.element_ty
    x = load_1d(h_ptr, cols, cmask, K == KP2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    inv_std = tl.math.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    g = load_1d(base_ptr + _offset(table_ptr, layer, 5, ALIGNED), cols, cmask, K == KP2).to(tl.float32)
    xn = normed_values(x, g, inv_std, act, ROUND_TWICE)
    gate = _row_dot(wg, xn).to(act).to(tl.float32)
    up = _row_dot(wu, xn).to(act).to(tl.float32)
    silu = (gate * tl.sigmoid(gate)).to(act).to(tl.float32)
    tl.store(act_ptr + rows, (silu * up).to(act), mask=rmask)
    _signal(done_ptr, layer * 5 + 3)
    return nxt, seen


@triton.jit
def _head_task(
    t, r, seen, base_ptr, table_ptr, h_ptr, logits_ptr, part_val_ptr, part_idx_ptr, next_token_ptr,
    queue_ptr, done_ptr, trace_ptr, eps,
    L: tl.constexpr, K: tl.constexpr, KP2: tl.constexpr, V: tl.constexpr, ROWS: tl.constexpr,
    N_DOWN: tl.constexpr, N_HEAD: tl.constexpr, REDUCE: tl.constexpr,
    ROUND_TWICE: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr, TRACE: tl.constexpr,
):
    """logits[rows] <- W_head[rows] RMSNorm(h) and this tile's (max, first argmax); the task
    that finishes last reduces the partials to the next token, as `norm_lm_head_argmax`."""
    EVEN: tl.constexpr = (K == KP2) and (V % ROWS == 0)
    BIG: tl.constexpr = 2147483647
    rows = r * ROWS + tl.arange(0, ROWS)
    rmask = rows < V
    cols = tl.arange(0, KP2)
    cmask = cols < K
    w = load_rows(base_ptr + _offset(table_ptr, L, 1, ALIGNED), rows, rmask, cols, cmask, K, EVEN)
    seen = _wait(done_ptr, (L - 1) * 5 + 4, N_DOWN, seen, GPU)
    _stamp(trace_ptr, t, 1, TRACE)
    out_t = logits_ptr.dtype.element_ty
    x = load_1d(h_ptr, cols, cmask, K == KP2, tl.constexpr(".cg")).to(tl.float32)
    nxt = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    inv_std = tl.math.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    g = load_1d(base_ptr + _offset(table_ptr, L, 0, ALIGNED), cols, cmask, K == KP2).to(tl.float32)
    xn = normed_values(x, g, inv_std, h_ptr.dtype.element_ty, ROUND_TWICE)
    logits = _row_dot(w, xn).to(out_t)
    tl.store(logits_ptr + rows, logits, mask=rmask)
    logits = tl.where(rmask, logits.to(tl.float32), float("-inf"))
    best = tl.max(logits, axis=0)
    tl.store(part_val_ptr + r, best)
    tl.store(part_idx_ptr + r, tl.min(tl.where(logits == best, rows, BIG), axis=0))
    tl.debug_barrier()  # every thread's partial store happens before the release below
    arrived = tl.atomic_add(_counter(done_ptr, L * 5), 1)  # acq_rel: the last arriver sees all partials
    if arrived == N_HEAD - 1:
        run_val = tl.max(tl.full([REDUCE], float("-inf"), tl.float32), axis=0)
        run_idx = tl.min(tl.full([REDUCE], BIG, tl.int32), axis=0)
        for c0 in range(0, N_HEAD, REDUCE):
            i = c0 + tl.arange(0, REDUCE)
            imask = i < N_HEAD
            v = tl.load(part_val_ptr + i, mask=imask, other=float("-inf"), cache_modifier=".cg")
            ix = tl.load(part_idx_ptr + i, mask=imask, other=BIG, cache_modifier=".cg")
            cv = tl.max(v, axis=0)
            ci = tl.min(tl.where(v == cv, ix, BIG), axis=0)
            take = cv > run_val  # strict: an earlier chunk (lower indices) wins ties
            run_idx = tl.where(take, ci, run_idx)
            run_val = tl.where(take, cv, run_val)
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
    PAIRS: tl.constexpr, O_ROWS: tl.constexpr, GU_ROWS: tl.constexpr, DOWN_ROWS: tl.constexpr,
    HEAD_ROWS: tl.constexpr, BLOCK_S: tl.constexpr, REDUCE: tl.constexpr,
    ROUND_TWICE: tl.constexpr, UPCAST: tl.constexpr, GPU: tl.constexpr, ALIGNED: tl.constexpr,
    TRACE: tl.constexpr, PREFETCH: tl.constexpr,
):
    """One decode step: every program pulls tasks until the queue is empty (see the module
    docstring). `queue_ptr` and the `L * 5 + 1` done counters (COUNTER_STRIDE int32 apart)
    must be zero at launch.
    KP2, AP2, IP2: the next powers of two of K, NQ * D and I (tile widths). PREFETCH > 0 (GPU
    only): the task taken prefetches the weights of the task PREFETCH places later into L2."""
    N_QKV: tl.constexpr = (NQ + 2 * NKV) * (D // 2 // PAIRS)
    N_ATT: tl.constexpr = NKV
    N_O: tl.constexpr = (K + O_ROWS - 1) // O_ROWS
    N_GU: tl.constexpr = (I + GU_ROWS - 1) // GU_ROWS
    N_DOWN: tl.constexpr = (K + DOWN_ROWS - 1) // DOWN_ROWS
    PER_LAYER: tl.constexpr = N_QKV + N_ATT + N_O + N_GU + N_DOWN
    N_HEAD: tl.constexpr = (V + HEAD_ROWS - 1) // HEAD_ROWS
    N_TASKS: tl.constexpr = L * PER_LAYER + N_HEAD

    t = tl.atomic_add(queue_ptr, 1, sem="relaxed")
    seen = t * 0 - 1  # no done counter seen complete yet
    while t < N_TASKS:
        _stamp(trace_ptr, t, 0, TRACE)
        if PREFETCH > 0:
            _prefetch_task(
                t + PREFETCH, base_ptr, table_ptr, L, K, NQ, D, I, V, PAIRS, O_ROWS, GU_ROWS, DOWN_ROWS,
                HEAD_ROWS, N_QKV, N_ATT, N_O, N_GU, PER_LAYER, N_TASKS, ALIGNED,
            )
        layer = t // PER_LAYER
        r = t - layer * PER_LAYER
        if layer < L:
            if r < N_QKV:
                nxt, seen = _qkv_task(
                    t, r, layer, seen, base_ptr, table_ptr, token_ptr, pos_ptr, cos_ptr, sin_ptr, h_ptr, q_ptr,
                    queue_ptr, done_ptr, trace_ptr, stride_head, stride_pos, eps,
                    K, KP2, NQ, NKV, D, PAIRS, N_DOWN, ROUND_TWICE, GPU, ALIGNED, TRACE,
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
                    K, NQ * D, AP2, O_ROWS, GPU, TRACE,
                )
            elif r < N_QKV + N_ATT + N_O + N_GU:
                nxt, seen = _gate_up_task(
                    t, r - N_QKV - N_ATT - N_O, layer, seen, base_ptr, table_ptr, h_ptr, act_ptr, queue_ptr, done_ptr,
                    trace_ptr, eps, K, KP2, I, GU_ROWS, N_O, ROUND_TWICE, GPU, ALIGNED, TRACE,
                )
            else:
                nxt, seen = _gemv_residual_task(
                    t, r - N_QKV - N_ATT - N_O - N_GU, seen, act_ptr,
                    base_ptr + _offset(table_ptr, layer, 8, ALIGNED),
                    h_ptr, queue_ptr, done_ptr, layer * 5 + 3, N_GU, layer * 5 + 4, trace_ptr,
                    K, I, IP2, DOWN_ROWS, GPU, TRACE,
                )
        else:
            nxt, seen = _head_task(
                t, t - L * PER_LAYER, seen, base_ptr, table_ptr, h_ptr, logits_ptr, part_val_ptr, part_idx_ptr,
                next_token_ptr, queue_ptr, done_ptr, trace_ptr, eps,
                L, K, KP2, V, HEAD_ROWS, N_DOWN, N_HEAD, REDUCE, ROUND_TWICE, GPU, ALIGNED, TRACE,
            )
        _stamp(trace_ptr, t, 2, TRACE)
        t = nxt


def task_counts(
    layers: int, hidden: int, q_heads: int, kv_heads: int, head_dim: int, intermediate: int, vocab: int,
    pairs: int, o_rows: int, gu_rows: int, down_rows: int, head_rows: int,
) -> dict[str, int]:
    """Tasks per stage of one layer (qkv, attention, o, gate_up, down), the head's, and the
    total: the same arithmetic as the kernel's constexprs (the host sizes buffers with it)."""
    per = {
        "qkv": (q_heads + 2 * kv_heads) * (head_dim // 2 // pairs),
        "attention": kv_heads,
        "o": triton.cdiv(hidden, o_rows),
        "gate_up": triton.cdiv(intermediate, gu_rows),
        "down": triton.cdiv(hidden, down_rows),
    }
    head = triton.cdiv(vocab, head_rows)
    return {**per, "per_layer": sum(per.values()), "head": head, "total": layers * sum(per.values()) + head}
