#!/usr/bin/env python3
"""A training loop on Lightning Fabric as litgpt's ``pretrain.py`` writes it (needs
``lightning``): ``fabric = L.Fabric(accelerator=..., devices=1, precision=...)``,
``fabric.launch()``, ``model, optimizer = fabric.setup(model, optimizer)``,
``fabric.setup_dataloaders(loader)``; per micro-batch ``is_accumulating = iter_num %
--accum != 0``, ``with fabric.no_backward_sync(model, enabled=is_accumulating)``: the forward,
the loss and ``fabric.backward(loss / --accum)``; on the last micro-batch of each group
``fabric.clip_gradients(model, optimizer, max_norm=1.0)``, ``optimizer.step()``,
``optimizer.zero_grad()``, the learning rate set by hand (warm-up then cosine, litgpt's
``get_lr``), and every ``--log-every`` optimizer steps ``fabric.print`` of the loss's
``.item()``. A small GPT (token and position embeddings, ``nn.TransformerEncoderLayer``
blocks with a causal mask, a tied head) on random token ids from a ``Dataset``.

Its own timer: ``time.perf_counter()`` per optimizer step (from one step's return to the
next's, its micro-batches and their fetches included): RESULT's ``ms_each``,
``ms_per_step`` (their mean after ``--warmup``), ``optimizer_steps``.

    python fabric_train.py                                   # CUDA, bf16-mixed
    python fabric_train.py --device cpu --precision 32-true --layers 2 --dim 64 --steps 12 --accum 2
"""
import argparse
import json
import math
import time

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser(description="GPT pretraining on Lightning Fabric, litgpt's loop")
p.add_argument("--device", default="cuda")
p.add_argument("--precision", default="bf16-mixed")
p.add_argument("--layers", type=int, default=6)
p.add_argument("--dim", type=int, default=384)
p.add_argument("--heads", type=int, default=6)
p.add_argument("--vocab", type=int, default=4096)
p.add_argument("--block", type=int, default=128)
p.add_argument("--micro-batch", type=int, default=8)
p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
p.add_argument("--steps", type=int, default=60, help="optimizer steps")
p.add_argument("--warmup", type=int, default=5, help="optimizer steps left out of the mean")
p.add_argument("--lr", type=float, default=6e-4)
p.add_argument("--log-every", type=int, default=5)
args = p.parse_args()


class RandomTokens(Dataset):
    def __init__(self, n, block, vocab):
        self.data = torch.randint(0, vocab, (n, block + 1))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.dim)
        self.wpe = nn.Embedding(args.block, args.dim)
        layer = nn.TransformerEncoderLayer(args.dim, args.heads, 4 * args.dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(args.dim)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(args.block), persistent=False)

    def forward(self, idx):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
        return self.ln_f(x) @ self.wte.weight.T


def get_lr(it, warmup_iters, max_iters):
    if it < warmup_iters:
        return args.lr * it / warmup_iters
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return 0.1 * args.lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * 0.9 * args.lr


fabric = L.Fabric(accelerator=args.device, devices=1, precision=args.precision)
fabric.launch()
fabric.seed_everything(1337)
with fabric.init_module():
    model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
model, optimizer = fabric.setup(model, optimizer)
loader = DataLoader(RandomTokens(args.micro_batch * args.accum * (args.steps + 1), args.block, args.vocab),
                    batch_size=args.micro_batch, shuffle=True)
loader = fabric.setup_dataloaders(loader)

model.train()
times, step_count, iter_num = [], 0, 0
t0 = time.perf_counter()
for batch in loader:
    if step_count >= args.steps:
        break
    iter_num += 1
    is_accumulating = iter_num % args.accum != 0
    for group in optimizer.param_groups:
        group["lr"] = get_lr(step_count, 2, args.steps)
    input_ids, targets = batch[:, :-1], batch[:, 1:]
    with fabric.no_backward_sync(model, enabled=is_accumulating):
        logits = model(input_ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        fabric.backward(loss / args.accum)
    if not is_accumulating:
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        step_count += 1
        if step_count % args.log_every == 0:
            fabric.print(f"iter {iter_num} step {step_count}: loss {loss.item():.4f}")
        if args.device == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        times.append((now - t0) * 1e3)
        t0 = now

timed = times[args.warmup:]
print("RESULT " + json.dumps({"ms_each": times, "ms_per_step": sum(timed) / len(timed), "optimizer_steps": step_count,
                              "micro_batches": iter_num, "accum": args.accum, "precision": args.precision}))
