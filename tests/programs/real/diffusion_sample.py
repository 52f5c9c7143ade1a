#!/usr/bin/env python3
"""Text-to-image sampling the way a diffusers pipeline's ``__call__`` runs it, random
weights: a text encoder once per prompt batch, then per timestep one UNet-like denoiser
call with classifier-free guidance (``torch.cat([latents] * 2)``, the guidance mix and a
DDIM scheduler's ``step`` on tensors between calls), a tqdm-like progress bar printing
it/s, then a VAE-like decoder per image. ``--cfg separate``: the older way, two denoiser
calls per timestep (unconditional, then conditional) instead of one doubled batch.

Its own timer: ``torch.cuda.synchronize()`` + ``time.perf_counter()`` around each denoising
step (the denoiser call(s), the guidance, the scheduler's step and the progress bar's
update, as tqdm's it/s counts it), after one warm-up pipeline call.

    python diffusion_sample.py                                  # 64x64 latents, 50 steps, cuda
    python diffusion_sample.py --device cpu --latent 16 --channels 32 --steps 8 --images 2
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, ch, temb):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
        self.temb = nn.Linear(temb, ch)
        self.norm2, self.conv2 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x))) + self.temb(F.silu(emb))[:, :, None, None]
        return x + self.conv2(F.silu(self.norm2(h)))


class CrossAttention(nn.Module):
    def __init__(self, ch, ctx, heads=4):
        super().__init__()
        self.heads, self.norm = heads, nn.GroupNorm(8, ch)
        self.q, self.k, self.v, self.o = nn.Linear(ch, ch), nn.Linear(ctx, ch), nn.Linear(ctx, ch), nn.Linear(ch, ch)

    def forward(self, x, context):
        b, c, h, w = x.shape
        q = self.q(self.norm(x).flatten(2).transpose(1, 2))
        k, v = self.k(context), self.v(context)
        split = lambda t: t.view(b, -1, self.heads, c // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, h * w, c)
        return x + self.o(out).transpose(1, 2).view(b, c, h, w)


class UNet2DConditionModel(nn.Module):
    def __init__(self, in_ch=4, ch=128, ctx=256):
        super().__init__()
        self.ch = ch
        self.time_embed = nn.Sequential(nn.Linear(ch, 4 * ch), nn.SiLU(), nn.Linear(4 * ch, 4 * ch))
        self.conv_in = nn.Conv2d(in_ch, ch, 3, padding=1)
        self.down = nn.ModuleList([ResBlock(ch, 4 * ch), ResBlock(ch, 4 * ch)])
        self.downsample = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid, self.attn = ResBlock(ch, 4 * ch), CrossAttention(ch, ctx)
        self.up = nn.ModuleList([ResBlock(ch, 4 * ch), ResBlock(ch, 4 * ch)])
        self.conv_out = nn.Conv2d(ch, in_ch, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states):
        emb = self.time_embed(timestep_embedding(timestep.expand(sample.shape[0]), self.ch))
        h = self.conv_in(sample)
        skips = []
        for block in self.down:
            h = block(h, emb)
            skips.append(h)
        h = self.attn(self.mid(self.downsample(h), emb), encoder_hidden_states)
        h = F.interpolate(h, scale_factor=2.0, mode="nearest")
        for block in self.up:
            h = block(h + skips.pop(), emb)
        return self.conv_out(h)


class TextEncoder(nn.Module):
    def __init__(self, vocab=1000, dim=256, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 4, 4 * dim, batch_first=True), layers)

    def forward(self, input_ids):
        return self.layers(self.embed(input_ids))


class AutoencoderDecoder(nn.Module):
    def __init__(self, in_ch=4, ch=128):
        super().__init__()
        self.conv_in = nn.Conv2d(in_ch, ch, 3, padding=1)
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Upsample(scale_factor=2.0), nn.Conv2d(ch, ch, 3, padding=1), nn.SiLU())
                                      for _ in range(3)])
        self.conv_out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, z):
        return self.conv_out(self.blocks(self.conv_in(z)))


class DDIMScheduler:
    """diffusers' DDIMScheduler, eta 0: the tensor math of its ``step`` between the calls."""

    def __init__(self, num_train_timesteps=1000):
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, num_train_timesteps) ** 2
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.num_train_timesteps = num_train_timesteps

    def set_timesteps(self, n, device):
        step = self.num_train_timesteps // n
        self.timesteps = (torch.arange(0, n) * step).flip(0).to(device)
        self.step_ratio = step

    def step(self, model_output, timestep, sample):
        prev = timestep - self.step_ratio
        a_t = self.alphas_cumprod[timestep].to(sample.device)
        a_prev = self.alphas_cumprod[prev].to(sample.device) if prev >= 0 else torch.tensor(1.0, device=sample.device)
        pred_x0 = (sample - (1 - a_t).sqrt() * model_output) / a_t.sqrt()
        return a_prev.sqrt() * pred_x0 + (1 - a_prev).sqrt() * model_output


class progress_bar:
    """tqdm's line: the step count and it/s, rewritten in place."""

    def __init__(self, total):
        self.total, self.n, self.t0 = total, 0, time.perf_counter()

    def update(self):
        self.n += 1
        rate = self.n / max(time.perf_counter() - self.t0, 1e-9)
        sys.stderr.write(f"\r{100 * self.n // self.total:3d}%| {self.n}/{self.total} [{rate:.2f}it/s]")
        if self.n == self.total:
            sys.stderr.write("\n")


@torch.no_grad()
def pipeline(unet, text_encoder, vae, scheduler, args, device, step_times):
    prompt_ids = torch.randint(0, 1000, (args.images, 77), device=device)
    text = text_encoder(prompt_ids)
    uncond = text_encoder(torch.zeros_like(prompt_ids))
    embeds = torch.cat([uncond, text])
    latents = torch.randn(args.images, 4, args.latent, args.latent, device=device)
    scheduler.set_timesteps(args.steps, device)
    bar = progress_bar(args.steps)
    for t in scheduler.timesteps:
        sync(device)
        t0 = time.perf_counter()
        if args.cfg == "batched":
            noise_pred = unet(torch.cat([latents] * 2), t, encoder_hidden_states=embeds)
            noise_uncond, noise_text = noise_pred.chunk(2)
        else:
            noise_uncond = unet(latents, t, encoder_hidden_states=uncond)
            noise_text = unet(latents, t, encoder_hidden_states=text)
        noise_pred = noise_uncond + args.guidance * (noise_text - noise_uncond)
        latents = scheduler.step(noise_pred, t, latents)
        bar.update()
        sync(device)
        step_times.append(time.perf_counter() - t0)
    images = [vae(latents[i : i + 1] / 0.18215).clamp(-1, 1) for i in range(args.images)]
    return torch.cat(images)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latent", type=int, default=64)
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--steps", type=int, default=50, help="num_inference_steps")
    p.add_argument("--images", type=int, default=1, help="images per prompt batch")
    p.add_argument("--runs", type=int, default=2, help="timed pipeline calls, after one warm-up call")
    p.add_argument("--cfg", choices=["batched", "separate"], default="batched")
    p.add_argument("--guidance", type=float, default=7.5)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(ch=args.channels).to(device).eval()
    text_encoder = TextEncoder().to(device).eval()
    vae = AutoencoderDecoder(ch=args.channels).to(device).eval()
    scheduler = DDIMScheduler()

    pipeline(unet, text_encoder, vae, scheduler, args, device, [])  # warm-up
    step_times = []
    t0 = time.perf_counter()
    for _ in range(args.runs):
        images = pipeline(unet, text_encoder, vae, scheduler, args, device, step_times)
    sync(device)
    total = time.perf_counter() - t0
    ms = 1e3 * sum(step_times) / len(step_times)
    print(f"{len(step_times)} denoising steps: {ms:.2f} ms/step, {args.runs * args.images / total:.2f} images/s "
          f"(images {tuple(images.shape)})")
    print("RESULT " + json.dumps({"program": "diffusion_sample", "step": "denoising step", "ms_per_step": ms,
                                  "steps": len(step_times), "warmup_steps": args.steps, "cfg": args.cfg,
                                  "ms_each": [1e3 * t for t in step_times],
                                  "unet_calls_per_step": 2 if args.cfg == "separate" else 1,
                                  "images_per_s": args.runs * args.images / total}))


if __name__ == "__main__":
    main()
