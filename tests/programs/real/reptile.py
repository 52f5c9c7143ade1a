#!/usr/bin/env python3
"""Reptile on sine-wave regression, as the Reptile paper's sine example (and its PyTorch
ports) write it: per outer iteration a task (a sine of random amplitude and phase), a copy
of the model (``copy.deepcopy``) and a new ``torch.optim.SGD`` on it, ``--inner-steps``
steps on the task's points (``zero_grad``, MSE, ``backward``, ``step``), then the
meta-update by hand: the model's weights moved towards the copy's by an outer step size
annealed over the run. No DataLoader. An evaluation on a held-out task every
``--eval-every`` iterations (``torch.no_grad()``).

Its own timer: ``time.perf_counter()`` per outer iteration (the copy, the inner steps and
the meta-update; the evaluation after it is left out); RESULT's ``ms_each`` and
``ms_per_step`` (their mean after ``--warmup``).

    python reptile.py                            # the paper's sizes: 64 hidden, 10 points, 32 inner steps
    python reptile.py --device cpu --iterations 60 --inner-steps 5
"""
import argparse
import copy
import json
import math
import random
import time

import torch
import torch.nn as nn


def task(rng, n, device):
    amplitude, phase = rng.uniform(0.1, 5.0), rng.uniform(0, math.pi)
    x = torch.linspace(-5, 5, n, device=device).unsqueeze(1)
    return x, amplitude * torch.sin(x + phase)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--points", type=int, default=10)
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--inner-steps", type=int, default=32)
    p.add_argument("--inner-lr", type=float, default=0.02)
    p.add_argument("--outer-lr", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    rng = random.Random(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, args.hidden), nn.Tanh(), nn.Linear(args.hidden, args.hidden), nn.Tanh(),
                          nn.Linear(args.hidden, 1)).to(args.device)
    ms_each, evals = [], 0
    for iteration in range(args.iterations):
        t0 = time.perf_counter()
        x, y = task(rng, args.points, args.device)
        learner = copy.deepcopy(model)
        inner = torch.optim.SGD(learner.parameters(), lr=args.inner_lr)
        for _ in range(args.inner_steps):
            inner.zero_grad()
            nn.functional.mse_loss(learner(x), y).backward()
            inner.step()
        outer_lr = args.outer_lr * (1 - iteration / args.iterations)  # annealed, as the paper's
        with torch.no_grad():
            for p_meta, p_task in zip(model.parameters(), learner.parameters()):
                p_meta += outer_lr * (p_task - p_meta)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        ms_each.append((time.perf_counter() - t0) * 1e3)
        if (iteration + 1) % args.eval_every == 0:
            with torch.no_grad():
                x_test, y_test = task(rng, args.points, args.device)
                loss = nn.functional.mse_loss(model(x_test), y_test).item()
            evals += 1
            print(f"iteration {iteration + 1}: meta-model loss on a new task {loss:.3f}")
    timed = ms_each[args.warmup:]
    print("RESULT " + json.dumps({"iterations": args.iterations, "inner_steps": args.inner_steps, "evals": evals,
                                  "warmup": args.warmup, "ms_each": ms_each, "ms_per_step": sum(timed) / len(timed)}))


if __name__ == "__main__":
    main()
