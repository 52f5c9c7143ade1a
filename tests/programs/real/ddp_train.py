#!/usr/bin/env python3
"""A DistributedDataParallel training script as torchrun runs it (PyTorch's DDP tutorial and
ImageNet example): ``init_process_group`` from torchrun's environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``; one process without torchrun), NCCL on CUDA, gloo on a CPU,
the model wrapped in ``DistributedDataParallel`` (its forward runs inside torch's own
``DistributedDataParallel.forward`` range), a ``DistributedSampler`` with ``set_epoch``,
SGD, a log line on rank 0. Each batch timed from the previous one's end (fetch included).

    torchrun --nproc-per-node 2 ddp_train.py
    python ddp_train.py --device cpu --batches 20 --epochs 2     # one process, gloo
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser(description="DDP training over a DistributedSampler")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--batches", type=int, default=50, help="batches per epoch per process")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--log-every", type=int, default=10)
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
    model = nn.Sequential(nn.Linear(args.dim, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, args.classes)).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    n = args.batch * args.batches * world
    data = TensorDataset(torch.randn(n, args.dim), torch.randint(0, args.classes, (n,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, pin_memory=cuda)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    ms_each = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        sync()
        end = time.perf_counter()
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % args.log_every == 0 and rank == 0:
                print(f"epoch {epoch} batch {i}/{len(loader)} loss {loss.item():.4f}")
            sync()
            now = time.perf_counter()
            ms_each.append((now - end) * 1e3)
            end = now
    dist.destroy_process_group()
    if rank == 0:
        timed = [m for k, m in enumerate(ms_each) if k % args.batches != 0]  # each epoch's first (the loader's start) left out
        ms = sum(timed) / len(timed)
        print("RESULT " + json.dumps({"program": "ddp_train", "step": "training batch", "ms_per_step": round(ms, 4),
                                      "ms_per_batch": round(ms, 4), "batches": len(ms_each), "world_size": world,
                                      "ms_each": [round(m, 4) for m in ms_each], "device": str(device)}))


if __name__ == "__main__":
    main()
