#!/usr/bin/env python3
"""Bayesian optimisation, the closed loop of BoTorch's "Getting started", written out with
what BoTorch builds it from: per iteration the observations standardised by an outcome
transform (``Standardize``, an ``nn.Module`` called once per fit), an exact GP whose kernel
calls its input transform (``Normalize``, an ``nn.Module``) on every evaluation, the GP
itself a plain object (gpytorch's ``Module.__call__`` never goes through
``nn.Module.__call__``), fitted by scipy's L-BFGS-B over a torch closure
(``fit_gpytorch_mll``), then log expected improvement maximised from random restarts by
scipy again (``optimize_acqf``), and the objective (Hartmann-6, an ``nn.Module`` as BoTorch's
test functions are) evaluated at the candidate. No optimizer of torch, no DataLoader.

Its own timer: ``perf_counter`` around each iteration (fit, acquisition, evaluation).

    python bo_loop.py --iterations 20
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
from scipy.optimize import minimize

torch.set_default_dtype(torch.float64)


class Normalize(nn.Module):
    """The input transform: the inputs scaled to the unit cube."""

    def __init__(self, bounds):
        super().__init__()
        self.register_buffer("lo", bounds[0])
        self.register_buffer("span", bounds[1] - bounds[0])

    def forward(self, x):
        return (x - self.lo) / self.span


class Standardize(nn.Module):
    """The outcome transform: zero mean, unit variance."""

    def forward(self, y):
        mean, std = y.mean(0), y.std(0).clamp_min(1e-9)
        return (y - mean) / std


class Hartmann6(nn.Module):
    """BoTorch's Hartmann-6 test function, negated (a maximisation)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("alpha", torch.tensor([1.0, 1.2, 3.0, 3.2]))
        self.register_buffer("A", torch.tensor([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                                                [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]))
        self.register_buffer("P", 1e-4 * torch.tensor([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                                                       [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]))

    def forward(self, x):
        inner = (self.A * (x.unsqueeze(-2) - self.P) ** 2).sum(-1)
        return (self.alpha * torch.exp(-inner)).sum(-1)


class ExactGP:
    """An RBF-kernel GP on (x, y); its hyperparameters are log lengthscales, outputscale and noise."""

    def __init__(self, x, y, transform):
        self.x, self.y, self.transform = x, y, transform
        self.raw = torch.zeros(x.shape[-1] + 2)

    def kernel(self, a, b, raw):
        ls, scale = raw[:-2].exp(), raw[-2].exp()
        a, b = self.transform(a) / ls, self.transform(b) / ls
        return scale * torch.exp(-0.5 * torch.cdist(a, b) ** 2)

    def nll(self, raw):
        k = self.kernel(self.x, self.x, raw) + (raw[-1].exp() + 1e-6) * torch.eye(len(self.x))
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(self.y.unsqueeze(-1), chol)
        return 0.5 * (self.y @ alpha.squeeze(-1)) + chol.diagonal().log().sum()

    def fit(self):
        def closure(v):
            raw = torch.tensor(v, requires_grad=True)
            loss = self.nll(raw)
            (g,) = torch.autograd.grad(loss, raw)
            return loss.item(), g.numpy()
        self.raw = torch.tensor(minimize(closure, self.raw.numpy(), jac=True, method="L-BFGS-B", options={"maxiter": 60}).x)

    def posterior(self, q):
        k = self.kernel(self.x, self.x, self.raw) + (self.raw[-1].exp() + 1e-6) * torch.eye(len(self.x))
        chol = torch.linalg.cholesky(k)
        ks = self.kernel(q, self.x, self.raw)
        mean = ks @ torch.cholesky_solve(self.y.unsqueeze(-1), chol).squeeze(-1)
        v = torch.cholesky_solve(ks.T, chol)
        var = (self.raw[-2].exp() - (ks * v.T).sum(-1)).clamp_min(1e-12)
        return mean, var.sqrt()


def log_ei(gp, q, best):
    mean, sd = gp.posterior(q)
    z = (mean - best) / sd
    normal = torch.distributions.Normal(0.0, 1.0)
    return (sd * (z * normal.cdf(z) + normal.log_prob(z).exp())).clamp_min(1e-30).log()


def optimize_acqf(gp, best, dim, restarts, raw_samples, generator):
    raw = torch.rand(raw_samples, dim, generator=generator)
    with torch.no_grad():
        starts = raw[log_ei(gp, raw, best).topk(restarts).indices]
    found = []
    for s in starts:
        def closure(v):
            q = torch.tensor(v, requires_grad=True).unsqueeze(0)
            value = -log_ei(gp, q, best).sum()
            (g,) = torch.autograd.grad(value, q)
            return value.item(), g.squeeze(0).numpy()
        r = minimize(closure, s.numpy(), jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * dim, options={"maxiter": 30})
        found.append((r.fun, r.x))
    return torch.tensor(min(found, key=lambda f: f[0])[1]).unsqueeze(0)


def main():
    p = argparse.ArgumentParser(description="a BoTorch-shaped Bayesian optimisation loop on Hartmann-6")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--initial", type=int, default=10)
    p.add_argument("--restarts", type=int, default=5)
    p.add_argument("--raw-samples", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()

    generator = torch.Generator().manual_seed(0)
    dim, objective = 6, Hartmann6()
    normalize, standardize = Normalize(torch.stack([torch.zeros(dim), torch.ones(dim)])), Standardize()
    x = torch.rand(args.initial, dim, generator=generator)
    y = objective(x)
    ms_each = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        gp = ExactGP(x, standardize(y.unsqueeze(-1)).squeeze(-1), normalize)
        gp.fit()
        cand = optimize_acqf(gp, gp.y.max(), dim, args.restarts, args.raw_samples, generator)
        x, y = torch.cat([x, cand]), torch.cat([y, objective(cand)])
        ms_each.append((time.perf_counter() - t0) * 1e3)
    timed = ms_each[args.warmup:]
    print(f"best {y.max().item():.4f} after {len(y)} evaluations")
    print("RESULT " + json.dumps({"program": "bo_loop", "step": "one BO iteration (fit, acquisition, evaluation)", "iterations": len(ms_each),
                                  "warmup": args.warmup, "ms_each": [round(t, 3) for t in ms_each], "ms_per_step": sum(timed) / len(timed)}))


if __name__ == "__main__":
    main()
