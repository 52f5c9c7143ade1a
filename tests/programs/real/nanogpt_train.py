#!/usr/bin/env python3
"""nanoGPT's train.py loop, condensed: ``get_batch`` slicing random windows of a token array
(numpy, no DataLoader), gradient accumulation (``--accum`` micro-steps, the next batch fetched
right after each forward), ``GradScaler`` (enabled on CUDA with fp16 autocast), gradient
clipping, ``zero_grad(set_to_none=True)``; ``estimate_loss()`` under ``@torch.no_grad()``
(``model.eval()``, ``--eval-iters`` batches of each split) at the top of every
``--eval-interval``-th iteration. Its timer is nanoGPT's: ``t0`` reset after each
evaluation, ``dt`` per iteration. A small GPT of ``nn.TransformerEncoderLayer`` blocks.

    python nanogpt_train.py                 # CUDA, fp16 autocast
    python nanogpt_train.py --device cpu    # CPU, no autocast
"""
import argparse
import json
import time
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, block):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True, norm_first=True)
                                     for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        logits = self.head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1)) if targets is not None else None
        return logits, loss


def main():
    p = argparse.ArgumentParser(description="nanoGPT's training loop")
    p.add_argument("--device", default="cuda")
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--max-iters", type=int, default=40)
    p.add_argument("--eval-interval", type=int, default=10)
    p.add_argument("--eval-iters", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(1337)
    device = args.device
    cuda = device.startswith("cuda")
    data = {split: np.random.randint(0, args.vocab, n).astype(np.uint16) for split, n in (("train", 500_000), ("val", 50_000))}

    def get_batch(split):
        d = data[split]
        ix = torch.randint(len(d) - args.block, (args.batch,))
        x = torch.stack([torch.from_numpy(d[i:i + args.block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + args.block].astype(np.int64)) for i in ix])
        if cuda:
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.block).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95))
    scaler = torch.amp.GradScaler("cuda" if cuda else "cpu", enabled=cuda)
    ctx = torch.autocast("cuda", dtype=torch.float16) if cuda else nullcontext()

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    X, Y = get_batch("train")
    t0, iter_num, ms_each = time.time(), 0, []
    while True:
        if iter_num % args.eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            t0 = time.time()  # (nanoGPT's t0 runs on; reset here so that dt is the iteration alone)
        for _ in range(args.accum):
            with ctx:
                _, loss = model(X, Y)
                loss = loss / args.accum
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        t1 = time.time()
        ms_each.append((t1 - t0) * 1e3)
        t0 = t1
        iter_num += 1
        if iter_num >= args.max_iters:
            break
    timed = ms_each[1:]
    ms = sum(timed) / len(timed)
    print("RESULT " + json.dumps({"program": "nanogpt_train", "step": "training iteration (its micro-steps)", "ms_per_step": round(ms, 4),
                                  "ms_per_iter": round(ms, 4), "iters": len(ms_each), "evaluations": -(-args.max_iters // args.eval_interval),
                                  "ms_each": [round(m, 4) for m in ms_each], "device": device}))


if __name__ == "__main__":
    main()
