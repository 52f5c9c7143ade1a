"""The `fused` variant: a decode step as 81 Triton kernels, captured in one CUDA graph.

The eager step launches about a thousand small kernels; the `graph` variant replays them
without launch overhead but still moves every intermediate through memory and leaves
gaps between kernels that each read a few kilobytes. Here every cheap operation rides
along with the matrix-vector product next to it (see `perfdoctor.engine.kernels`), so a
Llama layer is five kernels and the step is 5 * layers + 1:

    layer i:  norm_qkv_rope  decode_attention  gemv_residual(O)  norm_gate_up  gemv_residual(down)
    then:     norm_lm_head_argmax

Each kernel reads the token and position from device buffers, so the step is captured
once (the engine's `GraphedStep`) and replayed at every position. The model's own weights
and KV cache are used in place: the prefill runs eagerly and the fused steps continue
from its cache.

Rounding follows the eager model (see the kernels' docstrings), so the greedy tokens match
it for as long as accumulation order allows.

`fused-int8` is the same step on int8 copies of every matrix the kernels read (QKV, O,
gate/up, down, LM head; `perfdoctor.engine.quant`), quantised when the step is built: half
the weight bytes. The model keeps its own weights, which the prefill (and the embedding
gather of each step) still reads, so other variants can share the model.

Triton is imported only when a fused step is built, so `import perfdoctor.engine` works
without it. On a CPU the kernels only run under Triton's interpreter (TRITON_INTERPRET=1),
which the tests use with the tiny config.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from perfdoctor.engine.config import BadInput
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.quant import quantize_int8

# Launch shapes per kernel, tuned on an H200 at Llama-3.2-1B's sizes with
# `bench/kernels.py --tune` (see docs/kernels-notes.md for the table). block_n/pairs: rows
# per block; block_k: columns per loop step; num_stages - 1: weight tiles kept in flight.
TUNED: dict[str, dict[str, int]] = {
    "norm_qkv_rope": {"pairs": 4, "block_k": 256, "num_stages": 3},
    "decode_attention": {"block_s": 64, "num_warps": 4},
    "o_proj": {"block_n": 4, "block_k": 512, "num_stages": 3},
    "norm_gate_up": {"block_n": 16, "block_k": 256, "num_stages": 3},
    "down_proj": {"block_n": 4, "block_k": 512, "num_stages": 4},
    "norm_lm_head_argmax": {"block_n": 32, "block_k": 256, "num_stages": 3, "num_warps": 4},
}

# Launch shapes for int8 weights, chosen offline and timed on the H200 (2026-12-02,
# `bench/kernels.py --int8 --tune`: 0.737 ms per decode step, 1.22x fused; the best
# alternatives would save ~29 us, not adopted unmeasured end to end: docs/kernels-notes.md,
# "int8 outcome"). TUNED's
# tiles (rows x block_k) are kept, so each fp32 accumulator keeps its registers and each
# kernel its blocks per SM (offline sm_90 build: 48-141 registers, no spills, against 62-162
# for bf16); an int8 tile then holds half the bytes, so twice as many tiles stay in flight
# (num_stages - 1 doubled): the bytes in flight per block are TUNED's. Doubling block_k
# instead keeps the stages but doubles the accumulators (gate/up: 157 registers at 8 warps,
# one block per SM).
TUNED_INT8: dict[str, dict[str, int]] = {
    "norm_qkv_rope": {"pairs": 4, "block_k": 256, "num_stages": 5},
    "decode_attention": TUNED["decode_attention"],  # the KV cache stays in the model's dtype
    "o_proj": {"block_n": 4, "block_k": 512, "num_stages": 5},
    "norm_gate_up": {"block_n": 16, "block_k": 256, "num_stages": 5},
    "down_proj": {"block_n": 4, "block_k": 512, "num_stages": 7},
    "norm_lm_head_argmax": {"block_n": 32, "block_k": 256, "num_stages": 5, "num_warps": 4},
}


def rms_norm_rounds_twice(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this PyTorch's `F.rms_norm` rounds the normalised input to `dtype` before
    multiplying by the gain (the composite formula), rather than rounding once at the end
    (its fused kernels). Decided by trying both on random rows: the kernels must round
    where the eager model does for greedy tokens to agree."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(64, 512, generator=gen, device=device).to(dtype)
    g = (torch.rand(512, generator=gen, device=device) + 0.5).to(dtype)
    y = F.rms_norm(x, (512,), g, 1e-5)
    n = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    twice = (y == n.to(dtype) * g).sum().item()
    once = (y == (n * g.float()).to(dtype)).sum().item()
    return twice > once


def kernel_weight(w: Tensor, int8: bool) -> tuple[Tensor, Tensor | None]:
    """A matrix as the kernels take it: (the model's own, no scale), or (its int8 copy, the
    row scales)."""
    if not int8:
        return w, None
    q = quantize_int8(w)
    return q.q, q.scale


class FusedKernels:
    """The fused decode step, `(token [1], pos [1]) -> next token [1]`, without a graph.

    Owns the activation buffers (the residual stream, q, the attention output, the MLP
    activation, the logits) and the scratch of the split reductions; with `int8`, also the
    int8 weights and their scales. Everything else is the model's. The returned token
    buffer is overwritten by the next call; `logits` holds the last step's logits (in the
    model's dtype).
    """

    def __init__(self, model: Transformer, tuned: dict[str, dict[str, int]] | None = None, int8: bool = False) -> None:
        from perfdoctor.engine.kernels.decode_attention import attention_workspace
        from perfdoctor.engine.kernels.norm_lm_head_argmax import argmax_workspace

        c = model.config
        device, dtype = model.embed.device, model.embed.dtype
        self.model = model
        act = {"device": device, "dtype": dtype}
        self.h = torch.empty(c.hidden, **act)  # residual stream
        self.q = torch.empty(c.q_heads * c.head_dim, **act)
        self.attn = torch.empty(c.q_heads * c.head_dim, **act)
        self.act = torch.empty(c.intermediate, **act)
        self.logits = torch.empty(c.vocab_size, **act)
        self.next_token = torch.zeros(1, dtype=torch.long, device=device)
        half = c.head_dim // 2  # the tables repeat each frequency; the kernel needs one copy
        self.cos = model.rope_cos[:, :half].contiguous()
        self.sin = model.rope_sin[:, :half].contiguous()
        # (weights, row scales or None) per layer. Gate and up are the two halves of the
        # model's fused w13 (in bf16: views, no copy).
        self.qkv = [kernel_weight(layer.attn.wqkv, int8) for layer in model.layers]
        self.o = [kernel_weight(layer.attn.wo, int8) for layer in model.layers]
        self.gate = [kernel_weight(layer.mlp.w13[: c.intermediate], int8) for layer in model.layers]
        self.up = [kernel_weight(layer.mlp.w13[c.intermediate :], int8) for layer in model.layers]
        self.down = [kernel_weight(layer.mlp.w2, int8) for layer in model.layers]
        self.lm_head = kernel_weight(model.embed if model.lm_head is None else model.lm_head, int8)
        # The weight bytes one step reads (what `generate` declares for it): the matrices as
        # the kernels read them, the norms, and the token's embedding row unless the LM head
        # read is the embedding itself.
        tensors = [t for pair in (*self.qkv, *self.o, *self.gate, *self.up, *self.down, self.lm_head) for t in pair]
        tensors += [model.norm.weight, *(n.weight for layer in model.layers for n in (layer.attn_norm, layer.mlp_norm))]
        if self.lm_head[0] is not model.embed:
            tensors.append(model.embed[0])
        self.weight_bytes = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        tuned = tuned or (TUNED_INT8 if int8 else TUNED)
        self.cfg = {name: dict(cfg) for name, cfg in tuned.items()}
        # Workspace shapes are fixed by their block sizes; the launches take the rest.
        block_s = self.cfg["decode_attention"].pop("block_s")
        self.attn_ws = attention_workspace(c.kv_heads, c.q_heads // c.kv_heads, c.head_dim, model.ctx, device, block_s)
        block_n = self.cfg["norm_lm_head_argmax"].pop("block_n")
        self.argmax_ws = argmax_workspace(c.vocab_size, device, block_n)
        self.round_twice = rms_norm_rounds_twice(device, dtype)

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        from perfdoctor.engine.kernels.decode_attention import decode_attention
        from perfdoctor.engine.kernels.gemv_residual import gemv_residual
        from perfdoctor.engine.kernels.norm_gate_up import norm_gate_up
        from perfdoctor.engine.kernels.norm_lm_head_argmax import norm_lm_head_argmax
        from perfdoctor.engine.kernels.norm_qkv_rope import norm_qkv_rope

        m, c, cfg = self.model, self.model.config, self.cfg
        norm = {"eps": c.rms_eps, "round_twice": self.round_twice}
        for i, layer in enumerate(m.layers):
            a = layer.attn
            (wqkv, s_qkv), (wo, s_o), (wg, s_g), (wu, s_u), (w2, s_2) = (
                self.qkv[i], self.o[i], self.gate[i], self.up[i], self.down[i]
            )
            # Layer 0 gathers the token's embedding row itself and seeds the residual h.
            first = {"token": token, "embed": m.embed} if i == 0 else {}
            norm_qkv_rope(
                self.h, layer.attn_norm.weight, wqkv, self.cos, self.sin, pos, self.q, a.k_cache, a.v_cache,
                q_heads=c.q_heads, kv_heads=c.kv_heads, scale=s_qkv, **first, **norm, **cfg["norm_qkv_rope"],
            )
            decode_attention(self.q, a.k_cache, a.v_cache, pos, self.attn, self.attn_ws, **cfg["decode_attention"])
            gemv_residual(self.attn, wo, self.h, scale=s_o, **cfg["o_proj"])
            norm_gate_up(self.h, layer.mlp_norm.weight, wg, wu, self.act, scale_gate=s_g, scale_up=s_u,
                         **norm, **cfg["norm_gate_up"])
            gemv_residual(self.act, w2, self.h, scale=s_2, **cfg["down_proj"])
        w_head, s_head = self.lm_head
        norm_lm_head_argmax(
            self.h, m.norm.weight, w_head, self.logits, self.next_token, self.argmax_ws,
            scale=s_head, **norm, **cfg["norm_lm_head_argmax"],
        )
        return self.next_token


def _interpreted() -> bool:
    """Whether the kernels can run on Triton's CPU interpreter: TRITON_INTERPRET=1 is set
    now (Triton reads it again while launching) and was when the kernels were built."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction

    from perfdoctor.engine.kernels.gemv_residual import _gemv_residual_kernel

    return bool(knobs.runtime.interpret) and isinstance(_gemv_residual_kernel, InterpretedFunction)


def fused_step(model: Transformer, int8: bool = False):  # -> generate.Step
    """The fused Triton step, in a CUDA graph on a GPU (the `fused` variant's factory; with
    `int8`, the `fused-int8` one's)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        raise BadInput("the fused variant needs triton (pip install triton)") from None
    if model.embed.device.type != "cuda":
        if not _interpreted():
            raise BadInput("the fused variant needs a CUDA device (or TRITON_INTERPRET=1 on a CPU)")
        return FusedKernels(model, int8=int8)
    from perfdoctor.engine.graphs import GraphedStep

    return GraphedStep(FusedKernels(model, int8=int8))
