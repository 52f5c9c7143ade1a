#!/usr/bin/env python3
"""DP-SGD's data path as Opacus builds it (``make_private`` + ``BatchMemoryManager``, the
CIFAR-10 tutorial's shape), without Opacus: each logical batch Poisson-sampled (every sample
in with probability batch/N, as its ``UniformWithReplacementSampler``), split into physical
batches of at most ``--physical`` (its ``BatchSplittingSampler``, whose ``len`` is only the
expected count: ceil(steps x batch / physical), fewer than it yields when a logical batch
needs one more), the gradients of a logical batch's physical ones accumulated, noise added
and one optimizer step at its end (``DPOptimizer`` skips the others). A small GroupNorm CNN
on synthetic CIFAR-shaped data, RMSprop, ``--epochs`` passes.

Its own timer: ``perf_counter`` at each optimizer step (one logical batch, 4-5 physical ones
at the defaults); ``RESULT``'s ``ms_each`` those, after ``--warmup`` of them.

    python poisson_train.py --epochs 2
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PoissonBatches:
    """Each of ``steps`` batches holds every sample with probability ``rate``."""

    def __init__(self, n, rate, steps, generator):
        self.n, self.rate, self.steps, self.generator = n, rate, steps, generator

    def __len__(self):
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            yield (torch.rand(self.n, generator=self.generator) < self.rate).nonzero().flatten().tolist()


class SplitBatches:
    """The logical batches of ``sampler`` in physical ones of at most ``physical``; ``ends``
    says whether the batch just yielded ended its logical one (what Opacus' optimizer reads to skip)."""

    def __init__(self, sampler, physical, expected):
        self.sampler, self.physical, self.expected = sampler, physical, expected
        self.ends = False

    def __len__(self):  # Opacus': an estimate
        return math.ceil(len(self.sampler) * self.expected / self.physical)

    def __iter__(self):
        for batch in self.sampler:
            parts = [batch[i:i + self.physical] for i in range(0, len(batch), self.physical)] or [[]]
            for k, part in enumerate(parts):
                self.ends = k == len(parts) - 1
                yield part


def main():
    p = argparse.ArgumentParser(description="DP-SGD's Poisson-sampled logical batches in physical ones")
    p.add_argument("--samples", type=int, default=5120)
    p.add_argument("--batch", type=int, default=256, help="the logical batch's expected size")
    p.add_argument("--physical", type=int, default=64, help="max_physical_batch_size")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--noise", type=float, default=1.0, help="noise multiplier")
    p.add_argument("--warmup", type=int, default=2, help="optimizer steps before the timer counts")
    args = p.parse_args()

    torch.manual_seed(0)
    x, y = torch.randn(args.samples, 3, 32, 32), torch.randint(0, 10, (args.samples,))
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.GroupNorm(4, 32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss(reduction="sum")
    split = SplitBatches(PoissonBatches(args.samples, args.batch / args.samples, args.samples // args.batch,
                                        torch.Generator().manual_seed(1)), args.physical, args.batch)
    loader = DataLoader(TensorDataset(x, y), batch_sampler=split)

    ms_each, physical, t0 = [], 0, time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        for images, target in loader:
            loss = criterion(model(images), target)
            loss.backward()  # accumulates over the logical batch's physical ones
            physical += 1
            if split.ends:  # the logical batch is complete: noise, average, step
                for q in model.parameters():
                    q.grad.add_(torch.randn_like(q.grad), alpha=args.noise).div_(args.batch)
                optimizer.step()
                optimizer.zero_grad()
                t1 = time.perf_counter()
                ms_each.append((t1 - t0) * 1e3)
                t0 = t1
        print(f"epoch {epoch}: {len(ms_each)} steps, loss {loss.item():.3f}")
    timed = ms_each[args.warmup:]
    print("RESULT " + json.dumps({"program": "poisson_train", "step": "one logical batch (one optimizer step, 4-5 physical batches)",
                                  "steps": len(ms_each), "physical_batches": physical, "loader_len": len(loader), "epochs": args.epochs,
                                  "warmup": args.warmup, "ms_each": [round(t, 3) for t in ms_each], "ms_per_step": sum(timed) / len(timed)}))


if __name__ == "__main__":
    main()
