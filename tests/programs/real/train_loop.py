#!/usr/bin/env python3
"""ResNet training loop (torchvision architecture, random init) on a synthetic dataset whose
__getitem__ does real CPU work per image, like a JPEG decode + random-resized-crop + flip +
normalise: it draws a random uint8 HxWx3 image with numpy, crops, flips and normalises it.
Standard loop: DataLoader, AMP, SGD, zero_grad / backward / step; times itself.
``--accum-steps K``: gradient accumulation as PyTorch's AMP recipe and HF Trainer write it
(loss / K, backward every batch, scaler.step / update / zero_grad every K-th); an iteration
is then one optimizer step over K batches, and --iters / --warmup count those.
``--compile MODE``: PyTorch 2's one line, ``model = torch.compile(model, mode=...)``
(``reduce-overhead``: the forward and the backward replayed as CUDA graphs by cudagraph
trees; ``--compile-backend eager``: a CPU smoke test), the warm-up iterations compiling.

    python train_loop.py                                  # resnet50, batch 128, AMP, cuda
    python train_loop.py --num-workers 4 --pin-memory
    python train_loop.py --batch 32 --accum-steps 4
    python train_loop.py --model resnet18 --compile reduce-overhead
    python train_loop.py --device cpu --model resnet18 --batch 4 --img-size 64 --iters 4 --warmup 1
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


from resnet import resnet18, resnet50  # noqa: E402  (beside this script)

MODELS = {"resnet50": resnet50, "resnet18": resnet18}

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255


class SyntheticImageNet(Dataset):
    """Random "photos": decode-sized uint8 images, random crop + flip + normalise on the CPU."""

    def __init__(self, length, img_size=224, src_size=None, num_classes=1000, seed=0):
        self.length = length
        self.img_size = img_size
        self.src_size = src_size or int(img_size * 1.14)  # e.g. 256 for 224
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        rng = np.random.default_rng(self.seed + index)
        # "decode"
        img = rng.integers(0, 256, size=(self.src_size, self.src_size, 3), dtype=np.uint8)
        # random crop + horizontal flip
        top, left = rng.integers(0, self.src_size - self.img_size + 1, size=2)
        img = img[top:top + self.img_size, left:left + self.img_size]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # ToTensor + Normalize
        img = (img.astype(np.float32) - MEAN) / STD
        img = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
        target = int(rng.integers(0, self.num_classes))
        return img, target


def main():
    parser = argparse.ArgumentParser(description="PyTorch ResNet training (synthetic data)")
    parser.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    parser.add_argument("--batch", "-b", type=int, default=128)
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--iters", type=int, default=30, help="timed iterations")
    parser.add_argument("--warmup", type=int, default=5, help="iterations before the timer starts")
    parser.add_argument("--accum-steps", type=int, default=1, help="batches per optimizer step (gradient accumulation)")
    parser.add_argument("--num-workers", "-j", type=int, default=0)
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--compile", default="none", choices=["none", "default", "reduce-overhead", "max-autotune"],
                        help="torch.compile(model, mode=...)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (eager: a CPU smoke test)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--print-freq", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)

    model = MODELS[args.model]().to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.compile != "none":
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile, backend=args.compile_backend)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    amp_dtype = torch.float16 if cuda else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and cuda)

    if args.accum_steps < 1:
        parser.error("--accum-steps must be at least 1")
    accum = args.accum_steps
    total_iters = args.warmup + args.iters
    total_batches = total_iters * accum
    dataset = SyntheticImageNet(total_batches * args.batch, img_size=args.img_size)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.num_workers,
                        pin_memory=args.pin_memory, drop_last=True, persistent_workers=args.num_workers > 0)
    print(f"=> training {args.model}, batch {args.batch}, {args.img_size}px, workers {args.num_workers}, "
          f"pin_memory {args.pin_memory}, amp {args.amp}, accumulation {accum}, compile {args.compile}, {device}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    model.train()
    end = time.perf_counter()
    t0 = None
    for i, (images, target) in enumerate(loader):
        data_time = time.perf_counter() - end
        if i == args.warmup * accum:
            sync()
            t0 = time.perf_counter()
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        if args.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)

        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
            output = model(images)
            loss = criterion(output, target)

        if accum == 1:
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            scaler.scale(loss / accum).backward()
            if (i + 1) % accum == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)

        if i % (args.print_freq * accum) == 0 or i == total_batches - 1:
            print(f"Epoch: [0][{i:>4}/{total_batches}]  Time {time.perf_counter() - end:.3f}  "
                  f"Data {data_time:.3f}  Loss {loss.item():.4f}")
        end = time.perf_counter()
    sync()
    elapsed = time.perf_counter() - t0

    ms_per_iter = elapsed / args.iters * 1e3
    images_per_s = args.batch * accum * args.iters / elapsed
    print(f"Train: {images_per_s:.1f} images/s, {ms_per_iter:.2f} ms/iter over {args.iters} iterations"
          + (f" of {accum} batches" if accum > 1 else ""))
    print("RESULT " + json.dumps({"program": "train_loop", "model": args.model, "step": "training iteration",
                                  "ms_per_step": round(ms_per_iter, 4), "ms_per_iter": round(ms_per_iter, 4),
                                  "images_per_s": round(images_per_s, 2), "batch": args.batch,
                                  "accum_steps": accum, "compile": args.compile, "num_workers": args.num_workers, "pin_memory": args.pin_memory, "amp": args.amp,
                                  "iters": args.iters, "device": str(device)}))


if __name__ == "__main__":
    main()
