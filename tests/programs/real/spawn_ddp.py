#!/usr/bin/env python3
"""PyTorch's "Getting Started with Distributed Data Parallel" tutorial as written: the main
process only calls ``mp.spawn(demo_basic, args=(world_size,), nprocs=world_size, join=True)``;
each spawned process sets ``MASTER_ADDR``/``MASTER_PORT``, joins the process group (NCCL on
CUDA, gloo on a CPU), wraps its ``ToyModel`` in ``DistributedDataParallel`` and trains it
with SGD on random batches. Rank 0 times its steps and prints them.

All the work is in the children: ``perfdoctor run`` on this script follows the process it
starts, which trains nothing, and must say so rather than "no step seen" alone.

    python spawn_ddp.py                          # every visible GPU, NCCL
    python spawn_ddp.py --device cpu --world-size 2 --steps 20
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.net1 = nn.Linear(10, width)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(width, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size, port, backend):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def demo_basic(rank, world_size, args, port):
    cuda = args.device == "cuda"
    setup(rank, world_size, port, "nccl" if cuda else "gloo")
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    model = ToyModel(args.width).to(device)
    ddp_model = DDP(model, device_ids=[rank] if cuda else None)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(args.batch, 10, device=device))
        labels = torch.randn(args.batch, 5, device=device)
        loss_fn(outputs, labels).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        steady = times[args.warmup:]
        ms = sum(steady) / len(steady) * 1e3
        print(f"rank 0: {args.steps} steps, {ms:.3f} ms/step")
        print("RESULT " + json.dumps({"program": "spawn_ddp", "step": "one training step (in each spawned rank)",
                                      "ms_per_step": ms, "world_size": world_size, "steps": args.steps}), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description="the DDP tutorial's mp.spawn training")
    p.add_argument("--device", default="cuda")
    p.add_argument("--world-size", type=int, default=0, help="processes (default: every visible GPU, 2 on a CPU)")
    p.add_argument("--width", type=int, default=10)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    world_size = args.world_size or (torch.cuda.device_count() if args.device == "cuda" else 2)
    mp.spawn(demo_basic, args=(world_size, args, free_port()), nprocs=world_size, join=True)


if __name__ == "__main__":
    main()
