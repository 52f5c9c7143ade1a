#!/usr/bin/env python3
"""Image classification inference with ``torch.compile`` in its default mode (no CUDA
graphs: ``mode=None``, or ``--mode max-autotune-no-cudagraphs``) on the whole model, the
way a tutorial writes it: ``model = torch.compile(model)``, a few warm-up batches, then
the evaluation set through a ``DataLoader`` whose last batch is smaller (``drop_last``
left at False), so dynamo compiles again for the new batch size (and marks it dynamic)
inside the timed loop, in the first pass. ``--passes`` passes over the set; each batch
timed with ``synchronize`` + ``perf_counter``. A small ResNet-like CNN, random weights.

    python compile_infer.py                                   # CUDA, inductor, batch 64
    python compile_infer.py --device cpu --backend eager      # quick CPU run
"""
import argparse
import json
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class SmallResNet(nn.Module):
    def __init__(self, width=64, blocks=4, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="torch.compile (default mode) image inference over a DataLoader")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--images", type=int, default=1000, help="evaluation set size (last batch smaller)")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--mode", default=None, help="torch.compile mode (default: None)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()

    torch.manual_seed(0)
    model = SmallResNet(args.width).to(args.device).eval()
    if not args.no_compile:
        model = torch.compile(model, mode=args.mode, backend=args.backend)
    data = TensorDataset(torch.randn(args.images, 3, args.img_size, args.img_size), torch.randint(0, 1000, (args.images,)))
    loader = DataLoader(data, batch_size=args.batch, shuffle=False)

    with torch.no_grad():
        x = torch.randn(args.batch, 3, args.img_size, args.img_size, device=args.device)
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            model(x)
        sync(args.device)
        print(f"warm-up ({args.warmup} batches, compilation): {time.perf_counter() - t0:.2f} s")

        ms_each, per_pass = [], []
        for pass_ in range(args.passes):
            correct = seen = 0
            pass_ms = []
            for images, target in loader:
                t0 = time.perf_counter()
                images = images.to(args.device, non_blocking=True)
                out = model(images)
                correct += (out.argmax(1).cpu() == target).sum().item()
                seen += len(target)
                sync(args.device)
                pass_ms.append((time.perf_counter() - t0) * 1e3)
            ms_each += pass_ms
            per_pass.append(sum(pass_ms) / len(pass_ms))
            print(f"pass {pass_}: {len(pass_ms)} batches, {sum(pass_ms) / len(pass_ms):.2f} ms/batch, "
                  f"{seen / sum(pass_ms) * 1e3:.1f} img/s, acc {100.0 * correct / seen:.2f}")
    last = per_pass[-1]
    print("RESULT " + json.dumps({"program": "compile_infer", "step": "one batch", "batches": len(ms_each),
                                  "batches_per_pass": len(ms_each) // args.passes, "ms_per_pass": per_pass,
                                  "ms_per_step": last, "ms_per_batch": last, "ms_each": ms_each,
                                  "images_per_s": args.batch / last * 1e3}))


if __name__ == "__main__":
    main()
