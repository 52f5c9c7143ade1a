#!/usr/bin/env python3
"""A model server the way a small service writes one: requests go on a ``queue.Queue``, one
worker thread takes them off it (blocking in ``queue.get()`` while there is none) and runs
the model's forward on each, and the requests arrive from the main thread at random
intervals (``time.sleep`` between arrivals, Poisson arrivals at ``--rate`` per second).
``--pool`` runs the worker as a ``ThreadPoolExecutor(max_workers=1)`` instead, which blocks
in its own work queue. The worker times each request itself, from taking it to its answer
(``.tolist()`` of the predicted classes): the service time. An MLP on synthetic features,
so it runs anywhere.

    python threaded_server.py                                 # 200 requests, ~1 ms forwards on cuda
    python threaded_server.py --device cpu --threads 1 --requests 40 --width 512 --rate 200
"""
import argparse
import json
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="A model server: a request queue and a worker thread (synthetic data)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5, help="requests served before the timed ones")
    p.add_argument("--rate", type=float, default=100.0, help="mean requests per second (Poisson arrivals)")
    p.add_argument("--batch", type=int, default=32, help="rows per request")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--pool", action="store_true", help="a ThreadPoolExecutor(max_workers=1) as the worker")
    p.add_argument("--threads", type=int, default=None, help="the worker's torch.set_num_threads (a CPU server's usual 1)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    blocks = [nn.Linear(256, args.width), nn.ReLU()]
    for _ in range(args.layers - 2):
        blocks += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(args.width, 10)).to(device).eval()
    service = []  # seconds per request, as the worker measured it

    def handle(x):
        start = time.perf_counter()
        with torch.no_grad():
            answer = model(x.to(device, non_blocking=True)).argmax(1).tolist()
        service.append(time.perf_counter() - start)
        return answer

    requests = queue.Queue()

    def setup():
        if args.threads:
            torch.set_num_threads(args.threads)  # the worker thread's own intra-op threads

    def worker():
        setup()
        while True:
            x = requests.get()
            if x is None:
                break
            handle(x)
            requests.task_done()

    pool = ThreadPoolExecutor(max_workers=1, initializer=setup) if args.pool else None
    thread = None if pool else threading.Thread(target=worker, name="worker")
    if thread is not None:
        thread.start()
    rng = random.Random(0)
    total = args.warmup + args.requests
    futures = []
    for i in range(total):
        x = torch.randn(args.batch, 256)
        if pool:
            futures.append(pool.submit(handle, x))
        else:
            requests.put(x)
        if i + 1 < total:
            time.sleep(rng.expovariate(args.rate))
    if pool:
        for f in futures:
            f.result()
        pool.shutdown()
    else:
        requests.put(None)
        thread.join()
    timed = service[args.warmup:]
    ms = 1e3 * sum(timed) / max(len(timed), 1)
    print(f"Served {len(service)} requests ({args.warmup} warm-up): {ms:.3f} ms per request")
    print("RESULT " + json.dumps({"program": "threaded_server", "step": "one request's forward", "requests": len(service),
                                  "warmup": args.warmup, "timed_requests": len(timed), "ms_per_step": ms,
                                  "ms_each": [1e3 * s for s in service], "pool": args.pool}))


if __name__ == "__main__":
    main()
