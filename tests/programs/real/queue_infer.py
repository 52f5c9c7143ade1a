#!/usr/bin/env python3
"""Batch inference fed by a background thread, as scripts that prefetch without a DataLoader
write it (the ``BackgroundGenerator`` / ``prefetch_generator`` pattern): a producer thread
"decodes" each batch on the host (numpy: a uint8 image per sample, resized by block means,
normalised) and puts it on a ``queue.Queue(maxsize=--prefetch)``; the main loop takes each
batch off the queue and runs a small CNN's forward, the top classes by ``.tolist()``. When
the producer is the slower side, the loop runs at its pace: each batch waits on the queue.

Its own timer: ``time.perf_counter()`` from one batch's end to the next's (the loop
iteration: the wait on the queue included); RESULT's ``ms_each``, ``ms_per_step`` (their
mean after ``--warmup``) and ``batches``.

    python queue_infer.py                              # 64 images of 256 px a batch, cuda
    python queue_infer.py --device cpu --batch 8 --size 128 --batches 40
"""
import argparse
import json
import queue
import threading
import time

import numpy as np
import torch
import torch.nn as nn

MEAN, STD = np.array([0.485, 0.456, 0.406], dtype=np.float32), np.array([0.229, 0.224, 0.225], dtype=np.float32)


def decode(rng, size):
    """One sample: a uint8 'photo' twice the size, halved by 2x2 block means, normalised, CHW."""
    raw = rng.integers(0, 256, (2 * size, 2 * size, 3), dtype=np.uint8).astype(np.float32) / 255.0
    small = raw.reshape(size, 2, size, 2, 3).mean(axis=(1, 3))
    return ((small - MEAN) / STD).transpose(2, 0, 1)


def produce(out, batches, batch, size):
    rng = np.random.default_rng(0)
    for _ in range(batches):
        out.put(torch.from_numpy(np.stack([decode(rng, size) for _ in range(batch)])))
    out.put(None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    ).to(device).eval()
    batches = queue.Queue(maxsize=args.prefetch)
    threading.Thread(target=produce, args=(batches, args.batches, args.batch, args.size), daemon=True).start()
    ms_each, n = [], 0
    last = time.perf_counter()
    with torch.inference_mode():
        for x in iter(batches.get, None):
            top = model(x.to(device, non_blocking=True)).argmax(1).tolist()
            now = time.perf_counter()
            ms_each.append((now - last) * 1e3)
            last, n = now, n + 1
            if n % 20 == 0:
                print(f"batch {n}: {ms_each[-1]:.1f} ms, top class {top[0]}")
    steady = ms_each[args.warmup:]
    result = {"batches": n, "ms_each": ms_each, "ms_per_step": sum(steady) / len(steady)}
    print(f"{result['ms_per_step']:.2f} ms per batch")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
