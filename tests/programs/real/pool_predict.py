#!/usr/bin/env python3
"""Requests served by a thread pool, the way a script parallelises predictions without a
batcher: ``ThreadPoolExecutor(max_workers=N).map(predict, inputs)``, where ``predict`` calls
the model itself on one input under ``torch.inference_mode()`` and times that call. The
requests of N threads run at once; on fewer CPUs than threads each waits for the others'
CPU time (the GIL is released inside the matrix multiplies). An MLP on synthetic features,
so it runs anywhere.

    python pool_predict.py                                  # 2000 requests, 8 threads, cuda if present
    python pool_predict.py --device cpu --requests 400 --threads 8 --width 512
"""
import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="Predictions from a thread pool, each thread calling the model (synthetic data)")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=10, help="requests left out of the printed times")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(512, w), nn.GELU(), nn.Linear(w, w), nn.GELU(), nn.Linear(w, 10)).to(args.device).eval()
    lock = threading.Lock()
    timed: list[tuple[int, int, int]] = []  # (thread, start ns, end ns) of each request's call

    def predict(x: torch.Tensor) -> int:
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            y = model(x.unsqueeze(0))
            label = int(y.argmax())  # the answer (a sync on cuda)
        t1 = time.perf_counter_ns()
        with lock:
            timed.append((threading.get_ident(), t0, t1))
        return label

    inputs = [torch.randn(512, device=args.device) for _ in range(args.requests)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        labels = list(pool.map(predict, inputs))
    wall = time.perf_counter() - start
    assert len(labels) == args.requests
    ms = [(t1 - t0) / 1e6 for _, t0, t1 in sorted(timed, key=lambda r: r[1])[args.warmup:]]
    print(f"{args.requests} requests on {args.threads} threads in {wall:.2f} s: {args.requests / wall:.1f} requests/s, "
          f"median {statistics.median(ms):.2f} ms a request")
    print("RESULT " + json.dumps({"step": "one request (one predict call; several threads at once)", "steps": len(timed),
                                  "warmup": args.warmup, "ms_each": ms, "ms_per_step": statistics.mean(ms),
                                  "ms_median": statistics.median(ms), "requests_per_s": args.requests / wall,
                                  "calls": [list(r) for r in timed]}))


if __name__ == "__main__":
    main()
