#!/usr/bin/env python3
"""Offline batch prediction, the way a script that labels a dataset writes it: the
features already in memory, ``model = torch.compile(model)``, the set split into batches
with ``torch.split`` (no DataLoader), and per sample a record kept for the JSON written at
the end (``{"id", "label", "top5", "scores"}``, lists from ``.tolist()``). The records pile
up: Python's garbage collector runs full collections over them now and then, between two
batches, as it would in the real script. An MLP classifier, random weights.

Its own timer: ``perf_counter`` around each batch's body (the forward and its records);
``RESULT``'s ``ms_per_step`` the mean over the batches after the warm-up ones.

    python predict_dump.py                          # CUDA, inductor
    python predict_dump.py --device cpu --backend eager --samples 20000
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="batch prediction with a record per sample")
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--samples", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=3, help="batches left out of the mean (compilation)")
    p.add_argument("--out", default=None, help="write the records here (JSON)")
    args = p.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.features, 1024), nn.GELU(), nn.Linear(1024, args.classes)).to(args.device).eval()
    model = torch.compile(model, backend=args.backend)
    features = torch.randn(args.samples, args.features, device=args.device)

    records, ms_each = [], []
    with torch.inference_mode():
        for k, batch in enumerate(torch.split(features, args.batch)):
            t0 = time.perf_counter()
            probs = model(batch).softmax(-1)
            scores, top5 = probs.topk(5, dim=-1)
            for i, (labels, p5) in enumerate(zip(top5.tolist(), scores.tolist())):
                records.append({"id": k * args.batch + i, "label": labels[0], "top5": labels, "scores": p5})
            ms_each.append((time.perf_counter() - t0) * 1e3)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f)
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    print(f"{len(records)} records, {ms:.3f} ms/batch, {args.batch / ms * 1e3:.0f} samples/s")
    print("RESULT " + json.dumps({"program": "predict_dump", "step": "one batch (its forward and records)", "ms_per_step": round(ms, 4),
                                  "ms_per_batch": round(ms, 4), "batches": len(ms_each), "warmup": args.warmup,
                                  "ms_each": [round(m, 4) for m in ms_each], "device": args.device}))


if __name__ == "__main__":
    main()
