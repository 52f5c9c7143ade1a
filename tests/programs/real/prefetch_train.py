#!/usr/bin/env python3
"""Keyword-spotting training with a background preprocessing thread instead of a DataLoader:
``prefetch_generator.BackgroundGenerator`` (a ``threading.Thread`` filling a
``queue.Queue(max_prefetch)`` from a generator, its ``__next__`` a blocking ``get()``, ``None``
the end), wrapped around a generator that makes each batch on the host with numpy: a
waveform per clip ("read"), random time shift and background noise, a log-mel-like
spectrogram (framing, Hann window, ``np.fft.rfft``, a triangular filter bank, log),
per-clip normalisation, then ``torch.from_numpy``. A new BackgroundGenerator per epoch; the
main thread trains a small CNN (``optimizer.zero_grad()``, forward, cross-entropy,
``backward()``, ``optimizer.step()``), ``loss.item()`` every ``--log-every``. The producer's
numpy work and the training share the GIL and the cores; ``--max-prefetch`` is the queue's
size.

Its own timer: ``time.perf_counter()`` per batch, from the previous batch's end (the
``get()`` that waited for the producer included); each epoch's clock starts when its
generator is made; RESULT's ``ms_per_step`` the mean over every batch but the first.

    python prefetch_train.py                     # batch 256, 1 s clips at 16 kHz, cuda
    python prefetch_train.py --device cpu --batch 16 --batches 12 --epochs 2 --width 16
"""
import argparse
import json
import queue
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BackgroundGenerator(threading.Thread):
    """prefetch_generator's BackgroundGenerator (1.0.3)."""

    def __init__(self, generator, max_prefetch=1):
        threading.Thread.__init__(self)
        self.queue = queue.Queue(max_prefetch)
        self.generator = generator
        self.daemon = True
        self.start()

    def run(self):
        for item in self.generator:
            self.queue.put(item)
        self.queue.put(None)

    def next(self):
        next_item = self.queue.get()
        if next_item is None:
            raise StopIteration
        return next_item

    # Python 3 compatibility
    def __next__(self):
        return self.next()

    def __iter__(self):
        return self


def mel_filterbank(n_mels, n_fft, sr):
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    mels = np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2)
    bins = np.floor((n_fft + 1) * mel_to_hz(mels) / sr).astype(int)
    fb = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(1, n_mels + 1):
        lo, c, hi = bins[m - 1], bins[m], bins[m + 1]
        fb[m - 1, lo:c] = (np.arange(lo, c) - lo) / max(c - lo, 1)
        fb[m - 1, c:hi] = (hi - np.arange(c, hi)) / max(hi - c, 1)
    return fb


def batches(epoch, args, fb, window):
    """Clips -> augmented log-mel spectrograms, one batch at a time (the producer's work)."""
    rng = np.random.default_rng(epoch)
    hop, n_fft = args.sample_rate // 100, 512
    for _ in range(args.batches):
        specs, labels = [], []
        for _ in range(args.batch):
            label = int(rng.integers(0, args.classes))
            t = np.arange(args.sample_rate) / args.sample_rate
            wav = np.sin(2 * np.pi * (200 + 40 * label) * t) * rng.uniform(0.1, 1.0)  # "read" the clip
            wav = np.roll(wav, int(rng.integers(-1600, 1600)))  # time shift
            wav = wav + rng.normal(0, rng.uniform(0.0, 0.1), wav.shape)  # background noise
            frames = np.lib.stride_tricks.sliding_window_view(wav, n_fft)[::hop] * window
            power = np.abs(np.fft.rfft(frames, axis=-1)) ** 2
            logmel = np.log(power @ fb.T + 1e-6).astype(np.float32)
            specs.append((logmel - logmel.mean()) / (logmel.std() + 1e-5))
            labels.append(label)
        yield torch.from_numpy(np.stack(specs)[:, None]), torch.tensor(labels)


class KWSNet(nn.Module):
    def __init__(self, classes, width):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.BatchNorm2d(4 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def main():
    p = argparse.ArgumentParser(description="Keyword spotting training, host preprocessing in a background thread")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=50, help="batches per epoch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--classes", type=int, default=12)
    p.add_argument("--sample-rate", type=int, default=16000)
    p.add_argument("--n-mels", type=int, default=40)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--max-prefetch", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = KWSNet(args.classes, args.width).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    fb = mel_filterbank(args.n_mels, 512, args.sample_rate)
    window = np.hanning(512)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    ms_each = []
    model.train()
    for epoch in range(args.epochs):
        correct = seen = 0
        end = time.perf_counter()
        for i, (x, y) in enumerate(BackgroundGenerator(batches(epoch, args, fb, window), max_prefetch=args.max_prefetch)):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            if i % args.log_every == 0:
                print(f"epoch {epoch} batch {i:4d}/{args.batches}  loss {loss.item():.4f}")
            sync()
            now = time.perf_counter()
            ms_each.append((now - end) * 1e3)
            end = now
        print(f"epoch {epoch}: train accuracy {correct / seen:.3f}")
    ms = sum(ms_each[1:]) / (len(ms_each) - 1)
    print(f"train: {ms:.2f} ms/batch, {args.batch / ms * 1e3:.0f} clips/s over {len(ms_each)} batches")
    print("RESULT " + json.dumps({"program": "prefetch_train", "step": "training batch",
                                  "ms_per_step": round(ms, 4), "ms_per_batch": round(ms, 4),
                                  "clips_per_s": round(args.batch / ms * 1e3, 1), "batches": len(ms_each),
                                  "epochs": args.epochs, "ms_each": [round(m, 4) for m in ms_each], "device": str(device)}))


if __name__ == "__main__":
    main()
