"""The Llama decoder, batch 1, with a static KV cache: the whole model in one page.

Shapes drop the batch dimension: a forward pass takes `tokens` [T] and their positions
`pos` [T] (int64, on the model's device) and returns logits [T, vocab]. Prefill passes the
prompt; a decode step passes one token. Nothing in a step depends on a Python-side
position: RoPE rows are gathered with `pos`, the new K/V rows are written with
`index_copy_` at `pos`, and attention masks the static cache with `key <= pos`. So one
captured CUDA graph serves every position.

Two matrices are fused for fewer, larger matmuls (batch-1 decode is bound by reading
weights and by kernel launches, not by FLOPs): Q, K and V projections form `wqkv`, and the
MLP's gate and up projections form `w13`. `from_hf_state_dict` builds them from Hugging
Face parameter names.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfdoctor.engine.config import BadInput, ModelConfig


def rope_inv_freq(config: ModelConfig) -> Tensor:
    """Inverse frequencies of the rotary embedding, [head_dim / 2], float32.

    Pair i of a head rotates by position * theta^(-2i/head_dim). With llama3 scaling the
    low frequencies (wavelength above original_max_position / low_freq_factor) turn
    `factor` times slower, high ones (below original_max_position / high_freq_factor) stay,
    and the band between blends the two linearly in 1/wavelength.
    """
    d = config.head_dim
    inv = 1.0 / config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    s = config.rope_scaling
    if s is None:
        return inv
    wavelength = 2 * math.pi / inv
    # 1 where the original frequency is kept, 0 where it is divided by `factor`.
    keep = (s.original_max_position / wavelength - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    keep = keep.clamp(0.0, 1.0)
    return keep * inv + (1 - keep) * inv / s.factor


def rope_tables(config: ModelConfig, ctx: int) -> tuple[Tensor, Tensor]:
    """cos and sin for positions [0, ctx), each [ctx, head_dim] float32.

    Each frequency appears twice (first half, second half) because HF Llama weights pair
    dimension j with j + head_dim/2 (the "rotate half" layout), not neighbours.
    """
    angles = torch.outer(torch.arange(ctx, dtype=torch.float32), rope_inv_freq(config))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x [T, heads, head_dim] by the angles of its positions (cos, sin: [T, head_dim])."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    """Grouped-query attention over a static KV cache of `ctx` positions."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.q_heads, self.kv_heads, self.head_dim = config.q_heads, config.kv_heads, config.head_dim
        qkv_rows = (config.q_heads + 2 * config.kv_heads) * config.head_dim
        self.wqkv = nn.Parameter(torch.empty(qkv_rows, config.hidden))
        self.wo = nn.Parameter(torch.empty(config.hidden, config.q_heads * config.head_dim))
        self.register_buffer("k_cache", None, persistent=False)  # [KV, ctx, D], see setup_cache
        self.register_buffer("v_cache", None, persistent=False)

    def setup_cache(self, ctx: int, device: torch.device, dtype: torch.dtype) -> None:
        # Zeros, not empty: masked positions get probability 0, and 0 * NaN would be NaN.
        shape = (self.kv_heads, ctx, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)

    def forward(self, x: Tensor, pos: Tensor, cos: Tensor, sin: Tensor, blocked: Tensor) -> Tensor:
        T, H, KV, D = x.shape[0], self.q_heads, self.kv_heads, self.head_dim
        G = H // KV  # query heads sharing one K/V head
        qk, v = F.linear(x, self.wqkv).split([(H + KV) * D, KV * D], dim=-1)
        # Q and K take the same rotation: one RoPE call for both.
        q, k = apply_rope(qk.view(T, H + KV, D), cos, sin).split([H, KV], dim=1)
        self.k_cache.index_copy_(1, pos, k.transpose(0, 1))
        self.v_cache.index_copy_(1, pos, v.view(T, KV, D).transpose(0, 1))

        # Query head h reads K/V head h // G. Stack each group's G heads (times T rows) so
        # that one batched matmul per K/V head does the work, without copying the cache.
        q = q.view(T, KV, G, D).permute(1, 2, 0, 3).reshape(KV, G * T, D)
        scores = torch.bmm(q * D**-0.5, self.k_cache.transpose(1, 2))  # [KV, G*T, ctx]
        scores = scores.view(KV, G, T, -1).masked_fill_(blocked, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        out = torch.bmm(probs.view(KV, G * T, -1), self.v_cache)  # [KV, G*T, D]
        out = out.view(KV, G, T, D).permute(2, 0, 1, 3).reshape(T, H * D)
        return F.linear(out, self.wo)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up in one matrix `w13`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w13 = nn.Parameter(torch.empty(2 * config.intermediate, config.hidden))
        self.w2 = nn.Parameter(torch.empty(config.hidden, config.intermediate))

    def forward(self, x: Tensor) -> Tensor:
        gate, up = F.linear(x, self.w13).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.w2)


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden, config.rms_eps)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden, config.rms_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, pos: Tensor, cos: Tensor, sin: Tensor, blocked: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x), pos, cos, sin, blocked)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """Llama decoder for batch 1. Build it with `from_hf_state_dict`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Parameter(torch.empty(config.vocab_size, config.hidden))
        self.layers = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.hidden, config.rms_eps)
        self.lm_head = None if config.tied_embeddings else nn.Parameter(torch.empty(config.vocab_size, config.hidden))
        self.ctx = 0

    @classmethod
    def from_hf_state_dict(cls, config: ModelConfig, hf: dict[str, Tensor], ctx: int) -> Transformer:
        """Adopt HF-named weights (fusing QKV and gate/up) and allocate a `ctx`-position cache.

        The tensors' device and dtype become the model's.
        """
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(fuse_hf_state_dict(config, hf), assign=True)
        model.requires_grad_(False)
        model.setup_cache(ctx)
        return model

    def setup_cache(self, ctx: int) -> None:
        """Allocate the KV cache and RoPE tables for positions [0, ctx)."""
        if ctx > self.config.max_position:
            raise BadInput(f"ctx {ctx} exceeds the model's max_position {self.config.max_position}")
        device, dtype = self.embed.device, self.embed.dtype
        self.ctx = ctx
        for layer in self.layers:
            layer.attn.setup_cache(ctx, device, dtype)
        cos, sin = rope_tables(self.config, ctx)
        self.register_buffer("rope_cos", cos.to(device, dtype), persistent=False)
        self.register_buffer("rope_sin", sin.to(device, dtype), persistent=False)
        self.register_buffer("key_pos", torch.arange(ctx, device=device), persistent=False)

    def forward(self, tokens: Tensor, pos: Tensor) -> Tensor:
        """Logits [T, vocab] for `tokens` [T] at positions `pos` [T]; appends to the cache."""
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]
        # Query t may not see cache slots after its own position (the future, or stale
        # entries of an earlier generation). [T, ctx], broadcast over heads.
        blocked = self.key_pos[None, :] > pos[:, None]
        x = F.embedding(tokens, self.embed)
        for layer in self.layers:
            x = layer(x, pos, cos, sin, blocked)
        x = self.norm(x)
        return F.linear(x, self.embed if self.lm_head is None else self.lm_head)

    def weight_bytes_per_token(self) -> int:
        """Weight bytes one decode step must read.

        Every matrix is read once, except an untied input embedding, of which one row is.
        """
        total = sum(p.numel() * p.element_size() for p in self.parameters())
        if self.lm_head is not None:
            total -= (self.embed.shape[0] - 1) * self.embed.shape[1] * self.embed.element_size()
        return total


def hf_parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face Llama parameter names and shapes, in a fixed order."""
    c, d = config, config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, c.hidden)}
    for i in range(c.layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (c.hidden,)
        shapes[p + "self_attn.q_proj.weight"] = (c.q_heads * d, c.hidden)
        shapes[p + "self_attn.k_proj.weight"] = (c.kv_heads * d, c.hidden)
        shapes[p + "self_attn.v_proj.weight"] = (c.kv_heads * d, c.hidden)
        shapes[p + "self_attn.o_proj.weight"] = (c.hidden, c.q_heads * d)
        shapes[p + "post_attention_layernorm.weight"] = (c.hidden,)
        shapes[p + "mlp.gate_proj.weight"] = (c.intermediate, c.hidden)
        shapes[p + "mlp.up_proj.weight"] = (c.intermediate, c.hidden)
        shapes[p + "mlp.down_proj.weight"] = (c.hidden, c.intermediate)
    shapes["model.norm.weight"] = (c.hidden,)
    if not c.tied_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, c.hidden)
    return shapes


def fuse_hf_state_dict(config: ModelConfig, hf: dict[str, Tensor]) -> dict[str, Tensor]:
    """Map HF names to this model's, concatenating q/k/v and gate/up."""
    for name, shape in hf_parameter_shapes(config).items():
        if name not in hf:
            raise BadInput(f"weights lack {name}")
        if tuple(hf[name].shape) != shape:
            raise BadInput(f"{name} has shape {tuple(hf[name].shape)}, config says {shape}")
    out = {"embed": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    if not config.tied_embeddings:
        out["lm_head"] = hf["lm_head.weight"]
    for i in range(config.layers):
        p, q = f"model.layers.{i}.", f"layers.{i}."
        out[q + "attn_norm.weight"] = hf[p + "input_layernorm.weight"]
        out[q + "attn.wqkv"] = torch.cat([hf[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        out[q + "attn.wo"] = hf[p + "self_attn.o_proj.weight"]
        out[q + "mlp_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
        out[q + "mlp.w13"] = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])
        out[q + "mlp.w2"] = hf[p + "mlp.down_proj.weight"]
    return out
