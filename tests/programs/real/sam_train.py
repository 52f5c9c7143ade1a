#!/usr/bin/env python3
"""Sharpness-Aware Minimization as davda54/sam's README trains with it: a ``SAM`` optimizer
wrapping a base SGD (its own ``torch.optim.Optimizer`` subclass, written out here as that
repository has it), and per batch two forward-backward passes,
``optimizer.first_step(zero_grad=True)`` after the first (the ascent to the worst nearby
weights) and ``optimizer.second_step(zero_grad=True)`` after the second (back, then the base
optimizer's update). ``SAM.step`` itself is never called, so torch's ranges show the base
SGD's step once per batch and SAM's ``zero_grad`` twice. A wide-ResNet-ish MLP on random
features, a ``for`` loop over batches made on the device (no DataLoader); each batch timed,
the first ``--warmup`` left out.

    python sam_train.py                                  # CUDA
    python sam_train.py --device cpu --iters 30          # CPU
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"
        self.base_optimizer.step()  # do the actual "sharpness-aware" update
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
        closure = torch.enable_grad()(closure)  # the closure should do a full forward-backward pass
        self.first_step(zero_grad=True)
        closure()
        self.second_step()

    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
            for group in self.param_groups for p in group["params"] if p.grad is not None
        ]), p=2)


def smooth_crossentropy(pred, gold, smoothing=0.1):
    n_class = pred.size(1)
    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    return F.kl_div(input=F.log_softmax(pred, dim=1), target=one_hot, reduction="none").sum(-1)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.BatchNorm1d(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc(F.relu(self.norm(x)))


def main():
    p = argparse.ArgumentParser(description="SAM training (davda54/sam's README loop)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(nn.Linear(args.features, args.width), *[Block(args.width) for _ in range(args.depth)],
                          nn.Linear(args.width, args.classes)).to(device)
    optimizer = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9, weight_decay=5e-4)
    model.train()
    ms_each = []
    for i in range(args.iters):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        inputs = torch.randn(args.batch, args.features, device=device)
        targets = torch.randint(0, args.classes, (args.batch,), device=device)
        # first forward-backward pass
        loss = smooth_crossentropy(model(inputs), targets).mean()
        loss.backward()
        optimizer.first_step(zero_grad=True)
        # second forward-backward pass
        smooth_crossentropy(model(inputs), targets).mean().backward()
        optimizer.second_step(zero_grad=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms_each.append((time.perf_counter() - t0) * 1e3)
        if i % 20 == 0:
            print(f"iter {i} loss {loss.item():.4f}")
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    print(f"{len(timed)} iterations: {ms:.2f} ms/iter")
    print("RESULT " + json.dumps({"program": "sam_train", "step": "one batch: two forward-backward passes, SAM's two steps",
                                  "iters": args.iters, "warmup": args.warmup, "ms_each": ms_each, "ms_per_step": ms,
                                  "ms_per_iter": ms}))


if __name__ == "__main__":
    main()
