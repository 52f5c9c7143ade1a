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


class FusedKernels:
    """The fused decode step, `(token [1], pos [1]) -> next token [1]`, without a graph.

    Owns the activation buffers (the residual stream, q, the attention output, the MLP
    activation, the logits) and the scratch of the split reductions; everything else is the
    model's. The returned token buffer is overwritten by the next call; `logits` holds the
    last step's logits (in the model's dtype).
    """

    def __init__(self, model: Transformer, tuned: dict[str, dict[str, int]] = TUNED) -> None:
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
        # Gate and up are the two halves of the model's fused w13: views, no copy.
        self.w_gate = [layer.mlp.w13[: c.intermediate] for layer in model.layers]
        self.w_up = [layer.mlp.w13[c.intermediate :] for layer in model.layers]
        self.lm_head = model.embed if model.lm_head is None else model.lm_head
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
            # Layer 0 gathers the token's embedding row itself and seeds the residual h.
            first = {"token": token, "embed": m.embed} if i == 0 else {}
            norm_qkv_rope(
                self.h, layer.attn_norm.weight, a.wqkv, self.cos, self.sin, pos, self.q, a.k_cache, a.v_cache,
                q_heads=c.q_heads, kv_heads=c.kv_heads, **first, **norm, **cfg["norm_qkv_rope"],
            )
            decode_attention(self.q, a.k_cache, a.v_cache, pos, self.attn, self.attn_ws, **cfg["decode_attention"])
            gemv_residual(self.attn, a.wo, self.h, **cfg["o_proj"])
            norm_gate_up(self.h, layer.mlp_norm.weight, self.w_gate[i], self.w_up[i], self.act, **norm, **cfg["norm_gate_up"])
            gemv_residual(self.act, layer.mlp.w2, self.h, **cfg["down_proj"])
        norm_lm_head_argmax(
            self.h, m.norm.weight, self.lm_head, self.logits, self.next_token, self.argmax_ws,
            **norm, **cfg["norm_lm_head_argmax"],
        )
        return self.next_token


def _interpreted() -> bool:
    """Whether the kernels can run on Triton's CPU interpreter: TRITON_INTERPRET=1 is set
    now (Triton reads it again while launching) and was when the kernels were built."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction

    from perfdoctor.engine.kernels.gemv_residual import _gemv_residual_kernel

    return bool(knobs.runtime.interpret) and isinstance(_gemv_residual_kernel, InterpretedFunction)


def fused_step(model: Transformer):  # -> generate.Step
    """The fused Triton step, in a CUDA graph on a GPU (the `fused` variant's factory)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        raise BadInput("the fused variant needs triton (pip install triton)") from None
    if model.embed.device.type != "cuda":
        if not _interpreted():
            raise BadInput("the fused variant needs a CUDA device (or TRITON_INTERPRET=1 on a CPU)")
        return FusedKernels(model)
    from perfdoctor.engine.graphs import GraphedStep

    return GraphedStep(FusedKernels(model))
