#!/usr/bin/env python3
"""A diffusion model's training, in the shape of denoising-diffusion-pytorch's ``Trainer``
(lucidrains): ``self.dl = cycle(accelerator.prepare(DataLoader(ds, shuffle=True, ...)))``,
an endless generator over the prepared loader (accelerate's ``DataLoaderShard``, which
fetches one batch ahead); per optimizer step ``gradient_accumulate_every`` batches from
``next(self.dl)``, each ``loss = self.model(data) / gradient_accumulate_every`` and
``accelerator.backward(loss)``, then ``clip_grad_norm_``, ``opt.step()``, ``opt.zero_grad()``,
the EMA model's update, and every ``save_and_sample_every`` steps a few samples from the EMA
model (a short DDIM-style loop of the denoiser under ``no_grad``) and ``torch.save`` of the
model's state. A small MLP denoiser on synthetic 16x16 images; an epoch that is no multiple
of the accumulation (13 batches of 8 for 100 images), so groups span epochs as the
library's ``cycle`` lets them.

Its own timer: ``perf_counter`` at each optimizer step's end (the library's tqdm bar's
``update(1)``), each step from the previous one's end; ``RESULT``'s ``ms_each`` all of them.

    python ddpm_train.py --steps 60
"""
import argparse
import copy
import json
import os
import tempfile
import time

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def cycle(dl):
    while True:
        for data in dl:
            yield data


class Denoiser(nn.Module):
    def __init__(self, size, width):
        super().__init__()
        self.time = nn.Embedding(1000, width)
        self.inp = nn.Linear(size * size, width)
        self.body = nn.Sequential(nn.SiLU(), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, size * size))

    def forward(self, x, t):
        return self.body(self.inp(x.flatten(1)) + self.time(t)).view_as(x)


class Diffusion(nn.Module):
    def __init__(self, net, timesteps=1000, sampling_timesteps=10):
        super().__init__()
        self.net, self.timesteps, self.sampling_timesteps = net, timesteps, sampling_timesteps
        self.register_buffer("alphas", torch.cumprod(1 - torch.linspace(1e-4, 0.02, timesteps), 0))

    def forward(self, img):
        t = torch.randint(0, self.timesteps, (img.shape[0],))
        noise = torch.randn_like(img)
        a = self.alphas[t].view(-1, 1, 1, 1)
        return nn.functional.mse_loss(self.net(a.sqrt() * img + (1 - a).sqrt() * noise, t), noise)

    @torch.no_grad()
    def sample(self, n, size):
        x = torch.randn(n, 1, size, size)
        for t in torch.linspace(self.timesteps - 1, 0, self.sampling_timesteps).long():
            a = self.alphas[t]
            eps = self.net(x, t.expand(n))
            x = (x - (1 - a).sqrt() * eps) / a.sqrt()
        return x


def main():
    p = argparse.ArgumentParser(description="a denoising-diffusion-pytorch-style Trainer")
    p.add_argument("--images", type=int, default=100)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--accumulate", type=int, default=2, help="gradient_accumulate_every")
    p.add_argument("--steps", type=int, default=60, help="train_num_steps")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--sample-every", type=int, default=20, help="save_and_sample_every")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--results", default=tempfile.gettempdir())
    args = p.parse_args()

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = Diffusion(Denoiser(args.size, args.width))
    ds = TensorDataset(torch.randn(args.images, 1, args.size, args.size))
    dl = cycle(accelerator.prepare(DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers)))
    opt = torch.optim.Adam(model.parameters(), lr=8e-5)
    model, opt = accelerator.prepare(model, opt)
    ema = copy.deepcopy(model).eval()

    ms_each, t0 = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        for _ in range(args.accumulate):
            (data,) = next(dl)
            loss = model(data) / args.accumulate
            accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        with torch.no_grad():  # the EMA's update
            for e, q in zip(ema.parameters(), model.parameters()):
                e.lerp_(q, 1 - 0.995)
        if step % args.sample_every == 0:
            samples = ema.sample(4, args.size)
            torch.save({"step": step, "model": model.state_dict(), "ema": ema.state_dict(), "samples": samples},
                       os.path.join(args.results, f"ddpm-model-{step // args.sample_every}.pt"))
        t1 = time.perf_counter()
        ms_each.append((t1 - t0) * 1e3)
        t0 = t1
    print("RESULT " + json.dumps({"program": "ddpm_train", "step": "one optimizer step (its accumulated batches, the EMA, every few a sample and a save)",
                                  "steps": len(ms_each), "batches": args.steps * args.accumulate, "batches_per_epoch": len(ds) // args.batch + (len(ds) % args.batch > 0),
                                  "ms_each": [round(t, 3) for t in ms_each], "ms_per_step": sum(ms_each[1:]) / (len(ms_each) - 1)}))


if __name__ == "__main__":
    main()
