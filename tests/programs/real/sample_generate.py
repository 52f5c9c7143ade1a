#!/usr/bin/env python3
"""Sampling generation written by hand, the way minGPT/nanoGPT-style scripts and chat demos
do it: a small GPT whose attention keeps its KV cache as a Python list of ``(k, v)``
tensors grown by ``torch.cat``; per generation one prefill forward over the prompt, then
one forward per token on the last token; sampling on the host: the last logits copied to
the CPU, temperature, top-p (nucleus) with ``sort`` / ``cumsum``, ``torch.multinomial``,
and the loop stops at the end-of-sequence token (``--eos``) or ``--max-new-tokens``, so the
generations have different lengths. Each generation timed whole (``synchronize`` +
``perf_counter``); the first ``--warmup`` generations are left out.

    python sample_generate.py                       # CUDA
    python sample_generate.py --device cpu --layers 2 --dim 64 --vocab 64
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, past=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.proj(y.transpose(1, 2).reshape(b, t, c)), (k, v)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, past=None):
        a, present = self.attn(self.ln1(x), past)
        x = x + a
        return x + self.mlp(self.ln2(x)), present


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, past_key_values=None):
        start = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.lm_head(self.ln_f(x)), presents


def sample_top_p(logits, temperature, top_p, generator):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, sorted_idx = torch.sort(probs, descending=True)
    cum = torch.cumsum(sorted_probs, dim=-1)
    sorted_probs[cum - sorted_probs > top_p] = 0.0
    sorted_probs /= sorted_probs.sum()
    return sorted_idx[torch.multinomial(sorted_probs, 1, generator=generator)].item()


@torch.no_grad()
def generate(model, prompt, args, generator):
    logits, past = model(prompt)
    out = []
    for _ in range(args.max_new_tokens):
        tok = sample_top_p(logits[0, -1].float().cpu(), args.temperature, args.top_p, generator)
        out.append(tok)
        if tok == args.eos:
            break
        logits, past = model(torch.tensor([[tok]], device=prompt.device), past)
    return out


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="top-p sampling with a list KV cache, stopping at EOS")
    p.add_argument("--device", default="cuda")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--generations", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--eos", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(0)
    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.prompt_len + args.max_new_tokens + 1).to(args.device).eval()
    gen = torch.Generator().manual_seed(args.seed)
    lengths, ms_each, forwards, warmup_forwards = [], [], 0, 0
    for g in range(args.warmup + args.generations):
        prompt = torch.randint(1, args.vocab, (1, args.prompt_len), generator=gen).to(args.device)
        sync(args.device)
        t0 = time.perf_counter()
        out = generate(model, prompt, args, gen)
        sync(args.device)
        ms = (time.perf_counter() - t0) * 1e3
        # forwards: the prefill and one per sampled token but EOS (a generation that reached
        # the limit ran one forward more than it used, as loops of this shape do)
        n_fwd = len(out) + (out[-1] != args.eos)
        print(f"generation {g}: {len(out)} tokens{' (EOS)' if out[-1] == args.eos else ''}, {ms:.1f} ms")
        if g < args.warmup:
            warmup_forwards += n_fwd
        else:
            lengths.append(len(out))
            ms_each.append(ms)
            forwards += n_fwd
    total = sum(ms_each)
    print(f"{sum(lengths)} tokens in {total:.1f} ms: {total / sum(lengths):.2f} ms/token")
    print("RESULT " + json.dumps({"program": "sample_generate", "step": "one token (a forward: the prefill or a decode)",
                                  "generations": args.generations, "warmup_generations": args.warmup,
                                  "lengths": lengths, "tokens": sum(lengths), "forwards": forwards, "warmup_forwards": warmup_forwards,
                                  "ms_each": ms_each, "ms_per_step": total / forwards, "ms_per_token": total / sum(lengths),
                                  "tokens_per_s": sum(lengths) / total * 1e3}))


if __name__ == "__main__":
    main()
