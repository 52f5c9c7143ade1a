#!/usr/bin/env python3
"""WGAN-GP on a toy 2-D mixture of Gaussians, as the improved-WGAN toy scripts write it: no
DataLoader (an infinite Python generator yields real batches), two networks and two Adam
optimizers, per iteration ``--critic-iters`` critic steps (each: a real batch from the
generator, a fake one from G under ``no_grad``, the Wasserstein loss plus a gradient penalty
from ``torch.autograd.grad(..., create_graph=True)`` on interpolates: two backward passes)
then one generator step; ``--checkpoint``: the critic's blocks under
``torch.utils.checkpoint`` (non-reentrant); ``--generator-every K`` (K > 1): PyTorch-GAN's
wgan.py instead, one critic step per iteration in the iteration's own loop and, ``if i %
n_critic == 0``, a generator step (``--critic-iters`` unused).
``D.zero_grad()`` / ``G.zero_grad()`` (the
modules', not the optimizers'), a log line with the losses' ``.item()`` every
``--log-every`` iterations. The first ``--warmup`` iterations are left out of the timing.

    python gan_train.py                       # CUDA
    python gan_train.py --device cpu --dim 128 --iters 30 --warmup 5  # CPU
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Generator(nn.Module):
    def __init__(self, noise, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(noise, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(),
                                 nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 2))

    def forward(self, z):
        return self.net(z)


class Critic(nn.Module):
    def __init__(self, dim, use_checkpoint):
        super().__init__()
        self.inp = nn.Linear(2, dim)
        self.blocks = nn.ModuleList([nn.Sequential(nn.ReLU(), nn.Linear(dim, dim)) for _ in range(3)])
        self.out = nn.Linear(dim, 1)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = checkpoint(b, h, use_reentrant=False) if self.use_checkpoint else b(h)
        return self.out(torch.relu(h))


def inf_train_gen(batch, device):
    scale = 2.0
    centers = torch.tensor([(math.cos(a), math.sin(a)) for a in [k * math.pi / 4 for k in range(8)]]) * scale
    while True:
        idx = torch.randint(0, 8, (batch,))
        yield (centers[idx] + 0.02 * torch.randn(batch, 2)).div(1.414).to(device)


def gradient_penalty(D, real, fake, lam):
    alpha = torch.rand(real.size(0), 1, device=real.device)
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = D(interp)
    grads = torch.autograd.grad(outputs=out, inputs=interp, grad_outputs=torch.ones_like(out),
                                create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean() * lam


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="WGAN-GP toy training loop")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--noise", type=int, default=128)
    p.add_argument("--critic-iters", type=int, default=5)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--lam", type=float, default=0.1)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--generator-every", type=int, default=1,
                   help="one critic step per iteration and the generator's only every K-th (PyTorch-GAN's wgan.py)")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = args.device

    G = Generator(args.noise, args.dim).to(dev)
    D = Critic(args.dim, args.checkpoint).to(dev)
    optD = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
    optG = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
    data = inf_train_gen(args.batch, dev)

    def critic_step():
        real = next(data)
        D.zero_grad()
        d_real = D(real).mean()
        with torch.no_grad():
            fake = G(torch.randn(args.batch, args.noise, device=dev))
        d_fake = D(fake).mean()
        gp = gradient_penalty(D, real, fake, args.lam)
        d_cost = d_fake - d_real + gp
        d_cost.backward()
        optD.step()
        return d_cost, d_real, d_fake

    times = []
    for it in range(args.iters):
        sync(dev)
        t0 = time.perf_counter()
        # (1) critic
        for p_ in D.parameters():
            p_.requires_grad = True
        if args.generator_every > 1:  # PyTorch-GAN's wgan.py: one critic step per batch, no loop of its own
            d_cost, d_real, d_fake = critic_step()
        else:
            for _ in range(args.critic_iters):
                d_cost, d_real, d_fake = critic_step()
        # (2) generator
        if it % args.generator_every == 0:
            for p_ in D.parameters():
                p_.requires_grad = False
            G.zero_grad()
            fake = G(torch.randn(args.batch, args.noise, device=dev))
            g_cost = -D(fake).mean()
            g_cost.backward()
            optG.step()
        if it % args.log_every == 0:
            print(f"iter {it}: D {d_cost.item():.4f} G {g_cost.item():.4f} W {(d_real - d_fake).item():.4f}")
        sync(dev)
        times.append(time.perf_counter() - t0)

    timed = times[args.warmup:]
    ms = sum(timed) / len(timed) * 1e3
    print(f"{ms:.3f} ms/iter over {len(timed)} iterations")
    print("RESULT " + json.dumps({"program": "gan_train", "step": "one iteration (critic steps + generator step, every --generator-every-th)",
                                  "iters": args.iters, "warmup": args.warmup, "critic_iters": args.critic_iters,
                                  "ms_per_step": ms, "ms_per_iter": ms, "ms_each": [t * 1e3 for t in times]}))


if __name__ == "__main__":
    main()
