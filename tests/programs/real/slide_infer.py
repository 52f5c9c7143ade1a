#!/usr/bin/env python3
"""Sliding-window segmentation inference as mmsegmentation's ``slide_inference`` writes it:
per image a grid of overlapping ``--crop`` windows ``--stride`` apart, the model on each
crop, its logits padded back into place (``F.pad``) and summed, each pixel divided by the
number of windows covering it, then ``argmax`` and the mask to the host. A small fully
convolutional net on random images.

Its own timer: ``time.perf_counter()`` per image (its windows, the stitching, the mask on
the host); RESULT's ``ms_each``, ``ms_per_step`` (their mean after ``--warmup``),
``images`` and ``windows`` (per image).

    python slide_infer.py                                   # 512 px images, 128 px crops, cuda
    python slide_infer.py --device cpu --size 160 --crop 64 --stride 48 --images 30
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def slide_inference(model, img, crop, stride, classes):
    batch, _, h, w = img.shape
    h_grids = max(h - crop + stride - 1, 0) // stride + 1
    w_grids = max(w - crop + stride - 1, 0) // stride + 1
    preds = img.new_zeros((batch, classes, h, w))
    count = img.new_zeros((batch, 1, h, w))
    for h_idx in range(h_grids):
        for w_idx in range(w_grids):
            y1, x1 = h_idx * stride, w_idx * stride
            y2, x2 = min(y1 + crop, h), min(x1 + crop, w)
            y1, x1 = max(y2 - crop, 0), max(x2 - crop, 0)
            logits = model(img[:, :, y1:y2, x1:x2])
            preds += F.pad(logits, (int(x1), int(w - x2), int(y1), int(h - y2)))
            count[:, :, y1:y2, x1:x2] += 1
    return preds / count, h_grids * w_grids


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--crop", type=int, default=128)
    p.add_argument("--stride", type=int, default=96)
    p.add_argument("--classes", type=int, default=19)
    p.add_argument("--images", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, args.classes, 1)).to(device).eval()
    images = [torch.randn(1, 3, args.size, args.size) for _ in range(args.images)]  # as decoded, one tensor each
    ms_each = []
    with torch.no_grad():
        for img in images:
            t0 = time.perf_counter()
            seg, windows = slide_inference(model, img.to(device), args.crop, args.stride, args.classes)
            mask = seg.argmax(1).cpu().numpy()
            ms_each.append((time.perf_counter() - t0) * 1e3)
    steady = ms_each[args.warmup:]
    print(f"{sum(steady) / len(steady):.2f} ms per image ({windows} windows, mask {mask.shape})")
    print("RESULT " + json.dumps({"images": args.images, "windows": windows, "ms_each": ms_each, "ms_per_step": sum(steady) / len(steady)}))


if __name__ == "__main__":
    main()
