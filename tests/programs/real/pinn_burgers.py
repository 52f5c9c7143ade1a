#!/usr/bin/env python3
"""A physics-informed neural network for the 1-D viscous Burgers equation, as the "PINNs in
PyTorch" tutorials and DeepXDE's examples train one: an MLP u(x, t) (tanh), collocation points
sampled once with requires_grad, the PDE residual by ``torch.autograd.grad(...,
create_graph=True)``, initial and boundary losses; Adam for a while, then L-BFGS
(``optimizer.step(closure)``, up to ``max_iter`` closures a step, a strong-Wolfe line search).

    u_t + u u_x - (0.01 / pi) u_xx = 0,  x in [-1, 1], t in [0, 1]
    u(x, 0) = -sin(pi x),  u(-1, t) = u(1, t) = 0

Its own timer: each Adam iteration and each L-BFGS ``step`` (with the closures it ran), in
RESULT's ``adam_ms`` and ``lbfgs_ms``.

    python pinn_burgers.py --adam-iters 150 --lbfgs-iters 15
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--adam-iters", type=int, default=150)
p.add_argument("--lbfgs-iters", type=int, default=15)
p.add_argument("--points", type=int, default=1000, help="collocation points")
p.add_argument("--edge-points", type=int, default=100, help="initial and boundary points")
args = p.parse_args()
torch.manual_seed(1234)
nu = 0.01 / math.pi


class PINN(nn.Module):
    def __init__(self, widths=(2, 32, 32, 32, 32, 1)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        for layer in self.layers:
            nn.init.xavier_normal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x, t):
        a = torch.cat([x, t], dim=1)
        for layer in self.layers[:-1]:
            a = torch.tanh(layer(a))
        return self.layers[-1](a)


model = PINN()
x_f = (torch.rand(args.points, 1) * 2 - 1).requires_grad_(True)
t_f = torch.rand(args.points, 1).requires_grad_(True)
x_ic = torch.rand(args.edge_points, 1) * 2 - 1
u_ic = -torch.sin(math.pi * x_ic)
t_bc = torch.rand(args.edge_points, 1)
x_bc = torch.where(torch.rand(args.edge_points, 1) < 0.5, -1.0, 1.0)


def loss_fn():
    u = model(x_f, t_f)
    u_x, u_t = torch.autograd.grad(u, (x_f, t_f), torch.ones_like(u), create_graph=True)
    u_xx = torch.autograd.grad(u_x, x_f, torch.ones_like(u_x), create_graph=True)[0]
    residual = u_t + u * u_x - nu * u_xx
    return (residual ** 2).mean() + ((model(x_ic, torch.zeros_like(x_ic)) - u_ic) ** 2).mean() + (model(x_bc, t_bc) ** 2).mean()


adam_ms, lbfgs_ms, closures = [], [], []
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(args.adam_iters):
    t0 = time.perf_counter()
    optimizer.zero_grad()
    loss = loss_fn()
    loss.backward()
    optimizer.step()
    adam_ms.append((time.perf_counter() - t0) * 1e3)
    if it % 50 == 0:
        print(f"Adam {it}: loss {loss.item():.4e}")

optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=20, history_size=50, line_search_fn="strong_wolfe")
calls = 0


def closure():
    global calls
    calls += 1
    optimizer.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss


for it in range(args.lbfgs_iters):
    calls = 0
    t0 = time.perf_counter()
    loss = optimizer.step(closure)
    lbfgs_ms.append((time.perf_counter() - t0) * 1e3)
    closures.append(calls)
    print(f"L-BFGS {it}: loss {loss.item():.4e}, {calls} closures")
print("RESULT " + json.dumps({"adam_ms": adam_ms, "lbfgs_ms": lbfgs_ms, "closures": closures,
                              "ms_per_step": sum(adam_ms) / max(len(adam_ms), 1)}))
