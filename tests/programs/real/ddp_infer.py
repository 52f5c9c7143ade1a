#!/usr/bin/env python3
"""A forward benchmark of a DistributedDataParallel model, as a DDP codebase's throughput
script writes it: the training code's ``init_process_group`` and ``DDP(model)`` kept,
``model.eval()`` under ``torch.no_grad()``, random batches made in the loop (no
DataLoader), and per batch the host work a serving-style caller does with the result (its
class scores to a list, the top ones sorted). torchrun's environment, or one process
(NCCL on CUDA, gloo on a CPU). Each batch timed from its input's creation to the end of
its host work (synchronised on CUDA); RESULT's ``ms_per_step`` the mean after the warm-up.

    torchrun --nproc-per-node 2 ddp_infer.py
    python ddp_infer.py --device cpu --batches 60       # one process, gloo
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description="a DDP model's forward, benchmarked")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    cuda = args.device.startswith("cuda")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.dim, args.width), nn.ReLU(), nn.Linear(args.width, args.dim)).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None).eval()

    ms_each = []
    with torch.no_grad():
        for _ in range(args.batches):
            t0 = time.perf_counter()
            x = torch.randn(args.batch, args.dim, device=device)
            scores = model(x).mean(0).tolist()
            top = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)[:10]
            if cuda:
                torch.cuda.synchronize()
            ms_each.append((time.perf_counter() - t0) * 1e3)
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    if rank == 0:
        print(f"{len(ms_each)} batches, {ms:.3f} ms/batch (top class {top[0]})")
        print("RESULT " + json.dumps({"program": "ddp_infer", "step": "one batch (its input, forward and host work)",
                                      "ms_per_step": round(ms, 4), "ms_per_batch": round(ms, 4), "batches": len(ms_each),
                                      "warmup": args.warmup, "world_size": world, "ms_each": [round(m, 4) for m in ms_each],
                                      "device": str(device)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
