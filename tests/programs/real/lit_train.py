#!/usr/bin/env python3
"""A training loop written Lightning-style by hand: the model carries ``training_step(batch,
batch_idx)``, ``validation_step(batch, batch_idx)`` and ``configure_optimizers()`` (AdamW and
a OneCycleLR stepped per batch), and a small ``fit`` calls them: per batch
``loss = model.training_step(...)``, ``zero_grad``, ``backward``, ``optimizer.step()``,
``lr_scheduler.step()``, a ``print`` every ``--log-every`` batches, and every ``--val-every``
batches a validation run over its own DataLoader under ``torch.no_grad()``. ``--amp``:
``torch.autocast`` (bf16 on a CPU, fp16 with a GradScaler on CUDA); ``--checkpoint``: each
block through ``torch.utils.checkpoint`` (its forward runs again in the backward).

Its own timer: ``time.perf_counter()`` (after ``torch.cuda.synchronize()``) per training
batch, from the end of the previous one (the fetch included) to the end of its logging; the
clock restarts after each validation run, which is timed apart.

    python lit_train.py                                      # a 2048-wide residual MLP, cuda
    python lit_train.py --device cpu --width 256 --batches 12 --val-every 4 --val-batches 3
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class LitClassifier(nn.Module):
    def __init__(self, features, width, depth, classes, lr, total_steps, use_checkpoint):
        super().__init__()
        self.stem = nn.Linear(features, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        self.lr, self.total_steps, self.use_checkpoint = lr, total_steps, use_checkpoint

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint and self.training else block(x)
        return self.head(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(-1) == y).float().mean()

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.lr, total_steps=self.total_steps)
        return optimizer, scheduler


def fit(model, train_loader, val_loader, args, device):
    optimizer, scheduler = model.configure_optimizers()
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and device.type == "cuda")
    times, global_step = [], 0

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for epoch in range(args.epochs):
        model.train()
        end = time.perf_counter()
        for batch_idx, (x, y) in enumerate(train_loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
                loss = model.training_step((x, y), batch_idx)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            global_step += 1
            if global_step % args.log_every == 0:
                print(f"epoch {epoch} step {global_step}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
            sync()
            times.append(time.perf_counter() - end)
            if global_step % args.val_every == 0:
                model.eval()
                with torch.no_grad():
                    # the batch moved to the device, as Lightning's trainer does before each *_step
                    out = [model.validation_step([t.to(device, non_blocking=True) for t in b], i) for i, b in enumerate(val_loader)]
                print(f"  val_loss {sum(o[0].item() for o in out) / len(out):.4f} "
                      f"val_acc {sum(o[1].item() for o in out) / len(out):.3f}")
                model.train()
                sync()
            end = time.perf_counter()
    return times, global_step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=50, help="training batches per epoch")
    p.add_argument("--val-batches", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--val-every", type=int, default=20, help="validate every N training batches")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--checkpoint", action="store_true", help="gradient checkpointing of each block")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)

    def loader(batches, shuffle):
        n = batches * args.batch_size
        data = TensorDataset(torch.randn(n, args.features), torch.randint(0, 10, (n,)))
        return DataLoader(data, batch_size=args.batch_size, shuffle=shuffle)

    model = LitClassifier(args.features, args.width, args.depth, 10, args.lr, args.epochs * args.batches,
                          args.checkpoint).to(device)
    times, steps = fit(model, loader(args.batches, True), loader(args.val_batches, False), args, device)
    ms = 1e3 * sum(times[1:]) / (len(times) - 1)  # the first batch: start-up, left out
    print(f"{steps} training steps: {ms:.2f} ms/step")
    print("RESULT " + json.dumps({"program": "lit_train", "step": "training batch", "ms_per_step": ms, "iters": steps,
                                  "ms_first_step": 1e3 * times[0], "amp": args.amp, "checkpoint": args.checkpoint}))


if __name__ == "__main__":
    main()
