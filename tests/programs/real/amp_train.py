#!/usr/bin/env python3
"""A training loop with no DataLoader, as benchmark and research scripts write one: every
step makes its batch with ``torch.randn`` / ``torch.randint`` on the device, then
``torch.autocast`` + ``GradScaler`` (the AMP recipe: ``scale(loss).backward()``,
``unscale_`` before ``clip_grad_norm_``, ``scaler.step``, ``scaler.update``), an AdamW
optimizer and a cosine LR scheduler stepped every step, ``zero_grad(set_to_none=True)``,
and a log line with ``loss.item()`` every ``--log-every`` steps; ``--save-every N``: a
checkpoint (``torch.save`` of the model's, the optimizer's and the scaler's state) after every
N-th step, inside the loop, as pretraining scripts save one every N steps (``--save-format
safetensors``: the model's weights alone with ``safetensors.torch.save_file``, as fine-tuning
scripts save them; ``dcp``: the model's and the optimizer's state with
``torch.distributed.checkpoint.save`` into a folder per step, as torchtitan saves them);
``--val-every N``: after every N-th step, a validation pass under ``torch.no_grad`` over a
held-out set through a ``DataLoader`` (the training batches still made in the loop), as
scripts with an ``eval_interval`` validate; ``--distill``: a frozen teacher (a wider net)
called under ``torch.no_grad`` on each batch before the student, the loss adding the KL
divergence to its softened logits, as knowledge distillation trains. ``for step in
range(steps)``; the first ``--warmup`` steps are left out of the timing; each timed step's
time is nanoGPT's ``dt``, from one iteration's top to the next's (the last to the final sync). A small
transformer-ish MLP classifier on random features.

    python amp_train.py                                # CUDA, fp16 autocast
    python amp_train.py --device cpu --dtype bfloat16  # CPU
"""
import argparse
import json
import math
import os
import tempfile
import time

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, dim, width, depth, classes):
        super().__init__()
        self.inp = nn.Linear(dim, width)
        self.layers = nn.ModuleList([nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                                   nn.Linear(4 * width, width)) for _ in range(depth)])
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.out(h)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="AMP training loop on random batches, no DataLoader")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--zero-grad", default="end", choices=["end", "start", "both", "model"],
                   help="opt.zero_grad(set_to_none=True) at the iteration's end (default) or start; "
                        "both: at the start and again at the end; model: model.zero_grad() at the start (no optimizer range)")
    p.add_argument("--save-every", type=int, default=0, help="torch.save a checkpoint after every N-th step (0: never)")
    p.add_argument("--save-format", default="torch", choices=["torch", "safetensors", "dcp"],
                   help="torch: torch.save of model, optimizer and scaler state; safetensors: save_file of the model's weights; "
                        "dcp: torch.distributed.checkpoint.save of model and optimizer state")
    p.add_argument("--val-every", type=int, default=0, help="validate over a DataLoader after every N-th step (0: never)")
    p.add_argument("--distill", action="store_true", help="distil from a frozen teacher called under no_grad every step")
    p.add_argument("--val-batches", type=int, default=4, help="the validation set's batches")
    p.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "amp-train-ckpt"))
    args = p.parse_args()

    torch.manual_seed(0)
    device_type = "cuda" if args.device.startswith("cuda") else "cpu"
    dtype = getattr(torch, args.dtype)
    model = Net(args.dim, args.width, args.depth, 100).to(args.device)
    teacher = Net(args.dim, 2 * args.width, args.depth, 100).to(args.device).eval() if args.distill else None
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    scaler = torch.amp.GradScaler(device_type, enabled=args.dtype == "float16")
    loss_fn = nn.CrossEntropyLoss()

    held_out = torch.utils.data.TensorDataset(torch.randn(args.val_batches * args.batch, args.dim),
                                              torch.randint(0, 100, (args.val_batches * args.batch,)))
    val_loader = torch.utils.data.DataLoader(held_out, batch_size=args.batch)

    model.train()
    tops = []
    for step in range(args.steps):
        if step == args.warmup:
            sync(args.device)
        if step >= args.warmup:
            tops.append(time.perf_counter())
        if args.zero_grad in ("start", "both"):
            opt.zero_grad()
        elif args.zero_grad == "model":
            model.zero_grad()
        x = torch.randn(args.batch, args.dim, device=args.device)
        y = torch.randint(0, 100, (args.batch,), device=args.device)
        if teacher is not None:
            with torch.no_grad(), torch.autocast(device_type=device_type, dtype=dtype):
                soft = teacher(x).float().div(2.0).softmax(-1)
        with torch.autocast(device_type=device_type, dtype=dtype):
            logits = model(x)
            loss = loss_fn(logits, y)
        if teacher is not None:
            loss = loss + nn.functional.kl_div(logits.float().div(2.0).log_softmax(-1), soft, reduction="batchmean")
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        scaler.step(opt)
        scaler.update()
        sched.step()
        if args.zero_grad in ("end", "both"):
            opt.zero_grad(set_to_none=True)
        if step % args.log_every == 0:
            print(f"step {step:5d} | loss {loss.item():.4f} | grad norm {grad_norm.item():.3f} | lr {sched.get_last_lr()[0]:.2e}")
        if args.val_every and (step + 1) % args.val_every == 0:
            model.eval()
            with torch.no_grad(), torch.autocast(device_type=device_type, dtype=dtype):
                val_loss = sum(loss_fn(model(xv.to(args.device)), yv.to(args.device)).item() for xv, yv in val_loader) / len(val_loader)
            print(f"step {step:5d} | val loss {val_loss:.4f}")
            model.train()
        if args.save_every and (step + 1) % args.save_every == 0:
            os.makedirs(args.out_dir, exist_ok=True)
            if args.save_format == "safetensors":
                from safetensors.torch import save_file
                save_file(model.state_dict(), os.path.join(args.out_dir, "model.safetensors"))
            elif args.save_format == "dcp":
                import torch.distributed.checkpoint as dcp
                dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint_id=os.path.join(args.out_dir, f"step-{step}"))
            else:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(), "step": step},
                           os.path.join(args.out_dir, "ckpt.pt"))
    sync(args.device)
    tops.append(time.perf_counter())
    elapsed = tops[-1] - tops[0]
    timed = args.steps - args.warmup
    ms = elapsed / timed * 1e3
    print(f"{timed} steps in {elapsed:.2f} s: {ms:.2f} ms/step, {args.batch * timed / elapsed:.0f} samples/s")
    print("RESULT " + json.dumps({"program": "amp_train", "step": "training step", "steps": args.steps,
                                  "warmup": args.warmup, "timed_steps": timed, "ms_per_step": ms, "ms_per_iter": ms,
                                  "ms_each": [(b - a) * 1e3 for a, b in zip(tops, tops[1:])],
                                  "samples_per_s": args.batch * timed / elapsed}))


if __name__ == "__main__":
    main()
