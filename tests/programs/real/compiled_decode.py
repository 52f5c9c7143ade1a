# Llama decode in the style of pytorch-labs/gpt-fast (generate.py + model.py), random
# weights: a Transformer with a static KV cache, prefill left eager, and
#     decode_one_token = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
# for the token-by-token loop (CUDA graphs on a GPU). Timed with its own
# torch.cuda.synchronize() + time.perf_counter() around the decode loop only.
#
#   python compiled_decode.py                              # Llama-3.2-1B shape, 200 tokens x 5
#   python compiled_decode.py --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab 256 \
#       --tokens 8 --generations 2 --device cpu --no-compile     # CPU smoke test
import argparse
import itertools
import json
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import functional as F


@dataclass
class ModelArgs:
    block_size: int = 2048
    vocab_size: int = 128256
    n_layer: int = 16
    n_head: int = 32
    dim: int = 2048
    intermediate_size: int = 8192
    n_local_heads: int = 8
    head_dim: int = 64
    rope_base: float = 500000.0
    norm_eps: float = 1e-5


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, n_heads, head_dim, dtype=torch.bfloat16):
        super().__init__()
        cache_shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        # input_pos: [S], k_val: [B, H, S, D]
        assert input_pos.shape[0] == k_val.shape[2]
        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val
        return k_out, v_out


class Transformer(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.freqs_cis: Optional[Tensor] = None
        self.mask_cache: Optional[Tensor] = None
        self.max_batch_size = -1
        self.max_seq_length = -1

    def setup_caches(self, max_batch_size, max_seq_length):
        if self.max_seq_length >= max_seq_length and self.max_batch_size >= max_batch_size:
            return
        head_dim = self.config.dim // self.config.n_head
        max_seq_length = find_multiple(max_seq_length, 8)
        self.max_seq_length = max_seq_length
        self.max_batch_size = max_batch_size
        dtype = self.output.weight.dtype
        for b in self.layers:
            b.attention.kv_cache = KVCache(max_batch_size, max_seq_length, self.config.n_local_heads, head_dim, dtype)
        self.freqs_cis = precompute_freqs_cis(self.config.block_size, head_dim, self.config.rope_base, dtype)
        self.causal_mask = torch.tril(torch.ones(self.max_seq_length, self.max_seq_length, dtype=torch.bool))

    def forward(self, idx: Tensor, input_pos: Optional[Tensor] = None) -> Tensor:
        assert self.freqs_cis is not None, "Caches must be initialized first"
        mask = self.causal_mask[None, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, input_pos, freqs_cis, mask)
        x = self.norm(x)
        logits = self.output(x)
        return logits


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x: Tensor, input_pos: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Attention(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        assert config.dim % config.n_head == 0
        total_head_dim = (config.n_head + 2 * config.n_local_heads) * config.head_dim
        # key, query, value projections for all heads, but in a batch
        self.wqkv = nn.Linear(config.dim, total_head_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)
        self.kv_cache = None
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.n_local_heads = config.n_local_heads
        self.dim = config.dim

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Optional[Tensor] = None) -> Tensor:
        bsz, seqlen, _ = x.shape
        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)
        q = q.view(bsz, seqlen, self.n_head, self.head_dim)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        q, k, v = map(lambda x: x.transpose(1, 2), (q, k, v))
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)
        k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.dim)
        y = self.wo(y)
        return y


class FeedForward(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def find_multiple(n: int, k: int) -> int:
    if n % k == 0:
        return n
    return n + k - (n % k)


def precompute_freqs_cis(seq_len: int, n_elem: int, base: float = 10000, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: (n_elem // 2)].float() / n_elem))
    t = torch.arange(seq_len, device=freqs.device)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    cache = torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1)
    return cache.to(dtype=dtype)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
            xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
        ],
        -1,
    )
    x_out2 = x_out2.flatten(3)
    return x_out2.type_as(x)


# ---- generate.py ----

def multinomial_sample_one_no_sync(probs_sort):  # Does multinomial sampling without a cuda synchronization
    q = torch.empty_like(probs_sort).exponential_(1)
    return torch.argmax(probs_sort / q, dim=-1, keepdim=True).to(dtype=torch.int)


def logits_to_probs(logits, temperature: float = 1.0, top_k: Optional[int] = None):
    logits = logits / max(temperature, 1e-5)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        pivot = v.select(-1, -1).unsqueeze(-1)
        logits = torch.where(logits < pivot, -float("Inf"), logits)
    probs = torch.nn.functional.softmax(logits, dim=-1)
    return probs


def sample(logits, temperature: float = 1.0, top_k: Optional[int] = None):
    probs = logits_to_probs(logits[0, -1], temperature, top_k)
    idx_next = multinomial_sample_one_no_sync(probs)
    return idx_next, probs


def prefill(model: Transformer, x: torch.Tensor, input_pos: torch.Tensor, **sampling_kwargs) -> torch.Tensor:
    # input_pos: [B, S]
    logits = model(x, input_pos)
    return sample(logits, **sampling_kwargs)[0]


def decode_one_token(model: Transformer, x: torch.Tensor, input_pos: torch.Tensor, **sampling_kwargs):
    # input_pos: [B, 1]
    assert input_pos.shape[-1] == 1
    logits = model(x, input_pos)
    return sample(logits, **sampling_kwargs)


def decode_n_tokens(model: Transformer, cur_token: torch.Tensor, input_pos: torch.Tensor, num_new_tokens: int,
                    callback=lambda _: _, **sampling_kwargs):
    new_tokens, new_probs = [], []
    for i in range(num_new_tokens):
        next_token, next_prob = decode_one_token(model, cur_token, input_pos, **sampling_kwargs)
        input_pos += 1
        new_tokens.append(next_token.clone())
        callback(new_tokens[-1])
        new_probs.append(next_prob.clone())
        cur_token = next_token.view(1, -1).clone()  # as gpt-fast: the graph output is overwritten by the next replay
    return new_tokens, new_probs


def device_sync(device):
    if "cuda" in device:
        torch.cuda.synchronize(device)


@torch.no_grad()
def generate(model: Transformer, prompt: torch.Tensor, max_new_tokens: int, device: str, **sampling_kwargs):
    """Returns (sequence, seconds spent decoding: every token after the prefill's first)."""
    T = prompt.size(0)
    T_new = T + max_new_tokens
    max_seq_length = min(T_new, model.config.block_size)
    dtype = prompt.dtype
    with torch.device(device):
        model.setup_caches(max_batch_size=1, max_seq_length=max_seq_length)

    empty = torch.empty(T_new, dtype=dtype, device=device)
    empty[:T] = prompt
    seq = empty
    input_pos = torch.arange(0, T, device=device)

    next_token = prefill(model, prompt.view(1, -1), input_pos, **sampling_kwargs).clone()
    seq[T] = next_token

    device_sync(device)
    t0 = time.perf_counter()
    input_pos = torch.tensor([T], device=device, dtype=torch.int)
    generated_tokens, _ = decode_n_tokens(model, next_token.view(1, -1), input_pos, max_new_tokens - 1, **sampling_kwargs)
    device_sync(device)
    decode_s = time.perf_counter() - t0
    seq[T + 1:] = torch.cat(generated_tokens)
    return seq, decode_s


def main():
    parser = argparse.ArgumentParser(description="gpt-fast style Llama decode (random weights)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--ffn-dim", type=int, default=None, help="default: 4 x dim")
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=200, help="max_new_tokens per generation")
    parser.add_argument("--generations", type=int, default=5, help="timed generations (num_samples)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--device", type=str, default="cuda")
    args = parser.parse_args()

    device = args.device
    precision = torch.bfloat16 if "cuda" in device else torch.float32
    torch.manual_seed(1234)
    config = ModelArgs(block_size=max(2048, args.prompt_len + args.tokens), vocab_size=args.vocab, n_layer=args.layers,
                       n_head=args.heads, dim=args.dim, intermediate_size=args.ffn_dim or 4 * args.dim,
                       n_local_heads=args.kv_heads, head_dim=args.dim // args.heads)
    t0 = time.time()
    with torch.device("meta"):
        model = Transformer(config)
    model = model.to_empty(device=device)
    for p in model.parameters():  # random weights: no checkpoint here
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
        else:
            torch.nn.init.ones_(p)
    model = model.to(dtype=precision).eval()
    device_sync(device)
    print(f"Time to load model: {time.time() - t0:.02f} seconds")
    model_size = sum(p.numel() * p.dtype.itemsize for p in itertools.chain(model.parameters(), model.buffers()))

    prompt = torch.randint(0, args.vocab, (args.prompt_len,), dtype=torch.int, device=device)

    global decode_one_token, prefill
    if args.compile:
        decode_one_token = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)

    aggregate = {"tokens_per_sec": [], "decode_s": [], "decoded": []}
    start = -1 if args.compile else 0
    for i in range(start, args.generations):
        device_sync(device)
        t0 = time.perf_counter()
        y, decode_s = generate(model, prompt, args.tokens, device, temperature=args.temperature, top_k=args.top_k)
        device_sync(device)
        t = time.perf_counter() - t0
        if i == -1:
            print(f"Compilation time: {t:.2f} seconds")
            continue
        tokens_generated = y.size(0) - prompt.size(0)
        tokens_sec = tokens_generated / t
        aggregate["tokens_per_sec"].append(tokens_sec)
        aggregate["decode_s"].append(decode_s)
        aggregate["decoded"].append(tokens_generated - 1)
        print(f"Time for inference {i + 1}: {t:.02f} sec total, {tokens_sec:.02f} tokens/sec")
        print(f"Bandwidth achieved: {model_size * tokens_sec / 1e9:.02f} GB/s")
    print("==========")
    print(f"Average tokens/sec: {sum(aggregate['tokens_per_sec']) / len(aggregate['tokens_per_sec']):.2f}")
    if "cuda" in device:
        print(f"Memory used: {torch.cuda.max_memory_reserved() / 1e9:.02f} GB")
    decoded = sum(aggregate["decoded"])
    decode_s = sum(aggregate["decode_s"])
    ms = decode_s / max(decoded, 1) * 1e3
    print(f"Decode only: {ms:.3f} ms/token, {decoded / decode_s:.1f} tokens/s ({decoded} tokens)")
    print("RESULT " + json.dumps({"program": "compiled_decode", "step": "decode token", "ms_per_step": round(ms, 4),
                                  "ms_per_token": round(ms, 4), "tokens_per_s": round(decoded / decode_s, 2),
                                  "tokens": decoded, "compile": args.compile, "device": device}))


if __name__ == "__main__":
    main()
