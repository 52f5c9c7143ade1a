#!/usr/bin/env python3
"""A physics-informed neural network (Raissi et al.'s PINN, as its PyTorch ports write it):
an MLP u(x, t) fit to the 1-D viscous Burgers equation u_t + u u_x - nu u_xx = 0 on
collocation points, the residual's derivatives by ``torch.autograd.grad(...,
create_graph=True)`` (u_x, u_t, then u_xx from u_x: a graph through two gradients, then the
loss's backward), plus the initial and boundary conditions' losses. No DataLoader: the points
are made once. ``--optimizer lbfgs`` (the papers' choice): ``torch.optim.LBFGS(max_iter=
--max-iter, line_search_fn="strong_wolfe")`` and per outer iteration ``optimizer.step(closure)``,
the closure doing ``optimizer.zero_grad()``, the loss and its ``backward()`` — LBFGS calls it
up to max_iter + line-search times per step; ``adam``: one closure call per step. The loss
is printed every ``--log-every`` iterations; the first ``--warmup`` are left out of the timing.

    python pinn_train.py                        # CUDA
    python pinn_train.py --device cpu --width 32 --points 512 --iters 20 --max-iter 5   # CPU
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        layers, d = [], 2
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Tanh()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x, t):
        return self.net(torch.cat([x, t], dim=1))


def main():
    p = argparse.ArgumentParser(description="PINN for Burgers' equation")
    p.add_argument("--device", default="cuda")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--points", type=int, default=10000)
    p.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    p.add_argument("--max-iter", type=int, default=20, help="LBFGS max_iter per step")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device(args.device)
    nu = 0.01 / math.pi

    x_f = (torch.rand(args.points, 1, device=dev) * 2 - 1).requires_grad_(True)
    t_f = torch.rand(args.points, 1, device=dev).requires_grad_(True)
    n0 = max(2, args.points // 10)
    x_0 = torch.rand(n0, 1, device=dev) * 2 - 1
    t_0 = torch.zeros(n0, 1, device=dev)
    u_0 = -torch.sin(math.pi * x_0)
    t_b = torch.rand(n0, 1, device=dev)
    x_b = torch.where(torch.rand(n0, 1, device=dev) < 0.5, -1.0, 1.0)

    model = MLP(args.width, args.depth).to(dev)
    if args.optimizer == "lbfgs":
        optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=args.max_iter, history_size=50,
                                      tolerance_grad=1e-9, tolerance_change=1e-12, line_search_fn="strong_wolfe")
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    evals = [0]

    def closure():
        optimizer.zero_grad()
        u = model(x_f, t_f)
        u_x, u_t = torch.autograd.grad(u, (x_f, t_f), grad_outputs=torch.ones_like(u), create_graph=True)
        u_xx = torch.autograd.grad(u_x, x_f, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
        f = u_t + u * u_x - nu * u_xx
        loss = (f ** 2).mean() + ((model(x_0, t_0) - u_0) ** 2).mean() + (model(x_b, t_b) ** 2).mean()
        loss.backward()
        evals[0] += 1
        return loss

    times, evals_each = [], []
    for it in range(args.iters):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        e0 = evals[0]
        t0 = time.perf_counter()
        loss = optimizer.step(closure)
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.5f}")
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        evals_each.append(evals[0] - e0)

    timed = times[args.warmup:]
    ms = sum(timed) / len(timed) * 1e3
    print(f"{ms:.3f} ms/iteration, {sum(evals_each) / len(evals_each):.1f} closure calls per iteration")
    print("RESULT " + json.dumps({"program": "pinn_train", "optimizer": args.optimizer, "step": "one optimizer.step(closure)",
                                  "iters": args.iters, "warmup": args.warmup, "ms_per_step": ms, "ms_per_iter": ms,
                                  "closure_calls": evals_each, "ms_each": [t * 1e3 for t in times]}))


if __name__ == "__main__":
    main()
