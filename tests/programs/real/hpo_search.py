#!/usr/bin/env python3
"""A hyperparameter search the way Optuna's PyTorch example writes its objective
(optuna/examples/pytorch/pytorch_simple.py), without the library: each trial builds an MLP of
its own depth and width and the optimizer it draws (Adam, RMSprop or SGD), trains it a few
epochs over a DataLoader, evaluates after each epoch and stops early ("pruned") when its
accuracy is below the median of the earlier trials' at that epoch. The trials run one after
another, so the batches change pace at each trial's start: the first trial's model is the
largest. Times each training batch itself (its fetch, forward, backward and step).

    python hpo_search.py                      # 8 trials on cuda if present
    python hpo_search.py --device cpu --trials 6 --batches 20 --epochs 3
"""
import argparse
import json
import random
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, BATCH = 512, 10, 128
# (layers, width, optimizer, lr) per trial, as a sampler would draw them; the first is the largest
SPACE = [(3, 1024, "Adam", 1e-3), (2, 512, "RMSprop", 1e-3), (1, 128, "SGD", 0.05), (2, 256, "Adam", 3e-3),
         (1, 64, "SGD", 0.1), (3, 512, "RMSprop", 5e-4), (1, 256, "Adam", 1e-3), (2, 128, "SGD", 0.05)]


def define_model(layers: int, width: int) -> nn.Module:
    mods, inp = [], FEATURES
    for _ in range(layers):
        mods += [nn.Linear(inp, width), nn.ReLU(), nn.Dropout(0.2)]
        inp = width
    return nn.Sequential(*mods, nn.Linear(inp, CLASSES), nn.LogSoftmax(dim=1))


def main():
    p = argparse.ArgumentParser(description="A hyperparameter search over MLPs, trial after trial (synthetic data)")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batches", type=int, default=40, help="training batches per epoch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    torch.manual_seed(0)
    random.seed(0)
    w = torch.randn(FEATURES, CLASSES)
    x = torch.randn(args.batches * BATCH, FEATURES)
    train = DataLoader(TensorDataset(x, (x @ w).argmax(1)), batch_size=BATCH, shuffle=True)
    xv = torch.randn(4 * BATCH, FEATURES)
    valid = DataLoader(TensorDataset(xv, (xv @ w).argmax(1)), batch_size=BATCH)
    reported: dict[int, list[float]] = {}  # epoch -> the earlier trials' accuracies
    ms, per_trial = [], {}
    for trial in range(args.trials):
        layers, width, opt_name, lr = SPACE[trial % len(SPACE)]
        model = define_model(layers, width).to(args.device)
        optimizer = getattr(torch.optim, opt_name)(model.parameters(), lr=lr)
        mine = per_trial[trial] = []
        for epoch in range(args.epochs):
            model.train()
            t0 = time.perf_counter()
            for data, target in train:
                data, target = data.to(args.device), target.to(args.device)
                optimizer.zero_grad()
                loss = F.nll_loss(model(data), target)
                loss.backward()
                optimizer.step()
                if args.device == "cuda":
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
                mine.append((t1 - t0) * 1e3)
                t0 = t1
            model.eval()
            correct = 0
            with torch.no_grad():
                for data, target in valid:
                    correct += int((model(data.to(args.device)).argmax(1) == target.to(args.device)).sum())
            acc = correct / len(valid.dataset)
            earlier = reported.setdefault(epoch, [])
            pruned = len(earlier) >= 2 and acc < statistics.median(earlier)
            earlier.append(acc)
            if pruned:
                break
        ms += mine
        print(f"trial {trial}: {layers}x{width} {opt_name}, {len(mine)} batches, median {statistics.median(mine):.2f} ms")
    print("RESULT " + json.dumps({"step": "one training batch (fetch, forward, backward, optimizer step), every trial",
                                  "steps": len(ms), "ms_each": ms, "ms_per_step": statistics.mean(ms), "ms_median": statistics.median(ms),
                                  "per_trial": {t: len(v) for t, v in per_trial.items()}}))


if __name__ == "__main__":
    main()
