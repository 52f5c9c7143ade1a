#!/usr/bin/env python3
"""A continuous-batching generation server loop in plain PyTorch (vLLM's shape, minus the
paging): a waiting queue of requests (random prompt lengths, random ``max_new_tokens``),
a slot KV cache preallocated per layer (``[slots, heads, max_len, head_dim]``), and a
scheduler loop whose every iteration (1) admits waiting requests into free slots, each
admitted one prefilled by its own forward over its prompt, (2) runs ONE decode forward
over every running request (tokens ``[B, 1]``, each at its own position, attention masked
to its own length), (3) samples greedily on the host (``.tolist()``) and retires the
requests that reached their length, freeing their slots. Requests arrive over time
(``--arrive-every``: one new request every k iterations after the first ``--slots``), so
the batch grows and shrinks. The model is a small GPT (``model(tokens, slots, starts)``
for both prefill and decode). The loop times each iteration; the first ``--warmup`` are
left out.

    python cont_batch.py                        # CUDA
    python cont_batch.py --device cpu --dim 64 --layers 2 --heads 4 --vocab 256 \
        --requests 24 --slots 8 --max-new 24 --max-prompt 32   # CPU
"""
import argparse
import json
import random
import time
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cache_k, cache_v, slots, starts):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        for b in range(B):  # write each request's new keys/values at its own positions
            s, p = int(slots[b]), int(starts[b])
            cache_k[s, :, p:p + T] = k[b]
            cache_v[s, :, p:p + T] = v[b]
        L = int(starts.max()) + T
        keys, vals = cache_k[slots, :, :L], cache_v[slots, :, :L]
        qpos = starts[:, None] + torch.arange(T, device=x.device)[None, :]           # [B, T]
        mask = torch.arange(L, device=x.device)[None, None, :] <= qpos[:, :, None]   # [B, T, L]
        y = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask[:, None])
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, dim, layers, heads, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens, slots, starts, caches):
        B, T = tokens.shape
        pos = starts[:, None] + torch.arange(T, device=tokens.device)[None, :]
        x = self.tok(tokens) + self.pos(pos)
        for blk, (ck, cv) in zip(self.blocks, caches):
            x = blk(x, ck, cv, slots, starts)
        return self.head(self.ln(x[:, -1]))


class Request:
    def __init__(self, rid, prompt, max_new):
        self.rid, self.prompt, self.max_new = rid, prompt, max_new
        self.out, self.slot, self.pos = [], None, 0


def main():
    p = argparse.ArgumentParser(description="continuous-batching decode loop")
    p.add_argument("--device", default="cuda")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--slots", type=int, default=32, help="max running requests")
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--max-prompt", type=int, default=128)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--arrive-every", type=int, default=2, help="a new request every k iterations")
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    dev = torch.device(args.device)
    max_len = args.max_prompt + args.max_new
    model = GPT(args.vocab, args.dim, args.layers, args.heads, max_len).to(dev).eval()
    hd = args.dim // args.heads
    caches = [(torch.zeros(args.slots, args.heads, max_len, hd, device=dev),
               torch.zeros(args.slots, args.heads, max_len, hd, device=dev)) for _ in range(args.layers)]

    incoming = deque(Request(i, [rng.randrange(args.vocab) for _ in range(rng.randint(4, args.max_prompt))],
                             rng.randint(max(2, args.max_new // 4), args.max_new)) for i in range(args.requests))
    waiting, running, done = deque(), [], []
    free = list(range(args.slots))
    for _ in range(min(args.slots, len(incoming))):
        waiting.append(incoming.popleft())

    times, batch_sizes, prefills, decodes = [], [], 0, 0
    it = 0
    with torch.inference_mode():
        while waiting or running or incoming:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if incoming and it % args.arrive_every == 0:
                waiting.append(incoming.popleft())
            # (1) admit: prefill each newly admitted request into a free slot
            while waiting and free:
                r = waiting.popleft()
                r.slot = free.pop()
                toks = torch.tensor([r.prompt], device=dev)
                logits = model(toks, torch.tensor([r.slot], device=dev), torch.tensor([0], device=dev), caches)
                prefills += 1
                r.out.append(int(logits.argmax(-1)))
                r.pos = len(r.prompt)
                running.append(r)
            # (2) one decode forward over the running batch
            if running:
                toks = torch.tensor([[r.out[-1]] for r in running], device=dev)
                slots = torch.tensor([r.slot for r in running], device=dev)
                starts = torch.tensor([r.pos for r in running], device=dev)
                logits = model(toks, slots, starts, caches)
                decodes += 1
                batch_sizes.append(len(running))
                # (3) sample on the host, retire finished requests
                for r, t in zip(running, logits.argmax(-1).tolist()):
                    r.out.append(t)
                    r.pos += 1
                still = []
                for r in running:
                    if len(r.out) >= r.max_new:
                        free.append(r.slot)
                        done.append(r)
                    else:
                        still.append(r)
                running = still
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            it += 1

    timed = times[args.warmup:]
    ms = sum(timed) / len(timed) * 1e3
    tokens = sum(len(r.out) for r in done)
    print(f"{len(done)} requests, {it} iterations, {tokens} tokens, mean batch {sum(batch_sizes) / len(batch_sizes):.1f}, "
          f"{ms:.3f} ms/iteration, {tokens / sum(times):.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "cont_batch", "step": "one scheduler iteration (admissions' prefills + one decode)",
                                  "iters": it, "warmup": args.warmup, "prefills": prefills, "decodes": decodes,
                                  "ms_per_step": ms, "ms_per_iter": ms, "tokens_per_s": tokens / sum(times),
                                  "ms_each": [t * 1e3 for t in times]}))


if __name__ == "__main__":
    main()
