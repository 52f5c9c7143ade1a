#!/usr/bin/env python3
"""A model server the way an asyncio service writes one (the shape of a FastAPI or aiohttp
handler in front of a model): each request is a task that puts its input and a future on an
``asyncio.Queue`` and awaits the answer; one worker coroutine takes them off the queue
(``await queue.get()``, the event loop idle in its selector while there is none) and runs
the model's forward on each, right there on the loop's thread; the requests arrive at
random intervals (``await asyncio.sleep`` between arrivals, Poisson arrivals at ``--rate``
per second). ``--executor`` runs each forward in the loop's default executor instead
(``await loop.run_in_executor(None, ...)``, a thread of a ``ThreadPoolExecutor``), so the
loop stays free while the model runs. The worker times each request itself, from taking it
to its answer (``.tolist()`` of the predicted classes): the service time. An MLP on
synthetic features, so it runs anywhere.

    python async_server.py                                 # 200 requests, ~1 ms forwards on cuda
    python async_server.py --device cpu --threads 1 --requests 40 --width 512 --rate 200
"""
import argparse
import asyncio
import json
import random
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="A model server: an asyncio.Queue of requests and a worker coroutine (synthetic data)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5, help="requests served before the timed ones")
    p.add_argument("--rate", type=float, default=100.0, help="mean requests per second (Poisson arrivals)")
    p.add_argument("--batch", type=int, default=32, help="rows per request")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--executor", action="store_true", help="each forward in the loop's default executor (run_in_executor)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads of the thread running the model (a CPU server's usual 1)")
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
        if args.threads and torch.get_num_threads() != args.threads:
            torch.set_num_threads(args.threads)  # the model's thread's own intra-op threads
        start = time.perf_counter()
        with torch.no_grad():
            answer = model(x.to(device, non_blocking=True)).argmax(1).tolist()
        service.append(time.perf_counter() - start)
        return answer

    async def worker(requests):
        loop = asyncio.get_running_loop()
        while True:
            item = await requests.get()
            if item is None:
                requests.task_done()
                break
            x, answer = item
            if args.executor:
                answer.set_result(await loop.run_in_executor(None, handle, x))
            else:
                answer.set_result(handle(x))
            requests.task_done()

    async def predict(requests, x):
        # one client's request: its answer comes back on a future
        answer = asyncio.get_running_loop().create_future()
        await requests.put((x, answer))
        return await answer

    async def serve():
        requests = asyncio.Queue()
        serving = asyncio.create_task(worker(requests))
        rng = random.Random(0)
        total = args.warmup + args.requests
        clients = []
        for i in range(total):
            clients.append(asyncio.create_task(predict(requests, torch.randn(args.batch, 256))))
            if i + 1 < total:
                await asyncio.sleep(rng.expovariate(args.rate))
        await asyncio.gather(*clients)
        await requests.put(None)
        await serving

    asyncio.run(serve())
    timed = service[args.warmup:]
    ms = 1e3 * sum(timed) / max(len(timed), 1)
    print(f"Served {len(service)} requests ({args.warmup} warm-up): {ms:.3f} ms per request")
    print("RESULT " + json.dumps({"program": "async_server", "step": "one request's forward", "requests": len(service),
                                  "warmup": args.warmup, "timed_requests": len(timed), "ms_per_step": ms,
                                  "ms_each": [1e3 * s for s in service], "executor": args.executor}))


if __name__ == "__main__":
    main()
