#!/usr/bin/env python3
"""Evaluation only, several passes over one DataLoader: the ``validate()`` of PyTorch's
ImageNet example (``model.eval()``, ``torch.no_grad()``, an ``AverageMeter`` of batch times,
``end = time.time()`` at each batch's end), run ``--passes`` times as a benchmark of a
model's evaluation repeats it. No optimizer. An MLP on synthetic features, so it runs
anywhere; each pass runs its loader to the end (StopIteration), or with ``--stop-at-len`` to
its length, as Lightning's loops do (no fetch raises). With ``--write-every K --out-dir D``
it also keeps each batch's features (the last hidden layer, as an embedding job does) and
writes them with ``torch.save`` every K batches, as Lightning's ``BasePredictionWriter``
with ``write_interval="batch"`` or an offline feature-extraction script writes its shards.

    python eval_loop.py                           # 3 passes of 16 batches
    python eval_loop.py --passes 5 --device cuda
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.first = 0.0, 0, None

    def update(self, val, n=1):
        if self.first is None:
            self.first = val  # the run's first batch: CUDA start-up and the loader's first fetch
        self.sum += val * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def validate(loader, model, args, batch_time, pass_no=0):
    model.eval()
    correct = seen = 0
    shard = []
    end = time.time()
    with torch.no_grad():
        # Lightning's loops stop at the loader's length: no fetch raises StopIteration
        for i, (x, y) in (zip(range(len(loader)), loader) if args.stop_at_len else enumerate(loader)):
            if i == args.max_batches:
                break
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            if args.write_every:
                features = model[:-1](x)  # the embedding: the last hidden layer
                shard.append(features.cpu())
                logits = model[-1](features)
                if (i + 1) % args.write_every == 0:
                    torch.save(torch.cat(shard), os.path.join(args.out_dir, f"features_{pass_no}_{i}.pt"))
                    shard = []
            else:
                logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            batch_time.update(time.time() - end)
            end = time.time()
    return 100.0 * correct / max(seen, 1)


def main():
    p = argparse.ArgumentParser(description="Evaluation loop over a DataLoader, several passes (synthetic data)")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--batches", type=int, default=16, help="batches per pass")
    p.add_argument("--max-batches", type=int, default=-1, help="end each pass after this many batches")
    p.add_argument("--stop-at-len", action="store_true", help="stop each pass at len(loader), never exhausting it (as Lightning does)")
    p.add_argument("--batch-size", "-b", type=int, default=64)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--device", default="cpu")
    p.add_argument("--write-every", type=int, default=0, help="save the batches' features with torch.save every K batches (0: never)")
    p.add_argument("--out-dir", default=".", help="where --write-every writes its files")
    args = p.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 10)).to(args.device)
    n = args.batches * args.batch_size
    loader = DataLoader(TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,))), batch_size=args.batch_size)
    batch_time = AverageMeter()
    for i in range(args.passes):
        print(f" * pass {i} Acc@1 {validate(loader, model, args, batch_time, i):.3f}")
    print(f"Eval: {batch_time.avg * 1e3:.3f} ms/batch over {batch_time.count} batches")
    after_first = (batch_time.sum - (batch_time.first or 0.0)) / max(batch_time.count - 1, 1) * 1e3
    print("RESULT " + json.dumps({"program": "eval_loop", "step": "evaluation batch", "batches": batch_time.count,
                                  "passes": args.passes, "ms_per_batch": batch_time.avg * 1e3, "ms_per_step": after_first,
                                  "ms_first_batch": (batch_time.first or 0.0) * 1e3}))


if __name__ == "__main__":
    main()
