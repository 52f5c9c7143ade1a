#!/usr/bin/env python3
"""A real-time demo loop, as webcam and robotics scripts write it: frames arrive at
``--fps``; per frame a capture (a random image standing in for the camera's), the
detector's forward (a small CNN), the top class with ``.item()``, then ``time.sleep``
until the next frame is due. The loop's rate is the camera's; its latency per frame is the
model's.

Its own timer: ``time.perf_counter()`` around each frame's work (the capture, the forward
and the ``.item()``, not the sleep); RESULT's ``ms_each``, ``ms_per_step`` (their mean
after ``--warmup``) and the loop's achieved ``fps``.

    python paced_infer.py                              # 640x480 frames at 30 fps, cuda
    python paced_infer.py --device cpu --size 96 --frames 60
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--size", type=int, default=480, help="frame height (width 4/3 of it)")
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).to(device).eval()
    period = 1.0 / args.fps
    ms_each = []
    start = next_due = time.perf_counter()
    with torch.inference_mode():
        for frame in range(args.frames):
            t0 = time.perf_counter()
            image = torch.rand(1, 3, args.size, args.size * 4 // 3, device=device)
            label = model(image).argmax(1).item()
            ms_each.append((time.perf_counter() - t0) * 1e3)
            if frame % 30 == 0:
                print(f"frame {frame}: class {label}, {ms_each[-1]:.2f} ms")
            next_due += period
            time.sleep(max(0.0, next_due - time.perf_counter()))
    fps = args.frames / (time.perf_counter() - start)
    steady = ms_each[args.warmup:]
    result = {"frames": args.frames, "ms_each": ms_each, "ms_per_step": sum(steady) / len(steady), "fps": fps}
    print(f"{result['ms_per_step']:.2f} ms per frame, {fps:.1f} fps")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
