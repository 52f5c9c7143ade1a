#!/usr/bin/env python3
"""An ensemble of sequence classifiers run side by side on a thread pool, as scripts write it
before reaching for ``torch.jit.fork`` (the TorchScript dynamic-parallelism tutorial's
ensemble in eager PyTorch): ``--models`` LSTM classifiers, per batch
``ThreadPoolExecutor.map`` calls each on the batch (torch releases the GIL inside its
operators, so the calls overlap), then the mean of their outputs.

Its own timer: ``time.perf_counter()`` around each batch (the fan-out, the calls, the mean);
RESULT's ``ms_each``, ``ms_per_step`` (their mean after ``--warmup``) and ``batches``.

    python ensemble_threads.py                              # 4 models, batch 16, cuda
    python ensemble_threads.py --device cpu --batches 40
"""
import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


class LSTMClassifier(nn.Module):
    def __init__(self, features, hidden, classes):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=20)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    models = [LSTMClassifier(32, 64, 4).to(device).eval() for _ in range(args.models)]
    x = torch.randn(args.batch, args.seq, 32, device=device)
    ms_each = []
    with torch.no_grad(), ThreadPoolExecutor(args.models) as pool:
        for _ in range(args.batches):
            t0 = time.perf_counter()
            outputs = list(pool.map(lambda model: model(x), models))
            votes = torch.stack(outputs).mean(0).argmax(-1).tolist()
            ms_each.append((time.perf_counter() - t0) * 1e3)
    steady = ms_each[args.warmup:]
    print(f"{sum(steady) / len(steady):.2f} ms per batch of {args.batch} ({len(votes)} votes)")
    print("RESULT " + json.dumps({"batches": args.batches, "ms_each": ms_each, "ms_per_step": sum(steady) / len(steady)}))


if __name__ == "__main__":
    main()
