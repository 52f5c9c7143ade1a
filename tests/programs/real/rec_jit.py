#!/usr/bin/env python3
"""Recommendation-model inference, DLRM-style: sparse features looked up in
``nn.EmbeddingBag`` tables (``mode="sum"``, flat indices + offsets, each bag a different
length), a bottom MLP on the dense features, the pairwise dot-product interaction, a top
MLP and a sigmoid. The model is compiled to TorchScript the way deployment scripts did it
(``--jit script``: ``torch.jit.script``; ``--jit trace``: ``torch.jit.trace`` on an example
batch, then ``torch.jit.freeze``; ``--jit none``: eager), and served under
``torch.inference_mode()`` with ``torch.no_grad()`` nested inside (copied from an older
script). Every request batch is generated on the host (random ids, random bag lengths),
moved to the device, scored, and its click probabilities brought back with ``.cpu()``.
Each batch timed (``synchronize`` + ``perf_counter``); the first ``--warmup`` left out
(TorchScript's profiling executor optimises during its first runs).

    python rec_jit.py                          # CUDA, scripted
    python rec_jit.py --device cpu --jit trace --tables 4 --rows 1000
"""
import argparse
import json
import time
from typing import List

import torch
import torch.nn as nn


def mlp(sizes: List[int], last_relu: bool) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense: int, tables: int, rows: int, dim: int, bottom: List[int], top: List[int]):
        super().__init__()
        self.emb = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)])
        self.bot = mlp([dense] + bottom + [dim], True)
        n = tables + 1
        self.top = mlp([dim + n * (n - 1) // 2] + top + [1], False)

    def forward(self, dense_x: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense_x)
        feats = [x]
        for k, table in enumerate(self.emb):
            feats.append(table(indices[k], offsets[k]))
        t = torch.stack(feats, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        tri = torch.tril_indices(t.shape[1], t.shape[1], offset=-1, device=t.device)
        return torch.sigmoid(self.top(torch.cat([x, z[:, tri[0], tri[1]]], dim=1)))


def make_batch(batch, dense, tables, rows, max_bag, device, g):
    dense_x = torch.rand(batch, dense, generator=g)
    indices, offsets = [], []
    for _ in range(tables):
        lengths = torch.randint(1, max_bag + 1, (batch,), generator=g)
        indices.append(torch.randint(0, rows, (int(lengths.sum()),), generator=g).to(device))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]).to(device))
    return dense_x.to(device), indices, offsets


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="DLRM-style inference, TorchScript")
    p.add_argument("--device", default="cuda")
    p.add_argument("--jit", default="script", choices=["script", "trace", "none"])
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--dense", type=int, default=13)
    p.add_argument("--tables", type=int, default=26)
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--max-bag", type=int, default=20)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()

    torch.manual_seed(0)
    model = DLRM(args.dense, args.tables, args.rows, args.dim, [512, 256], [512, 256]).to(args.device).eval()
    g = torch.Generator().manual_seed(0)
    if args.jit == "script":
        model = torch.jit.script(model)
    elif args.jit == "trace":
        example = make_batch(args.batch, args.dense, args.tables, args.rows, args.max_bag, args.device, g)
        with torch.no_grad():
            model = torch.jit.freeze(torch.jit.trace(model, example))

    ms_each, clicks = [], 0
    with torch.inference_mode():
        with torch.no_grad():
            for i in range(args.warmup + args.batches):
                sync(args.device)
                t0 = time.perf_counter()
                dense_x, indices, offsets = make_batch(args.batch, args.dense, args.tables, args.rows, args.max_bag,
                                                       args.device, g)
                p_click = model(dense_x, indices, offsets).cpu()
                clicks += int((p_click > 0.5).sum())
                ms_each.append((time.perf_counter() - t0) * 1e3)
    timed = ms_each[args.warmup :]
    ms = sum(timed) / len(timed)
    print(f"{args.batches} batches of {args.batch} ({args.jit}): {ms:.2f} ms/batch, {args.batch / ms * 1e3:.0f} samples/s")
    print("RESULT " + json.dumps({"program": "rec_jit", "step": "one request batch: make, score, copy back",
                                  "jit": args.jit, "batches": args.batches, "warmup": args.warmup, "ms_each": ms_each,
                                  "ms_per_step": ms, "ms_per_batch": ms, "samples_per_s": args.batch / ms * 1e3}))


if __name__ == "__main__":
    main()
