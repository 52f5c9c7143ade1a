"""The `megakernel` variant: a decode step as one persistent Triton launch.

`fused` runs a step as 81 kernels in one CUDA graph; every boundary costs a ramp and a tail
and the small matrices never reach full bandwidth. Here a resident grid (a few programs per
SM) pulls the step's tasks from a queue in topological order and synchronises through
per-stage done counters (`perfdoctor.engine.kernels.megakernel` explains the schedule, why
it cannot deadlock, and the memory ordering). Each task issues its weight loads before it
waits for its inputs, so the weight stream runs through the stage boundaries.

A step is two graph nodes: a memset that zeroes the queue and done counters, and the
launch. The token and position are read from device buffers, so `GraphedStep` captures the
step once and replays it at every position, as for `fused`. The model's weights and KV
cache are used in place (the kernel gets their offsets from one base pointer); the step is
bound to the tensors the model holds when it is built.

Rounding is the fused kernels' (which follow the eager model), so greedy tokens agree with
eager as often as fused's do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from perfdoctor.engine.config import BadInput
from perfdoctor.engine.model import Transformer


@dataclass(frozen=True)
class MegaShape:
    """Block sizes of the megakernel's tasks and its launch shape.

    A weight task is `*_sub` blocks streamed double-buffered (two blocks' loads in flight
    while one is reduced): pairs RoPE pairs of one head and their partners for QKV; o_rows,
    gu_rows (of gate and of up each), down_rows, head_rows weight rows for the others. With
    Llama-3.2-1B a block is 16 KB and a task 64 KB (LM head 128 KB): the wait, the input
    load, the queue round trip and the release are paid once per task, not per block.
    block_s: cache positions per attention chunk (fused's split, for identical rounding);
    programs_per_sm: resident programs per SM (the grid is SMs x this); num_warps per
    program; maxnreg: a register cap per thread so that programs_per_sm fit (None: the
    compiler's choice).
    """

    pairs: int = 2
    qkv_sub: int = 4
    o_rows: int = 4
    o_sub: int = 4
    gu_rows: int = 2
    gu_sub: int = 4
    down_rows: int = 1
    down_sub: int = 4
    head_rows: int = 4
    head_sub: int = 8
    block_s: int = 64
    programs_per_sm: int = 2
    num_warps: int = 8
    maxnreg: int | None = 128


TUNED = MegaShape()


def _offsets(base: Tensor, tensors: list[Tensor]) -> list[int]:
    """Element offsets of `tensors` from `base` (same dtype and device)."""
    size = base.element_size()
    out = []
    for t in tensors:
        if t.dtype != base.dtype or t.device != base.device:
            raise BadInput(f"megakernel: every weight and cache must be {base.dtype} on {base.device}")
        delta = t.data_ptr() - base.data_ptr()
        if delta % size:
            raise BadInput("megakernel: a tensor is not aligned to its element size")
        out.append(delta // size)
    return out


class MegaKernels:
    """The megakernel decode step, `(token [1], pos [1]) -> next token [1]`, without a graph.

    Owns the activation buffers (as `FusedKernels`), the offset table, the argmax partials,
    the counters (`counter_values()`: the queue, then the done counters), and with `trace=True` a `[tasks, 4]` int64 buffer of per-task timestamps
    (`trace_buffer`: start, inputs ready, end in ns of %globaltimer, SM id). `logits` holds
    the last step's logits.
    """

    def __init__(self, model: Transformer, shape: MegaShape = TUNED, trace: bool = False) -> None:
        import triton

        from perfdoctor.engine.fused import rms_norm_rounds_twice
        from perfdoctor.engine.kernels.megakernel import COUNTER_STRIDE, NKIND, task_counts

        c = model.config
        device, dtype = model.embed.device, model.embed.dtype
        half = c.head_dim // 2
        if half % shape.pairs or shape.pairs & (shape.pairs - 1):
            raise BadInput(f"megakernel: pairs {shape.pairs} must be a power of two dividing head_dim/2 = {half}")
        if c.head_dim < 16 or c.head_dim & (c.head_dim - 1) or shape.block_s < 16:
            raise BadInput("megakernel: head_dim and block_s must be powers of two >= 16 (tensor-core tiles)")
        self.model, self.shape, self.trace = model, shape, trace
        act = {"device": device, "dtype": dtype}
        self.h = torch.empty(c.hidden, **act)
        self.q = torch.empty(c.q_heads * c.head_dim, **act)
        self.attn = torch.empty(c.q_heads * c.head_dim, **act)
        self.act = torch.empty(c.intermediate, **act)
        self.logits = torch.empty(c.vocab_size, **act)
        self.next_token = torch.zeros(1, dtype=torch.long, device=device)
        self.cos = model.rope_cos[:, :half].contiguous()
        self.sin = model.rope_sin[:, :half].contiguous()

        layers = model.layers
        caches = [t for layer in layers for t in (layer.attn.k_cache, layer.attn.v_cache)]
        if any(t.stride() != caches[0].stride() or t.stride(-1) != 1 for t in caches):
            raise BadInput("megakernel: every layer's K/V cache needs the same strides, last dim contiguous")
        rows = []
        for layer in layers:
            a, m = layer.attn, layer.mlp
            mats = [a.wqkv, a.wo, m.w13, m.w2]
            if not all(w.is_contiguous() for w in mats):
                raise BadInput("megakernel: weight matrices must be contiguous")
            # Order: kernels/megakernel.py's ATTN_NORM ... W_DOWN columns.
            rows.append(_offsets(model.embed, [
                layer.attn_norm.weight, a.wqkv, a.k_cache, a.v_cache, a.wo, layer.mlp_norm.weight,
                m.w13[: c.intermediate], m.w13[c.intermediate :], m.w2,
            ]))
        head = model.embed if model.lm_head is None else model.lm_head
        rows.append(_offsets(model.embed, [model.norm.weight, head]) + [0] * (NKIND - 2))
        self.table = torch.tensor(rows, dtype=torch.int64, device=device)
        # 16-element alignment of every offset lets the compiler keep 16-byte loads.
        self.aligned = all(off % 16 == 0 for row in rows for off in row)

        self.counts = task_counts(
            c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab_size,
            shape.pairs, shape.qkv_sub, shape.o_rows, shape.o_sub, shape.gu_rows, shape.gu_sub,
            shape.down_rows, shape.down_sub, shape.head_rows, shape.head_sub,
        )
        self.part_val = torch.empty(self.counts["head"], dtype=torch.float32, device=device)
        self.part_idx = torch.empty(self.counts["head"], dtype=torch.int32, device=device)
        # The queue, then the done counters, each COUNTER_STRIDE int32 apart.
        self.stride = COUNTER_STRIDE
        self.counters = torch.zeros((1 + 5 * c.layers + 1) * COUNTER_STRIDE, dtype=torch.int32, device=device)
        self.trace_buffer = torch.zeros(self.counts["total"] if trace else 1, 4, dtype=torch.int64, device=device)
        self.round_twice = rms_norm_rounds_twice(device, dtype)
        gpu = device.type == "cuda"
        sms = torch.cuda.get_device_properties(device).multi_processor_count if gpu else 1
        self.programs = sms * shape.programs_per_sm if gpu else 3  # a few, to exercise the empty queue
        self.constexprs = dict(
            L=c.layers, K=c.hidden, NQ=c.q_heads, NKV=c.kv_heads, D=c.head_dim, I=c.intermediate, V=c.vocab_size,
            KP2=triton.next_power_of_2(c.hidden), AP2=triton.next_power_of_2(c.q_heads * c.head_dim),
            IP2=triton.next_power_of_2(c.intermediate),
            PAIRS=shape.pairs, QKV_SUB=shape.qkv_sub, O_ROWS=shape.o_rows, O_SUB=shape.o_sub,
            GU_ROWS=shape.gu_rows, GU_SUB=shape.gu_sub, DOWN_ROWS=shape.down_rows, DOWN_SUB=shape.down_sub,
            HEAD_ROWS=shape.head_rows, HEAD_SUB=shape.head_sub, BLOCK_S=shape.block_s,
            REDUCE=min(4096, triton.next_power_of_2(self.counts["head"])),
            ROUND_TWICE=self.round_twice, UPCAST=not gpu, GPU=gpu, ALIGNED=self.aligned, TRACE=trace,
        )
        self.launch = {"num_warps": shape.num_warps}
        if gpu and shape.maxnreg is not None:
            self.launch["maxnreg"] = shape.maxnreg
        self.eps, self.scale = c.rms_eps, c.head_dim**-0.5
        self.compiled = None  # the launched kernel (registers, spills) after the first call

    def counter_values(self) -> list[int]:
        """The queue position and the done counters after a step (for tests)."""
        return self.counters[:: self.stride].tolist()

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        from perfdoctor.engine.kernels.megakernel import megakernel

        self.counters.zero_()
        k_cache = self.model.layers[0].attn.k_cache
        self.compiled = megakernel[(self.programs,)](
            self.model.embed, self.table, self.cos, self.sin, token, pos,
            self.h, self.q, self.attn, self.act, self.logits, self.part_val, self.part_idx, self.next_token,
            self.counters, self.counters[self.stride :], self.trace_buffer,
            k_cache.stride(0), k_cache.stride(1), self.eps, self.scale,
            **self.constexprs, **self.launch,
        )
        return self.next_token


def _interpreted() -> bool:
    """Whether the megakernel runs on Triton's CPU interpreter (as `fused._interpreted`)."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction

    from perfdoctor.engine.kernels.megakernel import megakernel

    return bool(knobs.runtime.interpret) and isinstance(megakernel, InterpretedFunction)


def megakernel_step(model: Transformer):  # -> generate.Step
    """The megakernel step, in a CUDA graph on a GPU (the `megakernel` variant's factory)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        raise BadInput("the megakernel variant needs triton (pip install triton)") from None
    if model.embed.device.type != "cuda":
        if not _interpreted():
            raise BadInput("the megakernel variant needs a CUDA device (or TRITON_INTERPRET=1 on a CPU)")
        return MegaKernels(model)
    from perfdoctor.engine.graphs import GraphedStep

    return GraphedStep(MegaKernels(model))
