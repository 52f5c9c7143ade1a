#!/usr/bin/env python3
"""A keyword-spotting model trained on features made by a process pool, as scripts without a
DataLoader write it: per iteration the batch's utterances go to a
``concurrent.futures.ProcessPoolExecutor`` (``pool.map``: a log-mel spectrogram in numpy per
one-second waveform: framing, a Hann window, ``rfft``, a mel filter bank, ``log``), the
features are stacked into a tensor, then one training step (a small CNN, cross-entropy,
AdamW). The step waits for the pool: its time is spent in other processes.

Its own timer: ``time.perf_counter()`` per iteration, and around ``pool.map`` (the wait
for the features: submitting, the workers' work, collecting), and, on Linux, this thread's
time in ``pool.map`` on a CPU and waiting for one (``/proc/thread-self/schedstat``: the
submitting and collecting, and the box's load; no wait for the pool); RESULT's
``ms_each``, ``wait_ms_each``, ``ms_per_step`` and ``wait_ms_per_step`` (their means after
``--warmup``), and ``busy_ms_per_step`` (the CPU time in ``pool.map``) and
``runnable_ms_per_step`` (the time waiting for a CPU in it), their means too.

    python pool_train.py                              # 64 utterances a batch, 4 workers, cuda
    python pool_train.py --device cpu --batch 8 --workers 2 --iters 16
"""
import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

RATE, FFT, HOP, MELS = 16_000, 512, 160, 40


def mel_filters():
    def mel(f):
        return 2595 * np.log10(1 + f / 700)

    edges = 700 * (10 ** (np.linspace(mel(0), mel(RATE / 2), MELS + 2) / 2595) - 1)
    bins = np.floor((FFT + 1) * edges / RATE).astype(int)
    fb = np.zeros((MELS, FFT // 2 + 1), dtype=np.float32)
    for m in range(1, MELS + 1):
        lo, mid, hi = bins[m - 1], bins[m], bins[m + 1]
        fb[m - 1, lo:mid] = (np.arange(lo, mid) - lo) / max(mid - lo, 1)
        fb[m - 1, mid:hi] = (hi - np.arange(mid, hi)) / max(hi - mid, 1)
    return fb


FILTERS = mel_filters()


def features(seed):
    """One utterance: a synthetic one-second waveform (a chirp in noise), its log-mel spectrogram."""
    rng = np.random.default_rng(seed)
    t = np.arange(RATE) / RATE
    wave = np.sin(2 * np.pi * (200 + 300 * rng.random()) * t * (1 + t)) + 0.3 * rng.standard_normal(RATE)
    frames = np.lib.stride_tricks.sliding_window_view(wave, FFT)[::HOP] * np.hanning(FFT)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return np.log(power @ FILTERS.T + 1e-6).astype(np.float32), int(rng.integers(12))


def sched_ms():
    """This thread's time on a CPU and waiting for one so far (ms), where Linux says."""
    stat = Path("/proc/thread-self/schedstat")
    if not stat.exists():
        return 0.0, 0.0
    on_cpu, runnable = stat.read_text().split()[:2]
    return int(on_cpu) / 1e6, int(runnable) / 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 12),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    ms_each, wait_each, busy_each, runnable_each = [], [], [], []
    with ProcessPoolExecutor(args.workers) as pool:
        for it in range(args.iters):
            t0, (b0, r0) = time.perf_counter(), sched_ms()
            made = list(pool.map(features, range(it * args.batch, (it + 1) * args.batch)))
            t1, (b1, r1) = time.perf_counter(), sched_ms()
            x = torch.from_numpy(np.stack([f for f, _ in made])).unsqueeze(1).to(device)
            y = torch.tensor([label for _, label in made], device=device)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            ms_each.append((t2 - t0) * 1e3)
            wait_each.append((t1 - t0) * 1e3)
            busy_each.append(b1 - b0)
            runnable_each.append(r1 - r0)
            if it % 10 == 0:
                print(f"iter {it}: loss {loss.item():.3f}, {ms_each[-1]:.1f} ms ({wait_each[-1]:.1f} ms waiting for features)")
    steady, waits = ms_each[args.warmup:], wait_each[args.warmup:]
    result = {"iterations": args.iters, "ms_each": ms_each, "wait_ms_each": wait_each,
              "ms_per_step": sum(steady) / len(steady), "wait_ms_per_step": sum(waits) / len(waits),
              "busy_ms_per_step": sum(busy_each[args.warmup:]) / len(waits),
              "runnable_ms_per_step": sum(runnable_each[args.warmup:]) / len(waits)}
    print(f"{result['ms_per_step']:.1f} ms/iter, {result['wait_ms_per_step']:.1f} ms of it waiting for the pool")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
